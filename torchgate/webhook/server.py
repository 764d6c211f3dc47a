"""The aiohttp server around the pure review functions: routes, limits, TLS and metrics.

Routes: ``POST /mutate`` and ``POST /validate`` (AdmissionReview v1; the validating route adds
the controller's forecast to an allowed CREATE when a ``ForecastClient`` is given, and reads the
job a review of its ``scale`` subresource is about through ``StoredJobs``), ``GET
/healthz`` (the process serves), ``GET /readyz`` (policies are loaded, so decisions are the
admin's, not the built-in default's), ``GET /metrics`` (Prometheus text). The app factory takes
its dependencies; there is no global state besides the Prometheus registry passed in.

With ``server_timing`` (off by default; ``TORCHGATE_SERVER_TIMING=1`` for ``torchgate webhook``)
every review response carries ``X-Torchgate-Server-Time: <seconds> cpu=<seconds>``: the time from
the handler's start to the serialised answer, and the CPU time the process spent in it (which
leaves out time the process waited for its core). ``benchmarks/webhook_bench.py`` reads it for
exact server-side percentiles.

TLS certificates are reloaded in place (``torchgate.serving.ReloadingTLS``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

import orjson
from aiohttp import hdrs, web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from torchgate.pytorchjob.outlook import Forecast, forecast_warning
from torchgate.webhook.forecastclient import ForecastClient
from torchgate.webhook.jobsource import StoredJobs
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.review import (
    BadReview,
    ClaimsLookup,
    PolicyLookup,
    forecast_subject,
    internal_error,
    mutate,
    namespace_of,
    parse_review,
    scale_subject,
    validate,
    with_warning,
)

log = logging.getLogger("torchgate.webhook")

# controller-runtime's limit; an AdmissionReview carries the object and, on UPDATE, the old one.
MAX_BODY_BYTES = 7 * 1024 * 1024
SERVER_TIME_HEADER = "X-Torchgate-Server-Time"
Decision = Callable[[Mapping[str, Any], PolicyLookup, ClaimsLookup], dict[str, Any]]
Handler = Callable[[web.Request], Awaitable[web.Response]]
_ROUTES: Final = ("mutate", "validate")
_OUTCOMES: Final = ("allowed", "denied", "error", "bad_request")
_JSON: Final = "application/json"
REVIEW_SECONDS_BUCKETS: Final = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


class RouteTally:
    """One route's reviews: answers by outcome, and the latency histogram's buckets and sum.

    Plain numbers: the reviews are answered on the event loop's one thread, so nothing races.
    """

    def __init__(self) -> None:
        self.answered: dict[str, int] = dict.fromkeys(_OUTCOMES, 0)
        # buckets[i]: reviews that took at most REVIEW_SECONDS_BUCKETS[i] and more than the
        # bound before it; the last one those that took longer than every bound.
        self.buckets: list[int] = [0] * (len(REVIEW_SECONDS_BUCKETS) + 1)
        self.seconds = 0.0

    def observe(self, seconds: float) -> None:
        """Count one answered review's latency (its outcome is counted in ``answered``)."""
        self.buckets[bisect_left(REVIEW_SECONDS_BUCKETS, seconds)] += 1
        self.seconds += seconds


class ReviewTally:
    """The per-review metrics, counted as plain numbers and turned into metrics when scraped.

    ``torchgate_webhook_reviews_total`` (by route and outcome) and
    ``torchgate_webhook_review_seconds`` (by route) expose what a labelled Counter and
    Histogram expose by default, ``_created`` samples included. Why not those: their children
    take a lock and make several Python calls per observation, about 13,700 instructions per
    review (callgrind); here a review costs two increments and a ``bisect``, about 2,300.
    """

    def __init__(self) -> None:
        self.routes = {route: RouteTally() for route in _ROUTES}
        self.created = time.time()

    def collect(self) -> Iterator[Metric]:
        """The two metric families (prometheus_client's custom-collector protocol)."""
        reviews = CounterMetricFamily(
            "torchgate_webhook_reviews",
            "AdmissionReviews answered, by route and outcome.",
            labels=["route", "outcome"],
        )
        latency = HistogramMetricFamily(
            "torchgate_webhook_review_seconds",
            "Time to answer an AdmissionReview (server side), by route.",
            labels=["route"],
        )
        bounds = [*(repr(bound) for bound in REVIEW_SECONDS_BUCKETS), "+Inf"]
        for route, tally in self.routes.items():
            for outcome, answered in tally.answered.items():
                reviews.add_metric([route, outcome], answered, created=self.created)
            running = 0
            cumulative: list[tuple[str, float]] = []
            for bound, observed in zip(bounds, tally.buckets, strict=True):
                running += observed
                cumulative.append((bound, running))
            latency.add_metric([route], cumulative, tally.seconds)
            latency.samples.append(
                Sample("torchgate_webhook_review_seconds_created", {"route": route}, self.created)
            )
        yield reviews
        yield latency


class Metrics:
    """The webhook's Prometheus metrics, on a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reviews = ReviewTally()
        self.registry.register(self.reviews)
        self.policies = Gauge(
            "torchgate_webhook_policies",
            "PlacementPolicies in the cache, by validity.",
            ["valid"],
            registry=self.registry,
        )
        self.forecasts = Counter(
            "torchgate_webhook_forecasts_total",
            "Forecasts asked of the controller, by outcome (answered, timeout, refused, error).",
            ["outcome"],
            registry=self.registry,
        )
        self.forecast_latency = Histogram(
            "torchgate_webhook_forecast_seconds",
            "Time the validating route waited for the controller's forecast.",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "torchgate_webhook_connections_closed_total",
            "Connections closed by the server before a request, by reason (refused: at the cap "
            "with no idle one to close; evicted: idle, closed for a new one; timeout: no "
            "handshake and request head within the read timeout).",
            ["reason"],
            registry=self.registry,
        )

    def observe_connection_closed(self, reason: str) -> None:
        """Count one connection the listener closed (``TLSListener``'s ``observe``)."""
        self.connections_closed.labels(reason).inc()

    def observe_forecast(self, outcome: str, seconds: float) -> None:
        """Count one forecast (``ForecastClient``'s ``observe``)."""
        self.forecasts.labels(outcome).inc()
        self.forecast_latency.observe(seconds)


DRAINING: Final = web.AppKey("draining", asyncio.Event)
"""Set once the server was told to stop: ``/readyz`` answers 503, reviews are still answered.

While draining, every review's answer closes its connection (``Connection: close``). The
apiserver keeps HTTP/1.1 connections to the webhook's Service and reuses them after the pod has
left the endpoints (kube-proxy keeps an established connection on its pod); a connection the
server closes while idle races the apiserver's next request on it, which then fails with "use of
closed network connection" and, under ``failurePolicy: Fail``, fails a user's ``kubectl apply``.
A connection closed by the answer itself cannot race: the apiserver reads ``close`` and dials
again, through the Service, to a pod that is staying."""


def create_app(
    cache: PolicyCache,
    *,
    metrics: Metrics | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    server_timing: bool = False,
    forecasts: ForecastClient | None = None,
    jobs: StoredJobs | None = None,
    read_timeout: float | None = None,
) -> web.Application:
    """The webhook application (no TLS here; see ``serve``).

    With ``forecasts``, the validating route adds the controller's forecast to an allowed CREATE
    as one more warning (``forecastclient``: never blocking, never failing a review). ``jobs``
    reads the job a scale review is about; without it (no cluster) every scale is refused.
    With ``read_timeout``, a review whose body has not all arrived that many seconds after its
    head is answered 400 and its connection closed (a client trickling a body holds nothing).
    """
    metrics = metrics or Metrics()
    # aiohttp would answer 413 for an oversize body; we check the size ourselves to answer 400.
    app = web.Application(client_max_size=max_body_bytes + 1)
    draining = asyncio.Event()
    app[DRAINING] = draining
    routes = _Routes(
        cache,
        metrics,
        max_body_bytes,
        server_timing=server_timing,
        draining=draining,
        read_timeout=read_timeout,
    )
    routes.forecasts = forecasts
    routes.jobs = jobs
    app.router.add_post("/mutate", routes.mutate)
    app.router.add_post("/validate", routes.validate)
    app.router.add_get("/healthz", routes.healthz)
    app.router.add_get("/readyz", routes.readyz)
    app.router.add_get("/metrics", routes.metrics_text)
    return app


class _Routes:
    def __init__(
        self,
        cache: PolicyCache,
        metrics: Metrics,
        max_body_bytes: int,
        *,
        server_timing: bool,
        draining: asyncio.Event,
        read_timeout: float | None = None,
    ) -> None:
        self.read_timeout = read_timeout
        self.cache = cache
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.server_timing = server_timing
        self.draining = draining
        self.forecasts: ForecastClient | None = None
        self.jobs: StoredJobs | None = None
        # One coroutine per review: each handler is the review itself, not a call into it.
        self.mutate = self._handler("mutate", mutate)
        self.validate = self._handler("validate", self._validate, forecast=True)

    def _validate(
        self, review: Mapping[str, Any], policy_for: PolicyLookup, claims_for: ClaimsLookup
    ) -> dict[str, Any]:
        return validate(
            review, policy_for, self.cache.team_for, claims_for, policies=self.cache.policies
        )

    def _handler(self, route: str, decide: Decision, *, forecast: bool = False) -> Handler:
        tally = self.metrics.reviews.routes[route]
        answered = tally.answered
        server_timing = self.server_timing
        cache = self.cache
        policy_for = cache.policy_for
        max_body_bytes = self.max_body_bytes
        too_large = f"body larger than {max_body_bytes} bytes"
        read_timeout = self.read_timeout
        too_slow = f"body not received within {read_timeout} s"
        draining = self.draining
        judges_scales = route == "validate"

        async def answer_review(request: web.Request) -> web.Response:
            started = time.perf_counter()
            cpu_started = time.thread_time() if server_timing else 0.0
            try:
                self._check_headers(request)
                try:
                    # The apiserver sends head and body together, so the body is usually all
                    # here: reading it then cannot wait, and a deadline would only cost (a
                    # timer handle per review, cancelled, then swept from the loop's heap:
                    # about 35,000 instructions, 4 % of a review's whole server cost).
                    if request.content.is_eof():
                        body = await request.read()
                    else:
                        async with asyncio.timeout(read_timeout):
                            body = await request.read()
                except web.HTTPRequestEntityTooLarge:
                    raise BadReview(too_large) from None
                except TimeoutError:
                    raise BadReview(too_slow) from None
                if len(body) > max_body_bytes:
                    raise BadReview(too_large)
                review = parse_review(body)
            except BadReview as exc:
                answered["bad_request"] += 1
                refused = web.Response(status=400, text=f"bad AdmissionReview: {exc}\n")
                if draining.is_set() or str(exc) == too_slow:  # see DRAINING; a trickled body
                    refused.force_close()  # see DRAINING
                return refused
            asked = self._ask_forecast(review) if forecast and self.forecasts is not None else None
            if asked is not None:
                await asyncio.sleep(0)  # let the request go out before the rules take the CPU
            try:
                # What the review sees of DRA: the caches, and a live read of what they miss.
                asking = review["request"]
                scaled = scale_subject(asking) if judges_scales else None
                if scaled is None:
                    claims = await cache.confirm_claims(namespace_of(asking), asking.get("object"))
                    answer = decide(review, policy_for, lambda _: claims)
                else:
                    answer = await self._judge_scale(review, *scaled)
                outcome = "allowed" if answer["response"]["allowed"] else "denied"
            except Exception:
                uid = review["request"]["uid"]
                log.exception(
                    "internal error while answering %s review uid=%s",
                    route,
                    uid,
                    extra={"uid": uid},
                )
                answer = internal_error(review, f"torchgate webhook internal error (uid {uid})")
                outcome = "error"
            if asked is not None:
                answer = await self._add_forecast(answer, asked, allowed=outcome == "allowed")
            payload = orjson.dumps(answer)
            elapsed = time.perf_counter() - started
            answered[outcome] += 1
            tally.observe(elapsed)
            if server_timing:
                cpu = time.thread_time() - cpu_started
                response = web.Response(
                    body=payload,
                    content_type="application/json",
                    headers={SERVER_TIME_HEADER: f"{elapsed:.7f} cpu={cpu:.7f}"},
                )
            else:
                response = web.Response(body=payload, content_type="application/json")
            if draining.is_set():
                response.force_close()  # see DRAINING
            return response

        return answer_review

    async def _judge_scale(
        self, review: Mapping[str, Any], namespace: str, name: str
    ) -> dict[str, Any]:
        """A scale of the job ``namespace/name``, judged on the job read now."""
        stored = (
            "the webhook has no cluster access to read the PyTorchJob"
            if self.jobs is None
            else await self.jobs.read(namespace, name)
        )
        claims = await self.cache.confirm_claims(namespace, stored)
        return validate(
            review, self.cache.policy_for, self.cache.team_for, lambda _: claims, stored
        )

    def _ask_forecast(self, review: Mapping[str, Any]) -> asyncio.Task[Forecast | None] | None:
        """Ask the controller at once, so the answer comes while the rules run."""
        job = forecast_subject(review) if self.forecasts is not None else None
        if self.forecasts is None or job is None:
            return None
        return asyncio.create_task(self.forecasts.forecast(job))

    async def _add_forecast(
        self, answer: dict[str, Any], asked: asyncio.Task[Forecast | None], *, allowed: bool
    ) -> dict[str, Any]:
        if not allowed:
            asked.cancel()
            return answer
        try:
            found = await asked  # bounded by the client's timeout; None on any failure
            return answer if found is None else with_warning(answer, forecast_warning(found))
        except Exception:  # a forecast never fails a review
            log.exception("forecast dropped")
            return answer

    def _check_headers(self, request: web.Request) -> None:
        """Refuse a body that is not JSON, or announced larger than the limit, before reading it."""
        # The apiserver sends exactly "application/json": only another header is parsed.
        raw_type = request.headers.get(hdrs.CONTENT_TYPE)
        if raw_type != _JSON and request.content_type != _JSON:
            raise BadReview(f"Content-Type must be application/json, not {request.content_type!r}")
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            raise BadReview(f"body larger than {self.max_body_bytes} bytes")

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, _: web.Request) -> web.Response:
        if self.draining.is_set():
            return web.Response(status=503, text="shutting down\n")
        if not self.cache.synced.is_set():
            return web.Response(status=503, text="policies not loaded yet\n")
        return web.Response(text="ok\n")

    async def metrics_text(self, _: web.Request) -> web.Response:
        self.metrics.policies.labels("true").set(len(self.cache.names))
        self.metrics.policies.labels("false").set(len(self.cache.invalid))
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

"""The controller's pool service: forecasts, one job's outlook and the pool view, over HTTPS.

Why the controller serves it: only the leader holds the live snapshot (the waiting queue, the
capacity ledger, the gangs holding nodes), and the answers must be the admission cycle's own
decision, not an estimate. Every answer is ``admission.forecasting`` over
``Admitter.snapshot()``; none changes the controller's state. The wire format, paths and words
are ``pytorchjob.outlook``'s (shared with the webhook and the command line).

Routes (TLS only; documented in docs/operations.md):

- ``POST /v1/forecast`` with ``{"job": <PyTorchJob>}``: what the next cycle would do with it
  (``outlook.Forecast``). The webhook asks on every CREATE; ``torchgate simulate`` asks too.
  Needs ``create`` on ``forecasts.torchgate.io`` in the job's namespace.
- ``GET /v1/jobs/<namespace>/<name>``: one job (``outlook.JobOutlook``), for ``torchgate
  explain``, with whether this controller runs it (``runs``: ``facts.ours``, as the forecast).
  Needs ``get`` on that PyTorchJob: whoever may read a job may ask why it waits.
- ``GET /v1/pool``: the pool view (``outlook.PoolView``), for ``torchgate top``. Needs ``get``
  on ``pools.torchgate.io`` (cluster-wide).
- ``GET /healthz``: no authentication, no data.

Rules:

1. Every other request carries a bearer token: ``Authorization``, or ``X-Torchgate-Authorization``
   when it comes through the apiserver's Service proxy (which strips ``Authorization`` once it
   has authenticated the caller itself). TokenReview says whose it is and SubjectAccessReview
   whether RBAC allows the route (``kube.access``, cached): 401 without a token or with one the
   apiserver does not accept, 403 when RBAC says no, 503 when the apiserver does not answer.
2. 503 until the controller's caches are synced (a forecast from empty caches would be wrong).
3. A body over ``MAX_BODY_BYTES`` (the size etcd takes for one object) is refused with 413; a
   body that is not ``{"job": {...}}`` with 400; a job the controller could not run (no
   replicas, malformed counts) with 422 and its field errors.
4. While leading, the controller's pod carries ``LEADER_LABEL`` (``mark_leader``), which the
   Service ``torchgate-controller`` selects: only the leader listens, and only its pod is an
   endpoint. A process clears the label from its pod before it stands for election, so a
   restarted former leader never stays an endpoint.
5. The controller never waits for the pool service: it is served once its certificate can be
   read (a Secret mounted as optional may come after the pod), and the certificate is reloaded
   in place when the files change (``serving.ReloadingTLS``).
6. Answers get at most a share of the controller's time (``AnswerBudget``: each answer's CPU time
   is taken from a bucket refilled at ``ANSWER_SHARE`` seconds per second, holding at most
   ``ANSWER_BURST_SECONDS``): each one runs an admission cycle, and a wave of creates, each asking
   for a forecast, must not slow the cycles and reconciles that place the jobs. An empty bucket
   answers 503 at once; the webhook then adds no forecast.
7. Stopping waits for answers in flight only briefly: each gets ``DRAIN_SECONDS`` to finish, then
   is cancelled (and as long again to unwind), not aiohttp's default 60 s. An answer waits on
   TokenReview and SubjectAccessReview for up to the client's 30 s when the apiserver hangs, and a
   stopping leader gives its Lease up only after the pool service has stopped: both must fit in
   the pod's 30 s grace period. An answer takes milliseconds when the apiserver answers.
8. Connections are bounded as the webhook's are (``tlslistener.TLSListener``): at most
   ``MAX_CONNECTIONS`` open, the handshake and first request head within ``READ_TIMEOUT_SECONDS``
   of accept, idle ones closed after ``IDLE_TIMEOUT_SECONDS``. Whoever reaches the port (any pod,
   where no NetworkPolicy limits it) cannot exhaust the controller's memory with connections that
   ask nothing: the controller would be OOM-killed, and with it every job's reconcile.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web

from torchgate.controller.admission.decide import WaitingGang
from torchgate.controller.admission.forecasting import (
    Snapshot,
    forecast,
    job_outlook,
    pool_view,
)
from torchgate.controller.admission.waiting import Waiting
from torchgate.kube.access import AccessReviews, Attributes, User, bearer_token
from torchgate.kube.client import MERGE_PATCH, KubeApi
from torchgate.kube.errors import ApiError
from torchgate.kube.resources import PODS
from torchgate.pytorchjob import names
from torchgate.pytorchjob.fieldpath import FieldError
from torchgate.pytorchjob.outlook import (
    FORECAST_PATH,
    FORECASTS,
    JOBS_PATH,
    POOL_PATH,
    POOLS,
    RBAC_GROUP,
    TOKEN_HEADER,
    run_elsewhere,
)
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.pytorchjob.spec import is_suspended, managed_by
from torchgate.serving import ReloadingTLS
from torchgate.tlslistener import TLSListener

log = logging.getLogger("torchgate.controller.poolservice")

MAX_BODY_BYTES: Final = 3 * 1024 * 1024
ANSWER_SHARE: Final = 0.25
ANSWER_BURST_SECONDS: Final = 1.0
LEADER_LABEL: Final = "torchgate.io/leader"
UNNAMED_SUFFIX: Final = "-<generated>"
DRAIN_SECONDS: Final = 2.0  # rule 7
MAX_CONNECTIONS: Final = 128  # rule 8: a few webhook replicas and people's CLIs; ~0.3 MB each
READ_TIMEOUT_SECONDS: Final = 10.0  # rule 8: a client sends its request at once
IDLE_TIMEOUT_SECONDS: Final = 120.0  # rule 8: past the webhook's and Go clients' 90 s


@dataclass(frozen=True, slots=True)
class PoolFacts:
    """What the service reads from the running controller.

    Attributes:
        snapshot: ``Admitter.snapshot`` (a candidate, the GPU resource) -> facts and its gang.
        candidate: ``Reconciler.candidate``: a raw job as the admitter would queue it.
        policies: The valid PlacementPolicies (the pool view counts their GPU resource).
        synced: Whether the caches are filled.
        clock: The admitter's clock (a candidate's place in the queue starts now).
        ours: ``reconciler.is_ours`` with the controller's options: whether it runs a raw job.
        cached: ``(namespace, name)`` -> the job as the controller's cache holds it, if it does
            (a job outlook's ``runs`` is ``ours`` of it).
    """

    snapshot: Callable[[Waiting | None, str], tuple[Snapshot, WaitingGang | None]]
    candidate: Callable[[Mapping[str, Any], float], Waiting | list[FieldError]]
    policies: Callable[[], Iterable[PlacementPolicy]]
    synced: Callable[[], bool]
    clock: Callable[[], float]
    ours: Callable[[Mapping[str, Any]], bool]
    cached: Callable[[str, str], Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class PoolServiceOptions:
    """Where and how the leader serves the pool service.

    ``pod`` is the controller's own pod ``(namespace, name)`` when it runs in one: while leading,
    that pod carries ``LEADER_LABEL`` (rule 4).
    """

    bind: str
    port: int
    cert_file: Path
    key_file: Path
    pod: tuple[str, str] | None = None


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


_REASONS: Final = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    413: "RequestEntityTooLarge",
    422: "Invalid",
    503: "ServiceUnavailable",
}


def _problem(status: int, message: str, causes: Iterable[FieldError] = ()) -> web.Response:
    """A refusal shaped like the apiserver's ``Status``, so clients read it the same way."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(status, ""),
        "code": status,
    }
    found = [
        {"field": error.field, "reason": error.type.value, "message": error.body()}
        for error in causes
    ]
    if found:
        body["details"] = {"causes": found}
    return _json(body, status)


class AnswerBudget:
    """The share of the controller's CPU time answers may take (rule 6)."""

    def __init__(
        self,
        *,
        share: float = ANSWER_SHARE,
        burst: float = ANSWER_BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.share = share
        self.burst = burst
        self.clock = clock
        self.level = burst
        self._at = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.burst, self.level + (now - self._at) * self.share)
        self._at = now

    def allows(self) -> bool:
        """Whether an answer may be computed now."""
        self._refill()
        return self.level > 0

    def spend(self, seconds: float) -> None:
        """Take what an answer cost."""
        self._refill()
        self.level -= seconds


def gpu_resource_of(policies: Iterable[PlacementPolicy]) -> str:
    """The GPU resource most valid policies count (the built-in one without policies)."""
    counted = Counter(policy.gpu_resource for policy in policies)
    return counted.most_common(1)[0][0] if counted else names.DEFAULT_GPU_RESOURCE


def create_pool_app(
    facts: PoolFacts, reviews: AccessReviews, budget: AnswerBudget | None = None
) -> web.Application:
    """The pool service's application (no TLS here; ``serve_pool`` adds it)."""
    service = _Service(facts, reviews, budget or AnswerBudget())
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(FORECAST_PATH, service.forecast)
    app.router.add_get(JOBS_PATH + "/{namespace}/{name}", service.job)
    app.router.add_get(POOL_PATH, service.pool)
    app.router.add_get("/healthz", service.healthz)
    return app


class _Service:
    def __init__(self, facts: PoolFacts, reviews: AccessReviews, budget: AnswerBudget) -> None:
        self.facts = facts
        self.reviews = reviews
        self.budget = budget

    def _answer(self, compute: Callable[[], Any]) -> web.Response:
        """``compute``'s JSON, within the budget (rule 6)."""
        if not self.budget.allows():
            return _problem(503, "the controller is busy: answers are over their share of its time")
        started = time.thread_time()
        try:
            return _json(compute())
        finally:
            self.budget.spend(time.thread_time() - started)

    async def _caller(self, request: web.Request) -> User | web.Response:
        """Whose token the request carries, or the refusal (rule 1)."""
        token = bearer_token(request.headers.get(TOKEN_HEADER)) or bearer_token(
            request.headers.get("Authorization")
        )
        if token is None:
            return _problem(401, f"a bearer token is required (Authorization or {TOKEN_HEADER})")
        try:
            user = await self.reviews.authenticate(token)
        except ApiError as exc:
            log.warning("could not review a caller's token: %s", exc)
            return _problem(503, "the apiserver did not answer the token review")
        return user if user is not None else _problem(401, "the apiserver rejects this token")

    async def _refusal(self, user: User, attributes: Attributes) -> web.Response | None:
        """``None`` when ``user`` may go on, else the refusal (rules 1-2)."""
        try:
            allowed = await self.reviews.authorize(user, attributes)
        except ApiError as exc:
            log.warning("could not review a caller's access: %s", exc)
            return _problem(503, "the apiserver did not answer the access review")
        if not allowed:
            where = f" in namespace {attributes.namespace}" if attributes.namespace else ""
            return _problem(
                403,
                f"{user.name} may not {attributes.verb} "
                f"{attributes.resource}.{attributes.group}{where}",
            )
        if not self.facts.synced():
            return _problem(503, "the controller's caches are not synced yet")
        return None

    async def _allowed(self, request: web.Request, attributes: Attributes) -> web.Response | None:
        """``None`` when the caller may do ``attributes``, else the refusal."""
        user = await self._caller(request)
        return user if isinstance(user, web.Response) else await self._refusal(user, attributes)

    async def forecast(self, request: web.Request) -> web.Response:
        user = await self._caller(request)  # before reading a body a stranger sends
        if isinstance(user, web.Response):
            return user
        try:
            body = orjson.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return _problem(413, f"body larger than {MAX_BODY_BYTES} bytes")
        except orjson.JSONDecodeError:
            return _problem(400, "body is not JSON")
        job = body.get("job") if isinstance(body, dict) else None
        if not isinstance(job, dict):
            return _problem(400, 'body must be {"job": <PyTorchJob>}')
        job = _named(job)
        namespace = job["metadata"]["namespace"]
        refused = await self._refusal(
            user, Attributes("create", RBAC_GROUP, FORECASTS, namespace=namespace)
        )
        if refused is not None:
            return refused
        candidate = self.facts.candidate(job, self.facts.clock())
        if isinstance(candidate, list):
            return _problem(422, "the controller could not run this job", candidate)
        suspended = is_suspended(job)
        elsewhere = None if self.facts.ours(job) else run_elsewhere(managed_by(job))

        def answer() -> Any:
            snapshot, gang = self.facts.snapshot(candidate, self._gpu_resource())
            assert gang is not None  # a candidate was given
            return forecast(snapshot, gang, suspended=suspended, elsewhere=elsewhere).to_json()

        return self._answer(answer)

    async def job(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        refused = await self._allowed(
            request,
            Attributes("get", names.GROUP, names.PLURAL, namespace=namespace, name=name),
        )
        if refused is not None:
            return refused

        def answer() -> Any:
            outlook = job_outlook(
                self.facts.snapshot(None, self._gpu_resource())[0], (namespace, name)
            )
            raw = self.facts.cached(namespace, name)
            return replace(outlook, runs=None if raw is None else self.facts.ours(raw)).to_json()

        return self._answer(answer)

    async def pool(self, request: web.Request) -> web.Response:
        refused = await self._allowed(request, Attributes("get", RBAC_GROUP, POOLS))
        if refused is not None:
            return refused
        return self._answer(
            lambda: pool_view(self.facts.snapshot(None, self._gpu_resource())[0]).to_json()
        )

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    def _gpu_resource(self) -> str:
        return gpu_resource_of(self.facts.policies())


def _named(job: dict[str, Any]) -> dict[str, Any]:
    """The job with a namespace and a name (``generateName`` gets a visible placeholder)."""
    metadata = job.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
    metadata["namespace"] = str(metadata.get("namespace") or "default")
    if not metadata.get("name"):
        metadata["name"] = str(metadata.get("generateName") or "job").rstrip("-") + UNNAMED_SUFFIX
    return {**job, "metadata": metadata}


async def serve_pool(
    facts: PoolFacts,
    reviews: AccessReviews,
    *,
    bind: str,
    port: int,
    tls: ssl.SSLContext,
    max_connections: int = MAX_CONNECTIONS,
    read_timeout: float = READ_TIMEOUT_SECONDS,
) -> web.AppRunner:
    """Start the pool service on ``bind:port`` over TLS; the caller cleans the runner up."""
    runner = web.AppRunner(
        create_pool_app(facts, reviews),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=DRAIN_SECONDS,  # rule 7
        keepalive_timeout=IDLE_TIMEOUT_SECONDS,  # rule 8
    )
    await runner.setup()
    listener = TLSListener(  # rule 8
        runner,
        bind,
        port,
        ssl_context=tls,
        max_connections=max_connections,
        read_timeout=read_timeout,
    )
    await listener.start()
    log.info("pool service on https://%s:%d", bind, port)
    return runner


async def serve_when_ready(
    api: KubeApi,
    facts: PoolFacts,
    options: PoolServiceOptions,
    *,
    retry_seconds: float = 10.0,
    reload_seconds: float = 60.0,
) -> None:
    """Serve the pool service once its certificate can be read, then keep it current (rule 5).

    Runs until cancelled; the runner is cleaned up then.
    """
    while True:
        try:
            tls = ReloadingTLS(options.cert_file, options.key_file)
            break
        except (OSError, ValueError) as exc:
            log.warning("pool service not served yet: cannot load its certificate: %s", exc)
            await asyncio.sleep(retry_seconds)
    runner = await serve_pool(
        facts, AccessReviews(api), bind=options.bind, port=options.port, tls=tls.context
    )
    try:
        if options.pod is not None:
            await mark_leader(api, namespace=options.pod[0], pod=options.pod[1], leading=True)
        await tls.watch(reload_seconds)
    finally:
        await runner.cleanup()


async def mark_leader(api: KubeApi, *, namespace: str, pod: str, leading: bool) -> None:
    """Put ``LEADER_LABEL`` on the controller's own pod, or take it off (rule 4).

    Failures are logged, never raised: the controller's work does not depend on the label, only
    reaching its pool service through the Service does.
    """
    body = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}}
    try:
        async with asyncio.timeout(10):
            await api.request(
                "PATCH", PODS.path(namespace, pod), body=body, content_type=MERGE_PATCH
            )
    except (ApiError, TimeoutError) as exc:
        log.warning("could not %s pod %s/%s: %s", "label" if leading else "unlabel", namespace,
                    pod, exc)  # fmt: skip

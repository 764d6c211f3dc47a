"""The admission forecast: one more warning on an allowed CREATE, never a slower or failed review.

The webhook's real app answers reviews; the controller is a stand-in aiohttp server that answers
``POST /v1/forecast`` as told (a forecast, slowly, an error, nonsense) and records what it was
sent. Assertions are on the AdmissionReview answers, the time they took and the metrics.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.builders.job import gpu_job
from torchgate.pytorchjob.outlook import FORECAST_PATH, Forecast, forecast_warning
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.forecastclient import ForecastClient
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.review import evaluate
from torchgate.webhook.server import Metrics, create_app

# The forecast's time budget here: long enough that a loaded machine's TLS handshake and answer
# fit in it (at 0.25 s a 500 answer was once counted a timeout under load), far below the slow
# stand-in's 5 s.
TIMEOUT = 1.0
STARTS = Forecast("Start", nodes={"demo-master-0": "a100-0", "demo-worker-0": "a100-1"})


class Controller:
    """A stand-in pool service: its answer is a function of the request."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, Any], str | None]] = []
        self.answer: Callable[[], Awaitable[web.Response]] = self.forecast

    async def forecast(self) -> web.Response:
        return web.json_response(STARTS.to_json())

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((await request.json(), request.headers.get("Authorization")))
        return await self.answer()


async def authorize(headers: dict[str, str]) -> None:
    headers["authorization"] = "Bearer webhook-token"


@pytest.fixture
async def controller(aiohttp_server: Any) -> tuple[Controller, TestServer]:
    stand_in = Controller()
    app = web.Application()
    app.router.add_post(FORECAST_PATH, stand_in.handle)
    return stand_in, await aiohttp_server(app)


@pytest.fixture
async def webhook(
    controller: tuple[Controller, TestServer], aiohttp_client: Any
) -> tuple[TestClient[Any, Any], Metrics]:
    _, server = controller
    cache = PolicyCache()
    cache.synced.set()
    metrics = Metrics()
    forecasts = ForecastClient(
        str(server.make_url("")),
        authorize=authorize,
        timeout=TIMEOUT,
        observe=metrics.observe_forecast,
    )
    app = create_app(cache, metrics=metrics, forecasts=forecasts)
    app.on_cleanup.append(lambda _: forecasts.close())
    return await aiohttp_client(app), metrics


def review(obj: Any, *, operation: str = "CREATE", namespace: str = "team-a") -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "namespace": namespace,
        "operation": operation,
        "object": obj,
        "dryRun": True,
    }
    if operation == "UPDATE":
        request["oldObject"] = obj
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def stored_job() -> dict[str, Any]:
    """A job as the validating route gets it: defaulted by the mutating route, no namespace."""
    defaulted = evaluate(gpu_job("demo", namespace=None, workers=1, gpus=8).build(), DEFAULT_POLICY)
    assert defaulted.allowed
    return dict(defaulted.object)


async def validate(client: TestClient[Any, Any], body: Any) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    response = await client.post("/validate", json=body)
    assert response.status == 200
    answer = (await response.json())["response"]
    return answer, time.perf_counter() - started


def outcomes(metrics: Metrics) -> dict[str, float]:
    return {
        sample.labels["outcome"]: sample.value
        for family in metrics.forecasts.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_an_allowed_create_gets_the_forecast_as_its_last_warning(
    controller: tuple[Controller, TestServer], webhook: tuple[TestClient[Any, Any], Metrics]
) -> None:
    stand_in, _ = controller
    client, metrics = webhook

    answer, _ = await validate(client, review(stored_job()))

    assert answer["allowed"] is True
    assert answer["warnings"][-1] == forecast_warning(STARTS)
    assert answer["warnings"][-1] == "torchgate: will start now on a100-0, a100-1"
    ((sent, credentials),) = stand_in.seen
    assert sent["job"]["metadata"]["namespace"] == "team-a", "the namespace of the request"
    assert credentials == "Bearer webhook-token"
    assert outcomes(metrics)["answered"] == 1


async def slow() -> web.Response:
    await asyncio.sleep(5)
    return web.json_response(STARTS.to_json())


async def failing() -> web.Response:
    return web.json_response({"message": "boom"}, status=500)


async def nonsense() -> web.Response:
    return web.json_response({"verdict": "Perhaps"})


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [(slow, "timeout"), (failing, "refused"), (nonsense, "error")],
    ids=["too-slow", "error-status", "malformed"],
)
async def test_without_a_timely_well_formed_answer_the_review_is_as_without_forecasts(
    controller: tuple[Controller, TestServer],
    webhook: tuple[TestClient[Any, Any], Metrics],
    answer: Callable[[], Awaitable[web.Response]],
    outcome: str,
) -> None:
    stand_in, _ = controller
    stand_in.answer = answer
    client, metrics = webhook

    got, seconds = await validate(client, review(stored_job()))

    assert got["allowed"] is True
    assert not any("will" in warning for warning in got.get("warnings", []))
    assert seconds < TIMEOUT + 0.5
    assert outcomes(metrics)[outcome] == 1


async def test_a_controller_that_is_not_there_costs_no_admission(
    aiohttp_client: Any, unused_tcp_port: int
) -> None:
    cache = PolicyCache()
    cache.synced.set()
    metrics = Metrics()
    forecasts = ForecastClient(
        f"https://127.0.0.1:{unused_tcp_port}",
        authorize=authorize,
        observe=metrics.observe_forecast,
    )
    client = await aiohttp_client(create_app(cache, metrics=metrics, forecasts=forecasts))

    got, seconds = await validate(client, review(stored_job()))

    assert got["allowed"] is True
    assert seconds < TIMEOUT + 0.5
    assert outcomes(metrics)["error"] == 1
    await forecasts.close()


async def test_a_refused_job_gets_no_forecast_and_is_not_held_up(
    controller: tuple[Controller, TestServer], webhook: tuple[TestClient[Any, Any], Metrics]
) -> None:
    stand_in, _ = controller
    stand_in.answer = slow
    client, _ = webhook
    refused = stored_job()
    refused["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "args"
    ] = ["--world-size=16"]

    got, seconds = await validate(client, review(refused))

    assert got["allowed"] is False
    assert not any("will" in warning for warning in got.get("warnings", []))
    assert seconds < TIMEOUT


@pytest.mark.parametrize(
    ("route", "operation"),
    [("/validate", "UPDATE"), ("/mutate", "CREATE")],
    ids=["update", "mutating-route"],
)
async def test_only_a_create_on_the_validating_route_asks(
    controller: tuple[Controller, TestServer],
    webhook: tuple[TestClient[Any, Any], Metrics],
    route: str,
    operation: str,
) -> None:
    stand_in, _ = controller
    client, _ = webhook

    response = await client.post(route, json=review(stored_job(), operation=operation))

    assert response.status == 200
    assert stand_in.seen == []

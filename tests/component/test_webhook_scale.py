"""The validating route reads the job a scale review is about: one bounded GET, never a crash.

The webhook's real app and client stack (``StoredJobs`` over ``KubeClient``) against a stand-in
apiserver that answers a GET of the job with the job, 404, 403, or too late. Assertions are on
the AdmissionReview answers and the paths the stand-in apiserver was asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.builders.scale import scale_object, scale_review, stored
from torchgate.kube.client import KubeClient
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.webhook.jobsource import StoredJobs
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.server import create_app

JOB_PATH = "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs/job"
TIMEOUT = 0.3


class ApiServer:
    """Answers a GET of the job as told: the job, an error status, or after a delay."""

    def __init__(self) -> None:
        self.job: dict[str, Any] | None = None
        self.status = 200
        self.delay = 0.0
        self.gets: list[str] = []

    async def one(self, request: web.Request) -> web.Response:
        self.gets.append(request.path)
        await asyncio.sleep(self.delay)
        if self.status != 200 or self.job is None:
            code = self.status if self.status != 200 else 404
            reason = {403: "Forbidden", 404: "NotFound"}.get(code, "InternalError")
            status = {"kind": "Status", "code": code, "reason": reason, "message": reason}
            return web.json_response(status, status=code)
        return web.json_response(self.job)


@pytest.fixture
async def stand_in(aiohttp_server: Any) -> AsyncIterator[tuple[ApiServer, KubeClient]]:
    apiserver = ApiServer()
    app = web.Application()
    app.router.add_get(
        "/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}", apiserver.one
    )
    server = await aiohttp_server(app)
    api = KubeClient.for_server(str(server.make_url("")).rstrip("/"))
    try:
        yield apiserver, api
    finally:
        await api.close()


async def webhook(aiohttp_client: Any, jobs: StoredJobs | None) -> TestClient[Any, Any]:
    cache = PolicyCache()
    cache.synced.set()
    return await aiohttp_client(create_app(cache, jobs=jobs))  # type: ignore[no-any-return]


async def answer(client: TestClient[Any, Any], replicas: int) -> dict[str, Any]:
    response = await client.post("/validate", json=scale_review(scale_object(replicas)))
    assert response.status == 200
    body: dict[str, Any] = (await response.json())["response"]
    return body


async def test_the_job_read_decides_the_scale(
    stand_in: tuple[ApiServer, KubeClient], aiohttp_client: Any
) -> None:
    apiserver, api = stand_in
    apiserver.job = stored(workers=1)
    client = await webhook(aiohttp_client, StoredJobs(api, timeout=TIMEOUT))

    refused = await answer(client, 3)
    unchanged = await answer(client, 1)

    assert refused["allowed"] is False
    causes = [(c["reason"], c["field"]) for c in refused["status"]["details"]["causes"]]
    assert causes == [(ErrorType.FORBIDDEN.value, "spec.pytorchReplicaSpecs[Worker].replicas")]
    assert unchanged["allowed"] is True
    assert apiserver.gets == [JOB_PATH, JOB_PATH]


@pytest.mark.parametrize(
    ("status", "delay", "why"),
    [
        (404, 0.0, "PyTorchJob team-a/job not found"),
        (403, 0.0, "could not read PyTorchJob team-a/job: "),
        (500, 0.0, "could not read PyTorchJob team-a/job: "),
        (200, TIMEOUT * 5, f"could not read PyTorchJob team-a/job within {TIMEOUT:g}s"),
    ],
    ids=["not-found", "forbidden", "server-error", "too-slow"],
)
async def test_a_failed_read_refuses_the_scale_saying_why(
    stand_in: tuple[ApiServer, KubeClient],
    aiohttp_client: Any,
    status: int,
    delay: float,
    why: str,
) -> None:
    apiserver, api = stand_in
    apiserver.job, apiserver.status, apiserver.delay = stored(workers=1), status, delay
    client = await webhook(aiohttp_client, StoredJobs(api, timeout=TIMEOUT))

    refused = await answer(client, 3)

    assert refused["allowed"] is False
    assert refused["status"]["code"] == 503
    assert why in refused["status"]["message"]


async def test_without_cluster_access_every_scale_is_refused(aiohttp_client: Any) -> None:
    client = await webhook(aiohttp_client, None)

    refused = await answer(client, 3)

    assert refused["allowed"] is False
    assert refused["status"]["code"] == 503

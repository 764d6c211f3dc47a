"""A claim template the webhook's caches have not seen yet: one live GET decides, not the cache.

``kubectl apply -f dir/`` creates a ResourceClaimTemplate and the PyTorchJob that names it
together; the job's review can come before the template's watch event reaches the webhook's
informer. The webhook's real app and its real client stack (``KubeClient``, ``Informer``) run
against a stand-in apiserver whose lists do not show the template (the cache has listed without
it) while a GET of the template finds it, or does not. Assertions are on the AdmissionReview
answers and the requests the stand-in apiserver received.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.builders.claims import (
    GPU_CLASS,
    claim_refs,
    claim_template,
    claiming_pod,
    device_class,
    device_request,
)
from tests.builders.job import container, job
from tests.builders.policy import policy
from torchgate.kube.client import KubeClient
from torchgate.pytorchjob.devices import RESOURCE_CLAIM_TEMPLATE
from torchgate.webhook.policysource import ClusterClaims, PolicyCache
from torchgate.webhook.server import create_app

NAMESPACE = "team-a"
TEMPLATE_PATH = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates/eight"
FIELD = "spec.pytorchReplicaSpecs[Worker].template.spec.resourceClaims[0].resourceClaimTemplateName"


class ApiServer:
    """Lists without the template (what the informers listed) and GETs of what it has."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  # path -> object a GET finds
        self.lists: dict[str, list[dict[str, Any]]] = {
            "resourceclaims": [],
            "resourceclaimtemplates": [],
            "deviceclasses": [device_class()],
        }
        self.gets: list[str] = []

    async def collection(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":  # a watch with no events, held open
            stream = web.StreamResponse()
            await stream.prepare(request)
            await asyncio.sleep(3600)
            return stream
        items = self.lists[request.match_info["plural"]]
        return web.json_response({"metadata": {"resourceVersion": "1"}, "items": items})

    async def one(self, request: web.Request) -> web.Response:
        self.gets.append(request.path)
        found = self.objects.get(request.path)
        if found is None:
            status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
            return web.json_response(status, status=404)
        return web.json_response(found)


@pytest.fixture
async def apiserver(aiohttp_server: Any) -> tuple[ApiServer, TestServer]:
    stand_in = ApiServer()
    app = web.Application()
    app.router.add_get("/apis/resource.k8s.io/v1/{plural}", stand_in.collection)
    app.router.add_get(
        "/apis/resource.k8s.io/v1/namespaces/{namespace}/{plural}/{name}", stand_in.one
    )
    return stand_in, await aiohttp_server(app)


@contextlib.asynccontextmanager
async def running_webhook(
    server: TestServer, aiohttp_client: Any
) -> AsyncIterator[TestClient[Any, Any]]:
    """The webhook's app with its claim caches listed from ``server`` (cancelled at the end)."""
    cache = PolicyCache()
    cache.replace_all([policy("dra", gpuDeviceClasses=[GPU_CLASS])], "test")
    cache.synced.set()
    api = KubeClient.for_server(str(server.make_url("")).rstrip("/"))
    claims = ClusterClaims(cache, api)
    running = asyncio.create_task(claims.run())
    try:
        await asyncio.wait_for(
            asyncio.gather(
                claims.caches.claims.synced.wait(),
                claims.caches.templates.synced.wait(),
                claims.caches.classes.synced.wait(),
            ),
            timeout=10,
        )
        yield await aiohttp_client(create_app(cache))
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await api.close()


def claiming_job() -> dict[str, Any]:
    """One Worker whose pod claims 8 GPUs through template ``eight`` and trains with nccl."""
    pytorch = container(args=["--backend", "nccl"])
    pytorch.setdefault("resources", {}).update(claim_refs("gpus"))
    pod_spec = claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "eight"))
    raw = job("dra").workers(1, containers=[pytorch], pod_spec=pod_spec).build()
    raw["metadata"]["namespace"] = NAMESPACE
    return raw


async def review(client: TestClient[Any, Any], route: str, obj: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
            "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "object": obj,
        },
    }
    response = await client.post(f"/{route}", json=body)
    assert response.status == 200
    answer: dict[str, Any] = (await response.json())["response"]
    return answer


async def test_a_template_created_with_the_job_but_not_cached_yet_is_admitted(
    apiserver: tuple[ApiServer, TestServer], aiohttp_client: Any
) -> None:
    stand_in, server = apiserver
    template = claim_template("eight", device_request(count=8), namespace=NAMESPACE)
    stand_in.objects[TEMPLATE_PATH] = template  # the apiserver has it; the caches do not
    async with running_webhook(server, aiohttp_client) as client:
        answer = await review(client, "validate", claiming_job())
    assert answer["allowed"] is True
    assert not [w for w in answer.get("warnings", []) if "resourceClaims" in w]
    assert stand_in.gets == [TEMPLATE_PATH]  # nccl passed: its 8 GPUs were counted from the GET


async def test_a_template_the_apiserver_does_not_have_either_is_refused_naming_the_field(
    apiserver: tuple[ApiServer, TestServer], aiohttp_client: Any
) -> None:
    stand_in, server = apiserver
    async with running_webhook(server, aiohttp_client) as client:
        answer = await review(client, "validate", claiming_job())
    assert answer["allowed"] is False
    causes = answer["status"]["details"]["causes"]
    assert (causes[0]["reason"], causes[0]["field"]) == ("FieldValueNotFound", FIELD)
    assert stand_in.gets == [TEMPLATE_PATH]


async def test_a_template_the_caches_hold_is_not_read_again(
    apiserver: tuple[ApiServer, TestServer], aiohttp_client: Any
) -> None:
    stand_in, server = apiserver
    template = claim_template("eight", device_request(count=8), namespace=NAMESPACE)
    stand_in.lists["resourceclaimtemplates"] = [template]
    async with running_webhook(server, aiohttp_client) as client:
        answer = await review(client, "validate", claiming_job())
    assert answer["allowed"] is True
    assert stand_in.gets == []

"""Property test: whatever arrives, the review handler answers a valid AdmissionReview or a 400.

Random and mutated PyTorchJobs (and plain byte strings) are posted to the real aiohttp app, served
on a background thread; every answer must come back within the client's timeout, with HTTP 200
and a well-formed AdmissionReview echoing the uid (never a 500 or an ``InternalError`` status), or
HTTP 400 for bodies that are not AdmissionReviews.
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import gpu_job, job
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.server import create_app


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    cache = PolicyCache()
    cache.synced.set()
    loop = asyncio.new_event_loop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        chosen = int(s.getsockname()[1])
    runner = web.AppRunner(create_app(cache, max_body_bytes=256 * 1024), handle_signals=False)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", chosen).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield chosen
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def post(port: int, route: str, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", route, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.text(max_size=12),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
PATHS = [
    ("spec",),
    ("spec", "pytorchReplicaSpecs"),
    ("spec", "pytorchReplicaSpecs", "Worker"),
    ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
    ("spec", "pytorchReplicaSpecs", "Master", "template"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "args"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "env"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "resources"),
    ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", "containers", 0, "volumeMounts"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "volumes"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "affinity"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "nodeSelector"),
    ("spec", "runPolicy"),
    ("spec", "runPolicy", "schedulingPolicy"),
    ("spec", "elasticPolicy"),
    ("spec", "nprocPerNode"),
    ("metadata",),
    ("metadata", "annotations"),
    ("metadata", "name"),
]


_MISSING: Any = object()


def _step(node: Any, token: str | int) -> Any:
    """``node[token]`` when it exists, else a sentinel that absorbs further steps."""
    if isinstance(node, dict) and isinstance(token, str) and token in node:
        return node[token]
    if isinstance(node, list) and isinstance(token, int) and token < len(node):
        return node[token]
    return _MISSING


@st.composite
def mutated_jobs(draw: st.DrawFn) -> Any:
    base = draw(
        st.sampled_from(
            [
                gpu_job(workers=15).hosts("a", "b").build(),
                job().master().workers(2).elastic(minReplicas=1, maxReplicas=3).build(),
                job().workers(4).build(),
            ]
        )
    )
    raw: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(PATHS))
        value = draw(json_value)
        node = raw
        for token in path[:-1]:
            node = _step(node, token)
        if _step(node, path[-1]) is not _MISSING or isinstance(node, dict):
            node[path[-1]] = value
    return raw


def review_of(obj: Any, operation: str, old: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "fuzz",
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "namespace": "team-a",
        "operation": operation,
        "object": obj,
    }
    if operation == "UPDATE":
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def assert_well_formed(status: int, body: bytes) -> None:
    assert status in (200, 400), (status, body[:300])
    if status == 400:
        assert body.startswith(b"bad AdmissionReview")
        return
    answer = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "fuzz"
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        result = response["status"]
        assert result["code"] == 422, result
        assert result["details"]["causes"]


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    obj=mutated_jobs(),
    old=mutated_jobs(),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
    route=st.sampled_from(["/mutate", "/validate"]),
)
def test_mutated_jobs_always_get_a_valid_answer(
    port: int, obj: Any, old: Any, operation: str, route: str
) -> None:
    assert_well_formed(*post(port, route, json.dumps(review_of(obj, operation, old)).encode()))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    obj=json_value,
    route=st.sampled_from(["/mutate", "/validate"]),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", None, 7]),
)
def test_arbitrary_objects_always_get_a_valid_answer(
    port: int, obj: Any, route: str, operation: Any
) -> None:
    assert_well_formed(*post(port, route, json.dumps(review_of(obj, operation, obj)).encode()))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=2048), route=st.sampled_from(["/mutate", "/validate"]))
def test_byte_strings_get_400_never_500(port: int, body: bytes, route: str) -> None:
    assert_well_formed(*post(port, route, body))

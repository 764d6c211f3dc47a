"""The benchmark's own load on the apiserver, through ``torchgate.kube`` (no client of its own).

Rules:
- One ``KubeClient`` with the control plane's admin token and an unbounded connection pool
  (``bounded`` limits each phase's concurrency instead); calls wait up to 300 s, as before.
- The pod watch is an ``Informer`` of one namespace: it lists, then watches from the list's
  resourceVersion (re-listing on 410), and its handler stamps the first time each pod is seen,
  succeeds, gets its ``deletionTimestamp`` and is gone (monotonic seconds).
- Collections are cleared one DELETE per object (a page at a time), never by one
  delete-collection: thousands of pods outlive the apiserver's request timeout (HTTP 504).
- Nodes are created through the API and their readiness polled by paged lists, with a deadline
  the caller sizes to the node count.
- A ``/metrics`` page (the apiserver's, the controller's) is text, not JSON: it is read over the
  client's own session and authorisation.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from controllerbench.stats import request_counts, write_counts
from torchgate.kube.client import KubeClient
from torchgate.kube.errors import NotFound
from torchgate.kube.informer import Informer
from torchgate.kube.resources import NODES, PODS, PYTORCHJOBS
from torchgate_dev.controlplane.cluster import ControlPlane

T = TypeVar("T")


def connect(plane: ControlPlane) -> KubeClient:
    """A client of the control plane with its admin token (call inside the event loop)."""
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    return KubeClient.for_server(
        plane.server, token=plane.token, tls=context, timeout=300.0, pool_size=0
    )


class PodWatch:
    """Times (monotonic) of pod events in one namespace, from an informer."""

    def __init__(self, api: KubeClient, namespace: str) -> None:
        self.informer = Informer(api, PODS, namespace=namespace)
        self.informer.add_handler(self._seen)
        self.added: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.deleting: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.ready = self.informer.synced

    def _seen(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        now = time.monotonic()
        metadata = obj["metadata"]
        name = metadata["name"]
        self.added.setdefault(name, now)
        if (obj.get("status") or {}).get("phase") == "Succeeded":
            self.succeeded.setdefault(name, now)
        if metadata.get("deletionTimestamp"):
            self.deleting.setdefault(name, now)
        if kind == "DELETED":
            self.gone.setdefault(name, now)

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self.informer.run()


async def metrics_text(client: KubeClient) -> str:
    """A server's Prometheus ``/metrics`` text, over the client's session and authorisation.

    ``KubeClient.request`` decodes JSON only; metrics are text.
    """
    headers = {"Accept": "text/plain"}
    if client.authorize is not None:
        await client.authorize(headers)
    async with client.session.get(client.host + "/metrics", headers=headers) as response:
        response.raise_for_status()
        return await response.text()


async def apiserver_requests(api: KubeClient) -> dict[str, float]:
    """The apiserver's own count of requests so far by verb and resource, and of watch events."""
    return request_counts(await metrics_text(api))


async def apiserver_writes(api: KubeClient) -> dict[str, float]:
    """The apiserver's own count of write requests so far, by verb and resource."""
    return write_counts(await apiserver_requests(api))


async def bounded(calls: Sequence[Awaitable[T]], limit: int) -> list[T]:
    """Await ``calls`` with at most ``limit`` at once; results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with semaphore:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


async def delete_each(api: KubeClient, path: str, *, concurrency: int = 32) -> int:
    """Delete every object of the collection at ``path`` by name, a page of 500 at a time.

    One DELETE per object, ``concurrency`` at once, at once (``gracePeriodSeconds=0``): a
    delete-collection of thousands of pods outlives the apiserver's 60 s request timeout (HTTP
    504). An object already gone counts as deleted. Returns how many deletes were sent.
    """
    sent = 0
    query: dict[str, str] = {"limit": "500"}
    while True:
        page = await api.request("GET", path, query=query)
        names = [item["metadata"]["name"] for item in page["items"]]
        await bounded([_delete(api, f"{path}/{name}") for name in names], concurrency)
        sent += len(names)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return sent
        query = {"limit": "500", "continue": token}


async def _delete(api: KubeClient, path: str) -> None:
    with contextlib.suppress(NotFound):
        await api.request("DELETE", path, query={"gracePeriodSeconds": "0"})


async def clear_namespace(api: KubeClient, namespace: str, *, within: float = 600) -> None:
    """Delete the round's jobs and pods and wait until they are gone: rounds start clean."""
    jobs_path = PYTORCHJOBS.path(namespace)
    pods_path = PODS.path(namespace)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await delete_each(api, jobs_path)
        await delete_each(api, pods_path)
        jobs_left = (await api.request("GET", jobs_path, query={"limit": "1"}))["items"]
        pods_left = (await api.request("GET", pods_path, query={"limit": "1"}))["items"]
        if not jobs_left and not pods_left:
            return
        await asyncio.sleep(1)
    raise RuntimeError(f"namespace {namespace} still has jobs or pods after {within:.0f} s")


async def create_nodes(api: KubeClient, nodes: Sequence[dict[str, Any]]) -> None:
    """Create the kwok nodes through the API, 32 at once.

    One ``kubectl apply`` of thousands of nodes outlives the kubectl wrapper's 60 s.
    """
    await bounded([api.request("POST", NODES.path(), body=node) for node in nodes], 32)


async def wait_nodes_ready(api: KubeClient, count: int, *, within: float) -> float:
    """Wait until ``count`` nodes report Ready; returns the seconds it took.

    Paged lists of the nodes every 2 s, not ``kubectl wait``: kwok marks a thousand nodes Ready
    over tens of seconds, longer than the kubectl wrapper's own 60 s timeout.
    """
    started = time.monotonic()
    while True:
        ready = 0
        query: dict[str, str] = {"limit": "500"}
        while True:
            page = await api.request("GET", NODES.path(), query=query)
            ready += sum(_is_ready(node) for node in page["items"])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            query = {"limit": "500", "continue": token}
        if ready >= count:
            return time.monotonic() - started
        if time.monotonic() - started > within:
            raise RuntimeError(f"{ready} of {count} nodes Ready after {within:.0f} s")
        await asyncio.sleep(2)


def _is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

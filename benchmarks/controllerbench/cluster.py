"""The benchmark's own load on the apiserver, through ``torchgate.kube`` (no client of its own).

Rules:
- One ``KubeClient`` with the control plane's admin token and an unbounded connection pool
  (``bounded`` limits each phase's concurrency instead); calls wait up to 300 s, as before.
- The pod watch is an ``Informer`` of one namespace: it lists, then watches from the list's
  resourceVersion (re-listing on 410), and its handler stamps the first time each pod is seen,
  succeeds, gets its ``deletionTimestamp`` and is gone (monotonic seconds).
- A ``/metrics`` page (the apiserver's, the controller's) is text, not JSON: it is read over the
  client's own session and authorisation.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from controllerbench.stats import write_counts
from torchgate.kube.client import KubeClient
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS
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


async def apiserver_writes(api: KubeClient) -> dict[str, float]:
    """The apiserver's own count of write requests so far, by verb and resource."""
    return write_counts(await metrics_text(api))


async def bounded(calls: Sequence[Awaitable[T]], limit: int) -> list[T]:
    """Await ``calls`` with at most ``limit`` at once; results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with semaphore:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


async def clear_namespace(api: KubeClient, namespace: str) -> None:
    """Delete the round's jobs and pods and wait until they are gone: rounds start clean."""
    jobs_path = PYTORCHJOBS.path(namespace)
    pods_path = PODS.path(namespace)
    now = {"gracePeriodSeconds": "0"}
    await api.request("DELETE", jobs_path)
    await api.request("DELETE", pods_path, query=now)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs_left = (await api.request("GET", jobs_path, query={"limit": "1"}))["items"]
        pods_left = (await api.request("GET", pods_path, query={"limit": "1"}))["items"]
        if not jobs_left and not pods_left:
            return
        await api.request("DELETE", pods_path, query=now)
        await asyncio.sleep(1)
    raise RuntimeError(f"namespace {namespace} still has jobs or pods after 300 s")

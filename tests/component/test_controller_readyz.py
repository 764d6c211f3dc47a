"""The controller's ``/readyz`` over HTTP, with ``run_as_leader`` against an in-memory apiserver.

What a rolling upgrade reads (``controller.readiness``): a leader is ready once its caches are
synced and while they can list, a standby once it has read the Lease; ``/healthz`` stays ok.
The apiserver below answers empty lists, holds or refuses the lists of chosen resources, and
keeps watches open until told to break them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from torchgate.controller.leader import LeaderElector
from torchgate.controller.manager import ManagerOptions, run_as_leader
from torchgate.kube.errors import Forbidden, NotFound, ServerError
from torchgate_dev.ports import free_port

LEASE = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/ctl"


class Apiserver:
    """Empty lists (held while ``held``, 403 while ``refused``), a Lease held by someone else."""

    def __init__(self) -> None:
        self.held: dict[str, asyncio.Event] = {}
        self.refused: set[str] = set()
        self.watches_break = asyncio.Event()
        self.lease_refused = False

    def hold(self, plural: str) -> asyncio.Event:
        self.held[plural] = asyncio.Event()
        return self.held[plural]

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "",
    ) -> Any:
        del query, content_type
        if path == LEASE:
            if self.lease_refused:
                raise Forbidden(403, "Forbidden", "leases is forbidden", method, path)
            spec = {"holderIdentity": "other", "leaseDurationSeconds": 3600, "renewTime": "x"}
            return {"metadata": {"name": "ctl", "resourceVersion": "1"}, "spec": spec}
        if method != "GET":
            return body or {}
        plural = path.rsplit("/", 1)[-1]
        gate = self.held.get(plural)
        if gate is not None:
            await gate.wait()
        if plural in self.refused:
            raise Forbidden(403, "Forbidden", f"{plural} is forbidden", method, path)
        if plural == "v1beta1":  # discovery of the gang objects: not served
            raise NotFound(404, "NotFound", "not served", method, path)
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        await self.watches_break.wait()
        raise ServerError(503, "ServiceUnavailable", "watch broke", "GET", path)
        yield {}  # an async generator


async def get(port: int, route: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{route}") as response,
    ):
        return response.status, await response.text()


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(10):
        while not await check():  # noqa: ASYNC110 - polls an HTTP route
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def controller(api: Apiserver, elector: LeaderElector | None) -> AsyncIterator[int]:
    """``run_as_leader`` serving its probes on a free port, stopped on exit."""
    port, stop = free_port(), asyncio.Event()
    settings = ManagerOptions(quota_sync_seconds=0.1, resync_seconds=3600)
    running = asyncio.create_task(
        run_as_leader(
            api,  # type: ignore[arg-type]
            settings,
            elector=elector,
            metrics_bind="127.0.0.1",
            metrics_port=port,
            stop=stop,
        )
    )

    async def serving() -> bool:
        with contextlib.suppress(aiohttp.ClientError):
            await get(port, "/healthz")
            return True
        return False

    await eventually(serving)
    try:
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


def answers(port: int, route: str, status: int, text: str = "") -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        got = await get(port, route)
        return got[0] == status and text in got[1]

    return check


async def test_a_leader_is_not_ready_until_its_caches_are_synced() -> None:
    api = Apiserver()
    pods_listed = api.hold("pods")
    async with controller(api, elector=None) as port:
        await asyncio.sleep(0.3)
        assert await get(port, "/readyz") == (503, "leader: caches not synced yet\n")
        assert (await get(port, "/healthz"))[0] == 200

        pods_listed.set()
        await eventually(answers(port, "/readyz", 200, "ok"))


async def test_a_synced_leader_whose_watch_breaks_and_cannot_list_again_is_not_ready() -> None:
    api = Apiserver()
    async with controller(api, elector=None) as port:
        await eventually(answers(port, "/readyz", 200, "ok"))

        api.refused.add("pods")
        api.watches_break.set()
        await eventually(answers(port, "/readyz", 503, "leader: cannot list or watch pods\n"))
        assert (await get(port, "/healthz"))[0] == 200

        api.watches_break.clear()
        api.refused.clear()
        await eventually(answers(port, "/readyz", 200, "ok"))


async def test_a_standby_is_ready_once_it_has_read_the_lease_and_not_before() -> None:
    api = Apiserver()
    api.lease_refused = True
    elector = LeaderElector(api, namespace="ns", name="ctl", identity="me", retry_period=0.05)  # type: ignore[arg-type]
    async with controller(api, elector) as port:
        await asyncio.sleep(0.3)
        assert await get(port, "/readyz") == (
            503,
            "standby: the leader Lease has not been read yet\n",
        )

        api.lease_refused = False
        await eventually(answers(port, "/readyz", 200, "ok"))
        assert not elector.is_leader

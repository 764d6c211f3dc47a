"""A controller told to stop stops, whatever moment of its start or of its loops the stop meets.

The stop is a cancellation (``run_as_leader`` cancels the manager, the Lease renewals and the
pool service). Each test cancels after every possible number of event-loop steps in turn, so
the cancellation lands once in each loop iteration: between a wake-up and the loop's resuming,
between an answer and its reader, in each phase of the start (lists, discovery, the TeamQuota
and DRA waits, the first cycle). A loop that ignored one cancellation would run on, and a
stopping controller would be killed at the end of its pod's grace period (30 s) instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from tests.builders.node import node
from tests.builders.pod import pod
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.poolsource import PoolSource
from torchgate.controller.leader import LeaderElector
from torchgate.controller.manager import Manager, ManagerOptions
from torchgate.controller.poolservice import mark_leader
from torchgate.kube.informer import Informer
from torchgate.kube.resources import TEAM_QUOTAS

# Enough steps to walk each loop below through several of its iterations.
STEPS = 40
# A task that took its cancellation ends within a few steps (milliseconds); one that ignored it
# runs on. Generous: a machine busy with other work may not run this process for a while.
ENDS_WITHIN_SECONDS = 5.0


class QuickApi:
    """An apiserver that answers at once: a node and a pod in every list, watches that stay open.

    Every answer costs one event-loop step, as a real one costs at least one.
    """

    def __init__(self) -> None:
        self.version = 0

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        del query, content_type
        await asyncio.sleep(0)
        self.version += 1
        metadata = {"resourceVersion": str(self.version)}
        if method != "GET":
            return {**(body or {}), "metadata": {**(body or {}).get("metadata", {}), **metadata}}
        if path.endswith("/nodes"):
            return {"items": [node("n1")], "metadata": metadata}
        if path.endswith("/pods"):
            return {
                "items": [pod("a-worker-0", gang=("team-a", "a"), node="n1")],
                "metadata": metadata,
            }
        if path == "/api/v1" or (path.startswith("/apis/") and path.count("/") == 3):
            return {"resources": []}  # discovery: nothing optional is served
        return {"items": [], "metadata": metadata}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        del path, query
        await asyncio.Event().wait()  # no change, ever
        yield {}


async def outcome_of_cancel_after(steps: int, start: Callable[[], Awaitable[Any]]) -> str:
    """What ``start()`` did when cancelled after ``steps`` event-loop steps.

    "stopped" when it ended as cancelled (or had ended by then: nothing to stop), else what it
    did instead.
    """
    task = asyncio.ensure_future(start())
    for _ in range(steps):
        await asyncio.sleep(0)
    if task.done():
        return "stopped"
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=ENDS_WITHIN_SECONDS)
    if not done:
        running = sorted(
            str(other.get_coro().__qualname__)  # type: ignore[union-attr]
            for other in asyncio.all_tasks() - {asyncio.current_task()}
        )
        while not task.done():  # cancel everything until it ends: the test leaves nothing running
            for other in asyncio.all_tasks() - {asyncio.current_task()}:
                other.cancel()
            await asyncio.wait({task}, timeout=0.01)
        return f"ran on: {', '.join(running)}"
    if task.cancelled():
        return "stopped"
    return f"ended with {task.exception()!r}" if task.exception() else "returned"


async def steps_ignored(start: Callable[[], Awaitable[Any]], steps: int = STEPS) -> dict[int, str]:
    """After how many steps a cancellation of ``start()`` did not stop it, and what it did.

    The first few only: each may cost ``ENDS_WITHIN_SECONDS``.
    """
    ignored: dict[int, str] = {}
    for n in range(steps):
        if len(ignored) < 3:
            outcome = await outcome_of_cancel_after(n, start)
            if outcome != "stopped":
                ignored[n] = outcome
    return ignored


async def test_the_manager_stops_at_every_moment_of_its_start_and_first_cycles() -> None:
    started: list[Manager] = []

    async def start() -> None:
        manager = Manager(QuickApi(), ManagerOptions(workers=2, urgent_workers=1))
        started.append(manager)
        await manager.run()

    # Up to well past "caches synced" and the first admission cycle.
    assert await steps_ignored(start, steps=300) == {}
    assert started[-1].synced.is_set()


async def test_the_admitter_stops_in_the_step_it_is_woken() -> None:
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)

    async def start() -> None:
        admitter.wake()
        await admitter.run(debounce=0, period=60)

    assert await steps_ignored(start) == {}


async def test_a_leader_stops_holding_its_lease_in_the_step_a_renewal_answers() -> None:
    elector = LeaderElector(
        QuickApi(), namespace="ns", name="ctl", identity="me", retry_period=0, renew_deadline=10
    )
    assert await steps_ignored(elector.hold) == {}


async def test_labelling_the_leader_pod_stops_in_the_step_the_patch_answers() -> None:
    async def start() -> None:
        await mark_leader(QuickApi(), namespace="ns", pod="ctl-0", leading=True)

    # The first steps cancel it before its PATCH answered; later ones find it done.
    ignored = await steps_ignored(start, steps=6)
    assert ignored == {}, ignored


async def test_taking_the_finalizers_off_stops_in_the_step_an_answer_comes() -> None:
    source = PoolSource(
        QuickApi(),
        quotas=Informer(QuickApi(), TEAM_QUOTAS),
        policies=list,
        team_status=dict,
    )

    async def start() -> bool:
        return await source.release_finalizers(seconds=10, deployment=("ns", "ctl"))

    assert await steps_ignored(start, steps=6) == {}

"""Pod events of a starting gang are batched per job; a pod that ended wakes its job at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from controller.manager import Manager, ManagerOptions
from controller.queue import URGENT
from pytorchjob import names

KEY = ("team-a", "train")
BATCH = 0.2


class NoApi:
    """The handlers under test never call the apiserver."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        raise AssertionError(f"unexpected {method} {path}")

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


def pod(index: int, phase: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"train-worker-{index}",
            "namespace": "team-a",
            "labels": {
                names.LABEL_OPERATOR_NAME: names.OPERATOR_NAME,
                names.LABEL_JOB_NAME: "train",
            },
        },
        "status": {"phase": phase},
    }


def manager() -> Manager:
    return Manager(NoApi(), ManagerOptions(pod_event_batch_seconds=BATCH))


async def next_key(m: Manager, within: float) -> tuple[str, str] | None:
    try:
        return await asyncio.wait_for(m.queue.get(), within)
    except TimeoutError:
        return None


async def test_a_burst_of_pod_events_wakes_the_job_once_after_the_batch_period() -> None:
    m = manager()
    for index in range(8):
        m._on_pod("ADDED", pod(index), None)
        m._on_pod("MODIFIED", pod(index, "Running"), None)
    assert len(m.queue) == 0  # nothing yet: the burst is still arriving
    assert await next_key(m, BATCH * 5) == KEY
    m.queue.done(KEY)
    assert await next_key(m, BATCH * 3) is None  # one look for the whole burst


async def test_a_pod_that_ended_wakes_its_job_at_once_in_the_urgent_lane() -> None:
    m = manager()
    m._on_pod("MODIFIED", pod(0, "Succeeded"), None)
    assert await m.queue.get(max_lane=URGENT) == KEY


async def test_a_deleted_pod_wakes_its_job_at_once() -> None:
    m = manager()
    m._on_pod("DELETED", pod(3, "Running"), None)
    assert await next_key(m, 0.01) == KEY


async def test_a_pod_of_no_torchgate_job_wakes_nothing() -> None:
    m = manager()
    foreign = pod(0)
    foreign["metadata"]["labels"] = {}
    m._on_pod("MODIFIED", foreign, None)
    assert await next_key(m, BATCH * 3) is None

"""The manager's wiring: node events to job keys, discovery."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from tests.builders.node import node
from tests.builders.pod import pod
from torchgate.controller.manager import GangObjectsDiscovery, Manager, ManagerOptions
from torchgate.controller.queue import NORMAL, URGENT
from torchgate.kube.errors import ApiError, NotFound


class IdleApi:
    """An apiserver that is never asked anything in these tests."""

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


def taken(manager: Manager) -> set[tuple[str, str]]:
    """Every key the queue hands out now (urgent ones first)."""

    async def drain() -> set[tuple[str, str]]:
        keys = set()
        while len(manager.queue):
            key = await manager.queue.get(URGENT)
            manager.queue.done(key)
            keys.add(key)
        return keys

    return asyncio.run(drain())


def manager_with_gangs() -> Manager:
    manager = Manager(IdleApi(), ManagerOptions())
    for job, name, where in (("a", "a-worker-0", "n1"), ("b", "b-worker-0", "n2")):
        manager.admitter.on_pod("ADDED", pod(name, gang=("team-a", job), node=where), None)
    return manager


def test_a_node_that_turns_not_ready_sends_the_jobs_with_pods_there_back_to_reconcile() -> None:
    manager = manager_with_gangs()
    ready = node("n1")
    lost = copy.deepcopy(ready)
    lost["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-03-01T12:00:00Z"}
    ]
    manager._on_node("MODIFIED", lost, ready)
    assert taken(manager) == {("team-a", "a")}


def test_a_tainted_or_deleted_node_does_too_and_a_heartbeat_does_not() -> None:
    manager = manager_with_gangs()
    before = node("n2")
    heartbeat = copy.deepcopy(before)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-03-01T12:00:10Z"
    manager._on_node("MODIFIED", heartbeat, before)
    assert taken(manager) == set()
    tainted = copy.deepcopy(before)
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu-health", "effect": "NoExecute"}]
    manager._on_node("MODIFIED", tainted, before)
    assert taken(manager) == {("team-a", "b")}
    manager._on_node("DELETED", before, before)
    assert taken(manager) == {("team-a", "b")}


class DiscoveryApi:
    """Answers discovery of ``scheduling.k8s.io/v1beta1`` with each of ``answers`` in turn."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.paths: list[str] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        self.paths.append(path)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


SERVED = {"resources": [{"name": "workloads"}, {"name": "podgroups"}, {"name": "podgroups/status"}]}
DISCOVERY = "/apis/scheduling.k8s.io/v1beta1"


def not_found() -> NotFound:
    return NotFound(404, "NotFound", "the server could not find the requested resource", "GET", "")


def served_after_each_check(*answers: Any) -> list[bool]:
    api = DiscoveryApi(*answers)
    discovery = GangObjectsDiscovery(api, recheck_seconds=30)

    async def checks() -> list[bool]:
        seen = []
        for _ in answers:
            await discovery.check()
            seen.append(discovery.served)
        return seen

    seen = asyncio.run(checks())
    assert set(api.paths) == {DISCOVERY}
    return seen


@pytest.mark.parametrize(
    ("answers", "served"),
    [
        ((SERVED,), [True]),
        ((not_found(),), [False]),
        (({"resources": [{"name": "priorityclasses"}]},), [False]),
        ((not_found(), SERVED), [False, True]),  # the API turned on while running
        ((SERVED, not_found()), [True, False]),  # and off again
        # An apiserver hiccup keeps the last answer.
        ((SERVED, ApiError(503, "ServiceUnavailable", "try later", "GET", "")), [True, True]),
    ],
    ids=["served", "not-served", "other-resources", "turned-on", "turned-off", "error-keeps"],
)
def test_discovery_says_whether_gang_objects_are_served_and_follows_changes(
    answers: tuple[Any, ...], served: list[bool]
) -> None:
    assert served_after_each_check(*answers) == served


async def test_a_stopping_manager_lets_the_reconcile_in_flight_end_and_starts_no_other() -> None:
    manager = Manager(IdleApi(), ManagerOptions())
    ended: list[tuple[str, str]] = []
    started = asyncio.Event()

    async def reconcile(key: tuple[str, str]) -> float | None:
        started.set()
        await asyncio.sleep(0.2)  # a gang's creates
        ended.append(key)
        return None

    manager.reconciler.reconcile = reconcile  # type: ignore[method-assign]
    manager._workers = [asyncio.create_task(manager._worker(NORMAL))]
    manager.queue.add(("team-a", "first"))
    await started.wait()
    manager.queue.add(("team-a", "second"))

    await manager.finish_reconciles(5)

    assert ended == [("team-a", "first")]
    assert all(worker.done() for worker in manager._workers)


async def test_a_reconcile_that_hangs_does_not_hold_a_stop_longer_than_its_bound() -> None:
    manager = Manager(IdleApi(), ManagerOptions())
    started = asyncio.Event()

    async def reconcile(key: tuple[str, str]) -> float | None:
        started.set()
        await asyncio.Event().wait()  # the apiserver does not answer
        return None

    manager.reconciler.reconcile = reconcile  # type: ignore[method-assign]
    manager._workers = [asyncio.create_task(manager._worker(NORMAL))]
    manager.queue.add(("team-a", "first"))
    await started.wait()

    async with asyncio.timeout(2):
        await manager.finish_reconciles(0.1)
    for worker in manager._workers:
        worker.cancel()

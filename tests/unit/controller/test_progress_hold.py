"""Progress-only status writes wait (boundedly) while gangs are being created; news never waits.

The reconciler runs against caches seeded with a started gang and an API that records the status
patches it receives, so each test asserts what reached the apiserver and what the job's status
says afterwards.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from tests.builders import gpu_job
from tests.unit.controller.helpers import NOW, World, merge_patch, set_phase, with_uid
from torchgate.controller import status as st
from torchgate.controller.admitter import Admitter
from torchgate.controller.metrics import ControllerMetrics
from torchgate.controller.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES

MASTER, W0 = "demo-master-0", "demo-worker-0"
RESERVATION = {MASTER: "n1", W0: "n1"}
KEY = ("default", "demo")


def cond(kind: str, status: str = "True", reason: str = "R") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": "m"}


CREATED = cond(st.CREATED, reason=st.REASON_CREATED)
RUNNING = cond(st.RUNNING, reason=st.REASON_RUNNING)
COUNTS = {"Master": {"active": 1}}


@pytest.mark.parametrize(
    ("old", "new", "progress"),
    [
        ({}, {"conditions": [CREATED], "startTime": "t0"}, True),
        (
            None,
            {"conditions": [CREATED, RUNNING], "startTime": "t0", "replicaStatuses": COUNTS},
            True,
        ),
        ({"conditions": [CREATED]}, {"conditions": [CREATED, RUNNING]}, True),
        (
            {"conditions": [CREATED, RUNNING]},
            {"conditions": [CREATED, RUNNING], "replicaStatuses": COUNTS},
            True,
        ),
        ({"conditions": [cond(st.QUEUED)]}, {"conditions": [CREATED], "startTime": "t0"}, True),
        ({"conditions": [CREATED]}, {"conditions": [CREATED, cond(st.SUCCEEDED)]}, False),
        ({"conditions": [CREATED]}, {"conditions": [CREATED, cond(st.FAILED)]}, False),
        ({"conditions": [RUNNING]}, {"conditions": [cond(st.RESTARTING)]}, False),
        ({"conditions": [RUNNING]}, {"conditions": [cond(st.RUNNING, "False")]}, False),
        ({"conditions": [CREATED]}, {"conditions": [CREATED, cond(st.SUSPENDED)]}, False),
        ({"startTime": "t0"}, {"startTime": "t1"}, False),
        ({"startTime": "t0"}, {"startTime": None}, False),
        ({}, {"completionTime": "t1"}, False),
        ({}, {"somethingElse": 1}, False),
    ],
)
def test_progress_only_tells_progress_from_news(
    old: dict[str, Any] | None, new: dict[str, Any], progress: bool
) -> None:
    assert st.is_progress_only(old, new) is progress


class StatusApi:
    """Answers status merge patches like the apiserver (the job with the patch applied)."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.patches: list[dict[str, Any]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if method == "PATCH" and path.endswith("/status"):
            self.patches.append(copy.deepcopy(body["status"]))
            self.job = merge_patch(self.job, copy.deepcopy(body))
            version = int(self.job["metadata"].get("resourceVersion", "1")) + 1
            self.job["metadata"]["resourceVersion"] = str(version)
            return copy.deepcopy(self.job)
        return body  # Events

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Rig:
    """A reconciler over caches holding one job whose two pods run, with a movable clock."""

    def __init__(self) -> None:
        world = World(with_uid(gpu_job("demo", workers=1).build()))
        world.apply(world.plan())
        world.apply(world.plan(reservation=RESERVATION))  # pods created, no status written
        world.job_raw["status"] = {}
        world.job_raw["metadata"]["resourceVersion"] = "1"
        self.world = world
        self.api = StatusApi(copy.deepcopy(world.job_raw))
        self.jobs = Informer(self.api, PYTORCHJOBS)
        self.pods = Informer(self.api, PODS)
        self.pods.index_by(job_key_of_pod)
        services = Informer(self.api, SERVICES)
        services.index_by(job_key_of_pod)
        for service in world.services.values():
            services.remember(copy.deepcopy(service))
        self.jobs.remember(copy.deepcopy(world.job_raw))
        for name, pod in world.pods.items():
            self.pods.remember(set_phase(pod, "Running", node=RESERVATION[name]))
        self.now = NOW
        self.seconds = 0.0
        self.woken: list[tuple[str, str]] = []
        self.reconciler = Reconciler(
            self.api,
            jobs=self.jobs,
            pods=self.pods,
            services=services,
            policies=lambda: (),
            priority_of=lambda name: 0,
            admitter=Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None),
            metrics=ControllerMetrics(),
            options=Options(manage_unowned=True),
            clock=lambda: self.now,
            monotonic=lambda: self.seconds,
            wake=self.woken.append,
        )

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.seconds += seconds

    def creating(self, busy: bool) -> None:
        """Another gang's creates are (not) in flight."""
        if busy:
            self.reconciler.quiet.clear()
        else:
            self.reconciler.quiet.set()

    def master_succeeds(self) -> None:
        master = self.pods.get("default", MASTER)
        assert master is not None
        self.pods.remember(set_phase(master, "Succeeded", node="n1", exit_code=0))

    def stored_status(self) -> dict[str, Any]:
        stored = self.jobs.get(*KEY)
        assert stored is not None
        status: dict[str, Any] = stored.get("status") or {}
        return status


def types(status: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in st.conditions_of(status)]


async def test_progress_is_held_while_gangs_are_created_and_written_once_when_quiet() -> None:
    rig = Rig()
    rig.creating(True)
    requeue = await rig.reconciler.reconcile(KEY)
    assert rig.api.patches == []
    assert requeue is not None
    assert 0 < requeue <= st.PROGRESS_HOLD_SECONDS
    held_start = rig.reconciler.held[KEY].status["startTime"]
    assert held_start == st.format_time(NOW)

    rig.tick(3)
    await rig.reconciler.reconcile(KEY)  # a pod event meanwhile: still busy, still held
    assert rig.api.patches == []

    rig.creating(False)
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    written = rig.stored_status()
    assert types(written) == [(st.CREATED, "True"), (st.RUNNING, "True")]
    assert written["startTime"] == held_start  # the moment it was decided, not when written
    assert written["replicaStatuses"]["Worker"]["active"] == 1
    assert KEY not in rig.reconciler.held


async def test_progress_is_written_after_the_hold_even_if_creates_never_stop() -> None:
    rig = Rig()
    rig.creating(True)
    await rig.reconciler.reconcile(KEY)
    rig.tick(st.PROGRESS_HOLD_SECONDS - 0.5)
    await rig.reconciler.reconcile(KEY)
    assert rig.api.patches == []
    rig.tick(0.5)
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert types(rig.stored_status()) == [(st.CREATED, "True"), (st.RUNNING, "True")]


async def test_news_is_written_at_once_and_carries_the_held_progress() -> None:
    rig = Rig()
    rig.creating(True)
    await rig.reconciler.reconcile(KEY)
    held_start = rig.reconciler.held[KEY].status["startTime"]
    rig.tick(2)
    rig.master_succeeds()
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    written = rig.stored_status()
    assert (st.SUCCEEDED, "True") in types(written)
    assert (st.CREATED, "True") in types(written)
    assert written["startTime"] == held_start
    assert written.get("completionTime") == st.format_time(NOW + timedelta(seconds=2))


async def test_without_other_creates_progress_is_written_at_once() -> None:
    rig = Rig()
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert types(rig.stored_status()) == [(st.CREATED, "True"), (st.RUNNING, "True")]


async def test_the_end_of_creates_wakes_the_jobs_whose_progress_is_held() -> None:
    rig = Rig()
    rig.creating(True)
    await rig.reconciler.reconcile(KEY)
    rig.creating(False)
    assert rig.woken == []
    body = {"metadata": {"name": "other-master-0", "namespace": "default"}}
    await rig.reconciler._create(PODS, "default", body)
    assert rig.woken == [KEY]


async def test_a_recreated_job_does_not_inherit_the_held_status() -> None:
    rig = Rig()
    rig.creating(True)
    await rig.reconciler.reconcile(KEY)
    assert KEY in rig.reconciler.held
    fresh = copy.deepcopy(rig.world.job_raw)
    fresh["metadata"]["uid"] = "another-uid"
    fresh["metadata"]["resourceVersion"] = "7"
    rig.jobs.remember(fresh)
    await rig.reconciler.reconcile(KEY)
    held = rig.reconciler.held.get(KEY)
    assert held is None or held.uid == "another-uid"

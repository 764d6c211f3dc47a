"""The reconciler applies the write policy: what reaches the apiserver, and when.

The reconciler runs against caches seeded with one job and an API that records the status
patches it receives (applied like the apiserver applies them), so each test asserts what was
written, what the job's stored status says afterwards, and which Events were recorded.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

import pytest

from tests.builders.job import gpu_job, with_uid
from tests.builders.pod import set_phase
from tests.unit.controller.helpers import NOW, World, merge_patch
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.ledger import Reservation
from torchgate.controller.job import status as st
from torchgate.controller.job.model import Event
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.job.writes import StatusWritePolicy
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.errors import ServerError
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES
from torchgate.pytorchjob import reasons
from torchgate.pytorchjob.conditions import conditions_of

MASTER, W0 = "demo-master-0", "demo-worker-0"
RESERVATION = {MASTER: "n1", W0: "n1"}
KEY = ("default", "demo")
POLICY = StatusWritePolicy(busy_hold_seconds=10.0, counts_interval_seconds=1.0)


class StatusApi:
    """Answers status merge patches like the apiserver (the job with the patch applied)."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.patches: list[dict[str, Any]] = []
        self.created: list[str] = []
        self.unreachable = False  # every write fails as if the apiserver did not answer
        self.overloaded: set[str] = set()  # the creates of these names fail (429, 5xx)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if self.unreachable or (method == "POST" and body["metadata"]["name"] in self.overloaded):
            raise ServerError(0, "", "connection refused", method, path)
        if method == "PATCH" and path.endswith("/status"):
            self.patches.append(copy.deepcopy(body["status"]))
            self.job = merge_patch(self.job, copy.deepcopy(body))
            version = int(self.job["metadata"].get("resourceVersion", "1")) + 1
            self.job["metadata"]["resourceVersion"] = str(version)
            return copy.deepcopy(self.job)
        if method == "POST":
            self.created.append(body["metadata"]["name"])
        return body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Events:
    """Stands in for the EventRecorder: what the reconciler recorded, in order."""

    def __init__(self) -> None:
        self.recorded: list[str] = []

    def record(self, job: Mapping[str, Any], event: Event) -> None:
        self.recorded.append(event.reason)


class Rig:
    """A reconciler over caches holding one job, with a movable clock."""

    def __init__(self, *, running: bool = True) -> None:
        world = World(with_uid(gpu_job("demo", workers=1).build()))
        if running:
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
        self.admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
        self.requeued: list[tuple[str, str]] = []  # the jobs the reconciler asked to look at again
        self.reconciler = Reconciler(
            self.api,
            jobs=self.jobs,
            pods=self.pods,
            services=services,
            policies=lambda: (),
            priority_of=lambda name: 0,
            admitter=self.admitter,
            metrics=ControllerMetrics(),
            options=Options(manage_unowned=True),
            clock=lambda: self.now,
            monotonic=lambda: self.seconds,
            write_policy=POLICY,
            requeue=self.requeued.append,
        )
        self.events = Events()
        self.reconciler.events = self.events  # type: ignore[assignment]

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.seconds += seconds

    def reserve(self) -> None:
        uid = self.world.job_raw["metadata"]["uid"]
        self.admitter.ledger.reservations[KEY] = Reservation(uid, RESERVATION, {}, 0.0, 0.0)

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
    return [(c["type"], c["status"]) for c in conditions_of(status)]


async def test_on_a_quiet_cluster_progress_is_written_at_once() -> None:
    rig = Rig()
    assert await rig.reconciler.reconcile(KEY) is None
    assert len(rig.api.patches) == 1
    written = rig.stored_status()
    assert types(written) == [(reasons.CREATED, "True"), (reasons.RUNNING, "True")]
    assert written["startTime"] == st.format_time(NOW)
    assert written["replicaStatuses"]["Worker"]["active"] == 1
    assert rig.events.recorded == [], "Created and Running are conditions only"
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1, "nothing more to write"


async def test_counts_alone_are_written_at_most_once_a_second() -> None:
    rig = Rig()
    await rig.reconciler.reconcile(KEY)
    rig.tick(0.25)
    worker = rig.pods.get("default", W0)
    assert worker is not None
    rig.pods.remember(set_phase(worker, "Pending", node="n1"))
    requeue = await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert requeue == pytest.approx(0.75)
    rig.tick(0.75)
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 2
    assert rig.stored_status()["replicaStatuses"]["Worker"]["active"] == 0


async def test_progress_waits_while_creates_are_pending_at_most_the_busy_hold() -> None:
    rig = Rig()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        requeue = await rig.reconciler.reconcile(KEY)
        assert requeue == pytest.approx(POLICY.busy_hold_seconds)
        rig.tick(POLICY.busy_hold_seconds - 0.5)
        assert await rig.reconciler.reconcile(KEY) == pytest.approx(0.5)
        assert rig.api.patches == []
        assert rig.events.recorded == []
        rig.tick(0.5)
        await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert types(rig.stored_status()) == [(reasons.CREATED, "True"), (reasons.RUNNING, "True")]


async def test_held_progress_is_written_once_the_creates_are_done() -> None:
    rig = Rig()
    async with rig.reconciler.creates.take():
        await rig.reconciler.reconcile(KEY)
        rig.tick(3)
    await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    # Planned afresh when written; startTime is when the gang's pods were created all the same.
    assert rig.stored_status()["startTime"] == st.format_time(NOW)


async def test_held_progress_goes_out_when_the_last_pending_create_ends_not_at_the_hold() -> None:
    rig = Rig()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        assert await rig.reconciler.reconcile(KEY) == pytest.approx(POLICY.busy_hold_seconds)
        rig.tick(3)
    # The wave's creates are done 3 s into a 10 s hold: the job is looked at again now.
    while rig.requeued:
        await rig.reconciler.reconcile(rig.requeued.pop())
    assert len(rig.api.patches) == 1
    assert types(rig.stored_status()) == [(reasons.CREATED, "True"), (reasons.RUNNING, "True")]


async def test_news_is_written_at_once_while_creates_are_pending() -> None:
    rig = Rig()
    async with rig.reconciler.creates.take():
        await rig.reconciler.reconcile(KEY)
        rig.tick(2)
        rig.master_succeeds()
        await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    written = rig.stored_status()
    assert (reasons.SUCCEEDED, "True") in types(written)
    assert (reasons.CREATED, "True") in types(written)
    assert written.get("completionTime") == st.format_time(NOW + timedelta(seconds=2))
    assert reasons.REASON_SUCCEEDED in rig.events.recorded


async def test_events_go_out_with_the_status_write_each_once() -> None:
    rig = Rig(running=False)
    rig.reserve()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        await rig.reconciler.reconcile(KEY)
        assert {MASTER, W0} <= set(rig.api.created)
        assert rig.api.patches == []
        assert rig.events.recorded == [], "the Events wait with the status"
        rig.tick(POLICY.busy_hold_seconds)
        await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert types(rig.stored_status()) == [(reasons.CREATED, "True")]
    assert rig.events.recorded == ["GangAdmitted"]


async def test_an_apply_that_fails_holds_no_event_and_the_retry_sends_its_action_once() -> None:
    rig = Rig(running=False)
    rig.reserve()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        rig.api.unreachable = True
        with pytest.raises(ServerError):
            await rig.reconciler.reconcile(KEY)  # the status is put off; no pod is created
        rig.api.unreachable = False
        await rig.reconciler.reconcile(KEY)  # retried: creates the gang, status put off again
        assert {MASTER, W0} <= set(rig.api.created)
        rig.tick(POLICY.busy_hold_seconds)
        await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert rig.events.recorded == ["GangAdmitted"], "one admission, announced once"


async def test_an_apply_that_fails_after_creating_pods_holds_their_event_for_the_retry() -> None:
    rig = Rig(running=False)
    rig.reserve()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        rig.api.overloaded = {W0}
        with pytest.raises(ServerError):
            await rig.reconciler.reconcile(KEY)  # the Master is created, the Worker is not
        assert MASTER in rig.api.created
        rig.api.overloaded = set()
        await rig.reconciler.reconcile(KEY)  # retried: creates the Worker
        assert W0 in rig.api.created
        rig.tick(POLICY.busy_hold_seconds)
        await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert rig.events.recorded == ["GangAdmitted"], "the gang was admitted: announced once"


async def test_an_apply_that_fails_keeps_the_events_held_of_actions_done_before() -> None:
    rig = Rig(running=False)
    rig.reserve()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        await rig.reconciler.reconcile(KEY)  # creates the gang; its status and Event held
        rig.tick(POLICY.busy_hold_seconds)
        rig.api.unreachable = True
        with pytest.raises(ServerError):
            await rig.reconciler.reconcile(KEY)  # the status write fails
        rig.api.unreachable = False
        await rig.reconciler.reconcile(KEY)
    assert len(rig.api.patches) == 1
    assert rig.events.recorded == ["GangAdmitted"]


async def test_a_recreated_job_does_not_inherit_the_wait_of_the_old_one() -> None:
    rig = Rig()
    async with rig.reconciler.creates.take():
        await rig.reconciler.reconcile(KEY)
        rig.tick(9)
        fresh = copy.deepcopy(rig.world.job_raw)
        fresh["metadata"]["uid"] = "another-uid"
        fresh["metadata"]["resourceVersion"] = "7"
        rig.jobs.remember(fresh)
        requeue = await rig.reconciler.reconcile(KEY)
    assert rig.api.patches == []
    assert requeue == pytest.approx(POLICY.busy_hold_seconds)


async def test_a_stopping_leader_records_the_events_held_for_a_status_write_once() -> None:
    rig = Rig(running=False)
    rig.reserve()
    async with rig.reconciler.creates.take():  # another gang's create is in flight
        await rig.reconciler.reconcile(KEY)
    assert {MASTER, W0} <= set(rig.api.created)
    assert rig.api.patches == []

    rig.reconciler.record_held_events()  # the leader stops before the status goes out

    assert rig.events.recorded == ["GangAdmitted"]
    rig.reconciler.record_held_events()
    assert rig.events.recorded == ["GangAdmitted"]


async def test_held_events_of_a_job_deleted_and_recreated_are_not_recorded_on_the_new_one() -> None:
    rig = Rig(running=False)
    rig.reserve()
    async with rig.reconciler.creates.take():
        await rig.reconciler.reconcile(KEY)
    recreated = copy.deepcopy(rig.jobs.get(*KEY))
    assert recreated is not None
    recreated["metadata"]["uid"] = "another-uid"
    recreated["metadata"]["resourceVersion"] = "99"
    rig.jobs.remember(recreated)

    rig.reconciler.record_held_events()

    assert rig.events.recorded == []

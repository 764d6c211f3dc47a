"""The admitter grows a running elastic gang by its waiting Workers (``ledger`` rule 7).

A scale (or room there was none for at admission) leaves Workers beyond ``minAvailable`` out of
a running gang; its reconcile asks for them (``Admitter.grow``) and the admitter places them
after the cycle's waiting gangs, on the room they left, within the team's quota, nodes of the
gang first. Assertions are on the reservations made (what the job's reconcile creates).
"""

from __future__ import annotations

from typing import Any

from tests.builders.job import gpu_job, job, parsed_job, with_uid
from tests.builders.node import node
from tests.builders.pod import pod
from tests.builders.team import parsed_team
from tests.unit.controller.helpers import ask
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.nodes import job_demands
from torchgate.controller.admission.waiting import GrowthRequest
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.pool import TeamQuota

KEY = ("default", "el")
UID = "uid-el"
W0, W1, W2, W3 = (f"el-worker-{i}" for i in range(4))


def make(
    nodes: int, *, gpus: int = 8, teams: dict[str, TeamQuota] | None = None, **kw: Any
) -> tuple[Admitter, list[tuple[str, str]]]:
    woken: list[tuple[str, str]] = []
    admitter = Admitter(
        on_admit_job=woken.append, on_reason=woken.append, teams=lambda: teams or {}, **kw
    )
    for index in range(nodes):
        admitter.on_node("ADDED", node(f"n{index}", gpus=gpus), None)
    return admitter, woken


def elastic(workers: int, gpus: int, namespace: str = "default") -> dict[str, Any]:
    built = job("el").workers(workers, gpus=gpus).elastic(minReplicas=2, maxReplicas=4)
    raw = with_uid(built.scheduling(minAvailable=2).build(), uid=UID)
    raw["metadata"]["namespace"] = namespace
    return raw


def running(
    admitter: Admitter, placed: dict[str, str], gpus: int, namespace: str = "default"
) -> tuple[str, str]:
    """The gang's pods, Running on their nodes as the ledger sees them; its key."""
    key = (namespace, "el")
    for name, where in placed.items():
        admitter.on_pod("ADDED", pod(name, gang=key, node=where, gpus=gpus), None)
    return key


def growth(raw: dict[str, Any], waiting: tuple[str, ...]) -> GrowthRequest:
    """What the running gang's reconcile asks for its waiting Workers."""
    spec = parsed_job(raw)
    demands = tuple(d for d in job_demands(spec) if d.pod_name in waiting)
    return GrowthRequest(spec.uid, demands, 0, "2026-01-01T00:00:00Z", GpuSources("nvidia.com/gpu"))


def test_a_waiting_worker_is_reserved_a_node_and_its_reconcile_is_woken() -> None:
    admitter, woken = make(nodes=3)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)

    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))
    admitter.cycle()

    assert admitter.reservation_for(key, UID) == {W2: "n2"}
    assert key in woken


def test_the_gangs_own_nodes_are_used_first() -> None:
    admitter, _ = make(nodes=3)
    key = running(admitter, {W0: "n1", W1: "n2"}, gpus=4)  # n0 is empty, n1 and n2 half used

    admitter.grow(key, growth(elastic(4, gpus=4), (W2, W3)))
    admitter.cycle()

    assert admitter.reservation_for(key, UID) == {W2: "n1", W3: "n2"}


def test_no_room_reserves_nothing_until_room_frees() -> None:
    admitter, _ = make(nodes=3)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)
    admitter.on_pod("ADDED", pod("other", node="n2", gpus=8), None)
    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))

    admitter.cycle()
    assert admitter.reservation_for(key, UID) is None
    assert admitter.growth_wait(key) == "Capacity"

    admitter.on_pod("DELETED", pod("other", node="n2", gpus=8), None)
    admitter.cycle()
    assert admitter.reservation_for(key, UID) == {W2: "n2"}
    assert admitter.growth_wait(key) is None


def test_a_queued_job_outranks_a_running_jobs_growth() -> None:
    admitter, _ = make(nodes=3)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)
    queued = ask(admitter, job("q").master(gpus=8).build(), created="2026-06-01T00:00:00Z")
    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))

    assert admitter.cycle() == [queued]

    assert admitter.reservation_for(key, UID) is None
    assert admitter.reservation_for(queued, "uid-q") == {"q-master-0": "n2"}


def test_growth_stays_within_the_teams_nominal_quota() -> None:
    teams = {"a": parsed_team("a", 24, borrowing=8, namespaces=["ns-a"])}
    admitter, _ = make(nodes=4, teams=teams)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8, namespace="ns-a")

    admitter.grow(key, growth(elastic(4, gpus=8, namespace="ns-a"), (W2, W3)))
    admitter.cycle()

    assert admitter.reservation_for(key, UID) == {W2: "n2"}, "24 GPUs: one more Worker, no more"
    assert admitter.growth_wait(key) == "Quota"


def test_a_growth_no_longer_asked_for_is_not_placed() -> None:
    admitter, _ = make(nodes=3)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)
    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))

    admitter.grow(key, None)  # scaled down again before a cycle
    admitter.cycle()

    assert admitter.reservation_for(key, UID) is None


def test_a_gang_grows_again_once_the_ledger_has_its_grown_pod() -> None:
    admitter, _ = make(nodes=4)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)
    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))
    admitter.cycle()
    admitter.on_pod("ADDED", pod(W2, gang=key, node="n2", gpus=8), None)

    admitter.grow(key, growth(elastic(4, gpus=8), (W3,)))  # scaled again, nothing else queued
    admitter.cycle()

    assert admitter.reservation_for(key, UID) == {W3: "n3"}
    assert admitter.jobs_on("n2") == {key}


def test_a_node_added_while_no_job_queues_takes_the_waiting_worker() -> None:
    admitter, _ = make(nodes=2)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)
    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))
    admitter.cycle()
    assert admitter.reservation_for(key, UID) is None

    admitter.on_node("ADDED", node("n2", gpus=8), None)
    admitter.cycle()

    assert admitter.reservation_for(key, UID) == {W2: "n2"}


def test_a_reserved_worker_no_longer_expected_frees_its_node() -> None:
    admitter, _ = make(nodes=3)
    key = running(admitter, {W0: "n0", W1: "n1"}, gpus=8)
    admitter.grow(key, growth(elastic(3, gpus=8), (W2,)))
    admitter.cycle()
    assert admitter.free()["n2"].get("nvidia.com/gpu") == 0

    admitter.unreserve(key, (W2,))  # scaled down before el-worker-2 was created
    admitter.grow(key, None)

    assert admitter.reservation_for(key, UID) is None
    assert admitter.free()["n2"].get("nvidia.com/gpu", 0) > 0


def test_growth_keeps_off_the_nodes_backfill_keeps_for_the_head_gang() -> None:
    wall = 1_000.0
    admitter, _ = make(nodes=4, starvation_seconds=10**9, wall_clock=lambda: wall)
    old = ("default", "old")  # n0 and n1, ends by 30 s from now
    for index in range(2):
        admitter.on_pod("ADDED", pod(f"old-{index}", gang=old, node=f"n{index}", gpus=8), None)
    admitter.note(old, priority=0, gpus=GpuSources("nvidia.com/gpu"), ends_by=wall + 30)
    key = running(admitter, {W0: "n3", W1: "n3"}, gpus=4)  # n3 full, n2 free
    head = ask(admitter, gpu_job("head", workers=2, gpus=8).build())  # 3 nodes: n0-n2 at 30 s

    admitter.grow(key, growth(elastic(3, gpus=4), (W2,)))
    admitter.cycle()

    assert head in admitter.queue.waiting
    assert admitter.reservation_for(key, UID) is None, "n2 is the head's once old ends"


def test_without_a_head_reservation_the_free_node_takes_the_growth() -> None:
    admitter, _ = make(nodes=4)
    key = running(admitter, {W0: "n3", W1: "n3"}, gpus=4)
    for index in range(2):
        admitter.on_pod("ADDED", pod(f"old-{index}", node=f"n{index}", gpus=8), None)
    head = ask(admitter, gpu_job("head", workers=2, gpus=8).build())  # no end known: no reservation

    admitter.grow(key, growth(elastic(3, gpus=4), (W2,)))
    admitter.cycle()

    assert head in admitter.queue.waiting
    assert admitter.reservation_for(key, UID) == {W2: "n2"}


def test_growth_takes_no_room_a_freed_wave_is_held_for() -> None:
    wall = 1_000.0
    admitter, _ = make(
        nodes=3, starvation_seconds=10**9, wall_clock=lambda: wall, wave_hold_seconds=2.0
    )
    old = ("default", "old")  # the part of the wave still running on n1, due in 5 s
    admitter.on_pod("ADDED", pod("old-0", gang=old, node="n1", gpus=8), None)
    admitter.note(old, priority=0, gpus=GpuSources("nvidia.com/gpu"), ends_by=wall + 5)
    key = running(admitter, {W0: "n2", W1: "n2"}, gpus=4)  # n2 full, n0 free
    alike = {"activeDeadlineSeconds": 30}
    first = gpu_job("first", workers=0, gpus=8).run_policy(**alike).build()
    ask(admitter, first, created="2026-01-01T00:00:00Z")
    second = gpu_job("second", workers=1, gpus=8).run_policy(**alike).build()
    ask(admitter, second, created="2026-01-01T00:00:01Z")

    admitter.grow(key, growth(elastic(3, gpus=4), (W2,)))
    assert admitter.cycle() == [], "n0 is free, but the rest of its wave is due"

    assert admitter.reservation_for(key, UID) is None

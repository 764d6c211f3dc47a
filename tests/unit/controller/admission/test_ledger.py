"""The capacity ledger: live pods per node, reservations, holds, evictions and what is free."""

from __future__ import annotations

import copy

from hypothesis import example, given, settings
from hypothesis import strategies as hs

from tests.builders.node import node, parsed_node
from tests.builders.pod import pod
from tests.unit.controller.helpers import free_of
from torchgate.controller.admission.ledger import CapacityLedger, Reservation
from torchgate.controller.admission.quota import TeamTotals
from torchgate.pytorchjob.devices import GpuSources

GPU = "nvidia.com/gpu"


def test_free_capacity_subtracts_bound_planned_and_terminating_pods() -> None:
    nodes = [parsed_node("n1"), parsed_node("n2")]
    pods = [
        pod("bound", gpus=2, node="n1"),
        pod("planned", gpus=3, planned="n1", phase="Pending"),
        pod("terminating", gpus=1, node="n2", deleted="2026-01-01T00:00:00Z"),
        pod("done", gpus=4, node="n2", phase="Succeeded"),
        pod("failed", gpus=4, node="n2", phase="Failed"),
        pod("elsewhere", gpus=4, node="n9"),
    ]
    free = free_of(nodes, pods)
    assert free["n1"][GPU] == 3000
    assert free["n1"]["pods"] == 108_000
    assert free["n2"][GPU] == 7000
    assert free["n2"]["pods"] == 109_000


def test_free_capacity_is_never_negative() -> None:
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1", gpus=2))
    ledger.on_pod(("ns", "big"), pod("big", gpus=4, node="n1"))
    assert ledger.free()["n1"][GPU] == 0


def held_ledger() -> CapacityLedger:
    """Victim job ``low`` runs two pods on n1; ``high`` holds n1 for them to go."""
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1"))
    for name in ("low-0", "low-1"):
        ledger.on_pod(("ns", name), pod(name, gang=("ns", "low"), node="n1", gpus=4))
    reservation = Reservation("uid-high", {"high-0": "n1"}, {"high-0": {GPU: 8000}}, 0.0, 0.0)
    ledger.hold(("ns", "high"), reservation, (("ns", "low"),))
    return ledger


def test_a_hold_counts_in_full_and_marks_its_victims() -> None:
    ledger = held_ledger()
    assert ledger.free()["n1"][GPU] == 0, "victims' pods and the hold both count"
    assert ledger.preempted_by(("ns", "low")) == ("ns", "high")
    assert [a.key for a in ledger.holding({}, 0.0)] == [("ns", "high")], "victims are not counted"
    assert ledger.has_capacity_for(("ns", "high"), "uid-high")


def test_a_hold_settles_into_a_reservation_once_the_victims_pods_are_gone() -> None:
    ledger = held_ledger()
    for name in ("low-0", "low-1"):
        ledger.on_pod(("ns", name), None)
    assert ledger.victim_pods_left(("ns", "high")) == []
    ledger.settle(("ns", "high"), admitted_at=5.0)
    assert ledger.reservation_for(("ns", "high"), "uid-high") == {"high-0": "n1"}
    assert ("ns", "high") not in ledger.holds


def test_victim_pods_are_stuck_only_when_all_are_past_their_deletion_time() -> None:
    ledger = held_ledger()
    deleted = "2026-01-01T00:00:00Z"  # 1767225600
    ledger.on_pod(
        ("ns", "low-0"), pod("low-0", gang=("ns", "low"), node="n1", gpus=4, deleted=deleted)
    )
    left = ledger.victim_pods_left(("ns", "high"))
    assert not ledger.stuck(left, late=2e9), "low-1 was never deleted"
    ledger.on_pod(
        ("ns", "low-1"), pod("low-1", gang=("ns", "low"), node="n1", gpus=4, deleted=deleted)
    )
    assert not ledger.stuck(left, late=1767225599.0)
    assert ledger.stuck(left, late=1767225600.0)


def test_an_admission_sets_the_gangs_deadline_to_its_own_none_inherited() -> None:
    # The job ran with a deadline; deleted and created again under its name without one, its
    # pods still going: forgetting it keeps their deadline, admitting the new job drops it.
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1"))
    ledger.on_node("ADDED", node("n2"))
    key = ("ns", "a")
    earlier = Reservation("uid-a", {"a-0": "n1"}, {"a-0": {GPU: 8000}}, 0.0, 0.0)
    ledger.reserve(key, earlier, admitted_at=0.0, ends_by=500.0)
    ledger.on_pod(("ns", "a-0"), pod("a-0", gang=key, node="n1", gpus=8))
    ledger.forget(key)
    assert [a.ends_by for a in ledger.holding({}, 0.0)] == [500.0], "its pods keep their deadline"
    again = Reservation("uid-a-again", {"a-0": "n2"}, {"a-0": {GPU: 8000}}, 0.0, 0.0)
    ledger.reserve(key, again, admitted_at=10.0)
    assert [a.ends_by for a in ledger.holding({}, 10.0)] == [None]
    ledger.reserve(key, again, admitted_at=10.0, ends_by=900.0)
    assert [a.ends_by for a in ledger.holding({}, 10.0)] == [900.0]


def test_a_forgotten_victim_stays_one_while_its_pods_hold_their_nodes() -> None:
    ledger = held_ledger()
    assert ledger.forget(("ns", "low")) is False, "it held no reservation or hold"
    assert ledger.preempted_by(("ns", "low")) == ("ns", "high")
    for name in ("low-0", "low-1"):
        ledger.on_pod(("ns", name), None)
    ledger.forget(("ns", "low"))
    assert ledger.preempted_by(("ns", "low")) is None


# ------------------------------------------------------------------ followed by events

# One event of the ledger's life: (what, which job or node, which node, GPUs).
events = hs.lists(
    hs.tuples(
        hs.sampled_from(
            ("node", "pod", "pod-gone", "reserve", "release", "hold", "settle", "note", "forget")
        ),
        hs.integers(0, 3),
        hs.integers(0, 3),
        hs.sampled_from((1, 2, 4, 8)),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(events)
@example([("pod", 0, 0, 1), ("note", 0, 0, 8)])  # a running gang's priority changes
@example([("reserve", 0, 1, 8), ("pod", 0, 1, 8), ("pod-gone", 0, 1, 8)])  # seen, then gone
def test_free_capacity_kept_from_its_changes_and_gang_records_equal_those_read_afresh(
    steps: list[tuple[str, int, int, int]],
) -> None:
    ledger = CapacityLedger()
    for name in ("n0", "n1", "n2"):
        ledger.on_node("ADDED", node(name))
    kept = ledger.free()
    ledger.changed_free()
    for what, job, where, gpus in steps:
        key, node_name = ("ns", f"j{job}"), f"n{where}"
        if what == "node":
            ledger.on_node("ADDED", node(node_name, gpus=gpus))
        elif what == "pod":
            name = f"j{job}-{where % 2}"
            ledger.on_pod(("ns", name), pod(name, gang=key, node=node_name, gpus=gpus))
        elif what == "pod-gone":
            ledger.on_pod(("ns", f"j{job}-{where % 2}"), None)
        elif what in ("reserve", "hold"):
            reservation = Reservation(
                f"uid-{job}", {f"j{job}-0": node_name}, {f"j{job}-0": {GPU: gpus * 1000}}, 0, 0
            )
            if what == "reserve":
                ledger.reserve(key, reservation, admitted_at=1.0)
            else:
                ledger.hold(key, reservation, (("ns", f"j{(job + 1) % 4}"),))
        elif what == "release":
            ledger.release(key)
        elif what == "settle" and key in ledger.holds:
            ledger.settle(key, admitted_at=2.0)
        elif what == "note":
            ledger.note(key, priority=gpus, gpus=GpuSources(GPU))
        elif what == "forget":
            ledger.forget(key)
        kept |= ledger.changed_free()
        fresh = copy.deepcopy(ledger)
        fresh._owner = None  # the records read afresh (as for owners never asked with)
        assert kept == ledger.free()
        owner = {"ns": "team"}
        assert ledger.holding(owner, 9.0) == fresh.holding(owner, 9.0)
        assert ledger.team_totals(owner, 9.0) == TeamTotals.of(fresh.holding(owner, 9.0))


def test_a_gangs_deadline_outlives_its_job_until_its_last_pod_is_gone() -> None:
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1", gpus=8))
    job = ("ns", "done")
    for name in ("done-master-0", "done-worker-0"):
        ledger.on_pod(("ns", name), pod(name, gang=job, gpus=4, node="n1"))
    ledger.note(job, priority=0, gpus=GpuSources(GPU), ends_by=130.0)
    assert [a.ends_by for a in ledger.holding({}, 0.0)] == [130.0]
    ledger.forget(job)  # finished: its Worker is still being deleted
    ledger.on_pod(("ns", "done-master-0"), None)
    assert [a.ends_by for a in ledger.holding({}, 0.0)] == [130.0]
    ledger.on_pod(("ns", "done-worker-0"), None)
    assert ledger.holding({}, 0.0) == []
    assert job not in ledger.ends_by


def test_running_gangs_follow_their_namespaces_team_and_leave_its_totals_with_their_pods() -> None:
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1", gpus=8))
    for job, gpus in (("a", 2), ("b", 4)):
        ledger.on_pod(("ns", f"{job}-0"), pod(f"{job}-0", gang=("ns", job), node="n1", gpus=gpus))
    assert [a.team for a in ledger.holding({"ns": "red"}, 0.0)] == ["red", "red"]
    red = ledger.team_totals({"ns": "red"}, 0.0)
    assert (red.usage["red"]["gpus"], red.gangs) == (6000, {"red": 2})
    assert [a.team for a in ledger.holding({"ns": "blue"}, 0.0)] == ["blue", "blue"]
    ledger.on_pod(("ns", "a-0"), None)
    blue = ledger.team_totals({"ns": "blue"}, 0.0)
    assert (blue.usage["blue"]["gpus"], blue.gangs) == (4000, {"blue": 1})
    assert [a.key for a in ledger.holding({"ns": "blue"}, 0.0)] == [("ns", "b")]

"""The capacity ledger: live pods per node, reservations, holds, evictions and what is free."""

from __future__ import annotations

from tests.builders.node import node, parsed_node
from tests.builders.pod import pod
from tests.unit.controller.helpers import free_of
from torchgate.controller.admission.ledger import CapacityLedger, Reservation

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


def test_a_forgotten_victim_stays_one_while_its_pods_hold_their_nodes() -> None:
    ledger = held_ledger()
    assert ledger.forget(("ns", "low")) is False, "it held no reservation or hold"
    assert ledger.preempted_by(("ns", "low")) == ("ns", "high")
    for name in ("low-0", "low-1"):
        ledger.on_pod(("ns", name), None)
    ledger.forget(("ns", "low"))
    assert ledger.preempted_by(("ns", "low")) is None

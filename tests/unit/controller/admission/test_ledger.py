"""The capacity ledger: live pods per node, reservations, holds, evictions and what is free."""

from __future__ import annotations

from typing import Any

from tests.builders import container, node
from tests.unit.controller.helpers import free_of
from torchgate.controller.admission.ledger import CapacityLedger, Reservation
from torchgate.controller.admission.nodes import NodeView, node_view

GPU = "nvidia.com/gpu"


def view(name: str, **kw: Any) -> NodeView:
    result = node_view(node(name, **kw))
    assert result is not None
    return result


def raw_pod(
    name: str, *, gpus: int = 1, node_name: str | None = None, planned: str | None = None, **kw: Any
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {"containers": [container(gpus=gpus)]},
        "status": {"phase": kw.get("phase", "Running")},
    }
    if node_name:
        pod["spec"]["nodeName"] = node_name
    if planned:
        pod["metadata"]["annotations"] = {"torchgate.io/planned-node": planned}
    if kw.get("terminating"):
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def gang_pod(job: str, name: str, node_name: str, *, deleted: str | None = None) -> dict[str, Any]:
    pod = raw_pod(name, gpus=4, node_name=node_name)
    pod["metadata"].update(
        namespace="ns",
        labels={
            "training.kubeflow.org/operator-name": "torchgate",
            "training.kubeflow.org/job-name": job,
        },
    )
    if deleted:
        pod["metadata"]["deletionTimestamp"] = deleted
    return pod


def test_free_capacity_subtracts_bound_planned_and_terminating_pods() -> None:
    nodes = [view("n1"), view("n2")]
    pods = [
        raw_pod("bound", gpus=2, node_name="n1"),
        raw_pod("planned", gpus=3, planned="n1", phase="Pending"),
        raw_pod("terminating", gpus=1, node_name="n2", terminating=True),
        raw_pod("done", gpus=4, node_name="n2", phase="Succeeded"),
        raw_pod("failed", gpus=4, node_name="n2", phase="Failed"),
        raw_pod("elsewhere", gpus=4, node_name="n9"),
    ]
    free = free_of(nodes, pods)
    assert free["n1"][GPU] == 3000
    assert free["n1"]["pods"] == 108_000
    assert free["n2"][GPU] == 7000
    assert free["n2"]["pods"] == 109_000


def test_free_capacity_is_never_negative() -> None:
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1", gpus=2))
    ledger.on_pod(("ns", "big"), raw_pod("big", gpus=4, node_name="n1"))
    assert ledger.free()["n1"][GPU] == 0


def held_ledger() -> CapacityLedger:
    """Victim job ``low`` runs two pods on n1; ``high`` holds n1 for them to go."""
    ledger = CapacityLedger()
    ledger.on_node("ADDED", node("n1"))
    for name in ("low-0", "low-1"):
        ledger.on_pod(("ns", name), gang_pod("low", name, "n1"))
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
    ledger.on_pod(("ns", "low-0"), gang_pod("low", "low-0", "n1", deleted=deleted))
    left = ledger.victim_pods_left(("ns", "high"))
    assert not ledger.stuck(left, late=2e9), "low-1 was never deleted"
    ledger.on_pod(("ns", "low-1"), gang_pod("low", "low-1", "n1", deleted=deleted))
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

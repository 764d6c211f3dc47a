"""``disruption``: what took a gang's member, and which nodes count as lost.

Each rule is table-tested on one member; ``find`` on whole gangs, and a property test checks that
the gang's cause is always the most severe of its members' and lists every member it hit.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from tests.builders.node import node
from tests.builders.pod import (
    deleted_with_grace,
    disruption_target,
    ended,
    pod,
    set_phase,
    tolerating,
)
from tests.unit.controller.helpers import NOW
from torchgate.controller.job import disruption as dis
from torchgate.controller.job.disruption import NodeHealth, TimedTaint
from torchgate.controller.quarantine.rules import Fault, Outage
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.taints import Taint

LOST_AFTER = 30.0
# What the kubelet writes on a pod it evicts under node pressure, and on one it terminates for a
# graceful node shutdown (the condition's reason is TerminationByKubelet for both).
PRESSURE_MESSAGE = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi."
)
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
GPU_HEALTH = Taint("nvidia.com/gpu-health", "unhealthy", "NoExecute")


def member(
    name: str = "demo-worker-0",
    *,
    node_name: str | None = "a100-1",
    phase: str = "Running",
    tolerations: list[dict[str, Any]] | None = None,
    deleted_at: float | None = None,
    ended_at: float | None = None,
    disrupted_at: float | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """A member of the gang; times are seconds relative to ``NOW``."""
    raw = pod(name, node=node_name, phase=phase)
    if deleted_at is not None:
        raw = deleted_with_grace(raw, at=NOW + timedelta(seconds=deleted_at))
    if ended_at is not None:
        raw = ended(raw, at=at(ended_at))
    if disrupted_at is not None:
        raw = disruption_target(raw, at=at(disrupted_at))
    if tolerations:
        raw = tolerating(raw, *tolerations)
    return set_phase(raw, phase, reason=reason) if reason is not None else raw


def at(seconds: float) -> str:
    return format_time(NOW + timedelta(seconds=seconds))


def not_ready(status: str = "Unknown", since: float = -10, name: str = "a100-1") -> NodeHealth:
    return NodeHealth(name, ready=status, ready_since=NOW + timedelta(seconds=since))


def tainted(
    taint: Taint = GPU_HEALTH, added: float | None = -5, name: str = "a100-1"
) -> NodeHealth:
    when = None if added is None else NOW + timedelta(seconds=added)
    return NodeHealth(name, no_execute=(TimedTaint(taint, when),))


def one(
    member: dict[str, Any], health: NodeHealth | None = None, *, gone: bool = False
) -> dis.Finding:
    nodes = {health.name: health} if health is not None else {}
    return dis.judge(member, gone=gone, nodes=nodes, now=NOW, lost_after=LOST_AFTER)


# ------------------------------------------------------------------ reading nodes


def test_node_health_reads_readiness_and_only_no_execute_taints() -> None:
    raw = node(
        "a100-1",
        taints=[
            {"key": "nvidia.com/gpu-health", "value": "unhealthy", "effect": "NoExecute",
             "timeAdded": at(-5)},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        ],
    )  # fmt: skip
    raw["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": at(-12)}
    ]
    health = dis.node_health(raw)
    assert health == NodeHealth(
        "a100-1",
        ready="Unknown",
        ready_since=NOW - timedelta(seconds=12),
        no_execute=(TimedTaint(GPU_HEALTH, NOW - timedelta(seconds=5)),),
    )


@pytest.mark.parametrize(
    ("ready", "shutting_down"),
    [
        pytest.param(
            {"status": "False", "reason": "KubeletNotReady", "message": "node is shutting down"},
            True,
            id="the-kubelets-shutdown",
        ),
        pytest.param(
            {
                "status": "False",
                "reason": "KubeletNotReady",
                "message": "[container runtime network not ready: NetworkReady=false, "
                "node is shutting down]",
            },
            True,
            id="joined-with-other-errors",
        ),
        pytest.param(
            {
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
            },
            False,
            id="heartbeats-stopped",
        ),
        pytest.param(
            {"status": "False", "reason": "KubeletNotReady", "message": "PLEG is not healthy"},
            False,
            id="another-not-ready",
        ),
    ],
)
def test_node_health_reads_a_graceful_shutdown_from_the_kubelets_ready_condition(
    ready: dict[str, str], shutting_down: bool
) -> None:
    raw = node("a100-1")
    raw["status"]["conditions"] = [{"type": "Ready", "lastTransitionTime": at(-12), **ready}]
    assert dis.node_health(raw).shutting_down is shutting_down


# ------------------------------------------------------------------ rule 1: lost nodes


@pytest.mark.parametrize(
    ("health", "member", "cause", "recheck"),
    [
        (NodeHealth("a100-1"), member(), None, None),
        (not_ready("Unknown", since=-10), member(), None, 20.0),
        (not_ready("False", since=-29), member(), None, 1.0),
        (not_ready("Unknown", since=-30), member(), "NodeLost", None),
        (not_ready("False", since=-600), member(), "NodeLost", None),
        (dis.deleted_node("a100-1"), member(), "NodeLost", None),
        (dis.deleted_node("a100-1"), member(phase="Succeeded"), None, None),
        (not_ready("Unknown", since=-600), member(phase="Failed", ended_at=-700), None, None),
        (NodeHealth("a100-1", ready=""), member(), None, None),
    ],
    ids=[
        "ready",
        "unknown-within-the-bound",
        "not-ready-within-the-bound",
        "unknown-at-the-bound",
        "not-ready-long",
        "deleted",
        "finished-before",
        "failed-before",
        "no-ready-condition",
    ],
)
def test_a_node_not_ready_past_the_bound_or_deleted_is_lost(
    health: NodeHealth, member: dict[str, Any], cause: str | None, recheck: float | None
) -> None:
    found = one(member, health)
    assert (found.disruption.cause if found.disruption else None) == cause
    assert found.recheck_after == recheck


def test_the_lost_node_and_how_long_it_was_not_ready_are_named() -> None:
    found = dis.find([member()], nodes={"a100-1": not_ready(since=-45)}, now=NOW, lost_after=30)
    assert found.disruption is not None
    assert found.disruption.node == "a100-1"
    assert found.disruption.detail == (
        "node a100-1 is lost (Ready Unknown for 45s) (pod demo-worker-0)"
    )


def test_an_unbound_member_is_judged_by_the_node_planned_for_it() -> None:
    unbound = pod("demo-worker-0", planned="a100-1")
    assert one(unbound, dis.deleted_node("a100-1")).disruption is not None


@pytest.mark.parametrize(
    ("health", "remaining"),
    [
        (None, None),
        (NodeHealth("a100-1"), None),
        (not_ready(since=-29), 1.0),
        (not_ready(since=-30), 0.0),
        (dis.deleted_node("a100-1"), 0.0),
    ],
    ids=["not-judged", "ready", "within-the-bound", "at-the-bound", "deleted"],
)
def test_until_lost_says_when_pods_there_are_force_deleted(
    health: NodeHealth | None, remaining: float | None
) -> None:
    assert dis.until_lost(health, now=NOW, lost_after=LOST_AFTER) == remaining


def shutting_down(since: float = -40, name: str = "a100-1") -> NodeHealth:
    """A node whose kubelet posts ``Ready=False`` because its graceful shutdown began."""
    return replace(not_ready("False", since=since, name=name), shutting_down=True)


def test_a_node_shutting_down_for_longer_than_the_bound_is_lost_but_no_fault_of_the_node() -> None:
    """Priority groups: the kubelet marks the gang only after the lower group's wait (rule 1)."""
    found = one(member(), shutting_down(since=-40))
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.blames_node) == ("NodeLost", False)
    assert found.disruption.detail == "node a100-1 is shutting down (Ready False for 40s)"


def test_a_node_shutting_down_within_the_bound_is_waited_for() -> None:
    found = one(member(), shutting_down(since=-10))
    assert (found.disruption, found.recheck_after) == (None, 20.0)


def test_another_node_shutting_down_is_not_charged_by_a_lost_nodes_restart() -> None:
    """Rule 7 charges other nodes lost in the same look, but a node shutting down is no fault."""
    members = [member("demo-master-0", node_name="a100-0"), member("demo-worker-0")]
    nodes = {"a100-0": not_ready(since=-40, name="a100-0"), "a100-1": shutting_down(since=-40)}
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.node) == ("NodeLost", "a100-0")
    assert found.disruption.other_nodes == ()


@pytest.mark.parametrize(
    ("health", "remaining"),
    [
        pytest.param(shutting_down(since=-600), None, id="shutting-down-its-kubelet-confirms"),
        pytest.param(not_ready("Unknown", since=-40), 0.0, id="lost"),
        pytest.param(not_ready("Unknown", since=-10), 20.0, id="not-yet-lost"),
        pytest.param(dis.deleted_node("a100-1"), 0.0, id="deleted"),
        pytest.param(NodeHealth("a100-1"), None, id="ready"),
    ],
)
def test_pods_on_a_node_shutting_down_are_never_force_deleted(
    health: NodeHealth, remaining: float | None
) -> None:
    assert dis.until_force_deletion(health, now=NOW, lost_after=LOST_AFTER) == remaining


# ------------------------------------------------------------------ rule 2: NoExecute taints


def toleration(seconds: int | None = None, **fields: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": "nvidia.com/gpu-health", "operator": "Exists", **fields}
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return out


@pytest.mark.parametrize(
    ("tolerations", "health", "cause", "recheck"),
    [
        ([], tainted(), "NodeTainted", None),
        ([toleration()], tainted(), None, None),
        ([toleration(effect="NoSchedule")], tainted(), "NodeTainted", None),
        ([toleration(60)], tainted(added=-30), None, 30.0),
        ([toleration(60)], tainted(added=-60), "NodeTainted", None),
        ([toleration(60), toleration(10)], tainted(added=-30), "NodeTainted", None),
        ([toleration(60), toleration()], tainted(added=-3600), None, None),
        ([toleration(0)], tainted(), "NodeTainted", None),
        ([toleration(60)], tainted(added=None), None, None),
        ([toleration(2**63 - 1)], tainted(added=-30), None, 2**63 - 1 - 30.0),
        ([], NodeHealth("a100-1"), None, None),
    ],
    ids=[
        "untolerated",
        "tolerated-for-ever",
        "tolerated-for-another-effect",
        "tolerated-for-a-while",
        "toleration-ran-out",
        "the-shortest-toleration-counts",
        "one-toleration-without-seconds-is-for-ever",
        "zero-seconds",
        "added-at-an-unknown-time",
        "tolerated-for-the-longest-the-api-stores",  # past the year 9999: once an OverflowError
        "no-taint",
    ],
)
def test_an_untolerated_no_execute_taint_takes_the_member_at_once(
    tolerations: list[dict[str, Any]],
    health: NodeHealth,
    cause: str | None,
    recheck: float | None,
) -> None:
    found = one(member(tolerations=tolerations), health)
    assert (found.disruption.cause if found.disruption else None) == cause
    assert found.recheck_after == recheck


def test_the_taint_is_named() -> None:
    found = one(member(), tainted())
    assert found.disruption is not None
    assert "nvidia.com/gpu-health=unhealthy:NoExecute" in found.disruption.detail
    assert found.disruption.node == "a100-1"


# ------------------------------------------------------------------ rules 3 and 4: pods taken


@pytest.mark.parametrize(
    ("member", "gone", "cause"),
    [
        (member(disrupted_at=-5), False, "PodDisrupted"),
        (member(phase="Failed", disrupted_at=-5, ended_at=-4), False, "PodDisrupted"),
        (member(phase="Failed", disrupted_at=-5, ended_at=-5), False, "PodDisrupted"),
        (member(phase="Failed", disrupted_at=-5, ended_at=-9), False, None),
        (member(phase="Succeeded", disrupted_at=-5), False, None),
        (member(phase="Failed", reason="Evicted"), False, "PodDisrupted"),
        (member(deleted_at=-5), False, "PodDeleted"),
        (member(phase="Failed", deleted_at=-5, ended_at=-3), False, "PodDeleted"),
        (member(phase="Failed", deleted_at=-5, ended_at=-20), False, None),
        (member(phase="Succeeded", deleted_at=-5), False, None),
        (member(), True, "PodDeleted"),
        (member(phase="Failed", ended_at=-5), True, None),
        (member(phase="Failed", ended_at=-5), False, None),
        (member(), False, None),
    ],
    ids=[
        "disruption-target",
        "failed-after-the-disruption",
        "failed-in-the-same-second",
        "failed-before-the-disruption",
        "succeeded",
        "evicted-by-the-kubelet",
        "deleted-by-someone",
        "failed-after-the-deletion",
        "failed-before-the-deletion",
        "succeeded-then-deleted",
        "gone",
        "failed-then-gone",
        "failed-by-itself",
        "running",
    ],
)
def test_a_member_taken_before_it_ended_by_itself_is_disrupted(
    member: dict[str, Any], gone: bool, cause: str | None
) -> None:
    found = one(member, gone=gone)
    assert (found.disruption.cause if found.disruption else None) == cause


@pytest.mark.parametrize(
    ("evicted", "blames_node"),
    [
        pytest.param(member(disrupted_at=-5), False, id="eviction-api-drain"),
        pytest.param(
            disruption_target(member(), at=at(-5), reason="PreemptionByScheduler"),
            False,
            id="kube-scheduler-preemption",
        ),
        pytest.param(
            disruption_target(member(), at=at(-5), reason="TerminationByKubelet"),
            True,
            id="kubelet-shutdown-or-pressure",
        ),
        pytest.param(
            disruption_target(member(), at=at(-5), reason="DeletionByTaintManager"),
            True,
            id="taint-eviction",
        ),
        pytest.param(
            disruption_target(member(), at=at(-5), reason="DeletionByPodGC"),
            True,
            id="pod-garbage-collection",
        ),
        pytest.param(member(phase="Failed", reason="Evicted"), True, id="kubelet-evicted"),
    ],
)
def test_an_eviction_someone_asked_for_is_no_fault_of_the_node(
    evicted: dict[str, Any], blames_node: bool
) -> None:
    found = dis.find([evicted], nodes={}, now=NOW, lost_after=LOST_AFTER)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.blames_node) == ("PodDisrupted", blames_node)


def by_kubelet(message: str, *, terminal_reason: str | None = None) -> dict[str, Any]:
    """A member the kubelet terminated: first its condition, then (``terminal_reason``) Failed.

    As the kubelet writes it: the ``DisruptionTarget`` condition at once, while the containers
    stop; the phase, reason and message once they have (its status manager holds them back).
    """
    raw = disruption_target(member(), at=at(-5), reason="TerminationByKubelet", message=message)
    if terminal_reason is None:
        return raw
    return ended(set_phase(raw, "Failed", reason=terminal_reason), at=at(-3), exit_code=137)


@pytest.mark.parametrize(
    ("terminated", "blames_node"),
    [
        pytest.param(by_kubelet(SHUTDOWN_MESSAGE), False, id="shutdown-while-it-stops"),
        pytest.param(
            by_kubelet(SHUTDOWN_MESSAGE, terminal_reason="Terminated"), False, id="shutdown-failed"
        ),
        pytest.param(by_kubelet("", terminal_reason="Terminated"), False, id="shutdown-by-reason"),
        pytest.param(by_kubelet(PRESSURE_MESSAGE), True, id="pressure-while-it-stops"),
        pytest.param(
            by_kubelet(PRESSURE_MESSAGE, terminal_reason="Evicted"), True, id="pressure-evicted"
        ),
        pytest.param(
            disruption_target(
                member(), at=at(-5), reason="DeletionByPodGC", message=SHUTDOWN_MESSAGE
            ),
            True,
            id="another-reason-with-the-words",
        ),
    ],
)
def test_a_graceful_node_shutdown_is_no_fault_of_the_node_and_a_pressure_eviction_is(
    terminated: dict[str, Any], blames_node: bool
) -> None:
    """A planned reboot restarts the gang uncounted and charges the node nothing (rule 3)."""
    found = one(terminated, NodeHealth("a100-1"))
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.blames_node) == ("PodDisrupted", blames_node)
    assert found.disruption.outage is None


def refused(reason: str, message: str) -> dict[str, Any]:
    """A member its kubelet refused to start, as its ``rejectPod`` writes it (no containers ran)."""
    raw = member(phase="Failed")
    raw["status"].update(reason=reason, message=f"Pod was rejected: {message}")
    return raw


@pytest.mark.parametrize(
    ("member", "disrupted"),
    [
        pytest.param(
            refused("NodeShutdown", "Pod was rejected as the node is shutting down."),
            True,
            id="node-shutting-down",
        ),
        pytest.param(
            refused("SysctlForbidden", "forbidden sysctl: net.core.somaxconn"),
            False,
            id="forbidden-sysctl-is-the-jobs",
        ),
        pytest.param(
            refused("OutOfnvidia.com/gpu", "Node didn't have enough resource: nvidia.com/gpu"),
            False,
            id="out-of-gpus-stays-a-failure",
        ),
    ],
)
def test_a_member_refused_because_its_node_shuts_down_is_disrupted_and_no_fault(
    member: dict[str, Any], disrupted: bool
) -> None:
    """Placed just before the node's NotReady reached placement: not the program's failure."""
    found = one(member, NodeHealth("a100-1"))
    if not disrupted:
        assert found.disruption is None
        return
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.blames_node) == ("PodDisrupted", False)
    assert found.disruption.detail == (
        "pod demo-worker-0 on a100-1 was refused by its kubelet (NodeShutdown: Pod was "
        "rejected: Pod was rejected as the node is shutting down.)"
    )


def test_a_node_shut_down_with_another_nodes_fault_is_not_charged_by_the_restart() -> None:
    """Two of a gang's nodes: one lost, one rebooted by its admin; only the lost one is charged."""
    members = [
        member("demo-master-0", node_name="a100-0"),
        disruption_target(
            member("demo-worker-0", node_name="a100-1"),
            at=at(-2),
            reason="TerminationByKubelet",
            message=SHUTDOWN_MESSAGE,
        ),
    ]
    nodes = {"a100-0": not_ready(since=-40, name="a100-0"), "a100-1": NodeHealth("a100-1")}
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.node) == ("NodeLost", "a100-0")
    assert found.disruption.other_nodes == ()


@pytest.mark.parametrize(
    ("health", "cause", "blames_node"),
    [
        pytest.param(tainted(), "NodeTainted", True, id="its-node-is-tainted"),
        pytest.param(
            NodeHealth("a100-1"), "PodDisrupted", False, id="a-healthy-node-its-name-moved-to"
        ),
        pytest.param(NodeHealth("a100-1", ready=""), "PodDisrupted", False, id="readiness-unread"),
        pytest.param(dis.deleted_node("a100-1"), "NodeLost", True, id="node-deleted"),
        pytest.param(None, "PodDisrupted", True, id="node-not-known"),
    ],
)
def test_a_taint_eviction_blames_only_a_tainted_node(
    health: NodeHealth | None, cause: str, blames_node: bool
) -> None:
    evicted = disruption_target(member(), at=at(-1), reason="DeletionByTaintManager")
    found = one(evicted, health, gone=True)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.blames_node) == (cause, blames_node)


def test_the_disruption_target_reason_is_quoted() -> None:
    found = one(member(disrupted_at=-5))
    assert found.disruption is not None
    assert found.disruption.detail == (
        "pod demo-worker-0 on a100-1 was disrupted (EvictionByEvictionAPI: Eviction API: evicting)"
    )


# ------------------------------------------------------------------ the gang


def test_the_most_severe_cause_wins_and_names_every_member_it_hit() -> None:
    members = [
        member("demo-master-0", node_name="a100-0", deleted_at=-1),
        member("demo-worker-0", node_name="a100-1"),
        member("demo-worker-1", node_name="a100-1"),
        member("demo-worker-2", node_name="a100-2"),
    ]
    nodes = {"a100-1": dis.deleted_node("a100-1"), "a100-2": not_ready(since=-5, name="a100-2")}
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER)
    assert found.disruption == dis.Disruption(
        "NodeLost",
        "a100-1",
        ("demo-worker-0", "demo-worker-1"),
        "node a100-1 was deleted (pods demo-worker-0, demo-worker-1)",
    )


def test_every_node_a_node_fault_took_members_from_is_named_and_charged() -> None:
    """A rack that loses power loses several of the gang's nodes in the same look."""
    members = [
        member("demo-master-0", node_name="a100-0"),
        member("demo-worker-0", node_name="a100-1"),
        member("demo-worker-1", node_name="a100-2"),
        disruption_target(
            member("demo-worker-2", node_name="a100-3"),
            at=at(-2),
            reason="TerminationByKubelet",
            message=PRESSURE_MESSAGE,
        ),
        member("demo-worker-3", node_name="a100-4", deleted_at=-1),
        member("demo-worker-4", node_name="a100-5", disrupted_at=-2),
    ]
    nodes = {
        "a100-0": not_ready(since=-40, name="a100-0"),
        "a100-1": not_ready(since=-35, name="a100-1"),
        "a100-2": not_ready(since=-5, name="a100-2"),
    }
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.node) == ("NodeLost", "a100-0")
    assert found.disruption.pods == ("demo-master-0",)
    assert found.disruption.other_nodes == (
        dis.NodeFault("a100-1", "NodeLost"),
        dis.NodeFault("a100-3", "PodDisrupted"),
    )
    assert found.disruption.detail == (
        "node a100-0 is lost (Ready Unknown for 40s) (pod demo-master-0) and node a100-1 is lost "
        "(Ready Unknown for 35s) (pod demo-worker-0) and pod demo-worker-2 on a100-3 was "
        f"disrupted (TerminationByKubelet: {PRESSURE_MESSAGE})"
    )


@pytest.mark.parametrize(
    ("other", "tolerations", "window", "charged"),
    [
        pytest.param(not_ready(since=-27, name="a100-2"), None, 5.0, "NodeLost",
                     id="not-ready-3s-later-is-lost-with-the-first"),
        pytest.param(not_ready("False", since=-25, name="a100-2"), None, 5.0, "NodeLost",
                     id="lost-just-at-the-window"),
        pytest.param(not_ready(since=-24, name="a100-2"), None, 5.0, None,
                     id="lost-6s-later-is-another-failure"),
        pytest.param(not_ready(since=-27, name="a100-2"), None, 0.0, None,
                     id="no-window-charges-only-what-is-lost-now"),
        pytest.param(tainted(added=-57, name="a100-2"), [toleration(60)], 5.0, "NodeTainted",
                     id="toleration-running-out-3s-later"),
        pytest.param(tainted(added=-50, name="a100-2"), [toleration(60)], 5.0, None,
                     id="toleration-running-out-10s-later"),
        pytest.param(tainted(added=-57, name="a100-2"), [toleration()], 5.0, None,
                     id="tolerated-for-ever"),
        pytest.param(NodeHealth("a100-2"), None, 5.0, None, id="healthy"),
    ],
)  # fmt: skip
def test_a_node_lost_within_the_failure_window_of_the_gangs_restart_is_charged_by_it(
    other: NodeHealth, tolerations: list[dict[str, Any]] | None, window: float, charged: str | None
) -> None:
    """A rack's nodes turn NotReady a few seconds apart, each charged by the one restart.

    The restart off the first moves the gang off the others too, so no later look would charge
    them (rule 7).
    """
    members = [
        member("demo-master-0", node_name="a100-1"),
        member("demo-worker-0", node_name="a100-2", tolerations=tolerations),
        member("demo-worker-1", node_name="a100-3"),
    ]
    nodes = {
        "a100-1": not_ready(since=-30, name="a100-1"),
        "a100-2": other,
        "a100-3": NodeHealth("a100-3"),
    }
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER, failure_window=window)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.node) == ("NodeLost", "a100-1")
    expected = (dis.NodeFault("a100-2", charged),) if charged is not None else ()
    assert found.disruption.other_nodes == expected


def test_a_finished_member_on_a_node_lost_seconds_later_charges_it_nothing() -> None:
    members = [
        member("demo-master-0", node_name="a100-1"),
        member("demo-worker-0", node_name="a100-2", phase="Succeeded", ended_at=-60),
    ]
    nodes = {
        "a100-1": not_ready(since=-30, name="a100-1"),
        "a100-2": not_ready(since=-28, name="a100-2"),
    }
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER, failure_window=5.0)
    assert found.disruption is not None
    assert found.disruption.other_nodes == ()


def test_a_first_stuck_image_pull_charges_one_node_however_many_it_held() -> None:
    elsewhere = waiting("ImagePullBackOff", node_name="a100-2")
    elsewhere["metadata"]["name"] = "demo-master-0"
    pulling = [waiting("ImagePullBackOff"), elsewhere]
    found = dis.find(pulling, nodes={}, now=NOW, lost_after=LOST_AFTER, stuck_after=STUCK_AFTER)
    assert found.disruption is not None
    assert found.disruption.cause == "PodStuck"
    assert found.disruption.other_nodes == ()


def test_a_member_that_went_away_is_judged_by_where_it_was() -> None:
    last_seen = member("demo-worker-1", deleted_at=-1)
    found = dis.find(
        [member("demo-master-0", node_name="a100-0")],
        [last_seen],
        nodes={"a100-1": tainted()},
        now=NOW,
        lost_after=LOST_AFTER,
    )
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.node) == ("NodeTainted", "a100-1")


def test_a_healthy_gang_has_no_disruption_and_the_earliest_recheck() -> None:
    members = [
        member(name, node_name=node) for name, node in (("a", "n1"), ("b", "n2"), ("c", "n3"))
    ]
    nodes = {
        "n1": not_ready(since=-25, name="n1"),
        "n2": tainted(added=-50, name="n2"),
        "n3": NodeHealth("n3"),
    }
    members[1]["spec"]["tolerations"] = [toleration(60)]
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER)
    assert found == dis.Finding(recheck_after=5.0)


# ------------------------------------------------------------------ rule 5: stuck on its node

STUCK_AFTER = 60.0


def waiting(
    reason: str | None, *, scheduled: float = -120, node_name: str | None = "a100-1"
) -> dict[str, Any]:
    """A Pending member scheduled ``scheduled`` s ago whose container waits for ``reason``."""
    raw = pod("demo-worker-0", node=node_name, phase="Pending")
    raw["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": at(scheduled)}
    ]
    if reason is not None:
        raw["status"]["containerStatuses"] = [
            {"name": "pytorch", "state": {"waiting": {"reason": reason}}}
        ]
    return raw


def stuck(member: dict[str, Any]) -> dis.Finding:
    return dis.judge(
        member, gone=False, nodes={}, now=NOW, lost_after=LOST_AFTER, stuck_after=STUCK_AFTER
    )


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        pytest.param(waiting("ContainerCreating"), "PodStuck", id="no-sandbox-past-the-bound"),
        pytest.param(waiting("ImagePullBackOff"), "PodStuck", id="image-pull-past-the-bound"),
        pytest.param(waiting("ErrImagePull"), "PodStuck", id="image-pull-error"),
        pytest.param(waiting(None), "PodStuck", id="no-container-status-at-all"),
        pytest.param(waiting("PodInitializing"), None, id="init-containers-are-the-jobs"),
        pytest.param(waiting("CreateContainerConfigError"), None, id="missing-secret-is-the-jobs"),
        pytest.param(waiting("ContainerCreating", node_name=None), None, id="not-bound"),
        pytest.param(member(), None, id="running"),
    ],
)
def test_a_bound_member_whose_node_does_not_start_it_is_stuck(
    member: dict[str, Any], expected: str | None
) -> None:
    found = stuck(member)
    assert (found.disruption.cause if found.disruption else None) == expected


def test_a_member_is_stuck_only_after_the_bound_and_is_looked_at_then() -> None:
    assert stuck(waiting("ContainerCreating", scheduled=-20)) == dis.Finding(recheck_after=40.0)
    found = stuck(waiting("ContainerCreating", scheduled=-60))
    assert found.disruption is not None
    assert (found.disruption.node, found.disruption.pods) == ("a100-1", ("demo-worker-0",))


def test_a_stuck_pod_is_a_fault_of_its_node_and_a_deletion_is_not() -> None:
    assert "PodStuck" in dis.NODE_FAULTS
    assert {"NodeLost", "NodeTainted", "PodDisrupted"} <= dis.NODE_FAULTS
    assert not {"PodDeleted", "ContainerFailed", "Preempted"} & dis.NODE_FAULTS


# ------------------------------------------------------------------ rule 6: whose image pull


def stuck_disruption(reason: str) -> dis.Disruption:
    found = stuck(waiting(reason))
    assert found.disruption is not None
    return found.disruption


@pytest.mark.parametrize(
    ("reason", "stuck_before_on", "cause"),
    [
        pytest.param("ImagePullBackOff", None, "PodStuck", id="first-image-pull-is-the-nodes"),
        pytest.param("ErrImagePull", None, "PodStuck", id="first-pull-error-is-the-nodes"),
        pytest.param("ImagePullBackOff", "a100-0", "ImagePullFailed", id="again-elsewhere"),
        pytest.param("ErrImagePull", "a100-1", "ImagePullFailed", id="again-on-the-same-node"),
        pytest.param("ImagePullBackOff", "", "ImagePullFailed", id="again-node-unknown"),
        pytest.param("ContainerCreating", "a100-0", "PodStuck", id="a-sandbox-is-the-nodes"),
    ],
)
def test_a_stuck_image_pull_is_the_nodes_once_and_the_jobs_after(
    reason: str, stuck_before_on: str | None, cause: str
) -> None:
    blamed = dis.blame_image_pull(stuck_disruption(reason), stuck_before_on=stuck_before_on)
    assert (blamed.cause, blamed.node, blamed.pods) == (cause, "a100-1", ("demo-worker-0",))
    assert (blamed.cause in dis.NODE_FAULTS) == (cause == "PodStuck")
    assert (blamed.cause in dis.COUNTED) == (cause == "ImagePullFailed")


def test_a_gang_stuck_pulling_on_one_member_is_an_image_pull() -> None:
    creating = waiting("ContainerCreating")
    pulling = copy.deepcopy(waiting("ImagePullBackOff"))
    pulling["metadata"]["name"] = "demo-master-0"
    found = dis.find(
        [creating, pulling], nodes={}, now=NOW, lost_after=LOST_AFTER, stuck_after=STUCK_AFTER
    )
    assert found.disruption is not None
    assert found.disruption.image_pull
    assert not stuck_disruption("ContainerCreating").image_pull


def test_only_the_programs_failures_a_hang_and_a_repeated_image_pull_spend_backoff() -> None:
    assert {"ContainerFailed", "Hang", "ImagePullFailed"} == dis.COUNTED
    assert not dis.COUNTED & dis.NODE_FAULTS


# ------------------------------------------------------------------ property


NODE_STATES = {
    "ready": NodeHealth("n"),
    "deleted": dis.deleted_node("n"),
    "lost": not_ready(since=-100, name="n"),
    "unready": not_ready(since=-1, name="n"),
    "tainted": tainted(name="n"),
}
MEMBER_STATES = {
    "running": member(),
    "deleted": member(deleted_at=-2),
    "evicted": member(disrupted_at=-2),
    "failed": member(phase="Failed", ended_at=-2),
    "succeeded": member(phase="Succeeded"),
}


@hs.composite
def gangs(draw: hs.DrawFn) -> tuple[list[dict[str, Any]], dict[str, NodeHealth]]:
    nodes = {
        f"n{i}": NodeHealth(**{**_fields(NODE_STATES[state]), "name": f"n{i}"})
        for i, state in enumerate(draw(hs.lists(hs.sampled_from(sorted(NODE_STATES)), max_size=3)))
    }
    members = []
    for index in range(draw(hs.integers(1, 5))):
        drawn = copy.deepcopy(MEMBER_STATES[draw(hs.sampled_from(sorted(MEMBER_STATES)))])
        drawn["metadata"]["name"] = f"demo-worker-{index}"
        drawn["spec"]["nodeName"] = f"n{draw(hs.integers(0, 3))}"
        members.append(drawn)
    return members, nodes


def _fields(health: NodeHealth) -> dict[str, Any]:
    return {field: getattr(health, field) for field in NodeHealth.__slots__}


@given(gangs())
def test_the_gangs_cause_is_its_most_severe_members_and_lists_all_it_hit(
    gang: tuple[list[dict[str, Any]], dict[str, NodeHealth]],
) -> None:
    members, nodes = gang
    judged = {m["metadata"]["name"]: one_of(m, nodes) for m in members}
    hits = {name: d for name, d in judged.items() if d is not None}
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER).disruption
    if not hits:
        assert found is None
        return
    assert found is not None
    assert found.cause == min((d.cause for d in hits.values()), key=dis.SEVERITY.index)
    assert set(found.pods) == {
        name for name, d in hits.items() if (d.cause, d.node) == (found.cause, found.node)
    }


def one_of(member: dict[str, Any], nodes: dict[str, NodeHealth]) -> dis.Disruption | None:
    return dis.judge(member, gone=False, nodes=nodes, now=NOW, lost_after=LOST_AFTER).disruption


def test_a_deletion_with_an_int64_grace_period_is_a_deletion_not_an_overflow() -> None:
    deleted = deleted_with_grace(member(), at=NOW - timedelta(seconds=5))
    deleted["metadata"]["deletionGracePeriodSeconds"] = 2**63 - 1
    found = one(deleted)
    assert found.disruption is not None
    assert found.disruption.cause == "PodDeleted"


# ------------------------------------------------------------------ rule 8: failed with its node

WINDOW = 5.0


def failed(ended_at: float, **fields: Any) -> dict[str, Any]:
    """A member whose training container failed (exit code 1) ``ended_at`` s from ``NOW``."""
    return member(phase="Failed", ended_at=ended_at, **fields)


def after_failure(
    member: dict[str, Any], health: NodeHealth | None, *, window: float = WINDOW
) -> dis.Finding:
    nodes = {health.name: health} if health is not None else {}
    return dis.judge(
        member, gone=False, nodes=nodes, now=NOW, lost_after=LOST_AFTER, failure_window=window
    )


@pytest.mark.parametrize(
    ("member", "health", "window", "cause", "recheck", "awaited"),
    [
        pytest.param(failed(-2), tainted(added=-1), WINDOW, "NodeTainted", None, False,
                     id="tainted-inside-the-window"),
        pytest.param(failed(-2), tainted(added=-30), WINDOW, "NodeTainted", None, False,
                     id="tainted-before-it-failed"),
        pytest.param(failed(-9), tainted(added=-4), WINDOW, "NodeTainted", None, False,
                     id="tainted-at-the-windows-end"),
        pytest.param(failed(-9), tainted(added=-3), WINDOW, None, None, False,
                     id="tainted-after-the-window"),
        pytest.param(failed(-2), NodeHealth("a100-1"), WINDOW, None, 3.0, True,
                     id="healthy-inside-the-window"),
        pytest.param(failed(-5), NodeHealth("a100-1"), WINDOW, None, None, False,
                     id="healthy-when-the-window-closes"),
        pytest.param(failed(-2), tainted(added=-1), 0.0, None, None, False,
                     id="no-window-is-todays-judgement"),
        pytest.param(failed(-2), None, WINDOW, None, None, False, id="node-not-known"),
        pytest.param(failed(-2), dis.deleted_node("a100-1"), WINDOW, "NodeLost", None, False,
                     id="deleted-inside-the-window"),
        pytest.param(failed(-9), dis.deleted_node("a100-1"), WINDOW, None, None, False,
                     id="found-deleted-after-the-window"),
        pytest.param(failed(-2), not_ready(since=-40), WINDOW, "NodeLost", None, False,
                     id="its-node-lost-already"),
        pytest.param(failed(-6), not_ready(since=-1), WINDOW, None, 29.0, True,
                     id="not-ready-inside-the-window-waits-for-the-bound"),
        pytest.param(failed(-40), not_ready(since=-31), WINDOW, None, None, False,
                     id="not-ready-after-the-window"),
        pytest.param(failed(-2), tainted(added=None), WINDOW, "NodeTainted", None, False,
                     id="taint-of-unknown-time-seen-inside-the-window"),
        pytest.param(failed(-9), tainted(added=None), WINDOW, None, None, False,
                     id="taint-of-unknown-time-seen-after-the-window"),
        pytest.param(failed(-2, tolerations=[toleration()]), tainted(added=-1), WINDOW, None,
                     3.0, True, id="a-taint-tolerated-for-ever"),
        pytest.param(failed(-6, tolerations=[toleration(60)]), tainted(added=-2), WINDOW, None,
                     58.0, True, id="a-toleration-is-waited-for"),
        pytest.param(member(phase="Succeeded", ended_at=-2), tainted(added=-1), WINDOW, None,
                     None, False, id="succeeded"),
        pytest.param(member(phase="Failed"), tainted(added=-1), WINDOW, None, None, False,
                     id="no-finish-time"),
    ],
)  # fmt: skip
def test_a_failure_its_nodes_fault_follows_within_the_window_is_the_nodes(
    member: dict[str, Any],
    health: NodeHealth | None,
    window: float,
    cause: str | None,
    recheck: float | None,
    awaited: bool,
) -> None:
    """A GPU fault kills the program first, and its node is tainted a moment later."""
    found = after_failure(member, health, window=window)
    assert (found.disruption.cause if found.disruption else None) == cause
    assert found.recheck_after == recheck
    assert found.awaiting == (("demo-worker-0",) if awaited else ())
    if found.disruption is not None:
        assert (found.disruption.node, found.disruption.pods) == ("a100-1", ("demo-worker-0",))
        assert found.disruption.cause in dis.NODE_FAULTS
        assert found.disruption.blames_node


def test_the_gang_awaits_its_failed_members_and_names_the_crash_with_the_taint() -> None:
    crashed = failed(-2)
    peer = member("demo-master-0", node_name="a100-0", phase="Failed", ended_at=-1)
    nodes = {"a100-0": NodeHealth("a100-0"), "a100-1": NodeHealth("a100-1")}
    waiting = dis.find([peer, crashed], nodes=nodes, now=NOW, failure_window=WINDOW)
    assert waiting == dis.Finding(recheck_after=3.0, awaiting=("demo-master-0", "demo-worker-0"))

    nodes["a100-1"] = tainted(added=-1)
    found = dis.find([peer, crashed], nodes=nodes, now=NOW, failure_window=WINDOW)
    assert found.disruption is not None
    assert (found.disruption.cause, found.disruption.node) == ("NodeTainted", "a100-1")
    assert found.disruption.pods == ("demo-worker-0",)
    assert found.disruption.other_nodes == ()
    assert found.disruption.detail == (
        "node a100-1 has the taint nvidia.com/gpu-health=unhealthy:NoExecute, which demo-worker-0 "
        "does not tolerate, where demo-worker-0 failed 2s ago (pod demo-worker-0)"
    )


def test_a_failure_at_the_end_of_time_is_awaited_not_an_overflow() -> None:
    last = ended(member(phase="Failed"), at="9999-12-31T23:59:59Z")
    found = after_failure(last, tainted(added=-1))
    assert found.disruption is not None
    assert found.disruption.cause == "NodeTainted"


# ------------------------------------------------------------------ rule 9: the outage


def seen_at(health: NodeHealth, seconds: float) -> NodeHealth:
    """``health`` as the shell dates its taints without ``timeAdded``: first seen then."""
    first = {t.taint: NOW + timedelta(seconds=seconds) for t in health.no_execute}
    return dis.taints_seen(health, first, now=NOW)


def outage(signal: str, began: float | None) -> Outage:
    return Outage(signal, None if began is None else NOW + timedelta(seconds=began))


@pytest.mark.parametrize(
    ("members", "health", "expected"),
    [
        pytest.param([member()], not_ready(since=-40), outage("NotReady", -40), id="lost"),
        pytest.param([member()], dis.deleted_node("a100-1"), outage("Deleted", None),
                     id="deleted"),
        pytest.param([member()], tainted(added=-5), outage("nvidia.com/gpu-health", -5),
                     id="tainted"),
        pytest.param([member()], seen_at(tainted(added=None), -12),
                     outage("nvidia.com/gpu-health", -12), id="tainted-without-time-added"),
        pytest.param([member()], dis.taints_seen(tainted(added=None), {}, now=NOW),
                     outage("nvidia.com/gpu-health", 0), id="a-taint-first-seen-now"),
        pytest.param([failed(-2)], tainted(added=-1), outage("nvidia.com/gpu-health", -1),
                     id="a-crash-its-nodes-taint-took"),
        pytest.param([member(disrupted_at=-2)], NodeHealth("a100-1"), None, id="disrupted"),
        pytest.param([member(reason="Evicted", phase="Failed")], NodeHealth("a100-1"), None,
                     id="evicted-by-its-kubelet"),
        pytest.param([waiting("ContainerCreating")], NodeHealth("a100-1"), None, id="stuck"),
    ],
)  # fmt: skip
def test_a_node_fault_names_the_outage_it_came_from_and_a_pods_own_fault_none(
    members: list[dict[str, Any]], health: NodeHealth, expected: Outage | None
) -> None:
    """Quarantine counts the gangs one outage took down once (its rule 6)."""
    found = dis.find(
        members, nodes={"a100-1": health}, now=NOW, lost_after=LOST_AFTER, stuck_after=STUCK_AFTER
    )
    assert found.disruption is not None
    assert found.disruption.node == "a100-1"
    assert found.disruption.outage == expected


def test_every_other_node_charged_names_its_own_outage() -> None:
    members = [
        member("demo-master-0", node_name="a100-1"),
        member("demo-worker-0", node_name="a100-2"),
        member("demo-worker-1", node_name="a100-3"),
    ]
    nodes = {
        "a100-1": not_ready(since=-40, name="a100-1"),
        "a100-2": not_ready(since=-28, name="a100-2"),
        "a100-3": tainted(added=-3, name="a100-3"),
    }
    found = dis.find(members, nodes=nodes, now=NOW, lost_after=LOST_AFTER, failure_window=5.0)
    assert found.disruption is not None
    assert [(o.node, o.outage) for o in found.disruption.other_nodes] == [
        ("a100-2", outage("NotReady", -28)),
        ("a100-3", outage("nvidia.com/gpu-health", -3)),
    ]


def test_a_taint_without_time_added_keeps_the_date_it_was_first_seen() -> None:
    health = tainted(added=None)
    first = dis.taints_seen(health, {}, now=NOW)
    later = dis.taints_seen(health, {GPU_HEALTH: NOW}, now=NOW + timedelta(seconds=30))
    assert [t.seen for t in first.no_execute] == [NOW]
    assert [t.seen for t in later.no_execute] == [NOW]
    dated = tainted(added=-5)
    assert dis.taints_seen(dated, {}, now=NOW) == dated


def test_a_taint_first_seen_after_a_restart_is_dated_by_the_outage_its_node_records() -> None:
    """Rule 9: one taint is one outage across a controller restart, not one more at each."""
    health = tainted(added=None)
    recorded = [
        outage("nvidia.com/gpu-health", -300),
        outage("nvidia.com/gpu-health", -90),
        outage("NotReady", -30),
        outage("nvidia.com/other", -10),
    ]
    restarted = dis.taints_seen(health, None, now=NOW, recorded=recorded)
    assert [t.seen for t in restarted.no_execute] == [NOW - timedelta(seconds=90)]
    came_back = dis.taints_seen(health, {}, now=NOW, recorded=recorded)
    assert [t.seen for t in came_back.no_execute] == [NOW], "seen gone by this controller"
    never = dis.taints_seen(health, None, now=NOW, recorded=[outage("NotReady", -30)])
    assert [t.seen for t in never.no_execute] == [NOW]


# A kubelet posted Ready=False at -60 and stopped; a gang was charged for it at -30; the node
# lifecycle controller turned it Unknown at -5, keeping the kubelet's last heartbeat.
def unknown_since(heartbeat: float | None, since: float = -5) -> NodeHealth:
    beat = None if heartbeat is None else NOW + timedelta(seconds=heartbeat)
    return replace(not_ready("Unknown", since=since), heartbeat=beat)


def charged(at_seconds: float, signal: str = "NotReady", began: float | None = -60) -> Fault:
    return Fault("a100-1", "NodeLost", NOW + timedelta(seconds=at_seconds), ("ns", "j"),
                 outage(signal, began))  # fmt: skip


def test_node_health_reads_the_last_heartbeat_only_while_ready_is_unknown() -> None:
    raw = node("a100-1")
    condition = {"type": "Ready", "lastTransitionTime": at(-5), "lastHeartbeatTime": at(-60)}
    raw["status"]["conditions"] = [{**condition, "status": "Unknown"}]
    assert dis.node_health(raw).heartbeat == NOW - timedelta(seconds=60)
    raw["status"]["conditions"] = [{**condition, "status": "False"}]
    assert dis.node_health(raw).heartbeat is None


@pytest.mark.parametrize(
    ("health", "recorded", "expected"),
    [
        pytest.param(unknown_since(-60), [charged(-30)], outage("NotReady", -60),
                     id="the-kubelets-not-ready-turned-unknown"),
        pytest.param(unknown_since(-30), [charged(-30)], outage("NotReady", -60),
                     id="last-heartbeat-at-the-charge"),
        pytest.param(unknown_since(-60), [charged(-3, began=-5), charged(-30)],
                     outage("NotReady", -60), id="the-earliest-date-of-the-spell"),
        pytest.param(unknown_since(-20), [charged(-30)], outage("NotReady", -5),
                     id="its-kubelet-came-back-after-the-charge"),
        pytest.param(unknown_since(-60), [], outage("NotReady", -5), id="nothing-recorded"),
        pytest.param(unknown_since(-60), [charged(-30, signal="nvidia.com/gpu-health")],
                     outage("NotReady", -5), id="a-taints-outage"),
        pytest.param(unknown_since(-60), [charged(-30, began=None)], outage("NotReady", -5),
                     id="an-outage-without-a-date"),
        pytest.param(unknown_since(-60, since=-40), [charged(-30, began=-35)],
                     outage("NotReady", -40), id="recorded-spell-began-after-this-one"),
        pytest.param(unknown_since(None), [charged(-30)], outage("NotReady", -5),
                     id="no-heartbeat"),
        pytest.param(not_ready("False", since=-5), [charged(-30)], outage("NotReady", -5),
                     id="posted-by-its-kubelet"),
    ],
)  # fmt: skip
def test_an_unknown_spell_continuing_a_recorded_not_ready_outage_is_that_outage(
    health: NodeHealth, recorded: list[Fault], expected: Outage
) -> None:
    """Rule 9: one NotReady spell turned Unknown is one outage, not one more after the turn."""
    continued = dis.spell_of(health, recorded)
    assert continued.ready_since == health.ready_since  # how long it is lost is unchanged
    found = dis.find(
        [member()], nodes={"a100-1": continued}, now=NOW + timedelta(seconds=30),
        lost_after=LOST_AFTER,
    )  # fmt: skip
    assert found.disruption is not None
    assert found.disruption.cause == "NodeLost"
    assert found.disruption.outage == expected

"""A kubelet's ``Ready=False`` that the controller manager turns ``Unknown`` is one outage, on kwok.

The admin's view: a rack loses power; its kubelets post ``Ready=False`` and stop posting, and the
controller manager turns each node ``Unknown`` after its grace period (``NodeStatusUnknown``, a
new ``lastTransitionTime``, the kubelet's ``lastHeartbeatTime`` kept). A gang judged before that
turn and one judged after it (a backlog of looks, a controller restart in between) were taken
down by one NotReady spell: one fault of the node, not two. Here the two gangs are in two
namespaces, each run by a controller of its own namespace (``--namespace``), one after the
other, so that the second gang is first judged after the turn. The policy quarantines at 2
faults. Assertions read the Node: its recorded faults and its taints.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, create_job
from tests.e2e.node_outages import (
    apply_quarantine_policy,
    delete_policy,
    quarantine_taint,
    ready_condition,
    recorded_faults,
    resume_heartbeats,
    running_on,
    set_not_ready,
)

pytestmark = pytest.mark.e2e


def test_gangs_judged_before_and_after_a_not_ready_node_turns_unknown_are_one_fault(
    cluster: Cluster, tmp_path: Path
) -> None:
    first_ns = cluster.new_namespace("spell-a")
    second_ns = cluster.new_namespace("spell-b")
    pool = f"spell-{first_ns[-6:]}"
    (node,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    settings = {"faults": 2, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [first_ns, second_ns], settings)
    on_pool = {"nodeSelector": {"pool": pool}}

    def controller(namespace: str) -> ControllerProcess:
        """A controller of ``namespace`` alone, a node lost after 5 s not Ready."""
        extra = ("--namespace", namespace, "--node-lost-seconds", "5")
        return ControllerProcess(cluster.kubeconfig, tmp_path, *extra).start()

    running: ControllerProcess | None = None
    stopped = False
    try:
        running = controller(second_ns)
        create_job(cluster, job("second", second_ns).master(gpus=2, pod_spec=on_pool).build())
        assert cluster.wait_for(lambda: running_on(cluster, second_ns, "second")) == node
        assert running.stop() == 0, running.log()
        running = controller(first_ns)
        create_job(cluster, job("first", first_ns).master(gpus=2, pod_spec=on_pool).build())
        assert cluster.wait_for(lambda: running_on(cluster, first_ns, "first")) == node

        set_not_ready(cluster, node)  # the kubelet's own Ready=False, then no more heartbeats
        stopped = True
        (fault,) = cluster.wait_for(
            lambda: recorded_faults(cluster, node), timeout=60, what="the first gang's fault"
        )
        assert (fault["job"], fault["outage"]) == (f"{first_ns}/first", "NotReady")
        assert running.stop() == 0, running.log()
        running = None

        unknown = cluster.wait_for(
            lambda: (ready := ready_condition(cluster, node))["status"] == "Unknown" and ready,
            timeout=120,
            what=f"{node} turned Unknown by the controller manager",
        )
        assert unknown["lastTransitionTime"] != fault["outageBegan"]  # a new transition time

        running = controller(second_ns)  # judges the second gang after the turn
        cluster.wait_for(
            lambda: len(recorded_faults(cluster, node)) == 2 or quarantine_taint(cluster, node),
            timeout=60,
            what="the second gang's fault",
        )
        assert quarantine_taint(cluster, node) is None  # one outage: one fault of 2
        assert [
            (f["job"], f["outage"], f["outageBegan"]) for f in recorded_faults(cluster, node)
        ] == [
            (f"{first_ns}/first", "NotReady", fault["outageBegan"]),
            (f"{second_ns}/second", "NotReady", fault["outageBegan"]),
        ]
    finally:
        if running is not None:
            running.stop()
        if stopped:
            resume_heartbeats(cluster, node)
        delete_policy(cluster, name)

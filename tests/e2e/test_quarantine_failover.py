"""A node's fault count and its quarantine survive controller failovers, on kwok.

The admin's view: the controller runs as two replicas with leader election and loses its leader
to rolling upgrades, OOM kills and drains several times a week, while nodes die every few hours.
A node that takes a gang down once under each leader must still be quarantined when its faults
reach the threshold across the failover, and a quarantine set just before a failover must be
lifted by the next leader when its cooldown ends. Leaders are killed with SIGKILL (no cleanup, no
Lease release: an OOM kill), so the standby takes over once the Lease expires. Nodes are made
NotReady as in ``test_node_loss``; assertions read Nodes, their Events and the replicas' metrics.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, create_job
from tests.e2e.node_outages import (
    QUARANTINE,
    add_spare,
    apply_quarantine_policy,
    bring_back,
    delete_policy,
    metric,
    new_pool_namespace,
    node_events,
    quarantine_taint,
    recorded_faults,
    resume_heartbeats,
    running_on,
    set_not_ready,
)
from torchgate.pytorchjob import moments

pytestmark = pytest.mark.e2e

COOLDOWN_SECONDS = 45


def leader_of(replicas: list[ControllerProcess]) -> ControllerProcess | None:
    """The one live replica that says it leads, else None."""
    live = [r for r in replicas if r.process is not None and r.process.poll() is None]
    leading = [r for r in live if metric(r, "torchgate_controller_leader") == 1]
    return leading[0] if len(leading) == 1 else None


def test_a_node_failing_once_per_leader_is_quarantined_across_failovers_and_lifted_after(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One NotReady spell under each leader; the policy says 2 faults: the second quarantines."""
    namespace, pool = new_pool_namespace(cluster, "qfail")
    (flaky,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    settings = {"faults": 2, "windowSeconds": 600, "cooldownSeconds": COOLDOWN_SECONDS}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    on_pool = {"nodeSelector": {"pool": pool}}
    extra = ("--node-lost-seconds", "5", "--leader-election-id", f"torchgate-{pool}")

    def replica() -> ControllerProcess:
        return ControllerProcess(cluster.kubeconfig, tmp_path, *extra, leader_elect=True).start()

    replicas = [replica(), replica()]
    stopped = False
    try:
        first_leader = cluster.wait_for(lambda: leader_of(replicas), what="a leader")
        create_job(cluster, job("first", namespace).master(gpus=8, pod_spec=on_pool).build())
        assert cluster.wait_for(lambda: running_on(cluster, namespace, "first")) == flaky
        spare = add_spare(cluster, pool)

        set_not_ready(cluster, flaky)
        stopped = True
        moved = cluster.wait_for(
            lambda: (on := running_on(cluster, namespace, "first")) != flaky and on,
            timeout=60,
            what="the first gang off the flaky node",
        )
        assert moved == spare
        bring_back(cluster, flaky)
        stopped = False
        faults = cluster.wait_for(
            lambda: recorded_faults(cluster, flaky), what=f"the fault recorded on {flaky}"
        )
        assert [(f["cause"], f["job"], f["outage"]) for f in faults] == [
            ("NodeLost", f"{namespace}/first", "NotReady")
        ]
        assert quarantine_taint(cluster, flaky) is None  # one fault so far

        first_leader.kill()  # an OOM kill: the standby takes over when the Lease expires
        second_leader = cluster.wait_for(
            lambda: leader_of(replicas), timeout=60, what="the standby leading"
        )
        assert second_leader is not first_leader
        replicas.append(replica())  # the killed replica's pod is restarted: the new standby

        create_job(cluster, job("second", namespace).master(gpus=8, pod_spec=on_pool).build())
        assert cluster.wait_for(lambda: running_on(cluster, namespace, "second")) == flaky
        set_not_ready(cluster, flaky)
        stopped = True
        taint = cluster.wait_for(
            lambda: quarantine_taint(cluster, flaky), timeout=60, what=f"{flaky} quarantined"
        )
        assert taint == {"key": QUARANTINE, "value": "NodeLost", "effect": "NoSchedule"}
        assert (
            metric(second_leader, 'torchgate_controller_node_quarantines_total{cause="NodeLost"}')
            == 1
        )
        messages = [
            e["message"] for e in node_events(cluster, flaky) if e["reason"] == "NodeQuarantined"
        ]
        assert any("after 2 infrastructure faults (NodeLost)" in m for m in messages), messages
        assert recorded_faults(cluster, flaky) == []  # a quarantine starts the count afresh
        bring_back(cluster, flaky)
        stopped = False

        second_leader.kill()  # the quarantine was set just before this failover
        third_leader = cluster.wait_for(
            lambda: leader_of(replicas), timeout=60, what="the restarted replica leading"
        )
        assert third_leader not in (first_leader, second_leader)
        cluster.wait_for(
            lambda: quarantine_taint(cluster, flaky) is None,
            timeout=COOLDOWN_SECONDS + 30,
            what=f"{flaky}'s quarantine lifted by the new leader",
        )
        lifted = cluster.get("node", flaky)
        assert lifted is not None
        labels = lifted["metadata"].get("labels") or {}
        assert QUARANTINE not in labels
        annotations = lifted["metadata"].get("annotations") or {}
        since = annotations.get("torchgate.io/quarantine-faults-since")  # outlives the lift
        assert moments.parse_time(since, zone_required=True) is not None, annotations
        assert any(e["reason"] == "NodeQuarantineLifted" for e in node_events(cluster, flaky))
    finally:
        if stopped:
            resume_heartbeats(cluster, flaky)
        for process in replicas:
            if process.process is not None and process.process.poll() is None:
                process.stop()
        delete_policy(cluster, name)

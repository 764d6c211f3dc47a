"""A rack of a large pool lost at once, on kwok: every gang on it restarts once, off the rack.

The admin's view of correlated failures: a rack's power or switch goes and its nodes turn
NotReady a few seconds apart (their kubelets' leases are staggered). Each gang on the rack must
run again on healthy nodes (never back on a lost one), restart once (not once per lost node),
charge every rack node it lost and no healthy node it merely shared with them. Nodes are made
NotReady as in ``test_node_loss`` (heartbeats stopped, ``Ready=False`` posted); the controller
runs with ``--node-lost-seconds 5`` and the default failure window (5 s). Assertions read pods,
Nodes and the controller's metrics, never logs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, create_job, live_pods
from tests.e2e.node_outages import (
    all_running_in_attempt,
    apply_quarantine_policy,
    delete_policy,
    metric,
    new_pool_namespace,
    quarantine_taint,
    resume_heartbeats,
    set_not_ready,
)
from tests.e2e.node_outages import controller as controller  # the module-scoped fixture

pytestmark = pytest.mark.e2e

GANGS = 6


def running(cluster: Cluster, namespace: str, name: str, attempt: int) -> list[dict[str, Any]]:
    """The job's two pods when both are Running in gang attempt ``attempt``, else []."""
    pods = live_pods(cluster, namespace, name)
    return pods if all_running_in_attempt(pods, 2, attempt) else []


def all_running(
    cluster: Cluster, namespace: str, attempt: int
) -> dict[str, list[dict[str, Any]]] | None:
    gangs = {f"g{i}": running(cluster, namespace, f"g{i}", attempt) for i in range(GANGS)}
    return gangs if all(gangs.values()) else None


def test_a_rack_of_eight_nodes_lost_under_six_gangs_restarts_each_once_and_charges_only_the_rack(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """20 nodes, 6 gangs of two 8-GPU pods; the rack is 8 of their 12 nodes, one or both of each.

    The 12 nodes left hold the 6 gangs exactly. The policy quarantines a node at its first fault,
    so a healthy node charged by mistake would show its quarantine taint.
    """
    namespace, pool = new_pool_namespace(cluster, "rack")
    nodes = cluster.add_gpu_nodes(20, pool, labels={"pool": pool})
    settings = {"faults": 1, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    rack: list[str] = []
    try:
        for i in range(GANGS):
            selector = {"nodeSelector": {"pool": pool}}
            raw = (
                job(f"g{i}", namespace)
                .master(gpus=8, pod_spec=selector)
                .workers(1, gpus=8, pod_spec=selector)
                .run_policy(backoffLimit=0)
                .build()
            )
            create_job(cluster, raw)
        first = cluster.wait_for(
            lambda: all_running(cluster, namespace, 1), timeout=90, what="the 6 gangs Running"
        )
        placed = {gang: sorted(p["spec"]["nodeName"] for p in pods) for gang, pods in first.items()}
        # Both nodes of g0 and g1, one of each other gang: 8 nodes, in rack order.
        rack = [*placed["g0"], *placed["g1"], *(placed[f"g{i}"][0] for i in range(2, GANGS))]
        for node in rack:
            set_not_ready(cluster, node)
            time.sleep(0.5)  # staggered leases: the rack's nodes turn NotReady 0.5-1 s apart

        again = cluster.wait_for(
            lambda: all_running(cluster, namespace, 2), timeout=120, what="the 6 gangs again"
        )
        on = {p["spec"]["nodeName"] for pods in again.values() for p in pods}
        assert not on & set(rack), sorted(on & set(rack))
        time.sleep(3)  # every rack node is lost by now: no gang restarts a second time
        assert all_running(cluster, namespace, 2) is not None
        restarts = metric(controller, 'torchgate_controller_gang_restarts_total{cause="NodeLost"}')
        assert restarts == GANGS

        quarantined = {n for n in nodes if quarantine_taint(cluster, n) is not None}
        assert quarantined == set(rack)
    finally:
        for node in rack:
            resume_heartbeats(cluster, node)
        delete_policy(cluster, name)

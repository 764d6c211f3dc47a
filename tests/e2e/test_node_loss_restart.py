"""A node lost while no controller runs: the next one restarts the gang once, off the lost node.

Why a module of its own: it stops and starts its own controllers (the node-loss modules share
one per module). A controller stopped for an upgrade, or OOM-killed, misses the node's change
and the timer it would have set; the next one lists the node already NotReady for longer than
``--node-lost-seconds`` and must judge it from what the Node says: one restart, uncounted,
naming the node, the pods left on it force-deleted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    create_job,
    dump,
    events_once,
    get_job,
    is_true,
    job_pods,
    live_pods,
)
from tests.e2e.node_outages import (
    NODE_LOST_SECONDS,
    all_running_in_attempt,
    metric,
    new_pool_namespace,
    resume_heartbeats,
    set_not_ready,
)

pytestmark = pytest.mark.e2e


def test_a_node_lost_while_the_controller_is_down_restarts_the_gang_once_when_it_is_back(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace, pool = new_pool_namespace(cluster, "downlost")
    cluster.add_gpu_nodes(3, pool, labels={"pool": pool})
    lost_after = ("--node-lost-seconds", str(NODE_LOST_SECONDS))
    controller = ControllerProcess(cluster.kubeconfig, tmp_path, *lost_after).start()
    on_pool = {"nodeSelector": {"pool": pool}}
    raw = (
        job("gang", namespace)
        .master(gpus=8, pod_spec=on_pool)
        .workers(1, gpus=8, pod_spec=on_pool)
        .run_policy(backoffLimit=0)
        .build()
    )
    create_job(cluster, raw)

    def attempt_running(attempt: int) -> list[dict[str, Any]] | None:
        pods = live_pods(cluster, namespace, "gang")
        return pods if all_running_in_attempt(pods, 2, attempt) else None

    lost = ""
    try:
        first = cluster.wait_for(lambda: attempt_running(1), timeout=60, what="the gang")
        worker = next(p for p in first if p["metadata"]["name"] == "gang-worker-0")
        lost = worker["spec"]["nodeName"]
        assert controller.stop() == 0, controller.log()
        set_not_ready(cluster, lost)
        time.sleep(NODE_LOST_SECONDS + 3)  # lost by the time the next controller looks

        controller = ControllerProcess(cluster.kubeconfig, tmp_path, *lost_after).start()
        again = cluster.wait_for(lambda: attempt_running(2), timeout=60, what="the gang again")

        assert lost not in {p["spec"]["nodeName"] for p in again}
        stored = get_job(cluster, namespace, "gang")
        assert stored is not None
        assert not is_true(stored, "Failed"), dump(stored)
        assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})
        events = [
            e
            for e in events_once(cluster, namespace, "gang", "NodeLost")
            if e["reason"] == "NodeLost"
        ]
        assert len(events) == 1, events
        assert lost in events[0]["message"]
        sample = 'torchgate_controller_gang_restarts_total{cause="NodeLost"}'
        assert metric(controller, sample) == 1
        time.sleep(3)  # no second restart, nothing of the first attempt left on the lost node
        assert attempt_running(2) is not None
        assert {p["metadata"]["uid"] for p in job_pods(cluster, namespace, "gang")} == {
            p["metadata"]["uid"] for p in again
        }
    finally:
        if lost:
            resume_heartbeats(cluster, lost)
        if controller.process is not None and controller.process.poll() is None:
            controller.stop()

"""Scaling a running elastic job on the real control plane: the gang is not restarted.

``kubectl scale`` (or an HPA) raising a running elastic job's Workers used to tear the whole gang
down and admit it again (``GangIncomplete``: a restart, a new rendezvous id) once the admitter's
reservation had settled, and before that created the new Worker unplaced, for kube-scheduler to
bind outside admission and quota. The running gang now asks the admitter for its new Workers:
one with room (and quota) starts on the node the admitter reserved, beside the running gang; one
without waits, named in the Running condition with why, and starts when room frees. A scale
down deletes the Workers above the new count without a restart.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    get_job,
    live_pods,
)
from tests.e2e.controller_process import controller as controller  # the module-scoped fixture
from tests.e2e.elastic_jobs import attempt, create, in_pool, running_pods, scale
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook  # the module-scoped fixture

pytestmark = [pytest.mark.e2e]


def test_scaling_a_running_elastic_job_up_and_down_never_restarts_its_gang(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("elastic")
    cluster.add_gpu_nodes(3, "elscale", gpus=8, labels={"pool": "elscale"})
    elastic = job("el", namespace).workers(2, gpus=8).elastic(minReplicas=1, maxReplicas=4)
    create(cluster, in_pool(elastic.build(), "elscale"))
    first = cluster.wait_for(lambda: running_pods(cluster, namespace, "el", 2), timeout=60)
    # Another admission runs a cycle, which settles el's reservation (its pods were all seen).
    create(cluster, in_pool(job("other", namespace).workers(1, gpus=1).build(), "elscale"))
    cluster.wait_for(lambda: running_pods(cluster, namespace, "other", 1), timeout=60)
    before = attempt(cluster, namespace, "el")

    scale(cluster, namespace, "el", 3)

    def waits_named() -> dict[str, Any] | None:
        running = condition(get_job(cluster, namespace, "el"), "Running")
        return running if running and "el-worker-2" in running.get("message", "") else None

    running = cluster.wait_for(waits_named, timeout=30, what="Running naming el-worker-2")
    assert running["status"] == "True"
    time.sleep(3)  # a restart or a create would have shown by now
    assert running_pods(cluster, namespace, "el", 2) == first
    assert attempt(cluster, namespace, "el") == before

    scale(cluster, namespace, "el", 1)
    cluster.wait_for(lambda: running_pods(cluster, namespace, "el", 1), timeout=30)
    assert running_pods(cluster, namespace, "el", 1) == ["el-worker-0"]
    assert attempt(cluster, namespace, "el") == before


def pod_facts(cluster: Cluster, namespace: str, name: str) -> dict[str, tuple[str, str]]:
    """Pod name -> (uid, node) of the job's live pods."""
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for p in live_pods(cluster, namespace, name)
    }


def test_a_scale_up_with_room_starts_the_new_worker_beside_the_running_gang(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("elgrow")
    nodes = cluster.add_gpu_nodes(3, "elgrow", gpus=8, labels={"pool": "elgrow"})
    elastic = job("el", namespace).workers(2, gpus=8).elastic(minReplicas=1, maxReplicas=4)
    create(cluster, in_pool(elastic.build(), "elgrow"))
    cluster.wait_for(lambda: running_pods(cluster, namespace, "el", 2), timeout=60)
    first = pod_facts(cluster, namespace, "el")
    before = attempt(cluster, namespace, "el")

    scale(cluster, namespace, "el", 3)

    grown = cluster.wait_for(
        lambda: running_pods(cluster, namespace, "el", 3), timeout=30, what="3 Workers Running"
    )
    assert grown == ["el-worker-0", "el-worker-1", "el-worker-2"]
    facts = pod_facts(cluster, namespace, "el")
    (free_node,) = set(nodes) - {node for _, node in first.values()}
    assert facts["el-worker-2"][1] == free_node
    assert {name: facts[name] for name in first} == first, "the first two pods are untouched"
    assert attempt(cluster, namespace, "el") == before
    running = condition(get_job(cluster, namespace, "el"), "Running")
    assert running is not None
    assert "el-worker-2" not in running.get("message", "")

    scale(cluster, namespace, "el", 2)
    cluster.wait_for(lambda: running_pods(cluster, namespace, "el", 2), timeout=30)
    assert pod_facts(cluster, namespace, "el") == first
    assert attempt(cluster, namespace, "el") == before


def test_a_scale_up_without_room_waits_saying_why_and_starts_when_room_frees(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("elwait")
    cluster.add_gpu_nodes(2, "elwait", gpus=8, labels={"pool": "elwait"})
    elastic = job("el", namespace).workers(2, gpus=8).elastic(minReplicas=1, maxReplicas=4)
    create(cluster, in_pool(elastic.build(), "elwait"))
    cluster.wait_for(lambda: running_pods(cluster, namespace, "el", 2), timeout=60)
    first = pod_facts(cluster, namespace, "el")
    before = attempt(cluster, namespace, "el")

    scale(cluster, namespace, "el", 3)

    def waits_for_room() -> dict[str, Any] | None:
        running = condition(get_job(cluster, namespace, "el"), "Running")
        message = running.get("message", "") if running else ""
        return running if "el-worker-2" in message and "waiting for room" in message else None

    running = cluster.wait_for(waits_for_room, timeout=30, what="Running: el-worker-2 waits")
    assert running["status"] == "True"
    assert pod_facts(cluster, namespace, "el") == first

    (added,) = cluster.add_gpu_nodes(1, "elwait-more", gpus=8, labels={"pool": "elwait"})
    cluster.wait_for(
        lambda: running_pods(cluster, namespace, "el", 3), timeout=30, what="el-worker-2 Running"
    )
    facts = pod_facts(cluster, namespace, "el")
    assert facts["el-worker-2"][1] == added
    assert {name: facts[name] for name in first} == first
    assert attempt(cluster, namespace, "el") == before

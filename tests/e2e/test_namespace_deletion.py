"""Deleting a namespace that holds a running PyTorchJob, on kwok: the job ends with it, quietly.

``kubectl delete namespace`` makes the namespace controller delete the namespace's pods first
and its other objects, the job among them, once the pods are gone (Kubernetes' ordered namespace
deletion). Those pod deletions are the job's end, not a disruption (``plan`` rule 9): the gang
does not restart, no restart is counted in ``gang_restarts_total`` or announced, and nothing is
created, or retried, in the namespace the apiserver is emptying. Assertions read the job, its
pods and Events while the namespace goes, and the controller's metrics, never logs.
"""

from __future__ import annotations

import time

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    create_job,
    events_of,
    get_job,
    live_pods,
)
from tests.e2e.controller_process import controller as controller  # the module-scoped fixture

pytestmark = pytest.mark.e2e

COUNTERS = ("gang_restarts_total", "reconcile_errors_total", "pods_created_total")


def counters(controller: ControllerProcess) -> dict[str, float]:
    """Each counter of ``COUNTERS``, summed over its labels."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in controller.metrics().splitlines():
        name, _, value = line.partition(" ")
        counter = name.split("{")[0].removeprefix("torchgate_controller_")
        if counter in totals:
            totals[counter] += float(value)
    return totals


def pod_deleted_restarts(controller: ControllerProcess) -> float:
    prefix = 'torchgate_controller_gang_restarts_total{cause="PodDeleted"} '
    lines = [line for line in controller.metrics().splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


def test_deleting_the_namespace_of_a_running_gang_restarts_nothing_and_retries_nothing(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("nsgone")
    pool = f"nsgone-{namespace[-6:]}"
    cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    raw = (
        job("gang", namespace)
        .master(gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .workers(1, gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .build()
    )
    create_job(cluster, raw)
    cluster.wait_for(
        lambda: (
            [p["status"].get("phase") for p in live_pods(cluster, namespace, "gang")]
            == ["Running", "Running"]
        ),
        what="the gang Running",
    )
    before = counters(controller)

    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    attempts: set[str] = set()
    restarting: list[object] = []
    reasons: set[str] = set()
    deadline = time.monotonic() + 120
    while cluster.get("namespace", namespace) is not None:
        assert time.monotonic() < deadline, f"namespace {namespace} still there"
        found = get_job(cluster, namespace, "gang")
        if found is not None:
            annotations = found["metadata"].get("annotations") or {}
            attempts.add(annotations.get("torchgate.io/gang-attempt", "1"))
            restarting.append(condition(found, "Restarting"))
        reasons |= {e["reason"] for e in events_of(cluster, namespace, "gang")}
        time.sleep(0.2)
    time.sleep(2)  # long enough for a retry the controller would make against the namespace
    after = counters(controller)

    assert attempts == {"1"}
    assert restarting == [None] * len(restarting)
    assert not reasons & {"PodDeleted", "Restarting"}
    assert after == before


def test_a_pod_deleted_in_a_live_namespace_still_restarts_its_gang(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("podgone")
    pool = f"podgone-{namespace[-6:]}"
    cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    raw = (
        job("gang", namespace)
        .master(gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .workers(1, gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .build()
    )
    create_job(cluster, raw)
    cluster.wait_for(
        lambda: (
            [p["status"].get("phase") for p in live_pods(cluster, namespace, "gang")]
            == ["Running", "Running"]
        ),
        what="the gang Running",
    )
    before = counters(controller)

    cluster.kubectl("delete", "pod", "gang-worker-0", "--namespace", namespace, "--wait=false")

    cluster.wait_for(
        lambda: counters(controller)["gang_restarts_total"] > before["gang_restarts_total"],
        what="the gang's restart",
    )
    again = get_job(cluster, namespace, "gang")
    assert again is not None
    assert again["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert pod_deleted_restarts(controller) == 1

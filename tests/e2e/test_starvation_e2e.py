"""Starvation on the real control plane: who may hold the queue back, and who may not.

A gang that has waited longer than ``--starvation-seconds`` for room stops everything behind it
(``forecasting`` rule 2), so small jobs cannot starve a big one, and each job held back says
whom it waits behind. A gang one of whose pods no node admits (a nodeSelector no node has), or
that its whole pool could not hold even empty, can never start, whatever ends: it must not hold
anyone back.
The controller runs with a short bound; each test has its own namespace and node pool label.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    create_job,
    get_job,
    live_pods,
    running_controller,
)
from tests.e2e.test_pool_sharing import wait_running

pytestmark = pytest.mark.e2e
STARVATION_SECONDS = 2


@pytest.fixture(scope="module")
def controller(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    logs = tmp_path_factory.mktemp("controller")
    with running_controller(
        cluster.kubeconfig, logs, "--starvation-seconds", str(STARVATION_SECONDS)
    ) as process:
        yield process


def test_a_job_whose_node_selector_no_node_has_never_holds_back_the_jobs_behind_it(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("starve")
    label = f"st-{namespace[-6:]}"
    cluster.add_gpu_nodes(1, label, gpus=8, labels={"pool": label})
    typo = {"nodeSelector": {"pool": f"{label}-typo"}}
    create_job(cluster, job("lost", namespace).master(gpus=1, pod_spec=typo).build())
    queued = cluster.wait_for(
        lambda: condition(get_job(cluster, namespace, "lost"), "Queued"), what="lost queued"
    )
    assert "no eligible node" in queued["message"], queued
    time.sleep(STARVATION_SECONDS + 1)  # lost has waited past the bound

    in_pool = {"nodeSelector": {"pool": label}}
    create_job(cluster, job("small", namespace).master(gpus=1, pod_spec=in_pool).build())

    (small,) = cluster.wait_for(
        lambda: [p for p in live_pods(cluster, namespace, "small") if p["spec"].get("nodeName")],
        timeout=30,
        what="small placed behind the job no node admits",
    )
    assert small["spec"]["nodeName"] == f"{label}-0"
    assert condition(get_job(cluster, namespace, "lost"), "Queued")["status"] == "True"
    assert live_pods(cluster, namespace, "lost") == []


def test_a_gang_larger_than_its_whole_pool_never_holds_back_the_jobs_behind_it(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("whole")
    label = f"wh-{namespace[-6:]}"
    cluster.add_gpu_nodes(2, label, gpus=8, labels={"pool": label})
    in_pool = {"nodeSelector": {"pool": label}}
    too_big = job("big", namespace).master(gpus=8, pod_spec=in_pool)
    create_job(cluster, too_big.workers(2, gpus=8, pod_spec=in_pool).build())  # 24 GPUs of 16
    queued = cluster.wait_for(
        lambda: condition(get_job(cluster, namespace, "big"), "Queued"), what="big queued"
    )
    assert f"in pool pool={label} can ever hold all 3 pods of the gang" in queued["message"]
    time.sleep(STARVATION_SECONDS + 1)  # big has waited past the bound

    create_job(cluster, job("small", namespace).master(gpus=1, pod_spec=in_pool).build())

    cluster.wait_for(
        lambda: [p for p in live_pods(cluster, namespace, "small") if p["spec"].get("nodeName")],
        timeout=30,
        what="small placed behind the gang its pool could never hold",
    )
    assert condition(get_job(cluster, namespace, "big"), "Queued")["status"] == "True"
    assert live_pods(cluster, namespace, "big") == []


def test_a_job_held_behind_a_starving_gang_says_so_in_its_queued_condition(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("behind")
    label = f"bh-{namespace[-6:]}"
    cluster.add_gpu_nodes(1, label, gpus=8, labels={"pool": label})
    in_pool = {"nodeSelector": {"pool": label}}
    create_job(cluster, job("holder", namespace).master(gpus=4, pod_spec=in_pool).build())
    wait_running(cluster, namespace, "holder", 1)
    create_job(cluster, job("big", namespace).master(gpus=8, pod_spec=in_pool).build())
    cluster.wait_for(
        lambda: condition(get_job(cluster, namespace, "big"), "Queued"), what="big queued"
    )
    time.sleep(STARVATION_SECONDS + 1)  # big has waited past the bound

    create_job(cluster, job("small", namespace).master(gpus=1, pod_spec=in_pool).build())

    queued = cluster.wait_for(
        lambda: condition(get_job(cluster, namespace, "small"), "Queued"),
        timeout=30,
        what="small's Queued condition",
    )
    assert queued["reason"] == "WaitingForResources", queued
    assert f"waiting behind {namespace}/big, which has waited over" in queued["message"], queued
    assert live_pods(cluster, namespace, "small") == [], "nothing jumps a starving gang"

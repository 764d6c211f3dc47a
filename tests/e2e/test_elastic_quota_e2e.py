"""Jobs past their namespace's ResourceQuota, on a real control plane: a scale up and a new gang.

The ResourceQuota admission plugin of the apiserver refuses a pod that would exceed a quota
(403 ``exceeded quota``); kube-controller-manager's ``resourcequota-controller`` keeps the
quota's ``status.used`` (admission refuses every pod of a quota without a status, and only that
controller gives back what deleted pods used), so this module runs a control plane of its own
with it. The admitter places the new Worker (its team has no TeamQuota), the create is refused:
the Worker's node is not held for it (another gang takes it), the job says why in an Event and
its Running condition, the gang runs on, and the Worker starts once the quota and a node allow.
A new gang the quota refuses frees its nodes at once too and waits in the queue, saying why;
it is neither announced (``GangAdmitted``) nor written (``startTime``) as admitted until its pods
are made.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    events_of,
    get_job,
    running_controller,
)
from tests.e2e.elastic_jobs import attempt, create, in_pool, running_pods, scale
from tests.e2e.webhook_process import LocalWebhook, registered_webhook
from torchgate.pytorchjob import names
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.cluster import ATTACH_ENV, ClusterFeatures, ControlPlane

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="starts its own control plane"),
]
QUOTA = "gpu-quota"


@pytest.fixture(scope="module")
def quota_cluster(
    control_plane_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A control plane whose kube-controller-manager keeps ResourceQuotas' usage."""
    features = ClusterFeatures(controllers=("resourcequota-controller",))
    workdir = tmp_path_factory.mktemp("quota")
    with ControlPlane(
        binaries=control_plane_binaries, features=features, workdir=workdir / "plane"
    ) as plane:
        cluster = Cluster(plane)
        cluster.install_crds()
        yield cluster


@pytest.fixture(scope="module")
def webhook(quota_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with registered_webhook(quota_cluster, tmp_path_factory.mktemp("webhook")) as server:
        yield server


@pytest.fixture(scope="module")
def controller(
    quota_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    logs: Path = tmp_path_factory.mktemp("controller")
    with running_controller(quota_cluster.kubeconfig, logs) as process:
        yield process


def set_quota(cluster: Cluster, namespace: str, gpus: int) -> None:
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": QUOTA, "namespace": namespace},
            "spec": {"hard": {f"requests.{names.DEFAULT_GPU_RESOURCE}": str(gpus)}},
        }
    )

    def counted() -> bool:
        quota = cluster.get("resourcequota", QUOTA, namespace) or {}
        hard = (quota.get("status") or {}).get("hard") or {}
        return hard.get(f"requests.{names.DEFAULT_GPU_RESOURCE}") == str(gpus)

    cluster.wait_for(counted, timeout=30, what=f"{QUOTA} counted by resourcequota-controller")


def test_a_scale_up_the_namespace_quota_refuses_holds_no_node_says_why_and_starts_later(
    quota_cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    cluster = quota_cluster
    namespace = cluster.new_namespace("elquota")
    cluster.add_gpu_nodes(3, "elquota", gpus=8, labels={"pool": "elquota"})
    set_quota(cluster, namespace, 16)
    elastic = job("el", namespace).workers(2, gpus=8).elastic(minReplicas=1, maxReplicas=4)
    create(cluster, in_pool(elastic.build(), "elquota"))
    first = cluster.wait_for(lambda: running_pods(cluster, namespace, "el", 2), timeout=60)
    before = attempt(cluster, namespace, "el")

    scale(cluster, namespace, "el", 3)

    def refused_event() -> dict[str, Any] | None:
        return next(
            (
                e
                for e in events_of(cluster, namespace, "el")
                if e["reason"] == "FailedCreate" and QUOTA in e["message"]
            ),
            None,
        )

    event = cluster.wait_for(refused_event, timeout=30, what="FailedCreate naming the quota")
    assert event["type"] == "Warning"
    assert "el-worker-2" in event["message"]

    def says_refused() -> dict[str, Any] | None:
        running = condition(get_job(cluster, namespace, "el"), "Running")
        message = running.get("message", "") if running else ""
        return running if "el-worker-2" in message and QUOTA in message else None

    running = cluster.wait_for(says_refused, timeout=30, what="Running naming the quota")
    assert running["status"] == "True"

    # The node the admitter picked for el-worker-2 is not held for ever: another gang gets it.
    other_namespace = cluster.new_namespace("elquota-other")
    create(cluster, in_pool(job("other", other_namespace).workers(1, gpus=8).build(), "elquota"))
    cluster.wait_for(
        lambda: running_pods(cluster, other_namespace, "other", 1),
        timeout=30,
        what="another gang on the node the refused Worker was placed on",
    )
    assert running_pods(cluster, namespace, "el", 2) == first
    assert attempt(cluster, namespace, "el") == before

    # Room and quota again: the Worker starts beside the gang, without a restart.
    cluster.kubectl("delete", "pytorchjob", "other", "-n", other_namespace)
    set_quota(cluster, namespace, 24)
    cluster.wait_for(
        lambda: running_pods(cluster, namespace, "el", 3), timeout=60, what="el-worker-2 Running"
    )
    assert attempt(cluster, namespace, "el") == before


def test_a_gang_the_namespace_quota_refuses_holds_no_node_says_why_and_starts_later(
    quota_cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    cluster = quota_cluster
    namespace = cluster.new_namespace("gangquota")
    cluster.add_gpu_nodes(2, "gangquota", gpus=8, labels={"pool": "gangquota"})
    set_quota(cluster, namespace, 0)
    create(cluster, in_pool(job("g", namespace).workers(1, gpus=8).build(), "gangquota"))

    def refused_event() -> bool:
        return any(
            e["reason"] == "FailedCreate" and QUOTA in e["message"]
            for e in events_of(cluster, namespace, "g")
        )

    cluster.wait_for(refused_event, timeout=30, what="FailedCreate naming the quota")

    def says_refused() -> dict[str, Any] | None:
        queued = condition(get_job(cluster, namespace, "g"), "Queued")
        return queued if queued and QUOTA in queued.get("message", "") else None

    cluster.wait_for(says_refused, timeout=30, what="Queued naming the quota")

    # Both nodes are free for a gang that needs them both.
    other_namespace = cluster.new_namespace("gangquota-other")
    create(cluster, in_pool(job("o", other_namespace).workers(2, gpus=8).build(), "gangquota"))
    cluster.wait_for(
        lambda: running_pods(cluster, other_namespace, "o", 2),
        timeout=30,
        what="another gang on both nodes",
    )

    cluster.kubectl("delete", "pytorchjob", "o", "-n", other_namespace)
    set_quota(cluster, namespace, 8)
    cluster.wait_for(lambda: running_pods(cluster, namespace, "g", 1), timeout=60, what="g Running")


def test_a_gang_the_namespace_quota_refuses_is_announced_admitted_once_when_its_pods_are_made(
    quota_cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    cluster = quota_cluster
    namespace = cluster.new_namespace("announced")
    cluster.add_gpu_nodes(1, "announced", gpus=8, labels={"pool": "announced"})
    set_quota(cluster, namespace, 0)
    create(cluster, in_pool(job("a", namespace).workers(1, gpus=8).build(), "announced"))

    def reasons() -> list[str]:
        return [str(e["reason"]) for e in events_of(cluster, namespace, "a")]

    def says_refused() -> dict[str, Any] | None:
        queued = condition(get_job(cluster, namespace, "a"), "Queued")
        return queued if queued and QUOTA in queued.get("message", "") else None

    cluster.wait_for(says_refused, timeout=30, what="Queued naming the quota")
    cluster.wait_for(lambda: "FailedCreate" in reasons(), timeout=30, what="FailedCreate")
    assert "GangAdmitted" not in reasons(), "no pod was made: the gang was not admitted"
    status = get_job(cluster, namespace, "a").get("status") or {}
    assert "startTime" not in status, "not started: its activeDeadlineSeconds does not count yet"

    set_quota(cluster, namespace, 8)
    cluster.wait_for(lambda: running_pods(cluster, namespace, "a", 1), timeout=60, what="Running")
    cluster.wait_for(lambda: "GangAdmitted" in reasons(), timeout=30, what="GangAdmitted")
    assert reasons().count("GangAdmitted") == 1

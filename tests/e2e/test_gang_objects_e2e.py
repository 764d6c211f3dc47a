"""Kubernetes' gang objects on a real control plane: with ``GenericWorkload`` on, and off.

With the gate on (Kubernetes 1.37: ``scheduling.k8s.io/v1beta1``), a control plane of this
module's own runs two controllers, one per namespace: one as deployed (gang objects on), one
with ``--no-gang-objects``. With the gate off, the session's cluster and a controller as deployed.
Assertions read the cluster's state (Workloads, PodGroups, pods' ``schedulingGroup`` and node),
never logs.

The gang with one unschedulable pod: torchgate admits it on nodes with room, then kube-scheduler
refuses exactly one of its pods, the Master, whose volume names a PersistentVolumeClaim that does
not exist (torchgate plans CPUs, GPUs and nodes, not volumes). Pod by pod, the Workers would be
bound at once; as one PodGroup, kube-scheduler holds them at Permit and binds none.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from functools import partial
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
    live_pods,
)
from torchgate_dev.controlplane import versions
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.cluster import ATTACH_ENV, ClusterFeatures, ControlPlane

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="starts its own control plane"),
]
API = "scheduling.k8s.io/v1beta1"
GANG_ON, GANG_OFF, UPGRADED = "gangs-on", "gangs-off", "gangs-upgraded"


@pytest.fixture(scope="module")
def gated(
    control_plane_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A control plane with ``GenericWorkload`` on and ``scheduling.k8s.io/v1beta1`` served."""
    version = versions.supported().select(environ=os.environ)
    if not str(version).startswith("1.37."):
        pytest.skip(f"{API} Workload and PodGroup are 1.37's; this session runs {version}")
    features = ClusterFeatures(
        feature_gates={"GenericWorkload": True},
        runtime_config={API: "true"},
        controllers=("podgroup-protection-controller",),
    )
    workdir = tmp_path_factory.mktemp("gated")
    with ControlPlane(
        binaries=control_plane_binaries, features=features, workdir=workdir / "plane"
    ) as plane:
        cluster = Cluster(plane)
        cluster.install_crds()
        for namespace in (GANG_ON, GANG_OFF, UPGRADED):
            cluster.kubectl("create", "namespace", namespace)
            cluster.wait_for(
                partial(cluster.get, "serviceaccount", "default", namespace),
                what=f"ServiceAccount {namespace}/default",
            )
        cluster.add_gpu_nodes(4, "cpu", gpus=0, labels={"pool": "gangs"}, keep=True)
        yield cluster


@pytest.fixture(scope="module")
def controllers(
    gated: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ControllerProcess]]:
    """One controller as deployed for ``GANG_ON``, one ``--no-gang-objects`` for ``GANG_OFF``."""
    logs = tmp_path_factory.mktemp("gated-controllers")
    started = {
        GANG_ON: ControllerProcess(gated.kubeconfig, logs, "--namespace", GANG_ON).start(),
        GANG_OFF: ControllerProcess(
            gated.kubeconfig, logs, "--namespace", GANG_OFF, "--no-gang-objects"
        ).start(),
    }
    yield started
    for process in started.values():
        assert process.stop() == 0, process.log()


def small_job(name: str, namespace: str, **master: Any) -> dict[str, Any]:
    """Master + 2 Workers without GPUs on the ``gangs`` pool, scheduled for a long time."""
    pod_spec = {"nodeSelector": {"pool": "gangs"}}
    return (
        job(name, namespace)
        .master(pod_spec={**pod_spec, **master.pop("pod_spec", {})}, **master)
        .workers(2, pod_spec=pod_spec)
        .scheduling(scheduleTimeoutSeconds=600)
        .build()
    )


def running(
    cluster: Cluster, namespace: str, name: str, count: int = 3
) -> list[dict[str, Any]] | None:
    pods = live_pods(cluster, namespace, name)
    ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def gang_objects(cluster: Cluster, namespace: str) -> tuple[list[Any], list[Any]]:
    return (
        cluster.list_objects("workloads.scheduling.k8s.io", namespace),
        cluster.list_objects("podgroups.scheduling.k8s.io", namespace),
    )


def test_workload_and_pod_group_exist_and_the_pods_name_them(
    gated: Cluster, controllers: dict[str, ControllerProcess]
) -> None:
    create_job(gated, small_job("named", GANG_ON))

    pods = gated.wait_for(lambda: running(gated, GANG_ON, "named"), timeout=90, what="3 Running")

    workload = gated.get("workloads.scheduling.k8s.io", "named", GANG_ON)
    group = gated.get("podgroups.scheduling.k8s.io", "named-gang-1", GANG_ON)
    assert workload is not None, controllers[GANG_ON].log()
    assert group is not None, controllers[GANG_ON].log()
    (template,) = workload["spec"]["podGroupTemplates"]
    assert template["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert template["disruptionMode"] == {"all": {}}
    assert workload["spec"]["controllerRef"]["kind"] == "PyTorchJob"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group["spec"]["disruptionMode"] == {"all": {}}
    assert group["spec"]["workloadRef"] == {"workloadName": "named", "templateName": "gang"}
    assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods} == {
        "named-gang-1"
    }

    gated.kubectl("delete", "pytorchjob", "named", "--namespace", GANG_ON)
    gated.wait_for(
        lambda: gang_objects(gated, GANG_ON) == ([], []),
        timeout=60,
        what="the Workload and PodGroup garbage-collected with the job",
    )


def test_a_gang_with_one_unschedulable_pod_has_none_bound(
    gated: Cluster, controllers: dict[str, ControllerProcess]
) -> None:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "no-such-claim"}}
    create_job(gated, small_job("stuck", GANG_ON, pod_spec={"volumes": [volume]}))

    def master_refused() -> list[dict[str, Any]] | None:
        pods = live_pods(gated, GANG_ON, "stuck")
        master = next((p for p in pods if p["metadata"]["name"] == "stuck-master-0"), {})
        conditions = master.get("status", {}).get("conditions", [])
        # Unschedulable; or, on 1.37.2 once another gang's PodGroup was deleted, SchedulerError
        # ("DynamicResources" PodGroupPostFilter: not found). Either way it was refused.
        refused = any(
            c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason")
            for c in conditions
        )
        return pods if len(pods) == 3 and refused else None

    gated.wait_for(master_refused, timeout=90, what="kube-scheduler refusing stuck-master-0")
    # Pod by pod, the Workers were bound within a second of their creation; wait a while longer.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        bound = [p for p in live_pods(gated, GANG_ON, "stuck") if p["spec"].get("nodeName")]
        assert not bound, dump(bound)
        time.sleep(1)
    assert len(live_pods(gated, GANG_ON, "stuck")) == 3


def test_a_gang_whose_pod_group_is_refused_runs_without_gang_objects(
    gated: Cluster, controllers: dict[str, ControllerProcess]
) -> None:
    raw = small_job("classless", GANG_ON)
    raw["spec"]["runPolicy"]["schedulingPolicy"]["priorityClass"] = "no-such-class"
    create_job(gated, raw)

    # The apiserver refuses a PodGroup naming a PriorityClass it lacks (403); pods name none.
    # Retried, the refusal failed every reconcile: no pod, no word to the user.
    pods = gated.wait_for(
        lambda: running(gated, GANG_ON, "classless"), timeout=90, what="3 Running"
    )

    assert not any("schedulingGroup" in p["spec"] for p in pods)
    events = events_once(gated, GANG_ON, "classless", "FailedCreate")
    refused = [e for e in events if e["reason"] == "FailedCreate"]
    assert refused, controllers[GANG_ON].log()
    assert refused[0]["type"] == "Warning"
    assert "no-such-class" in refused[0]["message"]


def test_with_the_flag_off_the_gang_runs_without_gang_objects(
    gated: Cluster, controllers: dict[str, ControllerProcess]
) -> None:
    create_job(gated, small_job("plain", GANG_OFF))

    pods = gated.wait_for(lambda: running(gated, GANG_OFF, "plain"), timeout=90, what="3 Running")

    assert not any("schedulingGroup" in p["spec"] for p in pods)
    assert gang_objects(gated, GANG_OFF) == ([], [])


def test_a_gang_begun_before_gang_objects_still_grows_after_an_upgrade(
    gated: Cluster, tmp_path: Path
) -> None:
    pod_spec = {"nodeSelector": {"pool": "gangs"}}
    elastic = job("grows", UPGRADED).workers(2, pod_spec=pod_spec)
    elastic = elastic.elastic(minReplicas=2, maxReplicas=4).scheduling(scheduleTimeoutSeconds=600)
    before = ControllerProcess(gated.kubeconfig, tmp_path, "--namespace", UPGRADED)
    before.args.append("--no-gang-objects")  # as a torchgate without gang objects ran it
    before.start()
    try:
        create_job(gated, elastic.build())
        first = gated.wait_for(
            lambda: running(gated, UPGRADED, "grows", 2), timeout=90, what="2 Running"
        )
    finally:
        assert before.stop() == 0, before.log()
    after = ControllerProcess(gated.kubeconfig, tmp_path, "--namespace", UPGRADED).start()
    try:
        scaled = gated.kubectl("scale", "-n", UPGRADED, "pytorchjob/grows", "--replicas=3")
        assert scaled.returncode == 0, scaled.stderr
        # In a PodGroup of minCount 2 its running gang never joined, the new Worker stayed
        # Pending for good (kube-scheduler's PreEnqueue: waiting for minCount pods).
        grown = gated.wait_for(
            lambda: running(gated, UPGRADED, "grows", 3), timeout=60, what="3 Running"
        )
    finally:
        assert after.stop() == 0, after.log()
    assert {p["metadata"]["uid"] for p in first} < {p["metadata"]["uid"] for p in grown}
    assert not any("schedulingGroup" in p["spec"] for p in grown)
    assert gang_objects(gated, UPGRADED)[1] == []


def test_without_the_gate_nothing_changes(cluster: Cluster, tmp_path: Path) -> None:
    assert API not in cluster.kubectl("api-versions").stdout.split()
    namespace = cluster.new_namespace("nogate")
    label = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(3, label, gpus=0, labels={"pool": label})
    raw = small_job("ungated", namespace)
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {"pool": label}
    process = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    try:
        create_job(cluster, raw)
        pods = cluster.wait_for(
            lambda: running(cluster, namespace, "ungated"), timeout=90, what="3 Running"
        )
        errors = [
            line
            for line in process.metrics().splitlines()
            if line.startswith("torchgate_controller_reconcile_errors_total")
        ]
    finally:
        assert process.stop() == 0, process.log()

    assert not any("schedulingGroup" in p["spec"] for p in pods)
    assert errors
    assert all(line.endswith(" 0.0") for line in errors), errors

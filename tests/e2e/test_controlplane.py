"""The control plane behaves like a real cluster: scheduling, kwok pod lifecycle, GC, CRD schemas.

These tests pin the harness's promises that the other e2e suites build on; each asserts cluster
state (conditions, phases, exit codes, existence), never log text.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.builders.job import job
from tests.builders.policy import policy
from tests.e2e.conftest import REPO_ROOT, Cluster, load_yaml
from torchgate.pytorchjob.policy import parse_policy
from torchgate_dev.controlplane import kwok, versions
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.cluster import (
    ATTACH_ENV,
    ClusterFeatures,
    ControlPlane,
    ControlPlaneError,
)

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

SAMPLE_POLICY = REPO_ROOT / "manifests" / "samples" / "placementpolicy.yaml"


def gpu_pod(
    name: str, *, gpus: int, pool: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod asking for ``gpus`` GPUs on the nodes of ``pool``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"e2e-pool": pool},
            "containers": [
                {
                    "name": "pytorch",
                    "image": "example.invalid/pytorch:latest",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The condition of that type ({} when absent)."""
    for item in (obj or {}).get("status", {}).get("conditions", []):
        if item.get("type") == kind:
            return dict(item)
    return {}


def phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = cluster.get("pod", name, namespace)
    return pod["status"].get("phase") if pod else None


def schedulable_node(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The node once it is Ready and untainted.

    New nodes get ``node.kubernetes.io/not-ready:NoSchedule`` at admission; the node lifecycle
    controller removes it on its next pass (every few seconds) after the node reports Ready.
    """
    node = cluster.get("node", name)
    if condition(node, "Ready").get("status") != "True" or (node.get("spec") or {}).get("taints"):
        return None
    return node


def add_pool(cluster: Cluster, count: int = 2, **node_args: Any) -> tuple[str, list[str]]:
    """Fake GPU nodes labelled with a pool name unique to this test (leftovers cannot interfere)."""
    pool = f"pool-{secrets.token_hex(3)}"
    nodes = cluster.add_gpu_nodes(count, prefix=pool, labels={"e2e-pool": pool}, **node_args)
    return pool, nodes


def create_pod(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    cluster.kubectl("create", "--namespace", namespace, "-f", "-", input=json.dumps(pod))


def start_running_pod(
    cluster: Cluster, namespace: str, name: str, pool: str, **pod_args: Any
) -> None:
    create_pod(cluster, namespace, gpu_pod(name, gpus=1, pool=pool, **pod_args))
    cluster.wait_for(
        lambda: phase(cluster, namespace, name) == "Running", what=f"pod {name} Running"
    )


# ----------------------------------------------------------------------------- nodes, scheduling


def test_fake_gpu_nodes_become_ready_with_their_capacity(cluster: Cluster) -> None:
    _, names = add_pool(cluster, count=3, gpus=4, rdma=2)

    for name in names:
        node = cluster.wait_for(
            partial(schedulable_node, cluster, name), what=f"node {name} Ready and untainted"
        )
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert node["status"]["allocatable"]["rdma/hca"] == "2"


def test_gpu_pod_is_bound_by_the_scheduler_and_run_by_kwok(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    pool, nodes = add_pool(cluster)

    start_running_pod(cluster, namespace, "trainer", pool)

    pod = cluster.get("pod", "trainer", namespace)
    assert pod is not None
    assert pod["spec"]["nodeName"] in nodes
    assert condition(pod, "PodScheduled")["status"] == "True"
    assert condition(pod, "Ready")["status"] == "True"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    pool, _ = add_pool(cluster, gpus=8)
    create_pod(cluster, namespace, gpu_pod("too-big", gpus=9, pool=pool))

    scheduled = cluster.wait_for(
        lambda: condition(cluster.get("pod", "too-big", namespace), "PodScheduled"),
        what="a PodScheduled condition on too-big",
    )

    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    after = cluster.get("pod", "too-big", namespace)
    assert after is not None
    assert after["status"]["phase"] == "Pending"
    assert not after["spec"].get("nodeName")
    reasons = {
        event["reason"]
        for event in cluster.list_objects("events", namespace)
        if event["involvedObject"]["name"] == "too-big"
    }
    assert "FailedScheduling" in reasons


# ----------------------------------------------------------------------------- kwok pod endings


@pytest.mark.parametrize(
    ("exit_code", "expected_phase", "expected_reason"),
    [(0, "Succeeded", "Completed"), (137, "Failed", "Error")],
    ids=["exit-0-succeeds", "exit-137-fails"],
)
def test_fake_exit_code_ends_a_running_pod(
    cluster: Cluster, exit_code: int, expected_phase: str, expected_reason: str
) -> None:
    namespace = cluster.new_namespace()
    pool, _ = add_pool(cluster, count=1)
    start_running_pod(cluster, namespace, "trainer", pool)

    cluster.finish_pod(namespace, "trainer", exit_code)

    cluster.wait_for(
        lambda: phase(cluster, namespace, "trainer") == expected_phase,
        what=f"trainer {expected_phase}",
    )
    pod = cluster.get("pod", "trainer", namespace)
    assert pod is not None
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == exit_code
    assert status["state"]["terminated"]["reason"] == expected_reason
    assert "running" not in status["state"]
    assert condition(pod, "Ready")["status"] == "False"


def test_fake_run_seconds_ends_a_pod_after_its_deadline_only(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    pool, _ = add_pool(cluster, count=1)
    start_running_pod(
        cluster, namespace, "long", pool, annotations=kwok.run_seconds_annotation(3600)
    )
    # Not waited for as Running: with one second to run, a slow poll can miss that phase.
    create_pod(
        cluster,
        namespace,
        gpu_pod("short", gpus=1, pool=pool, annotations=kwok.run_seconds_annotation(1)),
    )

    cluster.wait_for(
        lambda: phase(cluster, namespace, "short") == "Succeeded", what="short Succeeded"
    )

    short = cluster.get("pod", "short", namespace)
    assert short is not None
    assert short["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert phase(cluster, namespace, "long") == "Running"


def test_invalid_fake_exit_code_leaves_the_pod_running(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    pool, _ = add_pool(cluster, count=1)
    start_running_pod(
        cluster, namespace, "odd", pool, annotations={kwok.ANNOTATION_FAKE_EXIT_CODE: "boom"}
    )
    start_running_pod(cluster, namespace, "control", pool)

    cluster.finish_pod(namespace, "control", 3)
    cluster.wait_for(lambda: phase(cluster, namespace, "control") == "Failed", what="control ends")

    assert phase(cluster, namespace, "odd") == "Running"


# ----------------------------------------------------------------------------- garbage collection


def test_pod_of_a_deleted_owner_is_garbage_collected(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    pool, _ = add_pool(cluster, count=1)
    cluster.kubectl("create", "configmap", "owner", "--namespace", namespace)
    owner = cluster.get("configmap", "owner", namespace)
    assert owner is not None
    pod = gpu_pod("owned", gpus=1, pool=pool)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    ]
    create_pod(cluster, namespace, pod)
    cluster.wait_for(lambda: phase(cluster, namespace, "owned") == "Running", what="owned Running")

    cluster.kubectl("delete", "configmap", "owner", "--namespace", namespace)

    cluster.wait_for(
        lambda: cluster.get("pod", "owned", namespace) is None,
        timeout=60,
        what="the garbage collector to delete pod owned",
    )


# ----------------------------------------------------------------------------- CRDs


def test_both_crds_are_established(cluster: Cluster) -> None:
    for name in ("pytorchjobs.kubeflow.org", "placementpolicies.torchgate.io"):
        crd = cluster.get("crd", name)
        assert condition(crd, "Established")["status"] == "True"
        assert condition(crd, "NamesAccepted")["status"] == "True"


def test_placement_policy_with_a_wrong_type_is_refused_by_the_schema(cluster: Cluster) -> None:
    bad = policy("bad-types", maxGPUsPerJob="lots", allowPrivileged="yes")

    status, body = cluster.api_request(
        "POST", "/apis/torchgate.io/v1alpha1/placementpolicies?dryRun=All", bad
    )

    assert status == 422
    assert body["reason"] == "Invalid"
    causes = {(cause["reason"], cause["field"]) for cause in body["details"]["causes"]}
    assert causes == {
        ("FieldValueTypeInvalid", "spec.maxGPUsPerJob"),
        ("FieldValueTypeInvalid", "spec.allowPrivileged"),
    }


def test_sample_placement_policy_is_accepted_and_parses_cleanly(cluster: Cluster) -> None:
    sample = load_yaml(SAMPLE_POLICY)

    status, stored = cluster.api_request(
        "POST", "/apis/torchgate.io/v1alpha1/placementpolicies?dryRun=All", sample
    )

    assert status == 201
    assert stored["spec"] == sample["spec"]  # nothing pruned: the schema knows every field
    parsed, errors = parse_policy(stored)
    assert errors == []
    assert parsed is not None
    assert parsed.max_gpus_per_job == 64


def test_pytorchjob_replicas_must_be_an_integer(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    bad = job("typed", namespace).master().workers(2).build()
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "$NUM_NODES"

    status, body = cluster.api_request(
        "POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs?dryRun=All", bad
    )

    assert status == 422
    causes = {(cause["reason"], cause["field"]) for cause in body["details"]["causes"]}
    assert ("FieldValueTypeInvalid", "spec.pytorchReplicaSpecs.Worker.replicas") in causes
    # The scale subresource checks its specReplicasPath too (field written with a leading dot).
    assert {field.lstrip(".") for _, field in causes} == {
        "spec.pytorchReplicaSpecs.Worker.replicas"
    }


def test_pytorchjob_values_are_left_to_the_webhook(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    odd = (
        job("odd-values", namespace)
        .master(restart_policy="Sometimes")
        .workers(1, key="worker")
        .run_policy(cleanPodPolicy="Whenever")
        .build()
    )
    odd["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["unknownField"] = {"x": 1}

    status, stored = cluster.api_request(
        "POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs?dryRun=All", odd
    )

    assert status == 201
    replicas = stored["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["restartPolicy"] == "Sometimes"
    assert set(replicas) == {"Master", "worker"}
    assert replicas["Master"]["template"]["spec"]["unknownField"] == {"x": 1}
    assert stored["spec"]["runPolicy"] == {"cleanPodPolicy": "Whenever", "suspend": False}


def test_pytorchjob_scale_subresource_reads_worker_replicas(cluster: Cluster) -> None:
    namespace = cluster.new_namespace()
    cluster.apply(job("scalable", namespace).master().workers(3).build())

    status, scale = cluster.api_request(
        "GET", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/scalable/scale"
    )

    assert status == 200
    assert scale["spec"]["replicas"] == 3


# ----------------------------------------------------------------------------- versions, features

# The Workload API of each supported minor (GenericWorkload): alpha in 1.36, beta in 1.37; off
# by default in both.
WORKLOAD_API = {"1.36": "scheduling.k8s.io/v1alpha2", "1.37": "scheduling.k8s.io/v1beta1"}


@pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="an attached cluster has its own")
def test_the_control_plane_runs_the_kubernetes_version_chosen_for_the_session(
    cluster: Cluster,
) -> None:
    chosen = versions.supported().select(environ=os.environ)

    reported = json.loads(cluster.kubectl("version", "--output=json").stdout)["serverVersion"]

    assert reported["gitVersion"] == f"v{chosen}"
    assert cluster.plane.kubernetes_version == chosen


@pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="starts its own control plane")
def test_features_turn_on_a_gate_and_an_api_version_the_defaults_leave_off(
    cluster: Cluster, control_plane_binaries: Binaries, tmp_path: Path
) -> None:
    version = cluster.plane.kubernetes_version or ""
    api = WORKLOAD_API[version.rpartition(".")[0]]
    assert api not in cluster.kubectl("api-versions").stdout.split()
    features = ClusterFeatures(
        feature_gates={"GenericWorkload": True},
        runtime_config={api: "true"},
        controllers=("podgroup-protection-controller",),
    )

    with ControlPlane(
        binaries=control_plane_binaries, features=features, workdir=tmp_path / "plane"
    ) as plane:
        served = plane.kubectl("api-versions").stdout.split()
        metrics = plane.kubectl("get", "--raw=/metrics").stdout

    assert api in served
    assert re.search(r'kubernetes_feature_enabled\{name="GenericWorkload",stage="\w+"\} 1', metrics)


# ----------------------------------------------------------------------------- lifecycle


@pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="starts its own control plane")
def test_detached_control_plane_is_stopped_from_its_state_file(
    control_plane_binaries: Binaries, tmp_path: Path
) -> None:
    workdir = tmp_path / "dev"
    started = ControlPlane(binaries=control_plane_binaries, workdir=workdir).start(detach=True)
    try:
        state = json.loads((workdir / "state.json").read_text())
        pids = [process["pid"] for process in state["processes"]]

        restored = ControlPlane.from_state(workdir)
        assert restored.is_running()
        assert restored.server == started.server
        assert restored.kubectl("get", "--raw=/readyz").stdout == "ok"
        with pytest.raises(ControlPlaneError):
            ControlPlane(binaries=control_plane_binaries, workdir=workdir).start()
        assert restored.is_running()  # the refused start touched nothing

        restored.stop()

        assert [pid for pid in pids if _alive(pid)] == []
        assert not (workdir / "state.json").exists()
        assert not started.is_running()
    finally:
        started.stop()  # a no-op when the test passed; stops the processes when it did not


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


OWNER_SCRIPT = """
import sys, time
from pathlib import Path
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.cluster import ControlPlane

plane = ControlPlane(binaries=Binaries.in_directory(Path(sys.argv[1]))).start()
print(plane.workdir, flush=True)
time.sleep(600)
"""


def started_by_child(binaries: Binaries, tmp_path: Path) -> tuple[Any, Path, list[int]]:
    """A Python process that starts a control plane in a temp dir under ``tmp_path``."""
    child = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, str(binaries.kube_apiserver.parent)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        cwd=REPO_ROOT,
    )
    assert child.stdout is not None
    workdir = Path(child.stdout.readline().strip())
    state = json.loads((workdir / "state.json").read_text())
    return child, workdir, [process["pid"] for process in state["processes"]]


@pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="starts its own control plane")
def test_sigterm_to_the_owner_stops_its_control_plane(
    control_plane_binaries: Binaries, tmp_path: Path
) -> None:
    child, workdir, pids = started_by_child(control_plane_binaries, tmp_path)
    with child:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)

    assert [pid for pid in pids if _alive(pid)] == []
    assert not workdir.exists()


@pytest.mark.skipif(bool(os.environ.get(ATTACH_ENV)), reason="starts its own control plane")
def test_control_plane_of_a_killed_owner_is_swept_up(
    control_plane_binaries: Binaries, tmp_path: Path
) -> None:
    child, workdir, pids = started_by_child(control_plane_binaries, tmp_path)
    with child:
        child.kill()
        child.wait(timeout=60)
    try:
        assert all(_alive(pid) for pid in pids)  # SIGKILL runs no cleanup

        assert ControlPlane.stop_orphans(tmp_path) == [workdir]

        assert [pid for pid in pids if _alive(pid)] == []
        assert not workdir.exists()
    finally:
        ControlPlane.stop_orphans(tmp_path)

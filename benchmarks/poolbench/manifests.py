"""What the cluster benchmark sends to the apiserver (pure): jobs, TeamQuotas, nodes, priorities.

Every pod asks for ``GPUS_PER_NODE`` GPUs (a whole node) and selects the benchmark's pool; a
gang's Master ends by itself ``seconds`` after it starts (kwok's ``torchgate.io/fake-run-seconds``
stage), and ``cleanPodPolicy: Running`` makes torchgate delete its Workers then. The nodes carry
the rack and hostname labels of ``workload.pool_nodes``, so the controller sees the topology the
simulation decides over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchgate_dev.controlplane import kwok

from .workload import HOSTNAME, RACK

POOL = "bench"
GPUS_PER_NODE = 8
LOW, HIGH = "bench-low", "bench-high"
PRIORITIES = {LOW: 100, HIGH: 10_000}
NO_STARVATION = 10**9  # seconds: a waiting gang never stops the ones behind it
QUOTA_API = "/apis/torchgate.io/v1alpha1/teamquotas"
JOBS_API = "/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"


def pytorchjob(
    name: str,
    namespace: str,
    pods: int,
    seconds: float,
    *,
    priority_class: str | None = None,
    gpus_per_pod: int = GPUS_PER_NODE,
    deadline_margin: float | None = None,
) -> dict[str, Any]:
    """A gang of ``pods`` pods, whole nodes by default; the Master ends by itself after ``seconds``.

    ``deadline_margin``: when given, ``runPolicy.activeDeadlineSeconds`` is ``seconds`` plus it,
    so the admission cycle knows when the gang has ended at the latest (its backfill reserves
    the head gang's nodes from then). The controller benchmark submits its gangs through this
    too (1 GPU per pod).
    """

    def replica(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            "resources": {"limits": {"nvidia.com/gpu": gpus_per_pod}},
        }
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"nodeSelector": {"pool": POOL}, "containers": [container]},
            },
        }

    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running"}
    if priority_class is not None:
        run_policy["schedulingPolicy"] = {"priorityClass": priority_class}
    if deadline_margin is not None:
        run_policy["activeDeadlineSeconds"] = int(seconds + deadline_margin)
    replicas = {"Master": replica(1, kwok.run_seconds_annotation(int(seconds)))}
    if pods > 1:
        replicas["Worker"] = replica(pods - 1, {})
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": replicas},
    }


def team_quota(name: str, namespace: str, nominal_gpus: int) -> dict[str, Any]:
    """A TeamQuota of ``nominal_gpus`` in the benchmark's cohort, borrowing unlimited."""
    return {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": name},
        "spec": {"namespaces": [namespace], "cohort": POOL, "nominalGPUs": nominal_gpus},
    }


def pod_names(job: str, pods: int) -> list[str]:
    """The gang's pod names, Master first."""
    return [f"{job}-master-0"] + [f"{job}-worker-{i}" for i in range(pods - 1)]


def pool_objects(labelled: Sequence[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    """The kwok GPU nodes of the pool (``workload.pool_nodes``) and the two PriorityClasses."""
    nodes = [
        kwok.gpu_node(
            name,
            gpus=GPUS_PER_NODE,
            labels={"pool": POOL, RACK: labels[RACK], HOSTNAME: labels[HOSTNAME]},
        )
        for name, labels in labelled
    ]
    priority_classes = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for name, value in PRIORITIES.items()
    ]
    return nodes + priority_classes

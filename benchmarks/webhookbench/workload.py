"""The workload: the AdmissionReviews the benchmark sends (pure: no I/O).

Rules:

* The job is a 16-replica GPU PyTorchJob (1 Master + 15 Workers, 4 GPUs and one ``rdma/hca``
  each) in ``NAMESPACE``, which the sample PlacementPolicy selects, so every default applies.
  It is written out here in full (``build_job``): it is this benchmark's fixed input, not a shape
  tests vary, so the benchmark depends on the product and not on the test tree's builders.
* It carries what the apiserver sends: kubectl's ``last-applied-configuration`` annotation,
  ``managedFields``, a realistic ``userInfo``, ``oldObject: null``, ``CreateOptions``.
* ``/mutate`` gets the job as submitted; ``/validate`` gets it as the apiserver passes it on:
  defaulted under the policy, with ``uid``, ``creationTimestamp`` and ``generation`` set.
* Every request has its own ``request.uid`` (``UUID(int=1)``, ``UUID(int=2)``, ...).
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.webhook.defaulting import default_job

NAMESPACE: Final = "team-vision"  # selected by the sample policy, so every default is exercised
NAME: Final = "resnet50-ddp"
WORKERS: Final = 15
APP_LABELS: Final = {"app.kubernetes.io/name": "resnet50"}
ENV: Final = {
    "NCCL_DEBUG": "WARN",
    "NCCL_IB_HCA": "mlx5",
    "NCCL_SOCKET_IFNAME": "eth0",
    "TORCH_DISTRIBUTED_DEBUG": "OFF",
    "OMP_NUM_THREADS": "8",
    "WANDB_PROJECT": "resnet50-imagenet",
}
ARGS: Final = ("--backend", "nccl", "--epochs", "90", "--batch-size", "256", "--data", "/datasets")
RESOURCES: Final = {
    "requests": {"cpu": "24", "memory": "192Gi", "nvidia.com/gpu": 4, "rdma/hca": 1},
    "limits": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 4, "rdma/hca": 1},
}


def build_job() -> dict[str, Any]:
    """A 16-replica GPU PyTorchJob (1 Master + 15 Workers) as ``kubectl apply`` submits it."""
    job: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "labels": {**APP_LABELS, "team": "vision"},
            "annotations": {"owner": "alice@example.com"},
        },
        "spec": {
            "pytorchReplicaSpecs": {names.MASTER: _replica(1), names.WORKER: _replica(WORKERS)}
        },
    }
    # kubectl apply's annotation, and the managedFields the apiserver records before admission.
    applied = json.dumps(job, separators=(",", ":"), sort_keys=True)
    job["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
        applied + "\n"
    )
    job["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "kubeflow.org/v1",
            "time": "2026-07-01T12:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:annotations": {".": {}, "f:owner": {}}},
                "f:spec": {"f:pytorchReplicaSpecs": {"f:Master": {}, "f:Worker": {}}},
            },
        }
    ]
    return job


def _replica(replicas: int) -> dict[str, Any]:
    container = {
        "name": names.CONTAINER_NAME,
        "image": "registry.example.com/vision/resnet50:2026.07.1",
        "args": list(ARGS),
        "resources": copy.deepcopy(RESOURCES),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "train"],
        "env": [{"name": k, "value": v} for k, v in ENV.items()],
        "volumeMounts": [
            {"name": "datasets", "mountPath": "/datasets", "readOnly": True},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
        ],
    }
    pod_spec = {
        "containers": [container],
        "volumes": [
            {"name": "datasets", "hostPath": {"path": "/datasets/imagenet"}},
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "resnet50-ckpt"}},
        ],
        "priorityClassName": "research",
    }
    return {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {"spec": pod_spec, "metadata": {"labels": dict(APP_LABELS)}},
    }


def build_review(job: dict[str, Any], uid: str) -> dict[str, Any]:
    """The ``admission.k8s.io/v1`` AdmissionReview the apiserver sends for a CREATE."""
    group_version = {"group": "kubeflow.org", "version": "v1"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {**group_version, "kind": "PyTorchJob"},
            "resource": {**group_version, "resource": "pytorchjobs"},
            "requestKind": {**group_version, "kind": "PyTorchJob"},
            "requestResource": {**group_version, "resource": "pytorchjobs"},
            "name": job["metadata"]["name"],
            "namespace": job["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {
                "username": "alice@example.com",
                "uid": "2f9d4c8e-1b7a-4e0f-8a51-7d3c9b2e6f10",
                "groups": ["team-vision", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=4f1c2d"]},
            },
            "object": job,
            "oldObject": None,
            "dryRun": False,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "CreateOptions",
                "fieldManager": "kubectl-client-side-apply",
                "fieldValidation": "Strict",
            },
        },
    }


def admitted_job(job: dict[str, Any], policy: PlacementPolicy) -> dict[str, Any]:
    """The object the validating webhook sees: defaulted, with the apiserver's system fields.

    The apiserver runs mutating admission, then ``BeforeCreate`` (``FillObjectMetaSystemFields``
    sets ``uid`` and ``creationTimestamp``; the strategy sets ``generation``), then validating
    admission.
    """
    admitted: dict[str, Any] = copy.deepcopy(default_job(job, policy).object)
    admitted["metadata"].update(
        uid="5a3f6b0e-9d0c-4a53-9d4e-0c3b7e1a2f61",
        creationTimestamp="2026-07-01T12:00:00Z",
        generation=1,
    )
    return admitted


def request_bodies(count: int, policy: PlacementPolicy) -> dict[str, list[bytes]]:
    """Per route, ``count`` serialised reviews differing only in ``request.uid`` (always new)."""
    job = build_job()
    objects = {"mutate": job, "validate": admitted_job(job, policy)}
    return {
        route: [
            json.dumps(build_review(obj, str(uuid.UUID(int=i + 1))), separators=(",", ":")).encode()
            for i in range(count)
        ]
        for route, obj in objects.items()
    }

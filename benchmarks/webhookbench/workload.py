"""The workload: the AdmissionReviews the benchmark sends (pure: no I/O).

Rules:

* The job is a 16-replica GPU PyTorchJob (1 Master + 15 Workers, 4 GPUs and one ``rdma/hca``
  each) in ``NAMESPACE``, which the sample PlacementPolicy selects, so every default applies.
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

from tests.builders.job import gpu_job
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.webhook.defaulting import default_job

NAMESPACE: Final = "team-vision"  # selected by the sample policy, so every default is exercised


def build_job() -> dict[str, Any]:
    """A 16-replica GPU PyTorchJob (1 Master + 15 Workers) as ``kubectl apply`` submits it."""
    env = {
        "NCCL_DEBUG": "WARN",
        "NCCL_IB_HCA": "mlx5",
        "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_DISTRIBUTED_DEBUG": "OFF",
        "OMP_NUM_THREADS": "8",
        "WANDB_PROJECT": "resnet50-imagenet",
    }
    args = ["--backend", "nccl", "--epochs", "90", "--batch-size", "256", "--data", "/datasets"]
    resources = {
        "requests": {"cpu": "24", "memory": "192Gi", "nvidia.com/gpu": 4, "rdma/hca": 1},
        "limits": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": 4, "rdma/hca": 1},
    }

    def realistic(job: dict[str, Any]) -> None:
        job["metadata"].update(
            namespace=NAMESPACE,
            labels={"app.kubernetes.io/name": "resnet50", "team": "vision"},
            annotations={"owner": "alice@example.com"},
        )
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            pod = replica["template"]
            pod["metadata"] = {"labels": {"app.kubernetes.io/name": "resnet50"}}
            pod["spec"]["volumes"] = [
                {"name": "datasets", "hostPath": {"path": "/datasets/imagenet"}},
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "resnet50-ckpt"}},
            ]
            pod["spec"]["priorityClassName"] = "research"
            container = pod["spec"]["containers"][0]
            container["image"] = "registry.example.com/vision/resnet50:2026.07.1"
            container["imagePullPolicy"] = "IfNotPresent"
            container["command"] = ["python", "-m", "train"]
            container["args"] = list(args)
            container["env"] = [{"name": k, "value": v} for k, v in env.items()]
            container["resources"] = copy.deepcopy(resources)
            container["volumeMounts"] = [
                {"name": "datasets", "mountPath": "/datasets", "readOnly": True},
                {"name": "checkpoints", "mountPath": "/checkpoints"},
            ]
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

    return gpu_job("resnet50-ddp", workers=15, gpus=4).edit(realistic).build()


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

"""AdmissionReviews of a PyTorchJob's ``scale`` subresource, as kube-apiserver sends them.

``kubectl scale pytorchjob/NAME`` (and an HPA) write ``.../pytorchjobs/NAME/scale``; the review
carries an ``autoscaling/v1`` Scale in ``request.kind`` and ``request.object``, the job's resource
in ``request.resource`` and ``scale`` in ``request.subResource`` (seen on the e2e apiserver,
tests/e2e/test_scale_e2e.py).
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.builders.job import gpu_job
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.defaulting import default_job


def scale_object(replicas: Any, name: str = "job") -> dict[str, Any]:
    """An ``autoscaling/v1`` Scale of job ``name`` asking for ``replicas`` Workers."""
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "resourceVersion": "234",
            "creationTimestamp": "2026-11-28T07:59:16Z",
        },
        "spec": {"replicas": replicas},
        "status": {"replicas": 0},
    }


def scale_review(
    scale: Any, *, name: Any = "job", resource: str = "pytorchjobs", group: str = "kubeflow.org"
) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it for a write of ``.../NAME/scale`` (UPDATE)."""
    scale_kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": scale_kind,
        "resource": {"group": group, "version": "v1", "resource": resource},
        "subResource": "scale",
        "requestKind": scale_kind,
        "requestResource": {"group": group, "version": "v1", "resource": resource},
        "requestSubResource": "scale",
        "name": name,
        "namespace": "team-a",
        "operation": "UPDATE",
        "userInfo": {"username": "alice"},
        "object": scale,
        "oldObject": scale_object(1),
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def stored(workers: int = 1, **elastic: Any) -> dict[str, Any]:
    """The job as the webhook stored it at CREATE (defaults applied: the gang size too)."""
    built = gpu_job("job", namespace="team-a", workers=workers)
    if elastic:
        built.elastic(**elastic)
    job: dict[str, Any] = default_job(built.build(), DEFAULT_POLICY).object
    return job

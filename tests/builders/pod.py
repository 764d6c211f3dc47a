"""Pods as the apiserver returns them: bound or planned, in a phase, terminating, of a gang.

``pod`` builds one from scratch (one ``pytorch`` container; ``gpus`` in its limits, as users
write them); ``set_phase`` moves a pod the controller planned into a later state, as the kubelet
and the scheduler would; ``ended``, ``disruption_target``, ``deleted_with_grace`` and
``tolerating`` give it what the disruption rules read (when its container ended, Kubernetes'
``DisruptionTarget`` condition, a graceful deletion, tolerations).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from tests.builders.job import container
from torchgate.pytorchjob.moments import format_time

# Spelled out rather than imported: the code under test must agree with these, not define them.
LABEL_OPERATOR: Final = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
ANNOTATION_PLANNED_NODE: Final = "torchgate.io/planned-node"


def pod(
    name: str,
    *,
    gang: tuple[str, str] | None = None,
    namespace: str = "default",
    replica_type: str | None = None,
    node: str | None = None,
    gpus: int | None = None,
    phase: str = "Running",
    priority: int | None = None,
    created: str = "2026-01-01T00:00:00Z",
    deleted: str | None = None,
    planned: str | None = None,
    version: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod; of ``gang`` (a job's namespace and name), labelled as torchgate labels its pods.

    ``node`` is where it is bound (``spec.nodeName``), ``planned`` the node torchgate pinned it
    to before binding; ``deleted`` is its ``deletionTimestamp`` (it is terminating).
    """
    all_labels = dict(labels or {})
    if gang is not None:
        namespace, job = gang
        all_labels |= {LABEL_OPERATOR: "torchgate", LABEL_JOB_NAME: job}
    if replica_type is not None:
        all_labels[LABEL_REPLICA_TYPE] = replica_type.lower()
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    optional_metadata = {
        "creationTimestamp": created,
        "deletionTimestamp": deleted,
        "resourceVersion": None if version is None else str(version),
    }
    metadata |= {key: value for key, value in optional_metadata.items() if value is not None}
    if planned is not None:
        metadata["annotations"] = {ANNOTATION_PLANNED_NODE: planned}
    spec: dict[str, Any] = {"containers": [container(gpus=gpus)]}
    if node is not None:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def set_phase(
    pod: dict[str, Any],
    phase: str,
    *,
    node: str | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    created: datetime | None = None,
    deleted: datetime | None = None,
) -> dict[str, Any]:
    """A copy of ``pod`` in the given state (``deleted``: terminating since then)."""
    pod = copy.deepcopy(pod)
    pod.setdefault("status", {})["phase"] = phase
    if node is not None:
        pod["spec"]["nodeName"] = node
    if exit_code is not None:
        pod["status"]["containerStatuses"] = [
            {"name": "pytorch", "state": {"terminated": {"exitCode": exit_code}}}
        ]
    if reason is not None:
        pod["status"]["reason"] = reason
    if created is not None:
        pod["metadata"]["creationTimestamp"] = format_time(created)
    if deleted is not None:
        pod["metadata"]["deletionTimestamp"] = format_time(deleted)
    return pod


def deletion_stamp(at: float) -> str:
    """A ``deletionTimestamp`` for ``at`` seconds since the epoch (the apiserver's format)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ended(pod: dict[str, Any], *, at: str, exit_code: int = 1) -> dict[str, Any]:
    """A copy of ``pod`` whose ``pytorch`` container terminated at ``at`` with ``exit_code``."""
    pod = copy.deepcopy(pod)
    terminated = {"exitCode": exit_code, "finishedAt": at}
    pod["status"]["containerStatuses"] = [{"name": "pytorch", "state": {"terminated": terminated}}]
    return pod


def disruption_target(
    pod: dict[str, Any],
    *,
    at: str,
    reason: str = "EvictionByEvictionAPI",
    message: str = "Eviction API: evicting",
) -> dict[str, Any]:
    """A copy of ``pod`` with Kubernetes' ``DisruptionTarget`` condition, set at ``at``."""
    pod = copy.deepcopy(pod)
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }
    pod["status"].setdefault("conditions", []).append(condition)
    return pod


def deleted_with_grace(pod: dict[str, Any], *, at: datetime, grace: int = 30) -> dict[str, Any]:
    """A copy of ``pod`` whose graceful deletion was asked for at ``at`` (``grace`` seconds)."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = format_time(at + timedelta(seconds=grace))
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


def tolerating(pod: dict[str, Any], *tolerations: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` with these tolerations."""
    pod = copy.deepcopy(pod)
    pod["spec"]["tolerations"] = [dict(t) for t in tolerations]
    return pod

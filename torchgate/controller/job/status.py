"""PyTorchJob status with the training-operator's condition semantics, plus ``Queued``.

Why copy the training-operator here: ``kubectl get pytorchjobs`` shows the *last* condition as the
job's State, and dashboards, the Kubeflow SDK (``wait_for_job_conditions``), Kueue and users'
scripts read the ``Created``/``Running``/``Restarting``/``Succeeded``/``Failed``/``Suspended``
conditions with their ``PyTorchJob*`` reasons. So the rules are the same: a changed condition moves
to the end of the list; ``Running`` and ``Restarting`` replace each other; ``Succeeded`` or
``Failed`` turn ``Running`` to False; once ``Failed`` is True nothing changes any more.

torchgate adds one condition, ``Queued`` (reason ``WaitingForResources``), present while the job
waits for its whole gang to fit; its message is the admitter's shortfall ("waiting for 16
nvidia.com/gpu in pool a100: 8 free"), so ``kubectl describe`` answers "why is my job not
running?". It is removed, not set to False, once the job is admitted, so the State column goes
back to the training-operator's vocabulary.

The condition types and reasons themselves are declared in ``pytorchjob.reasons``, shared with
``torchgate explain``, which reads them back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.conditions import conditions_of, transition_time
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.reasons import FAILED, RESTARTING, RUNNING, SUCCEEDED
from torchgate.pytorchjob.spec import JobSpec, canonical_replica_type

TRUE: Final = "True"
FALSE: Final = "False"

Condition = dict[str, Any]


def seconds_left(since: datetime, seconds: float, *, now: datetime) -> float:
    """Seconds from ``now`` until ``seconds`` after ``since`` (negative once past).

    Counted in seconds, never as a datetime: a deadline the API allows (an int64
    ``activeDeadlineSeconds``, a toleration's ``tolerationSeconds``) can end after the year 9999,
    past what ``datetime`` holds (``OverflowError``).
    """
    return seconds - (now - since).total_seconds()


def find_condition(conditions: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    """The condition of type ``kind``, if present."""
    for condition in conditions:
        if condition.get("type") == kind:
            return condition
    return None


def is_true(conditions: Iterable[Mapping[str, Any]], kind: str) -> bool:
    """Whether the condition of type ``kind`` is present with status True."""
    condition = find_condition(conditions, kind)
    return condition is not None and condition.get("status") == TRUE


def is_finished(conditions: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the job has Succeeded or Failed."""
    listed = list(conditions)
    return is_true(listed, SUCCEEDED) or is_true(listed, FAILED)


def state_of(job: Mapping[str, Any]) -> str:
    """A job's state as its last condition's type (``New`` before it has any)."""
    conditions = conditions_of(job.get("status"))
    return str(conditions[-1].get("type")) if conditions else "New"


def _replaces(new_kind: str, old_kind: str) -> bool:
    return new_kind == old_kind or {new_kind, old_kind} == {RUNNING, RESTARTING}


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
) -> list[Condition]:
    """The conditions after setting one, with the training-operator's rules.

    Args:
        conditions: The current conditions (not modified).
        kind: Condition type.
        status: ``"True"`` or ``"False"``.
        reason: Machine-readable reason.
        message: Human message.
        now: The clock.

    Returns:
        New conditions: unchanged (same timestamps) when type, status, reason and message are the
        same or the job has already Failed; the message and ``lastUpdateTime`` updated in place
        when only the message differs; otherwise the condition moved to the end (keeping its
        ``lastTransitionTime`` if the status is unchanged: ``conditions.transition_time``),
        ``Running``/``Restarting`` replacing each other, and ``Running`` turned False when
        ``Succeeded``/``Failed`` becomes True.
    """
    current = [dict(c) for c in conditions]
    if is_true(current, FAILED):
        return current
    stamp = format_time(now)
    existing = find_condition(current, kind)
    if existing is not None and (existing.get("status"), existing.get("reason")) == (
        status,
        reason,
    ):
        if existing.get("message") != message:
            updated = {**existing, "message": message, "lastUpdateTime": stamp}
            return [updated if c.get("type") == kind else c for c in current]
        return current
    transition = transition_time(current, kind, status, now=stamp)
    ends_run = kind in (SUCCEEDED, FAILED) and status == TRUE
    kept: list[Condition] = []
    for condition in current:
        if _replaces(kind, condition["type"]):
            continue
        if ends_run and condition["type"] == RUNNING and condition.get("status") == TRUE:
            condition = {
                **condition,
                "status": FALSE,
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            }
        kept.append(condition)
    kept.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastUpdateTime": stamp,
            "lastTransitionTime": transition,
        }
    )
    return kept


def remove_condition(conditions: Sequence[Mapping[str, Any]], kind: str) -> list[Condition]:
    """The conditions without the one of type ``kind`` (used for ``Queued`` on admission)."""
    return [dict(c) for c in conditions if c.get("type") != kind]


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = pod.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is being deleted (it has a ``deletionTimestamp``)."""
    metadata = pod.get("metadata")
    return isinstance(metadata, Mapping) and bool(metadata.get("deletionTimestamp"))


def phase_of(pod: Mapping[str, Any]) -> str:
    """``status.phase`` of a pod, ``""`` when missing."""
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase if isinstance(phase, str) else ""


def replica_statuses(job: JobSpec, pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``status.replicaStatuses``: per replica type, pods active, succeeded and failed.

    ``active`` counts Running pods that are not being deleted; Pending pods are not counted (as in
    the training-operator). ``selector`` is what the ``scale`` subresource and HPAs read.
    """
    statuses: dict[str, dict[str, Any]] = {
        spec.replica_type: {
            "active": 0,
            "succeeded": 0,
            "failed": 0,
            "selector": names.replica_selector(job.name, spec.replica_type),
        }
        for spec in job.replica_specs
    }
    for pod in pods:
        replica_type = canonical_replica_type(_labels(pod).get(names.LABEL_REPLICA_TYPE))
        counts = statuses.get(replica_type) if replica_type is not None else None
        if counts is None:
            continue
        phase = phase_of(pod)
        if phase == "Running" and not is_terminating(pod):
            counts["active"] += 1
        elif phase == "Succeeded":
            counts["succeeded"] += 1
        elif phase == "Failed":
            counts["failed"] += 1
    return statuses

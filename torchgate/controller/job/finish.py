"""How a PyTorchJob ends: its final condition, the cleanup of its pods, and its TTL.

Why a module of its own: ``plan.plan`` decides *whether* a job has ended (the Master succeeded,
the deadline passed) and the gang rules (``gang``) decide when a failure is permanent or
the backoff limit is reached; what ending means is the same in every case and is kept here, pure,
for every path that ends a job and for the plans of a job that has already ended.

The rules this module owns (rules 2 and 6 of ``plan``):

- ``finish``: the ``Succeeded`` or ``Failed`` condition with its Event, no longer ``Queued``,
  ``completionTime``, the final replica counts (a succeeded job's active replicas count as
  succeeded), then cleanup and TTL.
- ``cleanup``: the pods ``cleanPodPolicy`` says must go (``None`` keeps a pod unless it holds
  accelerators the admin policy does not let it keep, which it cleans up as ``Running``:
  ``pytorchjob.cleanup``; ``Running`` deletes Running and Pending pods, ``All`` every pod) and the
  job's Services, which stay only while every replica's pods are kept. Pending pods and every
  pod of a failed job go at once; the running pods of a *succeeded* job after
  ``finish_grace_seconds``, because the other ranks of a job whose Master just finished are
  normally finishing too (on a real kubelet a Worker ends milliseconds after its Master), and a
  pod deleted in its last second loses its ``Completed`` state and its logs.
- ``plan_finished``: an ended job gets only cleanup (repeated until done) and its TTL.
- TTL: the job is deleted ``ttlSecondsAfterFinished`` after it ended (a timer until then), never
  inside the finish grace, since deleting the job takes its still-finishing pods with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from torchgate.controller.job import status as st
from torchgate.controller.job.model import (
    Draft,
    EventType,
    GangPods,
    Observed,
    Plan,
    controlled_by,
    name_of,
)
from torchgate.pytorchjob import cleanup as cleanup_rules
from torchgate.pytorchjob import moments, reasons
from torchgate.pytorchjob.conditions import conditions_of
from torchgate.pytorchjob.devices import pod_gpus
from torchgate.pytorchjob.spec import as_mapping, pod_spec_of

FINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def _clean_pod_policy_of(draft: Draft, pod_spec: Mapping[str, Any]) -> str:
    """How a pod (or a replica's pods) with this spec is cleaned up (``pytorchjob.cleanup``)."""
    return cleanup_rules.clean_pod_policy_for(
        draft.job.run_policy.clean_pod_policy,
        pod_spec,
        gpus=draft.observed.gpus,
        allow_none=draft.observed.allow_clean_pod_policy_none,
        claims=draft.observed.claims,
    )


def _replicas_not_kept(draft: Draft) -> tuple[str, ...]:
    """The replicas whose pods the job's ``cleanPodPolicy: None`` may not keep."""
    return cleanup_rules.replicas_not_kept(
        draft.job.run_policy.clean_pod_policy,
        ((r.replica_type, pod_spec_of(r.template)) for r in draft.job.replica_specs if r.replicas),
        gpus=draft.observed.gpus,
        allow_none=draft.observed.allow_clean_pod_policy_none,
        claims=draft.observed.claims,
    )


def _keeps_every_pod(draft: Draft) -> bool:
    """Whether ``cleanPodPolicy`` keeps the pods of every replica (``None``, allowed for all)."""
    return all(
        _clean_pod_policy_of(draft, pod_spec_of(replica.template)) == cleanup_rules.KEEP
        for replica in draft.job.replica_specs
    )


def cleanup(draft: Draft, pods: GangPods) -> None:
    """Delete what ``cleanPodPolicy`` says a finished job must not keep (rule 6).

    Each pod by its own spec: ``None`` keeps a pod unless it holds accelerators the placement
    policy does not let it keep. The Services stay only while every replica's pods are kept.
    """
    grace_left = _finish_grace_left(draft)
    waiting_for_grace = False
    for pod in pods.live:
        policy = _clean_pod_policy_of(draft, as_mapping(pod.get("spec")))
        if policy == cleanup_rules.KEEP:
            continue
        if policy != "All" and st.phase_of(pod) in FINAL_PHASES:
            continue
        if grace_left > 0 and st.phase_of(pod) == "Running":
            waiting_for_grace = True
            continue
        draft.delete_pod(name_of(pod))
    if waiting_for_grace:
        draft.timer(grace_left)
    if not _keeps_every_pod(draft):
        delete_services(draft)


def _finish_grace_left(draft: Draft) -> float:
    """Seconds the running pods of a succeeded job may still end on their own (else 0)."""
    if draft.observed.finish_grace_seconds <= 0:
        return 0.0
    succeeded = st.find_condition(draft.conditions, reasons.SUCCEEDED)
    if succeeded is None or succeeded.get("status") != st.TRUE:
        return 0.0
    finished = _finished_at(draft)
    if finished is None:
        return 0.0
    grace = timedelta(seconds=draft.observed.finish_grace_seconds)
    return max(0.0, (finished + grace - draft.now).total_seconds())


def delete_services(draft: Draft) -> None:
    """Delete the job's Services (those it controls that are not already going)."""
    for service in _owned_services(draft):
        if not st.is_terminating(service):
            draft.delete_services.append(name_of(service))


def _owned_services(draft: Draft) -> list[Mapping[str, Any]]:
    uid = draft.job.uid
    return [s for s in draft.observed.services if isinstance(s, Mapping) and controlled_by(s, uid)]


def plan_finished(draft: Draft, pods: GangPods) -> None:
    """An ended job: cleanup per ``cleanPodPolicy`` (until done) and its TTL (rule 2)."""
    cleanup(draft, pods)
    _plan_ttl(draft, pods)


def _finished_at(draft: Draft) -> datetime | None:
    completion = moments.parse_time(draft.completion_time)
    if completion is not None:
        return completion
    for kind in (reasons.SUCCEEDED, reasons.FAILED):
        condition = st.find_condition(draft.conditions, kind)
        if condition is not None and condition.get("status") == st.TRUE:
            return moments.parse_time(condition.get("lastTransitionTime"))
    return None


def _plan_ttl(draft: Draft, pods: GangPods) -> None:
    """Delete the job ``ttlSecondsAfterFinished`` after it ended, never inside the finish grace.

    Deleting the job deletes its pods (garbage collection), so a TTL shorter than the finish
    grace would take the still-finishing ranks with it: it waits for the grace instead.
    """
    ttl = draft.job.run_policy.ttl_seconds_after_finished
    finished = _finished_at(draft)
    if ttl is None or ttl < 0 or finished is None or draft.job.run_policy.suspend:
        return
    remaining = st.seconds_left(finished, ttl, now=draft.now)
    grace_left = _finish_grace_left(draft)
    if grace_left > 0 and any(st.phase_of(pod) == "Running" for pod in pods.live):
        remaining = max(remaining, grace_left)
    if remaining <= 0:
        draft.delete_job = True
    else:
        draft.timer(remaining)


def finish(
    draft: Draft, pods: GangPods, kind: str, reason: str, message: str, event: EventType
) -> None:
    """End the job: condition, completionTime, final replica counts, cleanup, TTL."""
    if not draft.set_condition(kind, st.TRUE, reason, message):
        return
    draft.transition(event, reason, message)
    draft.conditions = st.remove_condition(draft.conditions, reasons.QUEUED)
    draft.completion_time = draft.completion_time or moments.format_time(draft.now)
    not_kept = _replicas_not_kept(draft)
    if not_kept:
        gpu_resource = draft.observed.gpu_resource
        draft.event(
            "Warning",
            "CleanPodPolicyOverridden",
            f"cleanPodPolicy None is allowed by the placement policy only for pods without "
            f"{gpu_resource}: deleting the {' and '.join(not_kept)} pods still running or "
            f"pending (as cleanPodPolicy Running) to release their {gpu_resource}",
        )
    cleanup(draft, pods)
    deleted = set(draft.delete_pods)
    remaining = [
        pod
        for pod in pods.current.values()
        if name_of(pod) not in deleted or st.phase_of(pod) in FINAL_PHASES
    ]
    counts = st.replica_statuses(draft.job, remaining)
    if kind == reasons.SUCCEEDED:
        for replica in counts.values():
            replica["succeeded"] += replica["active"]
            replica["active"] = 0
    draft.replica_statuses = counts
    _plan_ttl(draft, pods)


def released_on_end(
    job_raw: Mapping[str, Any], decision: Plan, observed: Observed, now: datetime
) -> tuple[int, float | None] | None:
    """What this plan releases when it is the one that ends the job, else ``None``.

    The GPUs of the running pods it deletes (what the training-operator's ``cleanPodPolicy:
    None`` would have kept), and the seconds from the job's end (the last container exit) to
    now; both feed the controller's release metrics.
    """
    if decision.status is None:
        return None
    conditions = decision.status.get("conditions") or []
    if not st.is_finished(conditions) or st.is_finished(conditions_of(job_raw.get("status"))):
        return None
    deleting = {*decision.delete_pods, *decision.force_delete_pods}
    gpus = 0
    ended_at: datetime | None = None
    for pod in observed.pods:
        name = str((pod.get("metadata") or {}).get("name"))
        if name in deleting and st.phase_of(pod) not in ("Succeeded", "Failed"):
            spec = pod.get("spec") or {}
            gpus += int(pod_gpus(spec, observed.gpus, observed.claims) or 0)
        finished = _containers_finished_at(pod)
        if finished is not None and (ended_at is None or finished > ended_at):
            ended_at = finished
    since_end = None if ended_at is None else (now - ended_at).total_seconds()
    return gpus, since_end


def _containers_finished_at(pod: Mapping[str, Any]) -> datetime | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    latest: datetime | None = None
    for container in statuses:
        terminated = ((container or {}).get("state") or {}).get("terminated") or {}
        moment = moments.parse_time(terminated.get("finishedAt"))
        if moment is not None and (latest is None or moment > latest):
            latest = moment
    return latest

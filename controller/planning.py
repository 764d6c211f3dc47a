"""What the controller should do about one PyTorchJob now: ``plan(observed) -> Plan``.

Why one pure function: reconciling is level-triggered (the shell re-reads the job, its pods and
Services, never looks at which event woke it up) and must be idempotent, so the whole decision
("given this state, what is missing, what must go, what is the status") is a function of the
observed state and the clock. It is table-tested without a cluster, and a property test applies a
plan to an in-memory world and checks that planning again asks for nothing more.

The rules, in order:

1. A job being deleted gets nothing (garbage collection removes its children). A job managed by
   another controller (``runPolicy.managedBy``) is left alone.
2. A finished job (``Succeeded``/``Failed``) only gets cleanup per ``cleanPodPolicy`` (repeated
   until done) and its TTL (``delete_job``, or a timer).
3. ``runPolicy.suspend`` deletes every pod and Service; resuming re-admits the job, and
   ``startTime`` restarts at the next admission.
4. Otherwise the job is a gang: no pod exists until the admitter reserved capacity for all of
   them (``needs_admission`` with ``demands``; the pods are created only when ``reservation``
   names their nodes). Anything that breaks a gang (a missing or terminating member without a
   reservation to recreate it, a gang kube-scheduler could not bind in time) deletes the whole
   gang so it is admitted again; a pod is never created next to a running partial gang.
5. Pods run with ``restartPolicy: Never``; a failed pod restarts the whole gang (a collective
   cannot take one restarted rank back), counted in the job annotation ``torchgate.io/restarts``
   against ``backoffLimit``; each pod records its gang attempt, so stragglers of an older attempt
   are deleted, never adopted.
6. When the job ends (the Master succeeded, a permanent failure, the backoff limit, or
   ``activeDeadlineSeconds`` measured from ``startTime``), its remaining pods are deleted per
   ``cleanPodPolicy`` (``None`` only where the admin policy allows it), so GPUs go back to the
   pool: pending pods and every pod of a failed job at once; the running pods of a *succeeded*
   job after ``finish_grace_seconds``, because the other ranks of a job whose Master just
   finished are normally finishing too, and a pod deleted in its last second loses its
   ``Completed`` state and its logs (seen on a real kubelet: seed 003's Worker ends a few
   milliseconds after its Master).
7. A gang the admitter chose as a preemption victim (``preempted_by``) loses all its pods at once
   (each honouring its grace period), gets a ``Preempted`` condition and Event naming the
   preemptor, and waits in the queue again; pods that fail while being evicted are not failures
   of the job, so a preemption never counts against ``backoffLimit``. The condition turns
   ``False`` when the gang is admitted again.

Timers (deadline, TTL, gang schedule timeout) come back as ``requeue_after``, so they fire on time
rather than whenever some other event happens to wake the job up. Events that announce a condition
change belong to the status (``Event.announces_status``): the reconciler records them when it
writes that status, which ``writepolicy`` may put off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from torchgate.controller import status as st
from torchgate.controller.envvars import rendezvous_replica
from torchgate.controller.planmodel import (
    Draft,
    EventType,
    GangPods,
    Observed,
    Plan,
    as_mapping,
    controlled_by,
    is_retryable,
    metadata_of,
    name_of,
    pytorch_exit_code,
    restarts_of,
    sort_pods,
)
from torchgate.controller.pods import build_pod, build_service, service_replicas
from torchgate.pytorchjob import names
from torchgate.pytorchjob.spec import JobSpec

DEFAULT_SCHEDULE_TIMEOUT_SECONDS: Final = 60
FINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
MANAGING_VALUES: Final = frozenset({names.TRAINING_OPERATOR, names.CONTROLLER_NAME})
REASON_NAME_CONFLICT: Final = "PodNameConflict"
PREEMPTED: Final = "Preempted"
# The admitter's wait kinds as condition and Event reasons; capacity keeps the reason it always
# had, so existing alerts and scripts keep matching.
WAIT_REASONS: Final = {
    "Quota": "WaitingForQuota",
    "Capacity": st.REASON_WAITING,
    "Topology": "WaitingForTopology",
    "Preempting": "WaitingForPreemption",
}
REASON_READMITTED: Final = "Readmitted"


# ------------------------------------------------------------------ plan


def plan(observed: Observed) -> Plan:
    """Decide what to do about one job; pure and idempotent (see the module docstring)."""
    job = observed.job
    if st.is_terminating(observed.job_raw):
        return Plan()
    if job.run_policy.managed_by is not None and job.run_policy.managed_by not in MANAGING_VALUES:
        return Plan()
    raw_status = observed.job_raw.get("status")
    status = as_mapping(raw_status)
    draft = Draft(
        observed=observed,
        conditions=st.conditions_of(status),
        start_time=_text(status.get("startTime")),
        completion_time=_text(status.get("completionTime")),
    )
    pods = sort_pods(observed)
    if st.is_finished(draft.conditions):
        _plan_finished(draft, pods)
    elif job.run_policy.suspend:
        _plan_suspended(draft, pods)
    else:
        _plan_active(draft, pods)
    return draft.finish()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# ------------------------------------------------------------------ finished jobs


def _effective_clean_policy(draft: Draft) -> str:
    policy = draft.job.run_policy.clean_pod_policy
    if policy == "None" and not draft.observed.allow_clean_pod_policy_none:
        return "Running"
    return policy


def _cleanup(draft: Draft, pods: GangPods) -> None:
    """Delete what ``cleanPodPolicy`` says a finished job must not keep (rule 6)."""
    policy = _effective_clean_policy(draft)
    if policy == "None":
        return
    grace_left = _finish_grace_left(draft)
    for pod in pods.live:
        if policy != "All" and st.phase_of(pod) in FINAL_PHASES:
            continue
        if grace_left > 0 and st.phase_of(pod) == "Running":
            continue
        draft.delete_pod(name_of(pod))
    if grace_left > 0 and any(st.phase_of(pod) == "Running" for pod in pods.live):
        draft.timer(grace_left)
    _delete_services(draft)


def _finish_grace_left(draft: Draft) -> float:
    """Seconds the running pods of a succeeded job may still end on their own (else 0)."""
    if draft.observed.finish_grace_seconds <= 0:
        return 0.0
    succeeded = st.find_condition(draft.conditions, st.SUCCEEDED)
    if succeeded is None or succeeded.get("status") != st.TRUE:
        return 0.0
    finished = _finished_at(draft)
    if finished is None:
        return 0.0
    grace = timedelta(seconds=draft.observed.finish_grace_seconds)
    return max(0.0, (finished + grace - draft.now).total_seconds())


def _delete_services(draft: Draft) -> None:
    for service in _owned_services(draft):
        if not st.is_terminating(service):
            draft.delete_services.append(name_of(service))


def _owned_services(draft: Draft) -> list[Mapping[str, Any]]:
    uid = draft.job.uid
    return [s for s in draft.observed.services if isinstance(s, Mapping) and controlled_by(s, uid)]


def _plan_finished(draft: Draft, pods: GangPods) -> None:
    _cleanup(draft, pods)
    _plan_ttl(draft, pods)


def _finished_at(draft: Draft) -> datetime | None:
    completion = st.parse_time(draft.completion_time)
    if completion is not None:
        return completion
    for kind in (st.SUCCEEDED, st.FAILED):
        condition = st.find_condition(draft.conditions, kind)
        if condition is not None and condition.get("status") == st.TRUE:
            return st.parse_time(condition.get("lastTransitionTime"))
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
    remaining = (finished + timedelta(seconds=ttl) - draft.now).total_seconds()
    grace_left = _finish_grace_left(draft)
    if grace_left > 0 and any(st.phase_of(pod) == "Running" for pod in pods.live):
        remaining = max(remaining, grace_left)
    if remaining <= 0:
        draft.delete_job = True
    else:
        draft.timer(remaining)


def _finish(
    draft: Draft, pods: GangPods, kind: str, reason: str, message: str, event: EventType
) -> None:
    """End the job: condition, completionTime, final replica counts, cleanup, TTL."""
    if not draft.set_condition(kind, st.TRUE, reason, message):
        return
    draft.transition(event, reason, message)
    draft.conditions = st.remove_condition(draft.conditions, st.QUEUED)
    draft.completion_time = draft.completion_time or st.format_time(draft.now)
    policy = draft.job.run_policy.clean_pod_policy
    if policy == "None" and not draft.observed.allow_clean_pod_policy_none:
        draft.event(
            "Warning",
            "CleanPodPolicyOverridden",
            "cleanPodPolicy None is not allowed by the placement policy: deleting the pods "
            "that are still running or pending (as cleanPodPolicy Running) to release their "
            "resources",
        )
    _cleanup(draft, pods)
    deleted = set(draft.delete_pods)
    remaining = [
        pod
        for pod in pods.current.values()
        if name_of(pod) not in deleted or st.phase_of(pod) in FINAL_PHASES
    ]
    counts = st.replica_statuses(draft.job, remaining)
    if kind == st.SUCCEEDED:
        for replica in counts.values():
            replica["succeeded"] += replica["active"]
            replica["active"] = 0
    draft.replica_statuses = counts
    _plan_ttl(draft, pods)


# ------------------------------------------------------------------ suspended jobs


def _plan_suspended(draft: Draft, pods: GangPods) -> None:
    job = draft.job
    _ensure_created(draft)
    for pod in pods.live:
        draft.delete_pod(name_of(pod))
    _delete_services(draft)
    message = f"PyTorchJob {job.name} is suspended."
    if st.find_condition(draft.conditions, st.RUNNING) or st.find_condition(
        draft.conditions, st.RESTARTING
    ):
        draft.set_condition(st.RUNNING, st.FALSE, st.REASON_SUSPENDED, message)
    draft.conditions = st.remove_condition(draft.conditions, st.QUEUED)
    if draft.set_condition(st.SUSPENDED, st.TRUE, st.REASON_SUSPENDED, message):
        draft.transition("Normal", st.REASON_SUSPENDED, message)
    draft.replica_statuses = st.replica_statuses(job, [])


# ------------------------------------------------------------------ active jobs


def _ensure_created(draft: Draft) -> None:
    if st.find_condition(draft.conditions, st.CREATED) is None:
        message = f"PyTorchJob {draft.job.name} is created."
        draft.set_condition(st.CREATED, st.TRUE, st.REASON_CREATED, message)
        draft.transition("Normal", st.REASON_CREATED, message)


def _resume_if_suspended(draft: Draft) -> None:
    if st.is_true(draft.conditions, st.SUSPENDED):
        message = f"PyTorchJob {draft.job.name} is resumed."
        draft.set_condition(st.SUSPENDED, st.FALSE, st.REASON_RESUMED, message)
        draft.transition("Normal", st.REASON_RESUMED, message)
        draft.start_time = None


def _deadline_passed(draft: Draft, pods: GangPods) -> bool:
    deadline = draft.job.run_policy.active_deadline_seconds
    started = st.parse_time(draft.start_time)
    if deadline is None or started is None:
        return False
    remaining = (started + timedelta(seconds=deadline) - draft.now).total_seconds()
    if remaining > 0:
        draft.timer(remaining)
        return False
    message = (
        f"Job {draft.job.name} has failed because it was active longer than specified deadline"
    )
    _finish(draft, pods, st.FAILED, st.REASON_DEADLINE, message, "Warning")
    return True


def _plan_active(draft: Draft, pods: GangPods) -> None:
    _ensure_created(draft)
    _resume_if_suspended(draft)
    if not pods.expected:  # zero replicas: nothing to run, nothing will ever finish
        draft.replica_statuses = st.replica_statuses(draft.job, [])
        return
    draft.start_time = draft.start_time or _gang_started_at(pods)
    if _deadline_passed(draft, pods):
        return
    for name in pods.stale_live:
        draft.delete_pod(name)
    current = pods.current
    if _succeeded(draft.job, current):
        _finish(draft, pods, st.SUCCEEDED, st.REASON_SUCCEEDED, _success_message(draft), "Normal")
        return
    preemptor = draft.observed.preempted_by
    if preemptor is not None:
        _plan_preempted(draft, pods, preemptor)
    failed = (
        []
        if preemptor is not None
        else [pod for pod in current.values() if st.phase_of(pod) == "Failed"]
    )
    if failed:
        _handle_failure(draft, pods, failed)
    elif preemptor is not None and pods.live:
        pass  # the eviction is under way
    elif pods.current_live:
        _plan_gang(draft, pods)
    else:
        _plan_admission(draft, pods)
    if draft.replica_statuses is None:
        deleted = set(draft.delete_pods)
        survivors = [pod for pod in pods.live if name_of(pod) not in deleted]
        draft.replica_statuses = st.replica_statuses(draft.job, survivors)


def _succeeded(job: JobSpec, current: Mapping[str, Mapping[str, Any]]) -> bool:
    """The Master succeeded; worker-only: every worker (elastic: any worker) succeeded."""
    if rendezvous_replica(job)[0] == names.MASTER:
        master = current.get(names.replica_name(job.name, names.MASTER, 0))
        return master is not None and st.phase_of(master) == "Succeeded"
    workers = job.replica(names.WORKER)
    if workers is None or workers.replicas == 0:
        return False
    phases = [
        st.phase_of(current[name]) if name in current else ""
        for name in (names.replica_name(job.name, names.WORKER, i) for i in range(workers.replicas))
    ]
    if job.elastic is not None:
        return "Succeeded" in phases
    return all(phase == "Succeeded" for phase in phases)


def _success_message(draft: Draft) -> str:
    job = draft.job
    if job.has_master:
        return f"PyTorchJob {job.name} is successfully completed."
    return f"PyTorchJob {job.namespace}/{job.name} successfully completed."


def _running_message(draft: Draft) -> str:
    job = draft.job
    if job.has_master:
        return f"PyTorchJob {job.name} is running."
    return f"PyTorchJob {job.namespace}/{job.name} is running."


def _replica_type_of(pods: GangPods, pod: Mapping[str, Any]) -> names.ReplicaType:
    return pods.expected[name_of(pod)][0]


def _failure_summary(pods: GangPods, failed: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """How many pods of the first failing replica type (Master before Worker) failed."""
    types = [_replica_type_of(pods, pod) for pod in failed]
    first = next(t for t in names.REPLICA_TYPES if t in types)
    return types.count(first), first


def _exit_events(draft: Draft, failed: Iterable[Mapping[str, Any]]) -> None:
    for pod in failed:
        code = pytorch_exit_code(pod)
        detail = f"exited with code {code}" if code is not None else "failed"
        reason = as_mapping(pod.get("status")).get("reason")
        if isinstance(reason, str) and reason:
            detail += f" ({reason})"
        pod_name = f"{draft.job.namespace}.{name_of(pod)}"
        draft.event("Warning", "ExitedWithCode", f"Pod: {pod_name} {detail}")


def _handle_failure(draft: Draft, pods: GangPods, failed: Sequence[Mapping[str, Any]]) -> None:
    job = draft.job
    count, replica_type = _failure_summary(pods, failed)
    _exit_events(draft, failed)
    permanent = [
        pod
        for pod in failed
        if not is_retryable(_restart_policy(job, _replica_type_of(pods, pod)), pod)
    ]
    if permanent:
        count, replica_type = _failure_summary(pods, permanent)
        message = (
            f"PyTorchJob {job.name} is failed because {count} {replica_type} replica(s) failed."
        )
        _finish(draft, pods, st.FAILED, st.REASON_FAILED, message, "Warning")
        return
    restarts = restarts_of(job)
    limit = job.run_policy.backoff_limit
    if limit is not None and restarts >= limit:
        message = f"Job {job.name} has failed because it has reached the specified backoff limit"
        _finish(draft, pods, st.FAILED, st.REASON_BACKOFF_LIMIT, message, "Warning")
        return
    message = (
        f"PyTorchJob {job.name} is restarting because {count} {replica_type} replica(s) failed."
    )
    _teardown(draft, pods)
    draft.restarts = restarts + 1
    draft.set_condition(st.RESTARTING, st.TRUE, st.REASON_RESTARTING, message)
    draft.event("Warning", st.REASON_RESTARTING, message)
    _mark_queued(draft)


def _plan_preempted(draft: Draft, pods: GangPods, preemptor: str) -> None:
    """Evict the whole gang for ``preemptor`` (rule 7)."""
    message = (
        f"PyTorchJob {draft.job.name} was preempted by {preemptor}: its whole gang is deleted "
        "and the job waits in the queue again"
    )
    if draft.set_condition(PREEMPTED, st.TRUE, PREEMPTED, message):
        draft.transition("Warning", PREEMPTED, message)
    if st.is_true(draft.conditions, st.RUNNING):
        draft.set_condition(st.RUNNING, st.FALSE, PREEMPTED, message)
    if pods.live:
        _teardown(draft, pods)
        _mark_queued(draft)


def _restart_policy(job: JobSpec, replica_type: str) -> str:
    replica = job.replica(replica_type)
    return replica.restart_policy if replica is not None else names.DEFAULT_RESTART_POLICY


def _teardown(draft: Draft, pods: GangPods) -> None:
    """Delete every live pod of the job (the gang is admitted again once they are gone)."""
    for pod in pods.live:
        draft.delete_pod(name_of(pod))


def _restart_if_running(draft: Draft, why: str) -> None:
    if st.is_true(draft.conditions, st.RUNNING):
        message = f"PyTorchJob {draft.job.name} is restarting because {why}."
        draft.set_condition(st.RESTARTING, st.TRUE, st.REASON_RESTARTING, message)
        draft.transition("Warning", st.REASON_RESTARTING, message)


def _mark_queued(draft: Draft) -> None:
    """Show the admitter's latest shortfall while the job waits for its gang to fit."""
    reason = draft.observed.wait_reason
    kind = WAIT_REASONS.get(draft.observed.wait_kind or "Capacity", st.REASON_WAITING)
    if reason is not None and draft.set_condition(st.QUEUED, st.TRUE, kind, reason):
        draft.transition("Normal", kind, reason)


def _gang_started_at(pods: GangPods) -> str | None:
    """When the current gang's first live pod was created (``None`` before any exists).

    ``startTime`` is taken from the pods rather than the clock, so it does not depend on when the
    status is written (``writepolicy`` may put that off). ``_plan_active`` takes it before the
    deadline is checked, so the deadline counts from the same moment in every plan.
    """
    created = [
        moment
        for pod in pods.current_live.values()
        if (moment := st.parse_time(metadata_of(pod).get("creationTimestamp"))) is not None
    ]
    return st.format_time(min(created)) if created else None


def _mark_admitted(draft: Draft) -> None:
    """No longer queued; ``startTime`` now if no pod told it earlier (``_gang_started_at``)."""
    draft.conditions = st.remove_condition(draft.conditions, st.QUEUED)
    if st.is_true(draft.conditions, PREEMPTED):
        message = f"PyTorchJob {draft.job.name} was admitted again after its preemption"
        draft.set_condition(PREEMPTED, st.FALSE, REASON_READMITTED, message)
    draft.start_time = draft.start_time or st.format_time(draft.now)


def _plan_admission(draft: Draft, pods: GangPods) -> None:
    """No live pod of the current attempt: wait for stragglers, ask for admission, or create."""
    _restart_if_running(draft, "its pods are gone")
    if pods.terminating or draft.delete_pods:
        _mark_queued(draft)
        return
    foreign = _names_held_by_others(draft, pods)
    if foreign:
        message = (
            f"waiting for pods {', '.join(foreign)}, which belong to another owner, to be "
            "deleted: the gang needs their names"
        )
        if draft.set_condition(st.QUEUED, st.TRUE, REASON_NAME_CONFLICT, message):
            draft.transition("Warning", REASON_NAME_CONFLICT, message)
        return
    reservation = draft.observed.reservation
    if reservation is None:
        draft.needs_admission = True
        _mark_queued(draft)
        return
    _create_missing(draft, pods, reservation)
    _mark_admitted(draft)
    nodes = sorted(set(reservation.values()))
    where = f" on {len(nodes)} node(s): {', '.join(nodes)}" if nodes else ""
    draft.event("Normal", "GangAdmitted", f"creating {len(draft.create_pods)} pods{where}")


def _names_held_by_others(draft: Draft, pods: GangPods) -> list[str]:
    """Expected pod names taken by pods this job does not control."""
    uid = draft.job.uid
    return sorted(
        name
        for pod in draft.observed.pods
        if isinstance(pod, Mapping)
        and (name := name_of(pod)) in pods.expected
        and not controlled_by(pod, uid)
    )


def _create_missing(draft: Draft, pods: GangPods, reservation: Mapping[str, str]) -> None:
    """Create the pods and Services that do not exist yet (names held by nobody)."""
    observed = draft.observed
    taken = {name_of(pod) for pod in pods.owned} | {name_of(p) for p in observed.pods}
    for name, (replica_type, index) in pods.expected.items():
        if name in taken:
            continue
        draft.create_pods.append(
            build_pod(
                observed.job_raw,
                draft.job,
                replica_type,
                index,
                node=reservation.get(name),
                attempt=pods.attempt,
                gpu_resource=observed.gpu_resource,
            )
        )
    _create_missing_services(draft)


def _create_missing_services(draft: Draft) -> None:
    observed = draft.observed
    present = {name_of(service) for service in observed.services if isinstance(service, Mapping)}
    for replica_type, index in service_replicas(draft.job):
        if names.replica_name(draft.job.name, replica_type, index) not in present:
            draft.create_services.append(
                build_service(observed.job_raw, draft.job, replica_type, index)
            )


def _plan_gang(draft: Draft, pods: GangPods) -> None:
    """Live pods of the current attempt exist: complete, tear down, time out, or run."""
    current = pods.current
    live = pods.current_live
    missing = [name for name in pods.expected if name not in live]
    reservation = draft.observed.reservation
    if missing and (reservation is None or any(name in current for name in missing)):
        _teardown(draft, pods)
        gone = ", ".join(missing)
        draft.event(
            "Warning",
            "GangIncomplete",
            f"deleting the incomplete gang (missing or terminating: {gone}); "
            "it will be admitted again",
        )
        _restart_if_running(draft, f"pods {gone} are missing or terminating")
        _mark_queued(draft)
        return
    if _gang_timed_out(draft, pods, live):
        return
    if missing and reservation is not None:
        _create_missing(draft, pods, reservation)
    else:
        _create_missing_services(draft)
    _mark_admitted(draft)
    if _is_running(draft.job, live) and draft.set_condition(
        st.RUNNING, st.TRUE, st.REASON_RUNNING, _running_message(draft)
    ):
        draft.transition("Normal", st.REASON_RUNNING, _running_message(draft))


def _is_running(job: JobSpec, live: Mapping[str, Mapping[str, Any]]) -> bool:
    """The Master pod is Running (worker-only jobs: any worker is)."""
    replica_type, index = rendezvous_replica(job)
    if replica_type == names.MASTER:
        master = live.get(names.replica_name(job.name, replica_type, index))
        return master is not None and st.phase_of(master) == "Running"
    return any(st.phase_of(pod) == "Running" for pod in live.values())


def _gang_timed_out(draft: Draft, pods: GangPods, live: Mapping[str, Mapping[str, Any]]) -> bool:
    """Tear the gang down if too few of its pods were bound to nodes in time."""
    job = draft.job
    bound = sum(1 for pod in live.values() if as_mapping(pod.get("spec")).get("nodeName"))
    if bound >= job.min_available:
        return False
    timeout = job.run_policy.schedule_timeout_seconds
    if timeout is None or timeout <= 0:
        timeout = DEFAULT_SCHEDULE_TIMEOUT_SECONDS
    created = [
        st.parse_time(metadata_of(pod).get("creationTimestamp")) or draft.now
        for pod in live.values()
    ]
    remaining = (min(created) + timedelta(seconds=timeout) - draft.now).total_seconds()
    if remaining > 0:
        draft.timer(remaining)
        return False
    _teardown(draft, pods)
    draft.gang_timed_out = True
    draft.event(
        "Warning",
        "GangScheduleTimeout",
        f"only {bound} of the {job.min_available} required pods were scheduled within "
        f"{timeout}s; deleting the gang, it will be admitted again",
    )
    _restart_if_running(draft, f"its gang could not be scheduled within {timeout}s")
    _mark_queued(draft)
    return True

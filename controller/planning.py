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

Timers (deadline, TTL, gang schedule timeout) come back as ``requeue_after``, so they fire on time
rather than whenever some other event happens to wake the job up. Events that announce a condition
change belong to the status (``Event.announces_status``): the reconciler records them when it
writes that status, which ``writepolicy`` may put off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from torchgate.controller import status as st
from torchgate.controller.eligibility import PodDemand, job_demands
from torchgate.controller.envvars import rendezvous_replica
from torchgate.controller.pods import build_pod, build_service, service_replicas
from torchgate.pytorchjob import names
from torchgate.pytorchjob.spec import JobSpec, as_int, pytorch_container_name

ANNOTATION_RESTARTS: Final = "torchgate.io/restarts"
DEFAULT_SCHEDULE_TIMEOUT_SECONDS: Final = 60
FINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
MANAGING_VALUES: Final = frozenset({names.TRAINING_OPERATOR, names.CONTROLLER_NAME})
REASON_NAME_CONFLICT: Final = "PodNameConflict"

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """Everything ``plan`` may look at (the shell reads it; nothing here does I/O).

    Attributes:
        job_raw: The job as read (metadata with annotations and deletionTimestamp, status).
        job: ``pytorchjob.spec.parse_job`` of it.
        pods: The job's pods (filtered again here by controlling ownerReference uid).
        services: The job's Services (same filter).
        now: The clock, timezone-aware.
        allow_clean_pod_policy_none: The admin policy lets finished jobs keep running pods.
        reservation: Pod name -> node the admitter reserved; ``None`` when not admitted.
        wait_reason: The admitter's latest shortfall message for this job, if any.
        gpu_resource: The extended resource that counts as GPUs.
        finish_grace_seconds: How long the running pods of a succeeded job may take to end on
            their own before they are deleted (rule 6).
        demands_of: ``job_demands``, or a memo of it (the shell keeps one per job spec: parsing
            every template's requests again on each reconcile of a waiting job is costly).
    """

    job_raw: Mapping[str, Any]
    job: JobSpec
    now: datetime
    pods: Sequence[Mapping[str, Any]] = ()
    services: Sequence[Mapping[str, Any]] = ()
    allow_clean_pod_policy_none: bool = False
    reservation: Mapping[str, str] | None = None
    wait_reason: str | None = None
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE
    finish_grace_seconds: float = 0.0
    demands_of: Callable[[JobSpec], tuple[PodDemand, ...]] = job_demands


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event to record on the job.

    ``announces_status`` marks an Event that reports a condition change of the plan's status
    (``Created``, ``Running``, ``Queued``, ...): it belongs to that status and is recorded when the
    status is written. Until then every plan derives the change, and its Event, again from the
    written status. Other Events report an action of the plan (``GangAdmitted`` with its creates)
    and are recorded with the action.
    """

    type: EventType
    reason: str
    message: str
    announces_status: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do; the empty ``Plan()`` means "nothing".

    Every part is idempotent to apply (deterministic names: AlreadyExists on create and NotFound
    on delete mean "done"), in any order, and a crash between parts is repaired by the next plan.

    Attributes:
        status: The complete new ``status``, or ``None`` when unchanged. A time it drops
            (``startTime`` on resume) is present as ``None``, so it works as the body of a JSON
            merge patch (which removes it) as well as of a replace.
        events: Events to record on the job; only emitted on transitions and actions.
        create_services: Service manifests to create.
        create_pods: Pod manifests to create.
        delete_pods: Names of pods to delete.
        delete_services: Names of Services to delete.
        needs_admission: The job waits for the admitter to place ``demands`` all-or-nothing.
        demands: The gang to place, Master first (only with ``needs_admission``).
        restarts: New value of the job annotation ``torchgate.io/restarts``, or ``None``.
        delete_job: ``ttlSecondsAfterFinished`` has passed: delete the job itself.
        requeue_after: Seconds until a timer (deadline, TTL, gang schedule timeout) needs a look.
        gang_timed_out: The gang was torn down because kube-scheduler did not bind enough of its
            pods in time; the admitter should back off before placing it again.
    """

    status: dict[str, Any] | None = None
    events: tuple[Event, ...] = ()
    create_services: tuple[dict[str, Any], ...] = ()
    create_pods: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    delete_services: tuple[str, ...] = ()
    needs_admission: bool = False
    demands: tuple[PodDemand, ...] = ()
    restarts: int | None = None
    delete_job: bool = False
    requeue_after: float | None = None
    gang_timed_out: bool = False


# ------------------------------------------------------------------ reading the observed state


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` (``""`` when missing)."""
    name = _metadata(obj).get("name")
    return name if isinstance(name, str) else ""


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether ``obj`` has a controlling ownerReference to ``uid`` (anything when ``uid`` is "")."""
    if not uid:
        return True
    references = _metadata(obj).get("ownerReferences")
    if not isinstance(references, list):
        return False
    return any(
        isinstance(ref, Mapping) and ref.get("uid") == uid and ref.get("controller") is True
        for ref in references
    )


def _count(value: object) -> int | None:
    """A non-negative decimal integer written as a string (annotations), else ``None``."""
    if isinstance(value, str) and value.isascii() and value.isdecimal():
        return int(value)
    return None


def restarts_of(job: JobSpec) -> int:
    """Gang restarts so far (the ``torchgate.io/restarts`` annotation; malformed counts as 0)."""
    return _count(job.annotations.get(ANNOTATION_RESTARTS)) or 0


def attempt_of(pod: Mapping[str, Any]) -> int | None:
    """The gang attempt that created ``pod`` (``None`` for pods torchgate did not create)."""
    return _count(_mapping(_metadata(pod).get("annotations")).get(names.ANNOTATION_GANG_ATTEMPT))


def expected_pods(job: JobSpec) -> dict[str, tuple[names.ReplicaType, int]]:
    """Pod name -> (replica type, index) for every replica of the job, Master first."""
    return {
        names.replica_name(job.name, spec.replica_type, index): (spec.replica_type, index)
        for spec in job.replica_specs
        for index in range(spec.replicas)
    }


def pytorch_exit_code(pod: Mapping[str, Any]) -> int | None:
    """Exit code of the terminated ``pytorch`` container, ``None`` when it has none."""
    statuses = _mapping(pod.get("status")).get("containerStatuses")
    if not isinstance(statuses, list):
        return None
    training = pytorch_container_name(_mapping(pod.get("spec"))) or names.CONTAINER_NAME
    for container in statuses:
        if isinstance(container, Mapping) and container.get("name") == training:
            terminated = _mapping(_mapping(container.get("state")).get("terminated"))
            return as_int(terminated.get("exitCode"))
    return None


def is_retryable(restart_policy: str, pod: Mapping[str, Any]) -> bool:
    """Whether a Failed pod should restart the gang (else the job fails for good).

    ``ExitCode``: 1-127 is the program's own failure (permanent); 128 and above is a signal (OOM
    kill 137, SIGTERM 143, ...) and retryable, as are an evicted pod and a pod whose container
    never terminated on its own (node lost).
    """
    if restart_policy == "Never":
        return False
    if restart_policy != "ExitCode":
        return True
    if _mapping(pod.get("status")).get("reason") == "Evicted":
        return True
    code = pytorch_exit_code(pod)
    return code is None or not 1 <= code <= 127


# ------------------------------------------------------------------ the draft


@dataclass(slots=True)
class _Draft:
    """The plan being built, with the status it will leave behind."""

    observed: Observed
    conditions: list[st.Condition]
    start_time: str | None
    completion_time: str | None
    replica_statuses: dict[str, dict[str, Any]] | None = None
    events: list[Event] = field(default_factory=list)
    create_services: list[dict[str, Any]] = field(default_factory=list)
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    delete_services: list[str] = field(default_factory=list)
    needs_admission: bool = False
    restarts: int | None = None
    delete_job: bool = False
    timers: list[float] = field(default_factory=list)
    gang_timed_out: bool = False

    @property
    def job(self) -> JobSpec:
        return self.observed.job

    @property
    def now(self) -> datetime:
        return self.observed.now

    def set_condition(self, kind: str, status: str, reason: str, message: str) -> bool:
        """Set a condition; True when its status or reason changed (a transition)."""
        before = st.find_condition(self.conditions, kind)
        self.conditions = st.set_condition(self.conditions, kind, status, reason, message, self.now)
        after = st.find_condition(self.conditions, kind)
        if after is None:
            return False
        if before is None:
            return True
        return (before.get("status"), before.get("reason")) != (
            after.get("status"),
            after.get("reason"),
        )

    def event(self, kind: EventType, reason: str, message: str) -> None:
        """An Event reporting an action of this plan."""
        self.events.append(Event(kind, reason, message))

    def transition(self, kind: EventType, reason: str, message: str) -> None:
        """An Event announcing a condition change of this plan's status."""
        self.events.append(Event(kind, reason, message, announces_status=True))

    def delete_pod(self, name: str) -> None:
        if name and name not in self.delete_pods:
            self.delete_pods.append(name)

    def timer(self, seconds: float) -> None:
        self.timers.append(max(seconds, 0.001))

    def status(self) -> dict[str, Any] | None:
        old = _mapping(self.observed.job_raw.get("status"))
        new = dict(old)
        new["conditions"] = self.conditions
        if self.replica_statuses is not None:
            new["replicaStatuses"] = self.replica_statuses
        times = (("startTime", self.start_time), ("completionTime", self.completion_time))
        for key, value in times:
            if value is not None or new.get(key) is not None:
                new[key] = value  # a dropped time becomes null, which a merge patch removes
        return None if new == old else new

    def finish(self) -> Plan:
        return Plan(
            status=self.status(),
            events=tuple(self.events),
            create_services=tuple(self.create_services),
            create_pods=tuple(self.create_pods),
            delete_pods=tuple(self.delete_pods),
            delete_services=tuple(self.delete_services),
            needs_admission=self.needs_admission,
            demands=self.observed.demands_of(self.job) if self.needs_admission else (),
            restarts=self.restarts,
            delete_job=self.delete_job,
            requeue_after=min(self.timers) if self.timers else None,
            gang_timed_out=self.gang_timed_out,
        )


@dataclass(frozen=True, slots=True)
class _Pods:
    """The job's pods, sorted out once.

    ``current`` are pods of the current gang attempt with an expected name (terminating ones
    included); ``stale_live`` names live pods of an older attempt or an unexpected name.
    """

    owned: list[Mapping[str, Any]]
    expected: dict[str, tuple[names.ReplicaType, int]]
    attempt: int
    live: list[Mapping[str, Any]]
    terminating: list[Mapping[str, Any]]
    current: dict[str, Mapping[str, Any]]
    current_live: dict[str, Mapping[str, Any]]
    stale_live: list[str]


def _sort_pods(observed: Observed) -> _Pods:
    job = observed.job
    owned = [p for p in observed.pods if isinstance(p, Mapping) and controlled_by(p, job.uid)]
    expected = expected_pods(job)
    attempt = restarts_of(job) + 1
    live: list[Mapping[str, Any]] = []
    terminating: list[Mapping[str, Any]] = []
    current: dict[str, Mapping[str, Any]] = {}
    stale_live: list[str] = []
    for pod in owned:
        name = name_of(pod)
        is_current = name in expected and attempt_of(pod) == attempt
        if is_current:
            current[name] = pod
        if st.is_terminating(pod):
            terminating.append(pod)
            continue
        live.append(pod)
        if not is_current:
            stale_live.append(name)
    current_live = {n: p for n, p in current.items() if not st.is_terminating(p)}
    return _Pods(owned, expected, attempt, live, terminating, current, current_live, stale_live)


# ------------------------------------------------------------------ plan


def plan(observed: Observed) -> Plan:
    """Decide what to do about one job; pure and idempotent (see the module docstring)."""
    job = observed.job
    if st.is_terminating(observed.job_raw):
        return Plan()
    if job.run_policy.managed_by is not None and job.run_policy.managed_by not in MANAGING_VALUES:
        return Plan()
    raw_status = observed.job_raw.get("status")
    status = _mapping(raw_status)
    draft = _Draft(
        observed=observed,
        conditions=st.conditions_of(status),
        start_time=_text(status.get("startTime")),
        completion_time=_text(status.get("completionTime")),
    )
    pods = _sort_pods(observed)
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


def _effective_clean_policy(draft: _Draft) -> str:
    policy = draft.job.run_policy.clean_pod_policy
    if policy == "None" and not draft.observed.allow_clean_pod_policy_none:
        return "Running"
    return policy


def _cleanup(draft: _Draft, pods: _Pods) -> None:
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


def _finish_grace_left(draft: _Draft) -> float:
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


def _delete_services(draft: _Draft) -> None:
    for service in _owned_services(draft):
        if not st.is_terminating(service):
            draft.delete_services.append(name_of(service))


def _owned_services(draft: _Draft) -> list[Mapping[str, Any]]:
    uid = draft.job.uid
    return [s for s in draft.observed.services if isinstance(s, Mapping) and controlled_by(s, uid)]


def _plan_finished(draft: _Draft, pods: _Pods) -> None:
    _cleanup(draft, pods)
    _plan_ttl(draft, pods)


def _finished_at(draft: _Draft) -> datetime | None:
    completion = st.parse_time(draft.completion_time)
    if completion is not None:
        return completion
    for kind in (st.SUCCEEDED, st.FAILED):
        condition = st.find_condition(draft.conditions, kind)
        if condition is not None and condition.get("status") == st.TRUE:
            return st.parse_time(condition.get("lastTransitionTime"))
    return None


def _plan_ttl(draft: _Draft, pods: _Pods) -> None:
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
    draft: _Draft, pods: _Pods, kind: str, reason: str, message: str, event: EventType
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


def _plan_suspended(draft: _Draft, pods: _Pods) -> None:
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


def _ensure_created(draft: _Draft) -> None:
    if st.find_condition(draft.conditions, st.CREATED) is None:
        message = f"PyTorchJob {draft.job.name} is created."
        draft.set_condition(st.CREATED, st.TRUE, st.REASON_CREATED, message)
        draft.transition("Normal", st.REASON_CREATED, message)


def _resume_if_suspended(draft: _Draft) -> None:
    if st.is_true(draft.conditions, st.SUSPENDED):
        message = f"PyTorchJob {draft.job.name} is resumed."
        draft.set_condition(st.SUSPENDED, st.FALSE, st.REASON_RESUMED, message)
        draft.transition("Normal", st.REASON_RESUMED, message)
        draft.start_time = None


def _deadline_passed(draft: _Draft, pods: _Pods) -> bool:
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


def _plan_active(draft: _Draft, pods: _Pods) -> None:
    _ensure_created(draft)
    _resume_if_suspended(draft)
    if not pods.expected:  # zero replicas: nothing to run, nothing will ever finish
        draft.replica_statuses = st.replica_statuses(draft.job, [])
        return
    if _deadline_passed(draft, pods):
        return
    for name in pods.stale_live:
        draft.delete_pod(name)
    current = pods.current
    if _succeeded(draft.job, current):
        _finish(draft, pods, st.SUCCEEDED, st.REASON_SUCCEEDED, _success_message(draft), "Normal")
        return
    failed = [pod for pod in current.values() if st.phase_of(pod) == "Failed"]
    if failed:
        _handle_failure(draft, pods, failed)
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


def _success_message(draft: _Draft) -> str:
    job = draft.job
    if job.has_master:
        return f"PyTorchJob {job.name} is successfully completed."
    return f"PyTorchJob {job.namespace}/{job.name} successfully completed."


def _running_message(draft: _Draft) -> str:
    job = draft.job
    if job.has_master:
        return f"PyTorchJob {job.name} is running."
    return f"PyTorchJob {job.namespace}/{job.name} is running."


def _replica_type_of(pods: _Pods, pod: Mapping[str, Any]) -> names.ReplicaType:
    return pods.expected[name_of(pod)][0]


def _failure_summary(pods: _Pods, failed: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """How many pods of the first failing replica type (Master before Worker) failed."""
    types = [_replica_type_of(pods, pod) for pod in failed]
    first = next(t for t in names.REPLICA_TYPES if t in types)
    return types.count(first), first


def _exit_events(draft: _Draft, failed: Iterable[Mapping[str, Any]]) -> None:
    for pod in failed:
        code = pytorch_exit_code(pod)
        detail = f"exited with code {code}" if code is not None else "failed"
        reason = _mapping(pod.get("status")).get("reason")
        if isinstance(reason, str) and reason:
            detail += f" ({reason})"
        pod_name = f"{draft.job.namespace}.{name_of(pod)}"
        draft.event("Warning", "ExitedWithCode", f"Pod: {pod_name} {detail}")


def _handle_failure(draft: _Draft, pods: _Pods, failed: Sequence[Mapping[str, Any]]) -> None:
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


def _restart_policy(job: JobSpec, replica_type: str) -> str:
    replica = job.replica(replica_type)
    return replica.restart_policy if replica is not None else names.DEFAULT_RESTART_POLICY


def _teardown(draft: _Draft, pods: _Pods) -> None:
    """Delete every live pod of the job (the gang is admitted again once they are gone)."""
    for pod in pods.live:
        draft.delete_pod(name_of(pod))


def _restart_if_running(draft: _Draft, why: str) -> None:
    if st.is_true(draft.conditions, st.RUNNING):
        message = f"PyTorchJob {draft.job.name} is restarting because {why}."
        draft.set_condition(st.RESTARTING, st.TRUE, st.REASON_RESTARTING, message)
        draft.transition("Warning", st.REASON_RESTARTING, message)


def _mark_queued(draft: _Draft) -> None:
    """Show the admitter's latest shortfall while the job waits for its gang to fit."""
    reason = draft.observed.wait_reason
    if reason is not None and draft.set_condition(st.QUEUED, st.TRUE, st.REASON_WAITING, reason):
        draft.transition("Normal", st.REASON_WAITING, reason)


def _mark_admitted(draft: _Draft) -> None:
    draft.conditions = st.remove_condition(draft.conditions, st.QUEUED)
    draft.start_time = draft.start_time or st.format_time(draft.now)


def _plan_admission(draft: _Draft, pods: _Pods) -> None:
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


def _names_held_by_others(draft: _Draft, pods: _Pods) -> list[str]:
    """Expected pod names taken by pods this job does not control."""
    uid = draft.job.uid
    return sorted(
        name
        for pod in draft.observed.pods
        if isinstance(pod, Mapping)
        and (name := name_of(pod)) in pods.expected
        and not controlled_by(pod, uid)
    )


def _create_missing(draft: _Draft, pods: _Pods, reservation: Mapping[str, str]) -> None:
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


def _create_missing_services(draft: _Draft) -> None:
    observed = draft.observed
    present = {name_of(service) for service in observed.services if isinstance(service, Mapping)}
    for replica_type, index in service_replicas(draft.job):
        if names.replica_name(draft.job.name, replica_type, index) not in present:
            draft.create_services.append(
                build_service(observed.job_raw, draft.job, replica_type, index)
            )


def _plan_gang(draft: _Draft, pods: _Pods) -> None:
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


def _gang_timed_out(draft: _Draft, pods: _Pods, live: Mapping[str, Mapping[str, Any]]) -> bool:
    """Tear the gang down if too few of its pods were bound to nodes in time."""
    job = draft.job
    bound = sum(1 for pod in live.values() if _mapping(pod.get("spec")).get("nodeName"))
    if bound >= job.min_available:
        return False
    timeout = job.run_policy.schedule_timeout_seconds
    if timeout is None or timeout <= 0:
        timeout = DEFAULT_SCHEDULE_TIMEOUT_SECONDS
    created = [
        st.parse_time(_metadata(pod).get("creationTimestamp")) or draft.now for pod in live.values()
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

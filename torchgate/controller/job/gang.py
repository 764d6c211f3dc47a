"""A running job as a gang: admission, queueing, failures, preemption and schedule timeout.

Why a module of its own: once ``plan.plan`` has found a job that is neither ended nor
suspended, the rest is about the gang as a unit: whether it may have pods at all (the admitter's
reservation), when it must be torn down whole, and what its ``Queued``, ``Running``,
``Restarting`` and ``Preempted`` conditions say. These rules share their helpers (teardown,
queueing, admission marks) with each other and with nothing else, so they live together, pure.

The rules this module owns (rules 4, 5 and 7 of ``plan``):

- ``plan_admission``: no live pod of the current attempt: wait for stragglers, wait while pods or
  Services the job does not control (orphans with its labels it has adopted already:
  ``adoption``) hold the gang's pod or Service names (``PodNameConflict``:
  ``MASTER_ADDR`` must resolve to the job's own Service, never to a user's; an object without
  the job's labels, a user's own, is looked at again every ``NAME_HOLDER_RECHECK_SECONDS``: its
  deletion reconciles no job), ask the admitter
  (``needs_admission``), or create every missing pod and Service on its reserved node (a
  Service of the job's whose selector a human changed is deleted, then made again). A job
  that asks the admitter gets its missing Services at once: a Service holds no capacity, and
  made while the job waits it is no longer a write between the admission and the gang's pods
  (the reconciler creates a plan's Services before its pods), nor inside a wave of pod creates.
- ``plan_gang``: a gang missing a member without a reservation to recreate it (or with a member
  terminating) is deleted whole and queued again; a gang kube-scheduler did not bind within
  ``scheduleTimeoutSeconds`` (default 60) is torn down (``gang_timed_out``, so the admitter backs it
  off); otherwise missing pods and Services are created and ``Running`` is set once the
  rendezvous replica runs.
- ``waiting_extras``: an elastic job's pods beyond ``minAvailable`` (``optional_members``, the
  admitter's extras) are created only on a node the admitter reserved for them. One it found no
  room for, or one a scale (``kubectl scale``, an HPA) asks for while the gang runs, is left out:
  it neither tears the running gang down (the rendezvous goes on with the members it has) nor is
  created unplaced for kube-scheduler to bind later, outside admission and quota. The running
  gang asks the admitter to place them (``Plan.growth``; ``ledger`` rule 7: after the waiting
  gangs, within the team's quota); a reservation naming them creates them beside it, without a
  restart, and the Running condition's message names those still waiting. A member of the gang
  missing from such a reservation still breaks it. A scale down deletes the Workers above the
  new count (highest indexes), as any pod of a name no longer expected, and drops those reserved
  but not created yet from the reservation (``Plan.unreserve``).
- ``handle_failure``: a failed pod that its restart policy does not retry ends the job; a
  retryable failure restarts the whole gang, counted against ``backoffLimit``. A Master the
  progress probe ended (``pytorchjob.progress``) restarts it as a ``Hang``, counted too: a hang is
  usually the job's own (a deadlock, a stuck collective, a dead data loader). No failure is
  judged while a failed member is awaited (``disruption`` rule 8: for ``failure_window`` seconds
  after it failed, its node may still show the fault that failed it, which makes the restart a
  disruption); a timer looks again when the window closes.
- ``plan_disrupted``: a member taken by its node or by someone else (``disruption.find``:
  a lost node, an untolerated ``NoExecute`` taint, an eviction, a deletion, a pod its node
  could not start) restarts the whole
  gang at once, whatever the restart policy, without counting against ``backoffLimit``, with a
  ``Restarting`` condition and an Event whose reason is the cause and whose message names the
  node. A disruption outranks failures seen with it: ranks fail when a peer is taken from them.
  A stuck image pull after the job's first one is the job's fault (``disruption`` rule 6):
  ``ImagePullFailed``, counted against ``backoffLimit`` like a failure.
- Every restart (failure, disruption, preemption, schedule timeout, a gang found incomplete)
  moves the job to a new gang attempt (``torchgate.io/gang-attempt``) in the plan that tears the
  gang down: the old pods become stale at once, so a restart is decided once, and the next gang
  gets a rendezvous the old ranks cannot join (``pytorchjob.contract``).
- ``plan_preempted``: a preemption victim loses all its pods at once, gets a ``Preempted``
  condition and Event naming the preemptor, and waits in the queue again; ``Preempted`` turns
  ``False`` when the gang is admitted again.
- Queueing: the ``Queued`` condition carries the admitter's throttled wait reason, with a reason
  per wait kind (``reasons.QUEUED_REASONS``).
- ``events_done``: a plan's Events say what was done. A gang a member of which the apiserver
  refused to create (a namespace's ResourceQuota: 403 ``exceeded quota``) was not admitted: its
  reservation ends and it waits again, its ``Queued`` condition and a ``FailedCreate`` Event
  giving the apiserver's words. So its plan's ``GangAdmitted`` ("creating N pods on ...") is
  not recorded, nor is the plan's status (``written_status``), which says the gang admitted
  (no ``Queued``; ``startTime``, from which ``activeDeadlineSeconds`` would count while the job
  waits), nor the Events announcing that status; the next plan derives the job's status from
  the status written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from torchgate.controller.admission.waiting import GROWTH_REFUSED
from torchgate.controller.job import disruption as dis
from torchgate.controller.job import status as st
from torchgate.controller.job.envvars import rendezvous_replica
from torchgate.controller.job.finish import finish
from torchgate.controller.job.model import (
    Draft,
    Event,
    GangPods,
    Restart,
    controlled_by,
    ended_hung,
    holds_service_name,
    image_pull_stuck_on,
    is_retryable,
    metadata_of,
    name_of,
    pytorch_exit_code,
    restarts_of,
)
from torchgate.controller.job.pods import (
    build_pod,
    build_service,
    selector_labels,
    service_names,
)
from torchgate.pytorchjob import moments, names, reasons
from torchgate.pytorchjob.spec import JobSpec, as_mapping

DEFAULT_SCHEDULE_TIMEOUT_SECONDS: Final = 60
# How often a gang waiting for a name an object without its labels holds looks again.
NAME_HOLDER_RECHECK_SECONDS: Final = 10.0


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
        draft.event("Warning", reasons.EXITED_WITH_CODE, f"Pod: {pod_name} {detail}")


def handle_failure(
    draft: Draft,
    pods: GangPods,
    failed: Sequence[Mapping[str, Any]],
    *,
    awaiting: Sequence[str] = (),
) -> None:
    """Failed pods end the job (permanent, or backoff limit hit) or restart the gang (rule 5).

    Nothing yet while members are ``awaiting`` their node's fault (``disruption`` rule 8).
    """
    if awaiting:
        return
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
        finish(draft, pods, reasons.FAILED, reasons.REASON_FAILED, message, "Warning")
        return
    restarts = restarts_of(job)
    limit = job.run_policy.backoff_limit
    if limit is not None and restarts >= limit:
        message = f"Job {job.name} has failed because it has reached the specified backoff limit"
        finish(draft, pods, reasons.FAILED, reasons.REASON_BACKOFF_LIMIT, message, "Warning")
        return
    hung = [name_of(pod) for pod in failed if ended_hung(pod)]
    if hung:
        deadline = draft.observed.progress_deadline_seconds
        message = (
            f"PyTorchJob {job.name} is restarting because {', '.join(hung)} made no progress for "
            f"its progress deadline ({deadline}s): a hang, counted against backoffLimit."
        )
        reason: str = reasons.HANG
    else:
        message = (
            f"PyTorchJob {job.name} is restarting because {count} {replica_type} replica(s) failed."
        )
        reason = reasons.REASON_RESTARTING
    cause = reasons.HANG if hung else reasons.CONTAINER_FAILED
    _begin_attempt(draft, pods, Restart(cause, counted=True))
    draft.set_condition(reasons.RESTARTING, st.TRUE, reason, message)
    draft.event("Warning", reason, message)
    _mark_queued(draft)


def find_disruption(draft: Draft, pods: GangPods) -> dis.Finding:
    """The current gang's disruption, if any, and the failed members awaited (with a timer)."""
    observed = draft.observed
    finding = dis.find(
        pods.current.values(),
        pods.departed,
        nodes=observed.nodes,
        now=draft.now,
        lost_after=observed.node_lost_seconds,
        stuck_after=observed.stuck_pod_seconds,
        failure_window=observed.failure_window_seconds,
    )
    if finding.recheck_after is not None:
        draft.timer(finding.recheck_after)
    return finding


def plan_disrupted(draft: Draft, pods: GangPods, disruption: dis.Disruption) -> None:
    """Restart the whole gang for a disruption, not counted against ``backoffLimit``.

    A stuck image pull is judged by ``disruption.blame_image_pull``: the job's first one is a
    disruption like the others (and is remembered on the job), a later one is the job's fault.
    """
    stuck_before_on = image_pull_stuck_on(draft.job)
    disruption = dis.blame_image_pull(disruption, stuck_before_on=stuck_before_on)
    if disruption.cause in dis.COUNTED:
        _plan_job_fault(draft, pods, disruption)
        return
    if disruption.image_pull and stuck_before_on is None:
        draft.image_pull_stuck = disruption.node or ""
    message = (
        f"PyTorchJob {draft.job.name} is restarting because {disruption.detail}: the whole gang "
        "is placed again, not counted against backoffLimit"
    )
    restart = Restart(
        disruption.cause,
        disruption.node,
        other_nodes=disruption.other_nodes,
        blames_node=disruption.blames_node,
        outage=disruption.outage,
    )
    _begin_attempt(draft, pods, restart)
    draft.set_condition(reasons.RESTARTING, st.TRUE, disruption.cause, message)
    draft.event("Warning", disruption.cause, message)
    _mark_queued(draft)


def _plan_job_fault(draft: Draft, pods: GangPods, disruption: dis.Disruption) -> None:
    """A disruption that is the job's fault: a restart counted against ``backoffLimit``."""
    job = draft.job
    limit = job.run_policy.backoff_limit
    if limit is not None and restarts_of(job) >= limit:
        message = (
            f"Job {job.name} has failed because it has reached the specified backoff limit "
            f"({disruption.cause}: {disruption.detail})"
        )
        draft.event("Warning", disruption.cause, message)
        finish(draft, pods, reasons.FAILED, reasons.REASON_BACKOFF_LIMIT, message, "Warning")
        return
    message = (
        f"PyTorchJob {job.name} is restarting because {disruption.detail}: counted against "
        "backoffLimit"
    )
    _begin_attempt(draft, pods, Restart(disruption.cause, disruption.node, counted=True))
    draft.set_condition(reasons.RESTARTING, st.TRUE, disruption.cause, message)
    draft.event("Warning", disruption.cause, message)
    _mark_queued(draft)


def plan_preempted(draft: Draft, pods: GangPods, preemptor: str) -> None:
    """Evict the whole gang for ``preemptor`` (rule 7)."""
    message = (
        f"PyTorchJob {draft.job.name} was preempted by {preemptor}: its whole gang is deleted "
        "and the job waits in the queue again"
    )
    if draft.set_condition(reasons.PREEMPTED, st.TRUE, reasons.PREEMPTED, message):
        draft.transition("Warning", reasons.PREEMPTED, message)
    if st.is_true(draft.conditions, reasons.RUNNING):
        draft.set_condition(reasons.RUNNING, st.FALSE, reasons.PREEMPTED, message)
    if pods.current_live:
        _begin_attempt(draft, pods, Restart(reasons.PREEMPTED))
    elif pods.live:  # an older attempt's pods, left from the eviction
        _teardown(draft, pods)
    if pods.live:
        _mark_queued(draft)


def _restart_policy(job: JobSpec, replica_type: str) -> str:
    replica = job.replica(replica_type)
    return replica.restart_policy if replica is not None else names.DEFAULT_RESTART_POLICY


def _teardown(draft: Draft, pods: GangPods) -> None:
    """Delete every live pod of the job (the gang is admitted again once they are gone)."""
    for pod in pods.live:
        draft.delete_pod(name_of(pod))


def _begin_attempt(draft: Draft, pods: GangPods, restart: Restart) -> None:
    """Tear the gang down and move the job to its next attempt, for ``restart``'s cause."""
    _teardown(draft, pods)
    draft.attempt = pods.attempt + 1
    if restart.counted:
        draft.restarts = restarts_of(draft.job) + 1
    draft.restart = restart


def _restart_if_running(draft: Draft, why: str) -> None:
    if st.is_true(draft.conditions, reasons.RUNNING):
        message = f"PyTorchJob {draft.job.name} is restarting because {why}."
        draft.set_condition(reasons.RESTARTING, st.TRUE, reasons.REASON_RESTARTING, message)
        draft.transition("Warning", reasons.REASON_RESTARTING, message)


def _mark_queued(draft: Draft) -> None:
    """Show the admitter's latest shortfall while the job waits for its gang to fit."""
    reason = draft.observed.wait_reason
    kind = reasons.QUEUED_REASONS.get(
        draft.observed.wait_kind or "Capacity", reasons.REASON_WAITING_FOR_RESOURCES
    )
    if reason is not None and draft.set_condition(reasons.QUEUED, st.TRUE, kind, reason):
        draft.transition("Normal", kind, reason)


def gang_started_at(pods: GangPods) -> str | None:
    """When the current gang's first live pod was created (``None`` before any exists).

    ``startTime`` is taken from the pods rather than the clock, so it does not depend on when the
    status is written (``writes`` may put that off). ``plan`` takes it before the
    deadline is checked, so the deadline counts from the same moment in every plan.
    """
    created = [
        moment
        for pod in pods.current_live.values()
        if (moment := moments.parse_time(metadata_of(pod).get("creationTimestamp"))) is not None
    ]
    return moments.format_time(min(created)) if created else None


def _mark_admitted(draft: Draft) -> None:
    """No longer queued; ``startTime`` now if no pod told it earlier (``gang_started_at``)."""
    draft.conditions = st.remove_condition(draft.conditions, reasons.QUEUED)
    if st.is_true(draft.conditions, reasons.PREEMPTED):
        message = f"PyTorchJob {draft.job.name} was admitted again after its preemption"
        draft.set_condition(reasons.PREEMPTED, st.FALSE, reasons.REASON_READMITTED, message)
    draft.start_time = draft.start_time or moments.format_time(draft.now)


def plan_admission(draft: Draft, pods: GangPods) -> None:
    """No live pod of the current attempt: wait for stragglers, ask for admission, or create."""
    ended = st.is_true(draft.conditions, reasons.RUNNING)  # its pods went while no one watched
    if ended:
        _begin_attempt(draft, pods, Restart(reasons.GANG_INCOMPLETE))
    _restart_if_running(draft, "its pods are gone")
    if pods.terminating or draft.delete_pods:
        _mark_queued(draft)
        return
    held_pods, held_services = _names_held_by_others(draft, pods)
    if held_pods or held_services:
        held = [
            f"{kind} {', '.join(taken)}"
            for kind, taken in (("pods", held_pods), ("Services", held_services))
            if taken
        ]
        message = (
            f"waiting for {' and '.join(held)}, which belong to another owner, to be "
            "deleted: the gang needs their names"
        )
        if draft.set_condition(reasons.QUEUED, st.TRUE, reasons.REASON_NAME_CONFLICT, message):
            draft.transition("Warning", reasons.REASON_NAME_CONFLICT, message)
        if draft.observed.name_holders:
            draft.timer(NAME_HOLDER_RECHECK_SECONDS)
        return
    # A reservation made while the ended attempt ran is not the new attempt's: ask again.
    reservation = None if ended else draft.observed.reservation
    if reservation is None:
        draft.needs_admission = True
        _create_missing_services(draft)
        _mark_queued(draft)
        return
    _create_missing(draft, pods, reservation)
    _mark_admitted(draft)
    nodes = sorted(set(reservation.values()))
    where = f" on {len(nodes)} node(s): {', '.join(nodes)}" if nodes else ""
    draft.event("Normal", reasons.GANG_ADMITTED, f"creating {len(draft.create_pods)} pods{where}")


def events_done(events: Iterable[Event], *, gang_refused: bool) -> tuple[Event, ...]:
    """A plan's Events once it is applied: of a gang the apiserver refused, none of its admission.

    Neither ``GangAdmitted`` nor the Events announcing the status not written (``written_status``).
    """
    if not gang_refused:
        return tuple(events)
    return tuple(e for e in events if e.reason != reasons.GANG_ADMITTED and not e.announces_status)


def written_status(
    status: Mapping[str, Any] | None, *, gang_refused: bool
) -> Mapping[str, Any] | None:
    """A plan's status once applied: none for a gang the apiserver refused (it says admitted)."""
    return None if gang_refused else status


def _names_held_by_others(draft: Draft, pods: GangPods) -> tuple[list[str], list[str]]:
    """The gang's pod names and Service names taken by objects this job does not control."""
    observed = draft.observed
    uid = draft.job.uid
    services = service_names(draft.job)

    def held(objects: Iterable[object], wanted: Mapping[str, object]) -> list[str]:
        return sorted(
            name
            for obj in objects
            if isinstance(obj, Mapping)
            and (name := name_of(obj)) in wanted
            and not controlled_by(obj, uid)
        )

    holders = [h for h in observed.name_holders if isinstance(h, Mapping)]
    held_pods = [h for h in holders if not holds_service_name(h)]
    held_services = [h for h in holders if holds_service_name(h)]
    return (
        held((*observed.pods, *held_pods), pods.expected),
        held((*observed.services, *held_services), services),
    )


def _create_missing(draft: Draft, pods: GangPods, reservation: Mapping[str, str]) -> None:
    """Create the pods and Services that do not exist yet (names held by nobody).

    An elastic extra (``optional_members``) is created only on the node reserved for it.
    """
    observed = draft.observed
    taken = {name_of(pod) for pod in pods.owned} | {name_of(p) for p in observed.pods}
    optional = optional_members(draft.job, pods)
    for name, (replica_type, index) in pods.expected.items():
        if name in taken or (name in optional and name not in reservation):
            continue  # an elastic extra the admitter found no room for is left out
        if name in optional:
            draft.extras.append(name)
        draft.create_pods.append(
            build_pod(
                observed.job_raw,
                draft.job,
                replica_type,
                index,
                node=reservation.get(name),
                attempt=pods.attempt,
                gpus=observed.gpus,
                claims=observed.claims,
                progress_deadline=observed.progress_deadline_seconds,
            )
        )
    _create_missing_services(draft)


def _create_missing_services(draft: Draft) -> None:
    """Create the Services whose names no Service holds (the job's or another's).

    A Service of the job's whose selector is not its replica's (a human edited it) is deleted,
    and made again by the next plan (its deletion reconciles the job): it would send
    ``MASTER_ADDR`` nowhere, or to other pods, in every gang attempt, since a Service outlives
    them.
    """
    observed = draft.observed
    uid = draft.job.uid
    wanted = service_names(draft.job)
    for service in observed.services:
        if not isinstance(service, Mapping) or not controlled_by(service, uid):
            continue
        name = name_of(service)
        replica = wanted.get(name)
        selector = as_mapping(service.get("spec")).get("selector")
        if replica is None or selector == selector_labels(draft.job, *replica):
            continue
        if name not in draft.delete_services and not metadata_of(service).get("deletionTimestamp"):
            draft.delete_services.append(name)
            draft.event(
                "Warning",
                reasons.SERVICE_SELECTOR_CHANGED,
                f"deleting Service {name}, whose selector was changed: it is made again, "
                f"selecting pod {name} (the rendezvous address resolves through it)",
            )
    holders = (h for h in observed.name_holders if isinstance(h, Mapping) and holds_service_name(h))
    present = {name_of(s) for s in (*observed.services, *holders) if isinstance(s, Mapping)}
    for name, (replica_type, index) in wanted.items():
        if name not in present:
            draft.create_services.append(
                build_service(observed.job_raw, draft.job, replica_type, index)
            )


def plan_gang(draft: Draft, pods: GangPods) -> None:
    """Live pods of the current attempt exist: complete, tear down, time out, or run."""
    current = pods.current
    live = pods.current_live
    reservation = draft.observed.reservation
    left_out = waiting_extras(draft.job, pods, reservation)
    missing = [name for name in pods.expected if name not in live and name not in left_out]
    if missing and (
        reservation is None or any(name in current or name not in reservation for name in missing)
    ):
        _begin_attempt(draft, pods, Restart(reasons.GANG_INCOMPLETE))
        gone = ", ".join(missing)
        draft.event(
            "Warning",
            reasons.GANG_INCOMPLETE,
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
    draft.growth = tuple(left_out)
    draft.unreserve = tuple(name for name in reservation or () if name not in pods.expected)
    if _is_running(draft.job, live):
        observed = draft.observed
        note = _waiting_extras_note(left_out, observed.growth_wait, observed.growth_refusal)
        message = _running_message(draft) + note
        draft.set_condition(reasons.RUNNING, st.TRUE, reasons.REASON_RUNNING, message)


def optional_members(job: JobSpec, pods: GangPods) -> frozenset[str]:
    """An elastic job's pods beyond its ``minAvailable``, in gang order (the admitter's extras)."""
    if job.elastic is None:
        return frozenset()
    return frozenset(list(pods.expected)[job.min_available :])


def waiting_extras(
    job: JobSpec, pods: GangPods, reservation: Mapping[str, str] | None
) -> list[str]:
    """Elastic extras of the current attempt without a live pod and without a node reserved.

    Left out at admission (no room) or asked for by a scale while the gang runs: neither breaks
    the gang nor is created where the admitter did not place it.
    """
    optional = optional_members(job, pods)
    placed = reservation or {}
    return [
        name
        for name in pods.expected
        if name in optional and name not in pods.current_live and name not in placed
    ]


_GROWTH_WAITS: Final = {
    "Quota": "waiting for quota: their team is at its nominal quota with them counted",
    "Capacity": "waiting for room: no node they may use has room left after the queued jobs",
}


def _waiting_extras_note(left_out: Sequence[str], wait: str | None, refusal: str | None) -> str:
    if not left_out:
        return ""
    why = _GROWTH_WAITS.get(wait or "", "waiting for the admitter to place them")
    if wait == GROWTH_REFUSED and refusal:
        why = f"the apiserver refused to create them: {refusal}; they are tried again later"
    return (
        f" {len(left_out)} elastic Worker(s) beyond minAvailable are not started: "
        f"{', '.join(left_out)} ({why}; the running gang goes on without them)."
    )


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
        moments.parse_time(metadata_of(pod).get("creationTimestamp")) or draft.now
        for pod in live.values()
    ]
    remaining = st.seconds_left(min(created), timeout, now=draft.now)
    if remaining > 0:
        draft.timer(remaining)
        return False
    _begin_attempt(draft, pods, Restart(reasons.SCHEDULE_TIMEOUT))
    draft.gang_timed_out = True
    draft.event(
        "Warning",
        reasons.GANG_SCHEDULE_TIMEOUT,
        f"only {bound} of the {job.min_available} required pods were scheduled within "
        f"{timeout}s; deleting the gang, it will be admitted again",
    )
    _restart_if_running(draft, f"its gang could not be scheduled within {timeout}s")
    _mark_queued(draft)
    return True

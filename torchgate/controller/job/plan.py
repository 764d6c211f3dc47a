"""What the controller should do about one PyTorchJob now: ``plan(observed) -> Plan``.

Why one pure function: reconciling is level-triggered (the shell re-reads the job, its pods and
Services, never looks at which event woke it up) and must be idempotent, so the whole decision
("given this state, what is missing, what must go, what is the status") is a function of the
observed state and the clock. It is table-tested without a cluster, and a property test applies a
plan to an in-memory world and checks that planning again asks for nothing more.

The rules, in order:

1. A job being deleted gets nothing (garbage collection removes its children), nor does a job
   whose namespace is being deleted (``namespace_terminating``; rule 9): the namespace controller
   removes its pods and then the job, and the apiserver refuses anything created there. A job
   managed by another controller (``runPolicy.managedBy``) is left alone. Any other job first
   adopts its orphans (``adoption``: pods and Services with its labels and no controller, left
   by ``kubectl delete --cascade=orphan`` of its earlier self; ``Plan.adopt``), and the rules
   below see them as its own.
2. A finished job (``Succeeded``/``Failed``) only gets cleanup per ``cleanPodPolicy`` (repeated
   until done) and its TTL (``delete_job``, or a timer).
3. ``runPolicy.suspend`` deletes every pod and Service; resuming re-admits the job, and
   ``startTime`` restarts at the next admission.
4. Otherwise the job is a gang: no pod exists until the admitter reserved capacity for all of
   them (``needs_admission`` with ``demands``; the pods are created only when ``reservation``
   names their nodes), nor while a pod or Service the job does not control holds one of its
   pods' or Services' names (``PodNameConflict``: ``MASTER_ADDR`` must resolve to the job's own
   Service). Anything that breaks a gang (a missing or terminating member without a
   reservation to recreate it, a gang kube-scheduler could not bind in time) deletes the whole
   gang so it is admitted again; a pod is never created next to a running partial gang. An
   elastic job's Workers beyond ``minAvailable`` are not members that break it: each is created
   only where the admitter placed it, and one it left out (no room, or a scale while the gang
   runs) is asked for by the running gang (``growth``) until the admitter places it beside it.
5. Pods run with ``restartPolicy: Never``; a failed pod restarts the whole gang (a collective
   cannot take one restarted rank back), counted in the job annotation ``torchgate.io/restarts``
   against ``backoffLimit``. A member taken by its node or by someone else (a lost node, an
   untolerated ``NoExecute`` taint, an eviction, a deletion, a pod its node could not start,
   a failure its node's fault showed up with a moment later: ``disruption``) restarts the gang
   too, without counting. Every restart moves the job to its
   next gang attempt (``torchgate.io/gang-attempt``); each pod records its attempt, so
   stragglers of an older attempt are deleted, never adopted, and cannot join the new
   attempt's rendezvous.
6. When the job ends (the Master succeeded, a permanent failure, the backoff limit, or
   ``activeDeadlineSeconds`` measured from ``startTime``; one later than now or not a time, as
   a human may edit the status, is not believed: the gang's pods say when it started), its
   remaining pods are deleted per
   ``cleanPodPolicy``, so GPUs go back to the pool; the running ranks of a succeeded job get a
   short grace to finish first (``finish`` says when each pod goes, and why).
7. A gang the admitter chose as a preemption victim (``preempted_by``) loses all its pods at once
   (each honouring its grace period), gets a ``Preempted`` condition and Event naming the
   preemptor, and waits in the queue again; pods that fail while being evicted are not failures
   of the job, so a preemption never counts against ``backoffLimit``. The condition turns
   ``False`` when the gang is admitted again.
8. A pod that goes away on a lost node (one the disruption rules count as lost) is deleted
   with no grace period: no kubelet there would confirm a graceful deletion, and the gang's next
   attempt needs its name (``disruption.until_force_deletion`` says why that is safe; a node
   shutting down is awaited: its kubelet is alive).
9. A gang restart for a deleted member (``disruption`` rule 4, ``PodDeleted``) waits for the
   apiserver's word that the job's namespace is not being deleted (``asks_namespace_first``).
   ``kubectl delete namespace`` makes the namespace controller delete the namespace's pods
   first and its jobs only once the pods are gone (Kubernetes' ordered namespace deletion), so
   each job sees its members deleted while it still exists: that is the job's end, not a
   disruption. Restarting would count and announce a restart for a job about to vanish, and its
   next gang's creates would be refused (403, cause ``NamespaceTerminating``) again and again
   until the job went. The controller does not watch namespaces (no RBAC for them): the shell
   asks with a dry-run create in the namespace, refused with that 403 once the namespace is
   being deleted, and plans again with ``namespace_terminating``. The same refusal of any
   other create sets it too (it never changes: a namespace being deleted only goes).

Where the rules live: this module holds ``plan`` itself with rules 1 and 3, and decides when an
active job has succeeded or passed its deadline; ``finish`` holds rules 2 and 6 (how a job
ends: condition, cleanup, TTL), used by every path that ends a job; ``gang`` holds rules
4, 5 and 7 (admission, queueing, gang failures and restarts, preemption, schedule timeout). All
three are pure. ``disruption`` judges what took a member (rule 5) and which nodes are lost; this
module applies rule 8 last, to whatever the other rules delete.

Timers (deadline, TTL, gang schedule timeout, a node until it counts as lost, a taint's
toleration until it runs out, a failed member's window for its node's fault) come back as
``requeue_after``, so they fire on time rather than whenever some other event happens to wake
the job up. Events that announce a condition change belong to the status
(``Event.announces_status``): the reconciler records them when it writes that status, which
``writes.StatusWritePolicy`` may put off.

Events go only with news a user acts on or must be told of: an admission and where
(``GangAdmitted``), a restart, a preemption, a wait, an ending, a warning. ``Created`` and
``Running`` are conditions only, as the Kubeflow training-operator sets them (it records no Event
for either): the status carries them, and each Event is one more apiserver write per job, paid
while the job's gang is being created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from torchgate.controller.job import status as st
from torchgate.controller.job.adoption import as_adopted, orphans
from torchgate.controller.job.disruption import NONE, node_of, until_force_deletion
from torchgate.controller.job.envvars import rendezvous_replica
from torchgate.controller.job.finish import delete_services, finish, plan_finished
from torchgate.controller.job.gang import (
    find_disruption,
    gang_started_at,
    handle_failure,
    plan_admission,
    plan_disrupted,
    plan_gang,
    plan_preempted,
)
from torchgate.controller.job.model import (
    Draft,
    GangPods,
    Observed,
    Plan,
    name_of,
    sort_pods,
)
from torchgate.controller.job.model import pytorch_exit_code as pytorch_exit_code
from torchgate.pytorchjob import moments, names, reasons
from torchgate.pytorchjob.conditions import conditions_of
from torchgate.pytorchjob.spec import JobSpec, as_mapping

MANAGING_VALUES: Final = frozenset({names.TRAINING_OPERATOR, names.CONTROLLER_NAME})


# ------------------------------------------------------------------ plan


def plan(observed: Observed) -> Plan:
    """Decide what to do about one job; pure and idempotent (see the module docstring)."""
    job = observed.job
    if st.is_terminating(observed.job_raw) or observed.namespace_terminating:
        return Plan()
    if job.run_policy.managed_by is not None and job.run_policy.managed_by not in MANAGING_VALUES:
        return Plan()
    adopt = orphans(observed)
    observed = as_adopted(observed, adopt)
    raw_status = observed.job_raw.get("status")
    status = as_mapping(raw_status)
    draft = Draft(
        observed=observed,
        conditions=conditions_of(status),
        start_time=_text(status.get("startTime")),
        completion_time=_text(status.get("completionTime")),
    )
    pods = sort_pods(observed)
    if st.is_finished(draft.conditions):
        plan_finished(draft, pods)
    elif job.run_policy.suspend:
        _plan_suspended(draft, pods)
    else:
        _plan_active(draft, pods)
    _force_where_lost(draft, pods)
    return replace(draft.finish(), adopt=adopt)


def asks_namespace_first(decision: Plan) -> bool:
    """Whether the shell must ask if the namespace is being deleted before applying (rule 9)."""
    return decision.restart is not None and decision.restart.cause == reasons.POD_DELETED


def _force_where_lost(draft: Draft, pods: GangPods) -> None:
    """Pods going away on a lost node are deleted at once (rule 8); a timer until it counts.

    Every pod of the job this plan deletes, or that is terminating already (deleted by anyone).
    """
    observed = draft.observed
    deleting = set(draft.delete_pods)
    for pod in pods.owned:
        name = name_of(pod)
        if name not in deleting and not st.is_terminating(pod):
            continue
        node = node_of(pod)
        health = observed.nodes.get(node) if node is not None else None
        remaining = until_force_deletion(
            health, now=draft.now, lost_after=observed.node_lost_seconds
        )
        if remaining == 0:
            draft.force_delete(name)
        elif remaining is not None:
            draft.timer(remaining)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# ------------------------------------------------------------------ suspended jobs


def _plan_suspended(draft: Draft, pods: GangPods) -> None:
    job = draft.job
    _ensure_created(draft)
    for pod in pods.live:
        draft.delete_pod(name_of(pod))
    delete_services(draft)
    message = f"PyTorchJob {job.name} is suspended."
    if st.find_condition(draft.conditions, reasons.RUNNING) or st.find_condition(
        draft.conditions, reasons.RESTARTING
    ):
        draft.set_condition(reasons.RUNNING, st.FALSE, reasons.REASON_SUSPENDED, message)
    draft.conditions = st.remove_condition(draft.conditions, reasons.QUEUED)
    if draft.set_condition(reasons.SUSPENDED, st.TRUE, reasons.REASON_SUSPENDED, message):
        draft.transition("Normal", reasons.REASON_SUSPENDED, message)
    draft.replica_statuses = st.replica_statuses(job, [])


# ------------------------------------------------------------------ active jobs


def _ensure_created(draft: Draft) -> None:
    if st.find_condition(draft.conditions, reasons.CREATED) is None:
        message = f"PyTorchJob {draft.job.name} is created."
        draft.set_condition(reasons.CREATED, st.TRUE, reasons.REASON_CREATED, message)


def _resume_if_suspended(draft: Draft) -> None:
    if st.is_true(draft.conditions, reasons.SUSPENDED):
        message = f"PyTorchJob {draft.job.name} is resumed."
        draft.set_condition(reasons.SUSPENDED, st.FALSE, reasons.REASON_RESUMED, message)
        draft.transition("Normal", reasons.REASON_RESUMED, message)
        draft.start_time = None


def _believed_start(draft: Draft) -> str | None:
    """``startTime``, unless it is not a time or is later than now (a human edited the status).

    Such a value would hold off ``activeDeadlineSeconds`` for ever; the gang's pods say when the
    job started instead (``gang_started_at``), and the next status write puts that back.
    """
    started = moments.parse_time(draft.start_time)
    return draft.start_time if started is not None and started <= draft.now else None


def _deadline_passed(draft: Draft, pods: GangPods) -> bool:
    deadline = draft.job.run_policy.active_deadline_seconds
    started = moments.parse_time(draft.start_time)
    if deadline is None or started is None:
        return False
    remaining = st.seconds_left(started, deadline, now=draft.now)
    if remaining > 0:
        draft.timer(remaining)
        return False
    message = (
        f"Job {draft.job.name} has failed because it was active longer than specified deadline"
    )
    finish(draft, pods, reasons.FAILED, reasons.REASON_DEADLINE, message, "Warning")
    return True


def _plan_active(draft: Draft, pods: GangPods) -> None:
    _ensure_created(draft)
    _resume_if_suspended(draft)
    if not pods.expected:  # zero replicas: nothing to run, nothing will ever finish
        draft.replica_statuses = st.replica_statuses(draft.job, [])
        return
    draft.start_time = _believed_start(draft) or gang_started_at(pods)
    if _deadline_passed(draft, pods):
        return
    for name in pods.stale_live:
        draft.delete_pod(name)
    current = pods.current
    if _succeeded(draft.job, current):
        finish(
            draft,
            pods,
            reasons.SUCCEEDED,
            reasons.REASON_SUCCEEDED,
            _success_message(draft),
            "Normal",
        )
        return
    preemptor = draft.observed.preempted_by
    finding = find_disruption(draft, pods) if preemptor is None else NONE
    failed = [pod for pod in current.values() if st.phase_of(pod) == "Failed"]
    if preemptor is not None:
        plan_preempted(draft, pods, preemptor)
        if not pods.live:
            plan_admission(draft, pods)
    elif finding.disruption is not None:
        plan_disrupted(draft, pods, finding.disruption)
    elif failed:
        handle_failure(draft, pods, failed, awaiting=finding.awaiting)
    elif pods.current_live:
        plan_gang(draft, pods)
    else:
        plan_admission(draft, pods)
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

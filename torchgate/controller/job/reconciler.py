"""``reconcile(key)``: read the job and its pods from the caches, ``plan``, apply — nothing else.

This is the only place that sequences I/O for a job. The order of writes matters for crash safety:
the restart count and the new gang attempt are persisted before the gang is deleted (a crash in
between leaves pods of an old attempt, which the next plan deletes without counting twice);
Services before pods (so the master's name resolves when the pods start); status last (it
describes what was done). Pods on a lost node are deleted with no grace period (``plan`` rule
8). A restart reports every node it charges a fault (``Restart.node_faults``: the node whose cause
counts against it, and the others that took members with it) to the quarantine keeper once
applied, with the outage it came from (``disruption`` rule 9: a ``NoExecute`` taint without
``timeAdded`` is dated by the first look that saw it, remembered here while the node has it).

When the planned status is written is ``writes.StatusWritePolicy``'s decision: now, or after
some seconds (progress waits while gangs are being created; counts alone at most once a second). A
status put off is not kept: the job is looked at again after the delay and planned afresh from
the status written, so a plan never starts from a state the apiserver does not have. The Events
that announce the put-off status go with it (the next plan derives them again); Events of the
plan's actions are held once the plan is applied and recorded with the job's next status write,
so Events and status go out together. An Event tells what was done, once: a plan whose apply
fails before it wrote a pod or Service holds no Event (its retry plans the same actions, and
their Events, again; one that fails after holds them: its retry finishes them unsaid), the Events
held for earlier plans stay held until recorded, and a gang member the apiserver refused takes
the plan's ``GangAdmitted`` and its status with it (``gang.events_done``, ``written_status``:
the job is planned again at once from the status written, queued).

Where the cluster serves Kubernetes' gang objects and the flag allows them (``gang_objects``),
the job's Workload and its attempt's PodGroup are created before the attempt's pods, and each pod
names the PodGroup (``gangobjects``); the PodGroups of older attempts are deleted with them.
A Workload or PodGroup the apiserver refuses (403: no such PriorityClass, a ResourceQuota on
their count; 422: an admission policy) leaves the attempt without gang objects, said in a
Warning Event ``FailedCreate``, rather than failing every reconcile of a job admitted on nodes.

A job whose namespace is being deleted is left to the namespace controller (``plan`` rules 1 and
9): before a restart for a deleted member the namespace is asked with a dry-run create of the
restart's Event, and any create refused for that reason (403 ``NamespaceTerminating``) marks the
job so, instead of being retried with backoff until the job is gone.

An elastic Worker beyond ``minAvailable`` whose create the apiserver refuses (a ResourceQuota
of the namespace: 403 ``exceeded quota``; an admission policy) does not fail the reconcile: the
rest of the plan is applied, a Warning Event ``FailedCreate`` carries the apiserver's words,
the admitter drops its node from the reservation and backs its growth off (``waiting`` rule
8), and the job is planned again at once so its ``Running`` condition says why. A gang
member refused so ends the job's reservation at once and backs it off as a gang timeout does
(``waiting`` rule 3), its ``Queued`` condition giving the apiserver's words; a partial gang left
is deleted by the next plan (``GangIncomplete``). Retried at once, the same refusal would fail
every reconcile of the job, its status never written, while its reservation kept its nodes from
every other gang.

A job deleted and created again under its name (``kubectl delete`` then ``apply``) is a new job
(another uid), whether or not its predecessor's deletion was seen: a delete event missed across a
watch restart, or a delete and create between two looks at the name, leaves the cache showing
only the new job. So what is kept about a job is kept for the uid it was last reconciled with,
and a reconcile that finds another uid first forgets all of it (``_forget``, as when the job is
gone): its admission queue place and back-off (``waiting`` rules 3, 6 and 8), its reservation
or hold (``ledger`` rule 2), its deadline, priority and GPU sources (``ledger`` rule 5), its
status write timers, held Events, memoised demands, departed pods, Service name holders and
gang objects. The new job starts clean, as one of a name never seen.

Creates of deterministic names treat ``AlreadyExists`` as done and deletes treat ``NotFound`` as
done, so running a plan twice is harmless. Every object the apiserver returns is written through to
the cache at once, so the next reconcile does not act on state we already changed.

A Service's ``AlreadyExists`` is done only when the Service there is the job's. The Service cache
holds only the job's (label-selected), so a user's Service of a member's Service name (the name
``MASTER_ADDR`` resolves) is first seen as that answer: the Service is read then (GET) and, not
the job's, remembered as a name holder (``Observed.name_holders``: the plan's
``PodNameConflict``); the rest of the plan (its pods) is dropped and the job planned again at
once, knowing it. No event tells of such a Service's deletion, so each reconcile of the job reads
the Services it remembers again until they are gone (the plan asks for one every
``NAME_HOLDER_RECHECK_SECONDS``).

A job's orphans (its labels, no controller: ``adoption``) are adopted before anything else of
the plan is applied, since the rest counts them as the job's: the job is read past the cache
first (a job deleted or replaced meanwhile adopts nothing: its orphans would go with it), then
each orphan is patched with the job's controlling reference and its own uid as precondition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import Gauge

from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.nodes import PodDemand, job_demands
from torchgate.controller.admission.waiting import GangRequest, GrowthRequest, Waiting
from torchgate.controller.job import status as st
from torchgate.controller.job.adoption import adoption_patch
from torchgate.controller.job.disruption import (
    DEFAULT_FAILURE_WINDOW_SECONDS,
    DEFAULT_LOST_AFTER_SECONDS,
    NodeHealth,
    deleted_node,
    node_health,
    node_of,
    spell_of,
    taints_seen,
)
from torchgate.controller.job.finish import released_on_end
from torchgate.controller.job.gang import events_done, written_status
from torchgate.controller.job.gangobjects import (
    in_pod_group,
    joins_pod_group,
    pod_group_for,
    pod_group_name,
    refused_gang,
    stale_pod_groups_selector,
    workload_for,
)
from torchgate.controller.job.model import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_IMAGE_PULL_STUCK,
    Adoption,
    Event,
    Observed,
    Plan,
    attempt_of,
    controlled_by,
    current_attempt,
    expected_pods,
    name_of,
)
from torchgate.controller.job.plan import asks_namespace_first, plan
from torchgate.controller.job.pods import owner_reference, service_names
from torchgate.controller.job.writes import StatusWritePolicy, WriteFacts
from torchgate.controller.metrics import ControllerMetrics
from torchgate.controller.quarantine.rules import Fault, history_of, recorded_outages
from torchgate.kube.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeApi
from torchgate.kube.errors import (
    AlreadyExists,
    ApiError,
    Forbidden,
    Invalid,
    NamespaceTerminating,
    NotFound,
    ServerError,
)
from torchgate.kube.informer import Informer
from torchgate.kube.resources import EVENTS, POD_GROUPS, PODS, PYTORCHJOBS, SERVICES, WORKLOADS
from torchgate.pytorchjob import moments, names, reasons
from torchgate.pytorchjob.conditions import conditions_of
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources, pod_claims
from torchgate.pytorchjob.events import event_body, involved_object
from torchgate.pytorchjob.fieldpath import FieldError, required
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.policy import PlacementPolicy, QuarantineSettings, select_policy
from torchgate.pytorchjob.pool import gang_usage
from torchgate.pytorchjob.progress import progress_deadline
from torchgate.pytorchjob.spec import REPLICA_SPECS, JobSpec, managed_by, parse_job, pod_spec_of
from torchgate.pytorchjob.taints import Taint

log = logging.getLogger("torchgate.controller")


class ServiceNameTaken(Exception):
    """A Service not the job's holds one of its Services' names: plan again, knowing it."""


class AdoptionVoid(Exception):
    """An orphan to adopt is gone: plan again, without it."""


class AdopterGone(Exception):
    """The job is being deleted or replaced (another uid): its orphans are not adopted."""


@dataclass(frozen=True, slots=True)
class Options:
    """Controller behaviour chosen by flags."""

    manage_unowned: bool = False
    write_concurrency: int = 32
    finish_grace_seconds: float = 5.0
    node_lost_seconds: float = DEFAULT_LOST_AFTER_SECONDS
    failure_window_seconds: float = DEFAULT_FAILURE_WINDOW_SECONDS
    # Workload and PodGroups for each job where the cluster serves them (``gangobjects``).
    gang_objects: bool = True


class WriteSlots:
    """At most ``size`` writes of one kind at the apiserver at once, counted by state in a gauge.

    The gauge tells an operator (and the benchmark) whether the controller or the apiserver is the
    limit: writes *waiting* for a slot while every slot is *in flight* mean the controller has
    more to send than the apiserver takes. ``on_idle`` is called each time the last pending write
    ends (the status writes held while creates were pending go out then).
    """

    def __init__(
        self, size: int, gauge: Gauge, write: str, on_idle: Callable[[], None] = lambda: None
    ) -> None:
        self._semaphore = asyncio.Semaphore(size)
        self._waiting = gauge.labels(write, "waiting")
        self._in_flight = gauge.labels(write, "in_flight")
        self._on_idle = on_idle
        self.pending = 0  # waiting + in flight

    @contextlib.asynccontextmanager
    async def take(self) -> AsyncIterator[None]:
        """Hold a slot for one request; wait (counted as waiting) while none is free."""
        self.pending += 1
        try:
            self._waiting.inc()
            try:
                await self._semaphore.acquire()
            finally:
                self._waiting.dec()
            self._in_flight.inc()
            try:
                yield
            finally:
                self._in_flight.dec()
                self._semaphore.release()
        finally:
            self.pending -= 1
            if not self.pending:
                self._on_idle()


def is_ours(job: Mapping[str, Any], options: Options) -> bool:
    """Jobs whose ``runPolicy.managedBy`` names torchgate (or, by flag, names nobody)."""
    manager = managed_by(job)
    if manager == names.CONTROLLER_NAME:
        return True
    return options.manage_unowned and manager is None


def job_key_of_pod(pod: Mapping[str, Any]) -> JobKey | None:
    """The job a torchgate pod or Service belongs to, from its labels."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(names.LABEL_OPERATOR_NAME) != names.OPERATOR_NAME:
        return None
    job_name = labels.get(names.LABEL_JOB_NAME)
    if not isinstance(job_name, str):
        return None
    return (str(metadata.get("namespace") or ""), job_name)


class DemandMemo:
    """``job_demands`` computed once per job spec instead of on every reconcile.

    A waiting job is reconciled again and again (its own status writes, wait-reason refreshes,
    resyncs), and each time its gang's demands were rebuilt by parsing every template's resource
    quantities: 8 % of the controller's CPU while a wave of 1,000 jobs arrived. Each entry is kept
    with the exact content the demands derive from besides the job's name (uid, annotations for
    pinned hosts, spec), so an edited or recreated job is never planned with stale demands.
    """

    def __init__(self) -> None:
        self._entries: dict[JobKey, tuple[bytes, tuple[PodDemand, ...]]] = {}

    def function_for(
        self,
        key: JobKey,
        job_raw: Mapping[str, Any],
        gpus: GpuSources | None = None,
        claims: ClaimLookup = NO_CLAIMS,
    ) -> Callable[[JobSpec], tuple[PodDemand, ...]]:
        """A ``demands_of`` for ``plan``: this job's demands, reused while its spec is the same.

        The GPU sources and the claims the job's templates name are part of the marker: a
        template created after the job changes its demands.
        """

        def demands_of(spec: JobSpec) -> tuple[PodDemand, ...]:
            metadata = job_raw.get("metadata") or {}
            try:
                marker = orjson.dumps(
                    [
                        metadata.get("uid"),
                        metadata.get("annotations"),
                        job_raw.get("spec"),
                        _claims_marker(spec, gpus, claims),
                    ]
                )
            except TypeError:  # not plain JSON (only hand-built objects): do not memoise
                return job_demands(spec, gpus, claims)
            entry = self._entries.get(key)
            if entry is not None and entry[0] == marker:
                return entry[1]
            demands = job_demands(spec, gpus, claims)
            self._entries[key] = (marker, demands)
            return demands

        return demands_of

    def forget(self, key: JobKey) -> None:
        """The job is gone, finished or not ours."""
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def _claims_marker(spec: JobSpec, gpus: GpuSources | None, claims: ClaimLookup) -> object:
    """What a job's demands read besides its spec: GPU sources and the claims its pods name."""
    if gpus is None or not gpus.counts_claims:
        return None
    named = sorted(
        {
            target
            for r in spec.replica_specs
            for target in pod_claims(pod_spec_of(r.template)).values()
        }
    )
    return [
        sorted(gpus.device_classes),
        sorted(gpus.resources),
        [[kind, name, claims.spec(kind, name)] for kind, name in named],
    ]


class Reconciler:
    """Reads caches, plans, applies."""

    def __init__(
        self,
        api: KubeApi,
        *,
        jobs: Informer,
        pods: Informer,
        services: Informer,
        policies: Callable[[], Iterable[PlacementPolicy]],
        priority_of: Callable[[str | None], int],
        admitter: Admitter,
        preempts_of: Callable[[str | None], bool] = lambda _: True,
        topology_of: Callable[
            [Mapping[str, str], PlacementPolicy], tuple[str | None, bool]
        ] = lambda *_: (None, False),
        metrics: ControllerMetrics,
        options: Options,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        write_policy: StatusWritePolicy | None = None,
        nodes: Informer | None = None,
        claims_for: Callable[[str], ClaimLookup] = lambda _: NO_CLAIMS,
        node_faults: Callable[[Fault, QuarantineSettings], None] = lambda *_: None,
        gang_objects_served: Callable[[], bool] = lambda: False,
        requeue: Callable[[JobKey], None] = lambda _: None,
    ) -> None:
        self.api = api
        self.requeue = requeue  # looks at a job again soon (the manager's work queue)
        self.claims_for = claims_for  # what the controller sees of DRA in a namespace
        self.jobs = jobs
        self.pods = pods
        self.services = services
        self.nodes = nodes  # None: no node is judged (lost, tainted)
        self.node_faults = node_faults  # a restart's fault of its node, for quarantine
        # Node -> when this controller first saw each of its NoExecute taints without timeAdded
        # (``disruption`` rule 9: the outage such a taint names).
        self.taints_seen: dict[str, dict[Taint, datetime]] = {}
        self.policies = policies
        self.gang_objects_served = gang_objects_served
        # Job -> the uid it was last reconciled with: another one is a new job of the name.
        self.uids: dict[JobKey, str] = {}
        # Job -> (uid, attempt) whose Workload and PodGroup exist (created or found).
        self.gang_objects_made: dict[JobKey, tuple[str, int]] = {}
        self.priority_of = priority_of
        self.preempts_of = preempts_of
        self.topology_of = topology_of
        self.admitter = admitter
        self.metrics = metrics
        self.options = options
        self.clock = clock
        self.monotonic = monotonic
        self.write_policy = write_policy if write_policy is not None else StatusWritePolicy()
        # Job -> (uid, when its planned status first differed from the written one).
        self.unwritten_since: dict[JobKey, tuple[str, float]] = {}
        # Jobs whose status was put off while creates were pending: looked at again once none is.
        self.held_for_creates: set[JobKey] = set()
        self.written_at: dict[JobKey, float] = {}  # job -> when this process last wrote its status
        # Job -> (uid, Events of actions whose plan's status was put off): sent with the next write.
        self.unsent_events: dict[JobKey, tuple[str, tuple[Event, ...]]] = {}
        self.events = EventRecorder(api, clock=clock)
        self.demands = DemandMemo()
        # Job -> uid, for jobs whose namespace is being deleted (``plan`` rule 9).
        self.namespace_terminating: dict[JobKey, str] = {}
        # Job -> pod name -> the pod as last seen before it went away (``on_pod``).
        self.departed: dict[JobKey, dict[str, dict[str, Any]]] = {}
        # Job -> Service name -> a Service not the job's holding it, as last read (the module
        # docstring: found by a create's AlreadyExists, read again at every reconcile).
        self.service_holders: dict[JobKey, dict[str, dict[str, Any]]] = {}
        # Deletes (which free GPUs) never queue behind creates.
        self.creates = WriteSlots(
            options.write_concurrency, metrics.api_writes, "create", self._creates_done
        )
        self.deletes = WriteSlots(options.write_concurrency, metrics.api_writes, "delete")

    async def reconcile(self, key: JobKey) -> float | None:
        """Converge one job; return seconds until it must be looked at again (timers)."""
        namespace, name = key
        job = self.jobs.get(namespace, name)
        if job is None or not is_ours(job, self.options):
            self._forget(key)
            return None
        self._forget_earlier(key, job)
        spec, errors = parse_job(job)
        if spec is None:
            self.admitter.cancel(key)
            await self._fail_validation(job, errors)
            return None
        policy = select_policy(self.policies(), namespace)
        claims = self.claims_for(namespace)
        gpus = policy.gpus(claims)
        service_holders = await self._service_holders(key, spec)
        observed = self._observe(key, job, spec, policy, claims, gpus, service_holders)
        decision = plan(observed)
        if asks_namespace_first(decision) and await self._namespace_refuses(job, decision):
            self.namespace_terminating[key] = spec.uid
            observed = replace(observed, namespace_terminating=True)
            decision = plan(observed)
        earlier = self._events_held(key, spec.uid)
        applied, actions = self._schedule_status_write(key, spec.uid, job, decision)
        log.debug(
            "%s/%s: %d pods observed; plan: admit=%s create=%d delete=%d status=%s requeue=%s",
            namespace,
            name,
            len(observed.pods),
            decision.needs_admission,
            len(decision.create_pods),
            len(decision.delete_pods),
            applied.status is not None,
            applied.requeue_after,
        )
        try:
            refused, members_refused = await self._apply(
                job, spec, applied, earlier=earlier if actions is None else ()
            )
        except ServiceNameTaken:
            return 0.0  # the plan did not know the Service: planned again now, knowing it
        except AdoptionVoid:
            return 0.0  # planned again now without the orphan (forgotten by the cache)
        except AdopterGone:
            return None  # the job's own change (deleted, made again) reconciles it again
        except NamespaceTerminating:
            # No retry creates anything there; the namespace controller deletes the job.
            self.namespace_terminating[key] = spec.uid
            self.admitter.release(key)
            return None
        except ApiError:
            if actions and self._changed(key, observed):  # begun: the retry finishes it unsaid
                self.unsent_events[key] = (spec.uid, (*earlier, *actions))
            raise
        if actions is not None:  # the status is put off; the actions are done: hold their Events
            held = (*earlier, *events_done(actions, gang_refused=bool(members_refused)))
            if held:
                self.unsent_events[key] = (spec.uid, held)
        restart = applied.restart
        for fault in restart.node_faults() if restart is not None else ():
            charged = Fault(fault.node, fault.cause, observed.now, key, fault.outage)
            self.node_faults(charged, policy.quarantine)
        self._tell_admitter(key, job, spec, decision, policy, gpus, claims)
        if applied.extras:
            self.admitter.extras_created(key, refused=refused)
        if members_refused:
            told = next(iter(members_refused.values()))
            self.admitter.back_off(key, reason=f"the apiserver refused to create its pods: {told}")
        for message in (*members_refused.values(), *refused.values()):
            self.events.record(job, Event("Warning", reasons.FAILED_CREATE, message))
        released = released_on_end(job, applied, observed, self.clock())
        if released is not None:
            self.metrics.record_release(key, *released)
        if refused or members_refused:  # planned again now: its status says why
            return 0.0
        return applied.requeue_after

    def record_held_events(self) -> None:
        """Record the Events of actions still waiting for their job's status write (on stop).

        The statuses they wait for are planned again by the next leader, but the actions are
        done: a stopping leader sends their Events rather than take them along.
        """
        held, self.unsent_events = self.unsent_events, {}
        for (namespace, name), (uid, events) in held.items():
            job = self.jobs.get(namespace, name)
            if job is None or (job.get("metadata") or {}).get("uid") != uid:
                continue
            for event in events:
                self.events.record(job, event)

    def _forget_earlier(self, key: JobKey, job: Mapping[str, Any]) -> None:
        """Forget an earlier job of the name whose deletion was never seen (module docstring)."""
        uid = str((job.get("metadata") or {}).get("uid") or "")
        if self.uids.setdefault(key, uid) != uid:
            self._forget(key)
            self.uids[key] = uid

    def _forget(self, key: JobKey) -> None:
        """Drop what is kept about a job that is gone or no longer ours."""
        self.uids.pop(key, None)
        self.admitter.cancel(key)
        self.metrics.forget_job(key)
        self.unwritten_since.pop(key, None)
        self.held_for_creates.discard(key)
        self.written_at.pop(key, None)
        self.unsent_events.pop(key, None)
        self.demands.forget(key)
        self.departed.pop(key, None)
        self.service_holders.pop(key, None)
        self.gang_objects_made.pop(key, None)
        self.namespace_terminating.pop(key, None)

    def _observe(
        self,
        key: JobKey,
        job: dict[str, Any],
        spec: JobSpec,
        policy: PlacementPolicy,
        claims: ClaimLookup,
        gpus: GpuSources,
        service_holders: Sequence[dict[str, Any]] = (),
    ) -> Observed:
        """What ``plan`` reads: the job, its pods and Services, the admitter's word, the nodes.

        ``service_holders``: Services not the job's holding its Services' names
        (``_service_holders``).
        """
        pods = self.pods.indexed(key)
        departed = tuple(self.departed.get(key, {}).values())
        now = self.clock()
        return Observed(
            job_raw=job,
            job=spec,
            now=now,
            pods=pods,
            name_holders=(*self._name_holders(spec, pods), *service_holders),
            services=self.services.indexed(key),
            allow_clean_pod_policy_none=policy.allow_clean_pod_policy_none,
            reservation=self.admitter.reservation_for(key, spec.uid),
            wait_reason=self.admitter.wait_reason(key),
            wait_kind=self.admitter.wait_kind(key),
            growth_wait=self.admitter.growth_wait(key),
            growth_refusal=self.admitter.growth_refusal(key),
            preempted_by=_joined(self.admitter.preempted_by(key)),
            gpu_resource=policy.gpu_resource,
            gpu_sources=gpus,
            claims=claims,
            finish_grace_seconds=self.options.finish_grace_seconds,
            demands_of=self.demands.function_for(key, job, gpus, claims),
            departed=departed,
            nodes=self._nodes_under((*pods, *departed), now=now),
            node_lost_seconds=self.options.node_lost_seconds,
            failure_window_seconds=self.options.failure_window_seconds,
            stuck_pod_seconds=policy.quarantine.stuck_pod_seconds,
            progress_deadline_seconds=progress_deadline(
                spec.annotations, policy.progress_deadline_seconds
            ),
            namespace_terminating=self.namespace_terminating.get(key) == spec.uid,
        )

    def _name_holders(
        self, spec: JobSpec, pods: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, Any], ...]:
        """Pods without the job's labels holding a member's name (``Observed.name_holders``).

        The pod cache holds every pod of the cluster, so a user's pod named like a member is
        found before the create, whose ``AlreadyExists`` would otherwise count as done.
        """
        labelled = {name_of(pod) for pod in pods}
        holders = (
            self.pods.get(spec.namespace, name)
            for name in expected_pods(spec)
            if name not in labelled
        )
        return tuple(pod for pod in holders if pod is not None)

    async def _service_holders(self, key: JobKey, spec: JobSpec) -> tuple[dict[str, Any], ...]:
        """The Services remembered as holding the job's Services' names, read again (GET).

        A Service gone, or the job's now, or of a name the job no longer needs, is forgotten.
        """
        remembered = self.service_holders.get(key)
        if not remembered:
            return ()
        wanted = service_names(spec)
        holders: dict[str, dict[str, Any]] = {}
        for name in sorted(remembered):
            if name not in wanted:
                continue
            try:
                holder = await self._service_holder(spec, name)
            except NotFound:
                continue
            if holder is not None:
                holders[name] = holder
        if holders:
            self.service_holders[key] = holders
        else:
            del self.service_holders[key]
        return tuple(holders.values())

    def on_pod(self, kind: str, pod: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Pod informer handler: keep the last state of each of a job's pods that went away.

        A member that vanishes before its job is reconciled (evicted and confirmed within
        milliseconds, force-deleted) is still judged by where it was and what took it.
        """
        key = job_key_of_pod(pod)
        job = self.jobs.get(*key) if kind == "DELETED" and key is not None else None
        if job is None or key is None or st.is_finished(conditions_of(job.get("status"))):
            return
        attempt = current_attempt((job.get("metadata") or {}).get("annotations") or {})
        name = (pod.get("metadata") or {}).get("name")
        if isinstance(name, str) and attempt_of(pod) == attempt:  # else ours, torn down
            kept = self.departed.setdefault(key, {})
            for other in [n for n, p in kept.items() if attempt_of(p) != attempt]:
                del kept[other]
            kept[name] = pod

    def _nodes_under(
        self, pods: Iterable[Mapping[str, Any]], *, now: datetime
    ) -> dict[str, NodeHealth]:
        """The health of the nodes ``pods`` are (or were) on; a node not cached is deleted.

        A taint without ``timeAdded`` is dated by the first look that saw it (``taints_seen``),
        remembered while the node has it; at the first look at a node, by the outages it
        records (``disruption`` rule 9). An ``Unknown`` spell is dated by the recorded NotReady
        outage it continues, if any (``spell_of``).
        """
        if self.nodes is None:
            return {}
        health: dict[str, NodeHealth] = {}
        for pod in pods:
            name = node_of(pod)
            if name is None or name in health:
                continue
            raw = self.nodes.get("", name)
            if raw is None:
                self.taints_seen.pop(name, None)
                health[name] = deleted_node(name)
                continue
            known = self.taints_seen.get(name)
            recorded = () if known is not None else recorded_outages(raw)
            seen = taints_seen(node_health(raw), known, now=now, recorded=recorded)
            self.taints_seen[name] = {t.taint: t.seen for t in seen.no_execute if t.seen}
            if seen.heartbeat is not None:  # Unknown: read the node's record only then
                seen = spell_of(seen, history_of(raw).faults)
            health[name] = seen
        return health

    def _schedule_status_write(
        self, key: JobKey, uid: str, job: Mapping[str, Any], decision: Plan
    ) -> tuple[Plan, tuple[Event, ...] | None]:
        """The plan as applied now; if its status is put off, the Events of its actions.

        A put-off status is planned again later, and so are the Events announcing it; the Events
        of the plan's actions are held once the plan is applied (``reconcile``), and recorded
        with the job's next status write. Nothing is held here: a plan whose apply fails before
        writing anything holds nothing (its retry plans its actions again).
        """
        if decision.status is None:
            self.unwritten_since.pop(key, None)
            return decision, None
        now = self.monotonic()
        first = self.unwritten_since.get(key)
        since = first[1] if first is not None and first[0] == uid else now
        current = job.get("status")
        written = self.written_at.get(key)
        facts = WriteFacts(
            pending_seconds=now - since,
            since_last_write=None if written is None else now - written,
            creates_pending=self.creates.pending,
        )
        delay = self.write_policy.delay(
            current if isinstance(current, Mapping) else None, decision.status, facts
        )
        if delay <= 0:
            return decision, None
        self.unwritten_since[key] = (uid, since)
        if facts.creates_pending:
            self.held_for_creates.add(key)
        actions = tuple(e for e in decision.events if not e.announces_status)
        later = delay if decision.requeue_after is None else min(delay, decision.requeue_after)
        return replace(decision, status=None, events=(), requeue_after=later), actions

    def _changed(self, key: JobKey, observed: Observed) -> bool:
        """Whether an apply that failed wrote any of the job's pods or Services before it did."""
        return self.pods.indexed(key) != list(observed.pods) or self.services.indexed(key) != list(
            observed.services
        )

    def _events_held(self, key: JobKey, uid: str) -> tuple[Event, ...]:
        """The Events of actions done whose status write is still to come (of this job's uid)."""
        kept = self.unsent_events.get(key)
        return kept[1] if kept is not None and kept[0] == uid else ()

    def _creates_done(self) -> None:
        """No create is pending: the statuses held for them are planned (and written) now."""
        held, self.held_for_creates = self.held_for_creates, set()
        for key in held:
            self.requeue(key)

    def _tell_admitter(
        self,
        key: JobKey,
        job: Mapping[str, Any],
        spec: JobSpec,
        decision: Plan,
        policy: PlacementPolicy,
        gpus: GpuSources,
        claims: ClaimLookup,
    ) -> None:
        if decision.gang_timed_out:
            delay = self.admitter.back_off(key)
            log.warning(
                "%s/%s: gang not bound in time; retrying in %.0fs",
                *key,
                delay,
                extra={"job": "/".join(key)},
            )
        if decision.delete_pods or decision.restart is not None:
            self.admitter.release(key)
        elif decision.unreserve:
            self.admitter.unreserve(key, decision.unreserve)
        if decision.needs_admission:
            self.admitter.grow(key, None)  # the whole gang is placed again
            request = self._gang_request(job, spec, policy, gpus, claims, decision.demands)
            self.admitter.request(key, request)
        else:
            status = decision.status if decision.status is not None else job.get("status")
            if spec.run_policy.suspend or st.is_finished(conditions_of(status)):
                self.admitter.cancel(key)
                self.demands.forget(key)
                self.departed.pop(key, None)
            else:  # a running gang: what it counts for quota and preemption
                priority = self.priority_of(_priority_class(spec))
                ends_by = _ends_by(spec, status)
                self.admitter.note(key, priority=priority, gpus=gpus, ends_by=ends_by)
                growth = None
                if decision.growth:  # its Workers waiting for room (``ledger`` rule 7)
                    created = str((job.get("metadata") or {}).get("creationTimestamp") or "")
                    growth = GrowthRequest(spec.uid, decision.growth, priority, created, gpus)
                self.admitter.grow(key, growth)

    def _gang_request(
        self,
        job: Mapping[str, Any],
        spec: JobSpec,
        policy: PlacementPolicy,
        gpus: GpuSources,
        claims: ClaimLookup,
        demands: tuple[PodDemand, ...],
    ) -> GangRequest:
        """What a job's gang asks the admitter for: its pods, quota, priority and topology."""
        priority_class = _priority_class(spec)
        level, required = self.topology_of(spec.annotations, policy)
        return GangRequest(
            uid=spec.uid,
            demands=demands,
            min_count=spec.min_available,
            usage=gang_usage(spec, gpus, claims),
            priority=self.priority_of(priority_class),
            created=str((job.get("metadata") or {}).get("creationTimestamp") or ""),
            gpus=gpus,
            preempts=self.preempts_of(priority_class),
            topology_level=level,
            topology_required=required,
            run_limit=_run_limit(spec),
        )

    def candidate(self, job: Mapping[str, Any], *, since: float) -> Waiting | list[FieldError]:
        """A job that is not (yet) ours as the admitter would queue it, or why it cannot be.

        The same request its reconcile would ask with, so a forecast decides the gang the
        admitter will get; a job of no pods asks for none (``plan``), so it is no candidate.
        """
        spec, errors = parse_job(job)
        if spec is None:
            return errors
        if spec.total_replicas == 0:
            return [required(REPLICA_SPECS, "must have at least one replica: no pods to place")]
        policy = select_policy(self.policies(), spec.namespace)
        claims = self.claims_for(spec.namespace)
        gpus = policy.gpus(claims)
        demands = job_demands(spec, gpus, claims)
        request = self._gang_request(job, spec, policy, gpus, claims, demands)
        if not request.created:  # not stored yet: it would be the newest of its priority
            request = replace(request, created=moments.format_time(self.clock()))
        return Waiting(key=(spec.namespace, spec.name), request=request, since=since)

    # ------------------------------------------------------------------ applying a plan

    async def _apply(
        self,
        job: Mapping[str, Any],
        spec: JobSpec,
        decision: Plan,
        *,
        earlier: Sequence[Event] = (),
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Apply the plan; the pods whose create the apiserver refused, with its words.

        Elastic extras first, gang members second (``_refusals``). The plan's Events (those of
        what was done, ``events_done``) are recorded after its status, ``earlier`` (held for an
        earlier plan's status) first; the job holds none once they are recorded.
        """
        namespace, name = spec.namespace, spec.name
        annotations = {
            key: str(value)
            for key, value in (
                (names.ANNOTATION_RESTARTS, decision.restarts),
                (ANNOTATION_ATTEMPT, decision.attempt),
                (ANNOTATION_IMAGE_PULL_STUCK, decision.image_pull_stuck),
            )
            if value is not None
        }
        if annotations:
            patched = await self.api.request(
                "PATCH",
                PYTORCHJOBS.path(namespace, name),
                body={"metadata": {"annotations": annotations}},
                content_type=MERGE_PATCH,
            )
            self.jobs.remember(patched)
        if decision.adopt:
            await self._adopt(job, spec, decision.adopt)
        if decision.restart is not None:
            self.metrics.gang_restarts.labels(decision.restart.cause).inc()
        await self._gather(self._create_service(spec, s) for s in decision.create_services)
        create_pods: Sequence[dict[str, Any]] = decision.create_pods
        if create_pods and self.options.gang_objects and self.gang_objects_served():
            create_pods = await self._in_pod_groups(job, spec, create_pods)
        created = await asyncio.gather(
            *(self._create(PODS, namespace, p) for p in create_pods), return_exceptions=True
        )
        refused = _refusals(create_pods, created, extras=frozenset(decision.extras))
        await self._gather(
            [
                *(self._delete(PODS, self.pods, namespace, n) for n in decision.delete_pods),
                *(
                    self._delete(PODS, self.pods, namespace, n, force=True)
                    for n in decision.force_delete_pods
                ),
            ]
        )
        await self._gather(
            self._delete(SERVICES, self.services, namespace, n) for n in decision.delete_services
        )
        status = written_status(decision.status, gang_refused=bool(refused[1]))
        if status is not None:
            await self._patch_status(namespace, name, status)
        self.unsent_events.pop((namespace, name), None)  # recorded now, or held again
        for event in (*earlier, *events_done(decision.events, gang_refused=bool(refused[1]))):
            self.events.record(job, event)
        if decision.delete_job:
            try:
                await self.api.request(
                    "DELETE",
                    PYTORCHJOBS.path(namespace, name),
                    query={"propagationPolicy": "Background"},
                )
                log.info(
                    "%s/%s: deleted after ttlSecondsAfterFinished",
                    namespace,
                    name,
                    extra={"job": f"{namespace}/{name}"},
                )
            except NotFound:
                pass
        return refused

    async def _adopt(
        self, job: Mapping[str, Any], spec: JobSpec, adoptions: Sequence[Adoption]
    ) -> None:
        """Patch the job's controlling reference into its orphans (``adoption`` rule 4).

        The job is read first, past the cache, as Kubernetes' ``ControllerRefManager`` does
        (``RecheckDeletionTimestamp``): an orphan adopted by a job already deleted (or replaced
        by a new uid) would be garbage-collected with it. Each patch carries the orphan's uid:
        one made again under its name meanwhile is refused (409 Conflict), as is one another
        controller took meanwhile (422: one controlling reference only); such a refusal fails
        the reconcile (retried with backoff, from caches that then show the object as it is).

        Raises:
            AdopterGone: The job is gone, being deleted or another uid now.
            AdoptionVoid: An orphan is gone.
        """
        namespace = spec.namespace
        try:
            fresh = await self.api.request("GET", PYTORCHJOBS.path(namespace, spec.name))
        except NotFound:
            raise AdopterGone(spec.name) from None
        metadata = fresh.get("metadata") if isinstance(fresh, dict) else None
        if (
            not isinstance(metadata, dict)
            or metadata.get("uid") != spec.uid
            or metadata.get("deletionTimestamp")
        ):
            raise AdopterGone(spec.name)
        reference = owner_reference(job, spec)
        for adoption in adoptions:
            if adoption.kind == "Pod":
                await self._adopt_one(PODS, self.pods, spec, adoption, reference)
            else:
                await self._adopt_one(SERVICES, self.services, spec, adoption, reference)

    async def _adopt_one(
        self,
        resource: Any,
        cache: Informer,
        spec: JobSpec,
        adoption: Adoption,
        reference: Mapping[str, Any],
    ) -> None:
        """One orphan's adoption patch; the object patched goes to the cache at once."""
        try:
            adopted = await self.api.request(
                "PATCH",
                resource.path(spec.namespace, adoption.name),
                body=adoption_patch(adoption, reference),
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            cache.forget(spec.namespace, adoption.name)
            raise AdoptionVoid(adoption.name) from None
        cache.remember(adopted)
        log.info(
            "%s/%s: adopted orphaned %s %s",
            spec.namespace,
            spec.name,
            adoption.kind,
            adoption.name,
            extra={"job": f"{spec.namespace}/{spec.name}"},
        )

    async def _namespace_refuses(self, job: Mapping[str, Any], decision: Plan) -> bool:
        """Whether the job's namespace is being deleted (``plan`` rule 9), asked of the apiserver.

        A dry-run create (``dryRun=All``: admitted and validated, never stored) of an Event about
        the restart, which the controller may create anyway: refused with 403 cause
        ``NamespaceTerminating`` once the namespace is being deleted.
        """
        cause = decision.restart.cause if decision.restart is not None else ""
        body = self.events.body_for(job, Event("Warning", cause, "restart (dry run)"))
        try:
            await self.api.request(
                "POST",
                EVENTS.path(body["metadata"]["namespace"]),
                query={"dryRun": "All"},
                body=body,
            )
        except NamespaceTerminating:
            return True
        except ServerError:
            raise  # no answer: ask again with backoff, before anything is written
        except ApiError:
            return False  # any other refusal of the dry run is no news of the namespace
        return False

    async def _in_pod_groups(
        self, job: Mapping[str, Any], spec: JobSpec, pods: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """``pods``, each naming its attempt's PodGroup, once the Workload and PodGroup exist.

        The first time a job's attempt creates pods, the Workload and the PodGroup are created
        (existing ones are kept: they are immutable where it matters) and the PodGroups of older
        attempts deleted, so kube-scheduler never counts a torn-down gang towards the new one.
        An attempt whose pods so far name no PodGroup gets none (``gangobjects`` rule 5), nor
        does one whose Workload or PodGroup the apiserver refuses (rule 6: a Warning Event
        ``FailedCreate`` with its words, and the pods are created without).
        """
        key = (spec.namespace, spec.name)
        # The attempt the plan built the pods for (a restart moves the job's annotation with them).
        attempt = attempt_of(pods[0]) or current_attempt(spec.annotations)
        group = pod_group_name(spec, attempt)
        members = (pod for pod in self.pods.indexed(key) if attempt_of(pod) == attempt)
        if not joins_pod_group(group, members):
            return list(pods)
        if self.gang_objects_made.get(key) != (spec.uid, attempt):
            priority_class = _priority_class(spec)
            try:
                await self._create_object(
                    WORKLOADS, workload_for(job, spec, priority_class=priority_class)
                )
                await self._create_object(
                    POD_GROUPS, pod_group_for(job, spec, attempt, priority_class=priority_class)
                )
            except (Forbidden, Invalid) as refused:
                if isinstance(refused, NamespaceTerminating):
                    raise
                self.events.record(
                    job, Event("Warning", reasons.FAILED_CREATE, refused_gang(refused.message))
                )
                return list(pods)
            if attempt > 1:
                with contextlib.suppress(NotFound):
                    await self.api.request(
                        "DELETE",
                        POD_GROUPS.path(spec.namespace),
                        query={"labelSelector": stale_pod_groups_selector(spec, attempt)},
                    )
            self.gang_objects_made[key] = (spec.uid, attempt)
        return [in_pod_group(pod, group) for pod in pods]

    async def _create_object(self, resource: Any, body: dict[str, Any]) -> None:
        """Create an object no cache keeps; one that exists already is taken as it is."""
        async with self.creates.take():
            with contextlib.suppress(AlreadyExists):
                await self.api.request(
                    "POST", resource.path(body["metadata"]["namespace"]), body=body
                )

    async def _gather(self, calls: Iterable[Awaitable[None]]) -> None:
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _create(self, resource: Any, namespace: str, body: dict[str, Any]) -> bool:
        """Create one object; ``False`` when its name is taken (``AlreadyExists``)."""
        async with self.creates.take():
            try:
                created = await self.api.request("POST", resource.path(namespace), body=body)
            except AlreadyExists:
                return False
        cache = self.pods if resource is PODS else self.services
        cache.remember(created)
        if resource is PODS:
            self.metrics.pods_created.inc()
        return True

    async def _create_service(self, spec: JobSpec, body: dict[str, Any]) -> None:
        """Create one of the job's Services; one of its name not the job's stops the apply.

        Raises:
            ServiceNameTaken: The name is held by a Service the job does not control (now
                remembered in ``service_holders``), or was until the GET found it gone.
        """
        if await self._create(SERVICES, spec.namespace, body):
            return
        name = name_of(body)
        try:
            holder = await self._service_holder(spec, name)
        except NotFound:
            raise ServiceNameTaken(name) from None  # deleted since: planned again, created then
        if holder is None:
            return  # the job's own, not in the cache yet
        self.service_holders.setdefault((spec.namespace, spec.name), {})[name] = holder
        raise ServiceNameTaken(name)

    async def _service_holder(self, spec: JobSpec, name: str) -> dict[str, Any] | None:
        """The Service ``name`` as read now (GET) if the job does not control it, else ``None``.

        Raises:
            NotFound: No Service has that name.
        """
        found = await self.api.request("GET", SERVICES.path(spec.namespace, name))
        if not isinstance(found, dict) or controlled_by(found, spec.uid):
            return None
        return {**found, "kind": "Service"}  # ``holds_service_name``

    async def _delete(
        self, resource: Any, cache: Informer, namespace: str, name: str, *, force: bool = False
    ) -> None:
        """Delete one object; ``force``: with no grace period (a pod on a lost node)."""
        query = {"gracePeriodSeconds": "0"} if force else None
        async with self.deletes.take():
            try:
                deleted = await self.api.request(
                    "DELETE", resource.path(namespace, name), query=query
                )
            except NotFound:
                cache.forget(namespace, name)
                return
        if isinstance(deleted, Mapping) and (deleted.get("metadata") or {}).get(
            "deletionTimestamp"
        ):
            cache.remember(dict(deleted))
        else:
            cache.forget(namespace, name)
        if resource is PODS:
            self.metrics.pods_deleted.inc()

    async def _patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            patched = await self.api.request(
                "PATCH",
                PYTORCHJOBS.path(namespace, name, "status"),
                body={"status": status},
                content_type=MERGE_PATCH,
            )
        except NotFound:
            return
        self.unwritten_since.pop((namespace, name), None)
        self.written_at[(namespace, name)] = self.monotonic()
        self.jobs.remember(patched)

    async def _fail_validation(self, job: Mapping[str, Any], errors: list[Any]) -> None:
        """A job the webhook never saw and that cannot run: say so once, then leave it."""
        conditions = conditions_of(job.get("status"))
        if st.is_true(conditions, reasons.FAILED):
            return
        message = "PyTorchJob failed validation: " + "; ".join(str(e) for e in errors)
        now = self.clock()
        updated = st.set_condition(
            conditions, reasons.FAILED, st.TRUE, reasons.REASON_FAILED_VALIDATION, message, now
        )
        metadata = job.get("metadata") or {}
        await self._patch_status(
            str(metadata.get("namespace")),
            str(metadata.get("name")),
            {"conditions": updated, "completionTime": moments.format_time(now)},
        )
        self.events.record(job, Event("Warning", reasons.REASON_FAILED_VALIDATION, message))


class EventRecorder:
    """core/v1 Events on jobs (and on Nodes, for quarantine), sent in the background, best effort.

    Like client-go's event broadcaster: recording never blocks a reconcile, a few senders share
    the apiserver with the writes that matter, and when thousands of jobs change at once the
    backlog is bounded; what does not fit is dropped (the condition in the job's status carries
    the same news). When an Event is recorded is the reconciler's business (with its action, or
    with the status it announces); each Event is also a log line with the job key.

    Stopping the senders does not stop a send in flight, and ``flush`` sends the backlog left
    (a leader that stops during a wave holds hundreds); only a killed process loses it.
    """

    def __init__(
        self,
        api: KubeApi,
        *,
        clock: Callable[[], datetime],
        senders: int = 4,
        backlog: int = 10_000,
    ) -> None:
        self.api = api
        self.clock = clock
        self.senders = senders
        self._pending: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=backlog)
        self._in_flight: set[asyncio.Task[None]] = set()
        self.dropped = 0

    def record(self, job: Mapping[str, Any], event: Event) -> None:
        """Log the event and queue it for the apiserver."""
        body = self.body_for(job, event)
        self._log(f"{body['metadata']['namespace']}/{body['involvedObject']['name']}", event)
        self._put(body)

    def body_for(self, job: Mapping[str, Any], event: Event) -> dict[str, Any]:
        """The core/v1 Event about a job, as it is created."""
        metadata = job.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        involved = involved_object(
            names.API_VERSION, names.KIND, metadata.get("name"), metadata, namespace=namespace
        )
        return self._body(namespace, involved, event)

    def record_on_node(self, node: Mapping[str, Any], event: Event) -> None:
        """An Event about a Node (in ``default``, where Kubernetes puts node Events)."""
        metadata = node.get("metadata") or {}
        involved = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": metadata.get("name"),
            "uid": metadata.get("uid"),
        }
        self._log(f"node/{metadata.get('name')}", event)
        self._put(self._body("default", involved, event))

    def _log(self, subject: str, event: Event) -> None:
        level = logging.WARNING if event.type == "Warning" else logging.INFO
        log.log(
            level,
            "%s: %s: %s",
            subject,
            event.reason,
            event.message,
            extra={"job": subject, "reason": event.reason},
        )

    def _body(self, namespace: str, involved: Mapping[str, Any], event: Event) -> dict[str, Any]:
        return event_body(
            namespace,
            involved,
            type=event.type,
            reason=event.reason,
            message=event.message,
            component="torchgate-controller",
            now=moments.format_time(self.clock()),
            name=f"{involved.get('name')}.{secrets.token_hex(8)}",
            reporting=names.CONTROLLER_NAME,
        )

    def _put(self, body: dict[str, Any]) -> None:
        try:
            self._pending.put_nowait(body)
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self) -> None:
        """Send queued Events until cancelled."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self.senders):
                group.create_task(self._send())

    async def flush(self, seconds: float) -> None:
        """Send what is queued or in flight, for at most ``seconds``; the rest is dropped."""
        try:
            async with asyncio.timeout(seconds), asyncio.TaskGroup() as group:
                for _ in range(self.senders):
                    group.create_task(self._send(until_empty=True))
                group.create_task(self._landed())
        except TimeoutError:
            left = self._pending.qsize() + len(self._in_flight)
            self.dropped += left
            log.warning("stopped with %d Events not sent", left)

    async def _landed(self) -> None:
        """Wait for the sends in flight."""
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))

    async def _send(self, *, until_empty: bool = False) -> None:
        while not (until_empty and self._pending.empty()):
            body = await self._pending.get()
            sending = asyncio.create_task(self._post(body))
            self._in_flight.add(sending)
            sending.add_done_callback(self._in_flight.discard)
            await asyncio.shield(sending)  # a stopping sender leaves it to finish (``flush``)

    async def _post(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        try:
            await self.api.request("POST", EVENTS.path(namespace), body=body)
        except ApiError as exc:
            log.debug("could not record event %s: %s", body["reason"], exc)


def _refusals(
    pods: Sequence[Mapping[str, Any]],
    results: Sequence[BaseException | bool],
    *,
    extras: frozenset[str],
) -> tuple[dict[str, str], dict[str, str]]:
    """The pods whose create the apiserver refused, with its words: ``extras``, then members.

    A refusal (403: a ResourceQuota of the namespace says ``exceeded quota``, or an admission
    policy; 422: an admission webhook) is an answer, not a failure to retry at once. Any other
    failure, and a refusal in a namespace being deleted, is raised.
    """
    refused: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for pod, result in zip(pods, results, strict=True):
        name = str(pod["metadata"]["name"])
        if isinstance(result, Forbidden | Invalid) and not isinstance(result, NamespaceTerminating):
            refused[0 if name in extras else 1][name] = result.message
        elif isinstance(result, BaseException):
            raise result
    return refused


def _joined(key: JobKey | None) -> str | None:
    return None if key is None else "/".join(key)


def _priority_class(spec: JobSpec) -> str | None:
    if spec.run_policy.priority_class:
        return spec.run_policy.priority_class
    for replica in spec.replica_specs:
        value = pod_spec_of(replica.template).get("priorityClassName")
        if isinstance(value, str) and value:
            return value
    return None


def _run_limit(spec: JobSpec) -> float | None:
    """Seconds the job may run once started (``runPolicy.activeDeadlineSeconds``), if set."""
    deadline = spec.run_policy.active_deadline_seconds
    return float(deadline) if deadline is not None else None


def _ends_by(spec: JobSpec, status: Mapping[str, Any] | None) -> float | None:
    """When a started job has ended at the latest: its ``startTime`` plus its deadline (plan)."""
    limit = _run_limit(spec)
    started = moments.parse_time((status or {}).get("startTime"))
    return started.timestamp() + limit if limit is not None and started is not None else None

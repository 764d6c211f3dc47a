"""The gang admitter: which waiting job gets the free GPUs next, decided in one place.

Reconcilers run concurrently, but capacity is global: two jobs each placed against the same free
GPUs would both be created and both wait forever (the partial-gang deadlock TO#1264 describes). So
a job that needs pods only *asks* here; one admission cycle at a time gathers the facts (free
capacity per node, the gangs holding capacity, team quotas, the policies' preemption and topology
settings) and runs ``sharing.decide``, which admits, preempts or keeps waiting every gang, whole
gangs only. The admitter applies what it returns:

- ``Admit``: the gang's nodes are *reserved* until its pods show up in the pod cache; the job's
  own reconcile creates the pods from the reservation (pods in rank order on the nodes chosen in
  topology order, so consecutive ranks share a domain).
- ``Preempt``: the preemptor's nodes are *held* (nothing else is placed on them) while the
  victims' pods terminate; each victim is marked as preempted (``preempted_by``), which its own
  reconcile turns into the deletion of all its pods, a ``Preempted`` condition and Event; once no
  pod of any victim is left, the hold becomes a reservation.
- ``Wait``: the reason (``Quota``, ``Capacity`` or ``Topology``) and its message are reported,
  throttled, for the job's ``Queued`` condition. A capacity message is ``place_gang``'s shortfall
  (it names the resource and the node filter that is short).

Capacity is a ledger kept from the cluster-wide pod and node caches (allocatable minus the requests
of every non-terminated pod on its node, or on its planned node before binding), updated per event
rather than recomputed per cycle. The ledger also groups torchgate's pods by job, which gives the
running gangs that quota counts and preemption may choose from: their priority as the job's
reconcile reports it (``request``, ``note``), their start when this process admitted them (after
a controller restart: the first pod's creation; until a job is reconciled, its pods'
``spec.priority``). Gangs whose pods are being created
(reservations, holds) count against quota but are never victims.

Backfill: a job that does not fit does not block smaller jobs behind it, unless it has waited longer
than ``starvation_seconds`` for capacity or topology; from then on nothing behind it is admitted
until it is, so a stream of small jobs cannot starve a large one. A gang that timed out waits out
an exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from torchgate.controller import pooling
from torchgate.controller.eligibility import (
    NodeView,
    PodDemand,
    Resources,
    Signature,
    eligible_nodes,
    node_view,
)
from torchgate.controller.ledger import JobKey as JobKey
from torchgate.controller.ledger import Ledger, PodKey, add, fits
from torchgate.controller.placement import Placement, place_gang
from torchgate.controller.quota import Admitted
from torchgate.controller.sharing import Admit, Outcome, Pool, Preempt, Wait, WaitingGang, decide
from torchgate.controller.topology import Topology, build_topology, shape_of
from torchgate.pytorchjob import names
from torchgate.pytorchjob.pool import PoolSettings, TeamQuota

log = logging.getLogger("torchgate.controller.admitter")

KIND_PREEMPTING: Final = "Preempting"


@dataclass(slots=True)
class Waiting:
    """A job whose gang is not placed yet."""

    key: JobKey
    uid: str
    demands: tuple[PodDemand, ...]
    min_count: int
    priority: int
    created: str
    gpu_resource: str
    since: float
    preempts: bool = True
    topology_level: str | None = None
    topology_required: bool = False
    not_before: float = 0.0
    reported_reason: str | None = None
    reported_kind: str | None = None
    reported_at: float | None = None
    units: tuple[dict[str, dict[str, int]], dict[str, int]] | None = None

    def order(self) -> tuple[int, str, str, str]:
        """Admission order: higher priority first, then older, then by name."""
        return (-self.priority, self.created, self.key[0], self.key[1])

    def required(self) -> tuple[PodDemand, ...]:
        """The pods that must be placed together (the gang's ``minAvailable``)."""
        return self.demands[: max(0, min(self.min_count, len(self.demands)))]

    def requests_and_usage(self) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
        """Required pods' requests and the gang's quota usage in milli-units (computed once)."""
        if self.units is None:
            required = self.required()
            self.units = (
                {d.pod_name: pooling.to_units(d.requests) for d in required},
                pooling.quota_usage((d.requests for d in required), self.gpu_resource),
            )
        return self.units


@dataclass(slots=True)
class Reservation:
    """Capacity promised to a job whose pods are being created."""

    uid: str
    nodes: Mapping[str, str]  # pod name -> node
    requests: Mapping[str, Resources]  # pod name -> what it takes
    since: float
    waited: float


@dataclass(slots=True)
class Hold:
    """Capacity kept for a preemptor while its victims' pods terminate."""

    reservation: Reservation
    victims: tuple[JobKey, ...]
    victim_pods: frozenset[PodKey]


class Admitter:
    """Waiting jobs, reservations, holds, and the admission cycle."""

    def __init__(
        self,
        *,
        on_admit_job: Callable[[JobKey], None],
        on_reason: Callable[[JobKey], None],
        on_admit: Callable[[float], None] = lambda waited: None,
        teams: Callable[[], Mapping[str, TeamQuota]] = dict,
        pool_settings: Callable[[], Sequence[PoolSettings]] = tuple,
        starvation_seconds: float = 300.0,
        backoff_base: float = 10.0,
        backoff_max: float = 600.0,
        reason_refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.on_admit_job = on_admit_job
        self.on_reason = on_reason
        self.on_admit = on_admit
        self.teams = teams
        self.pool_settings = pool_settings
        self.starvation_seconds = starvation_seconds
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.reason_refresh_seconds = reason_refresh_seconds
        self.clock = clock
        self.wall_clock = wall_clock
        self.nodes: dict[str, NodeView] = {}
        self.ledger = Ledger()
        self.waiting: dict[JobKey, Waiting] = {}
        self.reservations: dict[JobKey, Reservation] = {}
        self.holds: dict[JobKey, Hold] = {}
        self.evicting: dict[JobKey, JobKey] = {}  # victim -> its preemptor
        self.gpu_resources: dict[JobKey, str] = {}
        self.priorities: dict[JobKey, int] = {}  # as asked, for the gang once it runs
        # When this process admitted the job (wall clock; pods' creation seconds after a restart).
        self.admitted_at: dict[JobKey, float] = {}
        self.timeouts: dict[JobKey, int] = {}
        self.team_status: dict[str, dict[str, int]] = {}
        self._retry_at: dict[JobKey, float] = {}
        self._topology: tuple[tuple[str, ...], Topology] | None = None
        self._wake = asyncio.Event()
        self.cycles = 0

    # ------------------------------------------------------------------ cluster events

    def on_node(self, kind: str, node: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Node informer handler."""
        name = str((node.get("metadata") or {}).get("name") or "")
        if kind == "DELETED":
            self.nodes.pop(name, None)
        else:
            view = node_view(node)
            if view is None:
                return
            if self.nodes.get(name) == view:
                return
            self.nodes[name] = view
        self._topology = None
        self.wake()

    def on_pod(self, kind: str, pod: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Pod informer handler (every pod of the cluster: they all use capacity).

        Only freed capacity wakes a cycle: while a wave of gangs is created, thousands of new pods
        would otherwise each start a cycle that can admit nothing.
        """
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if self.ledger.update(key, None if kind == "DELETED" else pod):
            self.wake()

    # ------------------------------------------------------------------ requests from reconcilers

    def request(
        self,
        key: JobKey,
        *,
        uid: str,
        demands: Sequence[PodDemand],
        min_count: int,
        priority: int,
        created: str,
        gpu_resource: str,
        preempts: bool = True,
        topology_level: str | None = None,
        topology_required: bool = False,
    ) -> None:
        """A job needs its gang placed (idempotent; keeps its place in the queue)."""
        if key in self.reservations and self.reservations[key].uid == uid:
            log.debug("%s/%s: admission asked while capacity is reserved", *key)
            return
        if key in self.holds and self.holds[key].reservation.uid == uid:
            return
        self.evicting.pop(key, None)  # a preempted gang whose pods are gone queues again
        self.gpu_resources[key] = gpu_resource
        self.priorities[key] = priority
        current = self.waiting.get(key)
        if current is not None and current.uid == uid:
            current.demands = tuple(demands)
            current.min_count = min_count
            current.priority = priority
            current.preempts = preempts
            current.topology_level = topology_level
            current.topology_required = topology_required
            current.units = None
            return
        self.waiting[key] = Waiting(
            key=key,
            uid=uid,
            demands=tuple(demands),
            min_count=min_count,
            priority=priority,
            created=created,
            gpu_resource=gpu_resource,
            since=self.clock(),
            preempts=preempts,
            topology_level=topology_level,
            topology_required=topology_required,
            not_before=self._retry_at.pop(key, 0.0),
        )
        self.wake()

    def note(self, key: JobKey, *, priority: int, gpu_resource: str) -> None:
        """What a running job counts as (its pods may carry no or an older priority)."""
        self.priorities[key] = priority
        self.gpu_resources[key] = gpu_resource

    def reservation_for(self, key: JobKey, uid: str) -> Mapping[str, str] | None:
        """Where the job's pods go, when capacity is reserved for it."""
        reservation = self.reservations.get(key)
        return reservation.nodes if reservation is not None and reservation.uid == uid else None

    def wait_reason(self, key: JobKey) -> str | None:
        """Why the job waits, as last reported (the newest reason, at most every refresh).

        Planning writes this into the job's status, so it must be the throttled message, not the
        newest one: the job's own status writes wake its reconcile, and every waiting job would
        otherwise rewrite its status each time the free count changes.
        """
        hold = self.holds.get(key)
        if hold is not None:
            victims = ", ".join("/".join(victim) for victim in hold.victims)
            return f"preempting {victims}: waiting for their pods to terminate"
        waiting = self.waiting.get(key)
        return waiting.reported_reason if waiting is not None else None

    def wait_kind(self, key: JobKey) -> str | None:
        """What the job waits for: ``Quota``, ``Capacity``, ``Topology`` or ``Preempting``."""
        if key in self.holds:
            return KIND_PREEMPTING
        waiting = self.waiting.get(key)
        return waiting.reported_kind if waiting is not None else None

    def preempted_by(self, key: JobKey) -> JobKey | None:
        """The preemptor when the job's gang was chosen as a victim and is being evicted."""
        return self.evicting.get(key)

    def release(self, key: JobKey) -> None:
        """Drop the job's reservation: its pods were deleted, so it no longer describes them."""
        self.reservations.pop(key, None)

    def cancel(self, key: JobKey) -> None:
        """The job is gone, finished, suspended or not ours: forget it."""
        changed = self.waiting.pop(key, None) is not None
        changed |= self.reservations.pop(key, None) is not None
        changed |= self.holds.pop(key, None) is not None
        if key not in self.ledger.gangs:  # a victim stays one while its pods hold their nodes
            self.evicting.pop(key, None)
        self.gpu_resources.pop(key, None)
        self.priorities.pop(key, None)
        self.admitted_at.pop(key, None)
        self.timeouts.pop(key, None)
        self._retry_at.pop(key, None)
        if changed:
            self.wake()

    def back_off(self, key: JobKey) -> float:
        """The job's gang was torn down after a timeout: make it wait before trying again."""
        self.reservations.pop(key, None)
        count = self.timeouts.get(key, 0) + 1
        self.timeouts[key] = count
        delay = float(min(self.backoff_base * 2.0 ** (count - 1), self.backoff_max))
        waiting = self.waiting.get(key)
        if waiting is not None:
            waiting.not_before = self.clock() + delay
        else:
            self._retry_at[key] = self.clock() + delay
        return delay

    # ------------------------------------------------------------------ the cycle

    def wake(self) -> None:
        """Ask for an admission cycle soon."""
        self._wake.set()

    async def run(self, *, debounce: float = 0.02, period: float = 5.0) -> None:
        """Run admission cycles whenever woken (and every ``period`` seconds)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=period)
            await asyncio.sleep(debounce)
            self._wake.clear()
            try:
                self.cycle()
            except Exception:
                log.exception("admission cycle failed")

    def free(self) -> dict[str, dict[str, Decimal]]:
        """Free capacity per node: allocatable - live pods - reservations not yet observed - holds.

        A reserved pod counts through its reservation until the ledger (fed by pod *events*) has
        it; only then is the reservation dropped. Releasing it when the pod merely exists in a
        cache written through by the reconciler would leave a moment when neither counts it, and
        the next gang would be placed on GPUs kube-scheduler knows are taken. A hold counts in
        full (on top of the victims' pods still there), so nothing else takes its nodes.
        """
        free: dict[str, dict[str, Decimal]] = {}
        for name, view in self.nodes.items():
            left = dict(view.allocatable)
            add(left, self.ledger.used.get(name, {}), -1)
            free[name] = left
        settled: list[JobKey] = []
        for key, reservation in self.reservations.items():
            unseen = 0
            for pod, node_name in reservation.nodes.items():
                if (key[0], pod) in self.ledger.pods:
                    continue
                unseen += 1
                if node_name in free:
                    add(free[node_name], reservation.requests[pod], -1)
            if not unseen:
                settled.append(key)
        for key in settled:
            del self.reservations[key]
        for hold in self.holds.values():
            for pod, node_name in hold.reservation.nodes.items():
                if node_name in free:
                    add(free[node_name], hold.reservation.requests[pod], -1)
        return free

    def cycle(self) -> list[JobKey]:
        """Decide every waiting gang once; return the jobs admitted (reservations made)."""
        self.cycles += 1
        now = self.clock()
        admitted = self._release_holds(now)
        teams = self.teams()
        if not self.waiting:
            if teams:  # what ``kubectl get teamquotas`` shows stays current
                owner = _namespace_owners(teams)
                running = self._holding(owner, self.wall_clock())
                self.team_status = pooling.team_statuses(teams, running, ())
            return admitted
        free = self.free()
        settings = self.pool_settings()
        levels = pooling.topology_levels(s.topology.levels for s in settings)
        owner = _namespace_owners(teams)
        wall = self.wall_clock()
        ready = [w for w in sorted(self.waiting.values(), key=Waiting.order) if w.not_before <= now]
        eligibility: MutableMapping[Signature, tuple[str, ...]] = {}
        allowed_nodes: dict[frozenset[Signature], frozenset[str]] = {}
        gangs = [self._gang(w, owner, levels, eligibility, allowed_nodes) for w in ready]
        running = self._holding(owner, wall)
        pool = Pool(
            topology=self._topology_for(levels),
            free={name: pooling.to_units(left, capacity=True) for name, left in free.items()},
            teams=teams,
            admitted=running,
            preemption=pooling.protection(s.preemption for s in settings),
        )
        outcomes = {o.key: o for o in decide(pool, gangs, wall)}
        starving = self._starving(ready, outcomes, now)
        if starving is not None:  # nothing behind a starving job jumps the queue
            ready = ready[: starving + 1]
            outcomes = {o.key: o for o in decide(pool, gangs[: starving + 1], wall)}
        self.team_status = pooling.team_statuses(
            teams, running, (owner.get(key[0]) for key in self.waiting)
        )
        misses: dict[object, str] = {}
        views = list(self.nodes.values())
        for waiting in ready:
            outcome = outcomes[waiting.key]
            if isinstance(outcome, Admit):
                self._admit(waiting, outcome.nodes, free, eligibility, now)
                admitted.append(waiting.key)
            elif isinstance(outcome, Preempt):
                self._preempt(waiting, outcome, now)
            else:
                message = outcome.message
                if outcome.kind == "Capacity":
                    message = self._shortfall(waiting, views, free, eligibility, misses) or message
                self._still_waiting(waiting, outcome.kind, message, now)
        return admitted

    def _starving(
        self, ready: Sequence[Waiting], outcomes: Mapping[JobKey, Outcome], now: float
    ) -> int | None:
        """Index of the first starving gang that waits for room while a later one goes ahead."""
        for index, waiting in enumerate(ready):
            outcome = outcomes[waiting.key]
            if (
                isinstance(outcome, Wait)
                and outcome.kind != "Quota"
                and now - waiting.since > self.starvation_seconds
            ):
                later = ready[index + 1 :]
                if any(not isinstance(outcomes[w.key], Wait) for w in later):
                    return index
                return None
        return None

    # ------------------------------------------------------------------ facts of a cycle

    def _topology_for(self, levels: tuple[str, ...]) -> Topology:
        """The domain tree of the nodes, rebuilt only when the nodes or the levels change."""
        if self._topology is None or self._topology[0] != levels:
            nodes = [(view.name, view.labels) for view in self.nodes.values()]
            self._topology = (levels, build_topology(levels, nodes))
        return self._topology[1]

    def _gang(
        self,
        waiting: Waiting,
        owner: Mapping[str, str],
        levels: Sequence[str],
        eligibility: MutableMapping[Signature, tuple[str, ...]],
        allowed_nodes: dict[frozenset[Signature], frozenset[str]],
    ) -> WaitingGang:
        requests, usage = waiting.requests_and_usage()
        required = waiting.required()
        signatures = frozenset(demand.signature for demand in required)
        allowed = allowed_nodes.get(signatures)
        if allowed is None:  # hundreds of waiting gangs share a few distinct constraint sets
            found: set[str] | None = None
            for signature in signatures:
                if signature not in eligibility:
                    eligibility[signature] = eligible_nodes(signature, self.nodes.values())
                nodes = eligibility[signature]
                found = set(nodes) if found is None else found & set(nodes)
            allowed = allowed_nodes[signatures] = frozenset(found or ())
        return WaitingGang(
            key=waiting.key,
            team=owner.get(waiting.key[0]),
            priority=waiting.priority,
            created=waiting.created,
            pods=tuple(d.pod_name for d in required),
            requests=requests,
            usage=usage,
            shape=shape_of(
                requests.values(),
                one_per_node=any(d.host_ports for d in required),
                allowed=allowed,
            ),
            topology=pooling.job_topology(
                waiting.topology_level, waiting.topology_required, levels
            ),
            preempts=waiting.preempts,
        )

    def _holding(self, owner: Mapping[str, str], wall: float) -> list[Admitted]:
        """Every gang holding capacity: running gangs, reservations and holds (never victims)."""
        gangs: dict[JobKey, tuple[dict[str, str], dict[str, Resources], int, float]] = {}
        for job, pods in self.ledger.gangs.items():
            if job in self.evicting:
                continue  # going away: neither counted nor chosen again
            members = [self.ledger.members[pod] for pod in pods]
            created = [m.created for m in members if m.created is not None]
            gangs[job] = (
                {pod[1]: self.ledger.pods[pod][0] for pod in pods},
                {pod[1]: self.ledger.pods[pod][1] for pod in pods},
                self.priorities.get(job, max(m.priority for m in members)),
                self.admitted_at.get(job, min(created) if created else 0.0),
            )
        held = [(k, r) for k, r in self.reservations.items()]
        held += [(k, h.reservation) for k, h in self.holds.items()]
        for job, reservation in held:
            nodes, requests, _, _ = gangs.get(job, ({}, {}, 0, wall))
            nodes = {**reservation.nodes, **nodes}
            requests = {**reservation.requests, **requests}
            gangs[job] = (nodes, requests, pooling.HELD_PRIORITY, wall)
        out = []
        for job, (nodes, requests, priority, started) in sorted(gangs.items()):
            gpu = self.gpu_resources.get(job, names.DEFAULT_GPU_RESOURCE)
            out.append(
                Admitted(
                    key=job,
                    team=owner.get(job[0]),
                    priority=priority,
                    usage=pooling.quota_usage(requests.values(), gpu),
                    admitted_at=started,
                    nodes=nodes,
                    requests={pod: pooling.to_units(r) for pod, r in requests.items()},
                )
            )
        return out

    # ------------------------------------------------------------------ applying outcomes

    def _admit(
        self,
        waiting: Waiting,
        nodes: Mapping[str, str],
        free: dict[str, dict[str, Decimal]],
        eligibility: MutableMapping[Signature, tuple[str, ...]],
        now: float,
    ) -> None:
        del self.waiting[waiting.key]
        placed = dict(nodes)
        by_name = {d.pod_name: d for d in waiting.demands}
        for pod, node in placed.items():
            add(free.setdefault(node, {}), by_name[pod].requests, -1)
        for extra in waiting.demands[len(waiting.required()) :]:
            found = _place_extra(extra, placed, free, eligibility, self.nodes.values())
            if found is not None:
                placed[extra.pod_name] = found
                add(free[found], extra.requests, -1)
        self.reservations[waiting.key] = Reservation(
            uid=waiting.uid,
            nodes=placed,
            requests={pod: by_name[pod].requests for pod in placed},
            since=now,
            waited=now - waiting.since,
        )
        self.admitted_at[waiting.key] = self.wall_clock()
        self.on_admit(now - waiting.since)
        log.info(
            "admitted %s/%s onto %d node(s) after %.2fs",
            waiting.key[0],
            waiting.key[1],
            len(set(placed.values())),
            now - waiting.since,
            extra={"job": "/".join(waiting.key)},
        )
        self.on_admit_job(waiting.key)

    def _preempt(self, waiting: Waiting, outcome: Preempt, now: float) -> None:
        del self.waiting[waiting.key]
        by_name = {d.pod_name: d for d in waiting.demands}
        pods = frozenset(
            pod for victim in outcome.victims for pod in self.ledger.gangs.get(victim, ())
        )
        self.holds[waiting.key] = Hold(
            reservation=Reservation(
                uid=waiting.uid,
                nodes=dict(outcome.nodes),
                requests={pod: by_name[pod].requests for pod in outcome.nodes},
                since=now,
                waited=now - waiting.since,
            ),
            victims=outcome.victims,
            victim_pods=pods,
        )
        log.info(
            "%s/%s preempts %s",
            *waiting.key,
            ", ".join("/".join(v) for v in outcome.victims),
            extra={"job": "/".join(waiting.key)},
        )
        for victim in outcome.victims:
            self.evicting[victim] = waiting.key
            self.reservations.pop(victim, None)
            self.on_reason(victim)
        self.on_reason(waiting.key)

    def _release_holds(self, now: float) -> list[JobKey]:
        """Holds whose victims' pods are all gone become reservations."""
        released = []
        for key, hold in list(self.holds.items()):
            if any(pod in self.ledger.pods for pod in hold.victim_pods):
                continue
            del self.holds[key]
            self.reservations[key] = hold.reservation
            self.admitted_at[key] = self.wall_clock()
            self.on_admit(hold.reservation.waited + now - hold.reservation.since)
            released.append(key)
            self.on_admit_job(key)
        return released

    def _shortfall(
        self,
        waiting: Waiting,
        views: Sequence[NodeView],
        free: Mapping[str, Resources],
        eligibility: MutableMapping[Signature, tuple[str, ...]],
        misses: dict[object, str],
    ) -> str | None:
        """``place_gang``'s account of what is short (memoised by the gang's pods' shape)."""
        memo = tuple((d.signature, tuple(sorted(d.requests.items()))) for d in waiting.required())
        if memo not in misses:
            found = place_gang(
                waiting.required(),
                views,
                free,
                min_count=waiting.min_count,
                gpu_resource=waiting.gpu_resource,
                eligibility_cache=eligibility,
            )
            misses[memo] = "" if isinstance(found, Placement) else found.message
        return misses[memo] or None

    def _still_waiting(self, waiting: Waiting, kind: str, message: str, now: float) -> None:
        log.debug("%s/%s waits (%s): %s", *waiting.key, kind, message)
        if waiting.reported_reason == message and waiting.reported_kind == kind:
            return
        # The free counts in the message change with every pod; rewriting the status of every
        # waiting job on each change would flood the apiserver, so refreshes are throttled (a new
        # kind of obstacle is reported at once).
        stale = (
            waiting.reported_at is None
            or now - waiting.reported_at >= self.reason_refresh_seconds
            or waiting.reported_kind != kind
        )
        if stale:
            waiting.reported_at = now
            waiting.reported_reason = message
            waiting.reported_kind = kind
            self.on_reason(waiting.key)


def _namespace_owners(teams: Mapping[str, TeamQuota]) -> dict[str, str]:
    """Namespace -> the team owning it (the first by name when two claim it)."""
    owner: dict[str, str] = {}
    for name in sorted(teams):
        for namespace in teams[name].namespaces:
            owner.setdefault(namespace, name)
    return owner


def _place_extra(
    demand: PodDemand,
    placed: Mapping[str, str],
    free: Mapping[str, Resources],
    eligibility: MutableMapping[Signature, tuple[str, ...]],
    views: Any,
) -> str | None:
    """A node for an optional (elastic) pod: one the gang uses, else any eligible one."""
    signature = demand.signature
    if signature not in eligibility:
        eligibility[signature] = eligible_nodes(signature, views)
    eligible = eligibility[signature]
    used = sorted(set(placed.values()))
    for node in [*used, *eligible]:
        if node in eligible and fits(free.get(node, {}), demand.requests):
            return node
    return None

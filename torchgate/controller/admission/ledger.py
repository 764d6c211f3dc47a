"""The capacity ledger: what holds capacity on each node, and what that leaves free.

Why a class apart from the waiting queue: it changes with the cluster (pod and node events) and
with the cycle's outcomes (reservations, holds, evictions), never with a job's request; the
admitter reads it for every cycle. It is kept from pod *events*, not recomputed per cycle, so a
cycle costs what changed since the last, not what the pool holds. Pure: callers pass the time.

Rules:

1. **Live pods** (``on_pod``): a pod counts on its node (``spec.nodeName``, or the node the
   admitter planned, ``torchgate.io/planned-node``, before binding) until it is terminated or
   gone. torchgate's pods (labelled with the operator and job name) are also grouped by job:
   the running gangs quota counts and preemption may choose from. Only a pod that ended, went
   away or moved frees capacity; a new pod never lets a waiting gang in.
2. **Reservations** (``reserve``): capacity promised to an admitted gang until the ledger has
   seen every pod of it; only then is it dropped (``free``), so no moment exists when neither
   counts a pod. ``release`` drops it when the job's pods were deleted; ``unreserve`` drops the
   pods its job no longer expects (scaled down before they were created), which no event would
   ever show. A reservation (or hold) is one job's, by uid (``reservation_for``,
   ``has_capacity_for``). A job deleted and created again under its name after its admission
   and before its pods were made is a new job whose reconcile creates none of the pods the
   reservation waits to see, so the reservation would count for ever; the reconcile that first
   finds the new uid forgets the earlier job (``forget``: the reconciler's module docstring),
   its reservation and hold with it, whether or not its deletion was seen.
3. **Holds** (``hold``): a preemptor's nodes, counted in full on top of the victims' pods still
   there, so nothing else takes them; each victim maps to its preemptor (``preempted_by``) until
   its pods are gone. A hold whose victims are all gone becomes a reservation (``settle``); one
   whose victims' pods left are all stuck (``stuck``: still there ``stuck_seconds`` after the
   time their deletion gave them, as on a lost node) is given up (``give_up``): the victims stay
   victims (neither counted nor chosen again while their pods are there).
4. **Capacity** (``free``): allocatable plus free GPU devices (``devices``), minus live pods,
   minus reservations not yet observed, minus holds, in milli-units and never below zero.
   ``changed_free`` gives it only for the nodes it may have changed on since it was last asked (a
   pod or node event there, a change of its free devices (``set_devices``) or of a claimed pod's
   count (``recount_claims``), or a reservation or hold there now or then), so the admitter's
   capacity view follows events, not the pool.
5. **Gangs holding capacity** (``holding``): running gangs (never victims) with the priority
   their reconcile reports (``note``) and their admission time, reservations and holds at
   ``preemption.HELD_PRIORITY``; quota counts them and preemption may choose from them. A gang
   whose job has a deadline also carries when it has ended at the latest (``ends_by``, from
   ``note`` or ``reserve``), kept until its last pod is gone even after its job is forgotten
   (a finished job's Workers are still being deleted). An admission (``reserve``) sets it to
   the admitted gang's own, none when it has no deadline: a job created again under its name
   while its predecessor's pods are still going does not inherit when the predecessor ends.
   The running gangs' records, in order of their keys, and their totals by team
   (``team_totals``: ``quota.TeamTotals``) are kept from the events: a record is read again
   only when its pods, priority, GPU sources, admission time, reservation, hold, eviction or
   team changed, so a cycle costs what changed, not the pool.
6. **Claimed GPUs**: a torchgate pod's GPUs claimed through DRA (``units.pod_units`` with what
   its job's policy counts as GPUs, ``note``) count on its node and against quota exactly as
   when its gang waited, from the moment the pod is seen, allocated or not; so device capacity
   (``devices``, from ResourceSlices: ``slices.free_devices``) does not take the devices of
   claims whose pods' units count them (``units_of``) again, and nothing is counted twice. When
   the claims, templates or classes they are counted from change, ``recount_claims`` counts
   them again.
7. **Growth of a running gang** (``place_growth``): a running elastic gang's Workers beyond
   ``minAvailable`` that wait (a scale while it runs, or room there was none for at admission)
   are placed after the cycle's waiting gangs were decided (a queued job outranks a running
   job's growth), in admission order, on the room they left, as a gang with no deadline at the
   back of the queue would be (not on the nodes ``backfill`` keeps for the head gangs, nor while
   a gang starves or a freed wave is held): each pod by ``topology`` rule 8
   (``place_extras``: the nodes the gang already uses first), only while its team stays within
   its nominal quota with the pod counted (``quota`` rule 2: ``Fits``; a growth neither borrows
   nor reclaims). A pod that does not fit is left out for a later cycle; one over quota ends
   its gang's growth for the cycle. A gang left short says what it waits for: ``Quota`` when a
   pod was over quota, else ``Capacity``. The pods placed are reserved like an admission's
   (``grow``, rule 2, keeping the gang's admission time), so the job's reconcile creates
   exactly those pods and the gang counts them until the ledger has seen them. A pod whose
   create the apiserver refused (a ResourceQuota of its namespace) is never seen: it leaves the
   reservation at once (``unreserve``), and the admitter places no growth of that gang until
   its back-off ends (``waiting`` rule 8).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from torchgate.controller.admission.nodes import NodeView, node_view
from torchgate.controller.admission.preemption import HELD_PRIORITY
from torchgate.controller.admission.quota import Admitted, Fits, TeamTotals, check_quota
from torchgate.controller.admission.topology import (
    Capacity,
    OptionalPod,
    Topology,
    build_topology,
    place_extras,
)
from torchgate.pytorchjob import moments, names
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.pool import TeamQuota, quota_usage
from torchgate.pytorchjob.units import Units, add, pod_units, subtract

PodKey = tuple[str, str]
TERMINATED_PHASES: Final = frozenset({"Succeeded", "Failed"})
_DEFAULT_GPUS: Final = GpuSources(names.DEFAULT_GPU_RESOURCE)


@dataclass(frozen=True, slots=True)
class Member:
    """One of torchgate's pods, as the gang view of the ledger keeps it."""

    job: JobKey
    priority: int
    created: float | None
    gone_by: float | None = None  # deleted: when it should be gone (``deletionTimestamp``)


@dataclass(slots=True)
class Reservation:
    """Capacity promised to a job whose pods are being created."""

    uid: str
    nodes: Mapping[str, str]  # pod name -> node
    requests: Mapping[str, Units]  # pod name -> what it takes
    since: float
    waited: float


@dataclass(slots=True)
class Hold:
    """Capacity kept for a preemptor while its victims' pods terminate."""

    reservation: Reservation
    victims: tuple[JobKey, ...]
    victim_pods: frozenset[PodKey]


@dataclass(frozen=True, slots=True)
class Growth:
    """A running elastic gang's Workers beyond ``minAvailable`` that wait for room (rule 7).

    ``nodes``: where its live pods are (pod -> node); ``extras``: the Workers waiting, in rank
    order; ``gpus``: what its policy counts as GPUs (for quota).
    """

    key: JobKey
    team: str | None
    nodes: Mapping[str, str]
    extras: tuple[OptionalPod, ...]
    gpus: GpuSources = _DEFAULT_GPUS
    one_per_node: bool = False


@dataclass(frozen=True, slots=True)
class Grown:
    """What ``place_growth`` did: job -> (pod -> node) placed, job -> what the rest wait for."""

    placed: Mapping[JobKey, Mapping[str, str]]
    waiting: Mapping[JobKey, str]  # ``Quota`` or ``Capacity`` (rule 7)


def place_growth(
    capacity: Capacity,
    growths: Iterable[Growth],
    *,
    teams: Mapping[str, TeamQuota],
    usage: Mapping[str, Units],
) -> Grown:
    """The waiting Workers of running gangs placed now, and why the others wait (rule 7).

    ``growths`` in admission order; ``capacity``: the room the cycle's waiting gangs left
    (taken from as pods are placed); ``usage``: each team's quota usage with them (not changed).
    """
    used = {team: dict(units) for team, units in usage.items()}
    out: dict[JobKey, dict[str, str]] = {}
    waiting: dict[JobKey, str] = {}
    for growth in growths:
        team = teams.get(growth.team) if growth.team is not None else None
        placed: dict[str, str] = {}
        for pod in growth.extras:
            wanted = quota_usage([pod.requests], growth.gpus)
            if not isinstance(check_quota(team, wanted, used, teams), Fits):
                waiting[growth.key] = "Quota"
                break
            where = {**growth.nodes, **placed}
            placed |= place_extras(capacity, where, [pod], one_per_node=growth.one_per_node)
            if pod.name in placed and team is not None:
                total = used.setdefault(team.name, {})
                for name, amount in wanted.items():
                    total[name] = total.get(name, 0) + amount
        if placed:
            out[growth.key] = placed
        if len(placed) < len(growth.extras):
            waiting.setdefault(growth.key, "Capacity")
    return Grown(out, waiting)


class CapacityLedger:
    """Nodes, live pods, reservations, holds and evictions; what they leave free."""

    def __init__(self, claims_for: Callable[[str], ClaimLookup] = lambda _: NO_CLAIMS) -> None:
        self.claims_for = claims_for  # what the controller sees of DRA in a namespace
        self.nodes: dict[str, NodeView] = {}
        self.used: dict[str, dict[str, int]] = {}  # node -> what its live pods take
        self.pods: dict[PodKey, tuple[str, Units]] = {}  # live pod -> (node, what it takes)
        self.members: dict[PodKey, Member] = {}
        self.gangs: dict[JobKey, set[PodKey]] = {}
        self.reservations: dict[JobKey, Reservation] = {}
        self.holds: dict[JobKey, Hold] = {}
        self.evicting: dict[JobKey, JobKey] = {}  # victim -> its preemptor
        self.gpu_sources: dict[JobKey, GpuSources] = {}
        # Live torchgate pods that name claims: their specs (recounted when ``note`` changes).
        self.claim_specs: dict[PodKey, Mapping[str, Any]] = {}
        # Node -> free GPU devices per resource key (``devices.free_devices``), set by the owner.
        self.devices: dict[str, dict[str, int]] = {}
        self.priorities: dict[JobKey, int] = {}  # as asked, for the gang once it runs
        # When this process admitted the job (wall clock; pods' creation seconds after a restart).
        self.admitted_at: dict[JobKey, float] = {}
        # When the job has ended at the latest (wall clock), when it has a deadline: the gang's
        # ``Admitted.ends_by`` (``backfill`` rule 2).
        self.ends_by: dict[JobKey, float] = {}
        self._topology: tuple[tuple[str, ...], Topology] | None = None
        self.nodes_version = 0  # bumps whenever a node's view changes (what eligibility reads)
        self.devices_version = 0  # bumps when which nodes have free devices of a key changes
        self._dirty: set[str] = set()  # nodes with a pod or node event since ``changed_free``
        self._claimed: set[str] = set()  # nodes reserved or held at the last ``changed_free``
        # Rule 5, kept from the events: the running gangs' records by job, their keys in order
        # (``_order``, with the records beside them in ``_records``) and their totals by team,
        # as of the owners last asked with (``_owner``; other owners: every record is read again).
        self._running: dict[JobKey, Admitted] = {}
        self._order: list[JobKey] = []
        self._records: list[Admitted] = []
        self._totals = TeamTotals()
        self._owner: dict[str, str] | None = None
        self._stale: set[JobKey] = set()  # jobs whose running record may be out of date

    # ------------------------------------------------------------------ rule 1: the cluster

    def on_node(self, kind: str, node: Mapping[str, Any]) -> bool:
        """A node was added, changed or deleted; whether that changes what the cycle sees."""
        name = str((node.get("metadata") or {}).get("name") or "")
        before = self.nodes.get(name)
        if kind == "DELETED":
            self.nodes.pop(name, None)
        else:
            view = node_view(node)
            if view is None or before == view:
                return False
            self.nodes[name] = view
            if before is not None and before.labels == view.labels:
                self.nodes_version += 1
                self._dirty.add(name)
                return True  # the same node set and labels: the domain tree stands
        self._topology = None
        self.nodes_version += 1
        self._dirty.add(name)
        return True

    def on_pod(self, key: PodKey, pod: Mapping[str, Any] | None) -> bool:
        """Account for a pod's new state (``None``: gone); whether it freed capacity (rule 1)."""
        before = self.pods.pop(key, None)
        self.claim_specs.pop(key, None)
        if before is not None:
            subtract(self.used.setdefault(before[0], {}), before[1])
            self._dirty.add(before[0])
            member = self.members.pop(key, None)
            if member is not None:
                self._stale.add(member.job)
                gang = self.gangs.get(member.job)
                if gang is not None:
                    gang.discard(key)
                    if not gang:
                        del self.gangs[member.job]
                        if member.job not in self.priorities:  # forgotten: no gang to end
                            self.ends_by.pop(member.job, None)
        after = pod_usage(pod) if pod is not None else None
        if after is not None and pod is not None:
            member = member_of(pod)
            spec = pod.get("spec") or {}
            if member is not None and spec.get("resourceClaims"):
                self.claim_specs[key] = spec
                after = (after[0], self._units_of(key, member.job))
            self.pods[key] = after
            add(self.used.setdefault(after[0], {}), after[1])
            self._dirty.add(after[0])
            if member is not None:
                self._stale.add(member.job)
                self.members[key] = member
                self.gangs.setdefault(member.job, set()).add(key)
        return before is not None and before != after

    def units_of(self, pod: PodKey) -> Units | None:
        """What a live pod counts on its node (None: no live pod of that name)."""
        held = self.pods.get(pod)
        return None if held is None else held[1]

    def jobs_on(self, node: str) -> set[JobKey]:
        """The jobs with a live pod on ``node`` (bound there, or planned there before binding)."""
        return {
            member.job
            for pod, member in self.members.items()
            if pod in self.pods and self.pods[pod][0] == node
        }

    def note(
        self, key: JobKey, *, priority: int, gpus: GpuSources, ends_by: float | None = None
    ) -> None:
        """What the job's gang counts as once it runs (its pods may carry no or an older one).

        ``ends_by``: when it has ended at the latest, if known (else what ``reserve`` set stays).
        """
        self.priorities[key] = priority
        if ends_by is not None:
            self.ends_by[key] = ends_by
        if self.gpu_sources.get(key) != gpus:
            self.gpu_sources[key] = gpus
            for pod in self.gangs.get(key, ()):
                self._recount(pod, key)
        self._stale.add(key)

    def _units_of(self, pod: PodKey, job: JobKey) -> Units:
        """A pod's requests with its claimed GPUs (rule 6; none before its job is noted)."""
        sources = self.gpu_sources.get(job)
        return pod_units(self.claim_specs[pod], sources, self.claims_for(pod[0]))

    def _recount(self, pod: PodKey, job: JobKey) -> None:
        """Count a claimed pod's units again; its node and gang changed if they differ."""
        if pod not in self.claim_specs or pod not in self.pods:
            return
        node, units = self.pods[pod]
        counted = self._units_of(pod, job)
        if counted == units:
            return
        subtract(self.used.setdefault(node, {}), units)
        self.pods[pod] = (node, counted)
        add(self.used[node], counted)
        self._dirty.add(node)
        self._stale.add(job)

    def recount_claims(self) -> None:
        """Count every claimed pod again: its claims, templates or classes changed (rule 6)."""
        for pod in list(self.claim_specs):
            member = self.members.get(pod)
            if member is not None:
                self._recount(pod, member.job)

    def set_devices(self, devices: Mapping[str, Mapping[str, int]]) -> bool:
        """The nodes' free GPU devices (rule 4); whether any node's changed.

        A node whose devices changed is reported by ``changed_free``; ``devices_version`` bumps
        when a node gains or loses every device of a key (what ``topology.gpu_free_nodes`` reads),
        so nothing read from the devices is kept past the change.
        """
        kept = {name: dict(units) for name, units in devices.items() if units}
        changed = {
            name
            for name in self.devices.keys() | kept.keys()
            if self.devices.get(name) != kept.get(name)
        }
        if not changed:
            return False
        if _with_devices(self.devices) != _with_devices(kept):
            self.devices_version += 1
        self.devices = kept
        self._dirty |= changed
        return True

    def capacity_of(self, name: str) -> dict[str, int]:
        """A node's allocatable with its free GPU devices (what an empty node could hold)."""
        left = dict(self.nodes[name].allocatable)
        add(left, self.devices.get(name, {}))
        return left

    # ------------------------------------------------------------------ rules 2-3: outcomes

    def reserve(
        self,
        key: JobKey,
        reservation: Reservation,
        *,
        admitted_at: float,
        ends_by: float | None = None,
    ) -> None:
        """Promise the job's gang its nodes until the ledger has its pods (rule 2)."""
        self.reservations[key] = reservation
        self.admitted_at[key] = admitted_at
        if ends_by is None:  # no deadline known yet: none inherited (rule 5)
            self.ends_by.pop(key, None)
        else:
            self.ends_by[key] = ends_by
        self._stale.add(key)

    def grow(self, key: JobKey, reservation: Reservation) -> None:
        """Reserve a running gang's new pods' nodes, keeping its admission time (rule 7)."""
        self.reservations[key] = reservation
        self._stale.add(key)

    def unreserve(self, key: JobKey, pods: Iterable[str]) -> bool:
        """Drop ``pods`` (no longer expected) from the job's reservation (rule 2); whether any."""
        reservation = self.reservations.get(key)
        if reservation is None:
            return False
        dropped = set(pods) & reservation.nodes.keys()
        if not dropped:
            return False
        kept = {pod: node for pod, node in reservation.nodes.items() if pod not in dropped}
        if kept:
            requests = {pod: reservation.requests[pod] for pod in kept}
            self.reservations[key] = replace(reservation, nodes=kept, requests=requests)
        else:
            del self.reservations[key]
        self._dirty |= {reservation.nodes[pod] for pod in dropped}
        self._stale.add(key)
        return True

    def growable(self, key: JobKey) -> Mapping[str, str] | None:
        """Where a running gang's live pods are, if it may grow now (rule 7), else ``None``.

        Not while a reservation or hold of its own stands (its pods are being created), nor
        while it is a preemption victim.
        """
        pods = self.gangs.get(key)
        if not pods or key in self.reservations or key in self.holds or key in self.evicting:
            return None
        return {pod[1]: self.pods[pod][0] for pod in pods}

    def reservation_for(self, key: JobKey, uid: str) -> Mapping[str, str] | None:
        """Where the job's pods go, when capacity is reserved for it."""
        reservation = self.reservations.get(key)
        return reservation.nodes if reservation is not None and reservation.uid == uid else None

    def has_capacity_for(self, key: JobKey, uid: str) -> bool:
        """Whether capacity is reserved or held for this job (its uid)."""
        reservation = self.reservations.get(key)
        hold = self.holds.get(key)
        return (reservation is not None and reservation.uid == uid) or (
            hold is not None and hold.reservation.uid == uid
        )

    def release(self, key: JobKey) -> None:
        """Drop the job's reservation: its pods were deleted, so it no longer describes them."""
        self.reservations.pop(key, None)
        self._stale.add(key)

    def hold(self, key: JobKey, reservation: Reservation, victims: tuple[JobKey, ...]) -> None:
        """Keep the preemptor's nodes while ``victims`` are evicted (rule 3)."""
        pods = frozenset(pod for victim in victims for pod in self.gangs.get(victim, ()))
        self.holds[key] = Hold(reservation=reservation, victims=victims, victim_pods=pods)
        self._stale.add(key)
        for victim in victims:
            self.evicting[victim] = key
            self.reservations.pop(victim, None)
            self._stale.add(victim)

    def victim_pods_left(self, key: JobKey) -> list[PodKey]:
        """The pods of the hold's victims that are still there."""
        return [pod for pod in self.holds[key].victim_pods if pod in self.pods]

    def stuck(self, pods: Sequence[PodKey], *, late: float) -> bool:
        """Whether every pod was deleted and should have been gone by ``late`` (rule 3)."""
        for pod in pods:
            member = self.members.get(pod)
            if member is None or member.gone_by is None or member.gone_by > late:
                return False
        return True

    def settle(self, key: JobKey, *, admitted_at: float) -> Reservation:
        """The hold's victims are gone: it becomes a reservation (rule 3)."""
        reservation = self.holds.pop(key).reservation
        self.reserve(key, reservation, admitted_at=admitted_at)
        return reservation

    def give_up(self, key: JobKey) -> None:
        """Drop the hold; its victims stay victims while their pods are there (rule 3)."""
        del self.holds[key]
        self._stale.add(key)

    def preempted_by(self, key: JobKey) -> JobKey | None:
        """The preemptor when the job's gang was chosen as a victim and is being evicted."""
        return self.evicting.get(key)

    def end_eviction(self, key: JobKey) -> None:
        """A victim asks again (its pods are gone): it is a job like any other."""
        self.evicting.pop(key, None)
        self._stale.add(key)

    def forget(self, key: JobKey) -> bool:
        """The job is gone, finished, suspended or not ours; whether it held capacity."""
        changed = self.reservations.pop(key, None) is not None
        changed |= self.holds.pop(key, None) is not None
        if key not in self.gangs:  # a victim stays one while its pods hold their nodes
            self.evicting.pop(key, None)
        self.gpu_sources.pop(key, None)
        self.priorities.pop(key, None)
        self.admitted_at.pop(key, None)
        if key not in self.gangs:  # a finished gang's pods still going keep their deadline
            self.ends_by.pop(key, None)
        self._stale.add(key)
        return changed

    # ------------------------------------------------------------------ rules 4-5: for the cycle

    def free(self) -> dict[str, dict[str, int]]:
        """Free capacity per node: allocatable - live pods - reservations not yet observed - holds.

        A reserved pod counts through its reservation until the ledger (fed by pod *events*) has
        it; only then is the reservation dropped. Releasing it when the pod merely exists in a
        cache written through by the reconciler would leave a moment when neither counts it, and
        the next gang would be placed on GPUs kube-scheduler knows are taken. A hold counts in
        full (on top of the victims' pods still there), so nothing else takes its nodes.
        """
        return self._free_of(self.nodes)

    def changed_free(self) -> dict[str, dict[str, int]]:
        """``free`` of the nodes it may differ on since the last call (rule 4).

        Those are the nodes with a pod or node event since, and the nodes reservations and holds
        claim now or claimed then (a reservation counts until its pods are seen, a hold until
        it settles, and either may be dropped meanwhile).
        """
        claimed = {node for r in self.reservations.values() for node in r.nodes.values()}
        claimed |= {node for h in self.holds.values() for node in h.reservation.nodes.values()}
        names = self._dirty | claimed | self._claimed
        self._dirty, self._claimed = set(), claimed
        return self._free_of(name for name in names if name in self.nodes)

    def _free_of(self, names: Iterable[str]) -> dict[str, dict[str, int]]:
        free: dict[str, dict[str, int]] = {}
        for name in names:
            left = self.capacity_of(name)
            subtract(left, self.used.get(name, {}))
            free[name] = left
        settled: list[JobKey] = []
        for key, reservation in self.reservations.items():
            unseen = 0
            for pod, node_name in reservation.nodes.items():
                if (key[0], pod) in self.pods:
                    continue
                unseen += 1
                if node_name in free:
                    subtract(free[node_name], reservation.requests[pod])
            if not unseen:
                settled.append(key)
        for key in settled:
            del self.reservations[key]
            self._stale.add(key)
        for hold in self.holds.values():
            for pod, node_name in hold.reservation.nodes.items():
                if node_name in free:
                    subtract(free[node_name], hold.reservation.requests[pod])
        return {name: {r: max(0, a) for r, a in left.items()} for name, left in free.items()}

    def topology_for(self, levels: tuple[str, ...]) -> Topology:
        """The domain tree of the nodes, rebuilt only when the nodes or the levels change."""
        if self._topology is None or self._topology[0] != levels:
            nodes = [(view.name, view.labels) for view in self.nodes.values()]
            self._topology = (levels, build_topology(levels, nodes))
        return self._topology[1]

    def holding(self, owner: Mapping[str, str], wall: float) -> list[Admitted]:
        """Every gang holding capacity, by key: running gangs, reservations and holds (rule 5)."""
        self._catch_up(owner)
        held = self._held(owner, wall)
        if not held:
            return list(self._records)
        return list(heapq.merge(self._records, held, key=_by_key))

    def team_totals(self, owner: Mapping[str, str], wall: float) -> TeamTotals:
        """``quota.TeamTotals`` of ``holding``, without a pass over the running gangs (rule 5)."""
        self._catch_up(owner)
        totals = self._totals.copy()
        for gang in self._held(owner, wall):
            totals.add(gang)
        return totals

    def _held(self, owner: Mapping[str, str], wall: float) -> list[Admitted]:
        """The reserved and held gangs' records, by key, with their pods seen so far."""
        held = [(k, r) for k, r in self.reservations.items()]
        held += [(k, h.reservation) for k, h in self.holds.items()]
        merged: dict[JobKey, tuple[dict[str, str], dict[str, Units]]] = {}
        out: dict[JobKey, Admitted] = {}
        for job, reservation in held:
            if job in merged:  # reserved and held: the later one on top of the earlier
                nodes, requests = merged[job]
            else:
                pods = self.gangs.get(job, set()) if job not in self.evicting else set()
                nodes = {pod[1]: self.pods[pod][0] for pod in pods}
                requests = {pod[1]: self.pods[pod][1] for pod in pods}
            nodes, requests = {**reservation.nodes, **nodes}, {**reservation.requests, **requests}
            merged[job] = nodes, requests
            out[job] = self._admitted(job, owner.get(job[0]), nodes, requests, HELD_PRIORITY, wall)
        return [out[job] for job in sorted(out)]

    def _catch_up(self, owner: Mapping[str, str]) -> None:
        """Read again the running records of the jobs changed since (all, for other owners)."""
        if owner != self._owner:
            self._owner = dict(owner)
            self._stale |= self._running.keys() | self.gangs.keys()
        for job in self._stale:
            self._drop_running(job)
            running = job in self.gangs and job not in self.evicting  # victims: going away
            if running and job not in self.reservations and job not in self.holds:
                self._add_running(self._running_gang(job, owner.get(job[0])))
        self._stale.clear()

    def _add_running(self, record: Admitted) -> None:
        at = bisect_left(self._order, record.key)
        self._order.insert(at, record.key)
        self._records.insert(at, record)
        self._running[record.key] = record
        self._totals.add(record)

    def _drop_running(self, job: JobKey) -> None:
        record = self._running.pop(job, None)
        if record is None:
            return
        at = bisect_left(self._order, job)
        del self._order[at]
        del self._records[at]
        self._totals.add(record, -1)

    def _running_gang(self, job: JobKey, team: str | None) -> Admitted:
        """A running gang's record, read from its pods and what its job noted."""
        pods = self.gangs[job]
        members = [self.members[pod] for pod in pods]
        created = [m.created for m in members if m.created is not None]
        return self._admitted(
            job,
            team,
            {pod[1]: self.pods[pod][0] for pod in pods},
            {pod[1]: self.pods[pod][1] for pod in pods},
            self.priorities.get(job, max(m.priority for m in members)),
            self.admitted_at.get(job, min(created) if created else 0.0),
        )

    def _admitted(
        self,
        job: JobKey,
        team: str | None,
        nodes: dict[str, str],
        requests: dict[str, Units],
        priority: int,
        started: float,
    ) -> Admitted:
        gpus = self.gpu_sources.get(job, _DEFAULT_GPUS)
        return Admitted(
            key=job,
            team=team,
            priority=priority,
            usage=quota_usage(requests.values(), gpus),
            admitted_at=started,
            nodes=nodes,
            requests=requests,
            ends_by=self.ends_by.get(job),
        )


def _by_key(gang: Admitted) -> JobKey:
    return gang.key


def _with_devices(devices: Mapping[str, Mapping[str, int]]) -> frozenset[tuple[str, str]]:
    """The (node, resource key) pairs with a free device."""
    return frozenset(
        (node, key) for node, units in devices.items() for key, n in units.items() if n > 0
    )


def pod_usage(pod: Mapping[str, Any]) -> tuple[str, Units] | None:
    """The node a pod takes capacity on and its requests; ``None`` when it takes none."""
    status = pod.get("status") or {}
    if status.get("phase") in TERMINATED_PHASES:
        return None
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        node = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            names.ANNOTATION_PLANNED_NODE
        )
    if not isinstance(node, str) or not node:
        return None
    return node, pod_units(spec)


def member_of(pod: Mapping[str, Any]) -> Member | None:
    """The job a torchgate pod belongs to, with its priority and creation; else ``None``."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    job = labels.get(names.LABEL_JOB_NAME)
    if labels.get(names.LABEL_OPERATOR_NAME) != names.OPERATOR_NAME or not isinstance(job, str):
        return None
    priority = (pod.get("spec") or {}).get("priority")
    return Member(
        job=(str(metadata.get("namespace") or ""), job),
        priority=priority if isinstance(priority, int) else 0,
        created=epoch_seconds(metadata.get("creationTimestamp")),
        gone_by=epoch_seconds(metadata.get("deletionTimestamp")),
    )


def epoch_seconds(timestamp: object) -> float | None:
    """An RFC 3339 timestamp (``creationTimestamp``) as seconds since the epoch, else ``None``."""
    moment = moments.parse_time(timestamp)
    return None if moment is None else moment.timestamp()

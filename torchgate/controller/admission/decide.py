"""One admission cycle over a shared pool: quota, then topology placement, then preemption.

Why one function over the three rule modules: the order in which they are asked decides what a
team gets. ``decide`` is the cycle the admitter will run (it is pure: the admitter gathers the
facts, calls it, and applies what it returns), and it keeps every decision whole-gang.

Rules, per waiting gang in admission order (``pool.admission_order``: higher priority, then
older, then by name):

1. Quota first (``quota.check_quota``): a gang over what its team may hold waits with reason
   ``Quota``, unless preemption (rule 3) frees quota for it. Gangs that would *borrow* are
   decided after every gang that stays within its team's nominal quota (as Kueue orders them),
   so that a team's own share is never lent out in the same cycle in which the team needs it.
2. Then placement (``topology.place_topology``) against the free capacity left by every gang
   admitted before it in this cycle; a placed gang is admitted (``Admit``, with what it borrows)
   and its pods beyond ``minAvailable`` go where they fit (``topology.place_extras``), so every
   later gang sees their room taken too.
3. A gang that cannot be admitted tries preemption, whole gangs only: borrowed gangs of other
   teams when the gang is within its own nominal quota (reclaim, any priority), and lower-priority
   gangs it may preempt (``preemption.may_preempt``), neither protected by the admin. The victims
   are the cheapest set with which both its quota and its placement work (``preemption.cheapest``,
   per domain of a required topology level). ``Preempt`` names the victims and the placement to
   reserve for the preemptor while they terminate; what the victims free beyond it is not offered
   to anyone else in this cycle (their pods are still there). A gang admitted in this cycle is
   never a victim in it.
4. Otherwise it waits (``Wait``) with the reason of the first obstacle: ``Quota``, ``Capacity``
   or ``Topology``. A ``Capacity`` wait says what is short (``topology.Shortfall``), or why no
   node may take one of its pods at all (``WaitingGang.no_node``).

Within a cycle free capacity only shrinks and quota usage only grows, so a gang of the same team,
shape, size, topology request and priority as one that already failed fails too and is answered
from a memo (cleared when a preemption changes usage), which keeps a cycle over hundreds of
identical waiting gangs cheap. Gangs answered from the memo share its reason, so their messages
must be the same too: what a message names (nodes, GPU resource, the pod no node admits) is part
of the memo's key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from torchgate.controller.admission.preemption import (
    Preemptor,
    candidates,
    cheapest,
    group_by_domain,
)
from torchgate.controller.admission.quota import (
    Admitted,
    Borrows,
    Fits,
    QuotaWait,
    Reclaims,
    check_quota,
    reclaim_candidates,
    still_borrowing,
    usage_by_team,
    without,
)
from torchgate.controller.admission.topology import (
    Capacity,
    OptionalPod,
    Shape,
    Shortfall,
    Topology,
    TopologyPlacement,
    TopologyWait,
    fits_topology,
    place_extras,
    place_topology,
)
from torchgate.pytorchjob import names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.pool import (
    PreemptionSettings,
    TeamQuota,
    TopologyRequest,
    admission_order,
)
from torchgate.pytorchjob.units import Units

WaitKind = Literal["Quota", "Capacity", "Topology"]


@dataclass(frozen=True, slots=True)
class WaitingGang:
    """A job whose whole gang waits for admission.

    Attributes:
        key: ``(namespace, name)``.
        team: The team owning its namespace, ``None`` when none does.
        priority: Its PriorityClass value.
        created: Its creationTimestamp (RFC 3339 sorts by time).
        pods: Pod names in rank order (Master, then Workers by index).
        requests: Pod name -> what it takes from a node (milli-units).
        usage: What the whole gang counts against quota (``pool.GPUS`` etc., milli-units).
        shape: ``topology.shape_of`` its pods' requests (and eligible nodes).
        topology: The level it requires or prefers.
        preempts: ``False`` when its PriorityClass has ``preemptionPolicy: Never``.
        extras: Its pods beyond ``minAvailable`` (elastic workers), placed only where they fit.
        where: How messages name the nodes its pods may use (``nodes.pool_of``).
        gpu_resource: What its policy counts as GPUs (messages name it first).
        no_node: Why no node may take one of its pods (``nodes.no_eligible_node``), if so.
    """

    key: JobKey
    team: str | None
    priority: int
    created: str
    pods: tuple[str, ...]
    requests: Mapping[str, Units]
    usage: Units
    shape: Shape
    topology: TopologyRequest = field(default_factory=TopologyRequest)
    preempts: bool = True
    extras: tuple[OptionalPod, ...] = ()
    where: str = "in the cluster"
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE
    no_node: str | None = None

    def order(self) -> tuple[int, str, str, str]:
        """Its place in the cycle (``pool.admission_order``)."""
        return admission_order(self.priority, self.created, self.key)


@dataclass(frozen=True, slots=True)
class Pool:
    """The facts of one cycle.

    Attributes:
        topology: ``topology.build_topology`` of the pool's nodes.
        free: Node -> free capacity (allocatable minus live pods and reservations, milli-units).
        teams: Team name -> quota.
        admitted: Gangs holding capacity now (for quota usage and as preemption candidates).
        preemption: The admin's protection settings.
    """

    topology: Topology
    free: Mapping[str, Units]
    teams: Mapping[str, TeamQuota] = field(default_factory=dict)
    admitted: Sequence[Admitted] = ()
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)


@dataclass(frozen=True, slots=True)
class Admit:
    """Create the gang's pods on these nodes."""

    key: JobKey
    nodes: Mapping[str, str]
    borrowed: Mapping[str, int]
    domain: str
    preference_met: bool


@dataclass(frozen=True, slots=True)
class Preempt:
    """Evict ``victims`` (whole gangs) and reserve ``nodes`` for the preemptor meanwhile."""

    key: JobKey
    victims: tuple[JobKey, ...]
    nodes: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Wait:
    """The gang keeps waiting, for the first obstacle named."""

    key: JobKey
    kind: WaitKind
    reason: str | Shortfall

    @property
    def message(self) -> str:
        """What the job's ``Queued`` condition says (a ``Shortfall`` is phrased on first read)."""
        return str(self.reason)


Outcome = Admit | Preempt | Wait


@dataclass(slots=True)
class _Cycle:
    pool: Pool
    now: float
    capacity: Capacity
    admitted: list[Admitted]
    usage: dict[str, dict[str, int]]
    misses: dict[tuple[object, ...], Wait] = field(default_factory=dict)
    fresh: set[JobKey] = field(default_factory=set)  # admitted in this cycle: never victims
    settled: list[Admitted] | None = None  # admitted before the cycle, not yet preempted in it
    domains: dict[int, Callable[[str], str | None]] = field(default_factory=dict)  # per level

    def team(self, gang: WaitingGang) -> TeamQuota | None:
        return self.pool.teams.get(gang.team) if gang.team is not None else None

    def admit(self, gang: WaitingGang, nodes: Mapping[str, str], *, extras: bool) -> dict[str, str]:
        """Take the gang's room (and, with ``extras``, place its optional pods); where it went."""
        self.capacity.take(nodes, gang.requests)
        placed, requests = dict(nodes), gang.requests
        if extras and gang.extras:
            one_per_node = gang.shape.one_per_node
            placed |= place_extras(self.capacity, nodes, gang.extras, one_per_node=one_per_node)
            requests = {**requests, **{pod.name: pod.requests for pod in gang.extras}}
        if gang.team is not None:
            usage = self.usage.setdefault(gang.team, {})
            for name, amount in gang.usage.items():
                usage[name] = usage.get(name, 0) + amount
        self.fresh.add(gang.key)
        self.admitted.append(
            Admitted(
                key=gang.key,
                team=gang.team,
                priority=gang.priority,
                usage=gang.usage,
                admitted_at=self.now,
                nodes=placed,
                requests={pod: requests[pod] for pod in placed},
            )
        )
        return placed


def decide(pool: Pool, waiting: Sequence[WaitingGang], now: float) -> list[Outcome]:
    """One admission cycle (see the module docstring); outcomes in admission order."""
    cycle = _Cycle(
        pool=pool,
        now=now,
        capacity=Capacity(pool.topology, pool.free),
        admitted=list(pool.admitted),
        usage=usage_by_team(pool.admitted),
    )
    ordered = sorted(waiting, key=WaitingGang.order)
    outcomes: dict[JobKey, Outcome] = {}
    for gang in ordered:
        first = _decide_one(cycle, gang, borrow=False)
        if first is not None:
            outcomes[gang.key] = first
    for gang in ordered:
        if gang.key not in outcomes:
            outcomes[gang.key] = _decide_one(cycle, gang, borrow=True) or Wait(
                gang.key, "Quota", "waiting for quota"
            )
    return [outcomes[gang.key] for gang in ordered]


def _memo_key(gang: WaitingGang) -> tuple[object, ...]:
    return (
        gang.team,
        gang.shape,
        len(gang.pods),
        tuple(sorted(gang.usage.items())),
        gang.topology,
        gang.priority,
        gang.preempts,
        gang.where,
        gang.gpu_resource,
        gang.no_node,
    )


def _decide_one(cycle: _Cycle, gang: WaitingGang, *, borrow: bool) -> Outcome | None:
    """The gang's outcome; ``None`` when it would borrow and ``borrow`` is off (rule 1)."""
    memo = _memo_key(gang)
    missed = cycle.misses.get(memo)
    if missed is not None:
        return Wait(gang.key, missed.kind, missed.reason)
    team = cycle.team(gang)
    verdict = check_quota(team, gang.usage, cycle.usage, cycle.pool.teams)
    if isinstance(verdict, Borrows) and not borrow:
        return None
    obstacle: Wait | None = None
    if isinstance(verdict, Fits | Borrows):
        placed = place_topology(cycle.capacity, gang.pods, gang.shape, gang.topology)
        if isinstance(placed, TopologyPlacement):
            nodes = cycle.admit(gang, placed.nodes, extras=True)
            borrowed = verdict.amount if isinstance(verdict, Borrows) else {}
            return Admit(gang.key, nodes, borrowed, placed.domain, placed.preference_met)
        reason = _shortfall(cycle, gang) if placed.kind == "Capacity" else placed.message
        obstacle = Wait(gang.key, placed.kind, reason)
    elif isinstance(verdict, QuotaWait):
        obstacle = Wait(gang.key, "Quota", verdict.message)
    else:
        obstacle = Wait(gang.key, "Quota", "waiting for borrowed quota to be returned")
    preempted = _preempt(cycle, gang, team, within_nominal=isinstance(verdict, Fits | Reclaims))
    if preempted is not None:
        cycle.misses.clear()
        return preempted
    cycle.misses[memo] = obstacle
    return obstacle


def _shortfall(cycle: _Cycle, gang: WaitingGang) -> str | Shortfall:
    """What a ``Capacity`` wait tells the user (rule 4)."""
    if gang.no_node is not None:
        return gang.no_node
    return Shortfall(
        cycle.capacity,
        gang.shape,
        gang.requests.values(),
        where=gang.where,
        gpu_resource=gang.gpu_resource,
    )


def _preempt(
    cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None, *, within_nominal: bool
) -> Preempt | None:
    pool = cycle.pool
    preemptor = Preemptor(gang.team, gang.priority, gang.preempts)
    if cycle.settled is None:  # unchanged until a preemption: admissions only add fresh gangs
        cycle.settled = [a for a in cycle.admitted if a.key not in cycle.fresh]
    settled = cycle.settled
    ordered = candidates(preemptor, settled, pool.teams, cycle.usage, pool.preemption, cycle.now)
    if team is not None and within_nominal:
        reclaimable = reclaim_candidates(
            team,
            gang.usage,
            settled,
            cycle.usage,
            pool.teams,
            protected=lambda v: pool.preemption.protects(
                priority=v.priority, run_seconds=cycle.now - v.admitted_at
            ),
        )
        chosen = {v.key for v in reclaimable}
        ordered = reclaimable + [v for v in ordered if v.key not in chosen]
    if not ordered:
        return None

    usage_now = cycle.usage

    def allowed(victim: Admitted, chosen: Sequence[Admitted]) -> bool:
        if victim.team is None or victim.team == gang.team or victim.team not in pool.teams:
            return True
        return still_borrowing(victim, chosen, usage_now, pool.teams)

    trial = _Trial(cycle, gang, team)
    try:
        groups = [ordered]
        level = gang.topology.level
        if gang.topology.required and level is not None and level < len(pool.topology.levels):
            lookup = cycle.domains.get(level)
            if lookup is None:
                lookup = cycle.domains[level] = _domain_at(pool.topology, level)
            groups = group_by_domain(ordered, lookup)
        choice = cheapest(groups, trial, cycle.now, allowed=allowed)
        placed = trial.place(choice.victims) if choice is not None else None
    finally:
        trial.hold(())
    if choice is None or not isinstance(placed, TopologyPlacement):
        return None
    gone = {v.key for v in choice.victims}
    cycle.admitted = [a for a in cycle.admitted if a.key not in gone]
    cycle.settled = None
    cycle.usage = without(cycle.usage, choice.victims)
    cycle.admit(gang, placed.nodes, extras=False)
    return Preempt(gang.key, tuple(sorted(gone)), placed.nodes)


class _Trial:
    """Whether the gang fits with some victims gone; victims' pods are given back incrementally.

    Successive calls differ by a victim or two (greedy growth, then pruning), so only the
    difference is given back or taken again; ``hold(())`` restores the cycle's capacity.
    """

    def __init__(self, cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None) -> None:
        self.cycle, self.gang, self.team = cycle, gang, team
        self.given: dict[JobKey, Admitted] = {}

    def _move(self, victim: Admitted, *, give: bool) -> None:
        nodes, requests = victim.nodes or {}, victim.requests or {}
        if give:
            self.cycle.capacity.give(nodes, requests)
        else:
            self.cycle.capacity.take(nodes, requests)

    def __call__(self, victims: Sequence[Admitted]) -> bool | None:
        """``True`` when the gang fits with ``victims`` gone, else ``None``.

        Quota is asked first: when it says no, the victims' pods need not be given back.
        """
        if not victims:
            return None
        cycle, gang = self.cycle, self.gang
        usage = without(cycle.usage, victims)
        verdict = check_quota(self.team, gang.usage, usage, cycle.pool.teams)
        if not isinstance(verdict, Fits | Borrows):
            return None
        self.hold(victims)
        return fits_topology(cycle.capacity, len(gang.pods), gang.shape, gang.topology) or None

    def place(self, victims: Sequence[Admitted]) -> TopologyPlacement | TopologyWait:
        """Where the gang goes once ``victims`` are gone."""
        self.hold(victims)
        gang = self.gang
        return place_topology(self.cycle.capacity, gang.pods, gang.shape, gang.topology)

    def hold(self, victims: Sequence[Admitted]) -> None:
        """Make exactly ``victims``' pods given back (the rest of the cycle's capacity as is)."""
        wanted = {victim.key: victim for victim in victims}
        for key in [k for k in self.given if k not in wanted]:
            self._move(self.given.pop(key), give=False)
        for key, victim in wanted.items():
            if key not in self.given:
                self.given[key] = victim
                self._move(victim, give=True)


def _domain_at(topology: Topology, level: int) -> Callable[[str], str | None]:
    """Node name -> an id of its domain at ``level`` (``None`` for a node outside the topology)."""
    names = {
        name: str(domain)
        for name, domain in zip(topology.node_names, topology.member[level], strict=True)
    }
    return names.get

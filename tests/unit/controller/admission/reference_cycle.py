"""The admission cycle as it was before it was made incremental: what ``decide`` must still decide.

A reference for the property tests, kept deliberately plain: capacity rebuilt from ``Pool``'s
free capacity every cycle, slot counts caught up per shape, the finest fitting level found by
descending the domain tree and the tightest domain by scanning it, candidate victims filtered from
every admitted gang for each preemptor, and a victim search whose trials give the victims' pods
back to the cycle's capacity. Only the cycle's memo of failed gangs (same team, shape, size,
usage, topology request, priority, policy and message; a Quota wait only until the next gang is
admitted, as its message names the usage) answers for a gang without searching.
The pure rules the optimised cycle still shares unchanged (quota verdicts, slots of a node, rank
order, shortfall text, extras, the victim search order) are imported; what the optimisation
replaced (spreading inside a domain among them) is spelled out here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from torchgate.controller.admission.decide import (
    Admit,
    Outcome,
    Pool,
    Preempt,
    Wait,
    WaitingGang,
)
from torchgate.controller.admission.preemption import (
    Preemptor,
    cheapest,
    group_by_domain,
    is_protected,
    may_preempt,
    victim_order,
)
from torchgate.controller.admission.quota import (
    Admitted,
    Borrows,
    Fits,
    QuotaWait,
    Reclaims,
    borrowing_teams,
    check_quota,
    reclaim_candidates,
    still_borrowing,
    usage_by_team,
    without,
)
from torchgate.controller.admission.topology import (
    ROOT,
    Shape,
    Topology,
    TopologyPlacement,
    TopologyWait,
    assign_ranks,
    explain_shortfall,
    place_extras,
    slots_of,
)
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.pool import TeamQuota, TopologyRequest
from torchgate.pytorchjob.units import Units

# ------------------------------------------------------------------ capacity and placement


class ReferenceCapacity:
    """Free capacity for one cycle, slot counts per shape caught up from a log of changes."""

    def __init__(self, topology: Topology, free: Mapping[str, Units]) -> None:
        self.topology = topology
        self.free: list[dict[str, int]] = [dict(free.get(n) or {}) for n in topology.node_names]
        self._node_slots: dict[Shape, list[int]] = {}
        self._domain_slots: dict[Shape, list[int]] = {}
        self._changed: list[int] = []
        self._seen: dict[Shape, int] = {}

    def node_slots(self, shape: Shape) -> list[int]:
        found = self._node_slots.get(shape)
        if found is None:
            allowed, names = shape.allowed, self.topology.node_names
            found = self._node_slots[shape] = [
                slots_of(free, shape) if allowed is None or names[i] in allowed else 0
                for i, free in enumerate(self.free)
            ]
            self._seen[shape] = len(self._changed)
        elif self._seen[shape] < len(self._changed):
            totals = self._domain_slots.get(shape)
            allowed, names = shape.allowed, self.topology.node_names
            for node in set(self._changed[self._seen[shape] :]):
                if allowed is not None and names[node] not in allowed:
                    continue
                after = slots_of(self.free[node], shape)
                delta = after - found[node]
                if delta:
                    found[node] = after
                    if totals is not None:
                        for domain in self.topology.ancestors[node]:
                            totals[domain] += delta
            self._seen[shape] = len(self._changed)
        return found

    def domain_slots(self, shape: Shape) -> list[int]:
        per_node = self.node_slots(shape)
        found = self._domain_slots.get(shape)
        if found is None:
            totals = [0] * len(self.topology.domains)
            for node, slots in enumerate(per_node):
                if slots:
                    for domain in self.topology.ancestors[node]:
                        totals[domain] += slots
            found = self._domain_slots[shape] = totals
        return found

    def free_for(self, shape: Shape) -> list[dict[str, int]]:
        allowed, names = shape.allowed, self.topology.node_names
        return [free for i, free in enumerate(self.free) if allowed is None or names[i] in allowed]

    def take(self, nodes: Mapping[str, str], requests: Mapping[str, Units]) -> None:
        self._adjust(nodes, requests, -1)

    def give(self, nodes: Mapping[str, str], requests: Mapping[str, Units]) -> None:
        self._adjust(nodes, requests, 1)

    def _adjust(self, nodes: Mapping[str, str], requests: Mapping[str, Units], sign: int) -> None:
        for pod, node_name in nodes.items():
            node = self.topology.index.get(node_name)
            if node is None:
                continue
            free = self.free[node]
            for name, amount in (requests.get(pod) or {}).items():
                free[name] = free.get(name, 0) + sign * amount
            self._changed.append(node)


def _fitting_level(topology: Topology, slots: Sequence[int], count: int) -> tuple[int, list[int]]:
    if slots[ROOT] < count:
        return -1, []
    level, fitting = -1, [ROOT]
    while True:
        below = [
            child
            for domain in fitting
            for child in topology.domains[domain].children
            if slots[child] >= count
        ]
        if not below:
            return level, fitting
        level, fitting = level + 1, below


def _place(
    capacity: ReferenceCapacity, pods: Sequence[str], shape: Shape, request: TopologyRequest
) -> TopologyPlacement | TopologyWait:
    topology = capacity.topology
    count = len(pods)
    node_slots = capacity.node_slots(shape)
    domain_slots = capacity.domain_slots(shape)
    if domain_slots[ROOT] < count:
        return TopologyWait(
            "Capacity",
            f"waiting for room for {count} pod(s): {domain_slots[ROOT]} fit in the pool now",
        )
    level, fitting = _fitting_level(topology, domain_slots, count)
    wanted = request.level
    if wanted is not None and wanted >= len(topology.levels):
        wanted = None
    if wanted is not None and request.required and level < wanted:
        largest = max((domain_slots[d] for d in topology.by_level[wanted]), default=0)
        return TopologyWait(
            "Topology",
            f"waiting for one {topology.levels[wanted]} domain with room for {count} pod(s): "
            f"the roomiest has room for {largest}",
        )
    domains = topology.domains
    domain = min((domain_slots[d], domains[d].node_count, domains[d].key, d) for d in fitting)[-1]
    spread = _distribute(topology, node_slots, domain_slots, domain, count)
    return TopologyPlacement(
        nodes=assign_ranks(topology, pods, spread),
        domain=topology.domain_name(domain),
        level=level,
        preference_met=wanted is None or level >= wanted,
    )


def _distribute(
    topology: Topology,
    node_slots: Sequence[int],
    domain_slots: Sequence[int],
    domain: int,
    count: int,
) -> list[tuple[int, int]]:
    """``topology.distribute`` as first written: every child filtered again for each share."""
    found = topology.domains[domain]
    units: list[tuple[int, int, int, tuple[str, ...], bool, int]] = []
    for child in found.children:
        if domain_slots[child]:
            d = topology.domains[child]
            units.append((domain_slots[child], d.node_count, 0, d.key, True, child))
    for node in found.nodes:
        if node_slots[node]:
            units.append((node_slots[node], 1, 1, (topology.node_names[node],), False, node))
    out: list[tuple[int, int]] = []
    remaining = count
    roomiest = sorted(units, key=lambda u: (-u[0], u[1], u[2], u[3]))
    taken: set[tuple[bool, int]] = set()
    while remaining > 0:
        holding = [u for u in units if u[0] >= remaining and (u[4], u[5]) not in taken]
        if holding:
            unit = min(holding)  # tightest: slots, nodes, domains before nodes, key
            share = remaining
        else:
            unit = next(u for u in roomiest if (u[4], u[5]) not in taken)
            share = unit[0]
        taken.add((unit[4], unit[5]))
        if unit[4]:
            out.extend(_distribute(topology, node_slots, domain_slots, unit[5], share))
        else:
            out.append((unit[5], share))
        remaining -= share
    return out


def place_topology(
    capacity: ReferenceCapacity, pods: Sequence[str], shape: Shape, request: TopologyRequest
) -> TopologyPlacement | TopologyWait:
    if shape.preferred is not None:
        first = _place(capacity, pods, shape.narrowed(), request)
        if isinstance(first, TopologyPlacement) and first.preference_met:
            return first
    return _place(capacity, pods, shape, request)


def fits_topology(
    capacity: ReferenceCapacity, count: int, shape: Shape, request: TopologyRequest
) -> bool:
    slots = capacity.domain_slots(shape)
    if slots[ROOT] < count:
        return False
    wanted = request.level
    if not request.required or wanted is None or wanted >= len(capacity.topology.levels):
        return True
    return any(slots[domain] >= count for domain in capacity.topology.by_level[wanted])


def candidates(
    preemptor: Preemptor,
    admitted: Sequence[Admitted],
    teams: Mapping[str, TeamQuota],
    usage: Mapping[str, Mapping[str, int]],
    pool: Pool,
    now: float,
) -> list[Admitted]:
    if not preemptor.preempts:
        return []
    borrowers = borrowing_teams(teams, usage)
    out = [
        victim
        for victim in admitted
        if may_preempt(preemptor, victim, teams, borrowers)
        and not is_protected(victim, pool.preemption, now)
    ]
    return sorted(out, key=victim_order)


class ReferenceShortfall:
    """``explain_shortfall`` over every allowed node, phrased when read (as ``Shortfall`` was)."""

    def __init__(self, capacity: ReferenceCapacity, gang: WaitingGang) -> None:
        self.capacity, self.gang = capacity, gang

    def __str__(self) -> str:
        gang = self.gang
        return explain_shortfall(
            self.capacity.free_for(gang.shape),
            gang.shape,
            gang.requests.values(),
            where=gang.where,
            gpu_resource=gang.gpu_resource,
        )


# ------------------------------------------------------------------ the cycle


@dataclass(slots=True)
class _Cycle:
    pool: Pool
    now: float
    capacity: ReferenceCapacity
    admitted: list[Admitted]
    usage: dict[str, dict[str, int]]
    misses: dict[tuple[object, ...], Wait] = field(default_factory=dict)
    quota_misses: dict[tuple[object, ...], Wait] = field(default_factory=dict)
    fresh: set[JobKey] = field(default_factory=set)

    def admit(self, gang: WaitingGang, nodes: Mapping[str, str], *, extras: bool) -> dict[str, str]:
        self.capacity.take(nodes, gang.requests)
        placed, requests = dict(nodes), gang.requests
        if extras and gang.extras:
            one_per_node = gang.shape.one_per_node
            placed |= place_extras(
                self.capacity,  # type: ignore[arg-type]
                nodes,
                gang.extras,
                one_per_node=one_per_node,
            )
            requests = {**requests, **{pod.name: pod.requests for pod in gang.extras}}
        if gang.team is not None:
            usage = self.usage.setdefault(gang.team, {})
            for name, amount in gang.usage.items():
                usage[name] = usage.get(name, 0) + amount
            self.quota_misses.clear()  # a Quota wait's message names the usage
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


def reference_decide(pool: Pool, waiting: Sequence[WaitingGang], now: float) -> list[Outcome]:
    """The cycle as it was; outcomes in admission order."""
    topology = pool.topology
    free = {name: pool.capacity.free[i] for i, name in enumerate(topology.node_names)}
    cycle = _Cycle(
        pool=pool,
        now=now,
        capacity=ReferenceCapacity(topology, free),
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


def _decide_one(cycle: _Cycle, gang: WaitingGang, *, borrow: bool) -> Outcome | None:
    memo = (
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
    missed = cycle.misses.get(memo) or cycle.quota_misses.get(memo)
    if missed is not None:
        return Wait(gang.key, missed.kind, missed.reason)
    team = cycle.pool.teams.get(gang.team) if gang.team is not None else None
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
        reason: object = placed.message
        if placed.kind == "Capacity":
            reason = gang.no_node or ReferenceShortfall(cycle.capacity, gang)
        obstacle = Wait(gang.key, placed.kind, reason)  # type: ignore[arg-type]
    elif isinstance(verdict, QuotaWait):
        obstacle = Wait(gang.key, "Quota", verdict.message)
    else:
        obstacle = Wait(gang.key, "Quota", "waiting for borrowed quota to be returned")
    preempted = _preempt(cycle, gang, team, within_nominal=isinstance(verdict, Fits | Reclaims))
    if preempted is not None:
        cycle.misses.clear()
        cycle.quota_misses.clear()
        return preempted
    (cycle.quota_misses if obstacle.kind == "Quota" else cycle.misses)[memo] = obstacle
    return obstacle


def _preempt(
    cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None, *, within_nominal: bool
) -> Preempt | None:
    pool = cycle.pool
    preemptor = Preemptor(gang.team, gang.priority, gang.preempts)
    settled = [a for a in cycle.admitted if a.key not in cycle.fresh]
    ordered = candidates(preemptor, settled, pool.teams, cycle.usage, pool, cycle.now)
    if team is not None and within_nominal:
        reclaimable = reclaim_candidates(
            team,
            gang.usage,
            settled,
            cycle.usage,
            pool.teams,
            protected=lambda v: is_protected(v, pool.preemption, cycle.now),
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

    capacity = cycle.capacity

    def hold(victims: Sequence[Admitted], sign: int) -> None:
        for victim in victims:
            if sign > 0:
                capacity.give(victim.nodes or {}, victim.requests or {})
            else:
                capacity.take(victim.nodes or {}, victim.requests or {})

    def trial(victims: Sequence[Admitted]) -> bool | None:
        if not victims:
            return None
        verdict = check_quota(team, gang.usage, without(cycle.usage, victims), pool.teams)
        if not isinstance(verdict, Fits | Borrows):
            return None
        hold(victims, 1)
        try:
            return fits_topology(capacity, len(gang.pods), gang.shape, gang.topology) or None
        finally:
            hold(victims, -1)

    groups = [ordered]
    level = gang.topology.level
    if gang.topology.required and level is not None and level < len(pool.topology.levels):
        topology = pool.topology
        names = {
            name: str(domain)
            for name, domain in zip(topology.node_names, topology.member[level], strict=True)
        }
        groups = group_by_domain(ordered, names.get)
    choice = cheapest(groups, trial, cycle.now, allowed=allowed)
    if choice is None:
        return None
    hold(choice.victims, 1)
    placed = place_topology(capacity, gang.pods, gang.shape, gang.topology)
    hold(choice.victims, -1)
    if not isinstance(placed, TopologyPlacement):
        return None
    gone = {v.key for v in choice.victims}
    cycle.admitted = [a for a in cycle.admitted if a.key not in gone]
    cycle.usage = without(cycle.usage, choice.victims)
    cycle.admit(gang, placed.nodes, extras=False)
    return Preempt(gang.key, tuple(sorted(gone)), placed.nodes, placed.domain)

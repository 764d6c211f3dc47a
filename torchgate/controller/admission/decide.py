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
   per domain of a required topology level; a gang of several pod shapes counts its lead pods
   first, ``topology`` rule 9, and its largest request per resource when its other pods do not
   fit beside them then). ``Preempt`` names the victims and the placement to
   reserve for the preemptor while they terminate; what the victims free beyond it is not offered
   to anyone else in this cycle (their pods are still there). A gang admitted in this cycle is
   never a victim in it.
4. Otherwise it waits (``Wait``) with the reason of the first obstacle: ``Quota``, ``Capacity``
   or ``Topology``. A ``Capacity`` wait says what is short (``topology.Shortfall``); either
   says why the gang can never be placed, when it cannot (``WaitingGang.no_node``).
5. Backfill never delays the head of the queue: each of the first gangs that wait for room gets
   the nodes it can have at the earliest time gangs with a known end free them, and later gangs
   use those nodes only when they end before then (``backfill``; every decision above goes
   through it).
6. When the first waiting gangs run equally long and not all of them fit, the ones that fill the
   free room best start and the others wait (``packing``): the head always starts. The cycle is
   decided again without that choice when a chosen gang is not admitted after all. When the
   admitter allows it (``Pool.hold_waves``), every gang waits while part of a freed wave of such
   gangs still runs, so the wave is packed whole.

Cost: a cycle grows with the gangs it decides and what it changes, not with the pool.

- It decides on a fork of the capacity the admitter keeps (``Pool.capacity``, updated from
  events), so it copies nothing per node; placement asks per-level slot indexes
  (``topology.Capacity``) instead of walking the domains. The usage by team it starts from is
  the totals the admitter's ledger keeps from events (``Pool.totals``), not a sum over every
  running gang.
- Within a cycle free capacity only shrinks and quota usage only grows, except through a
  preemption, so a gang of the same team, shape, size, usage, topology request, priority and
  policy (and run limit: ``backfill`` rule 4) as one that already failed fails too and is
  answered from a memo (cleared by a preemption). Gangs answered from the memo share its
  reason, so their messages must be the same too: what a message names (nodes, GPU resource,
  the pod no node admits) is part of its key. A Quota wait's message names the team's usage and
  the cohort's idle quota, which change with every gang admitted, so Quota waits are memoised
  apart (``quota_misses``) and forgotten with each admission. A gang that quota keeps out even
  with every candidate victim gone answers, until the usage by team changes, for every gang of
  the same team, usage, priority and policy whatever its shape (``_beyond_quota``: the busy
  pool's common case, every team at its quota).
- Victim searches are decided per *kind* of preemptor (``_candidates``: team, priority, policy,
  what it reclaims, which teams borrow how much), which shares one candidate list, built from an
  index of the running gangs by team (``preemption.Candidates``) rather than a pass over all.
  A list, its victim groups per required level (with their floors, their search order and an
  index of them by domain: ``_Search``) and what its gangs hold per team are kept through the
  cycle's preemptions: a preemption drops its victims from them, and only the groups of the
  domains the victims held pods in are built again and put back in place, in the groups' order
  and in their order by floor (``_CandidateList``, ``_Search``), so a search's order is read,
  as far as the search goes, without every group's floor sorted again. Which teams borrow, and
  how much, is kept until the usage by team changes (``_Cycle.borrowing``).
  A search that found nothing answers for every later gang of its kind that needs at least as
  much (``_Failures``); none runs when the gang would not fit the pool even empty
  (``Pool.empty``) or when quota would not let it in even with every candidate gone; a domain's
  group is not searched when no domain it touches could hold the gang even with every candidate
  there gone (``_Reach``); trials count what victims give back beside the capacity
  (``_Gains``). Each shortcut answers exactly as the full search would: the trial is monotone in
  the victims.
- A trial moves no pods: on a node only one gang of the search's candidate list holds pods on,
  a victim frees the same slots whatever else is evicted, so each victim's own gain (for the
  pool and per domain of the required level) is counted once per list and kept while the
  cycle's capacity on its nodes does not change (``_KeptGains``); only nodes several of the
  list's gangs share are summed per node (``_Gains``, ``_Crowding``). The greedy pass tries no
  set whose victims' own gains, plus what their shared nodes could gain at most, fall short of
  the slots the pool lacks (``preemption.Lack``).
  Nor does it copy the usage by team: quota lets the gang in exactly when the victims of its
  team and of its cohort free at least two amounts per resource fixed when the search starts
  (``_QuotaRoom``), so a trial adds a victim's usage to two sums.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Final, Literal

from torchgate.controller.admission.backfill import Reservations
from torchgate.controller.admission.packing import (
    HELD_BACK,
    PACKING_WINDOW,
    WAVE_HELD,
    held_back,
    wave_freeing,
)
from torchgate.controller.admission.preemption import (
    Candidates,
    Cost,
    Group,
    Lack,
    Preemptor,
    SearchOrder,
    cheapest,
    domain_groups,
)
from torchgate.controller.admission.quota import (
    Admitted,
    Borrows,
    Fits,
    QuotaWait,
    Reclaims,
    TeamTotals,
    borrowing_teams,
    check_quota,
    cohort_totals,
    needed_resources,
    reclaimable_teams,
    usage_by_team,
    without,
)
from torchgate.controller.admission.topology import (
    ROOT,
    Capacity,
    Mixed,
    OptionalPod,
    Shape,
    Shortfall,
    Topology,
    TopologyPlacement,
    TopologyWait,
    place_extras,
    place_topology,
    slots_of,
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
        mixed: ``topology.mixed_of`` its pods' requests when they have several shapes (its
            lead pods placed first, the others beside them: ``topology`` rule 9), else ``None``.
        topology: The level it requires or prefers.
        preempts: ``False`` when its PriorityClass has ``preemptionPolicy: Never``.
        extras: Its pods beyond ``minAvailable`` (elastic workers), placed only where they fit.
        where: How messages name the nodes its pods may use (``nodes.pool_of``).
        gpu_resource: What its policy counts as GPUs (messages name it first).
        no_node: Why it can never be placed, if so: no node may take one of its pods
            (``nodes.no_eligible_node``, ``no_node_large_enough``) or the nodes it may use
            could not hold it whole even empty (``nodes.gang_too_large``).
        run_limit: Seconds it may run once started (``runPolicy.activeDeadlineSeconds``), if
            set: whether it may backfill before the head gang (``backfill`` rule 4).
    """

    key: JobKey
    team: str | None
    priority: int
    created: str
    pods: tuple[str, ...]
    requests: Mapping[str, Units]
    usage: Units
    shape: Shape
    mixed: Mixed | None = None
    topology: TopologyRequest = field(default_factory=TopologyRequest)
    preempts: bool = True
    extras: tuple[OptionalPod, ...] = ()
    where: str = "in the cluster"
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE
    no_node: str | None = None
    run_limit: float | None = None

    def order(self) -> tuple[int, str, str, str]:
        """Its place in the cycle (``pool.admission_order``)."""
        return admission_order(self.priority, self.created, self.key)


@dataclass(frozen=True, slots=True)
class Pool:
    """The facts of one cycle.

    Attributes:
        capacity: Free capacity per node (allocatable minus live pods and reservations) over
            ``topology.build_topology`` of the pool's nodes; the cycle decides on a fork of it
            and leaves it as it was, so the admitter keeps one across cycles.
        teams: Team name -> quota.
        admitted: Gangs holding capacity now (for quota usage and as preemption candidates).
        totals: ``quota.TeamTotals`` of ``admitted``, when the caller keeps them (the admitter's
            ledger does, from events), so the cycle does not sum every running gang's usage;
            ``None``: summed from ``admitted``. Invariant: equal to ``TeamTotals.of(admitted)``.
        preemption: The admin's protection settings.
        empty: The same nodes with nothing on them (allocatable), when known: no set of
            victims frees more than that (a node never holds more than it allocates), so a gang
            it cannot hold searches for none.
        hold_waves: Whether every gang may wait for the rest of a freed wave (rule 6,
            ``packing.wave_freeing``); the admitter allows it for a bounded time.
    """

    capacity: Capacity
    teams: Mapping[str, TeamQuota] = field(default_factory=dict)
    admitted: Sequence[Admitted] = ()
    totals: TeamTotals | None = None
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    empty: Capacity | None = None
    hold_waves: bool = False

    @property
    def topology(self) -> Topology:
        """The domain tree of the pool's nodes."""
        return self.capacity.topology


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
    """Evict ``victims`` (whole gangs) and reserve ``nodes`` for the preemptor meanwhile.

    ``domain`` is the smallest topology domain holding ``nodes``, as ``Admit``'s.
    """

    key: JobKey
    victims: tuple[JobKey, ...]
    nodes: Mapping[str, str]
    domain: str


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
    usage: dict[str, dict[str, int]]
    misses: dict[tuple[object, ...], Wait] = field(default_factory=dict)
    # The Quota waits of ``misses``' memo, until the usage by team changes (their messages name it)
    quota_misses: dict[tuple[object, ...], Wait] = field(default_factory=dict)
    # ``_beyond_quota``: (team, usage, priority, policy) -> the Quota wait's message, until the
    # usage by team changes (a gang admitted or preempted for)
    beyond_quota: dict[tuple[object, ...], str] = field(default_factory=dict)
    # The gangs admitted before the cycle and not preempted in it, indexed as candidates (a gang
    # admitted in this cycle is never a victim in it); candidate lists per kind of preemptor
    # with what is derived from them, kept through preemptions (``_CandidateList``), and the
    # victims preempted so far, in order (the lists catch up with them when next asked for).
    # Until the next preemption (``_settle``): victim searches that failed per kind of
    # preemptor (``_Failures``).
    settled: Candidates | None = None
    lists: dict[tuple[object, ...], _CandidateList] = field(default_factory=dict)
    kinds: dict[tuple[object, ...], _CandidateList] = field(default_factory=dict)  # the same
    gone: list[JobKey] = field(default_factory=list)
    failed: dict[tuple[object, ...], _Failures] = field(default_factory=dict)
    reach: dict[tuple[object, ...], dict[str, int]] = field(default_factory=dict)  # ``_Reach``
    domains: dict[int, dict[JobKey, frozenset[str]]] = field(default_factory=dict)  # per level
    spreads: dict[JobKey, list[tuple[int, Units]]] = field(default_factory=dict)  # ``spread``
    own_gains: _KeptGains | None = None  # ``kept_gains``
    borrowed: _Borrowed | None = None  # ``borrowing``, until the usage by team changes

    def team(self, gang: WaitingGang) -> TeamQuota | None:
        return self.pool.teams.get(gang.team) if gang.team is not None else None

    def spread(self, victim: Admitted) -> list[tuple[int, Units]]:
        """Node index -> what the victim's pods there take, summed (kept for the cycle).

        A node with one of its pods holds that pod's requests as they are (read, never changed).
        """
        found = self.spreads.get(victim.key)
        if found is None:
            index, requests = self.capacity.topology.index, victim.requests or {}
            per_node: dict[int, Units] = {}
            sums: dict[int, dict[str, int]] = {}  # nodes holding several of its pods
            for pod, node_name in (victim.nodes or {}).items():
                node = index.get(node_name)
                if node is None:
                    continue
                asked = requests.get(pod) or {}
                held = per_node.get(node)
                if held is None:
                    per_node[node] = asked
                    continue
                total = sums.get(node)
                if total is None:
                    total = per_node[node] = sums[node] = dict(held)
                for name, amount in asked.items():
                    total[name] = total.get(name, 0) + amount
            found = self.spreads[victim.key] = list(per_node.items())
        return found

    def borrowing(self) -> _Borrowed:
        """The teams over their nominal quota and what they hold, for the usage by team now."""
        if self.borrowed is None:
            borrowers = borrowing_teams(self.pool.teams, self.usage)
            held = tuple(
                sorted((name, tuple(sorted(self.usage[name].items()))) for name in borrowers)
            )
            self.borrowed = _Borrowed(borrowers, held)
        return self.borrowed

    def kept_gains(self) -> _KeptGains:
        """Victims' own gains kept for the cycle (``_KeptGains``)."""
        if self.own_gains is None:
            self.own_gains = _KeptGains(self.capacity)
        return self.own_gains

    def admit(self, gang: WaitingGang, nodes: Mapping[str, str], *, extras: bool) -> dict[str, str]:
        """Take the gang's room (and, with ``extras``, place its optional pods); where it went."""
        self.capacity.take(nodes, gang.requests)
        placed = dict(nodes)
        if extras and gang.extras:
            one_per_node = gang.shape.one_per_node
            placed |= place_extras(self.capacity, nodes, gang.extras, one_per_node=one_per_node)
        if gang.team is not None:
            usage = self.usage.setdefault(gang.team, {})
            for name, amount in gang.usage.items():
                usage[name] = usage.get(name, 0) + amount
            self.beyond_quota.clear()
            self.quota_misses.clear()
            self.borrowed = None
        return placed


@dataclass(frozen=True, slots=True)
class _Borrowed:
    """The teams over their nominal quota (``quota.borrowing_teams``), and what each holds."""

    teams: frozenset[str]
    held: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # sorted by team, then resource


def decide(pool: Pool, waiting: Sequence[WaitingGang], now: float) -> list[Outcome]:
    """One admission cycle (see the module docstring); outcomes in admission order."""
    ordered = sorted(waiting, key=WaitingGang.order)
    if pool.hold_waves:  # rule 6
        ends = (gang.ends_by for gang in pool.admitted if gang.ends_by is not None)
        if wave_freeing(pool.capacity, ordered, ends, now):
            return [Wait(gang.key, "Capacity", WAVE_HELD) for gang in ordered]
    held = held_back(pool.capacity, ordered)  # rule 6
    if held:
        outcomes = _decide(pool, ordered, now, held)
        chosen = (gang.key for gang in ordered[:PACKING_WINDOW] if gang.key not in held)
        if all(isinstance(outcomes[key], Admit) for key in chosen):
            return [outcomes[gang.key] for gang in ordered]
    outcomes = _decide(pool, ordered, now, frozenset())
    return [outcomes[gang.key] for gang in ordered]


def _decide(
    pool: Pool, ordered: Sequence[WaitingGang], now: float, held: frozenset[JobKey]
) -> dict[JobKey, Outcome]:
    """Rules 1-5 over ``ordered`` (admission order), the ``held`` gangs waiting (rule 6)."""
    cycle = _Cycle(
        pool=pool,
        now=now,
        capacity=pool.capacity.fork(),
        usage=_usage_by_team(pool),
    )
    outcomes: dict[JobKey, Outcome] = {key: Wait(key, "Capacity", HELD_BACK) for key in held}
    reservations = Reservations(cycle.capacity, pool.admitted, now)  # rule 5

    def within(gang: WaitingGang) -> Outcome | None:
        return _decide_one(cycle, gang, borrow=False)

    def borrowing(gang: WaitingGang) -> Outcome | None:
        return _decide_one(cycle, gang, borrow=True)

    for gang in ordered:
        if gang.key in held:
            continue
        first = reservations.decide(gang, within)
        if first is not None:
            outcomes[gang.key] = first
    for gang in ordered:
        if gang.key not in outcomes:
            outcomes[gang.key] = reservations.decide(gang, borrowing) or Wait(
                gang.key, "Quota", "waiting for quota"
            )
    return outcomes


def _usage_by_team(pool: Pool) -> dict[str, dict[str, int]]:
    """What each team's admitted gangs hold (rule 1): the kept totals' copy when given."""
    if pool.totals is None:
        return usage_by_team(pool.admitted)
    return {team: dict(used) for team, used in pool.totals.usage.items()}


def _memo_key(gang: WaitingGang) -> tuple[object, ...]:
    """What a gang's memoised outcome depends on (rule 1's memo, ``_decide_one``).

    The topology request goes in as its fields: a tuple of plain values hashes and compares in
    C, and the memo is looked up several times per gang.
    """
    return (
        gang.team,
        gang.shape,
        len(gang.pods),
        tuple(sorted(gang.usage.items())),
        gang.topology.level,
        gang.topology.required,
        gang.priority,
        gang.preempts,
        gang.where,
        gang.gpu_resource,
        gang.no_node,
        gang.run_limit,  # whether it may use the head's reserved nodes (``backfill`` rule 4)
        gang.mixed,  # its pods' shapes in rank order, when several (``topology`` rule 9)
    )


def _decide_one(cycle: _Cycle, gang: WaitingGang, *, borrow: bool) -> Outcome | None:
    """The gang's outcome; ``None`` when it would borrow and ``borrow`` is off (rule 1)."""
    memo = _memo_key(gang)
    # each lookup hashes the key: an empty memo (the common case) is not asked
    missed = cycle.misses.get(memo) if cycle.misses else None
    if missed is None and cycle.quota_misses:
        missed = cycle.quota_misses.get(memo)
    if missed is not None:
        return Wait(gang.key, missed.kind, missed.reason)
    by_quota = memo[0], memo[3], gang.priority, gang.preempts  # team, usage, priority, policy
    beyond = cycle.beyond_quota.get(by_quota)
    if beyond is not None:
        return Wait(gang.key, "Quota", beyond)
    team = cycle.team(gang)
    verdict = check_quota(team, gang.usage, cycle.usage, cycle.pool.teams)
    if isinstance(verdict, Borrows) and not borrow:
        return None
    obstacle: Wait | None = None
    if isinstance(verdict, Fits | Borrows):
        placed = place_topology(cycle.capacity, gang.pods, gang.shape, gang.topology, gang.mixed)
        if isinstance(placed, TopologyPlacement):
            nodes = cycle.admit(gang, placed.nodes, extras=True)
            borrowed = verdict.amount if isinstance(verdict, Borrows) else {}
            return Admit(gang.key, nodes, borrowed, placed.domain, placed.preference_met)
        reason: str | Shortfall
        if gang.no_node is not None:
            reason = gang.no_node  # whatever the wait's kind: it can never be placed (rule 4)
        elif placed.kind == "Capacity":
            reason = _shortfall(cycle, gang)
        else:
            reason = placed.message
        obstacle = Wait(gang.key, placed.kind, reason)
    elif isinstance(verdict, QuotaWait):
        obstacle = Wait(gang.key, "Quota", verdict.message)
        if _beyond_quota(cycle, gang, team):
            cycle.beyond_quota[by_quota] = verdict.message
            cycle.quota_misses[memo] = obstacle
            return obstacle
    else:
        obstacle = Wait(gang.key, "Quota", "waiting for borrowed quota to be returned")
    preempted = _preempt(cycle, gang, team, within_nominal=isinstance(verdict, Fits | Reclaims))
    if preempted is not None:
        cycle.misses.clear()
        cycle.quota_misses.clear()
        return preempted
    (cycle.quota_misses if obstacle.kind == "Quota" else cycle.misses)[memo] = obstacle
    return obstacle


def _beyond_quota(cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None) -> bool:
    """Whether quota keeps the gang out even with every candidate victim gone (rule 1).

    That depends only on its team, usage, priority and policy and on the usage by team, so it
    answers for every gang alike in those, whatever its shape, until the usage changes.
    """
    listed, _ = _candidates(cycle, gang, team, within_nominal=False)
    return not listed.victims or not _quota_with_all_gone(cycle, gang, team, listed)


def _shortfall(cycle: _Cycle, gang: WaitingGang) -> Shortfall:
    """What a ``Capacity`` wait of a gang that some node could take tells the user (rule 4)."""
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
    """Rule 3; a gang of several pod shapes first searches victims for its leads' room.

    Its victims are counted by its leads (``topology`` rule 9: they are placed first, the other
    pods beside them), then, when the whole gang is not placed with those gone, by its largest
    request per resource, as a gang of one shape: so it preempts whenever that count would.
    """
    if gang.mixed is not None:
        leads = replace(
            gang, pods=tuple(pod for pod, _ in gang.mixed.leads), shape=gang.mixed.lead, mixed=None
        )
        found = _preempt_counted(cycle, gang, leads, team, within_nominal=within_nominal)
        if found is not None:
            return found
    return _preempt_counted(cycle, gang, gang, team, within_nominal=within_nominal)


def _preempt_counted(
    cycle: _Cycle,
    gang: WaitingGang,
    counted: WaitingGang,
    team: TeamQuota | None,
    *,
    within_nominal: bool,
) -> Preempt | None:
    """Victims with which ``counted``'s pods fit (and quota lets them in), and ``gang`` placed."""
    pool = cycle.pool
    if _never_fits(pool, counted):
        return None
    listed, kind = _candidates(cycle, counted, team, within_nominal=within_nominal)
    if not listed.victims:
        return None
    failures = cycle.failed.setdefault(kind, _Failures())
    if failures.covers(counted):
        return None  # a gang needing no more than this one found no victims (rule 3)
    if not _quota_with_all_gone(cycle, counted, team, listed):
        failures.add(counted)
        return None
    groups = _groups(cycle, counted, listed)
    search = listed.search(_required_level(pool.topology, counted), groups)
    reach = _Reach(cycle, counted, search, kind)

    usage_now = cycle.usage

    def allowed(victim: Admitted, chosen: Sequence[Admitted]) -> bool:
        if victim.team is None or victim.team == gang.team or victim.team not in pool.teams:
            return True
        return _still_borrowing(victim, chosen, usage_now, pool.teams)

    trial = _Trial(cycle, counted, team, listed)
    choice = cheapest(
        search.victims,
        trial,
        cycle.now,
        allowed=allowed,
        hopeless=reach.hopeless,
        order=search.order(),
        lack=trial.lack(),
    )
    if choice is None:
        failures.add(counted)
        return None
    placed = trial.place(choice.victims, gang)
    if not isinstance(placed, TopologyPlacement):
        return None
    gone = {v.key for v in choice.victims}
    cycle.usage = without(cycle.usage, choice.victims)
    cycle.beyond_quota.clear()
    cycle.borrowed = None
    _settle(cycle, choice.victims)
    cycle.admit(gang, placed.nodes, extras=False)
    return Preempt(gang.key, tuple(sorted(gone)), placed.nodes, placed.domain)


def _settle(cycle: _Cycle, victims: Sequence[Admitted]) -> None:
    """``victims`` were preempted: drop them from the candidates; forget failed searches."""
    assert cycle.settled is not None, "victims come from the candidates"
    cycle.settled.remove(victims)
    cycle.gone.extend(victim.key for victim in victims)
    cycle.failed.clear()


def _candidates(
    cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None, *, within_nominal: bool
) -> tuple[_CandidateList, tuple[object, ...]]:
    """The gang's victim candidates, reclaimable first (rule 3), and what searches depend on.

    The list depends only on the preemptor's team, priority and policy, on whether it reclaims
    (what, from which teams), and on which teams borrow: gangs alike in all that share one list,
    kept through the cycle's preemptions (``_CandidateList``). Failed searches (``_Failures``)
    depend on how much those teams borrow too, which is part of the returned kind; the teams it
    reclaims from are a function of the kind, so a list is found by its kind first.
    """
    pool = cycle.pool
    if cycle.settled is None:
        cycle.settled = Candidates(pool.admitted, pool.teams, pool.preemption, cycle.now)
    borrowed = cycle.borrowing()
    borrowers = borrowed.teams
    needed = needed_resources(team, gang.usage) if team is not None and within_nominal else None
    kind: tuple[object, ...] = (gang.team, gang.priority, gang.preempts, needed, borrowed.held)
    listed = cycle.kinds.get(kind)
    if listed is None:
        lenders = (
            reclaimable_teams(team, needed, cycle.usage, pool.teams)
            if team is not None and needed is not None
            else None
        )
        same_list = (*kind[:-1], borrowers, lenders)
        listed = cycle.lists.get(same_list)
        if listed is None:
            preemptor = Preemptor(gang.team, gang.priority, gang.preempts)
            found = cycle.settled.of(preemptor, borrowers)
            if lenders is not None and needed is not None:
                reclaimable = cycle.settled.reclaimable(lenders, needed)
                chosen = {v.key for v in reclaimable}
                found = reclaimable + [v for v in found if v.key not in chosen]
            listed = cycle.lists[same_list] = _CandidateList(found, cycle.now, len(cycle.gone))
        cycle.kinds[kind] = listed
    listed.catch_up(cycle.gone, cycle.domains)
    return listed, kind


def _groups(cycle: _Cycle, gang: WaitingGang, listed: _CandidateList) -> list[_Group]:
    """All candidates, then per domain of the gang's required level (``group_by_domain``)."""
    topology = cycle.pool.topology
    level = _required_level(topology, gang)
    if level is None:
        return listed.alone
    found = listed.groups.get(level)
    if found is None:
        known = cycle.domains.setdefault(level, {})
        domain_of = _domain_at(topology, level)

        def domains_of(victim: Admitted) -> frozenset[str]:
            found = known.get(victim.key)
            if found is None:
                touched = {domain_of(node) for node in (victim.nodes or {}).values()}
                found = known[victim.key] = frozenset(d for d in touched if d is not None)
            return found

        found = [listed.everyone]
        ordered = listed.victims.by_priority or None
        for domain, victims in domain_groups(listed.victims, domains_of).items():
            found.append(
                _Group.of(victims, domain, known, cycle.now, listed.rank, by_priority=ordered)
            )
        listed.groups[level] = found
    return found


@dataclass(frozen=True, slots=True)
class _Group:
    """Candidates to search together: all of them, or those holding pods in one ``domain``.

    ``touched`` names the domains of the required level the group's victims hold pods in;
    ``place`` is where ``preemption.domain_groups`` puts it: its first gang's place in the
    candidate list, then its domain (the group of them all comes first).
    """

    victims: Group
    domain: str | None
    touched: frozenset[str]
    place: tuple[int, str | None] = (-1, None)

    @classmethod
    def of(
        cls,
        victims: list[Admitted],
        domain: str,
        known: Mapping[JobKey, frozenset[str]],
        now: float,
        rank: Mapping[JobKey, int],
        *,
        by_priority: bool | None = None,
    ) -> _Group:
        """The group of ``victims`` in ``domain``.

        ``known``: each victim's domains of the level; ``rank``: each candidate's place in the
        list.
        """
        touched = frozenset[str]().union(*(known[victim.key] for victim in victims))
        group = Group(victims, now, by_priority=by_priority)
        return cls(group, domain, touched, (rank[victims[0].key], domain))


class _CandidateList:
    """One kind of preemptor's candidates (``_candidates``), kept through the cycle's preemptions.

    Invariant: after ``catch_up``, ``victims``, ``held`` and ``groups`` are exactly what they
    would be if built anew from the candidates left. A list is the merged, cheapest-first heads
    of the candidates' per-team groups (reclaimable gangs first), so removing preempted gangs
    from it keeps the rest in order; a domain group is its list's gangs holding pods in the
    domain, in list order, and the groups are ordered by their first gang's place in the list,
    then by domain (``preemption.domain_groups``), so only the groups of the domains the
    preempted gangs held pods in change, and the order is restored by that key.
    """

    __slots__ = (
        "_crowding",
        "_held",
        "_searched",
        "alone",
        "everyone",
        "groups",
        "members",
        "now",
        "rank",
        "seen",
        "victims",
    )

    def __init__(self, victims: list[Admitted], now: float, seen: int) -> None:
        self.now, self.seen = now, seen
        self.victims = Group(victims, now)
        self.everyone = _Group(self.victims, None, frozenset())  # the group of them all
        self.alone = [self.everyone]  # the groups of a gang that requires no level
        self.rank = {victim.key: number for number, victim in enumerate(victims)}  # kept
        self.members = set(self.rank)
        self._held: dict[str, dict[str, int]] | None = None
        self.groups: dict[int, list[_Group]] = {}  # per required level (``_groups``)
        # ``search``: the groups last searched, their victims and ``preemption.search_order``
        self._searched: dict[int | None, _Search] = {}
        self._crowding: _Crowding | None = None

    def crowding(self, cycle: _Cycle) -> _Crowding:
        """The nodes its gangs share (``_Crowding``), counted from its gangs when first asked."""
        if self._crowding is None:
            self._crowding = _Crowding(self.victims, cycle.capacity.topology.index)
        return self._crowding

    @property
    def held(self) -> dict[str, dict[str, int]]:
        """What the candidates hold, per team (``quota.usage_by_team``).

        Kept through preemptions, a team's resource may be counted at 0 where none of its
        candidates holds it any more (``quota.check_quota`` reads it as absent).
        """
        if self._held is None:
            self._held = usage_by_team(self.victims)
        return self._held

    def search(self, level: int | None, groups: list[_Group]) -> _Search:
        """``groups`` (``_groups`` of this list for ``level``) as a search reads them.

        Kept, and kept up to date through preemptions (``catch_up``), while the same groups
        are searched again.
        """
        found = self._searched.get(level)
        if found is None or found.groups is not groups:
            ordered = self.victims.by_priority  # then so is every group of its gangs
            found = self._searched[level] = _Search(groups, ordered)
        return found

    def catch_up(
        self, gone: Sequence[JobKey], known: Mapping[int, Mapping[JobKey, frozenset[str]]]
    ) -> None:
        """Drop the candidates preempted since last asked (``gone[seen:]``, in order)."""
        dropped = self.members.intersection(gone[self.seen :])
        self.seen = len(gone)
        if not dropped:
            return
        self.members -= dropped
        # the list keeps the order of ``rank``: each dropped gang is found by bisection, and the
        # rest copied in C
        left, held, rank = list(self.victims), self._held, self.rank
        places = sorted(rank[key] for key in dropped)
        for place in reversed(places):
            at = bisect_left(left, place, key=lambda victim: rank[victim.key])
            victim = left.pop(at)
            if held is not None and victim.team is not None:
                used = held[victim.team]
                for name, amount in victim.usage.items():
                    used[name] -= amount
        ordered = self.victims.by_priority
        self.victims = Group(left, self.now, by_priority=ordered or None)
        if self.victims.by_priority != ordered:
            self._searched.clear()  # now ordered by priority: searched by floor from now on
        self.everyone = _Group(self.victims, None, frozenset())
        self.alone = [self.everyone]
        for level, groups in self.groups.items():
            self._regroup(level, groups, dropped, known[level])

    def _regroup(
        self,
        level: int,
        groups: list[_Group],
        dropped: set[JobKey],
        known: Mapping[JobKey, frozenset[str]],
    ) -> None:
        """Drop ``dropped`` from the level's groups (and from its kept search, if any).

        Only the groups of their domains change: each is taken out and, if any gang is left,
        put back in its place.
        """
        search = self._searched.get(level)
        if search is not None and search.groups is not groups:
            search = None
        by_domain = (
            search.by_domain
            if search is not None
            else {group.domain: group for group in groups if group.domain is not None}
        )
        ordered = self.victims.by_priority or None
        for domain in frozenset[str]().union(*(known[key] for key in dropped)):
            group = by_domain.get(domain)
            if group is None:
                continue
            if search is not None:
                search.drop(group)
            else:
                del groups[bisect_left(groups, group.place, lo=1, key=_PLACE)]
            left = [victim for victim in group.victims if victim.key not in dropped]
            if left:
                again = _Group.of(left, domain, known, self.now, self.rank, by_priority=ordered)
                if search is not None:
                    search.add(again)
                else:
                    insort(groups, again, lo=1, key=_PLACE)
        groups[0] = self.everyone
        if search is not None:
            search.victims[0] = self.everyone.victims


_PLACE: Final = attrgetter("place")  # where a ``_Group`` goes in its list's groups


class _Search:
    """A candidate list's groups for one required level, as a victim search reads them.

    ``groups`` (all candidates first, then the domain groups in ``place`` order: the order of
    ``preemption.domain_groups``), each group's ``victims`` and an index ``by_domain`` are kept
    up to date through preemptions, a group taken out or put in place at a time (``drop``,
    ``add``), and so are the domain groups ranked by (floor, place) when every group is ordered
    by priority (``by_floor``): ``order`` then yields ``preemption.search_order``'s steps as
    ``cheapest`` reads them, each group's number found when it is reached, instead of every
    group's floor counted and sorted after each preemption.
    """

    __slots__ = ("_ranked", "by_domain", "by_floor", "groups", "victims")

    def __init__(self, groups: list[_Group], by_floor: bool) -> None:
        self.groups, self.by_floor = groups, by_floor
        self.victims = [group.victims for group in groups]
        self.by_domain = {group.domain: group for group in groups if group.domain is not None}
        # (floor, place) of every domain group, ascending (when ``by_floor``)
        self._ranked: list[tuple[Cost, tuple[int, str | None]]] = []
        if by_floor:
            self._ranked = sorted((group.victims.floor, group.place) for group in groups[1:])

    def order(self) -> SearchOrder:
        """``preemption.search_order`` of ``victims``, its steps counted as they are read."""
        return SearchOrder(self._steps(), self.by_floor)

    def _steps(self) -> Iterator[tuple[int, Cost | None]]:
        yield 0, None
        groups = self.groups
        if self.by_floor:
            for least, at in self._ranked:
                yield bisect_left(groups, at, lo=1, key=_PLACE), least
        else:
            for number in range(1, len(groups)):
                yield number, groups[number].victims.floor

    def drop(self, group: _Group) -> None:
        """Take a domain group out."""
        at = group.place
        number = bisect_left(self.groups, at, lo=1, key=_PLACE)
        del self.groups[number], self.victims[number]
        assert group.domain is not None, "the group of all candidates stays"
        del self.by_domain[group.domain]
        if self.by_floor:
            del self._ranked[bisect_left(self._ranked, (group.victims.floor, at))]

    def add(self, group: _Group) -> None:
        """Put a domain group in its place."""
        at = group.place
        number = bisect_left(self.groups, at, lo=1, key=_PLACE)
        self.groups.insert(number, group)
        self.victims.insert(number, group.victims)
        assert group.domain is not None, "the group of all candidates stays"
        self.by_domain[group.domain] = group
        if self.by_floor:
            insort(self._ranked, (group.victims.floor, at))


class _Crowding:
    """The nodes more than one of a candidate list's gangs hold pods on, and what they hold there.

    Counted from the list's gangs when first asked. The list only loses gangs during the cycle,
    and a preempted gang's pods stay on its nodes (the cycle's capacity is left as it is), so
    ``nodes`` stays a superset of the nodes shared by the victims of any trial of the list's
    searches, and a node's ``load`` at least what any such trial gives back there.

    It holds nothing of the cycle (``load`` is handed the cycle's ``spread``): a reference back
    to the cycle, which keeps the lists, would close a reference cycle and leave every cycle's
    state to the cyclic garbage collector instead of reference counting.
    """

    __slots__ = ("_holders", "_loads", "nodes")

    def __init__(self, victims: Sequence[Admitted], index: Mapping[str, int]) -> None:
        seen, shared = set[str](), set[str]()
        for victim in victims:
            mine = set((victim.nodes or {}).values())
            shared |= seen & mine
            seen |= mine
        holders: dict[int, list[Admitted]] = {}
        if shared:
            for victim in victims:
                for name in shared.intersection((victim.nodes or {}).values()):
                    if name in index:
                        holders.setdefault(index[name], []).append(victim)
        self.nodes = frozenset(holders)
        self._holders = holders
        self._loads: dict[int, Units] = {}

    def load(self, node: int, spread: Callable[[Admitted], list[tuple[int, Units]]]) -> Units:
        """What the gangs sharing ``node`` hold on it, summed (kept); ``spread``: the cycle's."""
        found = self._loads.get(node)
        if found is None:
            total: dict[str, int] = {}
            for victim in self._holders[node]:
                for at, held in spread(victim):
                    if at == node:
                        for name, amount in held.items():
                            total[name] = total.get(name, 0) + amount
            found = self._loads[node] = total
        return found


class _Reach:
    """Whether a group of victims can make room at all: ``cheapest``'s ``hopeless`` bound.

    A domain's *reach* is its slots for the gang's shape once every candidate holding pods in
    it is gone: no set of victims gives it more (the trial is monotone). A domain group can make
    room only in the domains its victims hold pods in; if none of them reaches the gang's size,
    it is not searched. A reach is counted when first asked, from the domain's own group, and
    stays an upper bound for the rest of the cycle for preemptors of the same kind (same
    candidates): free capacity only shrinks, and preempted gangs only leave the candidates.
    """

    def __init__(
        self, cycle: _Cycle, gang: WaitingGang, search: _Search, kind: tuple[object, ...]
    ) -> None:
        self.cycle, self.gang, self.groups = cycle, gang, search.groups
        capacity, shape, count = cycle.capacity, gang.shape, len(gang.pods)
        self.level = _required_level(cycle.pool.topology, gang)
        if self.level is not None and capacity.slots(shape).roomiest(self.level) >= count:
            self.level = None  # a domain of the level holds the gang already: any group may do
        self.by_domain = search.by_domain
        borrowers = tuple(name for name, _ in kind[-1])  # type: ignore[attr-defined]
        family = (*kind[:-1], borrowers, shape, self.level)
        self.known = cycle.reach.setdefault(family, {})

    def hopeless(self, number: int) -> bool:
        """Whether no set of group ``number``'s victims can make room (never said of the first).

        The first group holds every candidate: if it cannot make room its own search finds so
        (and ``Pool.empty`` answers for a gang no domain could ever hold).
        """
        group = self.groups[number]
        if self.level is None or group.domain is None:
            return False
        return not any(map(self._reaches, group.touched))

    def _reaches(self, domain: str) -> bool:
        found = self.known.get(domain)
        if found is None:
            found = self.known[domain] = self._count(domain)
        return found >= len(self.gang.pods)

    def _count(self, domain: str) -> int:
        """The domain's reach, from the candidates holding pods in it (its own group's)."""
        capacity, shape, level = self.cycle.capacity, self.gang.shape, self.level
        assert level is not None
        topology = capacity.topology
        member, inside, spread = topology.member[level], int(domain), self.cycle.spread
        returned: dict[int, Units] = {}  # node -> what the candidates hold there
        sums: dict[int, dict[str, int]] = {}  # nodes several of them hold pods on
        for victim in self.by_domain[domain].victims:
            for node, held in spread(victim):
                if member[node] == inside:
                    have = returned.get(node)
                    if have is None:
                        returned[node] = held  # read, never changed
                        continue
                    total = sums.get(node)
                    if total is None:
                        total = returned[node] = sums[node] = dict(have)
                    for name, amount in held.items():
                        total[name] = total.get(name, 0) + amount
        slots = capacity.slots(shape)
        reach = slots.domains[inside]
        allowed, names = shape.allowed, topology.node_names
        for node, extra in returned.items():
            if allowed is None or names[node] in allowed:
                reach += slots_of(capacity.free[node], shape, extra) - slots.nodes[node]
        return reach


def _required_level(topology: Topology, gang: WaitingGang) -> int | None:
    """The level the gang requires one domain of, if any (and if the pool has it)."""
    level = gang.topology.level
    if not gang.topology.required or level is None or level >= len(topology.levels):
        return None
    return level


def _never_fits(pool: Pool, gang: WaitingGang) -> bool:
    """Whether the gang would not fit even with every gang gone (``Pool.empty``)."""
    if pool.empty is None:
        return False
    slots, count = pool.empty.slots(gang.shape), len(gang.pods)
    level = _required_level(pool.topology, gang)
    return slots.domains[ROOT] < count or (level is not None and slots.roomiest(level) < count)


def _quota_with_all_gone(
    cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None, listed: _CandidateList
) -> bool:
    """Whether quota lets the gang in with every candidate gone (else no victims can help).

    What the candidates hold is summed per team once per candidate list (``_CandidateList``).
    """
    room = _QuotaRoom(team, gang.usage, cycle.usage, cycle.pool.teams)
    for name, held in listed.held.items():
        room.free(name, held, 1)
    return room.fits()


def _still_borrowing(
    victim: Admitted,
    chosen: Sequence[Admitted],
    usage: Mapping[str, Units],
    teams: Mapping[str, TeamQuota],
) -> bool:
    """``quota.still_borrowing``, counting only the chosen gangs of the victim's own team."""
    assert victim.team is not None
    team, used = teams[victim.team], usage.get(victim.team, {})
    mine = [gang.usage for gang in chosen if gang.team == victim.team]
    return any(
        used.get(resource, 0) - sum(gang.get(resource, 0) for gang in mine) > limit.nominal
        for resource, limit in team.limits.items()
    )


class _Failures:
    """Victim searches that found nothing, for one kind of preemptor (``_candidates``).

    Until the next preemption, free capacity only shrinks and quota usage only grows (the
    candidates and what their teams borrow are part of the kind), and a gang needing more of
    everything (more pods of the same shape and topology request, at least the same quota)
    never fits where a smaller one does not (the trial is monotone), so a search that failed
    answers for every gang that needs at least as much.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[tuple[Shape, TopologyRequest], list[tuple[int, Units]]] = {}

    def add(self, gang: WaitingGang) -> None:
        self._seen.setdefault((gang.shape, gang.topology), []).append((len(gang.pods), gang.usage))

    def covers(self, gang: WaitingGang) -> bool:
        count, usage = len(gang.pods), gang.usage
        return any(
            count >= failed_count
            and all(usage.get(name, 0) >= amount for name, amount in failed_usage.items())
            for failed_count, failed_usage in self._seen.get((gang.shape, gang.topology), ())
        )


class _Gains:
    """Slots of the gang's shape that the pool and domains gain when victims' pods are given back.

    Kept beside the cycle's capacity, which stays as it is. A node that only one of the search's
    candidates (its candidate list's) holds pods on (``_Crowding`` says which nodes more than one
    does) gains, while that victim is given back, exactly what that victim alone frees there: its
    *own* gain, which depends on nothing else in the set, so it is counted once (``_KeptGains``,
    per candidate list) and added or taken away as one number for the pool and one per domain of
    the required level. Only on a crowded node are the given-back pods summed per node and its
    slots counted again. For a required level, the
    domains of that level that then hold the whole gang are ``reaching``. ``level`` is ``None``
    when the gang requires none, or when a domain of it holds the gang already.

    A victim's ``most`` bounds what it can add to the pool's slots in any set: its own gain,
    plus, per crowded node it holds pods on, what that node gains with every candidate's pods
    there given back (``_Crowding.load``). Each crowded node a set touches gains no more than
    that, so a set's gain is at most its victims' ``most`` summed (``preemption.Lack``).
    """

    def __init__(
        self,
        capacity: Capacity,
        gang: WaitingGang,
        level: int | None,
        spread: Callable[[Admitted], list[tuple[int, Units]]],
        crowding: _Crowding,
        kept: _KeptGains,
    ) -> None:
        self.capacity, self.shape, self.count = capacity, gang.shape, len(gang.pods)
        self.spread, self.crowding, self.kept = spread, crowding, kept
        self.crowded, self.crowded_load = crowding.nodes, crowding.load
        slots = capacity.slots(gang.shape)
        self.node_slots, self.domain_slots = slots.nodes, slots.domains
        if level is not None and slots.roomiest(level) >= self.count:
            level = None
        self.level = level
        topology = capacity.topology
        self.member = None if level is None else topology.member[level]
        self.own: dict[JobKey, _OwnGain] = {}  # per victim, counted when first given back
        self.kept_here = kept.table(gang.shape, level)
        self.clear()

    def clear(self) -> None:
        """Count no victim as given back (what each one frees alone stays known)."""
        self.with_victims: dict[int, dict[str, int]] = {}  # crowded node -> free, pods back
        # (of the shape's resources only: the slots count nothing else)
        self.gained: dict[int, int] = {}  # crowded node -> slots it gains
        self.root_gained = 0  # slots the pool gains
        self.domain_gained: dict[int, int] = {}  # domain of ``level`` -> slots it gains
        self.reaching: set[int] = set()  # domains of ``level`` that hold the gang with the gains

    def own_gain(self, victim: Admitted) -> _OwnGain:
        """What the victim alone frees (counted once per search, or kept: ``_KeptGains``)."""
        own = self.own.get(victim.key)
        if own is None:
            own = self.kept.get(self.kept_here, victim.key, self.crowding)
            if own is None:
                own = self._own(victim)
                self.kept.put(self.kept_here, victim.key, own, self.crowding)
            self.own[victim.key] = own
        return own

    def most(self, victim: Admitted) -> int:
        """At most how many slots the victim adds to the pool's in any set (``_OwnGain.most``)."""
        return (self.own.get(victim.key) or self.own_gain(victim)).most

    def missing(self) -> int:
        """How many slots the pool lacks for the gang with no victim given back."""
        return self.count - self.domain_slots[ROOT]

    def move(self, victim: Admitted, sign: int, changed: set[int]) -> None:
        """Give back (``sign`` 1) or take again (-1) the victim's pods; note crowded nodes."""
        own = self.own.get(victim.key) or self.own_gain(victim)
        self.root_gained += sign * own.root
        if own.domains:
            gained, slots_now, count = self.domain_gained, self.domain_slots, self.count
            for domain, slots in own.domains:
                now = gained[domain] = gained.get(domain, 0) + sign * slots
                if slots_now[domain] + now >= count:
                    self.reaching.add(domain)
                else:
                    self.reaching.discard(domain)
        with_victims, free = self.with_victims, self.capacity.free
        for node, held in own.crowded:
            have = with_victims.get(node)
            if have is None:
                node_free = free[node]
                have = with_victims[node] = {
                    name: node_free.get(name, 0) for name, _ in self.shape.pod
                }
            for name, amount in held:
                have[name] += sign * amount
            changed.add(node)

    def _own(self, victim: Admitted) -> _OwnGain:
        """What the victim alone frees on the nodes no other candidate holds pods on."""
        shape, free, node_slots = self.shape, self.capacity.free, self.node_slots
        member = self.member
        allowed, names = shape.allowed, self.capacity.topology.node_names
        crowded_nodes, crowded = self.crowded, []
        root = most = 0
        domains: dict[int, int] = {}
        spread = self.spread(victim)
        for node, held in spread:
            if allowed is not None and names[node] not in allowed:
                continue
            if node in crowded_nodes:
                crowded.append((node, tuple((name, held.get(name, 0)) for name, _ in shape.pod)))
                load = self.crowded_load(node, self.spread)
                most += slots_of(free[node], shape, load) - node_slots[node]
                continue
            gain = slots_of(free[node], shape, held) - node_slots[node]
            if gain:
                root += gain
                if member is not None:
                    domain = member[node]
                    domains[domain] = domains.get(domain, 0) + gain
        nodes = tuple(node for node, _ in spread)
        return _OwnGain(root, tuple(domains.items()), tuple(crowded), nodes, root + most)

    def _domain(self, domain: int, delta: int) -> None:
        if delta:
            now = self.domain_gained[domain] = self.domain_gained.get(domain, 0) + delta
            if self.domain_slots[domain] + now >= self.count:
                self.reaching.add(domain)
            else:
                self.reaching.discard(domain)

    def settle(self, changed: set[int]) -> None:
        """Count the slots the ``changed`` crowded nodes (and their domains) gain now."""
        shape, member = self.shape, self.member
        with_victims, node_slots, gained = self.with_victims, self.node_slots, self.gained
        for node in changed:
            now = slots_of(with_victims[node], shape) - node_slots[node]
            delta = now - gained.get(node, 0)
            if delta:
                gained[node] = now
                self.root_gained += delta
                if member is not None:
                    self._domain(member[node], delta)

    def root(self) -> int:
        """The pool's slots with the gains."""
        return self.domain_slots[ROOT] + self.root_gained

    def fits_level(self) -> bool:
        """Whether a domain of the required level holds the gang with the gains."""
        return self.level is None or bool(self.reaching)


class _KeptGains:
    """Victims' own gains (``_Gains``) kept from search to search within a cycle.

    A victim's own gain for a shape and level, among the gangs of one candidate list (which
    nodes are crowded: ``_Crowding``), depends only on the free capacity of the nodes it holds
    pods on; a kept gain is used again while none of its nodes changed since it was counted
    (``Capacity.changed_since``: gangs placed, and backfill's reserved room withheld or given
    back, all change the cycle's capacity). A gain counted with none of the victim's nodes
    crowded is the same for any list that crowds none of them either, so it serves every such
    list; another is used again only for the list it was counted for.
    """

    __slots__ = ("_capacity", "_tables")

    def __init__(self, capacity: Capacity) -> None:
        self._capacity = capacity
        self._tables: dict[tuple[Shape, int | None], _GainTable] = {}

    def table(self, shape: Shape, level: int | None) -> _GainTable:
        """The gains kept for a shape and required level (``None``: none), by victim."""
        found = self._tables.get((shape, level))
        if found is None:
            found = self._tables[shape, level] = {}
        return found

    def get(self, table: _GainTable, victim: JobKey, crowding: _Crowding) -> _OwnGain | None:
        """The victim's gain kept in ``table`` for ``crowding``, if still exact.

        That is, if none of its nodes changed since it was counted, and it was counted for
        ``crowding`` or with none of its nodes crowded, as none are in ``crowding``.
        """
        found = table.get(victim)
        if found is None:
            return None
        at, own, counted = found
        if counted is not crowding and (own.crowded or not crowding.nodes.isdisjoint(own.nodes)):
            return None
        edits = self._capacity.edits
        if at != edits:
            if self._capacity.changed_since(own.nodes, at):
                return None
            table[victim] = (edits, own, counted)
        return own

    def put(self, table: _GainTable, victim: JobKey, own: _OwnGain, crowding: _Crowding) -> None:
        """Keep ``own``, counted for ``crowding`` on the capacity as it is now, in ``table``."""
        table[victim] = (self._capacity.edits, own, crowding)


@dataclass(frozen=True, slots=True)
class _OwnGain:
    """What one victim alone frees (``_Gains``).

    Slots for the pool and per domain of the required level from the nodes only it holds pods
    on, and its pods on crowded nodes (counted there with the other victims given back).
    """

    root: int
    domains: tuple[tuple[int, int], ...]
    crowded: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]  # node, what it takes of the shape
    nodes: tuple[int, ...]  # every node it holds pods on (what the gain was counted from)
    most: int  # ``root`` plus what its crowded nodes gain at most (``_Gains``)


# victim -> capacity edits when counted, the gain, the crowding it was counted for
_GainTable = dict[JobKey, tuple[int, _OwnGain, _Crowding]]


class _Trial:
    """Whether the gang fits with some victims gone, the cycle's capacity left as it is.

    Successive calls differ by a victim or two (greedy growth, then pruning), so only the
    difference is counted again (``_Gains``, and the quota the victims free: ``_QuotaRoom``); a
    call that would take back more victims than it gives back counts from none given back
    instead (the pruning pass's first try, the last gang added alone).
    """

    def __init__(
        self, cycle: _Cycle, gang: WaitingGang, team: TeamQuota | None, listed: _CandidateList
    ) -> None:
        self.cycle, self.gang, self.team = cycle, gang, team
        level = _required_level(cycle.pool.topology, gang)
        crowding = listed.crowding(cycle)
        self.gains = _Gains(cycle.capacity, gang, level, cycle.spread, crowding, cycle.kept_gains())
        self.held: list[Admitted] = []  # ``given`` in the order last asked for
        self.given: dict[JobKey, Admitted] = {}
        self.quota = _QuotaRoom(team, gang.usage, cycle.usage, cycle.pool.teams)

    def _clear(self) -> None:
        """Count no victim as given back."""
        self.gains.clear()
        self.given = {}
        self.quota.clear()

    def __call__(self, victims: Sequence[Admitted]) -> bool | None:
        """``True`` when the gang fits with ``victims`` gone, else ``None``."""
        if not victims:
            return None
        self.hold(victims)
        gains = self.gains
        if gains.root() < gains.count or not gains.fits_level():
            return None  # no room (asked first: it is counted already, quota is not)
        return self.quota_fits() or None

    def quota_fits(self) -> bool:
        """Whether quota lets the gang in with the victims given back gone (rule 1)."""
        return self.quota.fits()

    def lack(self) -> Lack | None:
        """The pool's slots the gang lacks, and the most each victim adds (``preemption.Lack``).

        ``None`` when the pool has the slots already (no set is ruled out by them).
        """
        missing = self.gains.missing()
        return Lack(missing, self.gains.most) if missing > 0 else None

    def place(
        self, victims: Sequence[Admitted], gang: WaitingGang
    ) -> TopologyPlacement | TopologyWait:
        """Where ``gang`` (the one counted, or the whole of it) goes once ``victims`` are gone."""
        capacity = self.cycle.capacity
        with capacity.lent([(victim.nodes or {}, victim.requests or {}) for victim in victims]):
            return place_topology(capacity, gang.pods, gang.shape, gang.topology, gang.mixed)

    def hold(self, victims: Sequence[Admitted]) -> None:
        """Count exactly ``victims``' pods as given back."""
        changed: set[int] = set()
        held = self.held
        if len(victims) > len(held) and held == victims[: len(held)]:  # the greedy adds some
            for victim in victims[len(held) :]:
                self.given[victim.key] = victim
                self._move(victim, 1, changed)
        else:
            wanted = {victim.key: victim for victim in victims}
            leaving = [key for key in self.given if key not in wanted]
            if len(leaving) > len(wanted):  # fewer moves from nothing given back (the pruning)
                self._clear()
                leaving = []
            for key in leaving:
                self._move(self.given.pop(key), -1, changed)
            for key, victim in wanted.items():
                if key not in self.given:
                    self.given[key] = victim
                    self._move(victim, 1, changed)
        self.held = list(victims)
        self.gains.settle(changed)

    def _move(self, victim: Admitted, sign: int, changed: set[int]) -> None:
        self.gains.move(victim, sign, changed)
        self.quota.move(victim, sign)


class _QuotaRoom:
    """Whether quota lets the gang in once victims are gone, from what they free summed.

    ``quota.check_quota`` answers ``Fits`` or ``Borrows`` exactly when, for every resource the
    gang asks for that its team has a limit on, the team stays within its borrowing ceiling and
    its cohort within its nominal total. Victims only take usage away, so per such resource the
    victims of the gang's team must free at least what the team would hold beyond its ceiling,
    and the victims of its cohort's teams at least what the cohort would use beyond its nominal
    total: two sums against two thresholds fixed when the search starts, instead of the usage
    by team copied and checked again per trial. A gang of no team always fits.
    """

    __slots__ = ("_cohort", "_freed_cohort", "_freed_team", "_needs", "_team")

    def __init__(
        self,
        team: TeamQuota | None,
        gang_usage: Units,
        usage: Mapping[str, Units],
        teams: Mapping[str, TeamQuota],
    ) -> None:
        # resource -> what the team's victims, and the cohort's, must free (``None``: nothing)
        self._needs: list[tuple[str, int | None, int]] = []
        self._team = None if team is None else team.name
        self._cohort: frozenset[str] = frozenset()
        if team is not None:
            cohort = [t for t in teams.values() if t.cohort == team.cohort]
            self._cohort = frozenset(t.name for t in cohort)
            used = usage.get(team.name, {})
            for resource, limit in team.limits.items():
                want = gang_usage.get(resource, 0)
                if want <= 0:
                    continue
                after = used.get(resource, 0) + want
                nominal, pooled = cohort_totals(cohort, resource, usage)
                team_need = None if limit.ceiling is None else after - limit.ceiling
                self._needs.append((resource, team_need, pooled + want - nominal))
        self._freed_team: dict[str, int] = {}
        self._freed_cohort: dict[str, int] = {}

    def clear(self) -> None:
        """Count no victim as gone."""
        self._freed_team, self._freed_cohort = {}, {}

    def move(self, victim: Admitted, sign: int) -> None:
        """Count the victim as gone (``sign`` 1) or back again (-1)."""
        if victim.team is not None:
            self.free(victim.team, victim.usage, sign)

    def free(self, team: str, usage: Units, sign: int) -> None:
        """Count ``usage`` of ``team`` as freed (``sign`` 1) or held again (-1)."""
        if not self._needs:
            return
        cohort = self._freed_cohort if team in self._cohort else None
        mine = self._freed_team if team == self._team else None
        if cohort is None and mine is None:
            return
        for resource, _, _ in self._needs:
            amount = sign * usage.get(resource, 0)
            if cohort is not None:
                cohort[resource] = cohort.get(resource, 0) + amount
            if mine is not None:
                mine[resource] = mine.get(resource, 0) + amount

    def fits(self) -> bool:
        """``check_quota`` says ``Fits`` or ``Borrows`` with the victims counted as gone."""
        team, cohort = self._freed_team, self._freed_cohort
        return all(
            (team_need is None or team.get(resource, 0) >= team_need)
            and cohort.get(resource, 0) >= cohort_need
            for resource, team_need, cohort_need in self._needs
        )


def _domain_at(topology: Topology, level: int) -> Callable[[str], str | None]:
    """Node name -> an id of its domain at ``level`` (``None`` for a node outside the topology)."""
    index, member = topology.index, topology.member[level]

    def domain(name: str) -> str | None:
        node = index.get(name)
        return None if node is None else str(member[node])

    return domain

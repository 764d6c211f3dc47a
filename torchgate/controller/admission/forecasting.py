"""What the admission cycle would do, asked without doing it: forecasts, places, the pool view.

Why a module of its own: the admitter decides and applies; people want to know beforehand (a
forecast at ``kubectl apply``, ``torchgate simulate``), while they wait (``torchgate explain``, the
place in the ``Queued`` condition) and for the pool as a whole (``torchgate top``). The answers
must be the decision itself, not an estimate, so every answer runs ``decide`` (its public
interface, unchanged) on the cycle's facts as the admitter took them (a ``Snapshot``, taken
without changing anything), with the candidate added when it asks about one. Pure: the caller
passes the facts and the time.

Rules (each one function):

1. ``rank``: a waiting job's place is its index in the pool's admission order among every queued
   job (backing off or not; a preemptor whose nodes are held is not queued), the same in its
   team's and its cohort's order, and what is ahead of it in the pool: jobs, and the GPUs their
   gangs count against quota.
2. ``starving``: the first gang that has waited longer than the starvation bound for capacity or
   topology while a later gang would go ahead; nothing behind it is admitted (the admitter's
   backfill rule: the admitter asks this function too). A gang one of whose pods no node admits
   at all (``WaitingGang.no_node``: a nodeSelector no node has, a taint nothing tolerates, its
   pinned hosts gone), or whose nodes could not hold it whole even empty (``nodes`` rules 5-6),
   never starves: nothing ending makes room for it, so holding the queue back
   would stop every job behind it and help none (``unplaceable``). Each gang behind a starving
   one is told so (``behind_starving``), as its ``Queued`` condition, like any other wait.
3. ``decide_now``: every ready gang's outcome if the next cycle ran now, a candidate added (in
   place of a queued job of its key); a gang behind a starving one waits for it; a gang of a
   team whose TeamQuota is being deleted waits, undecided (``quota`` rule 5), as in the cycle.
4. ``forecast``: the candidate's outcome as an ``outlook.Forecast``: victims named with their
   GPUs and priority, the place it would take if it waits and what it would be told (rule 8).
   A suspended candidate (``spec.runPolicy.suspend``) is not asked of ``decide``: the controller
   creates no pod of it and does not queue it until it is resumed (``job.plan`` rule 3), so it
   waits for its resumption (``RESUMPTION``, reason ``PyTorchJobSuspended``, no place), never
   "will start now" on nodes it will not take. A candidate torchgate does not run
   (``reconciler.is_ours``: ``runPolicy.managedBy`` names another controller) is not asked of
   ``decide`` either: it waits for nothing of torchgate's, and the forecast says who runs it
   (``elsewhere``, ``outlook.run_elsewhere``; reason ``ManagedElsewhere``, no place).
5. ``must_end``: the cheapest set of running gangs whose end would let a waiting gang start,
   asked of ``decide`` for that gang alone, at a priority above every running gang and without
   the admin's protection; the quota rules still hold (a team's gangs within its nominal quota
   never make room for another team's). ``None`` when no set would do. ``ending_lets_start``
   answers when that guarantee is all that stands in the way: the running gangs whose end (not
   preemption: none may be preempted for it) would let it start, the quota rules asked of
   ``decide`` with those gangs counted for no team (their quota idle, as it is once they end);
   empty when no end of theirs would do either (its own team's quota, no node).
6. ``job_outlook``: one job: waiting (kind, reason, the live message, its place, what must end,
   the gangs within their quota whose end would let it start when no one may be preempted for
   it: ``ending_lets_start``, whether the next cycle admits it, whether any node admits its
   pods: ``placeable``, and the
   nodes out of use whose return alone would let it start: ``starts_if_cleared``, asked of
   ``decide`` with those nodes allowed to its pods), its nodes held while it preempts, or
   holding capacity (running or reserved: its nodes and their topology domains).
7. ``pool_view``: per team quota, usage, borrowing, lending (its cohort's borrowing spread over
   the cohort's idle nominal quota in proportion), waiting demand and the longest wait; per
   topology domain GPUs used and free; the nodes placement cannot use; the preemptors whose
   nodes are held, with their victims (waiting, as ``job_outlook`` says, though not queued:
   counted in ``waiting_jobs`` and shown, never only counted); the head of the queue.
8. ``told``: a ``Capacity`` wait's message ends with the clause of the nodes out of use for the
   gang (``nodes`` rule 7, read by the admitter once per node change: ``Snapshot.out_of_use``),
   when there are any: its ``Queued`` condition, ``torchgate explain``, ``torchgate top`` and
   the forecast at ``kubectl apply`` (``forecast``, the candidate's entry in the snapshot) say
   the same.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from torchgate.controller.admission.decide import (
    Admit,
    Outcome,
    Pool,
    Preempt,
    Wait,
    WaitingGang,
    decide,
)
from torchgate.controller.admission.nodes import NodeView, OutOfUse
from torchgate.controller.admission.preemption import HELD_PRIORITY
from torchgate.controller.admission.quota import Admitted, closed_to_new_gangs, usage_by_team
from torchgate.controller.admission.topology import Topology
from torchgate.pytorchjob import moments, names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.outlook import (
    DomainView,
    Forecast,
    Gang,
    JobOutlook,
    NodeProblem,
    Place,
    PoolView,
    Preemptor,
    QueueEntry,
    TeamView,
)
from torchgate.pytorchjob.pool import GPUS, PreemptionSettings, TeamQuota
from torchgate.pytorchjob.reasons import (
    QUEUED_REASONS,
    REASON_MANAGED_ELSEWHERE,
    REASON_SUSPENDED,
)
from torchgate.pytorchjob.units import Units

QUEUE_HEAD = 20
PREEMPTING = "Preempting"
RESUMPTION = (
    "waiting for its resumption: spec.runPolicy.suspend is true, so none of its pods is created "
    "and it is not queued until it is set false"
)
_NO_SCHEDULE = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job in the admitter's queue, as a snapshot keeps it.

    Attributes:
        key: ``(namespace, name)``.
        order: ``pool.admission_order`` of it.
        team: The team owning its namespace.
        usage: What its gang counts against quota (milli-units; ``GPUS`` for GPUs).
        waited: Seconds since it took its place.
        ready: ``False`` while it backs off (the cycle does not decide it).
        kind: What it was last told it waits for.
        message: What it was last told (its ``Queued`` condition's message).
    """

    key: JobKey
    order: tuple[int, str, str, str]
    team: str | None
    usage: Units
    waited: float
    ready: bool = True
    kind: str | None = None
    message: str | None = None

    @property
    def priority(self) -> int:
        """Its priority (the first element of its order is the negated priority)."""
        return -self.order[0]


@dataclass(frozen=True, slots=True)
class HeldNodes:
    """A preemptor's nodes, held while its victims terminate."""

    key: JobKey
    nodes: Mapping[str, str]
    victims: tuple[JobKey, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The facts of a cycle, taken by the admitter without changing anything.

    Attributes:
        pool: What ``decide`` gets (free capacity, topology, teams, gangs holding capacity).
        gangs: The ready gangs, in admission order.
        queued: Every queued job, in admission order.
        holds: Preemptors' held nodes.
        nodes: Every node the ledger knows.
        gpu_resource: The resource the pool view counts as GPUs.
        now: Wall-clock seconds (``decide``'s ``now``).
        starvation_seconds: The admitter's starvation bound.
        out_of_use: Per queued job (and the candidate of a forecast), the nodes out of use for
            its gang (``nodes`` rule 7).
    """

    pool: Pool
    gangs: tuple[WaitingGang, ...] = ()
    queued: tuple[QueuedJob, ...] = ()
    holds: tuple[HeldNodes, ...] = ()
    nodes: tuple[NodeView, ...] = ()
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE
    now: float = 0.0
    starvation_seconds: float = 300.0
    out_of_use: Mapping[JobKey, OutOfUse] = field(default_factory=dict)


def _joined(key: JobKey) -> str:
    return "/".join(key)


def _cohort(teams: Mapping[str, TeamQuota], team: str | None) -> str | None:
    found = teams.get(team) if team is not None else None
    return found.cohort if found is not None else None


# ------------------------------------------------------------------ rule 1: places


def rank(queued: Sequence[QueuedJob], teams: Mapping[str, TeamQuota]) -> dict[JobKey, Place]:
    """Every queued job's place (``queued`` in admission order; rule 1)."""
    team_sizes: dict[str, int] = {}
    cohort_sizes: dict[str, int] = {}
    for job in queued:
        if job.team is not None:
            team_sizes[job.team] = team_sizes.get(job.team, 0) + 1
        cohort = _cohort(teams, job.team)
        if cohort is not None:
            cohort_sizes[cohort] = cohort_sizes.get(cohort, 0) + 1
    team_seen: dict[str, int] = {}
    cohort_seen: dict[str, int] = {}
    places: dict[JobKey, Place] = {}
    ahead_gpus = 0
    for index, job in enumerate(queued):
        cohort = _cohort(teams, job.team)
        team_position = cohort_position = None
        if job.team is not None:
            team_position = team_seen[job.team] = team_seen.get(job.team, 0) + 1
        if cohort is not None:
            cohort_position = cohort_seen[cohort] = cohort_seen.get(cohort, 0) + 1
        places[job.key] = Place(
            pool=index + 1,
            pool_size=len(queued),
            team=job.team,
            team_position=team_position,
            team_size=team_sizes.get(job.team) if job.team is not None else None,
            cohort=cohort,
            cohort_position=cohort_position,
            cohort_size=cohort_sizes.get(cohort) if cohort is not None else None,
            ahead_jobs=index,
            ahead_gpus=ahead_gpus,
        )
        ahead_gpus += job.usage.get(GPUS, 0)
    return places


# ------------------------------------------------------------------ rules 2-3: the cycle


def placeable(gang: WaitingGang) -> bool:
    """Whether some node admits each of its pods (``WaitingGang.no_node`` unset; rule 2)."""
    return gang.no_node is None


def unplaceable(gangs: Iterable[WaitingGang]) -> frozenset[JobKey]:
    """The gangs that can never be placed (``WaitingGang.no_node``; rule 2: they never starve)."""
    return frozenset(gang.key for gang in gangs if not placeable(gang))


def starving(
    keys: Sequence[JobKey],
    outcomes: Mapping[JobKey, Outcome],
    waited: Mapping[JobKey, float],
    bound: float,
    *,
    hopeless: Collection[JobKey],
) -> int | None:
    """Index of the first gang that starves while a later one goes ahead (rule 2).

    ``hopeless``: the gangs that never starve (``unplaceable``).
    """
    for index, key in enumerate(keys):
        outcome = outcomes[key]
        if key in hopeless:
            continue
        if isinstance(outcome, Wait) and outcome.kind != "Quota" and waited.get(key, 0.0) > bound:
            if any(not isinstance(outcomes[later], Wait) for later in keys[index + 1 :]):
                return index
            return None
    return None


def behind_starving(keys: Sequence[JobKey], index: int, bound: float) -> dict[JobKey, Wait]:
    """The waits of the gangs behind the starving ``keys[index]``: what each is told (rule 2)."""
    message = (
        f"waiting behind {_joined(keys[index])}, which has waited over {bound:.0f}s for room: "
        "nothing is admitted ahead of it"
    )
    return {key: Wait(key, "Capacity", message) for key in keys[index + 1 :]}


def decide_now(snapshot: Snapshot, candidate: WaitingGang | None = None) -> dict[JobKey, Outcome]:
    """Every ready gang's outcome (and the candidate's) if the next cycle ran now (rule 3)."""
    gangs = list(snapshot.gangs)
    if candidate is not None:
        gangs = sorted(
            [*(g for g in gangs if g.key != candidate.key), candidate], key=WaitingGang.order
        )
    owner = {gang.key[0]: gang.team for gang in gangs if gang.team is not None}
    closed = closed_to_new_gangs((gang.key for gang in gangs), owner, snapshot.pool.teams)
    waits: dict[JobKey, Outcome] = {key: Wait(key, "Quota", told) for key, told in closed.items()}
    gangs = [gang for gang in gangs if gang.key not in closed]
    outcomes = {o.key: o for o in decide(snapshot.pool, gangs, snapshot.now)}
    waited = {job.key: job.waited for job in snapshot.queued}
    if candidate is not None:
        waited[candidate.key] = 0.0
    keys = [gang.key for gang in gangs]
    index = starving(
        keys, outcomes, waited, snapshot.starvation_seconds, hopeless=unplaceable(gangs)
    )
    if index is None:
        return {**outcomes, **waits}
    outcomes = {o.key: o for o in decide(snapshot.pool, gangs[: index + 1], snapshot.now)}
    outcomes.update(behind_starving(keys, index, snapshot.starvation_seconds))
    return {**outcomes, **waits}


# ------------------------------------------------------------------ rules 4-5: one gang


def _gang_of(admitted: Admitted) -> Gang:
    return Gang(
        job=_joined(admitted.key),
        gpus=admitted.usage.get(GPUS, 0),
        priority=admitted.priority,
        team=admitted.team,
    )


def _victims(pool: Pool, keys: Iterable[JobKey]) -> tuple[Gang, ...]:
    by_key = {gang.key: gang for gang in pool.admitted}
    return tuple(_gang_of(by_key[key]) for key in keys if key in by_key)


def forecast(
    snapshot: Snapshot,
    candidate: WaitingGang,
    *,
    suspended: bool = False,
    elsewhere: str | None = None,
) -> Forecast:
    """What the next cycle would do with ``candidate``, ``suspended`` or not (rule 4).

    ``elsewhere``: why torchgate does not run it (``outlook.run_elsewhere``), when it does not.
    """
    teams = snapshot.pool.teams
    team, cohort = candidate.team, _cohort(teams, candidate.team)
    if elsewhere is not None:
        return Forecast(
            verdict="Wait",
            reason=REASON_MANAGED_ELSEWHERE,
            message=elsewhere,
            team=team,
            cohort=cohort,
        )
    if suspended:
        return Forecast(
            verdict="Wait", reason=REASON_SUSPENDED, message=RESUMPTION, team=team, cohort=cohort
        )
    outcome = decide_now(snapshot, candidate)[candidate.key]
    if isinstance(outcome, Admit):
        return Forecast(
            verdict="Start",
            nodes=dict(outcome.nodes),
            domain=outcome.domain,
            borrows=dict(outcome.borrowed),
            team=team,
            cohort=cohort,
        )
    if isinstance(outcome, Preempt):
        victims = _victims(snapshot.pool, outcome.victims)
        return Forecast(
            verdict="Preempt",
            nodes=dict(outcome.nodes),
            domain=outcome.domain,
            preempts=victims,
            reason=QUEUED_REASONS[PREEMPTING],
            message=f"preempting {', '.join(v.job for v in victims)}",
            team=team,
            cohort=cohort,
        )
    entry = QueuedJob(
        key=candidate.key,
        order=candidate.order(),
        team=candidate.team,
        usage=candidate.usage,
        waited=0.0,
    )
    queued = sorted(
        [*(job for job in snapshot.queued if job.key != candidate.key), entry],
        key=lambda job: job.order,
    )
    return Forecast(
        verdict="Wait",
        reason=QUEUED_REASONS[outcome.kind],
        message=told(outcome.kind, outcome.message, snapshot.out_of_use.get(candidate.key)),
        place=rank(queued, teams)[candidate.key],
        team=team,
        cohort=cohort,
    )


def must_end(snapshot: Snapshot, gang: WaitingGang) -> tuple[Admitted, ...] | None:
    """The running gangs whose end would let ``gang`` start now (rule 5)."""
    urgent = replace(gang, priority=HELD_PRIORITY - 1, preempts=True)
    unprotected = replace(
        snapshot.pool,
        preemption=PreemptionSettings(minimum_run_seconds=0, never_preempt_priority=HELD_PRIORITY),
    )
    (outcome,) = decide(unprotected, [urgent], snapshot.now)
    if isinstance(outcome, Admit):
        return ()
    if isinstance(outcome, Preempt):
        chosen = set(outcome.victims)
        return tuple(a for a in snapshot.pool.admitted if a.key in chosen)
    return None


def ending_lets_start(snapshot: Snapshot, gang: WaitingGang) -> tuple[Admitted, ...]:
    """The running gangs whose end, not preemption, would let ``gang`` start (rule 5)."""
    everyone = _urgent_outcome(snapshot, gang, lambda admitted: admitted.team != gang.team)
    if not isinstance(everyone, Preempt):
        return ()
    ending = set(everyone.victims)
    outcome = _urgent_outcome(snapshot, gang, lambda admitted: admitted.key in ending)
    if isinstance(outcome, Admit):
        return tuple(a for a in snapshot.pool.admitted if a.key in ending)
    if isinstance(outcome, Preempt):
        chosen = set(outcome.victims)
        return tuple(a for a in snapshot.pool.admitted if a.key in chosen)
    return ()


def _urgent_outcome(
    snapshot: Snapshot, gang: WaitingGang, teamless: Callable[[Admitted], bool]
) -> Outcome:
    """``must_end``'s question with the ``teamless`` gangs counted for no team (rule 5)."""
    admitted = [replace(a, team=None) if teamless(a) else a for a in snapshot.pool.admitted]
    pool = replace(
        snapshot.pool,
        admitted=admitted,
        totals=None,
        preemption=PreemptionSettings(minimum_run_seconds=0, never_preempt_priority=HELD_PRIORITY),
    )
    urgent = replace(gang, priority=HELD_PRIORITY - 1, preempts=True)
    (outcome,) = decide(pool, [urgent], snapshot.now)
    return outcome


# ------------------------------------------------------------------ rule 6: one job


def domains_of(topology: Topology, nodes: Iterable[str]) -> tuple[str, ...]:
    """The topology domains of ``nodes`` above single hosts, coarsest level first."""
    out: list[str] = []
    chosen = sorted(set(nodes))
    for level, label in enumerate(topology.levels):
        if label == names.HOSTNAME_LABEL:
            continue
        for node in chosen:
            domain = topology.domain_of(node, level)
            if domain is not None:
                name = topology.domain_name(domain)
                if name not in out:
                    out.append(name)
    return tuple(out)


def _timestamp(seconds: float) -> str:
    return moments.format_time(datetime.fromtimestamp(seconds, UTC))


def job_outlook(snapshot: Snapshot, key: JobKey) -> JobOutlook:
    """One job as the controller sees it now (rule 6)."""
    pool = snapshot.pool
    held = next((hold for hold in snapshot.holds if hold.key == key), None)
    if held is not None:
        victims = tuple(_joined(victim) for victim in held.victims)
        return JobOutlook(
            job=_joined(key),
            known=True,
            waiting=True,
            kind=PREEMPTING,
            reason=QUEUED_REASONS[PREEMPTING],
            message=f"preempting {', '.join(victims)}: waiting for their pods to terminate",
            preempting=victims,
            nodes=dict(held.nodes),
            domains=domains_of(pool.topology, held.nodes.values()),
        )
    queued = next((job for job in snapshot.queued if job.key == key), None)
    if queued is not None:
        return _waiting_outlook(snapshot, queued)
    running = next((gang for gang in pool.admitted if gang.key == key), None)
    if running is None:
        return JobOutlook(job=_joined(key))
    nodes = dict(running.nodes or {})
    return JobOutlook(
        job=_joined(key),
        known=True,
        nodes=nodes,
        domains=domains_of(pool.topology, nodes.values()),
        admitted_at=_timestamp(running.admitted_at) if running.admitted_at else None,
        team=running.team,
        priority=running.priority if running.priority < HELD_PRIORITY else None,
        gpus=running.usage.get(GPUS, 0),
    )


def _waiting_outlook(snapshot: Snapshot, queued: QueuedJob) -> JobOutlook:
    place = rank(snapshot.queued, snapshot.pool.teams)[queued.key]
    gang = next((g for g in snapshot.gangs if g.key == queued.key), None)
    kind, message = queued.kind or "Capacity", queued.message or ""
    starts = False
    victims: tuple[Gang, ...] = ()
    ending: tuple[Gang, ...] = ()
    cleared: tuple[str, ...] = ()
    if gang is None:
        message = message or "backing off after its gang was not bound in time"
    else:
        outcome = decide_now(snapshot)[queued.key]
        if isinstance(outcome, Wait):
            note = snapshot.out_of_use.get(queued.key)
            kind, message = outcome.kind, told(outcome.kind, outcome.message, note)
            ended = must_end(snapshot, gang)
            victims = () if ended is None else tuple(_gang_of(a) for a in ended)
            if ended is None:
                ending = tuple(_gang_of(a) for a in ending_lets_start(snapshot, gang))
            if note is not None and starts_if_cleared(snapshot, gang, note):
                cleared = note.nodes
        else:
            starts = True
            message = "the next admission cycle admits it"
    return JobOutlook(
        job=_joined(queued.key),
        known=True,
        waiting=True,
        kind=kind,
        reason=QUEUED_REASONS.get(kind, ""),
        message=message,
        place=place,
        must_end=victims,
        ending_lets_start=ending,
        starts_next_cycle=starts,
        placeable=gang is None or placeable(gang),
        starts_if_cleared=cleared,
        team=queued.team,
        priority=queued.priority,
        gpus=queued.usage.get(GPUS, 0),
    )


def starts_if_cleared(snapshot: Snapshot, gang: WaitingGang, note: OutOfUse) -> bool:
    """Whether the next cycle would admit ``gang`` were its nodes out of use back (rule 6).

    Their free capacity is the ledger's (pods still bound there count); nothing else changes.
    """
    back = frozenset(note.nodes)
    shape = gang.shape
    if shape.allowed is not None:
        shape = replace(shape, allowed=shape.allowed | back)
    mixed = gang.mixed
    if mixed is not None and mixed.lead.allowed is not None:
        mixed = replace(mixed, lead=replace(mixed.lead, allowed=mixed.lead.allowed | back))
    widened = replace(gang, shape=shape, mixed=mixed, no_node=None)
    return isinstance(decide_now(snapshot, widened)[gang.key], Admit)


# ------------------------------------------------------------------ rule 7: the pool


def pool_view(snapshot: Snapshot, *, head: int = QUEUE_HEAD) -> PoolView:
    """The pool as a whole (rule 7)."""
    pool = snapshot.pool
    resource = snapshot.gpu_resource
    allocatable = {node.name: node.allocatable.get(resource, 0) for node in snapshot.nodes}
    free_now = dict(zip(pool.topology.node_names, pool.capacity.free, strict=True))
    free = {name: min(free_now.get(name, {}).get(resource, 0), gpus) for name, gpus in
            allocatable.items()}  # fmt: skip
    outcomes = decide_now(snapshot) if snapshot.gangs else {}
    queue = []
    for position, job in enumerate(snapshot.queued[:head], start=1):
        outcome = outcomes.get(job.key)
        kind = outcome.kind if isinstance(outcome, Wait) else (job.kind or "")
        message = job.message or ""
        if isinstance(outcome, Wait):
            message = told(outcome.kind, outcome.message, snapshot.out_of_use.get(job.key))
        if isinstance(outcome, Admit | Preempt):
            kind, message = "", "the next admission cycle admits it"
        queue.append(
            QueueEntry(
                job=_joined(job.key),
                position=position,
                team=job.team,
                priority=job.priority,
                gpus=job.usage.get(GPUS, 0),
                kind=kind,
                reason=QUEUED_REASONS.get(kind, ""),
                message=message,
                waiting_seconds=round(job.waited, 3),
            )
        )
    return PoolView(
        gpu_resource=resource,
        teams=_team_views(snapshot),
        domains=_domain_views(pool.topology, allocatable, free),
        unusable_nodes=tuple(
            problem
            for node in sorted(snapshot.nodes, key=lambda n: n.name)
            if (problem := _unusable(node)) is not None
        ),
        queue=tuple(queue),
        waiting_jobs=len(snapshot.queued) + len(snapshot.holds),
        total_gpus=sum(allocatable.values()),
        used_gpus=sum(allocatable[name] - free[name] for name in allocatable),
        preempting=_preemptors(snapshot),
    )


def _preemptors(snapshot: Snapshot) -> tuple[Preemptor, ...]:
    """The held preemptors, each with its victims (rule 7)."""
    holding = {gang.key: gang for gang in snapshot.pool.admitted}
    out = []
    for hold in snapshot.holds:
        gang = holding.get(hold.key)
        out.append(
            Preemptor(
                job=_joined(hold.key),
                team=gang.team if gang is not None else None,
                gpus=gang.usage.get(GPUS, 0) if gang is not None else 0,
                victims=tuple(_joined(victim) for victim in hold.victims),
            )
        )
    return tuple(out)


def _team_views(snapshot: Snapshot) -> tuple[TeamView, ...]:
    teams = snapshot.pool.teams
    usage = usage_by_team(snapshot.pool.admitted)
    used = {name: usage.get(name, {}).get(GPUS, 0) for name in teams}
    nominal = {name: t.limits[GPUS].nominal if GPUS in t.limits else 0 for name, t in teams.items()}
    idle = {name: max(0, nominal[name] - used[name]) for name in teams}
    borrowed = {name: max(0, used[name] - nominal[name]) for name in teams}
    lent: dict[str, int] = {}
    for cohort in {t.cohort for t in teams.values()}:
        members = [name for name, t in teams.items() if t.cohort == cohort]
        lending = sum(borrowed[name] for name in members)
        spare = sum(idle[name] for name in members)
        for name in members:
            lent[name] = min(idle[name], lending * idle[name] // spare) if spare else 0
    held_teams = [_team_of_held(snapshot, hold.key) for hold in snapshot.holds]
    views = []
    for name in sorted(teams):
        team = teams[name]
        jobs = [job for job in snapshot.queued if job.team == name]
        limit = team.limits.get(GPUS)
        views.append(
            TeamView(
                name=name,
                cohort=team.cohort,
                nominal=nominal[name],
                borrowing_limit=limit.borrowing if limit is not None else None,
                used=used[name],
                borrowed=borrowed[name],
                lent=lent.get(name, 0),
                admitted_jobs=sum(1 for a in snapshot.pool.admitted if a.team == name),
                waiting_jobs=len(jobs) + held_teams.count(name),
                waiting_gpus=sum(job.usage.get(GPUS, 0) for job in jobs),
                longest_wait_seconds=round(max(job.waited for job in jobs), 3) if jobs else None,
            )
        )
    return tuple(views)


def _team_of_held(snapshot: Snapshot, key: JobKey) -> str | None:
    """The team of a held preemptor (it counts as waiting for its team)."""
    for gang in snapshot.pool.admitted:
        if gang.key == key:
            return gang.team
    return None


def _domain_views(
    topology: Topology, allocatable: Mapping[str, int], free: Mapping[str, int]
) -> tuple[DomainView, ...]:
    levels = [i for i, label in enumerate(topology.levels) if label != names.HOSTNAME_LABEL]
    out: list[DomainView] = []
    if not levels:  # no topology: one row per GPU node
        for node in sorted(allocatable):
            if allocatable[node] > 0:
                total = allocatable[node]
                out.append(
                    DomainView(names.HOSTNAME_LABEL, node, 1, total, total - free[node], free[node])
                )
        return tuple(out)
    for level in levels:
        totals: dict[int, list[int]] = {}
        for node, gpus in allocatable.items():
            domain = topology.domain_of(node, level)
            if domain is None or gpus <= 0:
                continue
            entry = totals.setdefault(domain, [0, 0, 0])
            entry[0] += 1
            entry[1] += gpus
            entry[2] += free[node]
        for domain, (count, gpus, left) in sorted(
            totals.items(), key=lambda item: topology.domain_name(item[0])
        ):
            name = topology.domain_name(domain).split("=", 1)[-1]
            out.append(DomainView(topology.levels[level], name, count, gpus, gpus - left, left))
    return tuple(out)


def _unusable(node: NodeView) -> NodeProblem | None:
    """Why placement cannot use ``node`` and since when: lost, NotReady, cordoned or tainted."""
    if node.ready == "Unknown":
        return NodeProblem(node.name, "lost (Ready is Unknown)", node.ready_since)
    if node.ready != "True":
        return NodeProblem(node.name, "NotReady", node.ready_since)
    tainted = [t for t in node.taints if t.effect in _NO_SCHEDULE]
    if not node.schedulable:
        return NodeProblem(node.name, "cordoned")
    if not tainted:
        return None
    since = min((t.added for t in tainted if t.added), default="")
    return NodeProblem(
        node.name, f"tainted {', '.join(f'{t.key}:{t.effect}' for t in tainted)}", since
    )


# ------------------------------------------------------------------ rule 8: the message


def told(kind: str, message: str, note: OutOfUse | None) -> str:
    """What a waiting gang is told: a ``Capacity`` wait names its nodes out of use (rule 8)."""
    if kind != "Capacity" or note is None:
        return message
    return f"{message} {note.clause()}"

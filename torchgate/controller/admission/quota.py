"""Team quotas with borrowing and reclaim, decided per whole gang.

Why quotas, and why whole gangs: a shared pool is run by its admins for several teams, each
promised a share (its *nominal* quota). A share left idle is wasted, so other teams may *borrow*
it, up to a limit the admin sets; when the owner needs it back, the borrowed gangs are preempted,
whole gangs only (a gang missing one rank holds its GPUs and computes nothing). Teams lend and
borrow within a *cohort* (``TeamQuota.spec.cohort``); a team's jobs are the jobs of its namespaces.
Quota is accounting, not placement: a gang within quota may still wait for free nodes
(``Capacity``) or a topology domain (``Topology``); those reasons come from ``topology``.

Rules (each one function; amounts are milli-units per quota key, ``pool.GPUS`` for GPUs):

1. ``usage_by_team``: a team uses the sum of its admitted gangs' quota usage (running, or reserved
   for pods being created; a gang of a namespace no team owns uses no quota). ``TeamTotals`` keeps
   the same sums, with each team's number of gangs, as gangs come and go (``add``), so a caller
   that follows the gangs by events never sums them all again.
2. ``check_quota``: a gang of a team fits its *nominal* quota when the team's usage plus the gang
   stays within nominal for every resource the team has a quota for; beyond nominal, it may borrow
   while usage plus the gang stays within nominal plus ``borrowingLimit`` (no limit: any amount);
   and in every case the cohort's usage plus the gang stays within the sum of the cohort's nominal
   quotas (one can only borrow what someone else leaves idle). Verdicts: ``Fits`` (within
   nominal), ``Borrows``, ``Reclaims`` (within nominal, but the cohort's idle quota is lent out:
   take it back), or ``QuotaWait`` with a message saying which limit it hits, with the team's
   used and nominal amounts (``team vision is at its quota (16/16 GPUs; may borrow 0 more); the
   job needs 8 GPUs``); a gang that would borrow more than the cohort can lend is told what the
   other teams leave idle, its own team's idle quota not counted (it is not borrowed), so the
   two amounts say why it waits (``team speech would borrow 8 GPUs over its quota (8/16 GPUs);
   the other teams of cohort dev leave 0 GPUs idle``; one GPU is ``1 GPU``).
3. ``reclaim_candidates``: only gangs of *other* teams of the cohort that are borrowing (usage over
   nominal in a resource the claimant needs) can be reclaimed, lowest priority first, then the most
   recently admitted (the least work lost); admin protection (``minimumRunSeconds``,
   ``neverPreemptPriority``) applies to reclaim too.
4. ``still_borrowing``: victims are chosen one whole gang at a time
   (``preemption.choose_victims``), and a gang of another team is taken only while that team is
   still over its nominal quota once the victims chosen so far are gone, so reclaim never pushes
   a team below its nominal quota by more than the one whole gang that crossed it.
5. ``closed_to_new_gangs``: a team whose TeamQuota is being deleted (``pool`` rule 1) admits no
   new gang: each of its waiting gangs waits (``Quota``) with a message saying so, and is not
   decided at all (it neither reclaims nor preempts). Its admitted gangs still count against its
   quota, may still be reclaimed when they borrow, and keep its protection, until they end and
   the TeamQuota goes (``poolsource`` rule 3); then its namespaces' gangs belong to no team.
6. ``over_quota``: a team holds more than it may when an admin lowered its quota below what its
   admitted gangs use: beyond nominal plus ``borrowingLimit``, or, with no limit, beyond nominal
   by more than its cohort's usage exceeds the cohort's nominal quotas (no other team lends it).
   Nothing is preempted for that alone: its gangs keep running, what they use over nominal is
   borrowed and so reclaimable by the other teams of the cohort (rule 3), and its new gangs wait
   (rule 2 says ``is over its quota``) until its usage is back within quota. ``poolsource``
   reports the amount (``overQuotaGPUs``, an ``OverQuota`` condition and a Warning Event).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.outlook import gpus_phrase
from torchgate.pytorchjob.pool import GPUS, TeamQuota
from torchgate.pytorchjob.units import Units, format_milli

UNITS: Final = {GPUS: "GPUs"}


@dataclass(frozen=True, slots=True)
class Admitted:
    """A gang that holds capacity (running or reserved) and counts against its team's quota.

    Attributes:
        key: ``(namespace, name)`` of the job.
        team: Its team's name, ``None`` when no team owns the namespace.
        priority: Its PriorityClass value.
        usage: Quota usage of the whole gang (``pool.GPUS`` and other quota keys, milli-units).
        admitted_at: When it was admitted (seconds on the clock the caller uses for ``now``).
        nodes: Pod name -> node (for preemption: what removing it frees).
        requests: Pod name -> what the pod takes from its node (milli-units).
        ends_by: When it has ended at the latest (same clock as ``admitted_at``), when its job
            has a deadline (``runPolicy.activeDeadlineSeconds``): ``backfill`` rule 2.
    """

    key: JobKey
    team: str | None
    priority: int
    usage: Units
    admitted_at: float = 0.0
    nodes: Mapping[str, str] | None = None
    requests: Mapping[str, Units] | None = None
    ends_by: float | None = None


@dataclass(frozen=True, slots=True)
class Fits:
    """Within the team's nominal quota and the cohort's."""


@dataclass(frozen=True, slots=True)
class Borrows:
    """Over nominal by ``amount`` (per resource), within the borrowing limit and idle quota."""

    amount: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Reclaims:
    """Within nominal, but the cohort's idle quota is lent out: borrowed gangs must go."""


@dataclass(frozen=True, slots=True)
class QuotaWait:
    """The gang waits for quota."""

    message: str


Verdict = Fits | Borrows | Reclaims | QuotaWait


def _add(total: dict[str, int], usage: Units, sign: int = 1) -> None:
    for name, amount in usage.items():
        total[name] = total.get(name, 0) + sign * amount


def _amount(resource: str, value: int) -> str:
    """``8 GPUs``, ``1 GPU`` (``outlook.gpus_phrase``), ``4 cpu``."""
    if resource == GPUS:
        return gpus_phrase(value)
    return f"{format_milli(value)} {UNITS.get(resource, resource)}"


def _share(resource: str, used: int, nominal: int) -> str:
    """``16/16 GPUs``: what a team uses of its nominal quota."""
    return f"{format_milli(used)}/{format_milli(nominal)} {UNITS.get(resource, resource)}"


# ------------------------------------------------------------------ rule 1


def usage_by_team(admitted: Iterable[Admitted]) -> dict[str, dict[str, int]]:
    """Team name -> summed usage of its admitted gangs (rule 1)."""
    usage: dict[str, dict[str, int]] = {}
    for gang in admitted:
        if gang.team is not None:
            total = usage.get(gang.team)
            if total is None:
                total = usage[gang.team] = {}
            for name, amount in gang.usage.items():
                total[name] = total.get(name, 0) + amount
    return usage


@dataclass(slots=True)
class TeamTotals:
    """Per team, its gangs' summed quota usage (``usage_by_team``) and their number (rule 1).

    Invariant: equal to ``TeamTotals.of`` the gangs added and not taken away; a team whose last
    gang was taken away has no entry.
    """

    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    gangs: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, admitted: Iterable[Admitted]) -> TeamTotals:
        """The totals of ``admitted``."""
        totals = cls()
        for gang in admitted:
            totals.add(gang)
        return totals

    def add(self, gang: Admitted, sign: int = 1) -> None:
        """Count ``gang`` in (``sign`` 1) or take it away again (-1)."""
        team = gang.team
        if team is None:
            return
        count = self.gangs.get(team, 0) + sign
        if count <= 0:
            self.gangs.pop(team, None)
            self.usage.pop(team, None)
            return
        self.gangs[team] = count
        _add(self.usage.setdefault(team, {}), gang.usage, sign)

    def copy(self) -> TeamTotals:
        """An independent copy."""
        return TeamTotals({team: dict(used) for team, used in self.usage.items()}, dict(self.gangs))


# ------------------------------------------------------------------ rule 2


def check_quota(
    team: TeamQuota | None,
    gang_usage: Units,
    usage: Mapping[str, Units],
    teams: Mapping[str, TeamQuota],
) -> Verdict:
    """Whether a gang of ``team`` may be admitted now as far as quota goes (rule 2)."""
    if team is None:
        return Fits()
    used = usage.get(team.name, {})
    cohort = [t for t in teams.values() if t.cohort == team.cohort]
    borrowed: dict[str, int] = {}
    lent_out = False
    for resource, limit in team.limits.items():
        want = gang_usage.get(resource, 0)
        if want <= 0:
            continue
        after = used.get(resource, 0) + want
        ceiling = limit.ceiling
        if ceiling is not None and after > ceiling:
            held = used.get(resource, 0)
            room = max(0, ceiling - max(held, limit.nominal))
            share = f"{_share(resource, held, limit.nominal)}; may borrow {format_milli(room)} more"
            state = (
                "is over its quota"
                if held > ceiling
                else "is at its quota"
                if held >= limit.nominal
                else "is within its quota"
            )
            return QuotaWait(
                f"team {team.name} {state} ({share}); the job needs {_amount(resource, want)}"
            )
        pool_nominal, pool_used = cohort_totals(cohort, resource, usage)
        if after > limit.nominal:
            borrowed[resource] = after - limit.nominal
        if pool_used + want > pool_nominal:
            if after > limit.nominal:
                held = used.get(resource, 0)
                lendable = max(0, pool_nominal - pool_used - max(0, limit.nominal - held))
                return QuotaWait(
                    f"team {team.name} would borrow {_amount(resource, after - limit.nominal)} "
                    f"over its quota ({_share(resource, held, limit.nominal)}); the other "
                    f"teams of cohort {team.cohort} leave {_amount(resource, lendable)} idle"
                )
            lent_out = True
    if lent_out:
        return Reclaims()
    return Borrows(borrowed) if borrowed else Fits()


def cohort_totals(
    cohort: Iterable[TeamQuota], resource: str, usage: Mapping[str, Units]
) -> tuple[int, int]:
    """The cohort's nominal quota of ``resource`` (what it may use together) and its usage."""
    nominal = used = 0
    for member in cohort:
        limit = member.limits.get(resource)
        if limit is not None:
            nominal += limit.nominal
        held = usage.get(member.name)
        if held:
            used += held.get(resource, 0)
    return nominal, used


# ------------------------------------------------------------------ rule 3


def borrowing(team: TeamQuota, used: Units, resources: Iterable[str]) -> bool:
    """Whether ``team`` uses more than its nominal quota of any of ``resources``."""
    return any(
        resource in team.limits and used.get(resource, 0) > team.limits[resource].nominal
        for resource in resources
    )


def borrowing_teams(
    teams: Mapping[str, TeamQuota],
    usage: Mapping[str, Units],
    resources: Iterable[str] | None = None,
) -> frozenset[str]:
    """Names of the teams over nominal in any of ``resources`` (``None``: any resource)."""
    return frozenset(
        name
        for name, team in teams.items()
        if borrowing(team, usage.get(name, {}), team.limits if resources is None else resources)
    )


def reclaim_candidates(
    team: TeamQuota,
    gang_usage: Units,
    admitted: Iterable[Admitted],
    usage: Mapping[str, Units],
    teams: Mapping[str, TeamQuota],
    *,
    protected: Callable[[Admitted], bool],
) -> list[Admitted]:
    """Borrowed gangs ``team`` may take its quota back from, cheapest first (rule 3)."""
    needed = needed_resources(team, gang_usage)
    borrowers = reclaimable_teams(team, needed, usage, teams)
    out = [
        gang
        for gang in admitted
        if gang.team in borrowers and uses_any(gang, needed) and not protected(gang)
    ]
    return sorted(out, key=lambda g: (g.priority, -g.admitted_at, g.key))


def needed_resources(team: TeamQuota, gang_usage: Units) -> tuple[str, ...]:
    """The quota resources a gang of ``team`` asks for (what reclaim may take back, rule 3)."""
    return tuple(r for r, amount in gang_usage.items() if amount > 0 and r in team.limits)


def reclaimable_teams(
    team: TeamQuota,
    needed: Iterable[str],
    usage: Mapping[str, Units],
    teams: Mapping[str, TeamQuota],
) -> frozenset[str]:
    """The other teams of ``team``'s cohort borrowing any of ``needed`` (rule 3)."""
    lenders = {
        name: t for name, t in teams.items() if t.cohort == team.cohort and name != team.name
    }
    return borrowing_teams(lenders, usage, needed)


def uses_any(gang: Admitted, resources: Iterable[str]) -> bool:
    """Whether ``gang`` holds quota of any of ``resources`` (reclaiming it gives some back)."""
    return any(gang.usage.get(r, 0) > 0 for r in resources)


# ------------------------------------------------------------------ rule 4


def still_borrowing(
    victim: Admitted,
    chosen: Iterable[Admitted],
    usage: Mapping[str, Units],
    teams: Mapping[str, TeamQuota],
) -> bool:
    """Whether ``victim``'s team is still over nominal once ``chosen`` are gone (rule 4)."""
    if victim.team is None or victim.team not in teams:
        return False
    left = without(usage, chosen).get(victim.team, {})
    return borrowing(teams[victim.team], left, teams[victim.team].limits)


def without(usage: Mapping[str, Units], gangs: Iterable[Admitted]) -> dict[str, dict[str, int]]:
    """``usage`` after ``gangs`` are gone (a copy)."""
    out = {name: dict(values) for name, values in usage.items()}
    for gang in gangs:
        if gang.team is not None:
            _add(out.setdefault(gang.team, {}), gang.usage, -1)
    return out


# ------------------------------------------------------------------ rule 5


def closed_to_new_gangs(
    waiting: Iterable[JobKey], owner: Mapping[str, str], teams: Mapping[str, TeamQuota]
) -> dict[JobKey, str]:
    """Waiting gang -> why it waits, for each gang whose team's TeamQuota is deleting (rule 5).

    ``owner``: namespace -> the name of the valid team owning it.
    """
    closed: dict[JobKey, str] = {}
    for key in waiting:
        team = teams.get(owner.get(key[0], ""))
        if team is not None and team.deleting:
            closed[key] = (
                f"TeamQuota {team.name} is being deleted: it admits no new gang of its team; "
                "it goes once its admitted gangs end"
            )
    return closed


# ------------------------------------------------------------------ rule 6


def over_quota(
    team: TeamQuota, usage: Mapping[str, Units], teams: Mapping[str, TeamQuota]
) -> dict[str, int]:
    """Resource -> how much ``team`` holds beyond what it may (rule 6); only those over."""
    used = usage.get(team.name, {})
    cohort = [t for t in teams.values() if t.cohort == team.cohort]
    over: dict[str, int] = {}
    for resource, limit in team.limits.items():
        held = used.get(resource, 0)
        ceiling = limit.ceiling
        if ceiling is not None:
            excess = held - ceiling
        else:
            pool_nominal, pool_used = cohort_totals(cohort, resource, usage)
            excess = min(held - limit.nominal, pool_used - pool_nominal)
        if excess > 0:
            over[resource] = excess
    return over

"""Whole-gang preemption by priority: which running gangs make room for an urgent one.

Why whole gangs, and why decided here: a gang that loses one pod holds the GPUs of the others and
computes nothing until it is restarted whole, so evicting single pods (the most persistent bug
class of the peers: Volcano evicting pods of a gang, over-evicting, leaving gangs under their
minimum) costs the victim everything and frees too little for the preemptor. torchgate's admitter
already decides for whole gangs, so victims are chosen as whole gangs, and the preemptor's
placement, computed with the victims gone, is returned so the caller reserves it while the
victims terminate and nothing else takes those GPUs.

Rules (each one function):

1. ``may_preempt``: a preemptor whose PriorityClass has ``preemptionPolicy: Never`` preempts
   nothing; otherwise it may preempt gangs of *lower* priority of its own team, of no team, or of
   a team that is borrowing (over its nominal quota in any resource). A gang of a team within its
   nominal quota is never preempted by another team: the quota is a guarantee. (Taking back lent
   quota from a borrowing team, whatever the priorities, is ``quota.reclaim_candidates``.)
2. ``is_protected``: the admin protects gangs that have run less than ``minimumRunSeconds`` and
   gangs whose priority is at or above ``neverPreemptPriority``.
3. ``victim_order``: candidates cheapest first: lowest priority, then the most recently admitted
   (the least work lost), then by key for determinism.
4. ``choose_victims``: add candidates in that order until the preemptor fits (the caller's
   ``trial`` places it with the victims gone), then put back every victim it still fits without,
   newest addition first: a small set, never a partial gang. ``None`` if all candidates are not
   enough. A gang of another team is taken only while its team is still borrowing
   (``quota.still_borrowing``). Victims added while what they could give at most, summed, is
   less than what the preemptor lacks (``Lack``, the caller's bound) are added without a trial:
   such a set cannot make room, so the trial would say no.
5. ``cheapest``: with candidates grouped (all candidates together first, then one group per
   topology domain of the preemptor's required level), the cheapest successful set wins: lowest
   highest-priority among its victims, then fewest victims, then fewest GPUs, then least run time.
   If all candidates together do not make room, no group can (the trial is monotone); a group is
   abandoned as soon as it must take a victim of higher priority than the best set found, or
   when every victim left in it costs more alone than that set (a set costs no less than the
   victim it is completed with: ``floors``), and not searched at all when no set of its victims
   could cost less than that set (its *floor*: its cheapest gang alone), or when the caller can
   tell that even all its victims together would not make room. On a tie the earlier group's
   set wins.
6. ``protection``: one pool-wide protection: the longest ``minimumRunSeconds`` and the lowest
   ``neverPreemptPriority`` of the policies, and never above ``HELD_PRIORITY``, the priority the
   admitter gives gangs that hold capacity without pods yet (reservations and holds), so that a
   cycle never picks a gang whose pods are being created as a victim.

Cost: the greedy pass of rule 4 tries no set the caller's ``Lack`` rules out (most of a busy
pool's greedy trials: a whole-node gang needs many small victims before the pool has room), and
the pruning pass drops a run of victims with one trial when it can (usually the last gang added
was enough on its own), which gives the same set as dropping them one by one because the trial
is monotone. Rules 1-3 are answered from an index of the running gangs by
team, cheapest first (``Candidates``), built once per cycle: a preemptor's candidates are the
heads of a few groups, merged, not a pass over every running gang. Rule 5 searches the groups
after the first by their floor, cheapest first, when each group is ordered by priority (then
a group's answer does not depend on the best set found before it), so the best set is found
early and the search ends at the first group whose floor does not beat it. A caller that keeps
its groups keeps their floors (``Group``) and their order (``search_order``) too.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter
from typing import Final, Generic, TypeVar

from torchgate.controller.admission.quota import Admitted, borrowing_teams, uses_any
from torchgate.pytorchjob.pool import GPUS, PreemptionSettings, TeamQuota

T = TypeVar("T")
HELD_PRIORITY: Final = 1 << 62
_KEY: Final = attrgetter("key")  # a gang's key
Cost = tuple[int, int, int, float]  # ``cost``: priority, gangs, GPUs, run seconds


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The waiting gang that wants room: its team, priority and PriorityClass policy."""

    team: str | None
    priority: int
    preempts: bool = True  # False for ``preemptionPolicy: Never``


@dataclass(frozen=True, slots=True)
class Choice(Generic[T]):
    """Victims (whole gangs) and what the preemptor gets once they are gone."""

    victims: tuple[Admitted, ...]
    result: T


@dataclass(frozen=True, slots=True)
class Lack:
    """What the preemptor lacks, and the most each victim could give towards it (rule 4).

    ``missing``: how many units (the caller's: slots of the preemptor's shape) it lacks;
    ``most(victim)``: at most how many the victim gives, whatever else is gone, such that what a
    set gives is never more than its victims' ``most`` summed. A set whose sum is below
    ``missing`` cannot make room.
    """

    missing: int
    most: Callable[[Admitted], int]


# ------------------------------------------------------------------ rules 1-3


def may_preempt(
    preemptor: Preemptor,
    victim: Admitted,
    teams: Mapping[str, TeamQuota],
    borrowers: Container[str],
) -> bool:
    """Whether ``preemptor`` may evict ``victim`` by priority (rule 1).

    ``borrowers`` are the teams over their nominal quota (``quota.borrowing_teams``).
    """
    if not preemptor.preempts or victim.priority >= preemptor.priority:
        return False
    if victim.team is None or victim.team == preemptor.team or victim.team not in teams:
        return True
    return victim.team in borrowers


def is_protected(victim: Admitted, settings: PreemptionSettings, now: float) -> bool:
    """Whether the admin protects ``victim`` from any preemption now (rule 2)."""
    return settings.protects(priority=victim.priority, run_seconds=now - victim.admitted_at)


def victim_order(victim: Admitted) -> tuple[int, float, tuple[str, str]]:
    """Sort key, cheapest victim first (rule 3)."""
    return victim.priority, -victim.admitted_at, victim.key


def candidates(
    preemptor: Preemptor,
    admitted: Iterable[Admitted],
    teams: Mapping[str, TeamQuota],
    usage: Mapping[str, Mapping[str, int]],
    settings: PreemptionSettings,
    now: float,
) -> list[Admitted]:
    """The gangs ``preemptor`` may evict, cheapest first (rules 1-3)."""
    return Candidates(admitted, teams, settings, now).of(preemptor, borrowing_teams(teams, usage))


class Candidates:
    """Rules 1-3 over one set of running gangs, answered per preemptor without a pass over all.

    The gangs the admin does not protect (rule 2) are grouped once by team, each group cheapest
    first (rule 3); a gang of no team, or of a team without a quota, goes to the group of no
    team. A preemptor's candidates are then the lower-priority head of each group it may take
    from (rule 1: its own team's, no team's, and borrowing teams'), merged cheapest first, and
    reclaim's (``quota`` rule 3) those of the borrowing teams' groups that hold what it needs.
    """

    def __init__(
        self,
        admitted: Iterable[Admitted],
        teams: Mapping[str, TeamQuota],
        settings: PreemptionSettings,
        now: float,
    ) -> None:
        groups: dict[str | None, list[Admitted]] = {}
        for victim in admitted:
            if not is_protected(victim, settings, now):
                team = victim.team if victim.team in teams else None
                groups.setdefault(team, []).append(victim)
        for group in groups.values():
            group.sort(key=victim_order)
        self.groups = groups
        self._priorities = {team: [v.priority for v in group] for team, group in groups.items()}

    def remove(self, gone: Iterable[Admitted]) -> None:
        """Forget gangs that were preempted."""
        for victim in gone:
            team = victim.team if victim.team in self.groups else None
            group = self.groups.get(team, [])
            at = next((i for i, v in enumerate(group) if v is victim), None)
            if at is not None:
                del group[at]
                del self._priorities[team][at]

    def of(self, preemptor: Preemptor, borrowers: Iterable[str]) -> list[Admitted]:
        """``candidates`` for ``preemptor``, ``borrowers`` being the teams over nominal."""
        if not preemptor.preempts:
            return []
        teams = {None, preemptor.team, *borrowers}
        heads = [
            victim
            for team in teams
            if team in self.groups
            for victim in self.groups[team][
                : bisect_left(self._priorities[team], preemptor.priority)
            ]
        ]
        return sorted(heads, key=victim_order)  # stable: as a merge of the teams' runs

    def reclaimable(self, borrowers: Iterable[str], needed: Sequence[str]) -> list[Admitted]:
        """``quota.reclaim_candidates``: gangs of ``borrowers`` that hold some of ``needed``."""
        heads = [
            victim
            for team in borrowers
            if team in self.groups
            for victim in self.groups[team]
            if uses_any(victim, needed)
        ]
        return sorted(heads, key=victim_order)


# ------------------------------------------------------------------ rules 4-5


def choose_victims(
    ordered: Sequence[Admitted],
    trial: Callable[[Sequence[Admitted]], T | None],
    *,
    highest: int | None = None,
    allowed: Callable[[Admitted, Sequence[Admitted]], bool] | None = None,
    give_up_at: int | None = None,
    lack: Lack | None = None,
) -> Choice[T] | None:
    """A small set of whole gangs whose removal lets the preemptor fit (rule 4).

    ``trial(victims)`` answers whether (and where) the preemptor fits once ``victims`` are gone;
    it must be monotone (more victims never make it fit worse). With ``highest``, give up rather
    than take a victim of a higher priority (the set would cost more than one already found).
    With ``give_up_at``, give up rather than take the victim at that position of ``ordered`` or
    a later one (``cheapest``: no set it would end with could cost less than one already found).
    ``allowed(victim, chosen)`` skips a candidate that may no longer be taken once ``chosen`` are
    gone (``quota.still_borrowing``); dropping victims in the pruning pass never invalidates it.
    With ``lack``, a set that cannot give what the preemptor lacks is not tried.
    """
    victims: list[Admitted] = []
    result: T | None = None
    short, most = (0, None) if lack is None else (lack.missing, lack.most)
    for position, victim in enumerate(ordered):
        if highest is not None and victim.priority > highest:
            return None
        if position == give_up_at:
            return None
        if allowed is not None and not allowed(victim, victims):
            continue
        victims.append(victim)
        if short > 0 and most is not None:
            short -= most(victim)
            if short > 0:
                continue  # these victims cannot make room: the trial would say no
        result = trial(victims)
        if result is not None:
            break
    if result is None:
        return None
    pending = victims[-2::-1]  # the pruning pass tries these, newest addition first
    while pending:
        dropped, again = _longest_drop(victims, pending, trial)
        if again is not None:
            gone = {id(v) for v in pending[:dropped]}
            victims, result = [v for v in victims if id(v) not in gone], again
        pending = pending[dropped + 1 :]  # ``pending[dropped]`` is still needed (if any)
    return Choice(tuple(victims), result)


def _longest_drop(
    victims: Sequence[Admitted],
    pending: Sequence[Admitted],
    trial: Callable[[Sequence[Admitted]], T | None],
) -> tuple[int, T | None]:
    """How many of ``pending`` in a row the pruning pass drops, and the trial's last answer.

    The pass drops ``pending[0]``, then ``pending[1]``, ... while the preemptor still fits; as
    ``trial`` is monotone, dropping the first ``m`` at once fits exactly when each of those steps
    did, so the run is found by trying all first (the usual case: the last gang added was enough
    on its own), then doubling and halving.
    """

    def fits_without(count: int) -> T | None:
        gone = {id(v) for v in pending[:count]}
        return trial([v for v in victims if id(v) not in gone])

    answer = fits_without(len(pending))
    if answer is not None:
        return len(pending), answer
    low, high, best = 0, len(pending), None  # dropping ``low`` fits, dropping ``high`` does not
    size = 1
    while size < high:
        answer = fits_without(size)
        if answer is None:
            high = size
            break
        low, best = size, answer
        size *= 2
    while high - low > 1:
        middle = (low + high) // 2
        answer = fits_without(middle)
        if answer is None:
            high = middle
        else:
            low, best = middle, answer
    return low, best


def cost(choice: Choice[T], now: float) -> Cost:
    """How much a set of victims loses (rule 5): priority, gangs, GPUs, run seconds."""
    victims = choice.victims
    return (
        max((v.priority for v in victims), default=-(2**63)),
        len(victims),
        sum(v.usage.get(GPUS, 0) for v in victims),
        sum(now - v.admitted_at for v in victims),
    )


def cheapest(
    groups: Iterable[Sequence[Admitted]],
    trial: Callable[[Sequence[Admitted]], T | None],
    now: float,
    *,
    allowed: Callable[[Admitted, Sequence[Admitted]], bool] | None = None,
    hopeless: Callable[[int], bool] | None = None,
    order: SearchOrder | None = None,
    lack: Lack | None = None,
) -> Choice[T] | None:
    """The cheapest successful victim set over candidate groups (rule 5).

    The winner is the set of least ``cost``, the earliest group's on a tie. ``hopeless(number)``
    says that no set of the victims of group ``number`` can make room (the caller's bound);
    such a group is not searched, and a hopeless first group ends it. ``lack`` is passed to
    each group's ``choose_victims``. A caller that keeps its
    groups passes them as ``Group``, and their ``search_order`` as ``order``, so that what it
    knows of them is not counted again.

    Bound: a set costs no less than the victim it was completed with alone (the one the greedy
    pass of rule 4 added last, which the pruning pass keeps), so once a best set is found, a
    group's search gives up where every victim left costs more alone (``floors``), a group whose
    floor does not beat it is skipped whole and, when the groups are searched by floor, so is
    every group after it.
    """
    listed = list(groups)
    if order is None:
        order = search_order(listed, now)
    best: Choice[T] | None = None
    bound: tuple[Cost, int] | None = None  # ``best``'s cost and group
    seen: set[tuple[tuple[str, str], ...]] = set()
    for number, least in order.steps:
        group = listed[number]
        give_up_at: int | None = None
        if bound is not None and least is not None:
            if (least, number) > bound:
                if order.by_floor:
                    break  # so does every later group's floor (nor could its twins)
                continue  # no set of this group could cost less than ``best``
            give_up_at = _give_up_at(group, now, number, bound)
        if hopeless is not None and hopeless(number):
            if number == 0:
                return None
            continue  # its twins (the same victims) are hopeless too
        marker = _marker_of(group)
        if marker in seen:
            continue
        seen.add(marker)
        highest = None if bound is None else bound[0][0]
        choice = choose_victims(
            group, trial, highest=highest, allowed=allowed, give_up_at=give_up_at, lack=lack
        )
        if choice is None:
            if number == 0:
                return None  # the first group holds every candidate: no subset can do better
            continue
        found = (cost(choice, now), number)
        if bound is None or found < bound:
            best, bound = choice, found
    return best


def _give_up_at(
    group: Sequence[Admitted], now: float, number: int, bound: tuple[Cost, int]
) -> int | None:
    """The first position from which no set of group ``number`` beats ``bound`` (or none).

    A set completed with the victim at position ``i`` costs no less than the least ``floor``
    of the victims from ``i`` on (non-decreasing in ``i``), and beats ``bound`` only with a
    lower cost, or the same cost in an earlier group.
    """
    floors = _floors_of(group, now)
    least, best_number = bound
    found = (bisect_right if number < best_number else bisect_left)(floors, least)
    return found if found < len(floors) else None


@dataclass(frozen=True, slots=True)
class SearchOrder:
    """The groups ``cheapest`` searches, in order (``search_order``).

    ``steps``: each non-empty group's number with the least its sets could cost (its floor;
    ``None`` for the first one searched: nothing is found before it), read once, in order (a
    caller that keeps its groups may yield them as ``cheapest`` reads them: it stops early).
    ``by_floor``: whether the steps after the first go by that least cost, then number.
    """

    steps: Iterable[tuple[int, Cost | None]]
    by_floor: bool


def search_order(
    groups: Sequence[Sequence[Admitted]], now: float, *, by_priority: bool = False
) -> SearchOrder:
    """The non-empty groups to search, in order, each with the least its sets could cost.

    The first group comes first (if it finds nothing, no group can). When every group is
    ordered by priority, the others follow by that least cost (``floor``), so the best set is
    found early and the groups after it are skipped: a group then yields its greedy set, or
    nothing only when that set would cost more than the best one already found, so the order
    does not change the winner. Otherwise (reclaimable gangs of any priority listed first) a
    group's answer depends on the best set found before it, so they keep their order.
    ``by_priority``: the caller knows every group is ordered by priority.
    """
    present = [number for number, group in enumerate(groups) if group]
    if not present:
        return SearchOrder([], by_floor=False)
    rest = [(_floor_of(groups[number], now), number) for number in present[1:]]
    by_floor = by_priority or all(_by_priority(group) for group in groups)
    if by_floor:
        rest.sort()
    return SearchOrder([(present[0], None), *((n, least) for least, n in rest)], by_floor)


class Group(list[Admitted]):
    """Candidates searched together, with what ``cheapest`` asks of them counted once.

    For a caller that keeps its groups from search to search (a group never changes once
    built): whether it is ordered by priority (``by_priority``, which a caller that knows may
    pass: any part of an ordered group is ordered), its floor and its ``floors`` at ``now``,
    each counted when first asked (most groups are only ordered by their floor, never searched).
    """

    __slots__ = ("_floor", "_floors", "_marker", "_now", "by_priority")

    def __init__(
        self, victims: Iterable[Admitted], now: float, *, by_priority: bool | None = None
    ) -> None:
        super().__init__(victims)
        self._now = now
        self._floor: Cost | None = None
        self._floors: list[Cost] | None = None
        self._marker: tuple[tuple[str, str], ...] | None = None
        self.by_priority = ordered_by_priority(self) if by_priority is None else by_priority

    @property
    def floor(self) -> Cost:
        """The least any victim set of the group could cost: its cheapest gang alone (not empty)."""
        if self._floor is None:
            now = self._now
            self._floor = min(_alone(victim, now) for victim in self)
        return self._floor

    @property
    def floors(self) -> list[Cost]:
        """``floors`` of the group (not empty)."""
        if self._floors is None:
            self._floors = floors(self, self._now)
        return self._floors

    @property
    def marker(self) -> tuple[tuple[str, str], ...]:
        """Its gangs' keys, in order: ``cheapest`` searches twin groups once."""
        if self._marker is None:
            self._marker = tuple(map(_KEY, self))
        return self._marker


def _marker_of(group: Sequence[Admitted]) -> tuple[tuple[str, str], ...]:
    return group.marker if isinstance(group, Group) else tuple(map(_KEY, group))


def _floor_of(group: Sequence[Admitted], now: float) -> Cost:
    return group.floor if isinstance(group, Group) else min(_alone(v, now) for v in group)


def _floors_of(group: Sequence[Admitted], now: float) -> list[Cost]:
    return group.floors if isinstance(group, Group) else floors(group, now)


def _by_priority(group: Sequence[Admitted]) -> bool:
    return group.by_priority if isinstance(group, Group) else ordered_by_priority(group)


def ordered_by_priority(group: Sequence[Admitted]) -> bool:
    """Whether ``group`` lists its gangs by priority, lowest first."""
    return all(a.priority <= b.priority for a, b in pairwise(group))


def floors(group: Sequence[Admitted], now: float) -> list[Cost]:
    """Per position of ``group``: the least a set completed with a victim from there on costs.

    A set costs no less than the victim it was completed with (rule 4's last addition, which
    stays) alone: a set of more gangs costs more at the same highest priority. So no victim
    set of ``group`` costs less than its cheapest gang alone, its *floor* (the first entry);
    the entries never decrease.
    """
    out: list[Cost] = []
    least: Cost | None = None
    for victim in reversed(group):
        alone = _alone(victim, now)
        if least is None or alone < least:
            least = alone
        out.append(least)
    out.reverse()
    return out


def _alone(victim: Admitted, now: float) -> Cost:
    """What the victim costs as a set of its own (``cost``)."""
    return victim.priority, 1, victim.usage.get(GPUS, 0), now - victim.admitted_at


def group_by_domain(
    ordered: Sequence[Admitted], domain_of: Callable[[str], str | None]
) -> list[list[Admitted]]:
    """All candidates, then the candidates per domain they hold nodes in (order kept).

    A victim spread over two racks appears in both groups: evicting it frees room in each.
    """

    def domains_of(victim: Admitted) -> set[str]:
        touched = {domain_of(node) for node in (victim.nodes or {}).values()}
        return {domain for domain in touched if domain is not None}

    return [list(ordered), *domain_groups(ordered, domains_of).values()]


def domain_groups(
    ordered: Sequence[Admitted], domains_of: Callable[[Admitted], Iterable[str]]
) -> dict[str, list[Admitted]]:
    """Domain -> the candidates holding nodes in it (``domains_of``), as ``group_by_domain``."""
    groups: dict[str, list[Admitted]] = {}
    for victim in ordered:
        for domain in sorted(domains_of(victim)):
            groups.setdefault(domain, []).append(victim)
    return groups


# ------------------------------------------------------------------ rule 6


def protection(settings: Iterable[PreemptionSettings]) -> PreemptionSettings:
    """The pool-wide protection of several policies, held gangs included (rule 6)."""
    minimum = 0
    never = HELD_PRIORITY
    for one in settings:
        minimum = max(minimum, one.minimum_run_seconds)
        if one.never_preempt_priority is not None:
            never = min(never, one.never_preempt_priority)
    return PreemptionSettings(minimum_run_seconds=minimum, never_preempt_priority=never)

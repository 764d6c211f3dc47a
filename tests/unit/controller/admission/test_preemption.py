"""Whole-gang preemption: who may be evicted, in which order, and the smallest set that works."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.gang import G, admitted
from tests.builders.team import parsed_team
from torchgate.controller.admission import preemption as preemption_module
from torchgate.controller.admission.preemption import (
    HELD_PRIORITY,
    Choice,
    Group,
    Lack,
    Preemptor,
    candidates,
    cheapest,
    choose_victims,
    cost,
    group_by_domain,
    is_protected,
    may_preempt,
    protection,
    search_order,
    victim_order,
)
from torchgate.controller.admission.quota import Admitted
from torchgate.pytorchjob.pool import GPUS, PreemptionSettings

T = TypeVar("T")
TEAMS = {"a": parsed_team("a", 8), "b": parsed_team("b", 8)}


@pytest.mark.parametrize(
    ("preemptor", "victim", "borrowers", "allowed"),
    [
        (Preemptor(None, 10), admitted("v", 8, priority=5), set(), True),
        (Preemptor(None, 10, preempts=False), admitted("v", 8, priority=5), set(), False),
        (Preemptor(None, 5), admitted("v", 8, priority=5), set(), False),
        (Preemptor("a", 10), admitted("v", 8, team="a", priority=5), set(), True),
        (Preemptor("a", 10), admitted("v", 8, team="b", priority=5), set(), False),
        (Preemptor("a", 10), admitted("v", 8, team="b", priority=5), {"b"}, True),
        (Preemptor("a", 10), admitted("v", 8, team="gone", priority=5), set(), True),
    ],
    ids=[
        "lower-priority",
        "policy-never",
        "equal-priority",
        "own-team",
        "other-team-within-nominal",
        "other-team-borrowing",
        "unknown-team",
    ],
)
def test_who_may_be_preempted(
    preemptor: Preemptor, victim: Admitted, borrowers: set[str], allowed: bool
) -> None:
    assert may_preempt(preemptor, victim, TEAMS, borrowers) is allowed


def test_protection_by_minimum_run_time_and_priority() -> None:
    protection = PreemptionSettings(minimum_run_seconds=600, never_preempt_priority=100)
    assert is_protected(admitted("young", 8, at=1000.0), protection, now=1500.0)
    assert not is_protected(admitted("old", 8, at=0.0), protection, now=1500.0)
    assert is_protected(admitted("vip", 8, priority=100, at=0.0), protection, now=1500.0)


def test_candidates_are_ordered_cheapest_first_and_exclude_protected() -> None:
    running = [
        admitted("old-low", 8, priority=0, at=0.0),
        admitted("new-low", 8, priority=0, at=500.0),
        admitted("mid", 8, priority=5, at=0.0),
        admitted("young", 8, priority=0, at=1400.0),
        admitted("equal", 8, priority=10, at=0.0),
    ]
    found = candidates(
        Preemptor(None, 10), running, TEAMS, {}, PreemptionSettings(minimum_run_seconds=600), 1500.0
    )
    assert [v.key[1] for v in found] == ["new-low", "old-low", "mid"]
    assert sorted(running, key=victim_order)[0].key[1] == "young"


def freed_at_least(need: int) -> Callable[[Sequence[Admitted]], int | None]:
    def trial(victims: Sequence[Admitted]) -> int | None:
        freed = sum(v.usage[GPUS] for v in victims)
        return freed if freed >= need * G else None

    return trial


def test_greedy_then_pruned_a_small_set_of_whole_gangs() -> None:
    ordered = [admitted("s1", 2), admitted("s2", 2), admitted("big", 8)]
    choice = choose_victims(ordered, freed_at_least(8))
    assert choice is not None
    assert [v.key[1] for v in choice.victims] == ["big"]
    assert choose_victims(ordered, freed_at_least(13)) is None


def test_a_victim_of_higher_priority_than_the_best_set_ends_the_search() -> None:
    ordered = [admitted("low", 4, priority=1), admitted("high", 4, priority=9)]
    assert choose_victims(ordered, freed_at_least(8), highest=5) is None


def test_the_cheapest_group_wins() -> None:
    everything = [admitted("low", 4, priority=1), admitted("high", 8, priority=9)]
    rack = [admitted("mid", 8, priority=3)]
    best = cheapest([[*everything, *rack], rack], freed_at_least(8), now=0.0)
    assert isinstance(best, Choice)
    assert [v.key[1] for v in best.victims] == ["mid"]
    assert cheapest([everything, rack], freed_at_least(20), now=0.0) is None


def test_group_by_domain_puts_a_gang_in_every_domain_it_touches() -> None:
    spread = admitted("spread", 16, nodes={"p0": "r1-h1", "p1": "r2-h1"})
    local = admitted("local", 8, nodes={"p0": "r1-h2"})
    groups = group_by_domain([spread, local], lambda node: node.split("-")[0])
    assert [[v.key[1] for v in g] for g in groups] == [
        ["spread", "local"],
        ["spread", "local"],
        ["spread"],
    ]


# ------------------------------------------------------------------ the search against a reference


def reference_choose(
    ordered: Sequence[Admitted],
    trial: Callable[[Sequence[Admitted]], T | None],
    *,
    highest: int | None = None,
    allowed: Callable[[Admitted, Sequence[Admitted]], bool] | None = None,
) -> Choice[T] | None:
    """Rule 4 as first written: grow one victim at a time, then try dropping each in turn."""
    victims: list[Admitted] = []
    result: T | None = None
    for victim in ordered:
        if highest is not None and victim.priority > highest:
            return None
        if allowed is not None and not allowed(victim, victims):
            continue
        victims.append(victim)
        result = trial(victims)
        if result is not None:
            break
    if result is None:
        return None
    for victim in reversed(victims[:-1]):
        rest = [v for v in victims if v is not victim]
        again = trial(rest)
        if again is not None:
            victims, result = rest, again
    return Choice(tuple(victims), result)


def reference_cheapest(
    groups: Sequence[Sequence[Admitted]],
    trial: Callable[[Sequence[Admitted]], T | None],
    now: float,
    *,
    allowed: Callable[[Admitted, Sequence[Admitted]], bool] | None = None,
    hopeless: Callable[[int], bool] | None = None,
    order: object = None,
    lack: object = None,
) -> Choice[T] | None:
    """Rule 5 as first written: every group searched, no bound on what a group could cost.

    ``hopeless`` is ignored: a group no set of whose victims makes room finds nothing anyway;
    so is ``order``: every group is searched in its own order; and so is ``lack``: every set
    is tried.
    """
    best: Choice[T] | None = None
    seen: set[tuple[tuple[str, str], ...]] = set()
    for number, group in enumerate(groups):
        marker = tuple(v.key for v in group)
        if not group or marker in seen:
            continue
        seen.add(marker)
        highest = None if best is None else cost(best, now)[0]
        choice = reference_choose(group, trial, highest=highest, allowed=allowed)
        if choice is None and number == 0:
            return None
        if choice is not None and (best is None or cost(choice, now) < cost(best, now)):
            best = choice
    return best


@hs.composite
def searches_and_needs(
    draw: hs.DrawFn,
) -> tuple[list[list[Admitted]], Callable[[Sequence[Admitted]], frozenset[str] | None], Any, int]:
    """``searches``, and the GPUs its trial needs freed (in the pool, or in one rack)."""
    count = draw(hs.integers(0, 12))
    pool: list[Admitted] = []
    for i in range(count):
        racks = draw(hs.lists(hs.sampled_from("xyz"), min_size=1, max_size=2, unique=True))
        pool.append(
            admitted(
                f"g{i}",
                draw(hs.sampled_from((1, 2, 4, 8, 16))),
                team=draw(hs.sampled_from((None, "a", "b"))),
                priority=draw(hs.integers(0, 3)),
                at=draw(hs.sampled_from((0.0, 10.0, 20.0))),
                nodes={f"p{j}": f"{rack}-h{j}" for j, rack in enumerate(racks)},
            )
        )
    ordered = sorted(pool, key=victim_order)
    if draw(hs.booleans()):  # reclaim candidates first, as the cycle puts them
        ordered = sorted(ordered, key=lambda v: v.team != "b")
    groups = group_by_domain(ordered, lambda node: node.split("-")[0])
    need = draw(hs.integers(1, 40)) * G
    per_rack = draw(hs.booleans())
    quota = draw(hs.sampled_from((None, 4, 8)))

    def trial(victims: Sequence[Admitted]) -> frozenset[str] | None:
        # freed GPUs (all of a gang's GPUs count in each rack it touches when per_rack)
        freed: dict[str, int] = {}
        for victim in victims:
            for rack in {node.split("-")[0] for node in (victim.nodes or {}).values()}:
                freed[rack] = freed.get(rack, 0) + victim.usage[GPUS]
        total = sum(v.usage[GPUS] for v in victims)
        ok = max(freed.values(), default=0) >= need if per_rack else total >= need
        return frozenset(v.key[1] for v in victims) if ok else None

    def allowed(victim: Admitted, chosen: Sequence[Admitted]) -> bool:
        # team "a" may lose at most ``quota`` GPUs (taking more never becomes allowed again)
        if quota is None or victim.team != "a":
            return True
        return sum(v.usage[GPUS] for v in chosen if v.team == "a") < quota * G

    return groups, trial, allowed, need


def searches() -> hs.SearchStrategy[
    tuple[list[list[Admitted]], Callable[[Sequence[Admitted]], frozenset[str] | None], Any]
]:
    """Candidate groups (all, then per rack), a monotone rack-aware trial and a team limit."""
    return searches_and_needs().map(lambda search: search[:3])


@settings(max_examples=400, deadline=None)
@given(searches(), hs.booleans())
def test_the_search_chooses_what_the_reference_search_chooses(
    search: tuple[list[list[Admitted]], Callable[[Sequence[Admitted]], frozenset[str] | None], Any],
    limit_teams: bool,
) -> None:
    groups, trial, allowed = search
    limit = allowed if limit_teams else None
    assert cheapest(groups, trial, 30.0, allowed=limit) == reference_cheapest(
        groups, trial, 30.0, allowed=limit
    )
    for group in groups:
        for highest in (None, 0, 1, 2):
            assert choose_victims(group, trial, highest=highest, allowed=limit) == reference_choose(
                group, trial, highest=highest, allowed=limit
            )


@settings(max_examples=300, deadline=None)
@given(searches(), hs.booleans())
def test_kept_groups_and_their_kept_order_choose_what_the_reference_search_chooses(
    search: tuple[list[list[Admitted]], Callable[[Sequence[Admitted]], frozenset[str] | None], Any],
    limit_teams: bool,
) -> None:
    groups, trial, allowed = search
    limit = allowed if limit_teams else None
    kept = [Group(group, 30.0) for group in groups]
    order = search_order(kept, 30.0)
    assert cheapest(kept, trial, 30.0, allowed=limit, order=order) == reference_cheapest(
        groups, trial, 30.0, allowed=limit
    )


@settings(max_examples=300, deadline=None)
@given(searches(), hs.booleans(), hs.integers(0, 3), hs.integers(1, 3), hs.integers(0, 40))
def test_a_group_gives_up_only_where_no_set_it_finds_could_beat_the_best_one(
    search: tuple[list[list[Admitted]], Callable[[Sequence[Admitted]], frozenset[str] | None], Any],
    limit_teams: bool,
    priority: int,
    gangs: int,
    gpus: int,
) -> None:
    """A search bounded by the best set so far finds the unbounded set, or one that loses to it."""
    groups, trial, allowed = search
    limit = allowed if limit_teams else None
    best: preemption_module.Cost = (priority, gangs, gpus * G, 20.0)
    for number, group in enumerate(groups):
        if not group:
            continue
        for best_number in (number - 1, number + 1):
            bound = (best, best_number)
            give_up_at = preemption_module._give_up_at(group, 30.0, number, bound)
            bounded = choose_victims(group, trial, allowed=limit, give_up_at=give_up_at)
            unbounded = choose_victims(group, trial, allowed=limit)
            if bounded is None and unbounded is not None:
                assert (cost(unbounded, 30.0), number) > bound
            else:
                assert bounded == unbounded


def test_protection_takes_the_strictest_policy_and_protects_held_gangs() -> None:
    merged = protection(
        [
            PreemptionSettings(minimum_run_seconds=60),
            PreemptionSettings(minimum_run_seconds=10, never_preempt_priority=500),
        ]
    )
    assert merged == PreemptionSettings(minimum_run_seconds=60, never_preempt_priority=500)
    assert protection([]).protects(priority=HELD_PRIORITY, run_seconds=1e9)


@settings(max_examples=400, deadline=None)
@given(searches_and_needs(), hs.booleans(), hs.integers(0, 8))
def test_a_search_that_tries_no_set_short_of_what_is_lacking_chooses_as_the_reference(
    search: tuple[
        list[list[Admitted]], Callable[[Sequence[Admitted]], frozenset[str] | None], Any, int
    ],
    limit_teams: bool,
    slack: int,
) -> None:
    """A set freeing fewer GPUs than needed never fits (a rack frees no more than the set)."""
    groups, trial, allowed, need = search
    limit = allowed if limit_teams else None
    lack = Lack(need - slack * G, lambda victim: victim.usage[GPUS])
    assert cheapest(groups, trial, 30.0, allowed=limit, lack=lack) == reference_cheapest(
        groups, trial, 30.0, allowed=limit
    )
    for group in groups:
        for highest in (None, 0, 1, 2):
            assert choose_victims(
                group, trial, highest=highest, allowed=limit, lack=lack
            ) == reference_choose(group, trial, highest=highest, allowed=limit)

"""Filling a freed wave (``admission.packing``), through ``decide``.

The pool: 8 whole-node hosts in one rack, all free. Gangs are named in admission order
(``g0`` is the head); with a run limit they end together, so ``decide`` packs the first of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.gang import node_free, running, waiting
from tests.builders.node import HOSTNAME, RACK, rack_nodes
from torchgate.controller.admission.decide import Admit, Outcome, Pool, Wait, WaitingGang, decide
from torchgate.controller.admission.packing import HELD_BACK, PACKING_WINDOW, WAVE_HELD, choose
from torchgate.controller.admission.topology import Capacity, build_topology

LEVELS = (RACK, HOSTNAME)
NODES = rack_nodes(1, 8)


def empty_pool(nodes: int = 8) -> Pool:
    hosts = NODES if nodes == 8 else rack_nodes(1, nodes)
    free = {name: node_free() for name, _ in hosts}
    return Pool(capacity=Capacity(build_topology(LEVELS, hosts), free))


def gangs(sizes: Sequence[int], run_limit: float | None = 30.0) -> list[WaitingGang]:
    return [
        replace(
            waiting(f"g{i}", pods=size, created=f"2026-01-01T00:00:{i:02d}Z"), run_limit=run_limit
        )
        for i, size in enumerate(sizes)
    ]


def started(outcomes: Sequence[object]) -> set[str]:
    return {o.key[1] for o in outcomes if isinstance(o, Admit)}


def decided_first_fit(pool: Pool, window: Sequence[WaitingGang]) -> list[Outcome]:
    """What first fit decides: the same gangs with no known end, so none is held back (rule 1).

    With no running gang due to end the pool has no reservation (``backfill``), so nothing else
    reads a run limit.
    """
    assert not pool.admitted
    return decide(pool, [replace(gang, run_limit=None) for gang in window], 0.0)


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        # first fit would start g0 and g1 (6 of 8 nodes); g0 and g2 fill all 8
        ([3, 3, 5], {"g0", "g2"}),
        # equal fills: the larger gangs first
        ([2, 1, 1, 4, 6], {"g0", "g4"}),
        # first fit fills the pool already: the same choice
        ([4, 4, 4], {"g0", "g1"}),
        # the head always starts, even when a fuller wave leaves it out
        ([1, 8], {"g0"}),
    ],
    ids=["fuller", "larger-first", "first-fit-full", "head-kept"],
)
def test_the_gangs_that_fill_the_freed_room_best_start(
    sizes: list[int], expected: set[str]
) -> None:
    outcomes = decide(empty_pool(), gangs(sizes), 0.0)
    assert started(outcomes) == expected


def test_a_held_back_gang_waits_for_capacity_and_says_why() -> None:
    outcomes = decide(empty_pool(), gangs([3, 3, 5]), 0.0)
    assert outcomes[1] == Wait(("ns", "g1"), "Capacity", HELD_BACK)


@pytest.mark.parametrize(
    ("window", "first_fits"),
    [
        (gangs([3, 3, 5], run_limit=None), {"g0", "g1"}),  # no known end: first fit
        ([*gangs([3, 3]), gangs([0, 0, 5], run_limit=60.0)[2]], {"g0", "g1"}),  # not together
        # the head does not fit: its reservation decides (backfill)
        (gangs([9, 3, 5]), {"g1", "g2"}),
    ],
    ids=["no-run-limit", "different-run-limits", "head-too-big"],
)
def test_first_fit_decides_when_the_window_is_not_one_wave(
    window: list[WaitingGang], first_fits: set[str]
) -> None:
    first_fit = decided_first_fit(empty_pool(), window)
    assert decide(empty_pool(), window, 0.0) == first_fit
    assert started(first_fit) == first_fits


def test_gangs_past_the_window_are_decided_by_first_fit() -> None:
    sizes = [1] * PACKING_WINDOW + [1]
    outcomes = decide(empty_pool(), gangs([7, *sizes]), 0.0)
    assert started(outcomes) == {"g0", "g1"}


def test_a_choice_that_would_leave_a_later_gang_out_is_dropped_for_first_fit() -> None:
    # 10 nodes. The window's fullest choice is g0 + g2 (9 of 10; g3-g11 never fit), which leaves
    # no room for g12 past the window; first fit starts g0, g1 and g12 and fills all 10 (rule 4).
    window = gangs([1, 5, 8, *[11] * (PACKING_WINDOW - 3), 4])
    first_fit = decided_first_fit(empty_pool(10), window)
    assert started(first_fit) == {"g0", "g1", f"g{PACKING_WINDOW}"}
    assert decide(empty_pool(10), window, 0.0) == first_fit


def brute_force(room: int, sizes: Sequence[int]) -> frozenset[int]:
    best: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    rest = range(1, len(sizes))
    for count in range(len(sizes)):
        for subset in itertools.combinations(rest, count):
            indexes = (0, *subset)
            fill = sum(sizes[i] for i in indexes)
            if fill > room:
                continue
            key = (-fill, *sorted(-sizes[i] for i in indexes))
            candidate = (key, indexes)
            if best is None or candidate < best:
                best = candidate
    assert best is not None
    return frozenset(best[1])


@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.integers(1, 12), min_size=1, max_size=9), hs.integers(12, 30))
def test_the_choice_is_the_fullest_then_largest_subset_with_the_head(
    sizes: list[int], room: int
) -> None:
    chosen = choose(room, sizes)
    expected = brute_force(room, sizes)
    assert 0 in chosen
    assert sum(sizes[i] for i in chosen) == sum(sizes[i] for i in expected)
    assert sorted((sizes[i] for i in chosen), reverse=True) == sorted(
        (sizes[i] for i in expected), reverse=True
    )


@settings(max_examples=200, deadline=None)
@given(
    hs.lists(hs.integers(1, 8), min_size=1, max_size=PACKING_WINDOW + 4),
    hs.integers(4, 16),
)
def test_packing_never_delays_the_head_nor_starts_fewer_pods_than_first_fit(
    sizes: list[int], nodes: int
) -> None:
    pool, window = empty_pool(nodes), gangs(sizes)
    packed = decide(pool, window, 0.0)
    first_fit = decided_first_fit(pool, window)
    assert isinstance(packed[0], Admit) == isinstance(first_fit[0], Admit)
    pods = {g.key: len(g.pods) for g in window}
    assert sum(pods[o.key] for o in packed if isinstance(o, Admit)) >= sum(
        pods[o.key] for o in first_fit if isinstance(o, Admit)
    )


def due_pool(ends_by: float) -> Pool:
    """4 of the 8 nodes free; a gang of the same wave still runs on the other 4."""
    free = {name: node_free() for name, _ in NODES}
    record, used = running(waiting("old", pods=4), [name for name, _ in NODES[:4]], at=0.0)
    for node_name, amounts in used.items():
        for name, amount in amounts.items():
            free[node_name][name] -= amount
    capacity = Capacity(build_topology(LEVELS, NODES), free)
    return Pool(capacity=capacity, admitted=[replace(record, ends_by=ends_by)], hold_waves=True)


@pytest.mark.parametrize(
    ("ends_by", "held"),
    [(5.0, True), (14.9, True), (15.0, False), (100.0, False)],
    ids=["due-now", "due-within-half-a-run", "due-at-half-a-run", "later"],
)
def test_every_gang_waits_while_part_of_a_freed_wave_still_runs(ends_by: float, held: bool) -> None:
    outcomes = decide(due_pool(ends_by), gangs([2, 2, 6]), 0.0)
    assert all(o == Wait(o.key, "Capacity", WAVE_HELD) for o in outcomes) == held
    assert started(outcomes) == (set() if held else {"g0", "g1"})


def test_without_the_admitters_leave_nothing_waits_for_a_wave() -> None:
    pool = replace(due_pool(5.0), hold_waves=False)
    assert started(decide(pool, gangs([2, 2, 6]), 0.0)) == {"g0", "g1"}

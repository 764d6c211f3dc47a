"""Backfill that never delays the head gang (``admission.backfill``), through ``decide``.

The pool: 8 whole-node hosts in one rack, 100 s on the cycle's clock. ``old`` (4 pods) ends by
130 s, ``late`` (2 pods) by 400 s, 2 nodes are free. The head ``head`` (6 pods) fits at 130 s,
on ``old``'s nodes and the 2 free ones; those are reserved, so gangs behind it may use them now
only when they end before 130 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.gang import node_free, running, waiting
from tests.builders.node import HOSTNAME, RACK, rack_nodes
from torchgate.controller.admission.backfill import START_SLACK_SECONDS, reserve
from torchgate.controller.admission.decide import Admit, Pool, Wait, WaitingGang, decide
from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import (
    Capacity,
    TopologyPlacement,
    build_topology,
    place_topology,
)

LEVELS = (RACK, HOSTNAME)
NOW = 100.0
NODES = rack_nodes(1, 8)
NAMES = [name for name, _ in NODES]


def pool_of(gangs: Sequence[tuple[WaitingGang, Sequence[str], float | None]]) -> Pool:
    """The pool with ``gangs`` running on the named nodes, each ending by the time given."""
    free = {name: node_free() for name in NAMES}
    admitted: list[Admitted] = []
    for gang, where, ends_by in gangs:
        record, used = running(gang, where, at=0.0)
        admitted.append(replace(record, ends_by=ends_by))
        for node, amounts in used.items():
            for name, amount in amounts.items():
                free[node][name] -= amount
    return Pool(capacity=Capacity(build_topology(LEVELS, NODES), free), admitted=admitted)


def usual_pool(*, old_ends: float | None = 130.0) -> Pool:
    return pool_of(
        [
            (waiting("old", pods=4), NAMES[0:4], old_ends),
            (waiting("late", pods=2), NAMES[4:6], 400.0),
        ]
    )


def ending_of(pool: Pool) -> list[Admitted]:
    """The running gangs with a known end, in order of it (what ``Reservations`` passes)."""
    return sorted((a for a in pool.admitted if a.ends_by is not None), key=lambda a: a.ends_by or 0)


def limited(name: str, pods: int, run_limit: float | None) -> WaitingGang:
    return replace(waiting(name, pods=pods, created="2026-01-01T00:00:01Z"), run_limit=run_limit)


HEAD = waiting("head", pods=6)


@pytest.mark.parametrize(
    ("behind", "admitted"),
    [
        ([limited("long", 2, None)], set()),
        ([limited("short", 2, 20.0)], {"short"}),
        ([limited("short", 2, 130.0 - NOW - START_SLACK_SECONDS)], {"short"}),
        ([limited("slow", 2, 130.0 - NOW - START_SLACK_SECONDS + 1)], set()),
        ([limited("long", 1, None), limited("short", 1, 10.0)], {"short"}),
        ([limited("short", 1, 10.0), limited("another", 1, 10.0)], {"short", "another"}),
    ],
    ids=[
        "no-known-end-never-backfills",
        "ends-before-the-head-starts",
        "ends-exactly-in-time",
        "ends-a-second-too-late",
        "the-short-one-behind-a-long-one",
        "two-short-ones-share-the-gap",
    ],
)
def test_only_gangs_that_end_before_the_head_starts_use_its_reserved_nodes(
    behind: list[WaitingGang], admitted: set[str]
) -> None:
    outcomes = decide(usual_pool(), [HEAD, *behind], NOW)
    assert isinstance(outcomes[0], Wait)
    assert {o.key[1] for o in outcomes if isinstance(o, Admit)} == admitted


def test_without_a_known_end_nothing_is_reserved_and_backfill_is_as_before() -> None:
    outcomes = decide(usual_pool(old_ends=None), [HEAD, limited("long", 2, None)], NOW)
    assert [type(o) for o in outcomes] == [Wait, Admit]


def test_gangs_not_needing_the_reserved_nodes_are_admitted_beside_them() -> None:
    # "late" ends after "old": the head (4 pods) needs only old's nodes, so the 2 free ones
    # stay open to a gang with no known end.
    head = waiting("head", pods=4)
    pool = pool_of(
        [
            (waiting("old", pods=4), NAMES[0:4], 130.0),
            (waiting("late", pods=2), NAMES[4:6], 400.0),
        ]
    )
    outcomes = decide(pool, [head, limited("long", 2, None)], NOW)
    assert isinstance(outcomes[0], Wait)
    assert isinstance(outcomes[1], Admit)
    assert set(outcomes[1].nodes.values()) == set(NAMES[6:8])


def test_the_head_is_the_first_gang_waiting_for_room_and_gets_the_earliest_time() -> None:
    pool = usual_pool()
    reservation = reserve(pool.capacity.fork(), HEAD, ending_of(pool))
    assert reservation is not None
    assert reservation.at == 130.0
    assert reservation.nodes == frozenset(NAMES[0:4] + NAMES[6:8])


def test_a_head_that_fits_only_when_gangs_without_an_end_leave_reserves_nothing() -> None:
    pool = pool_of(
        [
            (waiting("old", pods=4), NAMES[0:4], 130.0),
            (waiting("endless", pods=2), NAMES[4:6], None),
        ]
    )
    huge = waiting("huge", pods=8)
    assert reserve(pool.capacity.fork(), huge, ending_of(pool)) is None
    outcomes = decide(pool, [huge, limited("long", 2, None)], NOW)
    assert [type(o) for o in outcomes] == [Wait, Admit]  # backfill as without a reservation


# ------------------------------------------------------------------ never delays the head

gang_sizes = hs.integers(1, 4)
limits = hs.one_of(hs.none(), hs.sampled_from([5.0, 10.0, 25.0, 40.0, 100.0]))


@settings(max_examples=150, deadline=None)
@given(
    running_ends=hs.lists(
        hs.one_of(hs.none(), hs.sampled_from([110.0, 130.0, 150.0])), min_size=4, max_size=4
    ),
    head_size=hs.integers(3, 8),
    behind=hs.lists(hs.tuples(gang_sizes, limits), max_size=6),
)
def test_backfill_never_delays_the_head_gang(
    running_ends: list[float | None],
    head_size: int,
    behind: list[tuple[int, float | None]],
) -> None:
    # four running gangs of 2 pods fill the pool; the head waits for some of them to end
    pool = pool_of(
        [
            (waiting(f"run-{i}", pods=2), NAMES[2 * i : 2 * i + 2], ends)
            for i, ends in enumerate(running_ends)
        ]
    )
    head = waiting("head", pods=head_size)
    gangs = [limited(f"b-{i}", size, run_limit) for i, (size, run_limit) in enumerate(behind)]
    reservation = reserve(pool.capacity.fork(), head, ending_of(pool))
    outcomes = decide(pool, [head, *gangs], NOW)
    assert isinstance(outcomes[0], Wait)
    if reservation is None:
        return
    # at the reserved time: the gangs that end by then are gone, the backfilled ones that do
    # not end by then still hold their nodes. The head must fit.
    later = pool.capacity.fork()
    for record in pool.admitted:
        if record.ends_by is not None and record.ends_by <= reservation.at:
            later.give(record.nodes or {}, record.requests or {})
    by_name = {gang.key: gang for gang in gangs}
    for outcome in outcomes:
        if isinstance(outcome, Admit):
            gang = by_name[outcome.key]
            ends = None if gang.run_limit is None else NOW + gang.run_limit
            if ends is None or ends > reservation.at:
                later.take(outcome.nodes, gang.requests)
    placed = place_topology(later, head.pods, head.shape, head.topology)
    assert isinstance(placed, TopologyPlacement)


def test_the_second_waiting_gangs_nodes_are_kept_too() -> None:
    # "old" holds 6 nodes until 130 s, 2 are free. The head and the gang behind it (4 pods
    # each) fill the pool at 130 s between them; a gang with no known end gets neither's nodes.
    pool = pool_of([(waiting("old", pods=6), NAMES[0:6], 130.0)])
    first, second = waiting("first", pods=4), waiting("second", pods=4)
    behind = limited("long", 1, None)
    outcomes = decide(pool, [first, second, behind], NOW)
    assert [type(o) for o in outcomes] == [Wait, Wait, Wait]
    outcomes = decide(pool, [first, second, limited("short", 1, 20.0)], NOW)
    assert [type(o) for o in outcomes] == [Wait, Wait, Admit]

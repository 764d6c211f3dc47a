"""One pool-sharing admission cycle: quota, topology and preemption together, whole gangs only."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.gang import G, admitted, node_free, placement_requests, running, waiting
from tests.builders.node import HOSTNAME, RACK, rack_nodes
from tests.builders.team import parsed_team
from tests.unit.controller.admission.reference_cycle import reference_decide
from tests.unit.controller.admission.test_preemption import reference_cheapest
from tests.unit.controller.admission.test_topology import domains_spanned
from torchgate.controller.admission import decide as decide_module
from torchgate.controller.admission import preemption as preemption_module
from torchgate.controller.admission.decide import (
    Admit,
    Outcome,
    Pool,
    Preempt,
    Wait,
    WaitingGang,
    decide,
)
from torchgate.controller.admission.quota import (
    Admitted,
    Borrows,
    Fits,
    TeamTotals,
    check_quota,
    usage_by_team,
    without,
)
from torchgate.controller.admission.topology import Capacity, build_topology, mixed_of, shape_of
from torchgate.pytorchjob.names import DEFAULT_GPU_RESOURCE as GPU
from torchgate.pytorchjob.pool import (
    GPUS,
    Limit,
    PreemptionSettings,
    TeamQuota,
    TopologyRequest,
)

LEVELS = (RACK, HOSTNAME)


def pool_with(
    nodes: list[tuple[str, dict[str, str]]],
    gangs: Sequence[tuple[WaitingGang, Sequence[str], float]] = (),
    *,
    teams: Sequence[TeamQuota] = (),
    protection: PreemptionSettings | None = None,
) -> Pool:
    free = {name: node_free() for name, _ in nodes}
    admitted: list[Admitted] = []
    for gang, where, at in gangs:
        record, used = running(gang, where, at=at)
        admitted.append(record)
        for node, amounts in used.items():
            for name, amount in amounts.items():
                free[node][name] -= amount
    return Pool(
        capacity=Capacity(build_topology(LEVELS, nodes), free),
        teams={t.name: t for t in teams},
        admitted=admitted,
        preemption=protection or PreemptionSettings(),
    )


def by_key(outcomes: list[Outcome]) -> dict[str, Outcome]:
    return {outcome.key[1]: outcome for outcome in outcomes}


# ------------------------------------------------------------------ tables


def test_two_teams_submitting_at_once_each_get_their_quota() -> None:
    pool = pool_with(rack_nodes(1, 4), teams=[parsed_team("a", 16), parsed_team("b", 16)])
    gangs = [
        waiting("a1", pods=2, team="a", created="2026-01-01T00:00:01Z"),
        waiting("a2", pods=2, team="a", created="2026-01-01T00:00:02Z"),
        waiting("b1", pods=2, team="b", created="2026-01-01T00:00:03Z"),
    ]
    outcomes = by_key(decide(pool, gangs, now=0.0))
    assert isinstance(outcomes["a1"], Admit)
    assert isinstance(outcomes["b1"], Admit)  # b's own share is not lent to a's second job
    assert isinstance(outcomes["a2"], Wait)


def test_idle_quota_is_borrowed_and_taken_back_by_preempting_the_borrowed_gang() -> None:
    nodes = rack_nodes(1, 4)
    teams = [parsed_team("a", 16), parsed_team("b", 16)]
    pool = pool_with(nodes, teams=teams)
    borrowed = by_key(
        decide(pool, [waiting("a1", pods=2, team="a"), waiting("a2", pods=2, team="a")], 0.0)
    )
    a2 = borrowed["a2"]
    assert isinstance(a2, Admit)
    assert a2.borrowed == {GPUS: 16 * G}
    # a runs 32 GPUs on 16 of nominal; b wants its 16 back
    pool = pool_with(
        nodes,
        [
            (waiting("a1", pods=2, team="a"), ["r0h0", "r0h1"], 0.0),
            (waiting("a2", pods=2, team="a"), ["r0h2", "r0h3"], 10.0),
        ],
        teams=teams,
    )
    outcome = by_key(decide(pool, [waiting("b1", pods=2, team="b")], now=100.0))["b1"]
    assert isinstance(outcome, Preempt)
    assert outcome.victims == (("a", "a2"),)  # the most recently admitted borrowed gang
    assert sorted(outcome.nodes.values()) == ["r0h2", "r0h3"]


def test_a_high_priority_gang_preempts_whole_lower_priority_gangs() -> None:
    nodes = rack_nodes(2, 2)
    pool = pool_with(
        nodes,
        [
            (waiting("low-a", pods=2, priority=0), ["r0h0", "r0h1"], 0.0),
            (waiting("low-b", pods=1, priority=0), ["r1h0"], 0.0),
            (waiting("mid", pods=1, priority=50), ["r1h1"], 0.0),
        ],
    )
    outcome = by_key(decide(pool, [waiting("urgent", pods=2, priority=100)], now=1.0))["urgent"]
    assert isinstance(outcome, Preempt)
    assert outcome.victims == (("ns", "low-a"),)  # one whole gang of the lowest priority
    assert sorted(outcome.nodes.values()) == ["r0h0", "r0h1"]


def test_a_protected_gang_is_not_preempted_before_its_minimum_run_time() -> None:
    nodes = rack_nodes(1, 2)
    gangs = [(waiting("low", pods=2), ["r0h0", "r0h1"], 0.0)]
    protection = PreemptionSettings(minimum_run_seconds=600)
    urgent = waiting("urgent", pods=2, priority=100)
    early = by_key(decide(pool_with(nodes, gangs, protection=protection), [urgent], now=599.0))
    assert isinstance(early["urgent"], Wait)
    assert early["urgent"].kind == "Capacity"
    late = by_key(decide(pool_with(nodes, gangs, protection=protection), [urgent], now=600.0))
    assert isinstance(late["urgent"], Preempt)


def test_never_preempt_priorities_and_policy_never_wait() -> None:
    nodes = rack_nodes(1, 2)
    gangs = [(waiting("vip", pods=2, priority=1000), ["r0h0", "r0h1"], 0.0)]
    protected = pool_with(nodes, gangs, protection=PreemptionSettings(never_preempt_priority=1000))
    assert isinstance(decide(protected, [waiting("urgent", pods=2, priority=2000)], 0.0)[0], Wait)
    polite = waiting("polite", pods=2, priority=2000, preempts=False)
    assert isinstance(decide(pool_with(nodes, gangs), [polite], 0.0)[0], Wait)


def test_a_required_rack_lands_in_one_rack_with_ranks_contiguous() -> None:
    nodes = rack_nodes(3, 4)
    pool = pool_with(
        nodes,
        [
            (waiting("x", pods=2), ["r0h0", "r0h1"], 0.0),
            (waiting("y", pods=3), ["r1h0", "r1h1", "r1h2"], 0.0),
        ],
    )
    gang = waiting("ranked", pods=4, gpus=4, topology=TopologyRequest(0, required=True))
    outcome = decide(pool, [gang], 0.0)[0]
    assert isinstance(outcome, Admit)
    racks = [outcome.nodes[pod][:2] for pod in gang.pods]
    assert racks == [racks[0]] * 4
    assert racks[0] == "r0"  # the tightest rack that holds 4 pods of 4 GPUs (2 free nodes)
    too_big = waiting("big", pods=5, topology=TopologyRequest(0, required=True))
    outcome = decide(pool, [too_big], 0.0)[0]
    assert isinstance(outcome, Wait)
    assert outcome.kind == "Topology"


def test_preemption_for_a_required_rack_takes_victims_in_one_rack() -> None:
    nodes = rack_nodes(2, 2)
    pool = pool_with(
        nodes,
        [
            (waiting("r0-old", pods=1, priority=1), ["r0h0"], 0.0),
            (waiting("r1-a", pods=1, priority=0), ["r1h0"], 0.0),
            (waiting("r1-b", pods=1, priority=0), ["r1h1"], 0.0),
            (waiting("r0-new", pods=1, priority=0), ["r0h1"], 5.0),
        ],
    )
    gang = waiting("urgent", pods=2, priority=10, topology=TopologyRequest(0, required=True))
    outcome = decide(pool, [gang], now=10.0)[0]
    assert isinstance(outcome, Preempt)
    assert sorted(outcome.victims) == [("ns", "r1-a"), ("ns", "r1-b")]  # priority 0 only
    assert {node[:2] for node in outcome.nodes.values()} == {"r1"}


def test_a_failed_victim_search_answers_for_larger_gangs_of_its_kind_not_smaller_ones() -> None:
    nodes = rack_nodes(1, 3)
    pool = pool_with(
        nodes,
        [
            (waiting("low0", pods=1), ["r0h0"], 0.0),
            (waiting("low1", pods=1), ["r0h1"], 0.0),
            (waiting("vip", pods=1, priority=5), ["r0h2"], 0.0),
        ],
    )
    gangs = [
        waiting(name, pods=pods, priority=2, created=f"2026-01-01T00:00:0{i}Z")
        for i, (name, pods) in enumerate([("three", 3), ("four", 4), ("two", 2)])
    ]
    outcomes = by_key(decide(pool, gangs, now=1.0))
    assert isinstance(outcomes["three"], Wait)  # low0 and low1 free two nodes, not three
    assert isinstance(outcomes["four"], Wait)
    assert outcomes["four"].kind == "Capacity"
    preempted = outcomes["two"]
    assert isinstance(preempted, Preempt), "a smaller gang of the kind still searches"
    assert preempted.victims == (("ns", "low0"), ("ns", "low1"))


def test_two_victims_sharing_a_node_free_together_what_neither_frees_alone() -> None:
    nodes = rack_nodes(1, 2)
    pool = pool_with(
        nodes,
        [
            (waiting("left", pods=1, gpus=4, priority=0), ["r0h0"], 0.0),
            (waiting("right", pods=1, gpus=4, priority=0), ["r0h0"], 0.0),
            (waiting("busy", pods=1, gpus=8, priority=1), ["r0h1"], 0.0),
        ],
    )
    outcome = by_key(decide(pool, [waiting("urgent", pods=1, priority=10)], now=1.0))["urgent"]
    assert isinstance(outcome, Preempt)
    assert outcome.victims == (("ns", "left"), ("ns", "right"))  # lower priority than "busy"
    assert list(outcome.nodes.values()) == ["r0h0"]


def test_a_gang_placed_beside_a_victim_shrinks_what_a_later_search_gains_from_it() -> None:
    # A first search counts what evicting "half" would free on r0h0 (one 8-GPU slot); a gang
    # then takes r0h0's spare half, so evicting "half" frees no 8-GPU slot any more and the
    # later gang must take "whole" instead.
    nodes = rack_nodes(1, 3)
    pool = pool_with(
        nodes,
        [
            (waiting("half", pods=1, gpus=4, priority=0), ["r0h0"], 0.0),
            (waiting("whole", pods=1, gpus=8, priority=1), ["r0h2"], 0.0),
        ],
    )
    gangs = [
        waiting("four", pods=4, priority=10),  # no victims make room for four: a failed search
        waiting("small", pods=1, gpus=4, priority=5),  # r0h0's spare half, the tightest fit
        waiting("two", pods=2, priority=3),
    ]
    outcomes = by_key(decide(pool, gangs, now=1.0))
    assert isinstance(outcomes["four"], Wait)
    small = outcomes["small"]
    assert isinstance(small, Admit)
    assert list(small.nodes.values()) == ["r0h0"]
    two = outcomes["two"]
    assert isinstance(two, Preempt)
    assert two.victims == (("ns", "whole"),)
    assert sorted(two.nodes.values()) == ["r0h1", "r0h2"]


def test_room_withheld_for_a_reservation_shrinks_what_a_later_search_gains_from_a_victim() -> None:
    # "four" searches first (no victims make room for it) and then reserves every node for when
    # the ending gangs are gone, which withholds r0h0's spare half: evicting "half" then frees no
    # 8-GPU slot, so "one" must take "whole".
    nodes = rack_nodes(1, 3)
    pool = pool_with(
        nodes,
        [
            (waiting("half", pods=1, gpus=4, priority=0), ["r0h0"], 0.0),
            (waiting("whole", pods=1, gpus=8, priority=1), ["r0h1"], 0.0),
            (waiting("kept", pods=1, gpus=8, priority=20), ["r0h2"], 0.0),
        ],
    )
    ends = {"half": 100.0, "whole": 200.0, "kept": 300.0}
    pool = replace(pool, admitted=[replace(a, ends_by=ends[a.key[1]]) for a in pool.admitted])
    gangs = [waiting("four", pods=3, priority=10), waiting("one", pods=1, priority=3)]
    outcomes = by_key(decide(pool, gangs, now=1.0))
    assert isinstance(outcomes["four"], Wait)
    one = outcomes["one"]
    assert isinstance(one, Preempt)
    assert one.victims == (("ns", "whole"),)
    assert list(one.nodes.values()) == ["r0h1"]


def _shared_node_case() -> tuple[Pool, list[WaitingGang]]:
    """The pool and queue of the shared-node tests.

    Two half-node gangs on r0h0 (team b's and a teamless one), a busy r0h1; a's and b's
    priority-10 gangs wait, so b's candidate list shares r0h0 and a's does not.
    """
    nodes = rack_nodes(1, 2)
    pool = pool_with(
        nodes,
        [
            (waiting("half-none", pods=1, gpus=4, priority=0), ["r0h0"], 0.0),
            (waiting("half-b", pods=1, gpus=4, team="b", priority=0), ["r0h0"], 0.0),
            (waiting("busy", pods=1, gpus=8, priority=20), ["r0h1"], 0.0),
        ],
        teams=[parsed_team("a", 16), parsed_team("b", 16)],
    )
    gangs = [
        waiting("first", pods=1, team="a", priority=10, created="2026-01-01T00:00:00Z"),
        waiting("second", pods=1, team="b", priority=10, created="2026-01-01T00:01:00Z"),
    ]
    return pool, gangs


def test_a_gain_counted_for_one_candidate_list_is_not_used_where_another_shares_its_node() -> None:
    # Team a's gang may take only "half-none" on r0h0 (team b is within its quota): alone there
    # it frees half a node, no 8-GPU slot, and the search fails. Team b's gang may also take
    # its own "half-b" beside it: for that list r0h0 is shared, and both together free it.
    pool, gangs = _shared_node_case()
    outcomes = by_key(decide(pool, gangs, now=1.0))
    assert isinstance(outcomes["first"], Wait)
    second = outcomes["second"]
    assert isinstance(second, Preempt)
    assert second.victims == (("b", "half-b"), ("ns", "half-none"))
    assert list(second.nodes.values()) == ["r0h0"]


def test_a_cycle_leaves_no_garbage_only_the_cyclic_collector_frees() -> None:
    # Team b's list shares r0h0 (its nodes' loads are counted): the cycle's state must still
    # be freed by reference counting when the cycle ends, or the collector's passes over it
    # cost the cycles after it.
    pool, gangs = _shared_node_case()
    gc.collect()
    gc.disable()
    try:
        outcomes = by_key(decide(pool, gangs, now=1.0))
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert isinstance(outcomes["second"], Preempt)
    assert unreachable == 0


def test_only_a_gang_the_empty_pool_cannot_hold_gives_up_searching_for_victims() -> None:
    nodes = rack_nodes(2, 2)
    running_gangs = [
        (waiting(f"low-{node}", pods=1), [node], 0.0) for node in ("r0h0", "r0h1", "r1h0", "r1h1")
    ]
    full = pool_with(nodes, running_gangs)
    pool = replace(full, empty=Capacity(full.topology, {name: node_free() for name, _ in nodes}))
    rack = TopologyRequest(0, required=True)
    fills_a_rack = waiting("two", pods=2, priority=5, topology=rack)
    outcome = decide(pool, [fills_a_rack], now=1.0)[0]
    assert isinstance(outcome, Preempt), "an empty rack holds it exactly"
    assert outcome.victims == (("ns", "low-r0h0"), ("ns", "low-r0h1"))
    too_big = waiting("three", pods=3, priority=5, topology=rack)
    assert decide(pool, [too_big], now=1.0) == decide(full, [too_big], now=1.0)
    assert isinstance(decide(pool, [too_big], now=1.0)[0], Wait)


def test_gangs_alike_but_for_shape_that_quota_keeps_out_wait_alike_until_usage_changes() -> None:
    pool = pool_with(rack_nodes(1, 4), teams=[parsed_team("a", 8), parsed_team("b", 16)])
    gangs = [
        waiting("wide", pods=4, gpus=8, team="a", created="2026-01-01T00:00:01Z"),
        waiting("narrow", pods=8, gpus=4, team="a", created="2026-01-01T00:00:02Z"),
        waiting("b1", pods=1, gpus=8, team="b", created="2026-01-01T00:00:03Z"),
        waiting("narrow-after", pods=8, gpus=4, team="a", created="2026-01-01T00:00:04Z"),
    ]
    outcomes = by_key(decide(pool, gangs, 0.0))
    wide, narrow, after = outcomes["wide"], outcomes["narrow"], outcomes["narrow-after"]
    assert isinstance(wide, Wait)
    assert isinstance(narrow, Wait)
    assert isinstance(after, Wait)
    assert (wide.kind, narrow.kind, after.kind) == ("Quota", "Quota", "Quota")
    assert narrow.message == wide.message
    assert isinstance(outcomes["b1"], Admit)
    assert after.message != wide.message, "b1 took some of the cohort's idle quota"
    assert after.message == by_key(decide(pool, gangs[2:], 0.0))["narrow-after"].message


def test_a_quota_wait_after_an_admission_names_the_usage_after_it() -> None:
    pool = pool_with(rack_nodes(1, 4), teams=[parsed_team("a", 0), parsed_team("b", 8)])
    gangs = [
        waiting("b-wide", pods=2, gpus=8, team="b", created="2026-01-01T00:00:01Z"),
        waiting("b-one", pods=1, gpus=8, team="b", created="2026-01-01T00:00:02Z"),
        waiting("b-wide-after", pods=2, gpus=8, team="b", created="2026-01-01T00:00:03Z"),
    ]
    outcomes = by_key(decide(pool, gangs, 0.0))
    first, after = outcomes["b-wide"], outcomes["b-wide-after"]
    assert isinstance(first, Wait)
    assert isinstance(after, Wait)
    assert (first.kind, after.kind) == ("Quota", "Quota")
    assert isinstance(outcomes["b-one"], Admit)
    assert after.message == by_key(decide(pool, gangs[1:], 0.0))["b-wide-after"].message
    assert after.message != first.message, "b-one took the team's quota between them"


def test_quota_usage_is_read_from_the_kept_team_totals_when_given() -> None:
    pool = pool_with(rack_nodes(1, 4), teams=[parsed_team("a", 8, borrowing=0)])
    held = Admitted(("ns", "elsewhere"), "a", 0, {GPUS: 8000}, 0.0)
    kept = replace(pool, totals=TeamTotals.of([held]))
    assert isinstance(decide(pool, [waiting("a1", pods=1, team="a")], 0.0)[0], Admit)
    outcome = decide(kept, [waiting("a1", pods=1, team="a")], 0.0)[0]
    assert isinstance(outcome, Wait)
    assert outcome.kind == "Quota"


def test_quota_reasons_are_reported() -> None:
    pool = pool_with(
        rack_nodes(1, 4), teams=[parsed_team("a", 8, borrowing=0), parsed_team("b", 8)]
    )
    outcome = decide(pool, [waiting("a1", pods=2, team="a")], 0.0)[0]
    assert isinstance(outcome, Wait)
    assert outcome.kind == "Quota"


# ------------------------------------------------------------------ properties


@hs.composite
def scenarios(draw: hs.DrawFn) -> tuple[Pool, list[WaitingGang], float]:
    racks, hosts = draw(hs.integers(1, 3)), draw(hs.integers(1, 4))
    nodes = rack_nodes(racks, hosts)
    names = [name for name, _ in nodes]
    teams = [
        parsed_team(
            "a", draw(hs.sampled_from((0, 8, 16, 32))), draw(hs.sampled_from((None, 0, 8)))
        ),
        parsed_team(
            "b", draw(hs.sampled_from((0, 8, 16, 32))), draw(hs.sampled_from((None, 0, 8)))
        ),
    ]
    protection = PreemptionSettings(
        minimum_run_seconds=draw(hs.sampled_from((0, 100))),
        never_preempt_priority=draw(hs.sampled_from((None, 2))),
    )

    def gangs(prefix: str, count: int, priorities: tuple[int, int]) -> list[WaitingGang]:
        out = []
        for i in range(count):
            level = draw(hs.sampled_from((None, 0, 1)))
            out.append(
                waiting(
                    f"{prefix}{i}",
                    pods=draw(hs.integers(1, 4)),
                    gpus=draw(hs.sampled_from((1, 2, 4, 8))),
                    team=draw(hs.sampled_from((None, "a", "b"))),
                    priority=draw(hs.integers(*priorities)),
                    created=f"2026-01-01T00:00:{i:02d}Z",
                    topology=TopologyRequest(
                        level, draw(hs.booleans()) if level is not None else False
                    ),
                    preempts=draw(hs.sampled_from((True, True, True, False))),
                )
            )
        return out

    # a valid starting state: what a first cycle admitted from an empty pool
    empty = pool_with(nodes, teams=teams, protection=protection)
    first = gangs("old", draw(hs.integers(0, 10)), (0, 2))
    admitted: list[tuple[WaitingGang, list[str], float]] = []
    for gang, outcome in zip(
        sorted(first, key=WaitingGang.order), decide(empty, first, 0.0), strict=True
    ):
        if isinstance(outcome, Admit):
            admitted.append(
                (gang, [outcome.nodes[p] for p in gang.pods], draw(hs.sampled_from((0.0, 50.0))))
            )
    pool = pool_with(nodes, admitted, teams=teams, protection=protection)
    assert names
    return pool, gangs("new", draw(hs.integers(1, 6)), (0, 4)), 100.0


@settings(max_examples=250, deadline=None)
@given(scenarios())
def test_after_any_cycle_every_gang_is_whole_capacity_and_quota_hold(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    outcomes = decide(pool, gangs, now)
    waiting_by_key = {gang.key: gang for gang in gangs}
    before = {gang.key: gang for gang in pool.admitted}
    victims = [key for o in outcomes if isinstance(o, Preempt) for key in o.victims]
    assert len(victims) == len(set(victims)), "a gang preempted twice"
    started = {o.key for o in outcomes if isinstance(o, Admit | Preempt)}
    assert not started & set(victims), "a gang admitted and preempted in the same cycle"
    for key in victims:
        victim, preemptor = (
            before[key],
            next(o for o in outcomes if isinstance(o, Preempt) and key in o.victims),
        )
        assert not pool.preemption.protects(
            priority=victim.priority, run_seconds=now - victim.admitted_at
        )
        claimant = waiting_by_key[preemptor.key]
        if victim.priority >= claimant.priority:  # only reclaim ignores priority
            assert victim.team is not None
            assert victim.team != claimant.team
    # the world once the victims' pods are gone and the new gangs' pods are there
    free = {name: dict(pool.capacity.free[i]) for i, name in enumerate(pool.topology.node_names)}
    for key in victims:
        for pod, node in (before[key].nodes or {}).items():
            for name, amount in (before[key].requests or {})[pod].items():
                free[node][name] += amount
    after = [gang for key, gang in before.items() if key not in victims]
    for outcome in outcomes:
        if isinstance(outcome, Wait):
            continue
        gang = waiting_by_key[outcome.key]
        assert sorted(outcome.nodes) == sorted(gang.pods), "a partial gang was placed"
        for node, amounts in placement_requests(gang, outcome.nodes).items():
            for name, amount in amounts.items():
                free[node][name] -= amount
        after.append(replace(running(gang, [outcome.nodes[p] for p in gang.pods])[0]))
        level = gang.topology.level
        if gang.topology.required and level is not None:
            assert domains_spanned(pool.topology, outcome.nodes.values(), level) == 1
    assert all(amount >= 0 for amounts in free.values() for amount in amounts.values())
    usage = usage_by_team(after)
    for name, quota in pool.teams.items():
        limit = quota.limits[GPUS]
        if limit.borrowing is not None:
            assert usage.get(name, {}).get(GPUS, 0) <= limit.nominal + limit.borrowing
    claimant_team = {
        key: waiting_by_key[o.key].team
        for o in outcomes
        if isinstance(o, Preempt)
        for key in o.victims
    }
    for key in victims:  # another team loses at most the one whole gang that crossed its nominal
        owner = before[key].team
        if owner is not None and owner in pool.teams and owner != claimant_team[key]:
            mine = [k for k in victims if before[k].team == owner]
            largest = max(before[k].usage[GPUS] for k in mine if claimant_team[k] != owner)
            # what the team's own preemptors took from it is the team's own choice, not a loss
            # to another team (a higher-priority gang of the team preempting a lower one)
            own = sum(before[k].usage[GPUS] for k in mine if claimant_team[k] == owner)
            nominal_x = pool.teams[owner].limits[GPUS].nominal
            assert usage.get(owner, {}).get(GPUS, 0) + own > nominal_x - largest
    nominal = sum(q.limits[GPUS].nominal for q in pool.teams.values())
    assert sum(u.get(GPUS, 0) for u in usage.values()) <= nominal


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_cycle_decides_as_with_the_reference_victim_search(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    optimised = decide(pool, gangs, now)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("torchgate.controller.admission.decide.cheapest", reference_cheapest)
        assert decide(pool, gangs, now) == optimised


# ------------------------------------------------------------------ against the cycle as it was


def materialised(outcomes: list[Outcome]) -> list[Outcome]:
    """The outcomes with every wait's reason phrased now (a ``Shortfall`` reads the capacity)."""
    return [
        replace(outcome, reason=str(outcome.reason)) if isinstance(outcome, Wait) else outcome
        for outcome in outcomes
    ]


class Template(NamedTuple):
    """What the waiting gangs of one kind share (all but their size and name)."""

    gpus: int
    team: str | None
    priority: int
    topology: TopologyRequest
    preempts: bool
    allowed: frozenset[str] | None
    where: str


@hs.composite
def crowded_scenarios(draw: hs.DrawFn) -> tuple[Pool, list[WaitingGang], float]:
    """Pools with many alike waiting gangs, teams near or at their quota, mixed priorities.

    The gangs are drawn from a few templates (team, priority, pod shape, topology request,
    allowed nodes, policy, where messages say they may go) with sizes of their own, so gangs
    fall into kinds whose victim searches fail alike; running gangs of every team and priority
    are victims.
    """
    racks, hosts = draw(hs.integers(1, 3)), draw(hs.integers(2, 5))
    nodes = rack_nodes(racks, hosts)
    names = [name for name, _ in nodes]
    quotas = {
        team: (draw(hs.sampled_from((0, 8, 16, 24))), draw(hs.sampled_from((None, 0, 8))))
        for team in ("a", "b", "c")
    }
    teams = [parsed_team(team, nominal, limit) for team, (nominal, limit) in quotas.items()]
    protection = PreemptionSettings(minimum_run_seconds=draw(hs.sampled_from((0, 100))))
    templates = draw(
        hs.lists(
            hs.builds(
                Template,
                gpus=hs.sampled_from((2, 4, 8)),
                team=hs.sampled_from((None, "a", "b", "c")),
                priority=hs.sampled_from((0, 1, 2)),
                topology=hs.sampled_from(
                    (TopologyRequest(), TopologyRequest(0, True), TopologyRequest(0, False))
                ),
                preempts=hs.sampled_from((True, True, False)),
                allowed=hs.sampled_from((None, None, frozenset(names[: len(names) // 2 + 1]))),
                where=hs.sampled_from(("in the cluster", "in pool p=a")),
            ),
            min_size=1,
            max_size=4,
        )
    )

    def gangs(prefix: str, count: int) -> list[WaitingGang]:
        out = []
        for i in range(count):
            kind = draw(hs.sampled_from(templates))
            made = waiting(
                f"{prefix}{i}",
                pods=draw(hs.integers(1, 5)),
                gpus=kind.gpus,
                team=kind.team,
                priority=kind.priority,
                created=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                topology=kind.topology,
                preempts=kind.preempts,
            )
            if kind.allowed is not None:
                made = replace(made, shape=replace(made.shape, allowed=kind.allowed))
            out.append(replace(made, where=kind.where))
        return out

    # a valid starting state: what a first cycle admitted from an empty pool, priorities redrawn
    empty = pool_with(nodes, teams=teams, protection=protection)
    first = gangs("old", draw(hs.integers(0, 16)))
    admitted: list[tuple[WaitingGang, list[str], float]] = []
    for old, outcome in zip(
        sorted(first, key=WaitingGang.order), decide(empty, first, 0.0), strict=True
    ):
        if isinstance(outcome, Admit):
            priority = draw(hs.sampled_from((0, 1, 2)))
            where = [outcome.nodes[p] for p in old.pods]
            admitted.append(
                (replace(old, priority=priority), where, draw(hs.sampled_from((0.0, 50.0))))
            )
    pool = pool_with(nodes, admitted, teams=teams, protection=protection)
    if draw(hs.booleans()):  # every team at its quota: nominal is what it holds, no borrowing
        usage = usage_by_team(pool.admitted)
        held = {team: usage.get(team, {}).get(GPUS, 0) // G for team in quotas}
        pool = replace(pool, teams={team: parsed_team(team, held[team], 0) for team in quotas})
    if draw(hs.booleans()):  # the admitter also says what the nodes allocate
        empty = {name: node_free() for name in names}
        pool = replace(pool, empty=Capacity(pool.topology, empty))
    return pool, gangs("new", draw(hs.integers(1, 20))), 100.0


@settings(max_examples=300, deadline=None)
@given(crowded_scenarios())
def test_a_cycle_decides_as_the_cycle_before_it_was_made_incremental(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    expected = materialised(reference_decide(pool, gangs, now))
    assert materialised(decide(pool, gangs, now)) == expected
    # the pool's capacity is as it was, so a second cycle on it (its slot counts kept) agrees
    assert materialised(decide(pool, gangs, now)) == expected


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_cycle_decides_as_the_cycle_before_it_was_made_incremental_on_any_pool(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    assert materialised(decide(pool, gangs, now)) == materialised(
        reference_decide(pool, gangs, now)
    )


@settings(max_examples=300, deadline=None)
@given(crowded_scenarios())
def test_no_trial_gains_the_pool_more_slots_than_its_victims_most_summed(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    """``_Gains.most`` bounds every victim set's gain, so no set it rules out could fit."""
    pool, gangs, now = scenario
    call = decide_module._Trial.__call__
    seen: list[tuple[int, int]] = []

    def checked(trial: decide_module._Trial, victims: Sequence[Admitted]) -> bool | None:
        answer = call(trial, victims)
        if victims:
            gains = trial.gains
            seen.append((gains.root_gained, sum(gains.most(victim) for victim in victims)))
        return answer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_module._Trial, "__call__", checked)
        decide(pool, gangs, now)
    assert all(gained <= most for gained, most in seen)


@settings(max_examples=300, deadline=None)
@given(crowded_scenarios())
def test_candidate_lists_kept_through_preemptions_decide_as_lists_built_anew_after_each(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    kept = materialised(decide(pool, gangs, now))
    settle = decide_module._settle

    def settle_and_forget(cycle: decide_module._Cycle, victims: Sequence[Admitted]) -> None:
        settle(cycle, victims)
        cycle.lists.clear()
        cycle.kinds.clear()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_module, "_settle", settle_and_forget)
        assert materialised(decide(pool, gangs, now)) == kept


@settings(max_examples=300, deadline=None)
@given(crowded_scenarios())
def test_a_kept_candidate_list_groups_and_sums_its_gangs_as_one_built_anew_from_them(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    groups, sums = decide_module._groups, decide_module._quota_with_all_gone

    def counted(held: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """What each team holds, a resource held at 0 as none (``check_quota`` reads it so)."""
        kept = {
            name: {r: amount for r, amount in units.items() if amount}
            for name, units in held.items()
        }
        return {name: units for name, units in kept.items() if units}

    def described(found: list[decide_module._Group]) -> list[tuple[object, ...]]:
        return [
            (
                g.domain,
                [v.key for v in g.victims],
                g.touched,
                g.victims.floor,
                g.victims.by_priority,
            )
            for g in found
        ]

    def checked_groups(
        cycle: decide_module._Cycle, gang: WaitingGang, listed: decide_module._CandidateList
    ) -> list[decide_module._Group]:
        anew = decide_module._CandidateList(list(listed.victims), cycle.now, len(cycle.gone))
        found = groups(cycle, gang, listed)
        assert described(found) == described(groups(cycle, gang, anew))
        return found

    def checked_sums(
        cycle: decide_module._Cycle,
        gang: WaitingGang,
        team: TeamQuota | None,
        listed: decide_module._CandidateList,
    ) -> bool:
        assert counted(listed.held) == counted(usage_by_team(listed.victims))
        return sums(cycle, gang, team, listed)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_module, "_groups", checked_groups)
        patch.setattr(decide_module, "_quota_with_all_gone", checked_sums)
        decide(pool, gangs, now)


@settings(max_examples=300, deadline=None)
@given(crowded_scenarios())
def test_a_domains_reach_is_its_slots_counted_afresh_with_its_candidates_pods_given_back(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    """``_Reach`` counts a domain's slots with its candidates' pods given back, as afresh.

    Nodes several candidates hold pods on included.
    """
    pool, gangs, now = scenario
    count = decide_module._Reach._count

    def checked(reach: decide_module._Reach, domain: str) -> int:
        found = count(reach, domain)
        capacity, level = reach.cycle.capacity, reach.level
        assert level is not None
        topology = capacity.topology
        free = {name: dict(capacity.free[i]) for i, name in enumerate(topology.node_names)}
        for victim in reach.by_domain[domain].victims:
            for pod, name in (victim.nodes or {}).items():
                if topology.domain_of(name, level) == int(domain):
                    for resource, amount in (victim.requests or {}).get(pod, {}).items():
                        free[name][resource] = free[name].get(resource, 0) + amount
        afresh = Capacity(topology, free).slots(reach.gang.shape)
        assert found == afresh.domains[int(domain)]
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_module._Reach, "_count", checked)
        decide(pool, gangs, now)


@settings(max_examples=300, deadline=None)
@given(crowded_scenarios())
def test_a_search_kept_through_preemptions_reads_its_groups_as_one_built_anew(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    """The kept groups, their index by domain and their search order, against ``search_order``."""
    pool, gangs, now = scenario
    search = decide_module._CandidateList.search

    def checked(
        listed: decide_module._CandidateList, level: int | None, groups: list[decide_module._Group]
    ) -> decide_module._Search:
        found = search(listed, level, groups)
        victims = [group.victims for group in groups]
        assert found.victims == victims
        assert found.by_domain == {g.domain: g for g in groups if g.domain is not None}
        anew = preemption_module.search_order(victims, listed.now)
        order = found.order()
        assert (list(order.steps), order.by_floor) == (list(anew.steps), anew.by_floor)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_module._CandidateList, "search", checked)
        decide(pool, gangs, now)


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_a_kept_search_drops_preempted_gangs_as_one_built_anew_from_the_gangs_left(
    data: hs.DataObject,
) -> None:
    """Groups, their index and search order after ``catch_up``, against the gangs left's."""
    victims = [
        admitted(
            f"g{i}",
            data.draw(hs.sampled_from((1, 2, 4, 8))),
            priority=data.draw(hs.integers(0, 3)),
            at=data.draw(hs.sampled_from((0.0, 10.0, 20.0))),
            nodes={
                f"p{j}": f"{rack}-h{j}"
                for j, rack in enumerate(
                    data.draw(hs.lists(hs.sampled_from("pqrstu"), min_size=1, max_size=2))
                )
            },
        )
        for i in range(data.draw(hs.integers(1, 14)))
    ]
    if data.draw(hs.booleans()):  # a list by priority (else reclaimable gangs lead it)
        victims.sort(key=preemption_module.victim_order)
    known = {v.key: frozenset(n.split("-")[0] for n in (v.nodes or {}).values()) for v in victims}

    def built(listed: decide_module._CandidateList) -> list[decide_module._Group]:
        ordered = listed.victims.by_priority or None
        found = [listed.everyone]
        for domain, members in preemption_module.domain_groups(
            listed.victims, lambda victim: known[victim.key]
        ).items():
            found.append(
                decide_module._Group.of(
                    members, domain, known, 30.0, listed.rank, by_priority=ordered
                )
            )
        return found

    listed = decide_module._CandidateList(victims, 30.0, 0)
    listed.groups[0] = built(listed)
    listed.search(0, listed.groups[0])
    gone: list[tuple[str, str]] = []
    while listed.victims and data.draw(hs.booleans()):
        left = [victim.key for victim in listed.victims]
        gone += data.draw(hs.lists(hs.sampled_from(left), min_size=1, max_size=3, unique=True))
        listed.catch_up(gone, {0: known})
        search, anew = listed.search(0, listed.groups[0]), built(listed)
        assert listed.groups[0] == anew
        assert search.victims == [group.victims for group in anew]
        assert search.by_domain == {g.domain: g for g in anew if g.domain is not None}
        if not listed.victims:
            break  # a list without gangs is never searched
        order = search.order()
        fresh = preemption_module.search_order(search.victims, 30.0)
        assert (list(order.steps), order.by_floor) == (list(fresh.steps), fresh.by_floor)


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_a_cycle_given_the_kept_team_totals_decides_as_one_summing_the_running_gangs(
    scenario: tuple[Pool, list[WaitingGang], float],
) -> None:
    pool, gangs, now = scenario
    kept = replace(pool, totals=TeamTotals.of(pool.admitted))
    assert materialised(decide(kept, gangs, now)) == materialised(decide(pool, gangs, now))


# ------------------------------------------------------------------ each shortcut against none


def _quota_checked_again(trial: decide_module._Trial) -> bool:
    """A trial's quota answer from ``check_quota`` on the usage without its victims."""
    usage = without(trial.cycle.usage, trial.given.values())
    verdict = check_quota(trial.team, trial.gang.usage, usage, trial.cycle.pool.teams)
    return isinstance(verdict, Fits | Borrows)


def _quota_with_all_gone_checked_again(
    cycle: decide_module._Cycle,
    gang: WaitingGang,
    team: TeamQuota | None,
    listed: decide_module._CandidateList,
) -> bool:
    """Whether ``check_quota`` lets the gang in on the usage without every candidate."""
    verdict = check_quota(team, gang.usage, without(cycle.usage, listed.victims), cycle.pool.teams)
    return isinstance(verdict, Fits | Borrows)


_borrowing, _search = decide_module._Cycle.borrowing, decide_module._CandidateList.search


def _borrowing_counted_again(cycle: decide_module._Cycle) -> object:
    cycle.borrowed = None
    return _borrowing(cycle)


def _search_ordered_again(
    listed: decide_module._CandidateList, level: int | None, groups: list[decide_module._Group]
) -> object:
    listed._searched.clear()
    return _search(listed, level, groups)


SHORTCUTS = {
    "quota-from-sums": (decide_module._Trial, "quota_fits", _quota_checked_again),
    "quota-with-all-gone-from-sums": (
        decide_module,
        "_quota_with_all_gone",
        _quota_with_all_gone_checked_again,
    ),
    "borrowers-kept": (decide_module._Cycle, "borrowing", _borrowing_counted_again),
    "search-order-kept": (decide_module._CandidateList, "search", _search_ordered_again),
    "group-gives-up": (preemption_module, "_give_up_at", lambda *_: None),
    "greedy-tries-no-short-set": (decide_module._Trial, "lack", lambda _: None),
}


@pytest.mark.parametrize("shortcut", sorted(SHORTCUTS))
@settings(max_examples=150, deadline=None)
@given(scenario=crowded_scenarios())
def test_a_cycle_decides_as_one_without_each_preemption_shortcut(
    shortcut: str, scenario: tuple[Pool, list[WaitingGang], float]
) -> None:
    pool, gangs, now = scenario
    kept = materialised(decide(pool, gangs, now))
    owner, name, without_it = SHORTCUTS[shortcut]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, name, without_it)
        assert materialised(decide(pool, gangs, now)) == kept


@hs.composite
def quota_trials(
    draw: hs.DrawFn,
) -> tuple[
    TeamQuota | None,
    dict[str, int],
    dict[str, dict[str, int]],
    dict[str, TeamQuota],
    list[Admitted],
]:
    """A gang's team and usage, the usage by team, the teams (two cohorts), and victims."""
    resources = (GPUS, "cpu")
    amounts = hs.integers(0, 6).map(lambda n: n * G)
    teams = {
        name: TeamQuota(
            name,
            (name,),
            {
                resource: Limit(draw(amounts), draw(hs.none() | amounts))
                for resource in draw(hs.sets(hs.sampled_from(resources), min_size=1))
            },
            draw(hs.sampled_from(("x", "y"))),
        )
        for name in ("a", "b", "c")
    }
    usage = {
        name: {resource: draw(amounts) for resource in resources}
        for name in draw(hs.sets(hs.sampled_from(("a", "b", "c", "other"))))
    }
    victims = [
        Admitted(
            key=("ns", f"v{i}"),
            team=draw(hs.sampled_from((None, "a", "b", "c", "other"))),
            priority=0,
            usage={resource: draw(amounts) for resource in resources},
            admitted_at=0.0,
        )
        for i in range(draw(hs.integers(0, 4)))
    ]
    team = draw(hs.sampled_from((None, "a", "b", "c")))
    gang_usage = {resource: draw(amounts) for resource in resources}
    return None if team is None else teams[team], gang_usage, usage, teams, victims


@settings(max_examples=400, deadline=None)
@given(quota_trials())
def test_quota_room_summed_over_victims_answers_as_check_quota_without_them(
    trial: tuple[
        TeamQuota | None,
        dict[str, int],
        dict[str, dict[str, int]],
        dict[str, TeamQuota],
        list[Admitted],
    ],
) -> None:
    team, gang_usage, usage, teams, victims = trial
    room = decide_module._QuotaRoom(team, gang_usage, usage, teams)
    for victim in victims:
        room.move(victim, 1)
    verdict = check_quota(team, gang_usage, without(usage, victims), teams)
    assert room.fits() == isinstance(verdict, Fits | Borrows)
    for victim in victims[1:]:  # taken back again
        room.move(victim, -1)
    verdict = check_quota(team, gang_usage, without(usage, victims[:1]), teams)
    assert room.fits() == isinstance(verdict, Fits | Borrows)


# ------------------------------------------------------------------ gangs of several pod shapes


def launcher(name: str, created: str, *, master_cpu: int, priority: int = 0) -> WaitingGang:
    """A Master of ``master_cpu`` CPUs and no GPU, and 2 Workers of 8 GPUs and 8 CPUs."""
    requests = {
        f"{name}-master-0": {"cpu": master_cpu * G, "pods": G},
        f"{name}-worker-0": {GPU: 8 * G, "cpu": 8 * G, "pods": G},
        f"{name}-worker-1": {GPU: 8 * G, "cpu": 8 * G, "pods": G},
    }
    return WaitingGang(
        key=("ns", name),
        team=None,
        priority=priority,
        created=created,
        pods=tuple(requests),
        requests=requests,
        usage={GPUS: 16 * G},
        shape=shape_of(requests.values()),
        mixed=mixed_of(requests, gpu_resource=GPU),
    )


def test_a_gang_of_several_shapes_is_not_answered_by_one_alike_in_shape_size_and_usage() -> None:
    topology = build_topology((), [("n0", {}), ("n1", {})])
    free = {name: {**node_free(), "cpu": 12 * G} for name in topology.node_names}
    # the same largest shape (8 GPUs, 8 CPUs), 3 pods and 16 GPUs each: only the second's
    # Master fits beside a Worker (4 CPUs left there)
    heavy = launcher("heavy", "2026-01-01T00:00:00Z", master_cpu=8)
    light = launcher("light", "2026-01-02T00:00:00Z", master_cpu=1)

    outcomes = decide(Pool(Capacity(topology, free)), [heavy, light], now=0.0)

    assert [type(outcome) for outcome in outcomes] == [Wait, Admit]
    assert isinstance(outcomes[0], Wait)
    assert outcomes[0].kind == "Capacity"


def test_a_gang_of_several_shapes_preempts_room_for_its_workers_and_its_master_beside_them() -> (
    None
):
    nodes = [("n0", {}), ("n1", {})]
    topology = build_topology((), nodes)
    empty = {name: {**node_free(), "cpu": 64 * G} for name, _ in nodes}
    free = {name: dict(room) for name, room in empty.items()}
    admitted = []
    for i, name in enumerate(("n0", "n1")):
        record, used = running(waiting(f"low{i}", pods=1, gpus=8), [name])
        admitted.append(record)
        for resource, amount in used[name].items():
            free[name][resource] -= amount
    pool = Pool(Capacity(topology, free), admitted=admitted, empty=Capacity(topology, empty))
    urgent = launcher("urgent", "2026-01-01T00:00:00Z", master_cpu=4, priority=100)

    (outcome,) = decide(pool, [urgent], now=100.0)

    assert isinstance(outcome, Preempt)
    assert outcome.victims == (("ns", "low0"), ("ns", "low1"))
    assert outcome.nodes == {
        "urgent-master-0": "n0",
        "urgent-worker-0": "n0",
        "urgent-worker-1": "n1",
    }

"""The pool-sharing simulation (``benchmarks/poolbench``): its optimum and its bookkeeping.

The benchmark's figures are only as good as the optimum they are compared with and the
simulation that drives the admission cycle, so both are tested here: the bin-packing search
against brute force, and the simulated runs for invariants any schedule must keep (every gang
runs whole and to its end once, the pool is never oversubscribed, nothing ends before the
optimum) and for the behaviours the figures are about (without backfill nothing overtakes a
waiting gang; with quotas a team gets its share when both teams submit at once).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.poolbench.latency import PodTimes, breakdown, gang_chains
from benchmarks.poolbench.optimum import first_fit_decreasing, lower_bound, min_bins
from benchmarks.poolbench.sim_cli import main
from benchmarks.poolbench.simulation import simulate
from benchmarks.poolbench.stats import first_time_at_least
from benchmarks.poolbench.workload import Job, halves, knavigator

# ------------------------------------------------------------------ the optimum


def brute_force_bins(sizes: list[int], capacity: int) -> int:
    """Fewest bins by trying every assignment of items to at most len(sizes) bins."""
    for bins in range(1, len(sizes) + 1):
        for assignment in itertools.product(range(bins), repeat=len(sizes)):
            loads = [0] * bins
            for size, where in zip(sizes, assignment, strict=True):
                loads[where] += size
            if max(loads) <= capacity:
                return bins
    return len(sizes)


@pytest.mark.parametrize(
    ("sizes", "capacity", "bins"),
    [
        ([16, 16, 16, 16], 32, 2),
        ([32], 32, 1),
        ([1] * 64, 32, 2),
        ([17, 17, 17], 32, 3),
        # first-fit decreasing needs 3 bins (6+5, 4+4+3, 2); 6+4+2 and 5+4+3 need 2
        ([6, 5, 4, 4, 3, 2], 12, 2),
    ],
    ids=["halves", "one-full", "many-ones", "over-half", "ffd-not-optimal"],
)
def test_min_bins_finds_the_fewest_bins(sizes: list[int], capacity: int, bins: int) -> None:
    found = min_bins(sizes, capacity)
    assert (found.count, found.proven) == (bins, True)


def test_first_fit_decreasing_is_beaten_where_it_is_not_optimal() -> None:
    assert first_fit_decreasing([6, 5, 4, 4, 3, 2], 12) == 3


def test_min_bins_refuses_an_item_larger_than_a_bin() -> None:
    with pytest.raises(ValueError, match="larger than a bin"):
        min_bins([33], 32)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 10), min_size=1, max_size=6), st.integers(10, 14))
def test_min_bins_equals_brute_force(sizes: list[int], capacity: int) -> None:
    found = min_bins(sizes, capacity)
    assert found.proven
    assert found.count == brute_force_bins(sizes, capacity)
    assert found.bound <= found.count <= first_fit_decreasing(sizes, capacity)


# ------------------------------------------------------------------ the simulation


def jobs_of(sizes: list[int], seconds: float = 10.0) -> list[Job]:
    return [Job("ns", f"job-{i:03d}", size, seconds) for i, size in enumerate(sizes)]


def max_in_use(series: list[tuple[float, int]]) -> int:
    return max(value for _, value in series)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=12),
    st.lists(st.sampled_from([5.0, 10.0, 15.0]), min_size=12, max_size=12),
    st.booleans(),
)
def test_every_gang_runs_once_whole_and_the_pool_is_never_oversubscribed(
    sizes: list[int], seconds: list[float], backfill: bool
) -> None:
    jobs = [
        Job("ns", f"job-{i:03d}", size, run)
        for i, (size, run) in enumerate(zip(sizes, seconds, strict=False))
    ]
    run = simulate(jobs, nodes=8, gpus_per_node=8, backfill=backfill)
    assert set(run.finished) == {job.key for job in jobs}
    for job in jobs:
        assert run.finished[job.key] - run.started[job.key] == job.seconds
    assert max_in_use(run.usage[None]) <= 8 * 8
    assert run.usage[None][-1][1] == 0
    assert run.makespan >= lower_bound(jobs, nodes=8)
    assert run.gpu_seconds_done == sum(j.pods * j.seconds for j in jobs) * 8
    assert 0 < run.occupancy <= 1
    if len(set(seconds[: len(sizes)])) == 1:
        optimum = min_bins(sizes, 8).count * seconds[0]
        assert run.makespan >= optimum


def test_without_backfill_nothing_overtakes_a_waiting_gang() -> None:
    # 8 nodes: the 6-pod gang runs, the 4-pod gang waits; the 2-pod gang behind it would fit.
    jobs = jobs_of([6, 4, 2])
    strict = simulate(jobs, nodes=8, gpus_per_node=8, backfill=False)
    filled = simulate(jobs, nodes=8, gpus_per_node=8, backfill=True)
    assert [strict.started[j.key] for j in jobs] == [0.0, 10.0, 10.0]
    assert [filled.started[j.key] for j in jobs] == [0.0, 10.0, 0.0]
    assert (strict.makespan, filled.makespan) == (20.0, 20.0)


def test_backfill_shortens_the_burst_when_small_gangs_fill_the_gaps() -> None:
    jobs = jobs_of([6, 4, 2, 4])
    strict = simulate(jobs, nodes=8, gpus_per_node=8, backfill=False)
    filled = simulate(jobs, nodes=8, gpus_per_node=8, backfill=True)
    assert filled.makespan == 20.0 == min_bins([6, 4, 2, 4], 8).count * 10
    assert strict.makespan == 30.0


def test_quotas_give_the_second_team_its_share_when_both_submit_at_once() -> None:
    jobs = [Job("team-a", f"a-{i}", 2, 10.0, team="a") for i in range(4)] + [
        Job("team-b", f"b-{i}", 2, 10.0, team="b") for i in range(2)
    ]
    share = 4 * 8 // 2
    fair = simulate(jobs, nodes=4, gpus_per_node=8, teams=halves(32))
    first_come = simulate(jobs, nodes=4, gpus_per_node=8)
    assert first_time_at_least(fair.usage["b"], share) == 0.0
    # first come, first served: team a's four gangs run two by two before b gets anything
    assert first_time_at_least(first_come.usage["b"], share) == 20.0


def test_a_team_that_borrowed_the_pool_gives_back_the_share_when_the_owner_submits() -> None:
    jobs = [Job("team-a", f"a-{i}", 2, 10.0, team="a") for i in range(4)] + [
        Job("team-b", f"b-{i}", 2, 10.0, team="b", submit=5.0) for i in range(2)
    ]
    run = simulate(jobs, nodes=4, gpus_per_node=8, teams=halves(32))
    assert max_in_use(run.usage["a"]) == 32  # a borrowed b's idle half
    assert first_time_at_least(run.usage["b"], 16) == 5.0  # reclaimed at once
    assert run.preemptions == 1
    assert run.gpu_seconds_held - run.gpu_seconds_done == 5.0 * 2 * 8  # the victim's lost work
    assert set(run.finished) == {job.key for job in jobs}


def test_the_command_writes_the_figures_it_prints(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    argv = ["--nodes", "8", "--jobs", "6", "--team-jobs", "3", "--rounds", "2", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    fixed = result["summary"]["burst_fixed_run_time"]
    assert fixed["optimum_proven_rounds"] == 2
    assert len(fixed["backfill_makespan_over_best"]["rounds"]) == 2
    for row in result["rounds"]["burst_fixed_run_time"]:
        assert row["backfill"]["makespan"] >= row["optimal_makespan"]
        assert row["no_backfill"]["makespan"] >= row["optimal_makespan"]
    assert set(result["summary"]) == {
        "burst_fixed_run_time",
        "burst_spread_run_time",
        "fairness_at_once",
        "fairness_b_while_a_borrows",
    }


# ------------------------------------------------------------------ knavigator's workload


def test_knavigators_burst_is_53_gangs_whose_optimum_is_nine_full_waves() -> None:
    jobs = knavigator(seconds=30.0)
    sizes = [job.pods for job in jobs]
    assert (len(jobs), sum(sizes), min(sizes), max(sizes)) == (53, 288, 1, 32)
    bins = min_bins(sizes, 32)
    assert (bins.count, bins.proven) == (9, True)  # 9 x 30 s = knavigator's 270 s
    assert [job.name for job in jobs] == sorted(job.name for job in jobs)  # name order = order


def test_the_admission_cycle_alone_runs_knavigators_burst_in_its_optimum() -> None:
    jobs = knavigator(seconds=30.0)
    assert simulate(jobs, nodes=32, gpus_per_node=8, backfill=False).makespan == 270.0


# ------------------------------------------------------------------ the live loop's latency


def test_a_gang_on_freed_nodes_gets_each_step_from_its_predecessors_end_to_running() -> None:
    # "old" (Master on n1, Worker on n2) ends; its Worker is deleted; "new" takes both nodes.
    pods = [
        PodTimes("old", "old-master-0", "n1", 0.0, 0.1, 0.5, ended=30.0, gone=30.5),
        PodTimes("old", "old-worker-0", "n2", 0.0, 0.1, 0.5, deleting=30.2, gone=30.4),
        PodTimes("new", "new-master-0", "n1", 30.7, 30.8, 31.0),
        PodTimes("new", "new-worker-0", "n2", 30.75, 30.9, 31.2),
    ]
    chains = gang_chains(pods, {"new": 30.5, "old": 0.0})
    assert set(chains) == {"new"}  # "old" started on empty nodes: no chain
    assert chains["new"] == {
        "master_end_to_delete": 0.2,
        "delete_to_gone": 0.2,
        "gone_to_admitted": 0.1,
        "admitted_to_created": 0.25,
        "created_to_bound": 0.15,
        "bound_to_running": 0.3,
        "total": 1.2,
    }
    summary = breakdown(chains)
    assert (summary["gangs"], summary["total"]["median"]) == (1, 1.2)


def test_uneven_ends_delay_every_gang_by_at_most_the_spread_and_keep_the_pool_whole() -> None:
    jobs = jobs_of([6, 4, 2, 4, 3, 5])
    even = simulate(jobs, nodes=8, gpus_per_node=8, deadlines=True)
    uneven = simulate(jobs, nodes=8, gpus_per_node=8, deadlines=True, end_spread=1.0)
    assert set(uneven.finished) == {job.key for job in jobs}
    for job in jobs:
        assert 0 <= uneven.finished[job.key] - uneven.started[job.key] - job.seconds <= 1.0
    assert max_in_use(uneven.usage[None]) <= 8 * 8
    assert uneven.makespan > even.makespan
    assert uneven.gpu_seconds_done == even.gpu_seconds_done

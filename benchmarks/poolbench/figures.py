"""The simulation's figures (pure): benchmark 1 (burst) and 4 (fairness) per round, and summaries.

Benchmark 1 runs a burst with and without backfill and compares the makespans with the best the
burst allows (the exact optimum when every gang runs the same time, else the lower bound).
Benchmark 4 runs two teams' bursts with TeamQuotas of half the pool each and without quotas,
and times each team from its own submission until it holds its share (100 % and 90 %).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .optimum import lower_bound, min_bins
from .simulation import simulate
from .stats import first_time_at_least, over
from .workload import Job, halves


def burst_figures(jobs: Sequence[Job], *, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """Benchmark 1 for one burst: with and without backfill against the optimum."""
    bound = lower_bound(jobs, nodes=nodes)
    equal = len({job.seconds for job in jobs}) == 1
    bins = min_bins([job.pods for job in jobs], nodes) if equal else None
    optimum = bins.count * jobs[0].seconds if bins is not None else None
    best = optimum if optimum is not None else bound
    work = sum(job.pods * job.seconds for job in jobs) * gpus_per_node
    figures: dict[str, Any] = {
        "jobs": len(jobs),
        "pods": sum(job.pods for job in jobs),
        "gpu_seconds": work,
        "lower_bound_makespan": bound,
        "optimal_makespan": optimum,
        "optimum_proven": bins.proven if bins is not None else None,
        "optimum_kind": (
            "exact (equal run times: bin packing)"
            if bins is not None and bins.proven
            else "best found, not proven"
            if bins is not None
            else "lower bound only (run times differ)"
        ),
        "best_possible_occupancy": work / (nodes * gpus_per_node * best),
    }
    for label, backfill in (("backfill", True), ("no_backfill", False)):
        run = simulate(jobs, nodes=nodes, gpus_per_node=gpus_per_node, backfill=backfill)
        waits = [run.started[job.key] for job in jobs]
        figures[label] = {
            "makespan": run.makespan,
            "occupancy": round(run.occupancy, 4),
            "makespan_over_best": round(run.makespan / best, 4),
            "mean_wait": round(statistics.fmean(waits), 2),
            "cycles": run.cycles,
            "decide_cpu_ms_per_cycle": round(run.decide_cpu_seconds / max(run.cycles, 1) * 1e3, 3),
        }
    figures["no_backfill_makespan_over_backfill"] = round(
        figures["no_backfill"]["makespan"] / figures["backfill"]["makespan"], 4
    )
    return figures


def fairness_figures(jobs: Sequence[Job], *, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """Benchmark 4 for one pair of bursts: time to each team's share, with and without quotas.

    Times count from the team's own submission; ``lost_gpu_seconds`` is work preempted gangs had
    done and must do again.
    """
    pool_gpus = nodes * gpus_per_node
    share = pool_gpus // 2
    submitted = {job.team: job.submit for job in jobs}
    out: dict[str, Any] = {"share_gpus": share}
    for label, teams in (("quotas", halves(pool_gpus)), ("no_quotas", None)):
        run = simulate(jobs, nodes=nodes, gpus_per_node=gpus_per_node, teams=teams)
        row: dict[str, Any] = {
            "makespan": run.makespan,
            "preemptions": run.preemptions,
            "lost_gpu_seconds": run.gpu_seconds_held - run.gpu_seconds_done,
            "lost_share_of_work": round(
                (run.gpu_seconds_held - run.gpu_seconds_done) / run.gpu_seconds_done, 4
            ),
        }
        for team in ("a", "b"):
            series = [(t, v) for t, v in run.usage[team] if t >= submitted[team]]
            reached = first_time_at_least(series, share)
            nearly = first_time_at_least(series, 0.9 * share)
            row[team] = {
                "seconds_to_share": None if reached is None else reached - submitted[team],
                "seconds_to_90_percent": None if nearly is None else nearly - submitted[team],
            }
        out[label] = row
    return out


def burst_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Benchmark 1 over rounds."""
    return {
        "optimum_proven_rounds": sum(bool(r["optimum_proven"]) for r in rows),
        "best_possible_occupancy": over(rows, "best_possible_occupancy"),
        **{
            f"{label}_{name}": over(rows, label, name)
            for label in ("backfill", "no_backfill")
            for name in ("occupancy", "makespan_over_best", "makespan", "mean_wait")
        },
        "no_backfill_makespan_over_backfill": over(rows, "no_backfill_makespan_over_backfill"),
    }


def fairness_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Benchmark 4 over rounds."""
    times = {
        f"{label}_{team}_{name}": over(rows, label, team, name)
        for label in ("quotas", "no_quotas")
        for team in ("a", "b")
        for name in ("seconds_to_share", "seconds_to_90_percent")
    }
    return {
        **times,
        "quotas_preemptions": over(rows, "quotas", "preemptions"),
        "quotas_lost_gpu_seconds": over(rows, "quotas", "lost_gpu_seconds"),
        "quotas_lost_share_of_work": over(rows, "quotas", "lost_share_of_work"),
    }

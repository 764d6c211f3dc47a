"""``benchmarks/pool_bench.py`` at a tiny size runs end to end and writes its figures.

A smoke test, not a performance test: nothing here looks at a makespan or a latency (the
machines are noisy; the figures live in benchmarks/README.md). It proves the benchmark still
starts its control plane and the real controller, runs a burst to completion with and without
backfill, a preemption round and its baseline, and two teams with and without TeamQuotas, and
writes the JSON fields the figures quote.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def test_a_tiny_pool_benchmark_runs_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "pool.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pool_bench.py"),
         "--nodes", "16", "--jobs", "3", "--seconds", "2", "--rounds", "1",
         "--urgent-pods", "8", "--preemption-rounds", "1",
         "--team-jobs", "3", "--fair-seconds", "3", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = json.loads(out.read_text())
    (burst,) = report["rounds"]["burst"]
    assert burst["optimum_proven"] is True
    for label in ("backfill", "no_backfill"):
        figures = burst[label]
        # kwok counts a run from the pod's whole-second startTime, so a wave can end up to a
        # second before the optimum says: only the figures' presence and sign are checked.
        assert figures["makespan"] > 0
        assert figures["occupancy"] > 0
        assert math.isfinite(figures["makespan_over_simulated"])
    summary = report["summary"]["burst"]
    assert summary["no_backfill_makespan_over_backfill"]["rounds"] == [
        burst["no_backfill_makespan_over_backfill"]
    ]
    assert set(report["rounds"]) == {"burst", "preemption", "fairness"}

    (preemption,) = report["rounds"]["preemption"]
    for label in ("preemption", "plain"):
        assert preemption[label]["seconds_to_all_running"] > 0
    assert preemption["preemption"]["victim_pods"] > 0
    assert preemption["plain"]["victim_pods"] == 0
    assert math.isfinite(report["summary"]["preemption"]["preemption_p99"])

    (fairness,) = report["rounds"]["fairness"]
    for label in ("quotas", "no_quotas"):
        for team in ("a", "b"):
            assert set(fairness[label][team]) == {"seconds_to_share", "seconds_to_90_percent"}
    assert fairness["quotas"]["b"]["seconds_to_share"] is not None


def test_knavigators_burst_runs_and_reports_where_the_live_loop_loses_time(tmp_path: Path) -> None:
    out = tmp_path / "pool.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pool_bench.py"),
         "--only", "knavigator", "--nodes", "32", "--knavigator-seconds", "2",
         "--rounds", "1", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = json.loads(out.read_text())
    (round_,) = report["rounds"]["knavigator"]
    assert (round_["pods"], round_["optimal_makespan"], round_["optimum_proven"]) == (288, 18, True)
    for label in ("backfill", "no_backfill"):
        figures = round_[label]
        assert figures["optimum_over_makespan"] > 0
        latency = figures["latency"]
        # every gang but the first waits for a gang before it to end (nine waves of 32 nodes)
        assert latency["gangs"] >= 8
        for step in ("master_end_to_delete", "gone_to_admitted", "bound_to_running", "total"):
            assert latency[step]["median"] is not None
    assert report["summary"]["knavigator"]["backfill_makespan"]["rounds"] == [
        round_["backfill"]["makespan"]
    ]

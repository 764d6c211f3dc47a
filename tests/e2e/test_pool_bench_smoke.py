"""``benchmarks/pool_bench.py`` at a tiny size runs end to end and writes its figures.

A smoke test, not a performance test: nothing here looks at a makespan or a latency (the
machines are noisy; the figures live in benchmarks/README.md). It proves the benchmark still
starts its control plane and the real controller, runs a burst to completion with and without
backfill, and writes the JSON fields the figures quote.
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


def test_a_tiny_burst_runs_with_and_without_backfill(tmp_path: Path) -> None:
    out = tmp_path / "pool.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pool_bench.py"), "--only", "burst",
         "--nodes", "4", "--jobs", "3", "--seconds", "2", "--rounds", "1", "--out", str(out)],
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
    assert set(report["rounds"]) == {"burst"}

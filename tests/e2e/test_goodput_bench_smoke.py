"""``benchmarks/goodput_bench.py`` at a tiny size runs end to end and writes its figures.

A smoke test, not a performance test: no recovery time is judged here (the figures live in
benchmarks/README.md). It proves the benchmark still starts its plane and the real controller,
fills the pool, fails nodes, sees every gang run whole again, and writes the JSON fields README
quotes.
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


@pytest.mark.timeout(900)
def test_a_tiny_goodput_benchmark_fails_nodes_and_sees_the_gangs_whole_again(
    tmp_path: Path,
) -> None:
    out = tmp_path / "goodput.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "goodput_bench.py"),
         "--minutes", "1", "--interval", "30", "--repair", "90",
         "--node-lost-seconds", "5", "--recovery-timeout", "240", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=840, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = json.loads(out.read_text())
    summary = report["summary"]
    assert summary["failures"] == 2
    assert summary["not_recovered"] == 0
    for key in ("recovery_seconds_p50", "recovery_seconds_p99", "lost_over_floor_p50"):
        assert math.isfinite(summary[key]), key
        assert summary[key] > 0, key
    assert 0 < summary["share_of_gpu_time_lost"] < 1
    assert len(report["failures"]) == 2
    assert report["setup"]["times_llama3_rate"] > 1

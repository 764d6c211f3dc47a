"""``benchmarks/scale_bench.py`` at a tiny size runs end to end and writes its JSON and PNGs.

A smoke test, not a performance test: nothing here looks at a rate or a latency (the figures live
in docs/scale.md). It proves the benchmark still starts its control plane, the webhook and the
real controller, measures the plain script, runs the burst and the steady stream to completion,
and writes the fields and plots the report quotes.
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


def test_a_tiny_scale_benchmark_finishes_every_job_and_draws_its_plots(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "scale_bench.py"),
         "--nodes", "20", "--minutes", "0.2", "--run-seconds", "1", "--spread", "2",
         "--burst-run-seconds", "1", "--burst-spread", "2", "--webhook-seconds", "2",
         "--controller-settle", "1", "--out-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = json.loads((tmp_path / "scale-20.json").read_text())
    burst, stream = report["controller"]["burst"], report["controller"]["stream"]
    assert report["plain"]["pods"] == burst["pods"] == 160, "a pod per GPU of 20 8-GPU nodes"
    assert burst["jobs_admitted"] == burst["jobs_released"] == 20
    assert stream["jobs"] >= 1
    assert stream["jobs_admitted"] == stream["jobs"]
    for figure in (
        report["ratio_controller_to_plain"],
        burst["controller_cpu_seconds_per_1000_pods"],
        burst["controller_rss_at_most_pods_mib"],
        stream["admission_p99_seconds"],
        report["webhook_idle"]["server_p99_ms"],
        burst["webhook"]["server_p99_ms"],
    ):
        assert math.isfinite(figure)
        assert figure > 0
    assert report["webhook_idle"]["errors"] == burst["webhook"]["errors"] == 0
    for png in ("scale-summary.png", "scale-timeline-20.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""``benchmarks/controller_bench.py`` at a tiny size runs end to end and writes its figures.

A smoke test, not a performance test: nothing here looks at a rate or a latency (the machines are
noisy; the figures live in docs/development.md). It proves the benchmark still starts its control
plane and the real controller, measures both baselines, runs every job to completion through more
than one wave, clears the namespace for a second round, and writes the JSON fields the figures
quote.
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


def test_a_tiny_controller_benchmark_finishes_every_job(tmp_path: Path) -> None:
    out = tmp_path / "controller.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "controller_bench.py"),
         "--jobs", "4", "--nodes", "2", "--run-seconds", "1", "--spread", "2", "--rounds", "2",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = json.loads(out.read_text())
    assert len(report["rounds"]) == 2
    for one in report["rounds"]:
        controller = one["controller"]
        assert (controller["jobs"], controller["jobs_done"]) == (4, 4)
        assert controller["first_wave_jobs"] == 2, "2 nodes of 8 GPUs hold two 8-pod gangs at once"
        assert one["baseline"]["pods"] == one["baseline_with_job_submissions"]["pods"] == 16
        assert one["baseline_with_job_submissions"]["jobs_submitted_meanwhile"] == 4
        for figure in (
            one["ratio_controller_to_plain"],
            one["ratio_controller_to_plain_with_job_submissions"],
            controller["release_requested_p99"],
            controller["create_to_all_pods_all_jobs_p99"],
        ):
            assert math.isfinite(figure)
            assert figure > 0
        # The second round's controller saw only its own jobs: the first round's were cleared.
        assert controller["apiserver_writes_per_job"]["POST pods"] == 8
        assert controller["apiserver_writes_per_job"]["POST pytorchjobs"] == 1

    summary = report["summary"]
    ratios = summary["ratio_controller_to_plain_with_job_submissions"]
    assert ratios["rounds"] == [
        one["ratio_controller_to_plain_with_job_submissions"] for one in report["rounds"]
    ]
    assert min(ratios["rounds"]) <= ratios["median"] <= max(ratios["rounds"])
    assert summary["jobs_done"]["rounds"] == [4, 4]
    assert set(summary["targets"]) == {
        "throughput_ratio_at_least_0_8",
        "release_requested_p99_at_most_1s",
    }

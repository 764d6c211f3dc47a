"""``benchmarks/forecast_bench.py`` at a tiny size runs end to end and writes its figures.

A smoke test, not a performance test: no latency is judged (the figures live in
benchmarks/README.md). It proves the benchmark still starts its control plane, the controller
with its pool service and both webhooks, gets a forecast on every forecasting review and none on
the plain ones, switches the apiserver between them, and writes the fields the figures quote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def test_a_tiny_forecast_benchmark_measures_both_servers_in_both_phases(tmp_path: Path) -> None:
    out = tmp_path / "forecast.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "forecast_bench.py"),
         "--nodes", "8", "--running", "4", "--waiting", "4", "--requests", "20", "--warmup", "2",
         "--rounds", "1", "--block", "5", "--settle", "2", "--rate", "50", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    report = json.loads(out.read_text())
    direct = report["direct"]
    assert direct["plain"]["forecast_warnings"] == 0
    assert direct["forecasting"]["forecast_warnings"] == 20
    for key in ("added_client", "added_server", "added_client_with_forecast"):
        assert set(direct[key]) == {"p50_ms", "p90_ms", "p99_ms"}
    apiserver = report["apiserver"]
    assert apiserver["plain"]["n"] == apiserver["forecasting"]["n"] == 5
    assert set(apiserver["added"]) == {"p50_ms", "p90_ms", "p99_ms"}
    assert report["forecast_outcomes"].get("answered", 0) >= 25

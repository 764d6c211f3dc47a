"""``benchmarks/webhook_bench.py --quick`` runs end to end and writes well-formed results.

A smoke test, not a performance test: the machines are shared and noisy, so nothing here looks at
a latency or a throughput. It only proves that the benchmark still starts all three servers
(bare, naive, torchgate) over TLS, that each answers both routes with a real decision, that
the JSON report has the shape the README documents, and that the run ends with its target line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVERS = {"bare", "naive", "torchgate"}
ROUTES = {"mutate", "validate"}


def test_quick_benchmark_writes_results_for_all_three_servers(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    script = REPO / "benchmarks" / "webhook_bench.py"
    run = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Max throughput" in run.stdout

    report = json.loads(out.read_text())
    assert set(report) >= {"meta", "servers", "rates", "max_throughput", "summary"}
    assert report["meta"]["quick"] is True
    assert set(report["servers"]) == SERVERS
    for name, server in report["servers"].items():
        for route in ROUTES:
            check = server["checks"][route]
            assert check["allowed"] is True, (name, route, check)
            assert check["uid_echoed"] is True, (name, route, check)
    # torchgate's mutating answer carries the defaults as a patch, with warnings.
    assert report["servers"]["torchgate"]["checks"]["mutate"]["patch_ops"] > 0
    # ... and it turns the job into the same object as the naive deep-copy-and-diff handler.
    assert report["servers"]["torchgate"]["checks"]["mutate"]["same_object_as_naive"] is True

    for phase, count_key in (("rates", "requests"), ("max_throughput", "requests")):
        rows = report[phase]
        assert {(row["server"], row["route"]) for row in rows} == {
            (server, route) for server in SERVERS for route in ROUTES
        }, phase
        for row in rows:
            assert isinstance(row[count_key], int)
            assert row[count_key] > 0
            assert isinstance(row["errors"], int)
            assert "server_cpu_us_per_review" in row
    # Every server reports its own handler time, so server-side percentiles exist.
    first_rate = [row for row in report["rates"] if row["target_rps"] == report["meta"]["rates"][0]]
    for row in first_rate:
        assert row["server_p50_ms"] is not None, row
        assert row["server_p99_ms"] is not None, row

    for name in SERVERS:
        assert set(report["summary"][name]) == ROUTES
    assert set(report["summary"]["targets"]) == ROUTES

    # The run ends with its target line, a PASS or FAIL per route (a quick run is not judged).
    target = run.stdout.strip().splitlines()[-1]
    assert target.startswith("TARGET "), target
    assert target.endswith("(quick run: not judged)"), target
    for route in ROUTES:
        assert f"{route} " in target, target
    assert target.count("PASS") + target.count("FAIL") == len(ROUTES), target

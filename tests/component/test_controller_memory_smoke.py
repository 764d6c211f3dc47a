"""``benchmarks/controller_memory.py`` runs end to end on a few pods and writes its report.

A smoke test, not a measurement: it proves the benchmark still builds served pods, feeds them to
the pod informer by list and by watch in child interpreters, and reports per-pod figures, and
that the cache keeps less of a pod than the apiserver sends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_small_run_reports_every_path(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    script = REPO / "benchmarks" / "controller_memory.py"
    run = subprocess.run(
        [sys.executable, str(script), "--sizes", "40", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {(row["path"], row["pods"]) for row in report["rows"]} == {("list", 40), ("watch", 40)}
    for row in report["rows"]:
        assert row["traced_bytes_per_pod"] > 0
    sizes = report["sizes"]["after"]
    assert sizes["kept_json_bytes"] < sizes["served_json_bytes"]

"""The command of ``benchmarks/pool_bench.py``: flags, the run on a fresh plane, the summary, JSON.

``main_async`` starts a control plane in a temporary folder, prepares the pool, runs the chosen
scenarios and gathers every round's figures; ``summarise`` (pure) gives the medians over rounds
with every round's value, and ratios pair figures of the same round (the VM's speed drifts by
tens of percent over minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller_bench import connect, percentile

from torchgate_dev.controlplane.binaries import ensure_binaries
from torchgate_dev.controlplane.cluster import ControlPlane

from .harness import REPO, prepare
from .latency import STEPS
from .manifests import GPUS_PER_NODE
from .scenarios import burst_round, fairness_round, knavigator_round, preemption_rounds
from .stats import over

DESCRIPTION = "Pool-sharing benchmarks on the local control plane: the real controller, kwok nodes."


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """Medians over rounds (with every round's value) of the figures the README quotes."""
    summary: dict[str, Any] = {}
    if "burst" in results:
        rows = results["burst"]
        summary["burst"] = {
            f"{label}_{name}": over(rows, label, name)
            for label in _labels(rows)
            for name in (
                "makespan",
                "occupancy",
                "makespan_over_optimum",
                "makespan_over_simulated",
                "allocated_occupancy",
            )
        }
        summary["burst"]["optimal_makespan"] = over(rows, "optimal_makespan")
        if "no_backfill_makespan_over_backfill" in rows[0]:
            summary["burst"]["no_backfill_makespan_over_backfill"] = over(
                rows, "no_backfill_makespan_over_backfill"
            )
        summary["burst"]["latency"] = _latency(rows)
    if "knavigator" in results:
        rows = results["knavigator"]
        summary["knavigator"] = {
            f"{label}_{name}": over(rows, label, name)
            for label in _labels(rows)
            for name in ("makespan", "optimum_over_makespan", "simulated_makespan", "occupancy")
        }
        summary["knavigator"]["optimal_makespan"] = over(rows, "optimal_makespan")
        summary["knavigator"]["latency"] = _latency(rows)
    if "preemption" in results:
        rows = results["preemption"]
        seconds = {
            label: [r[label]["seconds_to_all_running"] for r in rows]
            for label in ("preemption", "plain")
        }
        summary["preemption"] = {
            **{f"{label}_p50": percentile(v, 0.5) for label, v in seconds.items()},
            **{f"{label}_p99": percentile(v, 0.99) for label, v in seconds.items()},
            "ratio_preemption_to_plain": over(rows, "ratio_preemption_to_plain"),
            "victim_pods": over(rows, "preemption", "victim_pods"),
            "seconds_to_first_eviction": over(rows, "preemption", "seconds_to_first_eviction"),
        }
    if "fairness" in results:
        rows = results["fairness"]
        summary["fairness"] = {
            f"{label}_{team}_{name}": over(rows, label, team, name)
            for label in ("quotas", "no_quotas")
            for team in ("a", "b")
            for name in ("seconds_to_share", "seconds_to_90_percent")
        }
    return summary


def _latency(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per run label and step, the rounds' medians of the per-gang median seconds."""
    return {
        label: {step: over(rows, label, "latency", step, "median") for step in STEPS}
        for label in _labels(rows)
    }


def _labels(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The burst runs the rounds made (``--modes``)."""
    return [label for label in ("backfill", "no_backfill") if rows and label in rows[0]]


async def main_async(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start a plane, prepare the pool, run the scenarios in ``args.only``; the JSON document."""
    plane = ControlPlane(binaries=ensure_binaries(), workdir=workdir / "plane")
    with plane:
        print(f"control plane ready in {plane.startup_seconds:.1f}s", file=sys.stderr)
        prepare(plane, nodes=args.nodes)
        api = connect(plane)
        results: dict[str, Any] = {}
        try:
            if "burst" in args.only:
                results["burst"] = [
                    await burst_round(api, plane, args, number, workdir)
                    for number in range(1, args.rounds + 1)
                ]
            if "knavigator" in args.only:
                results["knavigator"] = [
                    await knavigator_round(api, plane, args, number, workdir)
                    for number in range(1, args.rounds + 1)
                ]
            if "preemption" in args.only:
                results["preemption"] = await preemption_rounds(api, plane, args, workdir)
            if "fairness" in args.only:
                results["fairness"] = [
                    await fairness_round(api, plane, args, number, workdir)
                    for number in range(1, args.rounds + 1)
                ]
        finally:
            await api.close()
            for log in sorted(workdir.glob("controller-*.log")):
                text = log.read_text()
                if "Traceback" in text or "ERROR" in text:
                    print(f"--- {log.name} (last lines)\n{text[-2000:]}", file=sys.stderr)
    return {
        "setup": {
            "load_average_at_end": os.getloadavg(),
            "nodes": args.nodes,
            "gpus_per_node": GPUS_PER_NODE,
            "jobs": args.jobs,
            "seconds": args.seconds,
            "urgent_pods": args.urgent_pods,
            "preemption_rounds": args.preemption_rounds,
            "team_jobs": args.team_jobs,
            "fair_seconds": args.fair_seconds,
            "knavigator_seconds": args.knavigator_seconds,
            "deadline_margin": args.deadline_margin,
            "wave_hold_seconds": args.wave_hold_seconds,
            "rounds": args.rounds,
            "seed": args.seed,
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip(),
        },
        "summary": summarise(results),
        "rounds": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, run, print the summary, write the JSON."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument(
        "--only",
        default="burst,preemption,fairness",
        help="comma-separated scenarios: burst, preemption, fairness, knavigator",
    )
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=24, help="gangs in the burst")
    parser.add_argument("--seconds", type=float, default=20.0, help="every burst gang's run time")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of burst and fairness")
    parser.add_argument("--urgent-pods", type=int, default=16)
    parser.add_argument("--preemption-rounds", type=int, default=10)
    parser.add_argument("--team-jobs", type=int, default=12, help="gangs per team")
    parser.add_argument("--fair-seconds", type=float, default=60.0, help="team gangs' run time")
    parser.add_argument(
        "--knavigator-seconds", type=float, default=30.0, help="knavigator's pods' run time"
    )
    parser.add_argument(
        "--modes",
        default="backfill,no_backfill",
        help="burst and knavigator runs per round: backfill, no_backfill (comma-separated)",
    )
    parser.add_argument(
        "--deadline-margin",
        type=float,
        default=10.0,
        help="burst and knavigator gangs' activeDeadlineSeconds = run time + this (default 10);"
        " negative: no deadline (the cycle then knows no gang's end and reserves nothing)",
    )
    parser.add_argument(
        "--wave-hold-seconds",
        type=float,
        default=2.0,
        help="the controller's --wave-hold-seconds in burst and knavigator runs (default 2,"
        " the controller's default; 0: off)",
    )
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "pool.json")
    args = parser.parse_args(argv)
    args.only = {part.strip() for part in args.only.split(",") if part.strip()}
    args.modes = {part.strip() for part in args.modes.split(",") if part.strip()}
    if not args.modes or args.modes - {"backfill", "no_backfill"}:
        parser.error("--modes: backfill and/or no_backfill")
    if args.deadline_margin < 0:
        args.deadline_margin = None
    unknown = args.only - {"burst", "preemption", "fairness", "knavigator"}
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    if args.nodes < 32 and "knavigator" in args.only:
        parser.error("knavigator's workload needs 32 nodes (its largest gang)")
    if args.nodes < 16 and "preemption" in args.only:
        parser.error("the preemption scenario needs at least 16 nodes (two low gangs of 8 free)")
    if "preemption" in args.only and args.urgent_pods > args.nodes // 2:
        parser.error("--urgent-pods must fit in half the pool (the baseline's free half)")
    with tempfile.TemporaryDirectory(prefix="tg-pool-bench-") as tmp:
        result = asyncio.run(main_async(args, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {args.out}", file=sys.stderr)
    return 0

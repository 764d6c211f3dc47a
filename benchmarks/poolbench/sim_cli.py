"""The command of ``benchmarks/pool_sim.py``: flags, every scenario over the seeds, the JSON.

``run`` builds each round's workload from ``--seed + round``, so two runs with the same flags
give the same figures (but for the CPU and wall times).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .figures import burst_figures, burst_summary, fairness_figures, fairness_summary
from .workload import burst, two_teams

DESCRIPTION = (
    "Pool-sharing benchmarks by simulation:"
    " the real admission cycle, a simulated clock, no cluster."
)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """All scenarios over ``args.rounds`` seeds; medians over rounds with every round's value."""
    started = time.perf_counter()
    largest = min(32, args.nodes)
    fixed = [
        burst_figures(
            burst(args.seed + r, jobs=args.jobs, largest=largest, seconds=args.seconds),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]
    mixed = [
        burst_figures(
            burst(
                args.seed + r,
                jobs=args.jobs,
                largest=largest,
                seconds=args.seconds,
                spread=args.spread,
            ),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]
    fair = [
        fairness_figures(
            two_teams(
                args.seed + r,
                jobs_per_team=args.team_jobs,
                largest=args.nodes // 2,
                seconds=args.seconds,
                spread=args.spread,
            ),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]
    # Team a has borrowed the whole pool when team b submits: b's share comes back by reclaim.
    late = [
        fairness_figures(
            two_teams(
                args.seed + r,
                jobs_per_team=args.team_jobs,
                largest=args.nodes // 2,
                seconds=args.seconds,
                spread=args.spread,
                b_delay=args.seconds / 2,
            ),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]

    summary = {
        "burst_fixed_run_time": burst_summary(fixed),
        "burst_spread_run_time": burst_summary(mixed),
        "fairness_at_once": fairness_summary(fair),
        "fairness_b_while_a_borrows": fairness_summary(late),
    }
    return {
        "setup": {
            "nodes": args.nodes,
            "gpus_per_node": args.gpus_per_node,
            "jobs": args.jobs,
            "team_jobs": args.team_jobs,
            "seconds": args.seconds,
            "spread": args.spread,
            "rounds": args.rounds,
            "seed": args.seed,
        },
        "summary": summary,
        "rounds": {
            "burst_fixed_run_time": fixed,
            "burst_spread_run_time": mixed,
            "fairness_at_once": fair,
            "fairness_b_while_a_borrows": late,
        },
        "wall_seconds": round(time.perf_counter() - started, 2),
    }


def parser() -> argparse.ArgumentParser:
    """The command line."""
    parse = argparse.ArgumentParser(description=DESCRIPTION)
    parse.add_argument("--nodes", type=int, default=32)
    parse.add_argument("--gpus-per-node", type=int, default=8)
    parse.add_argument("--jobs", type=int, default=60, help="gangs in the burst (benchmark 1)")
    parse.add_argument("--team-jobs", type=int, default=30, help="gangs per team (benchmark 4)")
    parse.add_argument("--seconds", type=float, default=60.0, help="every gang's run time")
    parse.add_argument("--spread", type=float, default=120.0, help="run times vary this much")
    parse.add_argument("--rounds", type=int, default=20, help="bursts (seeds) per scenario")
    parse.add_argument("--seed", type=int, default=16)
    parse.add_argument("--out", type=Path, default=None)
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print the summary, write the JSON."""
    args = parser().parse_args(argv)
    if args.rounds < 1 or args.jobs < 1 or args.team_jobs < 1 or args.nodes < 2:
        parser().error("--rounds, --jobs, --team-jobs must be at least 1, --nodes at least 2")
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(json.dumps(result["summary"], indent=2), file=sys.stdout)
    return 0

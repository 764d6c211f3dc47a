"""Goodput under node failures: how much GPU time a lost node costs a gang, against the floor.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing. A mix of
gangs of whole 8-GPU nodes (16, 8, 8, 4, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1 nodes) runs on 64 kwok
nodes under the real ``torchgate controller`` while nodes stop heartbeating at a fixed rate
(default one per 10 minutes of wall time: about 600 times Meta's Llama 3 rate on this pool of
512 GPUs). For every failure: the time until its gang runs again whole, the GPU-hours lost, and
that against the floor (the gang's GPUs times the detection bound plus the gang's own start
time, measured in the same run). The summary gives recovery p50/p99 over the failures and the
share of GPU time lost. The rules are in ``goodputbench/model.py``; the run in
``goodputbench/run.py``.

    .venv/bin/python benchmarks/goodput_bench.py --out bench-results/goodput.json       # ~35 min
    .venv/bin/python benchmarks/goodput_bench.py --minutes 12 --interval 90             # shorter
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# The packages beside this file: its folder is sys.path[0] when this runs as a script, not when
# it is loaded some other way.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from goodputbench.model import (
    GANG_NODES,
    GPUS_PER_NODE,
    POOL_NODES,
    failure_rows,
    llama3_interval_hours,
    summarise,
    time_compression,
)
from goodputbench.run import NODE_MONITOR_GRACE_SECONDS, REPO, main_async


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, run, print the summary, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="the failure phase's length")
    parser.add_argument("--interval", type=float, default=600.0, help="seconds between failures")
    parser.add_argument("--repair", type=float, default=300.0, help="seconds a node stays down")
    parser.add_argument("--node-lost-seconds", type=float, default=30.0)
    parser.add_argument("--recovery-timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "goodput.json")
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.minutes <= 0:
        parser.error("--minutes and --interval must be positive")
    if args.repair <= NODE_MONITOR_GRACE_SECONDS + args.node_lost_seconds:
        parser.error("--repair must outlast the detection bound (50 s + --node-lost-seconds)")
    with tempfile.TemporaryDirectory(prefix="tg-goodput-bench-") as tmp:
        raw = asyncio.run(main_async(args, Path(tmp)))
    gpus = POOL_NODES * GPUS_PER_NODE
    held_gpu_hours = sum(GANG_NODES) * GPUS_PER_NODE * raw["phase_seconds"] / 3600.0
    failures = raw["failures"]
    result = {
        "setup": {
            "nodes": POOL_NODES,
            "gpus_per_node": GPUS_PER_NODE,
            "gangs_nodes": list(GANG_NODES),
            "minutes": args.minutes,
            "interval_seconds": args.interval,
            "repair_seconds": args.repair,
            "node_lost_seconds": args.node_lost_seconds,
            "llama3_interval_hours_on_this_pool": llama3_interval_hours(gpus),
            "times_llama3_rate": time_compression(args.interval, gpus),
            "seed": args.seed,
            "kubernetes": raw["kubernetes"],
            "commit": raw["commit"],
            "load_average_at_end": raw["load_average_at_end"],
        },
        "summary": {
            **summarise(failures, held_gpu_hours=held_gpu_hours, end=raw["end"]),
            "restart_floor_seconds": raw["floors"],
            "phase_seconds": raw["phase_seconds"],
            "held_gpu_hours": held_gpu_hours,
        },
        "failures": failure_rows(failures, raw["end"]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Flags and ``main`` of ``benchmarks/controller_bench.py``."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from controllerbench import REPO
from controllerbench.phases import run
from controllerbench.report import round_lines, summary_lines

DESCRIPTION = (
    "Controller benchmark: 1,000 PyTorchJobs (1 Master + 7 Workers, 1 GPU) on 200 fake 8-GPU nodes."
)


def parser() -> argparse.ArgumentParser:
    """The command's flags."""
    flags = argparse.ArgumentParser(description=DESCRIPTION)
    flags.add_argument("--jobs", type=int, default=1000)
    flags.add_argument("--nodes", type=int, default=200)
    flags.add_argument("--run-seconds", type=int, default=5, help="shortest Master run time")
    flags.add_argument("--spread", type=int, default=10, help="Master run times vary this much")
    flags.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="plain, plain with submissions, controller: repeated; ratios are medians over rounds",
    )
    flags.add_argument(
        "--write-concurrency",
        type=int,
        default=32,
        help="the controller's --write-concurrency, and the plain script's pod creates at once",
    )
    flags.add_argument("--out", type=Path, default=REPO / "bench-results" / "controller.json")
    return flags


def main() -> int:
    """Run the benchmark, write the JSON to ``--out`` and print the figures."""
    flags = parser()
    args = flags.parse_args()
    if args.rounds < 1:
        flags.error("--rounds must be at least 1")
    if args.write_concurrency < 1:
        flags.error("--write-concurrency must be at least 1")
    with tempfile.TemporaryDirectory(prefix="tg-bench-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    lines: list[str] = []
    for number, one in enumerate(result["rounds"], start=1):
        lines += round_lines(number, one)
    lines += summary_lines(result, str(args.out))
    print("\n" + "\n".join(lines))
    return 0

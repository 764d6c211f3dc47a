"""Flags and ``main`` of ``benchmarks/scale_bench.py``."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from scalebench import REPO
from scalebench.phases import run_size
from scalebench.plots import plot_all


def parser() -> argparse.ArgumentParser:
    """The command's flags."""
    flags = argparse.ArgumentParser(description="Scale benchmark: the controller at fleet size.")
    flags.add_argument("--nodes", default="1000", help="comma-separated sizes, e.g. 1000,2000")
    flags.add_argument(
        "--burst-gangs",
        type=int,
        default=0,
        help="gangs of 8 one-GPU pods in the burst and the plain script (default: one per node)",
    )
    flags.add_argument(
        "--rounds", type=int, default=1, help="plain and controller bursts, alternately"
    )
    flags.add_argument("--minutes", type=float, default=2.0, help="the steady stream's length")
    flags.add_argument(
        "--load", type=float, default=0.5, help="share of the burst's GPUs the stream keeps busy"
    )
    flags.add_argument("--run-seconds", type=int, default=20, help="stream gangs' shortest run")
    flags.add_argument("--spread", type=int, default=40, help="stream run times vary this much")
    flags.add_argument(
        "--burst-run-seconds",
        type=int,
        default=0,
        help="burst jobs' shortest run (default: twice the plain script's create seconds)",
    )
    flags.add_argument("--burst-spread", type=int, default=10)
    flags.add_argument("--write-concurrency", type=int, default=32)
    flags.add_argument("--webhook-rate", type=float, default=20.0, help="probe reviews a second")
    flags.add_argument("--webhook-seconds", type=float, default=20.0, help="idle probe length")
    flags.add_argument("--controller-settle", type=float, default=5.0)
    flags.add_argument(
        "--apiserver-profile-seconds",
        type=float,
        default=0.0,
        help="a CPU profile of the apiserver this long inside every burst, saved in --out-dir"
        " (go tool pprof reads it; default 0: none)",
    )
    flags.add_argument(
        "--node-lease-seconds",
        type=int,
        default=40,
        help="kwok nodes' Lease duration (default 40, the kubelet's); kwok renews every quarter"
        " of it, so a longer lease halves or quarters its writes, and kube-controller-manager"
        " waits 1.25 times it before calling a silent node Unknown",
    )
    flags.add_argument("--drain-timeout", type=float, default=300.0)
    flags.add_argument("--seed", type=int, default=23)
    flags.add_argument("--out-dir", type=Path, default=REPO / "bench-results" / "scale")
    flags.add_argument(
        "--plots-dir", type=Path, default=None, help="where the PNGs go (default: --out-dir)"
    )
    flags.add_argument(
        "--plot-only", action="store_true", help="redraw the PNGs from --out-dir's JSON"
    )
    return flags


def main() -> int:
    """Run each size, write ``scale-<nodes>.json`` and redraw the PNGs after each."""
    flags = parser()
    args = flags.parse_args()
    sizes = [int(n) for n in args.nodes.split(",") if n]
    if any(n < 1 for n in sizes) or args.minutes <= 0 or not 0 < args.load <= 1:
        flags.error("sizes must be positive, --minutes > 0, 0 < --load <= 1")
    if args.rounds < 1 or args.burst_run_seconds < 0 or args.burst_spread < 1:
        flags.error("--rounds and --burst-spread must be at least 1, --burst-run-seconds >= 0")
    if args.node_lease_seconds < 4:
        flags.error("--node-lease-seconds must be at least 4 (kwok renews every quarter of it)")
    if args.burst_gangs < 0 or any(args.burst_gangs > n for n in sizes):
        flags.error("--burst-gangs must be between 0 (one per node) and the smallest size")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    plots = args.plots_dir or args.out_dir
    if not args.plot_only:
        for nodes in sizes:
            with tempfile.TemporaryDirectory(prefix="tg-scale-") as tmp:
                result = asyncio.run(run_size(args, nodes, Path(tmp)))
            path = args.out_dir / f"scale-{nodes}.json"
            path.write_text(json.dumps(result, indent=2))
            print(summary_line(result, path))
    made = plot_all(sorted(args.out_dir.glob("scale-*.json")), plots)
    print("plots: " + ", ".join(str(p) for p in made))
    return 0


def summary_line(result: dict[str, object], path: Path) -> str:
    """One line per size: the figures the target is judged on."""
    doc: dict[str, dict[str, dict[str, float]]] = result  # type: ignore[assignment]
    burst, stream = doc["controller"]["burst"], doc["controller"]["stream"]
    ratio = result["ratio_controller_to_plain"]
    low, high = result["ratio_min"], result["ratio_max"]
    return (
        f"{doc['setup']['nodes']} nodes: plain {doc['plain']['pods_per_second']:.0f} pods/s, "
        f"controller {burst['pods_per_second']:.0f} pods/s (medians; ratio {ratio:.2f}, "
        f"{low:.2f}-{high:.2f} over adjacent pairs, target 0.8 "
        f"{'MET' if isinstance(ratio, float) and ratio >= 0.8 else 'NOT MET'}); stream admission "
        f"p50/p99 {stream['admission_p50_seconds']:.2f}/{stream['admission_p99_seconds']:.2f} s,"
        f" release p99 {stream['release_gone_p99_seconds']:.2f} s -> {path}"
    )

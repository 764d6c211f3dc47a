"""The command line: flags, defaults for a full and a ``--quick`` run, and ``main``.

``main`` is the shell: it makes the certificates in a temporary folder, runs the phases, prints
the tables and writes the JSON. ``webhook_bench.py _serve {bare|naive} ...`` serves a baseline.
It ends with the target line (``stats.target_line``) and exits 1 when a route is below the
target; a ``--quick`` run prints the line but is not judged (too few requests for a ratio).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from webhookbench import POLICY_FILE, ROUTES, SERVERS
from webhookbench.phases import Bench
from webhookbench.processes import make_certs
from webhookbench.report import document, render
from webhookbench.stats import target_line

FULL_RATES: Final = (250, 500, 1000, 2000, 3000, 4000, 6000, 8000, 12000)
QUICK_RATES: Final = (100, 400)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="webhook_bench.py",
        description="Benchmark torchgate webhook against a bare aiohttp endpoint and a naive one.",
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="smoke run: a few hundred requests")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma list (default all)")
    parser.add_argument("--routes", default=",".join(ROUTES), help="comma list (default both)")
    parser.add_argument("--rates", help="comma list of reviews/s for the open-loop sweep")
    parser.add_argument("--duration", type=float, help="seconds per fixed rate (default 4)")
    parser.add_argument("--connections", type=int, default=8, help="open-loop connections (8)")
    parser.add_argument("--max-connections", type=int, default=16, help="closed-loop conns (16)")
    parser.add_argument("--max-duration", type=float, help="seconds per closed-loop run (4)")
    parser.add_argument("--repeat", type=int, help="closed-loop rounds per server (3)")
    parser.add_argument("--max-requests", type=int, help="cap on requests per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per route")
    parser.add_argument(
        "--retries", type=int, help="re-runs of a fixed rate a server failed (1; quick 0)"
    )
    parser.add_argument("--slo-ms", type=float, default=50.0, help="client p99 to sustain (50)")
    parser.add_argument("--timeout", type=float, default=10.0, help="per-request timeout (10)")
    parser.add_argument("--server-core", type=int, help="core for the servers (first available)")
    parser.add_argument("--client-core", type=int, help="core for the generator (next one)")
    parser.add_argument("--policy", type=Path, default=POLICY_FILE, help="PlacementPolicy file")
    parser.add_argument(
        "--nice",
        type=int,
        help="run servers and generator at this niceness (e.g. -10, needs root) so that other "
        "work on a shared machine disturbs the measurement less",
    )
    parser.add_argument("--wrk", action="store_true", help="also measure max throughput with wrk")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each phase")
    args = parser.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    args.routes = [r for r in args.routes.split(",") if r]
    for name in args.servers:
        if name not in SERVERS:
            parser.error(f"unknown server {name!r}")
    for route in args.routes:
        if route not in ROUTES:
            parser.error(f"unknown route {route!r}")
    if args.rates:
        args.rates = [float(r) for r in args.rates.split(",")]
        args.rates = [int(r) if r.is_integer() else r for r in args.rates]
    else:
        args.rates = list(QUICK_RATES if args.quick else FULL_RATES)
    if args.quick:
        args.duration = args.duration or 0.5
        args.max_duration = args.max_duration or 0.5
        args.repeat = args.repeat or 1
        args.max_requests = args.max_requests or 100
        args.warmup = min(args.warmup, 0.2)
        args.retries = args.retries or 0
    args.duration = args.duration or 4.0
    args.max_duration = args.max_duration or 4.0
    args.repeat = args.repeat or 3
    args.retries = 1 if args.retries is None else args.retries
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_serve"]:
        from webhookbench.baseline import serve_baseline  # aiohttp only in the server process

        return serve_baseline(argv[1:])
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with tempfile.TemporaryDirectory(prefix="torchgate-bench-") as temp:
        workdir = Path(temp)
        make_certs(workdir / "certs")
        bench = Bench(args, workdir / "certs", workdir)
        try:
            bench.start()
            checks = bench.check_answers()
            bench.warm_up()
            rates = bench.rates()
            maxima = bench.max_throughput()
        except BaseException:
            for server in bench.servers.values():
                if server.process.poll() is not None:
                    print(server.log.read_text(errors="replace")[-2000:], file=sys.stderr)
            raise
        finally:
            bench.stop()
    meta: dict[str, Any] = {
        "started": started,
        "command": " ".join(["python", "benchmarks/webhook_bench.py", *argv]),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "server_core": bench.server_core,
        "client_core": bench.client_core,
        "pinned": bench.server_core is not None,
        "generator": "python epoll + ssl sockets (HTTP/1.1 keep-alive)"
        + (", wrk cross-check" if args.wrk and shutil.which("wrk") else ""),
        "review_bytes": {route: len(bodies[0]) for route, bodies in bench.bodies.items()},
        "policy": str(args.policy),
        "rates": args.rates,
        "duration_s": args.duration,
        "connections": args.connections,
        "max_connections": args.max_connections,
        "max_duration_s": args.max_duration,
        "slo_ms": args.slo_ms,
        "quick": args.quick,
        "load_average": os.getloadavg(),
        "niceness": args.nice,
    }
    report = document(
        meta=meta, checks=checks, servers=list(bench.servers), rates=rates, maxima=maxima
    )
    print(render(report))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    line, passed = target_line(report["summary"])
    if args.quick:  # a few hundred requests per phase: too few to judge a ratio by
        print(f"{line} (quick run: not judged)")
        return 0
    print(line)
    return 0 if passed else 1

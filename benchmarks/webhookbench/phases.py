"""The run: servers up, answers checked, warm-up, then the phases in an interleaved order.

Per route (``/mutate``, ``/validate``):

1. Fixed rates, open loop: servers are interleaved at each rate; a rate a server fails is run
   again (``--retries``) and its sweep stops at the first rate it fails every time.
2. Max throughput, closed loop: ``--repeat`` rounds, in each every server in turn, with the
   Python generator and then (``--wrk``) with ``wrk`` as a cross-check.

Before measuring, one review per server and route is decoded: every answer must be an allowed
decision echoing the uid, and torchgate's patch applied to the job must give the same object as
the naive handler's diff.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy
from webhookbench.loadgen import Generator, one_response
from webhookbench.processes import (
    Meters,
    Server,
    choose_cores,
    set_niceness,
    start_server,
    stop_server,
    wait_ready,
)
from webhookbench.stats import latency_report, sustained
from webhookbench.workload import request_bodies


def read_policy(policy_file: Path) -> PlacementPolicy:
    """The PlacementPolicy in ``policy_file``; exit with its errors when it does not parse."""
    policy, errors = parse_policy(yaml.safe_load(policy_file.read_text()))
    if policy is None:
        raise SystemExit(f"{policy_file}: {errors}")
    return policy


class Bench:
    """One run: servers up, phases in an interleaved order, results collected."""

    def __init__(self, args: argparse.Namespace, certs: Path, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.server_core, self.client_core = choose_cores(args.server_core, args.client_core)
        self.context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        self.certs = certs
        self.servers: dict[str, Server] = {}
        self.autogroup_niceness: int | None = None
        self.bodies = request_bodies(64 if args.quick else 256, read_policy(args.policy))

    def start(self) -> None:
        """Start every server on the server core, wait until ready, move to the client core."""
        for name in self.args.servers:
            self.servers[name] = start_server(
                name,
                certs=self.certs,
                core=self.server_core,
                workdir=self.workdir,
                policy_file=self.args.policy,
                niceness=self.args.nice,
            )
        for server in self.servers.values():
            wait_ready(server, self.context)
        if self.client_core is not None:
            os.sched_setaffinity(0, {self.client_core})
        if self.args.nice is not None:
            self.autogroup_niceness = set_niceness(self.args.nice)

    def stop(self) -> None:
        """Stop every server."""
        for server in self.servers.values():
            stop_server(server)
        if self.autogroup_niceness is not None:  # the session outlives us: leave it as it was
            with contextlib.suppress(OSError):
                Path("/proc/self/autogroup").write_text(str(self.autogroup_niceness))

    def generator(self, server: Server, route: str, connections: int) -> Generator:
        """A generator for ``route`` of ``server`` with ``connections`` open connections."""
        generator = Generator(
            server.port, f"/{route}", self.bodies[route], self.context, timeout=self.args.timeout
        )
        generator.open(connections)
        return generator

    def check_answers(self) -> dict[str, dict[str, Any]]:
        """One review per server and route, decoded: the answers must be real decisions.

        The mutating answers of ``naive`` (diff of a defaulted deep copy) and ``torchgate``
        (patch built while defaulting) must turn the submitted job into the same object.
        """
        import jsonpatch

        checks: dict[str, dict[str, Any]] = {}
        patched: dict[str, Any] = {}
        for name, server in self.servers.items():
            for route in self.args.routes:
                generator = self.generator(server, route, 1)
                raw = one_response(generator)
                generator.close()
                answer = json.loads(raw)["response"]
                patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
                checks.setdefault(name, {})[route] = {
                    "allowed": answer.get("allowed"),
                    "uid_echoed": answer.get("uid") == str(uuid.UUID(int=1)),
                    "patch_ops": len(patch),
                    "warnings": len(answer.get("warnings", [])),
                    "response_bytes": len(raw),
                }
                if route == "mutate" and patch:
                    job = json.loads(self.bodies[route][0])["request"]["object"]
                    patched[name] = jsonpatch.apply_patch(job, patch)
        if "naive" in patched and "torchgate" in patched:
            same = patched["naive"] == patched["torchgate"]
            checks["torchgate"]["mutate"]["same_object_as_naive"] = same
        return checks

    def warm_up(self) -> None:
        """A short closed-loop run per server and route before anything is measured."""
        for server in self.servers.values():
            for route in self.args.routes:
                generator = self.generator(server, route, 2)
                generator.closed_loop(self.args.warmup, max_requests=self.args.max_requests)
                generator.close()

    def rates(self) -> list[dict[str, Any]]:
        """The open-loop sweep, servers interleaved at each rate, each until it falls behind."""
        rows = []
        for route in self.args.routes:
            active = list(self.servers)
            for rate in self.args.rates:
                for name in list(active):
                    for attempt in range(1 + self.args.retries):
                        row = self.open_loop_phase(name, route, rate)
                        row["attempt"] = attempt + 1
                        rows.append(row)
                        self.progress(row)
                        if row["sustained"]:
                            break
                    if not row["sustained"]:
                        active.remove(name)
                if not active:
                    break
        return rows

    def open_loop_phase(self, name: str, route: str, rate: float) -> dict[str, Any]:
        """One fixed-rate phase."""
        server = self.servers[name]
        generator = self.generator(server, route, self.args.connections)
        duration = self.args.duration
        if self.args.max_requests is not None:
            duration = min(duration, self.args.max_requests / rate)
        with Meters(server) as meters:
            result = generator.open_loop(rate, duration)
        generator.close()
        elapsed = max(result.finished - result.started, 1e-9)
        achieved = result.ok / max(elapsed, duration)
        row: dict[str, Any] = {
            "phase": "rate",
            "server": name,
            "route": route,
            "target_rps": rate,
            "duration_s": round(duration, 3),
            "requests": result.sent,
            "achieved_rps": round(achieved, 1),
            "errors": result.errors,
            "error_kinds": dict(result.error_kinds),
            **latency_report(result),
            **meters.report(result.ok),
        }
        row["sustained"] = sustained(
            errors=result.errors,
            achieved=achieved,
            rate=rate,
            p99_ms=row["client_p99_ms"],
            slo_ms=self.args.slo_ms,
        )
        if result.first_bad:
            row["first_bad_response"] = result.first_bad
        return row

    def max_throughput(self) -> list[dict[str, Any]]:
        """Closed-loop rounds: in each, every server in turn, per generator."""
        rows = []
        generators = ["python", "wrk"] if self.args.wrk and shutil.which("wrk") else ["python"]
        for route in self.args.routes:
            for attempt in range(self.args.repeat):
                for generator in generators:
                    for name in self.servers:
                        if generator == "python":
                            row = self.closed_loop_phase(name, route)
                        else:
                            row = self.wrk_phase(name, route)
                        row["attempt"] = attempt + 1
                        rows.append(row)
                        self.progress(row)
        return rows

    def closed_loop_phase(self, name: str, route: str) -> dict[str, Any]:
        """One closed-loop phase with the Python generator."""
        server = self.servers[name]
        generator = self.generator(server, route, self.args.max_connections)
        with Meters(server) as meters:
            result = generator.closed_loop(self.args.max_duration, self.args.max_requests)
        generator.close()
        elapsed = max(result.finished - result.started, 1e-9)
        return {
            "phase": "max",
            "generator": "python",
            "server": name,
            "route": route,
            "connections": self.args.max_connections,
            "duration_s": round(elapsed, 3),
            "requests": result.sent,
            "throughput_rps": round(result.ok / elapsed, 1),
            "errors": result.errors,
            "error_kinds": dict(result.error_kinds),
            **latency_report(result),
            **meters.report(result.ok),
        }

    def wrk_phase(self, name: str, route: str) -> dict[str, Any]:
        """One closed-loop phase with ``wrk`` (on ``PATH``)."""
        wrk = shutil.which("wrk") or "wrk"
        server = self.servers[name]
        body = self.workdir / "review.json"
        body.write_bytes(self.bodies[route][0])
        script = self.workdir / "post.lua"
        script.write_text(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            f'local f = io.open("{body}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
        )
        argv = [
            wrk,
            "-t1",
            f"-c{self.args.max_connections}",
            f"-d{max(1, round(self.args.max_duration))}s",
        ]
        argv += ["-s", str(script), f"https://127.0.0.1:{server.port}/{route}"]
        with Meters(server) as meters:
            out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        rps = re.search(r"Requests/sec:\s*([\d.]+)", out)
        total = re.search(r"(\d+) requests in", out)
        bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
        socket_errors = re.search(r"Socket errors: (.*)", out)
        count = int(total.group(1)) if total else 0
        report = meters.report(count, generator_cpu=meters.children_cpu)
        return {
            "phase": "max",
            "generator": "wrk",
            "server": name,
            "route": route,
            "connections": self.args.max_connections,
            "duration_s": self.args.max_duration,
            "requests": count,
            "throughput_rps": float(rps.group(1)) if rps else None,
            "errors": (int(bad.group(1)) if bad else 0) + (1 if socket_errors else 0),
            "error_kinds": {"wrk": socket_errors.group(1)} if socket_errors else {},
            **report,
        }

    def progress(self, row: dict[str, Any]) -> None:
        """Print a phase's headline figures to stderr with ``-v``."""
        if self.args.verbose:
            keys = ["phase", "server", "route", "target_rps", "achieved_rps", "throughput_rps"]
            keys += ["errors", "client_p99_ms", "server_p50_ms", "server_p99_ms"]
            text = " ".join(f"{k}={row[k]}" for k in keys if k in row)
            print(f"  {text}", file=sys.stderr, flush=True)

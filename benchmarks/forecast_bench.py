"""What the admission forecast adds to admission latency, with and without it, in the same run.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing.

Setup: the local control plane with ``--nodes`` kwok nodes of 8 GPUs in racks (the pool
benchmark's pool), a PlacementPolicy listing the rack topology, two teams (TeamQuotas of half the
pool each, one cohort) and the real ``torchgate controller`` with its pool service. The pool is
filled with ``--running`` one-node gangs and ``--waiting`` gangs that cannot start, so every
forecast decides a full queue (the admission cycle over ``--waiting`` gangs plus the candidate).
Two ``torchgate webhook`` processes watch the cluster with the same certificate: ``plain`` (no
forecasts) and ``forecasting`` (``--controller-url``: asks the pool service on every CREATE).

Phases, each alternating the two servers request by request (or block by block) so both see the
same machine at the same moments:

1. ``direct``: ``--requests`` validating reviews of a 2-pod, 16-GPU job CREATE (as the apiserver
   sends them: defaulted object, ``dryRun``), posted one at a time over kept-alive TLS
   connections, alternating plain / forecasting, ``--rate`` per second per server (job creates
   arrive far slower than the pool service's share of the controller allows). Client-side
   latency per server, and the server-side time (``X-Torchgate-Server-Time``).
2. ``apiserver``: ``--rounds`` blocks of ``--block`` server-side dry runs of the same job's
   creation through the apiserver (``POST ...?dryRun=All``: both webhook routes), the webhook
   configurations pointing at plain, then at forecasting, alternately (a probe waits until the
   apiserver calls the server just registered).

The added latency is the forecasting figure minus the plain one, per percentile. The webhooks'
forecast counters (answered / timeout / error) and the host's load average go into the JSON.

    flock /tmp/torchgate-bench.lock .venv/bin/python benchmarks/forecast_bench.py --out f.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from poolbench.harness import prepare
from poolbench.manifests import JOBS_API, pytorchjob, team_quota

from torchgate.kube.client import KubeClient
from torchgate.pytorchjob.policy import parse_policy
from torchgate.webhook.review import evaluate
from torchgate_dev import devcluster
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.ports import free_port

REPO = Path(__file__).resolve().parents[1]
RACK = "topology.torchgate.io/rack"
POLICY = {
    "apiVersion": "torchgate.io/v1alpha1",
    "kind": "PlacementPolicy",
    "metadata": {"name": "bench"},
    "spec": {"topology": {"levels": [RACK, "kubernetes.io/hostname"]}},
}


def percentiles(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {
        "n": len(ordered),
        "p50_ms": round(at(0.50), 3),
        "p90_ms": round(at(0.90), 3),
        "p99_ms": round(at(0.99), 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


def added(plain: dict[str, float], forecasting: dict[str, float]) -> dict[str, float]:
    return {key: round(forecasting[key] - plain[key], 3) for key in ("p50_ms", "p90_ms", "p99_ms")}


# ------------------------------------------------------------------ processes


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def webhook(plane: ControlPlane, tls: Path, port: int, pool_port: int | None, log: Path) -> Any:
    argv = [
        sys.executable, "-m", "torchgate", "webhook", "--bind", "127.0.0.1", "--port", str(port),
        "--tls-cert-file", str(tls / "tls.crt"), "--tls-private-key-file", str(tls / "tls.key"),
        "--kubeconfig", str(plane.kubeconfig),
    ]  # fmt: skip
    if pool_port is not None:
        argv += [
            "--controller-url", f"https://127.0.0.1:{pool_port}",
            "--controller-ca-file", str(tls / "ca.crt"),
        ]  # fmt: skip
    env = {**os.environ, "TORCHGATE_SERVER_TIMING": "1"}
    env.pop("KUBECONFIG", None)
    return start(argv, log, env)


async def wait_ready(url: str, context: ssl.SSLContext, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url, ssl=context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready")
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------ the workload


async def fill(api: KubeClient, running: int, waiting: int) -> None:
    """``running`` one-node gangs that run for an hour, ``waiting`` gangs that cannot start."""
    for index in range(running):
        namespace = "team-a" if index % 2 else "team-b"
        job = pytorchjob(f"run-{index}", namespace, 1, 3600)
        await api.request("POST", JOBS_API.format(namespace=namespace), body=job)
    for index in range(waiting):
        namespace = "team-a" if index % 2 else "team-b"
        job = pytorchjob(f"wait-{index}", namespace, 4, 3600)
        await api.request("POST", JOBS_API.format(namespace=namespace), body=job)


def candidate(name: str) -> dict[str, Any]:
    raw = pytorchjob(name, "team-a", 2, 60)
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"] = [
        "--backend",
        "nccl",
    ]
    return raw


def review(job: dict[str, Any], index: int) -> bytes:
    policy, _ = parse_policy(POLICY)
    assert policy is not None
    defaulted = evaluate(job, policy).object
    defaulted["metadata"] |= {"uid": f"job-{index}", "creationTimestamp": "2026-01-01T00:00:00Z"}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"review-{index}",
            "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
            "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": defaulted,
            "oldObject": None,
            "dryRun": True,
        },
    }
    return json.dumps(body).encode()


# ------------------------------------------------------------------ phase 1: the webhooks


class Pace:
    """Requests at ``rate`` per second; after a stall the schedule restarts, never a burst."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.due = time.perf_counter()

    async def wait(self) -> None:
        now = time.perf_counter()
        if self.due > now:
            await asyncio.sleep(self.due - now)
            self.due += self.interval
        else:
            self.due = now + self.interval


async def direct(
    ports: dict[str, int], context: ssl.SSLContext, requests: int, warmup: int, rate: float
) -> dict[str, Any]:
    bodies = [review(candidate(f"cand-{i}"), i) for i in range(64)]
    client: dict[str, list[float]] = {name: [] for name in ports}
    server: dict[str, list[float]] = {name: [] for name in ports}
    warned: dict[str, int] = {name: 0 for name in ports}
    sessions = {
        name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=1))
        for name in ports
    }
    answered: list[float] = []  # forecasting requests that got their forecast
    pace = Pace(rate)
    try:
        for index in range(warmup + requests):
            await pace.wait()
            for name in ("plain", "forecasting") if index % 2 else ("forecasting", "plain"):
                started = time.perf_counter()
                async with sessions[name].post(
                    f"https://127.0.0.1:{ports[name]}/validate",
                    data=bodies[index % len(bodies)],
                    headers={"Content-Type": "application/json"},
                ) as response:
                    answer = await response.json()
                    elapsed = time.perf_counter() - started
                    timing = response.headers.get("X-Torchgate-Server-Time", "0").split()[0]
                if index < warmup:
                    continue
                client[name].append(elapsed)
                server[name].append(float(timing))
                warnings = answer["response"].get("warnings", [])
                forecast = any("torchgate: will" in w for w in warnings)
                warned[name] += forecast
                if forecast:
                    answered.append(elapsed)
    finally:
        for session in sessions.values():
            await session.close()
    out: dict[str, Any] = {
        name: {
            "client": percentiles(client[name]),
            "server": percentiles(server[name]),
            "forecast_warnings": warned[name],
        }
        for name in ports
    }
    out["forecasting"]["client_with_forecast"] = percentiles(answered) if answered else {}
    out["added_client"] = added(out["plain"]["client"], out["forecasting"]["client"])
    out["added_server"] = added(out["plain"]["server"], out["forecasting"]["server"])
    if answered:
        out["added_client_with_forecast"] = added(
            out["plain"]["client"], out["forecasting"]["client_with_forecast"]
        )
    return out


# ------------------------------------------------------------------ phase 2: the apiserver


def register(plane: ControlPlane, port: int, ca: bytes) -> None:
    configurations = devcluster.webhook_configurations(f"https://127.0.0.1:{port}", ca_bundle=ca)
    listed = {"apiVersion": "v1", "kind": "List", "items": configurations}
    plane.kubectl("apply", "-f", "-", input=json.dumps(listed))


async def dry_run(api: KubeClient, index: int) -> tuple[float, list[str]]:
    warnings: list[str] = []
    started = time.perf_counter()
    await api.request(
        "POST",
        JOBS_API.format(namespace="team-a"),
        query={"dryRun": "All"},
        body=candidate(f"dry-{index}"),
        warnings=warnings,
    )
    return time.perf_counter() - started, warnings


async def through_apiserver(
    plane: ControlPlane,
    api: KubeClient,
    ports: dict[str, int],
    ca: bytes,
    rounds: int,
    block: int,
    rate: float,
) -> dict[str, Any]:
    latencies: dict[str, list[float]] = {name: [] for name in ports}
    index = 0
    for _ in range(rounds):
        for name in ("plain", "forecasting"):
            register(plane, ports[name], ca)
            wanted = name == "forecasting"
            deadline = time.monotonic() + 30
            while True:  # until the apiserver calls the server just registered
                _, warnings = await dry_run(api, index)
                index += 1
                if any("torchgate: will" in w for w in warnings) == wanted:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the apiserver does not call {name}")
                await asyncio.sleep(0.2)
            pace = Pace(rate)
            for _ in range(block):
                await pace.wait()
                seconds, _ = await dry_run(api, index)
                index += 1
                latencies[name].append(seconds)
    out: dict[str, Any] = {name: percentiles(values) for name, values in latencies.items()}
    out["added"] = added(out["plain"], out["forecasting"])
    return out


async def counters(port: int, context: ssl.SSLContext) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://127.0.0.1:{port}/metrics", ssl=context) as response,
    ):
        text = await response.text()
    found = {}
    for line in text.splitlines():
        if line.startswith("torchgate_webhook_forecasts_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            found[outcome] = float(line.rsplit(" ", 1)[1])
    return found


# ------------------------------------------------------------------ main


async def measure(args: argparse.Namespace, plane: ControlPlane, work: Path) -> dict[str, Any]:
    tls = work / "tls"
    subprocess.run(
        [sys.executable, "-m", "torchgate", "certs", "--out-dir", str(tls), "--ip", "127.0.0.1"],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    prepare(plane, nodes=args.nodes)
    half = args.nodes * 8 // 2
    for obj in (POLICY, team_quota("team-a", "team-a", half), team_quota("team-b", "team-b", half)):
        plane.kubectl("apply", "-f", "-", input=json.dumps(obj))
    pool_port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    argv = [
        sys.executable, "-m", "torchgate", "controller", "--kubeconfig", str(plane.kubeconfig),
        "--manage-unowned", "--no-leader-elect", "--metrics-bind-address", "127.0.0.1",
        "--metrics-port", str(metrics_port), "--pool-service-port", str(pool_port),
        "--pool-service-bind-address", "127.0.0.1", "--tls-cert-file", str(tls / "tls.crt"),
        "--tls-private-key-file", str(tls / "tls.key"),
    ]  # fmt: skip
    controller = start(argv, work / "controller.log", env)
    ports = {"plain": free_port(), "forecasting": free_port()}
    servers = {
        "plain": webhook(plane, tls, ports["plain"], None, work / "plain.log"),
        "forecasting": webhook(plane, tls, ports["forecasting"], pool_port, work / "fc.log"),
    }
    api = KubeClient.for_server(
        plane.server, token=plane.token, tls=ssl.create_default_context(cafile=str(plane.ca_file))
    )
    try:
        for name, port in ports.items():
            await wait_ready(f"https://127.0.0.1:{port}/readyz", context, name)
        await wait_ready(f"https://127.0.0.1:{pool_port}/healthz", context, "pool service")
        await fill(api, args.running, args.waiting)
        await asyncio.sleep(args.settle)
        load = os.getloadavg()
        results: dict[str, Any] = {
            "setup": {
                "nodes": args.nodes,
                "gpus": args.nodes * 8,
                "running_gangs": args.running,
                "waiting_gangs": args.waiting,
                "loadavg_before": load,
            }
        }
        results["direct"] = await direct(ports, context, args.requests, args.warmup, args.rate)
        if args.rounds:
            ca = (tls / "ca.crt").read_bytes()
            results["apiserver"] = await through_apiserver(
                plane, api, ports, ca, args.rounds, args.block, args.rate
            )
        results["forecast_outcomes"] = await counters(ports["forecasting"], context)
        results["setup"]["loadavg_after"] = os.getloadavg()
        return results
    finally:
        await api.close()
        for process in [*servers.values(), controller]:
            terminate(process, grace=10)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--running", type=int, default=48)
    parser.add_argument("--waiting", type=int, default=100)
    parser.add_argument("--requests", type=int, default=1000, help="per server, direct phase")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="apiserver phase (0: skip)")
    parser.add_argument("--block", type=int, default=150, help="dry runs per server per round")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after filling")
    parser.add_argument(
        "--rate",
        type=float,
        default=10.0,
        help="requests per second per server (the pool service answers within a CPU share)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workdir", type=Path, help="keep the logs here (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="forecast-bench-") as scratch:
        work = args.workdir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        with ControlPlane(workdir=work / "plane") as plane:
            results = asyncio.run(measure(args, plane, work))
    text = json.dumps(results, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

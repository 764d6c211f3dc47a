"""What each kind of write the controller makes costs the apiserver, in CPU time per request.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing.

Why: on the controller benchmark's 2-core rig the apiserver is the bottleneck, so the controller's
pod-creation rate relative to a plain script depends on what else it asks of the apiserver per job
(a Service, status patches, Events). This measures those requests one kind at a time, on an idle
local control plane (no nodes: nothing schedules), as the apiserver's own CPU seconds
(``/proc/PID/stat``) per request: ``--count`` requests of each kind, 32 at a time, bodies built
by torchgate's own code (``build_pod``, ``build_service``, a training-operator-shaped status),
sent through ``torchgate.kube.client.KubeClient``.

Run: ``.venv/bin/python benchmarks/apiserver_costs.py [--count 400] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The script's folder is first on sys.path when it runs, so its sibling imports as a module.
from controller_bench import REPO, bounded, connect, cpu_seconds, gang

from torchgate.controller.job.pods import build_pod, build_service
from torchgate.controller.job.status import format_time, replica_statuses, set_condition
from torchgate.kube.client import MERGE_PATCH, KubeClient
from torchgate.kube.errors import ApiError
from torchgate.pytorchjob.spec import JobSpec, parse_job
from torchgate_dev.controlplane.binaries import ensure_binaries
from torchgate_dev.controlplane.cluster import ControlPlane

NAMESPACE = "costs"
CONCURRENCY = 32


async def failure(call: Awaitable[Any]) -> int:
    """0 if the call succeeded, else its HTTP status (every call runs; failures counted after).

    An unreachable apiserver (status 0) is not a request that failed: it is raised.
    """
    try:
        await call
    except ApiError as exc:
        if not exc.status:
            raise
        return exc.status
    return 0


async def measure(
    apiserver_pid: int, label: str, calls: Sequence[Awaitable[Any]]
) -> dict[str, Any]:
    await asyncio.sleep(1.5)  # let the previous kind's watch fan-out settle
    cpu_before, started = cpu_seconds(apiserver_pid), time.monotonic()
    results = await bounded([failure(c) for c in calls], CONCURRENCY)
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(apiserver_pid) - cpu_before
    failed = [status for status in results if status]
    if failed:
        raise RuntimeError(f"{label}: {len(failed)} requests failed, e.g. HTTP {failed[0]}")
    row = {
        "request": label,
        "count": len(calls),
        "per_second": len(calls) / elapsed,
        "apiserver_cpu_ms_each": 1000 * cpu / len(calls),
    }
    print(
        f"{label:34s} {row['per_second']:6.0f}/s"
        f"  apiserver CPU {row['apiserver_cpu_ms_each']:5.2f} ms each",
        file=sys.stderr,
    )
    return row


def status_body(job: JobSpec, *, active_workers: int) -> dict[str, Any]:
    """A status as torchgate writes it: Created, replica counts, startTime."""
    now = datetime(2026, 11, 24, tzinfo=UTC)
    counts = replica_statuses(job, [])
    counts["Worker"]["active"] = active_workers
    return {
        "status": {
            "conditions": set_condition([], "Created", "True", "PyTorchJobCreated", "created", now),
            "replicaStatuses": counts,
            "startTime": format_time(now),
        }
    }


def event_about(job_name: str) -> dict[str, Any]:
    """An Event on a job, as torchgate's recorder writes it."""
    return {
        "metadata": {"name": f"{job_name}.event", "namespace": NAMESPACE},
        "involvedObject": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": job_name,
            "namespace": NAMESPACE,
        },
        "reason": "PyTorchJobCreated",
        "message": f"PyTorchJob {job_name} is created.",
        "type": "Normal",
        "source": {"component": "torchgate-controller"},
        "firstTimestamp": "2026-11-24T00:00:00Z",
        "lastTimestamp": "2026-11-24T00:00:00Z",
        "count": 1,
    }


async def run(plane: ControlPlane, count: int) -> list[dict[str, Any]]:
    api: KubeClient = connect(plane)
    pid = plane.pids()["kube-apiserver"]
    jobs_path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
    core_path = f"/api/v1/namespaces/{NAMESPACE}"
    rows = []

    async def post_all(label: str, path: str, bodies: list[dict[str, Any]]) -> None:
        calls = [api.request("POST", path, body=b) for b in bodies]
        rows.append(await measure(pid, label, calls))

    try:
        names = [f"job-{i:04d}" for i in range(count)]
        manifests = [gang(n, NAMESPACE, 5) for n in names]
        await post_all("POST pytorchjobs (1 Master + 7 Workers)", jobs_path, manifests)
        jobs: list[tuple[dict[str, Any], JobSpec]] = []
        for name in names:
            raw = await api.request("GET", f"{jobs_path}/{name}")
            spec, errors = parse_job(raw)
            if spec is None:
                raise RuntimeError(f"{name}: {errors}")
            jobs.append((raw, spec))
        gpu = "nvidia.com/gpu"
        pods = [
            build_pod(raw, spec, "Worker", 0, node=None, attempt=1, gpus=gpu) for raw, spec in jobs
        ]
        await post_all("POST pods", f"{core_path}/pods", pods)
        for label, active in (("first", 0), ("second", 3)):  # the second changes the counts
            patches = [
                api.request(
                    "PATCH",
                    f"{jobs_path}/{spec.name}/status",
                    body=status_body(spec, active_workers=active),
                    content_type=MERGE_PATCH,
                )
                for _, spec in jobs
            ]
            rows.append(await measure(pid, f"PATCH pytorchjobs/status ({label})", patches))
        await post_all("POST events", f"{core_path}/events", [event_about(n) for n in names])
        services = [build_service(raw, spec, "Master", 0) for raw, spec in jobs]
        await post_all("POST services (headless, master)", f"{core_path}/services", services)
    finally:
        await api.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400, help="requests of each kind")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "apiserver.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tg-costs-") as tmp:
        plane = ControlPlane(binaries=ensure_binaries(), workdir=Path(tmp) / "plane")
        with plane:
            for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
                plane.kubectl("apply", "-f", str(path))
            plane.kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/pytorchjobs.kubeflow.org",
            )
            plane.kubectl("create", "namespace", NAMESPACE)
            while (
                plane.kubectl("get", "sa", "default", "-n", NAMESPACE, check=False).returncode != 0
            ):
                time.sleep(0.2)
            rows = asyncio.run(run(plane, args.count))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"count": args.count, "rows": rows}, indent=2))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

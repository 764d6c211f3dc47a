"""What each kind of request the controller makes costs the apiserver, in CPU time per request.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing.

Why: on the controller benchmark's 2-core rig the apiserver is the bottleneck, so the controller's
pod-creation rate relative to a plain script depends on what else it asks of the apiserver per job
(a Service, status patches, Events, its watches, the admission webhook's calls). This measures
those one kind at a time, on an idle local control plane (no nodes, and the pods gated: nothing
schedules), as the apiserver's own CPU seconds (``/proc/PID/stat``) per request, and
kube-controller-manager's (owner references are its garbage collector's work): ``--count``
requests of each kind, 32 at a time, bodies built by torchgate's own code (``build_pod``,
``build_service``, a training-operator-shaped status), sent through
``torchgate.kube.client.KubeClient``.

Priced apart, each against the row it differs from by one thing:
- pods with and without ``ownerReferences`` (the controller's pods name their job; the plain
  script's name nothing);
- pods created while ``--watchers`` more JSON watches of every pod are open, as the controller's
  informer is: the difference per watcher is what one more watcher costs per pod event;
- PyTorchJob creates with the real ``torchgate webhook`` registered for them (mutating and
  validating, as ``torchgate_dev.devcluster`` registers it), against the same creates without.

Run: ``.venv/bin/python benchmarks/apiserver_costs.py [--count 400] [--out results.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The script's folder is first on sys.path when it runs, so its sibling imports as a module.
from controller_bench import REPO, bounded, connect, gang
from controllerbench.sampling import processes_cpu_seconds
from scalebench.webhookprobe import certificates, start_webhook, wait_ready

from torchgate.controller.job.pods import build_pod, build_service
from torchgate.controller.job.status import replica_statuses, set_condition
from torchgate.kube.client import MERGE_PATCH, KubeClient
from torchgate.kube.errors import ApiError
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.spec import JobSpec, parse_job
from torchgate_dev.controlplane.binaries import ensure_binaries
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.devcluster import webhook_configurations
from torchgate_dev.ports import free_port

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
    pids: dict[str, int], label: str, calls: Sequence[Awaitable[Any]]
) -> dict[str, Any]:
    """Send ``calls``; the apiserver's (and every other ``pids``' process's) CPU ms per call.

    The window ends 1.5 s after the last answer, so the watch fan-out and the garbage collector's
    work of the last calls are inside it.
    """
    await asyncio.sleep(1.5)  # let the previous kind's watch fan-out settle
    before, started = processes_cpu_seconds(pids), time.monotonic()
    results = await bounded([failure(c) for c in calls], CONCURRENCY)
    elapsed = time.monotonic() - started
    await asyncio.sleep(1.5)
    after = processes_cpu_seconds(pids)
    failed = [status for status in results if status]
    if failed:
        raise RuntimeError(f"{label}: {len(failed)} requests failed, e.g. HTTP {failed[0]}")
    row: dict[str, Any] = {
        "request": label,
        "count": len(calls),
        "per_second": len(calls) / elapsed,
        "apiserver_cpu_ms_each": 1000
        * (after["kube-apiserver"] - before["kube-apiserver"])
        / len(calls),
        "cpu_ms_each_by_process": {
            name: round(1000 * (after[name] - before[name]) / len(calls), 3)
            for name in after
            if name in before
        },
    }
    others = ", ".join(
        f"{name} {ms:.2f}"
        for name, ms in row["cpu_ms_each_by_process"].items()
        if name != "kube-apiserver"
    )
    print(
        f"{label:48s} {row['per_second']:6.0f}/s"
        f"  apiserver CPU {row['apiserver_cpu_ms_each']:5.2f} ms each ({others})",
        file=sys.stderr,
    )
    return row


async def drain(api: KubeClient, path: str) -> None:
    """Watch ``path`` from now on and discard every event (a watcher like the controller's)."""
    listing = await api.request("GET", path, query={"limit": "1"})
    version = str(listing["metadata"]["resourceVersion"])
    while True:
        query = {"resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        async for event in api.watch(path, query):
            metadata = (event.get("object") or {}).get("metadata") or {}
            version = str(metadata.get("resourceVersion") or version)


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


async def run(plane: ControlPlane, count: int, watchers: int, work: Path) -> list[dict[str, Any]]:
    api: KubeClient = connect(plane)
    watching: KubeClient = connect(plane)
    pids = plane.pids()
    jobs_path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
    core_path = f"/api/v1/namespaces/{NAMESPACE}"
    rows = []

    async def post_all(
        label: str, path: str, bodies: list[dict[str, Any]], processes: dict[str, int] = pids
    ) -> None:
        calls = [api.request("POST", path, body=b) for b in bodies]
        rows.append(await measure(processes, label, calls))

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

        def pods(index: int, *, owned: bool) -> list[dict[str, Any]]:
            built = []
            for raw, spec in jobs:
                pod = build_pod(raw, spec, "Worker", index, node=None, attempt=1, gpus=gpu)
                # No node exists: kube-scheduler would retry every pod and patch its status
                # inside the later rows' windows. A gated pod is left alone.
                pod["spec"]["schedulingGates"] = [{"name": "costs.torchgate.io/hold"}]
                if not owned:
                    pod["metadata"].pop("ownerReferences", None)
                built.append(pod)
            return built

        await post_all("POST pods", f"{core_path}/pods", pods(0, owned=True))
        await post_all(
            "POST pods without ownerReferences", f"{core_path}/pods", pods(1, owned=False)
        )
        tasks = [asyncio.create_task(drain(watching, "/api/v1/pods")) for _ in range(watchers)]
        try:
            await post_all(
                f"POST pods, {watchers} more pod watchers", f"{core_path}/pods", pods(2, owned=True)
            )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
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
            rows.append(await measure(pids, f"PATCH pytorchjobs/status ({label})", patches))
        await post_all("POST events", f"{core_path}/events", [event_about(n) for n in names])
        services = [build_service(raw, spec, "Master", 0) for raw, spec in jobs]
        await post_all("POST services (headless, master)", f"{core_path}/services", services)
        webhook = await register_webhook(plane, api, work)
        try:
            manifests = [gang(f"hooked-{i:04d}", NAMESPACE, 5) for i in range(count)]
            await post_all(
                "POST pytorchjobs through the webhook",
                jobs_path,
                manifests,
                processes={**pids, "torchgate webhook": webhook.pid},
            )
        finally:
            terminate(webhook, grace=10)
    finally:
        await api.close()
        await watching.close()
    return rows


async def register_webhook(
    plane: ControlPlane, api: KubeClient, work: Path
) -> subprocess.Popen[bytes]:
    """The real ``torchgate webhook`` on loopback, registered for PyTorchJobs; its process."""
    tls = work / "tls"
    context = certificates(tls)
    port = free_port()
    webhook = start_webhook(plane, tls, port, work / "webhook.log")
    await wait_ready(f"https://127.0.0.1:{port}/readyz", context)
    configurations = webhook_configurations(
        f"https://127.0.0.1:{port}", ca_bundle=(tls / "ca.crt").read_bytes()
    )
    for configuration in configurations:
        plural = configuration["kind"].lower() + "s"
        await api.request(
            "POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body=configuration
        )
    await asyncio.sleep(2)  # the apiserver picks up new webhook configurations within a second
    return webhook


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400, help="requests of each kind")
    parser.add_argument(
        "--watchers", type=int, default=8, help="more watches of every pod, to price one apart"
    )
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
            rows = asyncio.run(run(plane, args.count, args.watchers, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"count": args.count, "watchers": args.watchers, "rows": rows}, indent=2)
    )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

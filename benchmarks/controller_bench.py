"""Controller benchmark: 1,000 PyTorchJobs (1 Master + 7 Workers, 1 GPU) on 200 fake 8-GPU nodes.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing.

It starts its own local control plane (the cached binaries), then in one run measures:

1. **Baseline**: a plain script creates the same 1,600 pods (the first wave's worth: 200 gangs of 8,
   each gang pinned to one node as the controller pins them) straight through the API with the
   same write concurrency the controller uses, and the rate is
   taken between the first and last pod seen by a watch. The pods are then deleted. Then the same
   again while the same 1,000 PyTorchJobs are submitted (nothing acts on them): in the controller
   run the users' submissions load the apiserver during the first wave too.
2. **The controller** (the real ``torchgate controller`` process): all 1,000 jobs are submitted
   at once; each Master finishes by itself a few seconds after it starts (kwok's
   ``torchgate.io/fake-run-seconds`` stage; durations are spread over ``--spread`` seconds, as
   real jobs do not all end in the same second), so jobs succeed, torchgate deletes their Workers
   and the next waiting gangs are admitted into the freed GPUs, five waves in all. A watch records
   when every pod appears, when each Master succeeds and when its job's other pods are gone.

Reported: jobs admitted per second in the first wave (and pods/s against the baseline's),
p50/p99 of job create -> all its pods created (first wave, and all jobs including queueing),
p50/p99 of Master success -> all other pods of the job deleted (GPUs free), the controller's
peak RSS, apiserver writes by verb and resource, and the CPU of every process of the rig.
Run: ``.venv/bin/python benchmarks/controller_bench.py [--jobs 1000 --nodes 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from torchgate.controller.pods import build_pod
from torchgate.controlplane import kwok
from torchgate.controlplane.binaries import ensure_binaries
from torchgate.controlplane.cluster import ControlPlane
from torchgate.controlplane.processes import terminate
from torchgate.dev import free_port
from torchgate.pytorchjob.spec import parse_job

REPO = Path(__file__).resolve().parents[1]

POOL = "bench"
# The users' job submissions, the same in every phase; the pods' concurrency is --write-concurrency.
SUBMIT_CONCURRENCY = 32


class Api:
    """A minimal async client with the admin token (the benchmark's own load)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.server = plane.server
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=0),  # bounded() limits each phase
            headers={"Authorization": f"Bearer {plane.token}"},
        )

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, self.server + path, json=body) as response:
            return response.status, await response.json(content_type=None)

    async def close(self) -> None:
        await self.session.close()


class PodWatch:
    """Times (monotonic) of pod events in one namespace, from a watch."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.added: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.deleting: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.ready = asyncio.Event()

    async def run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods?watch=true&allowWatchBookmarks=true"
        version = ""
        while True:
            url = self.api.server + path + (f"&resourceVersion={version}" if version else "")
            async with self.api.session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as r:
                self.ready.set()
                async for line in r.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    now = time.monotonic()
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("BOOKMARK", "ERROR"):
                        continue
                    name = obj["metadata"]["name"]
                    self.added.setdefault(name, now)
                    if obj.get("status", {}).get("phase") == "Succeeded":
                        self.succeeded.setdefault(name, now)
                    if obj["metadata"].get("deletionTimestamp"):
                        self.deleting.setdefault(name, now)
                    if event["type"] == "DELETED":
                        self.gone.setdefault(name, now)


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


async def apiserver_writes(api: Api) -> dict[str, float]:
    """The apiserver's own count of write requests so far, by verb and resource.

    Its ``/metrics`` is ~1.7 MB, scraped twice a second by a process that shares the rig's cores:
    only the ``apiserver_request_total`` lines are split, instead of parsing every family.
    """
    async with api.session.get(api.server + "/metrics") as response:
        text = await response.text()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line.rpartition(" ")
        inside = labels_text[len("apiserver_request_total{") : -1]
        labels = dict(part.split("=", 1) for part in inside.split(","))
        verb = labels.get("verb", "").strip('"')
        if verb not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "").strip('"')
        sub = labels.get("subresource", "").strip('"')
        key = f"{verb} {resource}{'/' + sub if sub else ''}"
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def writes_since(before: dict[str, float], after: dict[str, float], per: int) -> dict[str, float]:
    """Write requests between two samples, per job or per pod, largest first."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    rows = {k: round(v / per, 2) for k, v in delta.items() if v > 0}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


async def controller_creates(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """The controller's creates in flight at the apiserver and waiting for a slot, now."""
    async with session.get(url) as response:
        text = await response.text()
    states = {"in_flight": 0.0, "waiting": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "torchgate_controller_api_writes":
            for sample in family.samples:
                if sample.labels.get("write") == "create":
                    states[sample.labels["state"]] = sample.value
    return states["in_flight"], states["waiting"]


class RigSampler:
    """Samples, twice a second, the apiserver's write count, busy CPU and each process's CPU.

    With ``controller_metrics`` (the controller's ``/metrics`` URL) it also samples how many pod
    and Service creates the controller has in flight and waiting for a slot.
    """

    def __init__(
        self,
        api: Api,
        pids: dict[str, int],
        controller_metrics: str | None = None,
        slots: int = 0,
    ) -> None:
        self.api = api
        self.slots = slots
        self.pids = pids
        self.controller_metrics = controller_metrics
        self.creates: list[tuple[float, float, float]] = []  # (time, in flight, waiting)
        self.writes: list[tuple[float, dict[str, float]]] = []  # (time, writes so far by kind)
        self.cpu: list[tuple[float, float, float]] = []  # (time, busy ticks, all ticks)
        self.process_cpu: list[tuple[float, dict[str, float]]] = []  # (time, CPU s by process)

    async def run(self) -> None:
        async with aiohttp.ClientSession() as plain_http:  # no apiserver token for the controller
            while True:
                writes = await apiserver_writes(self.api)
                now = time.monotonic()
                self.writes.append((now, writes))
                self.cpu.append((now, *machine_cpu_ticks()))
                self.process_cpu.append((now, processes_cpu_seconds(self.pids)))
                if self.controller_metrics is not None:
                    try:
                        in_flight, waiting = await controller_creates(
                            plain_http, self.controller_metrics
                        )
                    except aiohttp.ClientError:
                        pass  # not serving yet, or already stopped
                    else:
                        self.creates.append((time.monotonic(), in_flight, waiting))
                await asyncio.sleep(0.5)

    def creates_in_window(self, start: float, end: float) -> dict[str, float]:
        """Mean creates in flight and waiting between two monotonic times.

        ``all_slots_busy_share``: how often every write slot was taken (1.0: always).
        """
        inside = [(f, w) for t, f, w in self.creates if start <= t <= end]
        if not inside:
            nan = float("nan")
            return {
                "in_flight_mean": nan,
                "waiting_mean": nan,
                "all_slots_busy_share": nan,
                "slots": self.slots,
            }
        return {
            "in_flight_mean": round(statistics.fmean(f for f, _ in inside), 1),
            "waiting_mean": round(statistics.fmean(w for _, w in inside), 1),
            "all_slots_busy_share": round(sum(f >= self.slots for f, _ in inside) / len(inside), 2),
            "samples": len(inside),
            "slots": self.slots,
        }

    def per_second(self, start: float, end: float) -> float:
        """Writes per second between two monotonic times (nearest samples inside the window)."""
        inside = [(t, sum(w.values())) for t, w in self.writes if start <= t <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, n0), (t1, n1) = inside[0], inside[-1]
        return (n1 - n0) / (t1 - t0)

    def writes_by_kind(self, start: float, end: float, per: int) -> dict[str, float]:
        """Writes by verb and resource between two monotonic times, per job or per pod."""
        inside = [(t, w) for t, w in self.writes if start <= t <= end]
        if len(inside) < 2:
            return {}
        return writes_since(inside[0][1], inside[-1][1], per)

    def cpu_busy(self, start: float, end: float) -> float:
        """Share of all cores busy between two monotonic times (1.0: every core saturated)."""
        inside = [(busy, total) for t, busy, total in self.cpu if start <= t <= end]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][0] - inside[0][0]) / max(inside[-1][1] - inside[0][1], 1)

    def process_cpu_share(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per second of each process between two monotonic times (1.0: a core)."""
        inside = [(t, c) for t, c in self.process_cpu if start <= t <= end]
        if len(inside) < 2:
            return {}
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return {name: round((c1[name] - c0[name]) / (t1 - t0), 2) for name in c1 if name in c0}


def processes_cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each process that is still there (one may exit mid-run)."""
    seconds = {}
    for name, pid in pids.items():
        try:
            seconds[name] = cpu_seconds(pid)
        except OSError:
            continue
    return seconds


def machine_cpu_ticks() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return float(sum(fields) - idle), float(sum(fields))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def gang(name: str, namespace: str, run_seconds: int) -> dict[str, Any]:
    """1 Master + 7 Workers, 1 GPU each; the Master ends by itself (kwok) after run_seconds."""

    def replica(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        }
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"nodeSelector": {"pool": POOL}, "containers": [container]},
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {
                "Master": replica(1, kwok.run_seconds_annotation(run_seconds)),
                "Worker": replica(7, {}),
            },
        },
    }


async def bounded(calls: Sequence[Any], limit: int) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Any) -> Any:
        async with semaphore:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


def deciles(times: Sequence[float]) -> list[float]:
    """Seconds from the first of ``times`` (sorted) to each tenth of them."""
    return [
        round(times[min(len(times) - 1, len(times) * k // 10)] - times[0], 2) for k in range(1, 11)
    ]


async def baseline(
    api: Api,
    namespace: str,
    gangs: int,
    plane_pids: dict[str, int],
    *,
    write_concurrency: int,
    jobs: int = 0,
) -> dict[str, Any]:
    """The same pods, created by a plain script (while ``jobs`` PyTorchJobs are submitted)."""
    watch = PodWatch(api, namespace)
    task = asyncio.create_task(watch.run())
    await watch.ready.wait()
    pods = []
    for index in range(gangs):
        raw = gang(f"plain-{index:04d}", namespace, 3600)
        raw["metadata"]["uid"] = f"00000000-0000-0000-0000-{index:012d}"
        spec, _ = parse_job(raw)
        assert spec is not None
        for replica in spec.replica_specs:
            for i in range(replica.replicas):
                pod = build_pod(
                    raw,
                    spec,
                    replica.replica_type,
                    i,
                    node=f"n{index:03d}",  # pinned like the controller's: a gang per node
                    attempt=1,
                    gpu_resource="nvidia.com/gpu",
                )
                pod["metadata"].pop("ownerReferences", None)
                pods.append(pod)
    writes_before = await apiserver_writes(api)
    rate_sampler = RigSampler(api, {**plane_pids, "benchmark": os.getpid()})
    sampling = asyncio.create_task(rate_sampler.run())
    started = time.monotonic()
    jobs_path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
    submissions = asyncio.create_task(
        bounded(
            [
                api.request("POST", jobs_path, gang(f"inert-{i:04d}", namespace, 5))
                for i in range(jobs)
            ],
            SUBMIT_CONCURRENCY,
        )
    )
    results = await bounded(
        [api.request("POST", f"/api/v1/namespaces/{namespace}/pods", p) for p in pods],
        write_concurrency,
    )
    elapsed = time.monotonic() - started
    submitted = await submissions
    assert all(status == 201 for status, _ in submitted), [r for r in submitted if r[0] != 201][:3]
    assert all(status == 201 for status, _ in results), [r for r in results if r[0] != 201][:3]
    while len(watch.added) < len(pods):
        await asyncio.sleep(0.05)
    times = sorted(watch.added.values())
    rate = len(times) / (times[-1] - times[0])
    await asyncio.sleep(2)  # let the scheduler and kwok finish binding and starting them
    writes = writes_since(writes_before, await apiserver_writes(api), len(pods))
    sampling.cancel()
    # The next phase must not share the apiserver with this one's deletions (kwok removes the
    # pods seconds later); and no controller runs yet: the jobs only loaded the apiserver.
    await clear_namespace(api, namespace)
    task.cancel()
    return {
        "pods": len(pods),
        "jobs_submitted_meanwhile": jobs,
        "write_concurrency": write_concurrency,
        "pods_per_second": rate,
        "deciles_seconds": deciles(times),
        "client_seconds": elapsed,
        "apiserver_writes_per_pod": writes,
        "apiserver_writes_per_second": rate_sampler.per_second(times[0], times[-1]),
        "apiserver_writes_per_pod_in_window": rate_sampler.writes_by_kind(
            times[0], times[-1], len(pods)
        ),
        "machine_cpu_busy": rate_sampler.cpu_busy(times[0], times[-1]),
        "cpu_cores_by_process": rate_sampler.process_cpu_share(times[0], times[-1]),
    }


async def run_controller_phase(
    api: Api,
    plane: ControlPlane,
    namespace: str,
    *,
    jobs: int,
    nodes: int,
    run_seconds: int,
    spread: int,
    log: Path,
    write_concurrency: int,
) -> dict[str, Any]:
    watch = PodWatch(api, namespace)
    watch_task = asyncio.create_task(watch.run())
    await watch.ready.wait()
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    metrics_port = free_port()
    controller = subprocess.Popen(
        [sys.executable, "-m", "torchgate", "controller", "--kubeconfig", str(plane.kubeconfig),
         "--manage-unowned", "--no-leader-elect", "--metrics-bind-address", "127.0.0.1",
         "--metrics-port", str(metrics_port), "--log-level", "WARNING",
         "--write-concurrency", str(write_concurrency),
         # The controller's own reaction time: the default finish grace (5 s, for ranks that
         # are finishing on their own) would add a fixed wait to every release measured here.
         "--finish-grace-seconds", "0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO,
    )  # fmt: skip
    try:
        peak_rss = 0
        stop_sampling = asyncio.Event()

        async def sample_rss() -> None:
            nonlocal peak_rss
            while not stop_sampling.is_set():
                try:
                    for line in Path(f"/proc/{controller.pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak_rss = max(peak_rss, int(line.split()[1]) * 1024)
                except OSError:
                    pass
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample_rss())
        await asyncio.sleep(3)  # let it list and watch
        writes_before = await apiserver_writes(api)
        rate_sampler = RigSampler(
            api,
            {**plane.pids(), "benchmark": os.getpid(), "torchgate controller": controller.pid},
            controller_metrics=f"http://127.0.0.1:{metrics_port}/metrics",
            slots=write_concurrency,
        )
        sampling = asyncio.create_task(rate_sampler.run())
        cpu_before = cpu_seconds(controller.pid)
        names = [f"job-{i:04d}" for i in range(jobs)]
        submitted: dict[str, float] = {}

        async def submit(index: int, name: str) -> None:
            manifest = gang(name, namespace, run_seconds + index % spread)
            path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
            status, body = await api.request("POST", path, manifest)
            assert status == 201, body
            submitted[name] = time.monotonic()

        started = time.monotonic()
        await bounded([submit(i, n) for i, n in enumerate(names)], SUBMIT_CONCURRENCY)
        submit_seconds = time.monotonic() - started
        expected = {n: [f"{n}-master-0"] + [f"{n}-worker-{i}" for i in range(7)] for n in names}
        deadline = time.monotonic() + 1800
        while True:
            done = [
                n for n in names
                if all(p in watch.gone or p == f"{n}-master-0" for p in expected[n][1:])
                and f"{n}-master-0" in watch.succeeded
            ]  # fmt: skip
            if len(done) == len(names) or time.monotonic() > deadline:
                break
            print(
                f"\r  {len(done)}/{len(names)} jobs done, {len(watch.added)} pods seen",
                end="",
                file=sys.stderr,
            )
            await asyncio.sleep(1)
        print(file=sys.stderr)
        controller_cpu = cpu_seconds(controller.pid) - cpu_before
        phase_seconds = time.monotonic() - started
        writes = writes_since(writes_before, await apiserver_writes(api), jobs)
        sampling.cancel()
        stop_sampling.set()
        await sampler
    finally:
        terminate(controller, grace=30)
    watch_task.cancel()

    created_all = {
        n: max(watch.added[p] for p in expected[n])
        for n in names
        if all(p in watch.added for p in expected[n])
    }
    latency = {n: created_all[n] - submitted[n] for n in created_all}
    capacity = nodes * 8 // 8
    first_wave = sorted(created_all, key=created_all.get)[:capacity]  # type: ignore[arg-type]
    wave_pods = sorted(watch.added[p] for n in first_wave for p in expected[n])
    release, release_deleting = [], []
    for n in names:
        master = f"{n}-master-0"
        if master not in watch.succeeded:
            continue
        workers = expected[n][1:]
        if all(w in watch.gone for w in workers):
            release.append(max(watch.gone[w] for w in workers) - watch.succeeded[master])
        if all(w in watch.deleting or w in watch.gone for w in workers):
            release_deleting.append(
                max(watch.deleting.get(w, watch.gone.get(w, 0.0)) for w in workers)
                - watch.succeeded[master]
            )
    first_rate = len(wave_pods) / (wave_pods[-1] - wave_pods[0])
    return {
        "jobs": jobs,
        "jobs_done": len(done),
        "submit_seconds": submit_seconds,
        "first_wave_jobs": len(first_wave),
        "first_wave_pods_per_second": first_rate,
        "first_wave_jobs_per_second": first_rate / 8,
        # When each tenth of the first wave's pods had appeared, from its first pod: a slow start
        # or a long tail shows here, a steady rate gives even steps.
        "first_wave_deciles_seconds": deciles(wave_pods),
        "create_to_all_pods_first_wave_p50": percentile([latency[n] for n in first_wave], 0.5),
        "create_to_all_pods_first_wave_p99": percentile([latency[n] for n in first_wave], 0.99),
        "create_to_all_pods_all_jobs_p50": percentile(list(latency.values()), 0.5),
        "create_to_all_pods_all_jobs_p99": percentile(list(latency.values()), 0.99),
        "overall_jobs_per_second": len(done)
        / (max(watch.gone.values(), default=started) - started),
        "release_gone_p50": percentile(release, 0.5),
        "release_gone_p99": percentile(release, 0.99),
        "release_requested_p50": percentile(release_deleting, 0.5),
        "release_requested_p99": percentile(release_deleting, 0.99),
        "controller_peak_rss_mib": peak_rss / 2**20,
        "controller_cpu_seconds": controller_cpu,
        "controller_cpu_share_of_one_core": controller_cpu / phase_seconds,
        "apiserver_writes_per_job": writes,
        "apiserver_writes_per_second_first_wave": rate_sampler.per_second(
            wave_pods[0], wave_pods[-1]
        ),
        "apiserver_writes_per_pod_first_wave": rate_sampler.writes_by_kind(
            wave_pods[0], wave_pods[-1], len(wave_pods)
        ),
        "machine_cpu_busy_first_wave": rate_sampler.cpu_busy(wave_pods[0], wave_pods[-1]),
        "cpu_cores_by_process_first_wave": rate_sampler.process_cpu_share(
            wave_pods[0], wave_pods[-1]
        ),
        # Whether the controller or the apiserver was the limit: with every slot busy and
        # creates waiting, the controller had more to send than the apiserver took.
        "controller_creates_first_wave": rate_sampler.creates_in_window(
            wave_pods[0], wave_pods[-1]
        ),
    }


async def clear_namespace(api: Api, namespace: str) -> None:
    """Delete the round's jobs and pods and wait until they are gone: rounds start clean."""
    jobs_path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    await api.request("DELETE", jobs_path)
    await api.request("DELETE", pods_path + "?gracePeriodSeconds=0")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs_left = (await api.request("GET", jobs_path + "?limit=1"))[1]["items"]
        pods_left = (await api.request("GET", pods_path + "?limit=1"))[1]["items"]
        if not jobs_left and not pods_left:
            return
        await api.request("DELETE", pods_path + "?gracePeriodSeconds=0")
        await asyncio.sleep(1)
    raise RuntimeError(f"namespace {namespace} still has jobs or pods after 300 s")


async def one_round(
    api: Api, plane: ControlPlane, args: argparse.Namespace, workdir: Path, number: int
) -> dict[str, Any]:
    """Plain script, plain script while the jobs arrive, then the controller: one round."""
    print(f"round {number}: plain pod creation", file=sys.stderr)
    base = await baseline(
        api, "baseline", args.nodes, plane.pids(), write_concurrency=args.write_concurrency
    )
    print(f"  {base['pods_per_second']:.0f} pods/s", file=sys.stderr)
    await asyncio.sleep(5)
    print(f"round {number}: plain pod creation while {args.jobs} jobs arrive", file=sys.stderr)
    loaded = await baseline(
        api,
        "baseline",
        args.nodes,
        plane.pids(),
        write_concurrency=args.write_concurrency,
        jobs=args.jobs,
    )
    print(f"  {loaded['pods_per_second']:.0f} pods/s", file=sys.stderr)
    await asyncio.sleep(5)
    print(f"round {number}: controller, {args.jobs} jobs", file=sys.stderr)
    ctrl = await run_controller_phase(
        api,
        plane,
        "bench",
        jobs=args.jobs,
        nodes=args.nodes,
        run_seconds=args.run_seconds,
        spread=max(args.spread, 1),
        log=workdir / f"controller-{number}.log",
        write_concurrency=args.write_concurrency,
    )
    print(f"  first wave {ctrl['first_wave_pods_per_second']:.0f} pods/s", file=sys.stderr)
    await clear_namespace(api, "bench")
    return {
        "baseline": base,
        "baseline_with_job_submissions": loaded,
        "controller": ctrl,
        "ratio_controller_to_plain": ctrl["first_wave_pods_per_second"] / base["pods_per_second"],
        "ratio_controller_to_plain_with_job_submissions": ctrl["first_wave_pods_per_second"]
        / loaded["pods_per_second"],
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds; every ratio pairs figures of the same round (the VM's speed drifts)."""

    def over(path: tuple[str, ...]) -> dict[str, Any]:
        values = []
        for result in rounds:
            value: Any = result
            for part in path:
                value = value[part]
            values.append(value)
        return {"median": statistics.median(values), "rounds": values}

    summary: dict[str, Any] = {
        "rounds": len(rounds),
        "ratio_controller_to_plain": over(("ratio_controller_to_plain",)),
        "ratio_controller_to_plain_with_job_submissions": over(
            ("ratio_controller_to_plain_with_job_submissions",)
        ),
        "plain_pods_per_second": over(("baseline", "pods_per_second")),
        "plain_with_submissions_pods_per_second": over(
            ("baseline_with_job_submissions", "pods_per_second")
        ),
        "controller_first_wave_pods_per_second": over(("controller", "first_wave_pods_per_second")),
        "controller_first_wave_jobs_per_second": over(("controller", "first_wave_jobs_per_second")),
        "create_to_all_pods_first_wave_p50": over(
            ("controller", "create_to_all_pods_first_wave_p50")
        ),
        "create_to_all_pods_first_wave_p99": over(
            ("controller", "create_to_all_pods_first_wave_p99")
        ),
        "create_to_all_pods_all_jobs_p50": over(("controller", "create_to_all_pods_all_jobs_p50")),
        "create_to_all_pods_all_jobs_p99": over(("controller", "create_to_all_pods_all_jobs_p99")),
        "release_requested_p50": over(("controller", "release_requested_p50")),
        "release_requested_p99": over(("controller", "release_requested_p99")),
        "release_gone_p50": over(("controller", "release_gone_p50")),
        "release_gone_p99": over(("controller", "release_gone_p99")),
        "controller_peak_rss_mib": over(("controller", "controller_peak_rss_mib")),
        "jobs_done": over(("controller", "jobs_done")),
        "controller_creates_in_flight_first_wave": over(
            ("controller", "controller_creates_first_wave", "in_flight_mean")
        ),
        "controller_creates_waiting_first_wave": over(
            ("controller", "controller_creates_first_wave", "waiting_mean")
        ),
    }
    ratio = summary["ratio_controller_to_plain_with_job_submissions"]["median"]
    release_p99 = max(summary["release_requested_p99"]["rounds"])
    summary["targets"] = {
        "throughput_ratio_at_least_0_8": ratio >= 0.8,
        "release_requested_p99_at_most_1s": release_p99 <= 1.0,
    }
    return summary


async def main_async(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    plane = ControlPlane(binaries=ensure_binaries(), workdir=workdir / "plane")
    with plane:
        print(f"control plane ready in {plane.startup_seconds:.1f}s", file=sys.stderr)
        for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
            plane.kubectl("apply", "-f", str(path))
        plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/pytorchjobs.kubeflow.org"
        )
        nodes = [
            kwok.gpu_node(f"n{i:03d}", gpus=8, labels={"pool": POOL}) for i in range(args.nodes)
        ]
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}),
        )
        plane.kubectl("wait", "--for=condition=Ready", "--timeout=120s", "nodes", "--all")
        for namespace in ("baseline", "bench"):
            plane.kubectl("create", "namespace", namespace)
        while plane.kubectl("get", "sa", "default", "-n", "bench", check=False).returncode != 0:
            time.sleep(0.2)
        api = Api(plane)
        try:
            rounds = [
                await one_round(api, plane, args, workdir, number)
                for number in range(1, args.rounds + 1)
            ]
        finally:
            await api.close()
    return {
        "setup": {
            "jobs": args.jobs,
            "nodes": args.nodes,
            "gpus_per_node": 8,
            "run_seconds": args.run_seconds,
            "spread": args.spread,
            "rounds": args.rounds,
            "write_concurrency": args.write_concurrency,
            "submit_concurrency": SUBMIT_CONCURRENCY,
        },
        "summary": summarise(rounds),
        "rounds": rounds,
    }


def cores(shares: dict[str, float]) -> str:
    return ", ".join(
        f"{name} {share:.2f}" for name, share in sorted(shares.items(), key=lambda kv: -kv[1])
    )


def round_lines(number: int, result: dict[str, Any]) -> list[str]:
    c, b = result["controller"], result["baseline"]
    loaded = result["baseline_with_job_submissions"]
    ratio = result["ratio_controller_to_plain"]
    ratio_loaded = result["ratio_controller_to_plain_with_job_submissions"]
    return [
        f"round {number}",
        f"  baseline (plain script): {b['pods_per_second']:.0f} pods/s;"
        f" while the {loaded['jobs_submitted_meanwhile']} jobs are submitted:"
        f" {loaded['pods_per_second']:.0f} pods/s",
        f"  controller first wave:   {c['first_wave_pods_per_second']:.0f} pods/s"
        f" = {c['first_wave_jobs_per_second']:.1f} jobs/s"
        f" ({ratio:.0%} of plain, {ratio_loaded:.0%} of plain with the same submissions)",
        "  create -> all pods created: first wave"
        f" p50 {c['create_to_all_pods_first_wave_p50']:.2f}s"
        f" p99 {c['create_to_all_pods_first_wave_p99']:.2f}s;"
        f" all jobs p50 {c['create_to_all_pods_all_jobs_p50']:.2f}s"
        f" p99 {c['create_to_all_pods_all_jobs_p99']:.2f}s",
        "  Master success -> other pods deleted (requested):"
        f" p50 {c['release_requested_p50']:.3f}s p99 {c['release_requested_p99']:.3f}s;"
        f" gone: p50 {c['release_gone_p50']:.3f}s p99 {c['release_gone_p99']:.3f}s",
        f"  jobs done {c['jobs_done']}/{c['jobs']};"
        f" overall {c['overall_jobs_per_second']:.1f} jobs/s;"
        f" controller peak RSS {c['controller_peak_rss_mib']:.0f} MiB,"
        f" CPU {c['controller_cpu_seconds']:.0f}s"
        f" ({c['controller_cpu_share_of_one_core']:.0%} of one core)",
        f"  apiserver writes/s: plain script {b['apiserver_writes_per_second']:.0f},"
        f" controller first wave {c['apiserver_writes_per_second_first_wave']:.0f}",
        f"  machine CPU busy (2 cores = 100%): plain script {b['machine_cpu_busy']:.0%},"
        f" with submissions {loaded['machine_cpu_busy']:.0%},"
        f" controller first wave {c['machine_cpu_busy_first_wave']:.0%}",
        "  CPU cores by process, plain script: " + cores(b["cpu_cores_by_process"]),
        "    with submissions: " + cores(loaded["cpu_cores_by_process"]),
        "    controller first wave: " + cores(c["cpu_cores_by_process_first_wave"]),
        "  apiserver writes per pod in the window, plain script: "
        + ", ".join(f"{k} {v}" for k, v in b["apiserver_writes_per_pod_in_window"].items()),
        "    with submissions: "
        + ", ".join(f"{k} {v}" for k, v in loaded["apiserver_writes_per_pod_in_window"].items()),
        "    controller first wave: "
        + ", ".join(f"{k} {v}" for k, v in c["apiserver_writes_per_pod_first_wave"].items()),
        "  apiserver writes per job (8 pods), whole controller run: "
        + ", ".join(f"{k} {v}" for k, v in c["apiserver_writes_per_job"].items()),
        "  seconds to each tenth of the pods: plain script "
        + " ".join(f"{t:.1f}" for t in b["deciles_seconds"])
        + "; with submissions "
        + " ".join(f"{t:.1f}" for t in loaded["deciles_seconds"])
        + "; controller first wave "
        + " ".join(f"{t:.1f}" for t in c["first_wave_deciles_seconds"]),
        "  controller creates in the first wave: "
        + ", ".join(f"{k} {v}" for k, v in c["controller_creates_first_wave"].items()),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--run-seconds", type=int, default=5, help="shortest Master run time")
    parser.add_argument("--spread", type=int, default=10, help="Master run times vary this much")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="plain, plain with submissions, controller: repeated; ratios are medians over rounds",
    )
    parser.add_argument(
        "--write-concurrency",
        type=int,
        default=32,
        help="the controller's --write-concurrency, and the plain script's pod creates at once",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "controller.json")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.write_concurrency < 1:
        parser.error("--write-concurrency must be at least 1")
    with tempfile.TemporaryDirectory(prefix="tg-bench-") as tmp:
        result = asyncio.run(main_async(args, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    lines: list[str] = []
    for number, one in enumerate(result["rounds"], start=1):
        lines += round_lines(number, one)
    summary = result["summary"]

    def figures(name: str, fmt: str) -> str:
        entry = summary[name]
        values = ", ".join(format(v, fmt) for v in entry["rounds"])
        return f"{format(entry['median'], fmt)} ({values})"

    lines += [
        f"summary over {summary['rounds']} round(s): median (each round)",
        "  controller vs plain script with the same submissions: "
        + figures("ratio_controller_to_plain_with_job_submissions", ".2f"),
        "  controller vs plain script alone: " + figures("ratio_controller_to_plain", ".2f"),
        "  first wave pods/s: controller "
        + figures("controller_first_wave_pods_per_second", ".0f")
        + "; plain "
        + figures("plain_pods_per_second", ".0f")
        + "; plain with submissions "
        + figures("plain_with_submissions_pods_per_second", ".0f"),
        "  jobs admitted/s in the first wave: "
        + figures("controller_first_wave_jobs_per_second", ".1f"),
        "  create -> all pods, first wave p50 "
        + figures("create_to_all_pods_first_wave_p50", ".2f")
        + " s, p99 "
        + figures("create_to_all_pods_first_wave_p99", ".2f")
        + " s",
        "  Master success -> deletion requested p50 "
        + figures("release_requested_p50", ".3f")
        + " s, p99 "
        + figures("release_requested_p99", ".3f")
        + " s",
        "  controller peak RSS MiB " + figures("controller_peak_rss_mib", ".0f"),
        "  controller creates in the first wave, in flight "
        + figures("controller_creates_in_flight_first_wave", ".1f")
        + f" of {result['setup']['write_concurrency']}, waiting for a slot "
        + figures("controller_creates_waiting_first_wave", ".1f"),
        f"  targets: {summary['targets']}",
        f"written to {args.out}",
    ]
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

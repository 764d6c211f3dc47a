"""One pool size: nodes, the plain script, the controller's burst, then a steady stream.

Rules:
- Each size gets its own control plane (cached binaries) and ``nodes`` kwok nodes of 8 GPUs.
- Idle webhook figures are taken first, on the cluster with nodes and nothing else.
- The plain script (``controllerbench``'s baseline) creates the burst's pods: ``--burst-gangs``
  gangs of 8 one-GPU pods (default: one per node, every GPU), a gang pinned per node,
  ``--write-concurrency`` creates at once; its rate is taken between the first and the last pod
  the watch sees. The pods are then deleted. The same burst at every size separates what the
  node count costs from what the pod count costs, and bounds a size's wall time.
- The controller phase runs the real ``torchgate controller`` through two parts, one after the
  other: the **burst** (the plain script's gangs as PyTorchJobs, submitted at once; its
  pod-create rate is the one compared with the plain script's) and, once every burst job has
  ended and its pods are gone, the **steady stream** of mixed gangs (``scalebench.workload``) for
  ``--minutes``, at the rate that keeps ``--load`` of the burst's GPUs busy (the same arrival
  rate at every size with the same burst); then every stream job is waited for.
- A job is *admitted* when all its pods are bound (``spec.nodeName`` set), *released* when its
  Master has succeeded and all its other pods are gone; both are measured from the watch.
- The webhook probe runs through the burst and the stream; its idle figures are the reference.
- The controller's RSS (``VmRSS``) is sampled twice a second with the number of pods then in the
  namespace; per 1,000 pods is (RSS at the most pods held - RSS before any job) / thousands of pods
  held. CPU per 1,000 pods is its CPU seconds in a part / thousands of pods created in it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from controllerbench.cluster import PodWatch, bounded, clear_namespace, connect
from controllerbench.phases import baseline, prepare, start_controller
from controllerbench.sampling import RigSampler, cpu_seconds
from controllerbench.stats import deciles, percentile
from controllerbench.workload import SUBMIT_CONCURRENCY, gang, gang_pod_names
from poolbench.manifests import pytorchjob

from scalebench.webhookprobe import Probe, certificates, measure_idle, start_webhook, wait_ready
from scalebench.workload import Arrival, arrival_rate, arrivals
from torchgate.kube.client import KubeClient
from torchgate.kube.resources import PYTORCHJOBS
from torchgate_dev.controlplane.binaries import ensure_binaries
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.node.registry import free_port

NAMESPACE = "bench"


class BindWatch(PodWatch):
    """The pod watch, also stamping when each pod is first seen bound to a node."""

    def __init__(self, api: KubeClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.bound: dict[str, float] = {}
        self.informer.add_handler(self._bound)

    def _bound(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if (obj.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(obj["metadata"]["name"], time.monotonic())

    def held(self) -> int:
        """Pods in the namespace now (seen and not gone)."""
        return len(self.added) - len(self.gone)


def rss_bytes(pid: int) -> int:
    """A process's resident memory now (``VmRSS``), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pod_names(name: str, pods: int) -> list[str]:
    """The pods the controller creates for a gang of ``pods``, Master first."""
    return [f"{name}-master-0"] + [f"{name}-worker-{i}" for i in range(pods - 1)]


def job_figures(
    watch: BindWatch, submitted: dict[str, float], pods: dict[str, list[str]]
) -> dict[str, Any]:
    """Admission (created -> all pods bound) and release (Master done -> pods gone), seconds."""
    admitted, released, requested = [], [], []
    for name, names in pods.items():
        if name in submitted and all(p in watch.bound for p in names):
            admitted.append(max(watch.bound[p] for p in names) - submitted[name])
        master = names[0]
        if master not in watch.succeeded or len(names) == 1:
            continue
        others = names[1:]
        if all(p in watch.gone for p in others):
            released.append(max(watch.gone[p] for p in others) - watch.succeeded[master])
        if all(p in watch.deleting or p in watch.gone for p in others):
            requested.append(
                max(watch.deleting.get(p, watch.gone.get(p, 0.0)) for p in others)
                - watch.succeeded[master]
            )
    return {
        "jobs": len(pods),
        "jobs_admitted": len(admitted),
        "admission_p50_seconds": percentile(admitted, 0.5),
        "admission_p99_seconds": percentile(admitted, 0.99),
        "release_gone_p50_seconds": percentile(released, 0.5),
        "release_gone_p99_seconds": percentile(released, 0.99),
        "release_requested_p99_seconds": percentile(requested, 0.99),
        "jobs_released": len(released),
    }


def done(watch: BindWatch, names: list[str]) -> bool:
    """The job's Master succeeded and every other pod of it is gone."""
    return names[0] in watch.succeeded and all(p in watch.gone for p in names[1:])


async def wait_done(
    watch: BindWatch, pods: dict[str, list[str]], within: float, what: str
) -> float:
    """Until every job of ``pods`` is done or ``within`` seconds pass; returns the seconds."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        finished = sum(done(watch, names) for names in pods.values())
        print(f"\r  {what}: {finished}/{len(pods)} jobs done, {watch.held()} pods held  ",
              end="", file=sys.stderr)  # fmt: skip
        if finished == len(pods):
            break
        await asyncio.sleep(1)
    print(file=sys.stderr)
    return time.monotonic() - started


async def stream(api: KubeClient, schedule: list[Arrival], submitted: dict[str, float]) -> float:
    """Submit every arrival at its time (creates in flight bounded); returns the seconds."""
    semaphore = asyncio.Semaphore(SUBMIT_CONCURRENCY)
    started = time.monotonic()

    async def submit(arrival: Arrival) -> None:
        manifest = pytorchjob(
            arrival.name, NAMESPACE, arrival.pods, arrival.run_seconds,
            gpus_per_pod=arrival.gpus_per_pod,
        )  # fmt: skip
        async with semaphore:
            await api.request("POST", PYTORCHJOBS.path(NAMESPACE), body=manifest)
            submitted[arrival.name] = time.monotonic()

    tasks = []
    for arrival in schedule:
        delay = started + arrival.at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(submit(arrival)))
    await asyncio.gather(*tasks)
    return time.monotonic() - started


async def controller_phase(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, gangs: int, work: Path,
    probe_port: int, probe_context: Any,
) -> dict[str, Any]:  # fmt: skip
    """The burst, then the steady stream, through the real controller."""
    watch = BindWatch(api, NAMESPACE)
    watch_task = asyncio.create_task(watch.run())
    await watch.ready.wait()
    metrics_port = free_port()
    controller = start_controller(
        plane, metrics_port=metrics_port, write_concurrency=args.write_concurrency,
        log=work / "controller.log",
    )  # fmt: skip
    memory: list[tuple[float, int, int]] = []  # (time, RSS bytes, pods held)
    stop_memory = asyncio.Event()

    async def sample_memory() -> None:
        while not stop_memory.is_set():
            memory.append((time.monotonic(), rss_bytes(controller.pid), watch.held()))
            await asyncio.sleep(0.5)

    try:
        await asyncio.sleep(args.controller_settle)  # it lists nodes and watches
        rss_idle = rss_bytes(controller.pid)
        memory_task = asyncio.create_task(sample_memory())
        sampler = RigSampler(
            api,
            {**plane.pids(), "benchmark": os.getpid(), "torchgate controller": controller.pid},
            controller_metrics=f"http://127.0.0.1:{metrics_port}",
            slots=args.write_concurrency,
        )
        sampling = asyncio.create_task(sampler.run())

        # -- the burst: every GPU asked for at once
        print(f"  burst: {gangs} gangs of 8 pods", file=sys.stderr)
        probe = Probe(probe_port, probe_context, args.webhook_rate)
        probe_task = asyncio.create_task(probe.run())
        burst = {f"b-{i:05d}": gang_pod_names(f"b-{i:05d}") for i in range(gangs)}
        submitted: dict[str, float] = {}
        cpu_start = cpu_seconds(controller.pid)

        async def submit_burst(index: int, name: str) -> None:
            manifest = gang(name, NAMESPACE, args.burst_run_seconds + index % args.burst_spread)
            await api.request("POST", PYTORCHJOBS.path(NAMESPACE), body=manifest)
            submitted[name] = time.monotonic()

        burst_started = time.monotonic()
        await bounded([submit_burst(i, n) for i, n in enumerate(burst)], SUBMIT_CONCURRENCY)
        await wait_done(watch, burst, args.drain_timeout + gangs / 5, "burst")
        burst_seconds = time.monotonic() - burst_started
        cpu_burst = cpu_seconds(controller.pid) - cpu_start
        probe.stop()
        await probe_task
        burst_pods = sorted(watch.added[p] for names in burst.values() for p in names
                            if p in watch.added)  # fmt: skip
        rate = len(burst_pods) / (burst_pods[-1] - burst_pods[0])
        peak_time, peak_rss, peak_held = max(memory, key=lambda sample: (sample[2], sample[1]))
        burst_figures = {
            "jobs": gangs,
            "pods": len(burst_pods),
            "pods_per_second": rate,
            "deciles_seconds": deciles(burst_pods),
            "seconds": burst_seconds,
            "controller_cpu_seconds": cpu_burst,
            "controller_cpu_seconds_per_1000_pods": cpu_burst / (len(burst_pods) / 1000),
            "controller_rss_idle_mib": rss_idle / 2**20,
            "controller_rss_at_most_pods_mib": peak_rss / 2**20,
            "most_pods_held": peak_held,
            "controller_rss_mib_per_1000_pods": (peak_rss - rss_idle) / 2**20 / (peak_held / 1000),
            "controller_peak_rss_mib": max(rss for _, rss, _ in memory) / 2**20,
            "webhook": probe.figures(),
            "machine_cpu_busy": sampler.cpu_busy(burst_pods[0], burst_pods[-1]),
            "cpu_cores_by_process": sampler.process_cpu_share(burst_pods[0], burst_pods[-1]),
            "apiserver_writes_per_second": sampler.per_second(burst_pods[0], burst_pods[-1]),
            "apiserver_writes_per_pod": sampler.writes_by_kind(
                burst_pods[0], burst_pods[-1], len(burst_pods)
            ),
            "controller_creates": sampler.creates_in_window(burst_pods[0], burst_pods[-1]),
            **job_figures(watch, submitted, burst),
        }
        del peak_time

        # -- the steady stream
        gpus = gangs * 8
        rate_gangs = arrival_rate(gpus, args.load, args.run_seconds, args.spread)
        schedule = arrivals(
            rate=rate_gangs, seconds=args.minutes * 60, run_seconds=args.run_seconds,
            spread=args.spread, seed=args.seed,
        )  # fmt: skip
        print(f"  stream: {len(schedule)} gangs over {args.minutes} min "
              f"({rate_gangs:.2f}/s)", file=sys.stderr)  # fmt: skip
        steady = {a.name: pod_names(a.name, a.pods) for a in schedule}
        probe = Probe(probe_port, probe_context, args.webhook_rate)
        probe_task = asyncio.create_task(probe.run())
        cpu_start = cpu_seconds(controller.pid)
        stream_started = time.monotonic()
        submit_seconds = await stream(api, schedule, submitted)
        stream_ended = time.monotonic()
        probe.stop()
        await probe_task
        await wait_done(watch, steady, args.drain_timeout, "stream")
        cpu_stream = cpu_seconds(controller.pid) - cpu_start
        stream_pods = sum(len(names) for names in steady.values())
        steady_figures = {
            "gangs_per_second": rate_gangs,
            "load": args.load,
            "pods": stream_pods,
            "submit_seconds": submit_seconds,
            "pods_per_second_created": stream_pods / max(submit_seconds, 1e-9),
            "controller_cpu_seconds": cpu_stream,
            "controller_cpu_seconds_per_1000_pods": cpu_stream / max(stream_pods / 1000, 1e-9),
            "controller_cpu_share_of_one_core": cpu_stream / (time.monotonic() - stream_started),
            "webhook": probe.figures(),
            "machine_cpu_busy": sampler.cpu_busy(stream_started, stream_ended),
            "cpu_cores_by_process": sampler.process_cpu_share(stream_started, stream_ended),
            "apiserver_writes_per_second": sampler.per_second(stream_started, stream_ended),
            **job_figures(watch, submitted, steady),
        }
        sampling.cancel()
        stop_memory.set()
        await memory_task
        start = memory[0][0]
        timeline = [(round(t - start, 1), round(rss / 2**20, 1), held)
                    for t, rss, held in memory[::4]]  # fmt: skip
    finally:
        terminate(controller, grace=30)
        watch_task.cancel()
    return {"burst": burst_figures, "stream": steady_figures, "timeline": timeline}


async def run_size(args: argparse.Namespace, nodes: int, work: Path) -> dict[str, Any]:
    """One size from a fresh control plane; the JSON document of it."""
    phase_seconds: dict[str, float] = {}
    started = time.monotonic()
    plane = ControlPlane(binaries=ensure_binaries(), workdir=work / "plane")
    with plane:
        phase_seconds["control_plane"] = time.monotonic() - started
        async with connect(plane) as api:
            nodes_ready = await prepare(api, plane, nodes)
            phase_seconds["nodes_ready"] = nodes_ready
            context = certificates(work / "tls")
            port = free_port()
            webhook = start_webhook(plane, work / "tls", port, work / "webhook.log")
            try:
                await wait_ready(f"https://127.0.0.1:{port}/readyz", context)
                mark = time.monotonic()
                idle = await measure_idle(port, context, args.webhook_rate, args.webhook_seconds)
                print(f"size {nodes}: webhook idle p99 {idle['server_p99_ms']} ms (server)",
                      file=sys.stderr)  # fmt: skip
                gangs = args.burst_gangs or nodes
                plain = await baseline(
                    api, "baseline", gangs, plane.pids(), write_concurrency=args.write_concurrency
                )
                print(f"  plain script {plain['pods_per_second']:.0f} pods/s", file=sys.stderr)
                phase_seconds["plain"] = time.monotonic() - mark
                mark = time.monotonic()
                await asyncio.sleep(5)
                ctrl = await controller_phase(api, plane, args, gangs, work, port, context)
                phase_seconds["controller"] = time.monotonic() - mark
                print(f"  controller burst {ctrl['burst']['pods_per_second']:.0f} pods/s",
                      file=sys.stderr)  # fmt: skip
                await clear_namespace(api, NAMESPACE)
            finally:
                terminate(webhook, grace=10)
    phase_seconds["total"] = time.monotonic() - started
    return {
        "setup": {
            "nodes": nodes,
            "gpus_per_node": 8,
            "burst_gangs": gangs,
            "write_concurrency": args.write_concurrency,
            "minutes": args.minutes,
            "load": args.load,
            "run_seconds": args.run_seconds,
            "spread": args.spread,
            "burst_run_seconds": args.burst_run_seconds,
            "seed": args.seed,
            "loadavg_end": os.getloadavg(),
            "nproc": os.cpu_count(),
        },
        "seconds": phase_seconds,
        "plain": plain,
        "controller": ctrl,
        "ratio_controller_to_plain": ctrl["burst"]["pods_per_second"] / plain["pods_per_second"],
        "webhook_idle": idle,
    }

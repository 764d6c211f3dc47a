"""One pool size: nodes, then rounds of the plain script and the controller's burst, then a stream.

Rules:
- Each size gets its own control plane (cached binaries) and ``nodes`` kwok nodes of 8 GPUs.
- Idle webhook figures are taken first, on the cluster with nodes and nothing else.
- **Rounds, alternating.** ``--rounds`` times: the plain script's burst, then the controller's
  burst, each on an empty namespace. The machine is shared, so the two are measured alternately
  (plain, controller, plain, controller, ...) and each controller burst is compared with the
  plain bursts next to it: the ratio of each adjacent pair (plain 1 / controller 1, controller 1 /
  plain 2, ...) is taken, and the size's ratio is the median of those; the spread is their range.
  Each window records the machine's busy share, the rig processes' cores, the cores the rest of
  the machine took (``other_cores``: busy cores minus the rig's) and the load average at its end.
- **The same pods.** The plain script (``controllerbench``'s baseline) creates ``--burst-gangs``
  gangs of 8 one-GPU pods (default: one per node, every GPU) built by torchgate's ``build_pod``,
  each pinned by required node affinity to one node (``spec.nodeName`` unset: kube-scheduler
  binds every pod, as it binds the controller's pods, pinned the same way to the admitter's
  node), ``--write-concurrency`` creates at once; its rate is taken between the first and the
  last pod the watch sees. The pods are then deleted. The same burst at every size separates
  what the node count costs from what the pod count costs, and bounds a size's wall time.
- **No release inside the create window.** The controller's burst is the plain script's gangs as
  PyTorchJobs, submitted at once, to the real ``torchgate controller`` (started for the round,
  stopped after it); its pod-create rate is the one compared. Its jobs run
  ``--burst-run-seconds`` (default: twice the first plain burst's create seconds, at least 20 s),
  so no burst job ends and has its pods deleted before the last burst pod is created unless the
  controller is below half the plain script's rate (``jobs_ended_in_window`` counts them; the
  plain script deletes nothing in its window either). The burst's release is still measured as
  its jobs end; the round waits until every burst job is done.
- The last round's controller then runs the **steady stream** of mixed gangs
  (``scalebench.workload``) for ``--minutes``, at the rate that keeps ``--load`` of the burst's
  GPUs busy (the same arrival rate at every size with the same burst); then every stream job is
  waited for.
- A job is *admitted* when all its pods are bound (``spec.nodeName`` set), *released* when its
  Master has succeeded and all its other pods are gone; both are measured from the watch.
- The webhook probe runs through the last burst and the stream; its idle figures are the reference.
- With ``--apiserver-profile-seconds``, a CPU profile of the apiserver (its ``/debug/pprof``) is
  taken inside every burst, plain and controller, starting a few seconds after the burst starts
  (3 s for the plain script, 8 s for the controller, whose jobs are submitted first: while the
  pods are being created), and saved as ``apiserver-<nodes>-<plain|controller>-<round>
  .pprof`` in ``--out-dir``: where the apiserver's time goes in each, for ``go tool pprof``.
- The controller's RSS (``VmRSS``) is sampled twice a second with the number of pods then in the
  namespace; per 1,000 pods is (RSS at the most pods held - RSS before any job) / thousands of pods
  held. CPU per 1,000 pods is its CPU seconds in a part / thousands of pods created in it. The
  burst's figures other than the rates and ratios are the last round's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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
from torchgate_dev.controlplane.components import NodeLeases
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.ports import free_port

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


async def profile_apiserver(
    api: KubeClient, seconds: float, path: Path, *, delay: float = 3.0
) -> None:
    """After ``delay`` seconds, the apiserver's CPU profile of ``seconds`` written to ``path``."""
    if seconds <= 0:
        return
    await asyncio.sleep(delay)
    headers: dict[str, str] = {}
    if api.authorize is not None:
        await api.authorize(headers)
    url = f"{api.host}/debug/pprof/profile"
    params = {"seconds": str(round(seconds))}
    async with api.session.get(url, headers=headers, params=params) as response:
        response.raise_for_status()
        path.write_bytes(await response.read())


def window_load(sampler: RigSampler, start: float, end: float) -> dict[str, Any]:
    """How busy the machine was in a window, and how much of it the rig's processes took."""
    busy = sampler.cpu_busy(start, end)
    cores = sampler.process_cpu_share(start, end)
    nproc = os.cpu_count() or 1
    return {
        "machine_cpu_busy": busy,
        "cpu_cores_by_process": cores,
        "other_cores": round(busy * nproc - sum(cores.values()), 2),
        "loadavg_end": os.getloadavg(),
    }


def ended_in_window(watch: BindWatch, jobs: dict[str, list[str]], end: float) -> int:
    """Jobs of ``jobs`` whose Master had succeeded by ``end`` (their release deletes follow)."""
    return sum(1 for names in jobs.values() if watch.succeeded.get(names[0], end + 1) <= end)


async def controller_phase(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, gangs: int, work: Path,
    probe_port: int, probe_context: Any, *, number: int, burst_run_seconds: int,
    with_stream: bool, nodes: int,
) -> dict[str, Any]:  # fmt: skip
    """One round's burst through a fresh controller; the steady stream after it when asked."""
    watch = BindWatch(api, NAMESPACE)
    watch_task = asyncio.create_task(watch.run())
    await watch.ready.wait()
    metrics_port = free_port()
    controller = start_controller(
        plane, metrics_port=metrics_port, write_concurrency=args.write_concurrency,
        log=work / f"controller-{number}.log",
    )  # fmt: skip
    memory: list[tuple[float, int, int]] = []  # (time, RSS bytes, pods held)
    stop_memory = asyncio.Event()

    async def sample_memory() -> None:
        while not stop_memory.is_set():
            memory.append((time.monotonic(), rss_bytes(controller.pid), watch.held()))
            await asyncio.sleep(0.5)

    steady_figures: dict[str, Any] | None = None
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
        print(f"  round {number}: controller burst, {gangs} gangs of 8 pods running "
              f"{burst_run_seconds} s", file=sys.stderr)  # fmt: skip
        probe = Probe(probe_port, probe_context, args.webhook_rate)
        probe_task = asyncio.create_task(probe.run())
        burst = {f"b{number}-{i:05d}": gang_pod_names(f"b{number}-{i:05d}") for i in range(gangs)}
        submitted: dict[str, float] = {}
        cpu_start = cpu_seconds(controller.pid)

        async def submit_burst(index: int, name: str) -> None:
            manifest = gang(name, NAMESPACE, burst_run_seconds + index % args.burst_spread)
            await api.request("POST", PYTORCHJOBS.path(NAMESPACE), body=manifest)
            submitted[name] = time.monotonic()

        burst_started = time.monotonic()
        profile = asyncio.create_task(
            profile_apiserver(
                api, args.apiserver_profile_seconds,
                args.out_dir / f"apiserver-{nodes}-controller-{number}.pprof",
                delay=8.0,  # the jobs are submitted first; their pods follow
            )
        )  # fmt: skip
        await bounded([submit_burst(i, n) for i, n in enumerate(burst)], SUBMIT_CONCURRENCY)
        await wait_done(watch, burst, args.drain_timeout + gangs / 5 + burst_run_seconds, "burst")
        burst_seconds = time.monotonic() - burst_started
        await profile
        cpu_burst = cpu_seconds(controller.pid) - cpu_start
        probe.stop()
        await probe_task
        burst_pods = sorted(watch.added[p] for names in burst.values() for p in names
                            if p in watch.added)  # fmt: skip
        first, last = burst_pods[0], burst_pods[-1]
        rate = len(burst_pods) / (last - first)
        peak_time, peak_rss, peak_held = max(memory, key=lambda sample: (sample[2], sample[1]))
        burst_figures = {
            "jobs": gangs,
            "pods": len(burst_pods),
            "pods_per_second": rate,
            "run_seconds": burst_run_seconds,
            "jobs_ended_in_window": ended_in_window(watch, burst, last),
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
            **window_load(sampler, first, last),
            "apiserver_writes_per_second": sampler.per_second(first, last),
            "apiserver_writes_per_pod": sampler.writes_by_kind(first, last, len(burst_pods)),
            "apiserver_reads_per_pod": sampler.reads_by_kind(first, last, len(burst_pods)),
            "controller_creates": sampler.creates_in_window(first, last),
            **job_figures(watch, submitted, burst),
        }
        del peak_time

        if with_stream:
            steady_figures = await steady_part(api, args, gangs, watch, sampler, controller.pid,
                                               probe_port, probe_context, submitted)  # fmt: skip
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


async def steady_part(
    api: KubeClient, args: argparse.Namespace, gangs: int, watch: BindWatch, sampler: RigSampler,
    controller_pid: int, probe_port: int, probe_context: Any, submitted: dict[str, float],
) -> dict[str, Any]:  # fmt: skip
    """The steady Poisson stream through the running controller, waited out."""
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
    cpu_start = cpu_seconds(controller_pid)
    stream_started = time.monotonic()
    submit_seconds = await stream(api, schedule, submitted)
    stream_ended = time.monotonic()
    probe.stop()
    await probe_task
    await wait_done(watch, steady, args.drain_timeout, "stream")
    cpu_stream = cpu_seconds(controller_pid) - cpu_start
    stream_pods = sum(len(names) for names in steady.values())
    return {
        "gangs_per_second": rate_gangs,
        "load": args.load,
        "pods": stream_pods,
        "submit_seconds": submit_seconds,
        "pods_per_second_created": stream_pods / max(submit_seconds, 1e-9),
        "controller_cpu_seconds": cpu_stream,
        "controller_cpu_seconds_per_1000_pods": cpu_stream / max(stream_pods / 1000, 1e-9),
        "controller_cpu_share_of_one_core": cpu_stream / (time.monotonic() - stream_started),
        "webhook": probe.figures(),
        **window_load(sampler, stream_started, stream_ended),
        "apiserver_writes_per_second": sampler.per_second(stream_started, stream_ended),
        **job_figures(watch, submitted, steady),
    }


async def plain_burst(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, gangs: int,
    probe_port: int, probe_context: Any, *, number: int, nodes: int,
) -> dict[str, Any]:  # fmt: skip
    """The plain script's burst, the webhook probed through it as through the controller's."""
    probe = Probe(probe_port, probe_context, args.webhook_rate)
    probe_task = asyncio.create_task(probe.run())
    profile = asyncio.create_task(
        profile_apiserver(
            api, args.apiserver_profile_seconds,
            args.out_dir / f"apiserver-{nodes}-plain-{number}.pprof",
        )
    )  # fmt: skip
    try:
        plain = await baseline(
            api, "baseline", gangs, plane.pids(), write_concurrency=args.write_concurrency
        )
    finally:
        probe.stop()
        await probe_task
        await profile
    plain["webhook"] = probe.figures()
    nproc = os.cpu_count() or 1
    cores = plain["cpu_cores_by_process"]
    plain["other_cores"] = round(plain["machine_cpu_busy"] * nproc - sum(cores.values()), 2)
    plain["loadavg_end"] = os.getloadavg()
    return plain


def adjacent_ratios(plain: list[float], controller: list[float]) -> list[float]:
    """Controller over plain for each adjacent pair of the alternating sequence p1 c1 p2 c2 ...

    Controller ``i`` is compared with plain ``i`` (just before it) and plain ``i + 1`` (just
    after it, when there is one).
    """
    ratios = []
    for i, rate in enumerate(controller):
        ratios.append(rate / plain[i])
        if i + 1 < len(plain):
            ratios.append(rate / plain[i + 1])
    return ratios


async def run_size(args: argparse.Namespace, nodes: int, work: Path) -> dict[str, Any]:
    """One size from a fresh control plane; the JSON document of it."""
    phase_seconds: dict[str, float] = {"plain": 0.0, "controller": 0.0}
    started = time.monotonic()
    plane = ControlPlane(
        binaries=ensure_binaries(),
        workdir=work / "plane",
        leases=NodeLeases(duration_seconds=args.node_lease_seconds),
    )
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
                idle = await measure_idle(port, context, args.webhook_rate, args.webhook_seconds)
                print(f"size {nodes}: webhook idle p99 {idle['server_p99_ms']} ms (server)",
                      file=sys.stderr)  # fmt: skip
                gangs = args.burst_gangs or nodes
                plains: list[dict[str, Any]] = []
                bursts: list[dict[str, Any]] = []
                burst_run_seconds = args.burst_run_seconds
                for number in range(1, args.rounds + 1):
                    mark = time.monotonic()
                    plain = await plain_burst(
                        api, plane, args, gangs, port, context, number=number, nodes=nodes
                    )
                    plains.append(plain)
                    print(f"  round {number}: plain script {plain['pods_per_second']:.0f} pods/s",
                          file=sys.stderr)  # fmt: skip
                    phase_seconds["plain"] += time.monotonic() - mark
                    if not burst_run_seconds:
                        created = plain["deciles_seconds"][-1]
                        burst_run_seconds = max(20, round(2 * created))
                    mark = time.monotonic()
                    await asyncio.sleep(5)
                    ctrl = await controller_phase(
                        api, plane, args, gangs, work, port, context, number=number,
                        burst_run_seconds=burst_run_seconds, with_stream=number == args.rounds,
                        nodes=nodes,
                    )  # fmt: skip
                    bursts.append(ctrl["burst"])
                    phase_seconds["controller"] += time.monotonic() - mark
                    burst_rate = ctrl["burst"]["pods_per_second"]
                    print(f"  round {number}: controller burst {burst_rate:.0f} pods/s",
                          file=sys.stderr)  # fmt: skip
                    await clear_namespace(api, NAMESPACE)
                    await asyncio.sleep(5)
            finally:
                terminate(webhook, grace=10)
    phase_seconds["total"] = time.monotonic() - started
    plain_rates = [p["pods_per_second"] for p in plains]
    burst_rates = [b["pods_per_second"] for b in bursts]
    ratios = adjacent_ratios(plain_rates, burst_rates)
    rounds = [
        {
            "plain_pods_per_second": p["pods_per_second"],
            "controller_pods_per_second": b["pods_per_second"],
            "plain_load": {k: p[k] for k in ("machine_cpu_busy", "other_cores", "loadavg_end")},
            "controller_load": {
                k: b[k] for k in ("machine_cpu_busy", "other_cores", "loadavg_end")
            },
            "plain_apiserver_cores": p["cpu_cores_by_process"].get("kube-apiserver"),
            "controller_apiserver_cores": b["cpu_cores_by_process"].get("kube-apiserver"),
            "controller_jobs_ended_in_window": b["jobs_ended_in_window"],
        }
        for p, b in zip(plains, bursts, strict=True)
    ]
    plain_doc = {**plains[-1], "pods_per_second": statistics.median(plain_rates)}
    burst_doc = {**bursts[-1], "pods_per_second": statistics.median(burst_rates)}
    return {
        "setup": {
            "nodes": nodes,
            "gpus_per_node": 8,
            "burst_gangs": gangs,
            "write_concurrency": args.write_concurrency,
            "rounds": args.rounds,
            "minutes": args.minutes,
            "load": args.load,
            "run_seconds": args.run_seconds,
            "spread": args.spread,
            "burst_run_seconds": burst_run_seconds,
            "seed": args.seed,
            "node_lease_seconds": args.node_lease_seconds,
            "loadavg_end": os.getloadavg(),
            "nproc": os.cpu_count(),
        },
        "seconds": phase_seconds,
        "plain": plain_doc,
        "controller": {**ctrl, "burst": burst_doc},
        "rounds": rounds,
        "ratios_adjacent": ratios,
        "ratio_controller_to_plain": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "webhook_idle": idle,
    }

"""The run: the plain script alone and while the jobs arrive, then the controller, per round.

Rules:
- Every phase starts on an empty namespace and a watch that has listed it; each clears its
  namespace (and waits until it is empty) before the next one starts.
- The plain script's rate is taken between the first and the last of its pods seen by the watch;
  the controller's from its first wave: the first ``nodes`` gangs whose pods were all created.
- The controller is the real ``torchgate controller`` process with the same write concurrency
  as the plain script; it is stopped at the end of its phase, whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from controllerbench import REPO
from controllerbench.cluster import (
    PodWatch,
    apiserver_writes,
    bounded,
    clear_namespace,
    connect,
    create_nodes,
    wait_nodes_ready,
)
from controllerbench.sampling import RigSampler, cpu_seconds
from controllerbench.stats import deciles, percentile, summarise, writes_since
from controllerbench.workload import (
    GANG_PODS,
    SUBMIT_CONCURRENCY,
    gang,
    gang_pod_names,
    plain_pods,
    pool_nodes,
)
from torchgate.kube.client import KubeClient
from torchgate.kube.resources import PODS, PYTORCHJOBS
from torchgate_dev.controlplane.binaries import ensure_binaries
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.ports import free_port


async def baseline(
    api: KubeClient,
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
    pods = plain_pods(namespace, gangs)
    writes_before = await apiserver_writes(api)
    rate_sampler = RigSampler(api, {**plane_pids, "benchmark": os.getpid()})
    sampling = asyncio.create_task(rate_sampler.run())
    started = time.monotonic()
    jobs_path = PYTORCHJOBS.path(namespace)
    submissions = asyncio.create_task(
        bounded(
            [
                api.request("POST", jobs_path, body=gang(f"inert-{i:04d}", namespace, 5))
                for i in range(jobs)
            ],
            SUBMIT_CONCURRENCY,
        )
    )
    # A refused create raises (ApiError) and ends the run, as a non-201 answer did.
    await bounded(
        [api.request("POST", PODS.path(namespace), body=p) for p in pods], write_concurrency
    )
    elapsed = time.monotonic() - started
    await submissions
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
        "apiserver_reads_per_pod_in_window": rate_sampler.reads_by_kind(
            times[0], times[-1], len(pods)
        ),
        "machine_cpu_busy": rate_sampler.cpu_busy(times[0], times[-1]),
        "cpu_cores_by_process": rate_sampler.process_cpu_share(times[0], times[-1]),
    }


def start_controller(
    plane: ControlPlane, *, metrics_port: int, write_concurrency: int, log: Path
) -> subprocess.Popen[bytes]:
    """The real ``torchgate controller`` process, acting on every PyTorchJob."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.Popen(
        [sys.executable, "-m", "torchgate", "controller", "--kubeconfig", str(plane.kubeconfig),
         "--manage-unowned", "--no-leader-elect", "--metrics-bind-address", "127.0.0.1",
         "--metrics-port", str(metrics_port), "--log-level", "WARNING",
         "--write-concurrency", str(write_concurrency),
         # The controller's own reaction time: the default finish grace (5 s, for ranks that
         # are finishing on their own) would add a fixed wait to every release measured here.
         "--finish-grace-seconds", "0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO,
    )  # fmt: skip


async def run_controller_phase(
    api: KubeClient,
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
    """All ``jobs`` submitted at once to the controller; every job run to completion."""
    watch = PodWatch(api, namespace)
    watch_task = asyncio.create_task(watch.run())
    await watch.ready.wait()
    metrics_port = free_port()
    controller = start_controller(
        plane, metrics_port=metrics_port, write_concurrency=write_concurrency, log=log
    )
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
            controller_metrics=f"http://127.0.0.1:{metrics_port}",
            slots=write_concurrency,
        )
        sampling = asyncio.create_task(rate_sampler.run())
        cpu_before = cpu_seconds(controller.pid)
        names = [f"job-{i:04d}" for i in range(jobs)]
        submitted: dict[str, float] = {}

        async def submit(index: int, name: str) -> None:
            manifest = gang(name, namespace, run_seconds + index % spread)
            await api.request("POST", PYTORCHJOBS.path(namespace), body=manifest)
            submitted[name] = time.monotonic()

        started = time.monotonic()
        await bounded([submit(i, n) for i, n in enumerate(names)], SUBMIT_CONCURRENCY)
        submit_seconds = time.monotonic() - started
        expected = {n: gang_pod_names(n) for n in names}
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
    capacity = nodes * 8 // GANG_PODS
    first_wave = sorted(created_all, key=created_all.__getitem__)[:capacity]
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


async def one_round(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, workdir: Path, number: int
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


async def prepare(api: KubeClient, plane: ControlPlane, nodes: int) -> float:
    """The CRDs, ``nodes`` kwok nodes of 8 GPUs in the pool, and the two namespaces.

    Returns the seconds until every node was Ready (the deadline grows with the node count:
    kwok readies about a hundred nodes a second here).
    """
    for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
        plane.kubectl("apply", "-f", str(path))
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/pytorchjobs.kubeflow.org"
    )
    await create_nodes(api, pool_nodes(nodes))
    ready_seconds = await wait_nodes_ready(api, nodes, within=120 + nodes / 10)
    for namespace in ("baseline", "bench"):
        plane.kubectl("create", "namespace", namespace)
    while plane.kubectl("get", "sa", "default", "-n", "bench", check=False).returncode != 0:
        await asyncio.sleep(0.2)
    return ready_seconds


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start the control plane, run every round, and return the JSON document."""
    plane = ControlPlane(binaries=ensure_binaries(), workdir=workdir / "plane")
    with plane:
        print(f"control plane ready in {plane.startup_seconds:.1f}s", file=sys.stderr)
        async with connect(plane) as api:
            await prepare(api, plane, args.nodes)
            rounds = [
                await one_round(api, plane, args, workdir, number)
                for number in range(1, args.rounds + 1)
            ]
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

"""Pool-sharing benchmarks on the local control plane: the real controller, kwok nodes.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing. The same
workloads as ``pool_sim.py`` (which decides them with the admission cycle alone, on a simulated
clock) run here through the real ``torchgate controller`` process against the local control
plane with ``--nodes`` kwok nodes of 8 GPUs (racks of 8, labelled as the simulation's). Every pod
asks for 8 GPUs (a whole node); a gang's Master ends by itself ``seconds`` after it starts
(kwok's ``torchgate.io/fake-run-seconds`` stage, as ``controller_bench.py``), and torchgate then
deletes its Workers (``cleanPodPolicy: Running``) and admits the next gangs.

Scenarios (``--only``, default all; the numbers are the issue's benchmarks):

1. ``burst``: ``--jobs`` gangs of 1 to 32 pods, all submitted at once, every gang running
   ``--seconds``. Makespan (first submission to the last Master's success) and occupancy (work
   done / (pool GPUs x makespan)) with backfill (``--starvation-seconds`` very large, so a
   waiting gang never stops smaller ones behind it) and without (``--starvation-seconds 0``:
   nothing behind a waiting gang is admitted), each against the exact optimum of the burst and
   the simulation's makespan for the same burst (the decisions' own cost; the rest is the
   machinery: pod creation, kwok's start and stop, whole-second run times).
2. ``preemption``: the pool full of low-priority gangs of 8 pods (PriorityClass ``bench-low``),
   a ``bench-high`` gang of ``--urgent-pods`` pods is submitted: time until all its pods are
   Running, p50/p99 over ``--preemption-rounds``; in every round, the same gang submitted when
   half the pool is free (no preemption) is the baseline. Needs the sharing cycle wired into the
   controller.
4. ``fairness``: two teams (``TeamQuota`` a and b, half the pool each, one cohort) submit bursts
   at the same moment; the time until each team's Running pods hold its share (100 % and 90 %),
   against the same bursts without TeamQuotas. Needs TeamQuotas wired into the controller.

Rounds repeat each scenario; the summary gives medians over rounds and every round's value, and
ratios pair figures of the same round (the VM's speed drifts by tens of percent over minutes).

    .venv/bin/python benchmarks/pool_bench.py --out bench-results/pool.json
    .venv/bin/python benchmarks/pool_bench.py --only burst --rounds 1 --jobs 24 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from controller_bench import Api, bounded, clear_namespace, percentile
from pool_sim import (
    HOSTNAME,
    RACK,
    Job,
    burst,
    lower_bound,
    min_bins,
    pool_nodes,
    simulate,
    two_teams,
)

from torchgate.controlplane import kwok
from torchgate.controlplane.binaries import ensure_binaries
from torchgate.controlplane.cluster import ControlPlane
from torchgate.controlplane.processes import terminate
from torchgate.dev import free_port

REPO = Path(__file__).resolve().parents[1]
POOL = "bench"
GPUS_PER_NODE = 8
SUBMIT_CONCURRENCY = 32
LOW, HIGH = "bench-low", "bench-high"
PRIORITIES = {LOW: 100, HIGH: 10_000}
NO_STARVATION = 10**9  # seconds: a waiting gang never stops the ones behind it
QUOTA_API = "/apis/torchgate.io/v1alpha1/teamquotas"
JOBS_API = "/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"


# ------------------------------------------------------------------ manifests


def pytorchjob(
    name: str, namespace: str, pods: int, seconds: float, *, priority_class: str | None = None
) -> dict[str, Any]:
    """A gang of ``pods`` whole-node pods; the Master ends by itself after ``seconds``."""

    def replica(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            "resources": {"limits": {"nvidia.com/gpu": GPUS_PER_NODE}},
        }
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"nodeSelector": {"pool": POOL}, "containers": [container]},
            },
        }

    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running"}
    if priority_class is not None:
        run_policy["schedulingPolicy"] = {"priorityClass": priority_class}
    replicas = {"Master": replica(1, kwok.run_seconds_annotation(int(seconds)))}
    if pods > 1:
        replicas["Worker"] = replica(pods - 1, {})
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": replicas},
    }


def team_quota(name: str, namespace: str, nominal_gpus: int) -> dict[str, Any]:
    """A TeamQuota of ``nominal_gpus`` in the benchmark's cohort, borrowing unlimited."""
    return {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": name},
        "spec": {"namespaces": [namespace], "cohort": POOL, "nominalGPUs": nominal_gpus},
    }


def pod_names(job: str, pods: int) -> list[str]:
    """The gang's pod names, Master first."""
    return [f"{job}-master-0"] + [f"{job}-worker-{i}" for i in range(pods - 1)]


# ------------------------------------------------------------------ observing


class Pods:
    """Every pod's event times (monotonic), from one cluster-wide watch.

    ``running[ns]`` is the step series (time, pods Running and not being deleted) of a namespace,
    ``allocated[ns]`` the same for pods that hold their GPUs (created, not ended, not gone).
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self.added: dict[tuple[str, str], float] = {}
        self.started: dict[tuple[str, str], float] = {}  # first seen Running
        self.succeeded: dict[tuple[str, str], float] = {}
        self.deleting: dict[tuple[str, str], float] = {}
        self.gone: dict[tuple[str, str], float] = {}
        self.live: dict[str, set[str]] = {}
        self.running: dict[str, list[tuple[float, int]]] = {}
        self.present: dict[str, set[str]] = {}  # pods that hold GPUs: not ended, not gone
        self.allocated: dict[str, list[tuple[float, int]]] = {}
        self.ready = asyncio.Event()

    def _update(self, event: dict[str, Any], now: float) -> None:
        obj = event["object"]
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        self.added.setdefault(key, now)
        phase = obj.get("status", {}).get("phase")
        if phase == "Running":
            self.started.setdefault(key, now)
        if phase == "Succeeded":
            self.succeeded.setdefault(key, now)
        if meta.get("deletionTimestamp"):
            self.deleting.setdefault(key, now)
        if event["type"] == "DELETED":
            self.gone.setdefault(key, now)
        gone = event["type"] == "DELETED"
        alive = phase == "Running" and not meta.get("deletionTimestamp") and not gone
        self._step(self.live, self.running, key, alive, now)
        holds = not gone and phase not in ("Succeeded", "Failed")
        self._step(self.present, self.allocated, key, holds, now)

    @staticmethod
    def _step(
        sets: dict[str, set[str]],
        series: dict[str, list[tuple[float, int]]],
        key: tuple[str, str],
        member: bool,
        now: float,
    ) -> None:
        members = sets.setdefault(key[0], set())
        before = len(members)
        (members.add if member else members.discard)(key[1])
        if len(members) != before:
            series.setdefault(key[0], [(0.0, 0)]).append((now, len(members)))

    async def run(self) -> None:
        version = ""
        while True:
            url = f"{self.api.server}/api/v1/pods?watch=true&allowWatchBookmarks=true"
            if version:
                url += f"&resourceVersion={version}"
            timeout = aiohttp.ClientTimeout(total=None)
            async with self.api.session.get(url, timeout=timeout) as response:
                self.ready.set()
                async for line in response.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        self._update(event, time.monotonic())

    def count(self, namespace: str, prefix: str = "") -> int:
        """Pods Running (not being deleted) in ``namespace`` now, named ``prefix...``."""
        return sum(name.startswith(prefix) for name in self.live.get(namespace, ()))

    def all_running(self, namespace: str, names: Sequence[str]) -> bool:
        """Whether every pod named is Running now."""
        live = self.live.get(namespace, set())
        return all(name in live for name in names)


@contextlib.asynccontextmanager
async def watching(api: Api) -> AsyncIterator[Pods]:
    """A running ``Pods`` watch for the duration of the block."""
    pods = Pods(api)
    task = asyncio.create_task(pods.run())
    await pods.ready.wait()
    try:
        yield pods
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def until(condition: Any, within: float, what: str) -> float:
    """Poll ``condition()`` every 50 ms; the monotonic time it held, or raise after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(0.05)
    return time.monotonic()


@contextlib.contextmanager
def controller(plane: ControlPlane, log: Path, *, starvation_seconds: float) -> Any:
    """The real controller process (as ``controller_bench.py`` starts it) for the block."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchgate",
            "controller",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--manage-unowned",
            "--no-leader-elect",
            "--metrics-bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "WARNING",
            "--finish-grace-seconds",
            "0",
            "--starvation-seconds",
            str(starvation_seconds),
        ],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    try:
        yield process
    finally:
        terminate(process, grace=30)


async def submit(api: Api, manifests: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Create the jobs (``SUBMIT_CONCURRENCY`` at once); job name -> when its create returned."""
    done: dict[str, float] = {}

    async def one(manifest: dict[str, Any]) -> None:
        path = JOBS_API.format(namespace=manifest["metadata"]["namespace"])
        status, body = await api.request("POST", path, manifest)
        if status != 201:
            raise RuntimeError(f"creating {manifest['metadata']['name']}: {status} {body}")
        done[manifest["metadata"]["name"]] = time.monotonic()

    await bounded([one(m) for m in manifests], SUBMIT_CONCURRENCY)
    return done


async def delete_job(api: Api, namespace: str, name: str) -> None:
    """Delete a job and its pods at once (foreground deletion is not needed: pods by name)."""
    await api.request("DELETE", JOBS_API.format(namespace=namespace) + f"/{name}")
    await api.request(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0"
        f"&labelSelector=training.kubeflow.org/job-name%3D{name}",
    )


def integral(series: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """The area under a step series between two times."""
    total, last_t, last_v = 0.0, start, 0
    for when, value in series:
        if when > start:
            total += (min(when, end) - last_t) * last_v
            last_t = min(when, end)
        last_v = value
        if when >= end:
            break
    return total + max(0.0, end - last_t) * last_v


# ------------------------------------------------------------------ 1: burst


async def burst_run(
    api: Api, plane: ControlPlane, jobs: Sequence[Job], *, backfill: bool, log: Path
) -> dict[str, Any]:
    """One burst through the controller; makespan and occupancy."""
    namespace = jobs[0].namespace
    manifests = [pytorchjob(j.name, namespace, j.pods, j.seconds) for j in jobs]
    masters = [(namespace, f"{j.name}-master-0") for j in jobs]
    work = sum(j.pods * j.seconds for j in jobs) * GPUS_PER_NODE
    pool_gpus = len(plane_nodes(plane)) * GPUS_PER_NODE
    starvation = NO_STARVATION if backfill else 0
    async with watching(api) as pods:
        with controller(plane, log, starvation_seconds=starvation):
            await asyncio.sleep(3)  # let it list and watch
            started = time.monotonic()
            await submit(api, manifests)
            one_by_one = sum(j.seconds for j in jobs)
            await until(
                lambda: all(m in pods.succeeded for m in masters),
                within=2 * one_by_one + 600,
                what="every Master succeeds",
            )
            end = max(pods.succeeded[m] for m in masters)
        held = integral(pods.allocated.get(namespace, []), started, end) * GPUS_PER_NODE
        first_running = [pods.started[m] - started for m in masters if m in pods.started]
    await clear_namespace(api, namespace)
    makespan = end - started
    return {
        "makespan": round(makespan, 2),
        "occupancy": round(work / (pool_gpus * makespan), 4),
        "allocated_occupancy": round(held / (pool_gpus * makespan), 4),
        "mean_wait": round(statistics.fmean(first_running), 2),
    }


def plane_nodes(plane: ControlPlane) -> list[str]:
    """The benchmark's node names (kept on the plane object by ``main_async``)."""
    return list(getattr(plane, "bench_nodes", []))


async def burst_round(
    api: Api, plane: ControlPlane, args: argparse.Namespace, number: int, workdir: Path
) -> dict[str, Any]:
    """Benchmark 1, one round: the same burst with and without backfill, against the optimum."""
    nodes = len(plane_nodes(plane))
    jobs = burst(args.seed + number, jobs=args.jobs, largest=min(32, nodes), seconds=args.seconds)
    bins = min_bins([j.pods for j in jobs], nodes)
    optimum = bins.count * args.seconds
    result: dict[str, Any] = {
        "pods": sum(j.pods for j in jobs),
        "optimal_makespan": optimum,
        "optimum_proven": bins.proven,
        "lower_bound_makespan": lower_bound(jobs, nodes=nodes),
    }
    for label, backfill in (("backfill", True), ("no_backfill", False)):
        print(f"round {number}: burst of {len(jobs)} gangs, {label}", file=sys.stderr)
        sim = simulate(jobs, nodes=nodes, gpus_per_node=GPUS_PER_NODE, backfill=backfill)
        real = await burst_run(
            api,
            plane,
            jobs,
            backfill=backfill,
            log=workdir / f"controller-burst-{number}-{label}.log",
        )
        real["simulated_makespan"] = sim.makespan
        real["makespan_over_optimum"] = round(real["makespan"] / optimum, 4)
        real["makespan_over_simulated"] = round(real["makespan"] / sim.makespan, 4)
        result[label] = real
        print(
            f"  makespan {real['makespan']:.1f}s (optimum {optimum:.0f}s,"
            f" simulated {sim.makespan:.0f}s)",
            file=sys.stderr,
        )
    result["no_backfill_makespan_over_backfill"] = round(
        result["no_backfill"]["makespan"] / result["backfill"]["makespan"], 4
    )
    return result


# ------------------------------------------------------------------ 2: preemption


async def preemption_rounds(
    api: Api, plane: ControlPlane, args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    """Benchmark 2: high-priority gang submitted -> all its pods Running, with and without victims.

    The pool is kept full of ``bench-low`` gangs of 8 pods. Each round: submit the urgent gang
    (preemption), delete it once Running and wait until the victims are back and Running; then
    delete two low gangs, submit the same urgent gang onto the free half (the baseline), delete
    it, and refill the pool with two new low gangs.
    """
    namespace = "preempt"
    nodes = len(plane_nodes(plane))
    low_size = 8
    low_count = nodes // low_size
    low = [f"low-{i:03d}" for i in range(low_count)]
    rows: list[dict[str, Any]] = []
    async with watching(api) as pods:
        with controller(
            plane, workdir / "controller-preemption.log", starvation_seconds=NO_STARVATION
        ):
            await asyncio.sleep(3)
            await submit(
                api, [pytorchjob(n, namespace, low_size, 3600, priority_class=LOW) for n in low]
            )
            full = low_count * low_size
            await until(lambda: pods.count(namespace, "low-") >= full, 300, "the pool fills")
            made = low_count
            for number in range(1, args.preemption_rounds + 1):
                row: dict[str, Any] = {}
                for label in ("preemption", "plain"):
                    if label == "plain":
                        drop, low = low[:2], low[2:]
                        for name in drop:
                            await delete_job(api, namespace, name)
                        await until(
                            lambda d=drop: all(
                                (namespace, p) in pods.gone
                                for n in d
                                for p in pod_names(n, low_size)
                            ),
                            120,
                            "two low gangs are gone",
                        )
                    urgent = f"urgent-{number:03d}-{label}"
                    names = pod_names(urgent, args.urgent_pods)
                    before = {k for k in pods.deleting if k[0] == namespace}
                    submitted = await submit(
                        api,
                        [
                            pytorchjob(
                                urgent, namespace, args.urgent_pods, 3600, priority_class=HIGH
                            )
                        ],
                    )
                    sent = submitted[urgent]
                    await until(
                        lambda n=names: pods.all_running(namespace, n), 300, f"{urgent} runs"
                    )
                    # the watch's own times, not the 50 ms poll's
                    running = max(pods.started[(namespace, n)] for n in names)
                    evicted = {
                        k: t
                        for k, t in pods.deleting.items()
                        if k[0] == namespace
                        and k[1].startswith("low-")
                        and k not in before
                        and t >= sent
                    }
                    row[label] = {
                        "seconds_to_all_running": round(running - sent, 3),
                        "victim_pods": len(evicted),
                        "seconds_to_first_eviction": (
                            round(min(evicted.values()) - sent, 3) if evicted else None
                        ),
                    }
                    await delete_job(api, namespace, urgent)
                    if label == "plain":
                        new = [f"low-{made + i:03d}" for i in range(2)]
                        made += 2
                        low += new
                        await submit(
                            api,
                            [
                                pytorchjob(n, namespace, low_size, 3600, priority_class=LOW)
                                for n in new
                            ],
                        )
                    # every node held by a low gang again (the victims back, or the new ones)
                    refilled = await until(
                        lambda: pods.count(namespace, "low-") >= full, 300, "the pool fills again"
                    )
                    if label == "preemption":
                        row[label]["victims_running_again_seconds"] = round(refilled - running, 3)
                row["ratio_preemption_to_plain"] = round(
                    row["preemption"]["seconds_to_all_running"]
                    / row["plain"]["seconds_to_all_running"],
                    3,
                )
                print(
                    f"round {number}: preemption {row['preemption']['seconds_to_all_running']}s,"
                    f" plain {row['plain']['seconds_to_all_running']}s",
                    file=sys.stderr,
                )
                rows.append(row)
    await clear_namespace(api, namespace)
    return rows


# ------------------------------------------------------------------ 4: fairness


async def fairness_run(
    api: Api, plane: ControlPlane, jobs: Sequence[Job], *, quotas: bool, log: Path
) -> dict[str, Any]:
    """Both teams' bursts at once; time until each team's Running pods hold its share."""
    nodes = len(plane_nodes(plane))
    share_pods = nodes // 2
    if quotas:
        for team in ("a", "b"):
            status, body = await api.request(
                "POST", QUOTA_API, team_quota(team, f"team-{team}", share_pods * GPUS_PER_NODE)
            )
            if status != 201:
                raise RuntimeError(f"creating TeamQuota {team}: {status} {body}")
    by_team = {"a": [j for j in jobs if j.team == "a"], "b": [j for j in jobs if j.team == "b"]}
    interleaved = [j for pair in zip(by_team["a"], by_team["b"], strict=True) for j in pair]
    manifests = [pytorchjob(j.name, j.namespace, j.pods, j.seconds) for j in interleaved]
    result: dict[str, Any] = {"share_gpus": share_pods * GPUS_PER_NODE}
    longest = max(j.seconds for j in jobs)
    try:
        async with watching(api) as pods:
            with controller(plane, log, starvation_seconds=NO_STARVATION):
                await asyncio.sleep(3)
                started = time.monotonic()
                await submit(api, manifests)
                for team in ("a", "b"):
                    namespace = f"team-{team}"
                    # a team asking for less than its share is done when all its gangs run
                    target = min(share_pods, sum(j.pods for j in by_team[team]))
                    times: dict[str, float | None] = {}
                    for name, fraction in (
                        ("seconds_to_share", 1.0),
                        ("seconds_to_90_percent", 0.9),
                    ):
                        level = fraction * target
                        try:
                            reached = await until(
                                lambda ns=namespace, at=level: pods.count(ns) >= at,
                                3 * longest + 120,
                                f"team {team} holds its share",
                            )
                        except TimeoutError:
                            times[name] = None
                        else:
                            series = pods.running.get(namespace, [])
                            first = next((t for t, v in series if v >= level), reached)
                            times[name] = round(first - started, 3)
                    result[team] = times
    finally:
        for team in ("a", "b"):
            await clear_namespace(api, f"team-{team}")
        if quotas:
            for team in ("a", "b"):
                await api.request("DELETE", f"{QUOTA_API}/{team}")
    return result


async def fairness_round(
    api: Api, plane: ControlPlane, args: argparse.Namespace, number: int, workdir: Path
) -> dict[str, Any]:
    """Benchmark 4, one round: with TeamQuotas, and the same bursts without."""
    nodes = len(plane_nodes(plane))
    jobs = two_teams(
        args.seed + number,
        jobs_per_team=args.team_jobs,
        largest=nodes // 2,
        seconds=args.fair_seconds,
    )
    row: dict[str, Any] = {}
    for label, quotas in (("quotas", True), ("no_quotas", False)):
        print(f"round {number}: two teams, {label}", file=sys.stderr)
        row[label] = await fairness_run(
            api, plane, jobs, quotas=quotas, log=workdir / f"controller-fair-{number}-{label}.log"
        )
        print(f"  {row[label]}", file=sys.stderr)
    return row


# ------------------------------------------------------------------ the run


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """Medians over rounds (with every round's value) of the figures the README quotes."""

    def over(rows: Sequence[Any], *path: str) -> dict[str, Any]:
        values = []
        for row in rows:
            value: Any = row
            for part in path:
                value = value[part]
            values.append(value)
        numbers = [v for v in values if isinstance(v, int | float)]
        return {"median": statistics.median(numbers) if numbers else None, "rounds": values}

    summary: dict[str, Any] = {}
    if "burst" in results:
        rows = results["burst"]
        summary["burst"] = {
            f"{label}_{name}": over(rows, label, name)
            for label in ("backfill", "no_backfill")
            for name in (
                "makespan",
                "occupancy",
                "makespan_over_optimum",
                "makespan_over_simulated",
                "allocated_occupancy",
            )
        }
        summary["burst"]["optimal_makespan"] = over(rows, "optimal_makespan")
        summary["burst"]["no_backfill_makespan_over_backfill"] = over(
            rows, "no_backfill_makespan_over_backfill"
        )
    if "preemption" in results:
        rows = results["preemption"]
        seconds = {
            label: [r[label]["seconds_to_all_running"] for r in rows]
            for label in ("preemption", "plain")
        }
        summary["preemption"] = {
            **{f"{label}_p50": percentile(v, 0.5) for label, v in seconds.items()},
            **{f"{label}_p99": percentile(v, 0.99) for label, v in seconds.items()},
            "ratio_preemption_to_plain": over(rows, "ratio_preemption_to_plain"),
            "victim_pods": over(rows, "preemption", "victim_pods"),
            "seconds_to_first_eviction": over(rows, "preemption", "seconds_to_first_eviction"),
        }
    if "fairness" in results:
        rows = results["fairness"]
        summary["fairness"] = {
            f"{label}_{team}_{name}": over(rows, label, team, name)
            for label in ("quotas", "no_quotas")
            for team in ("a", "b")
            for name in ("seconds_to_share", "seconds_to_90_percent")
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
        labelled = pool_nodes(args.nodes)
        nodes = [
            kwok.gpu_node(
                name,
                gpus=GPUS_PER_NODE,
                labels={"pool": POOL, RACK: labels[RACK], HOSTNAME: labels[HOSTNAME]},
            )
            for name, labels in labelled
        ]
        priority_classes = [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            for name, value in PRIORITIES.items()
        ]
        plane.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": nodes + priority_classes}
            ),
        )
        plane.kubectl("wait", "--for=condition=Ready", "--timeout=120s", "nodes", "--all")
        plane.bench_nodes = [name for name, _ in labelled]  # type: ignore[attr-defined]
        for namespace in ("burst", "preempt", "team-a", "team-b"):
            plane.kubectl("create", "namespace", namespace)
        while plane.kubectl("get", "sa", "default", "-n", "burst", check=False).returncode != 0:
            time.sleep(0.2)
        api = Api(plane)
        results: dict[str, Any] = {}
        try:
            if "burst" in args.only:
                results["burst"] = [
                    await burst_round(api, plane, args, number, workdir)
                    for number in range(1, args.rounds + 1)
                ]
            if "preemption" in args.only:
                results["preemption"] = await preemption_rounds(api, plane, args, workdir)
            if "fairness" in args.only:
                results["fairness"] = [
                    await fairness_round(api, plane, args, number, workdir)
                    for number in range(1, args.rounds + 1)
                ]
        finally:
            await api.close()
            for log in sorted(workdir.glob("controller-*.log")):
                text = log.read_text()
                if "Traceback" in text or "ERROR" in text:
                    print(f"--- {log.name} (last lines)\n{text[-2000:]}", file=sys.stderr)
    return {
        "setup": {
            "load_average_at_end": os.getloadavg(),
            "nodes": args.nodes,
            "gpus_per_node": GPUS_PER_NODE,
            "jobs": args.jobs,
            "seconds": args.seconds,
            "urgent_pods": args.urgent_pods,
            "preemption_rounds": args.preemption_rounds,
            "team_jobs": args.team_jobs,
            "fair_seconds": args.fair_seconds,
            "rounds": args.rounds,
            "seed": args.seed,
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip(),
        },
        "summary": summarise(results),
        "rounds": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default="burst,preemption,fairness",
        help="comma-separated scenarios: burst, preemption, fairness",
    )
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=24, help="gangs in the burst")
    parser.add_argument("--seconds", type=float, default=20.0, help="every burst gang's run time")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of burst and fairness")
    parser.add_argument("--urgent-pods", type=int, default=16)
    parser.add_argument("--preemption-rounds", type=int, default=10)
    parser.add_argument("--team-jobs", type=int, default=12, help="gangs per team")
    parser.add_argument("--fair-seconds", type=float, default=60.0, help="team gangs' run time")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "pool.json")
    args = parser.parse_args()
    args.only = {part.strip() for part in args.only.split(",") if part.strip()}
    unknown = args.only - {"burst", "preemption", "fairness"}
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    if args.nodes < 16 and "preemption" in args.only:
        parser.error("the preemption scenario needs at least 16 nodes (two low gangs of 8 free)")
    if "preemption" in args.only and args.urgent_pods > args.nodes // 2:
        parser.error("--urgent-pods must fit in half the pool (the baseline's free half)")
    with tempfile.TemporaryDirectory(prefix="tg-pool-bench-") as tmp:
        result = asyncio.run(main_async(args, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

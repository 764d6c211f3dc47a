"""The cluster benchmark's scenarios (I/O): one round of burst, the preemption rounds, fairness.

1. ``burst``: the same burst with backfill (``--starvation-seconds`` very large) and without
   (``0``), each against the exact optimum and the simulation's makespan for the same burst.
   Makespan runs from the first submission to the last Master's success.
2. ``preemption``: the pool kept full of ``bench-low`` gangs of 8 pods; a ``bench-high`` gang
   submitted with preemption, then the same gang onto a free half (the baseline).
4. ``fairness``: two teams' bursts at once, with TeamQuotas of half the pool each and without.
5. ``knavigator``: NVIDIA knavigator's gang burst (``workload.knavigator``), with backfill and
   without, against its optimum (270 s at 30 s a pod) and the simulation.

Bursts also report where the live loop loses time between a gang's end and the next gang
Running (``latency``), from the watch's times and the controller's ``admitted`` log lines.

Every figure is computed from the pod watch's own event times (``harness.Pods``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller_bench import clear_namespace

from torchgate.kube.client import KubeClient
from torchgate.kube.errors import ApiError, NotFound
from torchgate_dev.controlplane.cluster import ControlPlane

from .harness import (
    admitted_times,
    controller,
    delete_job,
    plane_nodes,
    submit,
    until,
    watching,
)
from .latency import breakdown, gang_chains
from .manifests import (
    GPUS_PER_NODE,
    HIGH,
    LOW,
    NO_STARVATION,
    QUOTA_API,
    pod_names,
    pytorchjob,
    team_quota,
)
from .optimum import lower_bound, min_bins
from .simulation import simulate
from .stats import integral
from .workload import Job, burst, knavigator, two_teams

# The controller's ``admitted`` lines with their times, for the latency breakdown.
LOG_ADMISSIONS = ("--log-level", "INFO", "--log-format", "json")

# ------------------------------------------------------------------ 1: burst


async def burst_run(
    api: KubeClient,
    plane: ControlPlane,
    jobs: Sequence[Job],
    *,
    backfill: bool,
    log: Path,
    deadline_margin: float | None = None,
    wave_hold_seconds: float = 0.0,
) -> dict[str, Any]:
    """One burst through the controller; makespan and occupancy.

    ``deadline_margin``: every job's ``activeDeadlineSeconds`` is its run time plus this (the
    cycle's reservation for the head gang needs the running gangs' ends); ``None``: no deadline.
    ``wave_hold_seconds``: the controller's ``--wave-hold-seconds``.
    """
    namespace = jobs[0].namespace
    manifests = [
        pytorchjob(j.name, namespace, j.pods, j.seconds, deadline_margin=deadline_margin)
        for j in jobs
    ]
    masters = [(namespace, f"{j.name}-master-0") for j in jobs]
    work = sum(j.pods * j.seconds for j in jobs) * GPUS_PER_NODE
    pool_gpus = len(plane_nodes(plane)) * GPUS_PER_NODE
    starvation = NO_STARVATION if backfill else 0
    async with watching(api) as pods:
        hold = ("--wave-hold-seconds", str(wave_hold_seconds))
        with controller(plane, log, starvation_seconds=starvation, extra=(*LOG_ADMISSIONS, *hold)):
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
        chains = gang_chains(pods.times(namespace), admitted_times(log))
    await clear_namespace(api, namespace)
    makespan = end - started
    return {
        "makespan": round(makespan, 2),
        "occupancy": round(work / (pool_gpus * makespan), 4),
        "allocated_occupancy": round(held / (pool_gpus * makespan), 4),
        "mean_wait": round(statistics.fmean(first_running), 2),
        "latency": breakdown(chains),
        # per gang: seconds from the submission to its Master Running (``simulated_started``
        # beside it), to find where the cluster's order first leaves the simulation's
        "started": {
            m[1].removesuffix("-master-0"): round(pods.started[m] - started, 2)
            for m in masters
            if m in pods.started
        },
    }


async def burst_round(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, number: int, workdir: Path
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
    for label, backfill in modes(args):
        print(f"round {number}: burst of {len(jobs)} gangs, {label}", file=sys.stderr)
        real = await _measured_run(
            api,
            plane,
            args,
            jobs,
            optimum,
            backfill=backfill,
            nodes=nodes,
            log=workdir / f"controller-burst-{number}-{label}.log",
        )
        result[label] = real
        print(
            f"  makespan {real['makespan']:.1f}s (optimum {optimum:.0f}s,"
            f" simulated {real['simulated_makespan']:.0f}s)",
            file=sys.stderr,
        )
    if "no_backfill" in result and "backfill" in result:
        result["no_backfill_makespan_over_backfill"] = round(
            result["no_backfill"]["makespan"] / result["backfill"]["makespan"], 4
        )
    return result


def modes(args: argparse.Namespace) -> list[tuple[str, bool]]:
    """The burst runs ``--modes`` asks for: (label, with backfill)."""
    return [
        (label, label == "backfill") for label in ("backfill", "no_backfill") if label in args.modes
    ]


async def knavigator_round(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, number: int, workdir: Path
) -> dict[str, Any]:
    """Benchmark 5, one round: knavigator's gang burst with and without backfill.

    Its optimum is exact (equal run times): 9 bins of 32 nodes, 270 s at 30 s a pod.
    """
    nodes = len(plane_nodes(plane))
    jobs = knavigator(seconds=args.knavigator_seconds)
    bins = min_bins([j.pods for j in jobs], nodes)
    optimum = bins.count * args.knavigator_seconds
    result: dict[str, Any] = {
        "pods": sum(j.pods for j in jobs),
        "optimal_makespan": optimum,
        "optimum_proven": bins.proven,
    }
    for label, backfill in modes(args):
        print(f"round {number}: knavigator's {len(jobs)} gangs, {label}", file=sys.stderr)
        real = await _measured_run(
            api,
            plane,
            args,
            jobs,
            optimum,
            backfill=backfill,
            nodes=nodes,
            log=workdir / f"controller-kn-{number}-{label}.log",
        )
        result[label] = real
        print(
            f"  makespan {real['makespan']:.1f}s = {real['optimum_over_makespan']:.3f} of the"
            f" optimum {optimum:.0f}s (simulated {real['simulated_makespan']:.0f}s);"
            f" latency {real['latency']}",
            file=sys.stderr,
        )
    return result


async def _measured_run(
    api: KubeClient,
    plane: ControlPlane,
    args: argparse.Namespace,
    jobs: Sequence[Job],
    optimum: float,
    *,
    backfill: bool,
    nodes: int,
    log: Path,
) -> dict[str, Any]:
    """One burst run on the cluster beside its simulation, with the makespan against both."""
    deadlines = args.deadline_margin is not None
    sim = simulate(
        jobs,
        nodes=nodes,
        gpus_per_node=GPUS_PER_NODE,
        backfill=backfill,
        deadlines=deadlines,
        hold_waves=args.wave_hold_seconds > 0,
    )
    real = await burst_run(
        api,
        plane,
        jobs,
        backfill=backfill,
        log=log,
        deadline_margin=args.deadline_margin,
        wave_hold_seconds=args.wave_hold_seconds,
    )
    real["simulated_makespan"] = sim.makespan
    real["simulated_started"] = {key[1]: at for key, at in sim.started.items()}
    real["makespan_over_optimum"] = round(real["makespan"] / optimum, 4)
    real["makespan_over_simulated"] = round(real["makespan"] / sim.makespan, 4)
    real["optimum_over_makespan"] = round(optimum / real["makespan"], 4)
    return real


# ------------------------------------------------------------------ 2: preemption


async def preemption_rounds(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, workdir: Path
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
    api: KubeClient, plane: ControlPlane, jobs: Sequence[Job], *, quotas: bool, log: Path
) -> dict[str, Any]:
    """Both teams' bursts at once; time until each team's Running pods hold its share."""
    nodes = len(plane_nodes(plane))
    share_pods = nodes // 2
    if quotas:
        for team in ("a", "b"):
            quota = team_quota(team, f"team-{team}", share_pods * GPUS_PER_NODE)
            try:
                await api.request("POST", QUOTA_API, body=quota)
            except ApiError as exc:
                raise RuntimeError(f"creating TeamQuota {team}: {exc.status} {exc.body}") from exc
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
                with contextlib.suppress(NotFound):
                    await api.request("DELETE", f"{QUOTA_API}/{team}")
    return result


async def fairness_round(
    api: KubeClient, plane: ControlPlane, args: argparse.Namespace, number: int, workdir: Path
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

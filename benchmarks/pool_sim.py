"""Pool-sharing benchmarks by simulation: the real admission cycle, a simulated clock, no cluster.

Why a simulation beside the cluster benchmark (``pool_bench.py``): on the local control plane a
run takes minutes, its figures include the apiserver's and kwok's delays, and the 2-core machine
makes them noisy. Here ``torchgate.controller.sharing.decide`` (the cycle the admitter runs:
quota, topology placement, preemption) is driven by a deterministic discrete-event loop, so a
burst of hundreds of gangs is decided in well under a second and every figure is exact: it says
what the *decisions* are worth, the cluster run adds what the machinery costs.

The loop (``simulate``): at every instant something changes (a gang ends, a gang is submitted), a
cycle runs over every waiting gang; ``Admit`` starts the gang at once and it ends ``seconds``
later; ``Preempt`` stops the victims (their GPUs free at once, the gang goes back to the queue and
will run its full time again) and starts the preemptor; ``Wait`` leaves it waiting. Without
backfill, the cycle's outcomes are applied only up to the first gang that waits (what the
admitter does with ``--starvation-seconds 0``: nothing behind a waiting gang jumps the queue).

Benchmarks (the numbers are the issue's):

1. ``burst``: a burst of gangs of 1 to 32 whole-node pods (log-uniform sizes, so many small gangs
   and a few large ones) on 32 nodes of 8 GPUs, all submitted at once, each running a fixed time.
   Makespan and GPU occupancy (work done / (pool GPUs x makespan)), with and without backfill,
   against the optimum the workload allows. With one run time ``T`` for every gang the optimum is
   exact: rigid gangs of equal duration can always be started at multiples of ``T`` (all gangs
   starting within one interval ``[kT, (k+1)T)`` run together at the latest of those starts, so
   they fit the pool at once), so the optimal makespan is ``T`` times the fewest bins of 32 nodes
   that hold the gang sizes, which ``min_bins`` finds by a small branch-and-bound (proven optimal
   when it ends within its node budget; the JSON says which). With run times spread over
   ``[T, T + spread]`` only the lower bound ``max(GPU-seconds / pool GPUs, longest gang)`` is
   given.
4. ``fairness``: two teams with a nominal quota of half the pool each (borrowing allowed) submit
   bursts at the same second; the time each takes to hold its share (100 % and 90 % of its
   nominal GPUs), against the same bursts without quotas (priority, creation time, then name:
   the apiserver's creation timestamps have one-second resolution, so a burst submitted "at once"
   is ordered by namespace and name, and the first team takes the pool).

Preemption latency (benchmark 2) is only meaningful on a cluster (it is the time victims take to
go and the preemptor's pods to start; a simulated cycle decides it at once): ``pool_bench.py``.

    .venv/bin/python benchmarks/pool_sim.py --rounds 20 --out bench-results/pool_sim.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from torchgate.controller.quota import Admitted
from torchgate.controller.sharing import Pool, Preempt, Wait, WaitingGang, decide
from torchgate.controller.topology import Topology, build_topology, shape_of
from torchgate.pytorchjob.pool import GPUS, Limit, PreemptionSettings, TeamQuota

GPU = "nvidia.com/gpu"
RACK = "topology.torchgate.io/rack"  # the dev cluster's label
HOSTNAME = "kubernetes.io/hostname"
LEVELS = (RACK, HOSTNAME)
NODES_PER_RACK = 8
EPOCH = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Job:
    """A gang of ``pods`` whole-node pods that runs ``seconds`` once admitted."""

    namespace: str
    name: str
    pods: int
    seconds: float
    team: str | None = None
    priority: int = 0
    submit: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``."""
        return self.namespace, self.name


# ------------------------------------------------------------------ workloads


def gang_size(rng: random.Random, largest: int) -> int:
    """A log-uniform size in 1..largest: as many 1-2 pod gangs as 16-32 pod ones, per octave."""
    return min(largest, int(2 ** rng.uniform(0, math.log2(largest + 1))))


def burst(
    seed: int,
    *,
    jobs: int,
    largest: int = 32,
    seconds: float = 60.0,
    spread: float = 0.0,
    namespace: str = "burst",
    team: str | None = None,
    prefix: str = "job",
) -> list[Job]:
    """``jobs`` gangs of 1..``largest`` pods, run times in ``[seconds, seconds + spread]``."""
    rng = random.Random(seed)
    out = []
    for index in range(jobs):
        size = gang_size(rng, largest)
        run = seconds + (round(rng.uniform(0, spread)) if spread else 0)
        out.append(Job(namespace, f"{prefix}-{index:03d}", size, float(run), team=team))
    return out


def two_teams(
    seed: int,
    *,
    jobs_per_team: int,
    largest: int = 16,
    seconds: float = 60.0,
    spread: float = 0.0,
    b_delay: float = 0.0,
) -> list[Job]:
    """Each team a burst of its own (sizes up to its share); team b's ``b_delay`` seconds later."""
    a = burst(
        seed,
        jobs=jobs_per_team,
        largest=largest,
        seconds=seconds,
        spread=spread,
        namespace="team-a",
        team="a",
        prefix="a",
    )
    b = burst(
        seed + 10_000,
        jobs=jobs_per_team,
        largest=largest,
        seconds=seconds,
        spread=spread,
        namespace="team-b",
        team="b",
        prefix="b",
    )
    return a + [replace(job, submit=b_delay) for job in b]


def halves(pool_gpus: int) -> dict[str, TeamQuota]:
    """Teams a and b, one cohort, each half the pool nominal, borrowing unlimited."""
    half = pool_gpus // 2 * 1000
    return {name: TeamQuota(name, (f"team-{name}",), {GPUS: Limit(half)}) for name in ("a", "b")}


# ------------------------------------------------------------------ optimum


def lower_bound(jobs: Sequence[Job], *, nodes: int) -> float:
    """``max(total node-seconds / nodes, longest gang)``: no schedule ends sooner."""
    work = sum(job.pods * job.seconds for job in jobs)
    return max(work / nodes, max(job.seconds for job in jobs))


@dataclass(frozen=True, slots=True)
class Bins:
    """The fewest bins found, the lower bound, and whether the search proved ``count`` optimal."""

    count: int
    bound: int
    proven: bool


def first_fit_decreasing(sizes: Sequence[int], capacity: int) -> int:
    """Bins used by first-fit decreasing (an upper bound)."""
    room: list[int] = []
    for size in sorted(sizes, reverse=True):
        for i, left in enumerate(room):
            if left >= size:
                room[i] -= size
                break
        else:
            room.append(capacity - size)
    return len(room)


def min_bins(sizes: Sequence[int], capacity: int, *, budget: int = 200_000) -> Bins:
    """The fewest bins of ``capacity`` holding ``sizes``, by branch and bound from FFD.

    Items go in decreasing order into an open bin (bins with equal room are one branch) or a new
    bin; a branch is cut when the bins used plus the items left (by volume) cannot beat the best.
    ``proven`` is ``False`` when the ``budget`` of search nodes ran out first.
    """
    if any(size > capacity for size in sizes):
        raise ValueError("an item is larger than a bin")
    items = sorted(sizes, reverse=True)
    bound = math.ceil(sum(items) / capacity)
    best = first_fit_decreasing(items, capacity)
    if best == bound:
        return Bins(best, bound, True)
    left_after = [sum(items[i:]) for i in range(len(items) + 1)]
    nodes = 0

    def search(index: int, room: list[int]) -> bool:
        nonlocal best, nodes
        nodes += 1
        if nodes > budget:
            return False
        if index == len(items):
            best = min(best, len(room))
            return True
        free = sum(room)
        if len(room) + math.ceil(max(0, left_after[index] - free) / capacity) >= best:
            return True
        size = items[index]
        tried: set[int] = set()
        for i, left in enumerate(room):
            if left >= size and left not in tried:
                tried.add(left)
                room[i] -= size
                finished = search(index + 1, room)
                room[i] += size
                if not finished:
                    return False
                if best == bound:
                    return True
        if len(room) + 1 < best:
            room.append(capacity - size)
            finished = search(index + 1, room)
            room.pop()
            if not finished:
                return False
        return True

    proven = search(0, [])
    return Bins(best, bound, proven or best == bound)


# ------------------------------------------------------------------ the simulation


@dataclass(slots=True)
class _Running:
    job: Job
    nodes: dict[str, str]
    start: float
    end: float


@dataclass(slots=True)
class Outcome:
    """What happened to a workload (times in simulated seconds from the first submission)."""

    makespan: float
    gpu_seconds_done: float  # work of gangs that ran to the end
    gpu_seconds_held: float  # including work lost to preemption
    pool_gpus: int
    finished: dict[tuple[str, str], float]
    started: dict[tuple[str, str], float]
    preemptions: int
    cycles: int
    decide_cpu_seconds: float
    # (time, GPUs in use) after each change, per team (key None: everyone)
    usage: dict[str | None, list[tuple[float, int]]] = field(default_factory=dict)

    @property
    def occupancy(self) -> float:
        """Work done over what the pool could have done in the makespan."""
        return self.gpu_seconds_done / (self.pool_gpus * self.makespan)


def pool_nodes(count: int) -> list[tuple[str, dict[str, str]]]:
    """``count`` nodes ``n000``..., racks of ``NODES_PER_RACK`` (the cluster run uses the same)."""
    return [
        (f"n{i:03d}", {RACK: f"r{i // NODES_PER_RACK}", HOSTNAME: f"n{i:03d}"})
        for i in range(count)
    ]


def created(submit: float) -> str:
    """The creationTimestamp of a job submitted at ``submit``: whole seconds, as the apiserver."""
    return (EPOCH + timedelta(seconds=int(submit))).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gang(job: Job, gpus_per_node: int) -> WaitingGang:
    pods = (f"{job.name}-master-0", *(f"{job.name}-worker-{i}" for i in range(job.pods - 1)))
    requests = {pod: {GPU: gpus_per_node * 1000} for pod in pods}
    return WaitingGang(
        key=job.key,
        team=job.team,
        priority=job.priority,
        created=created(job.submit),
        pods=pods,
        requests=requests,
        usage={GPUS: len(pods) * gpus_per_node * 1000},
        shape=shape_of(requests.values()),
    )


def simulate(
    jobs: Sequence[Job],
    *,
    nodes: int = 32,
    gpus_per_node: int = 8,
    backfill: bool = True,
    teams: Mapping[str, TeamQuota] | None = None,
    preemption: PreemptionSettings | None = None,
) -> Outcome:
    """Run ``jobs`` through the admission cycle until every one has finished (module docstring)."""
    labelled = pool_nodes(nodes)
    topology: Topology = build_topology(LEVELS, labelled)
    free = {name: {GPU: gpus_per_node * 1000} for name, _ in labelled}
    per_pod = gpus_per_node * 1000
    gangs = {job.key: _gang(job, gpus_per_node) for job in jobs}
    by_key = {job.key: job for job in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.key))
    waiting: dict[tuple[str, str], Job] = {}
    running: dict[tuple[str, str], _Running] = {}
    ends: list[tuple[float, tuple[str, str]]] = []
    result = Outcome(0.0, 0.0, 0.0, nodes * gpus_per_node, {}, {}, 0, 0, 0.0)
    in_use: dict[str | None, int] = {None: 0}
    for team in {job.team for job in jobs}:
        in_use[team] = 0
    result.usage = {team: [(0.0, 0)] for team in in_use}

    def record(now: float, team: str | None, delta: int) -> None:
        for who in {None, team}:
            in_use[who] += delta
            series = result.usage[who]
            if series[-1][0] == now:
                series[-1] = (now, in_use[who])
            else:
                series.append((now, in_use[who]))

    def start(job: Job, placed: Mapping[str, str], now: float) -> None:
        for node in placed.values():
            free[node][GPU] -= per_pod
        running[job.key] = _Running(job, dict(placed), now, now + job.seconds)
        result.started.setdefault(job.key, now)
        heapq.heappush(ends, (now + job.seconds, job.key))
        del waiting[job.key]
        record(now, job.team, job.pods * gpus_per_node)

    def stop(key: tuple[str, str], now: float) -> _Running:
        gone = running.pop(key)
        for node in gone.nodes.values():
            free[node][GPU] += per_pod
        result.gpu_seconds_held += (now - gone.start) * gone.job.pods * gpus_per_node
        record(now, gone.job.team, -gone.job.pods * gpus_per_node)
        return gone

    now, next_arrival = 0.0, 0
    while True:
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit <= now:
            waiting[arrivals[next_arrival].key] = arrivals[next_arrival]
            next_arrival += 1
        # The victims' pods going is a change too: cycle again at once until nothing is preempted.
        again = bool(waiting)
        while again:
            again = False
            pool = Pool(
                topology=topology,
                free=free,
                teams=teams or {},
                admitted=[_admitted(r, gpus_per_node) for r in running.values()],
                preemption=preemption or PreemptionSettings(),
            )
            started_cpu = time.thread_time()
            outcomes = decide(pool, [gangs[key] for key in waiting], now)
            result.decide_cpu_seconds += time.thread_time() - started_cpu
            result.cycles += 1
            for outcome in outcomes:
                if isinstance(outcome, Wait):
                    if not backfill:
                        break
                    continue
                if isinstance(outcome, Preempt):
                    for victim in outcome.victims:
                        stop(victim, now)
                        waiting[victim] = by_key[victim]
                        result.preemptions += 1
                    again = True
                start(by_key[outcome.key], outcome.nodes, now)
            if result.preemptions > 100 * len(jobs):
                raise RuntimeError("preemptions do not settle")
        # Stale entries (a preempted gang's old end) are skipped by their end time.
        while ends and (ends[0][1] not in running or running[ends[0][1]].end != ends[0][0]):
            heapq.heappop(ends)
        upcoming = [t for t in (ends[0][0] if ends else None,) if t is not None]
        if next_arrival < len(arrivals):
            upcoming.append(arrivals[next_arrival].submit)
        if not upcoming:
            if waiting:
                stuck = ", ".join("/".join(k) for k in sorted(waiting)[:5])
                raise RuntimeError(f"gangs can never be admitted: {stuck}")
            break
        now = min(upcoming)
        while ends and ends[0][0] <= now:
            _, key = heapq.heappop(ends)
            if key in running and running[key].end == now:
                done = stop(key, now)
                result.finished[key] = now
                result.gpu_seconds_done += done.job.seconds * done.job.pods * gpus_per_node
    result.makespan = max(result.finished.values(), default=0.0)
    return result


def _admitted(run: _Running, gpus_per_node: int) -> Admitted:
    return Admitted(
        key=run.job.key,
        team=run.job.team,
        priority=run.job.priority,
        usage={GPUS: run.job.pods * gpus_per_node * 1000},
        admitted_at=run.start,
        nodes=run.nodes,
        requests={pod: {GPU: gpus_per_node * 1000} for pod in run.nodes},
    )


# ------------------------------------------------------------------ figures


def first_time_at_least(series: Sequence[tuple[float, int]], level: float) -> float | None:
    """The first time a step series reaches ``level`` (``None``: never)."""
    for when, value in series:
        if value >= level:
            return when
    return None


def burst_figures(jobs: Sequence[Job], *, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """Benchmark 1 for one burst: with and without backfill against the optimum."""
    bound = lower_bound(jobs, nodes=nodes)
    equal = len({job.seconds for job in jobs}) == 1
    bins = min_bins([job.pods for job in jobs], nodes) if equal else None
    optimum = bins.count * jobs[0].seconds if bins is not None else None
    best = optimum if optimum is not None else bound
    work = sum(job.pods * job.seconds for job in jobs) * gpus_per_node
    figures: dict[str, Any] = {
        "jobs": len(jobs),
        "pods": sum(job.pods for job in jobs),
        "gpu_seconds": work,
        "lower_bound_makespan": bound,
        "optimal_makespan": optimum,
        "optimum_proven": bins.proven if bins is not None else None,
        "optimum_kind": (
            "exact (equal run times: bin packing)"
            if bins is not None and bins.proven
            else "best found, not proven"
            if bins is not None
            else "lower bound only (run times differ)"
        ),
        "best_possible_occupancy": work / (nodes * gpus_per_node * best),
    }
    for label, backfill in (("backfill", True), ("no_backfill", False)):
        run = simulate(jobs, nodes=nodes, gpus_per_node=gpus_per_node, backfill=backfill)
        waits = [run.started[job.key] for job in jobs]
        figures[label] = {
            "makespan": run.makespan,
            "occupancy": round(run.occupancy, 4),
            "makespan_over_best": round(run.makespan / best, 4),
            "mean_wait": round(statistics.fmean(waits), 2),
            "cycles": run.cycles,
            "decide_cpu_ms_per_cycle": round(run.decide_cpu_seconds / max(run.cycles, 1) * 1e3, 3),
        }
    figures["no_backfill_makespan_over_backfill"] = round(
        figures["no_backfill"]["makespan"] / figures["backfill"]["makespan"], 4
    )
    return figures


def fairness_figures(jobs: Sequence[Job], *, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """Benchmark 4 for one pair of bursts: time to each team's share, with and without quotas.

    Times count from the team's own submission; ``lost_gpu_seconds`` is work preempted gangs had
    done and must do again.
    """
    pool_gpus = nodes * gpus_per_node
    share = pool_gpus // 2
    submitted = {job.team: job.submit for job in jobs}
    out: dict[str, Any] = {"share_gpus": share}
    for label, teams in (("quotas", halves(pool_gpus)), ("no_quotas", None)):
        run = simulate(jobs, nodes=nodes, gpus_per_node=gpus_per_node, teams=teams)
        row: dict[str, Any] = {
            "makespan": run.makespan,
            "preemptions": run.preemptions,
            "lost_gpu_seconds": run.gpu_seconds_held - run.gpu_seconds_done,
            "lost_share_of_work": round(
                (run.gpu_seconds_held - run.gpu_seconds_done) / run.gpu_seconds_done, 4
            ),
        }
        for team in ("a", "b"):
            series = [(t, v) for t, v in run.usage[team] if t >= submitted[team]]
            reached = first_time_at_least(series, share)
            nearly = first_time_at_least(series, 0.9 * share)
            row[team] = {
                "seconds_to_share": None if reached is None else reached - submitted[team],
                "seconds_to_90_percent": None if nearly is None else nearly - submitted[team],
            }
        out[label] = row
    return out


def median_of(rows: Iterable[Any]) -> float | None:
    """Median of the values that are numbers (``None``: no value)."""
    values = [v for v in rows if isinstance(v, int | float)]
    return statistics.median(values) if values else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """All scenarios over ``args.rounds`` seeds; medians over rounds with every round's value."""
    started = time.perf_counter()
    largest = min(32, args.nodes)
    fixed = [
        burst_figures(
            burst(args.seed + r, jobs=args.jobs, largest=largest, seconds=args.seconds),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]
    mixed = [
        burst_figures(
            burst(
                args.seed + r,
                jobs=args.jobs,
                largest=largest,
                seconds=args.seconds,
                spread=args.spread,
            ),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]
    fair = [
        fairness_figures(
            two_teams(
                args.seed + r,
                jobs_per_team=args.team_jobs,
                largest=args.nodes // 2,
                seconds=args.seconds,
                spread=args.spread,
            ),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]
    # Team a has borrowed the whole pool when team b submits: b's share comes back by reclaim.
    late = [
        fairness_figures(
            two_teams(
                args.seed + r,
                jobs_per_team=args.team_jobs,
                largest=args.nodes // 2,
                seconds=args.seconds,
                spread=args.spread,
                b_delay=args.seconds / 2,
            ),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        )
        for r in range(args.rounds)
    ]

    def over(rows: Sequence[dict[str, Any]], *path: str) -> dict[str, Any]:
        values = []
        for row in rows:
            value: Any = row
            for part in path:
                value = value[part]
            values.append(value)
        return {"median": median_of(values), "rounds": values}

    def burst_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            "optimum_proven_rounds": sum(bool(r["optimum_proven"]) for r in rows),
            "best_possible_occupancy": over(rows, "best_possible_occupancy"),
            **{
                f"{label}_{name}": over(rows, label, name)
                for label in ("backfill", "no_backfill")
                for name in ("occupancy", "makespan_over_best", "makespan", "mean_wait")
            },
            "no_backfill_makespan_over_backfill": over(rows, "no_backfill_makespan_over_backfill"),
        }

    def fairness_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        times = {
            f"{label}_{team}_{name}": over(rows, label, team, name)
            for label in ("quotas", "no_quotas")
            for team in ("a", "b")
            for name in ("seconds_to_share", "seconds_to_90_percent")
        }
        return {
            **times,
            "quotas_preemptions": over(rows, "quotas", "preemptions"),
            "quotas_lost_gpu_seconds": over(rows, "quotas", "lost_gpu_seconds"),
            "quotas_lost_share_of_work": over(rows, "quotas", "lost_share_of_work"),
        }

    summary = {
        "burst_fixed_run_time": burst_summary(fixed),
        "burst_spread_run_time": burst_summary(mixed),
        "fairness_at_once": fairness_summary(fair),
        "fairness_b_while_a_borrows": fairness_summary(late),
    }
    return {
        "setup": {
            "nodes": args.nodes,
            "gpus_per_node": args.gpus_per_node,
            "jobs": args.jobs,
            "team_jobs": args.team_jobs,
            "seconds": args.seconds,
            "spread": args.spread,
            "rounds": args.rounds,
            "seed": args.seed,
        },
        "summary": summary,
        "rounds": {
            "burst_fixed_run_time": fixed,
            "burst_spread_run_time": mixed,
            "fairness_at_once": fair,
            "fairness_b_while_a_borrows": late,
        },
        "wall_seconds": round(time.perf_counter() - started, 2),
    }


def parser() -> argparse.ArgumentParser:
    """The command line."""
    parse = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parse.add_argument("--nodes", type=int, default=32)
    parse.add_argument("--gpus-per-node", type=int, default=8)
    parse.add_argument("--jobs", type=int, default=60, help="gangs in the burst (benchmark 1)")
    parse.add_argument("--team-jobs", type=int, default=30, help="gangs per team (benchmark 4)")
    parse.add_argument("--seconds", type=float, default=60.0, help="every gang's run time")
    parse.add_argument("--spread", type=float, default=120.0, help="run times vary this much")
    parse.add_argument("--rounds", type=int, default=20, help="bursts (seeds) per scenario")
    parse.add_argument("--seed", type=int, default=16)
    parse.add_argument("--out", type=Path, default=None)
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print the summary, write the JSON."""
    args = parser().parse_args(argv)
    if args.rounds < 1 or args.jobs < 1 or args.team_jobs < 1 or args.nodes < 2:
        parser().error("--rounds, --jobs, --team-jobs must be at least 1, --nodes at least 2")
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(json.dumps(result["summary"], indent=2), file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The discrete-event simulation over ``torchgate.controller.admission.decide.decide`` (pure).

At every instant something changes (a gang ends, a gang is submitted), a cycle runs over every
waiting gang; ``Admit`` starts the gang at once and it ends ``seconds`` later; ``Preempt`` stops
the victims (their GPUs free at once, the gang goes back to the queue and will run its full time
again) and starts the preemptor; ``Wait`` leaves it waiting. Without backfill, the cycle's
outcomes are applied only up to the first gang that waits (what the admitter does with
``--starvation-seconds 0``: nothing behind a waiting gang jumps the queue). The victims' pods
going is a change too, so a cycle that preempted runs again at once. Creation timestamps have
whole-second resolution, as the apiserver's. The only clock read is the thread's CPU time spent
in ``decide``, reported as a figure.

``end_spread`` models the live loop's uneven ends: each gang ends up to that many seconds after
its run time (the same draw for the same gang and start), as on the cluster, where kwok ends a
Master at its whole-second start time plus the run time, so the gangs of one wave free their
nodes a second or so apart and the cycles in between see part of the wave. A gang's deadline
(``deadlines``) covers it: run time plus ``end_spread``.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from torchgate.controller.admission.decide import Pool, Preempt, Wait, WaitingGang, decide
from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import Capacity, Topology, build_topology, shape_of
from torchgate.pytorchjob.pool import GPUS, PreemptionSettings, TeamQuota

from .workload import GPU, LEVELS, Job, pool_nodes

EPOCH = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


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


def created(submit: float) -> str:
    """The creationTimestamp of a job submitted at ``submit``: whole seconds, as the apiserver."""
    return (EPOCH + timedelta(seconds=int(submit))).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gang(
    job: Job, gpus_per_node: int, *, deadlines: bool = False, end_spread: float = 0.0
) -> WaitingGang:
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
        run_limit=job.seconds + end_spread if deadlines else None,
    )


def simulate(
    jobs: Sequence[Job],
    *,
    nodes: int = 32,
    gpus_per_node: int = 8,
    backfill: bool = True,
    teams: Mapping[str, TeamQuota] | None = None,
    preemption: PreemptionSettings | None = None,
    deadlines: bool = False,
    end_spread: float = 0.0,
    hold_waves: bool = False,
) -> Outcome:
    """Run ``jobs`` through the admission cycle until every one has finished (module docstring).

    ``deadlines``: every gang's run time is known to the cycle (as a job's
    ``activeDeadlineSeconds``), so its backfill reserves the head gang's nodes. ``hold_waves``:
    the cycle waits for the rest of a freed wave (``Pool.hold_waves``; the admitter bounds the
    wait in time, the simulation's ends are at most ``end_spread`` apart).
    """
    labelled = pool_nodes(nodes)
    topology: Topology = build_topology(LEVELS, labelled)
    free = {name: {GPU: gpus_per_node * 1000} for name, _ in labelled}
    per_pod = gpus_per_node * 1000
    gangs = {
        job.key: _gang(job, gpus_per_node, deadlines=deadlines, end_spread=end_spread)
        for job in jobs
    }
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
        late = random.Random(f"{job.key}@{now}").uniform(0, end_spread) if end_spread else 0.0
        running[job.key] = _Running(job, dict(placed), now, now + job.seconds + late)
        result.started.setdefault(job.key, now)
        heapq.heappush(ends, (now + job.seconds + late, job.key))
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
                capacity=Capacity(topology, free),
                teams=teams or {},
                admitted=[
                    _admitted(r, gpus_per_node, deadlines, end_spread) for r in running.values()
                ],
                preemption=preemption or PreemptionSettings(),
                hold_waves=hold_waves,
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


def _admitted(run: _Running, gpus_per_node: int, deadlines: bool, end_spread: float) -> Admitted:
    return Admitted(
        key=run.job.key,
        team=run.job.team,
        priority=run.job.priority,
        usage={GPUS: run.job.pods * gpus_per_node * 1000},
        admitted_at=run.start,
        nodes=run.nodes,
        requests={pod: {GPU: gpus_per_node * 1000} for pod in run.nodes},
        ends_by=run.start + run.job.seconds + end_spread if deadlines else None,
    )

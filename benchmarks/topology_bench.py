"""Benchmark one pool-sharing admission cycle at fleet sizes: 1,000 to 10,000 nodes, 3 levels.

Why these shapes: issue 16 set the first target (100 waiting gangs on 1,000 nodes with three
topology levels, at most 10 ms per cycle); issue 23 asks for the same cycle at fleet size
(at most 50 ms at 10,000 nodes and 1,000 waiting gangs) and when every team is at its quota (at
most 20 ms there: nothing can be admitted, so the cycle should cost next to nothing). The admitter
runs a cycle whenever capacity frees up, so this is the latency between a pod ending and the next
gang being admitted, and the CPU it costs the controller per event.

The pool: ``nodes / 250`` blocks x 10 racks x 25 hosts (levels ``torchgate.io/block``,
``torchgate.io/rack``, ``kubernetes.io/hostname``), 8 GPUs, 96 CPUs, 1 TiB and 110 pods per
node. Three teams share it, with quotas grown with the pool (per 1,000 nodes: nominal 3,000 /
3,000 / 2,000 GPUs, borrowing limit 1,000 for the third). About 70 % of the GPUs are held by
running gangs of mixed sizes (1 to 32 whole-node pods, or 1 to 8 pods of 1, 2 or 4 GPUs),
priorities 0, 100 and 1,000, randomly admitted over the last hour. The waiting gangs have the same
mix of sizes and priorities; a third require a rack, a third prefer one. In the ``at-quota`` cases
every team's nominal quota is what it holds and it may borrow nothing, so every waiting gang
waits for quota unless it preempts a lower-priority gang of its own team. Fixed seed, so every
round decides the same cycle, and the outcome counts say whether two versions decide alike.

Measured per case: the cycle as the admitter runs it (``admission.decide`` over the facts it is
given), CPU and wall time, median and p90 over ``--rounds``; ``build_topology`` (done once per
node set change, not per cycle) separately. Prints JSON; asserts nothing.

``--gc controller`` runs the cycles under the controller process's garbage-collector thresholds
(``controller.command.GC_THRESHOLDS``) instead of CPython's defaults, which every figure so far
kept. The JSON's ``build`` says which: the thresholds, and whether the cycle's modules ran
compiled by mypyc (their ``__file__`` is an extension module) or interpreted.

    .venv/bin/python benchmarks/topology_bench.py                       # every case
    .venv/bin/python benchmarks/topology_bench.py --cases 1000x100 --rounds 50
    .venv/bin/python benchmarks/topology_bench.py --cases 10000x1000-at-quota --rounds 5
    .venv/bin/python benchmarks/topology_bench.py --gc controller   # the controller's GC
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from torchgate.controller import command
from torchgate.controller.admission import decide as decide_module
from torchgate.controller.admission import topology as topology_module
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.decide import Admit, Pool, Preempt, Wait, WaitingGang, decide
from torchgate.controller.admission.nodes import PodDemand
from torchgate.controller.admission.quota import Admitted, TeamTotals, usage_by_team
from torchgate.controller.admission.topology import Capacity, build_topology, shape_of
from torchgate.controller.admission.waiting import GangRequest
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.pool import (
    GPUS,
    Limit,
    PoolSettings,
    PreemptionSettings,
    TeamQuota,
    TopologyRequest,
    TopologySettings,
)

GPU = "nvidia.com/gpu"
LEVELS = ("torchgate.io/block", "torchgate.io/rack", "kubernetes.io/hostname")
NODE = {GPU: 8000, "cpu": 96000, "memory": 2**40 * 1000, "pods": 110000}
NODES_PER_BLOCK = 250  # 10 racks x 25 hosts
QUOTA_PER_1000_NODES = {"vision": (3_000, None), "speech": (3_000, None), "ads": (2_000, 1_000)}
PRIORITIES = (0, 100, 1000)
SIZES = (1000, 4000, 10000)
WAITING = (100, 1000)

Labelled = list[tuple[str, dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Case:
    """One benchmark case: pool size, waiting gangs, and whether every team is at its quota."""

    nodes: int
    waiting: int
    at_quota: bool = False

    @property
    def name(self) -> str:
        return f"{self.nodes}x{self.waiting}" + ("-at-quota" if self.at_quota else "")


CASES = (
    *(Case(nodes, waiting) for nodes in SIZES for waiting in WAITING),
    *(Case(nodes, waiting, at_quota=True) for nodes in SIZES for waiting in WAITING),
)


def teams(nodes: int) -> dict[str, TeamQuota]:
    """The three teams, their quotas grown with the pool."""
    scale = nodes / 1000
    out = {}
    for name, (nominal, borrowing) in QUOTA_PER_1000_NODES.items():
        limit = Limit(
            int(nominal * scale) * 1000,
            None if borrowing is None else int(borrowing * scale) * 1000,
        )
        out[name] = TeamQuota(name, (name,), {GPUS: limit})
    return out


def at_quota(quotas: Mapping[str, TeamQuota], admitted: Sequence[Admitted]) -> dict[str, TeamQuota]:
    """The same teams, each with a nominal quota of exactly what it holds and no borrowing."""
    usage = usage_by_team(admitted)
    return {
        name: TeamQuota(name, team.namespaces, {GPUS: Limit(usage.get(name, {}).get(GPUS, 0), 0)})
        for name, team in quotas.items()
    }


def _gang_shape(rng: random.Random) -> tuple[int, int]:
    """(pods, GPUs per pod): whole-node gangs of 1-32 pods, or small pods."""
    if rng.random() < 0.6:
        return rng.choice((1, 2, 4, 8, 16, 32)), 8
    return rng.randint(1, 8), rng.choice((1, 2, 4))


def _requests(gpus: int) -> dict[str, int]:
    return {GPU: gpus * 1000, "cpu": gpus * 11000, "memory": gpus * 2**36 * 1000, "pods": 1000}


def labelled_nodes(count: int) -> Labelled:
    """``count`` nodes (a multiple of 250) labelled block / rack / host."""
    if count % NODES_PER_BLOCK:
        raise ValueError(f"nodes must be a multiple of {NODES_PER_BLOCK}: {count}")
    return [
        (
            f"n-{b}-{r}-{h}",
            {LEVELS[0]: f"b{b}", LEVELS[1]: f"b{b}r{r}", LEVELS[2]: f"n-{b}-{r}-{h}"},
        )
        for b in range(count // NODES_PER_BLOCK)
        for r in range(10)
        for h in range(25)
    ]


def _place(
    free: dict[str, dict[str, int]],
    names: Sequence[str],
    start: int,
    pods: int,
    gpus: int,
    tag: str,
) -> dict[str, str]:
    """Pod -> node for up to ``pods`` pods of ``gpus`` GPUs, first fit from node ``start`` on."""
    placement: dict[str, str] = {}
    cursor = start
    for pod in range(pods):
        for _ in range(len(names)):
            node = names[cursor % len(names)]
            cursor += 1
            if free[node][GPU] >= gpus * 1000:
                placement[f"{tag}-{pod}"] = node
                for key, value in _requests(gpus).items():
                    free[node][key] -= value
                break
    return placement


def _running(
    rng: random.Random,
    free: dict[str, dict[str, int]],
    names: Sequence[str],
    quotas: Mapping[str, TeamQuota],
    priorities: tuple[int, ...],
) -> list[Admitted]:
    """Running gangs holding about 70 % of the GPUs, teams drawn at random."""
    admitted: list[Admitted] = []
    held, target = 0, int(0.7 * 8 * len(names))
    index = 0
    while held < target:
        pods, gpus = _gang_shape(rng)
        team = rng.choice(list(quotas))
        placement = _place(free, names, rng.randrange(0, len(names)), pods, gpus, f"r{index}")
        admitted.append(_admitted(rng, team, index, placement, gpus, priorities))
        held += len(placement) * gpus
        index += 1
    return admitted


def _running_to_quota(
    rng: random.Random,
    free: dict[str, dict[str, int]],
    names: Sequence[str],
    quotas: Mapping[str, TeamQuota],
    priorities: tuple[int, ...],
) -> list[Admitted]:
    """Running gangs filling each team's nominal quota (the quotas hold every GPU of the pool).

    A gang goes to a team with room for it in its nominal quota; gangs are drawn until none fits
    any team any more (or the pool has no room left for it).
    """
    admitted: list[Admitted] = []
    used = dict.fromkeys(quotas, 0)
    room = [name for name in names]  # nodes with a free GPU, in pool order
    index, misses = 0, 0
    while misses < 200 and room:
        pods, gpus = _gang_shape(rng)
        need = pods * gpus * 1000
        open_ = [t for t, q in quotas.items() if used[t] + need <= q.limits[GPUS].nominal]
        if not open_:
            misses += 1
            continue
        team = rng.choice(open_)
        placement = _place(free, room, rng.randrange(0, len(room)), pods, gpus, f"r{index}")
        room = [name for name in room if free[name][GPU] > 0]
        if not placement:
            misses += 1
            continue
        misses = 0
        admitted.append(_admitted(rng, team, index, placement, gpus, priorities))
        used[team] += len(placement) * gpus * 1000
        index += 1
    return admitted


def _admitted(
    rng: random.Random,
    team: str,
    index: int,
    placement: dict[str, str],
    gpus: int,
    priorities: tuple[int, ...],
) -> Admitted:
    return Admitted(
        key=(team, f"running-{index}"),
        team=team,
        priority=rng.choice(priorities),
        usage={GPUS: len(placement) * gpus * 1000},
        admitted_at=-rng.uniform(0, 3600),
        nodes=placement,
        requests={pod: _requests(gpus) for pod in placement},
    )


def _waiting_gang(
    rng: random.Random, i: int, teams: Sequence[str], priorities: tuple[int, ...]
) -> WaitingGang:
    pods, gpus = _gang_shape(rng)
    team = rng.choice(teams)
    names_ = tuple(f"w{i}-{p}" for p in range(pods))
    requests = {pod: _requests(gpus) for pod in names_}
    topo = rng.choice((TopologyRequest(), TopologyRequest(1, True), TopologyRequest(1, False)))
    return WaitingGang(
        key=(team, f"waiting-{i}"),
        team=team,
        priority=rng.choice(priorities),
        created=f"2026-11-25T{10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
        pods=names_,
        requests=requests,
        usage={GPUS: pods * gpus * 1000},
        shape=shape_of(requests.values()),
        topology=topo,
    )


def _settle(
    rng: random.Random, pool: Pool, gangs: list[WaitingGang], priorities: tuple[int, ...]
) -> tuple[Pool, list[WaitingGang]]:
    """The pool once earlier cycles started all they could, ``len(gangs)`` gangs still waiting.

    Each round runs a cycle and applies what it started as the admitter would once the victims'
    pods are gone: victims leave, admitted gangs and preemptors run (just started, so protected);
    the gangs that left the queue are replaced by new ones. It ends with a cycle that starts
    nothing, every team's nominal quota then set to exactly what it holds.
    """
    count, drawn = len(gangs), len(gangs)
    teams_ = list(pool.teams)
    while True:
        outcomes = decide(pool, gangs, now=0.0)
        started = {o.key: o for o in outcomes if not isinstance(o, Wait)}
        if not started:
            return replace(pool, teams=at_quota(pool.teams, pool.admitted)), gangs
        topology = pool.topology
        free = {name: dict(pool.capacity.free[i]) for i, name in enumerate(topology.node_names)}
        gone = {key for o in started.values() if isinstance(o, Preempt) for key in o.victims}
        admitted = [a for a in pool.admitted if a.key not in gone]
        for victim in pool.admitted:
            if victim.key in gone:
                for pod, node in (victim.nodes or {}).items():
                    for name, amount in (victim.requests or {})[pod].items():
                        free[node][name] += amount
        for gang in gangs:
            outcome = started.get(gang.key)
            if outcome is None:
                continue
            requests = {pod: gang.requests[pod] for pod in outcome.nodes}
            for pod, node in outcome.nodes.items():
                for name, amount in requests[pod].items():
                    free[node][name] -= amount
            admitted.append(
                Admitted(
                    gang.key, gang.team, gang.priority, gang.usage, 0.0, outcome.nodes, requests
                )
            )
        pool = replace(pool, capacity=Capacity(topology, free), admitted=admitted)
        gangs = [gang for gang in gangs if gang.key not in started]
        while len(gangs) < count:
            gangs.append(_waiting_gang(rng, drawn, teams_, priorities))
            drawn += 1


def build(
    seed: int,
    *,
    nodes: int = 1000,
    waiting: int = 100,
    quota_full: bool = False,
    priorities: tuple[int, ...] = PRIORITIES,
) -> tuple[Pool, list[WaitingGang], Labelled]:
    """The benchmark's pool, waiting gangs and labelled nodes (deterministic for a seed)."""
    rng = random.Random(seed)
    labelled = labelled_nodes(nodes)
    topology = build_topology(LEVELS, labelled)
    quotas = teams(nodes)
    free: dict[str, dict[str, int]] = {name: dict(NODE) for name, _ in labelled}
    names = [name for name, _ in labelled]
    fill = _running_to_quota if quota_full else _running
    admitted = fill(rng, free, names, quotas, priorities)
    gangs = [_waiting_gang(rng, i, list(quotas), priorities) for i in range(waiting)]
    pool = Pool(
        capacity=Capacity(topology, free),
        teams=at_quota(quotas, admitted) if quota_full else quotas,
        admitted=admitted,
        preemption=PreemptionSettings(minimum_run_seconds=600),
        empty=Capacity(topology, dict.fromkeys(names, NODE)),
    )
    if quota_full:
        pool, gangs = _settle(rng, pool, gangs, priorities)
    # As the admitter gives them: the running gangs' totals by team kept apart (its ledger's).
    return replace(pool, totals=TeamTotals.of(pool.admitted)), gangs, labelled


def summary(outcomes: Sequence[Admit | Preempt | Wait]) -> Mapping[str, int]:
    """Outcome counts by kind (``Wait:<reason>`` for waits)."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        kind = type(outcome).__name__
        if isinstance(outcome, Wait):
            kind = f"Wait:{outcome.kind}"
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def measure(
    cycle: Callable[[], Sequence[Admit | Preempt | Wait]], rounds: int, budget: float
) -> dict[str, object]:
    """Median and p90 wall and CPU time of ``cycle`` over ``rounds`` identical cycles.

    Stops early (after at least 3 rounds) once the rounds took ``budget`` seconds of CPU.
    """
    wall: list[float] = []
    cpu: list[float] = []
    outcomes: Sequence[Admit | Preempt | Wait] = []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.thread_time()
        outcomes = cycle()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
        if len(cpu) >= 3 and sum(cpu) > budget:
            break
    cpu_median, cpu_p90 = _percentiles(cpu)
    wall_median, wall_p90 = _percentiles(wall)
    return {
        "rounds": len(cpu),
        "cycle_cpu_ms_median": round(cpu_median * 1000, 2),
        "cycle_cpu_ms_p90": round(cpu_p90 * 1000, 2),
        "cycle_wall_ms_median": round(wall_median * 1000, 2),
        "cycle_wall_ms_p90": round(wall_p90 * 1000, 2),
        "outcomes": summary(outcomes),
    }


WALL = 1_790_000_000.0  # the admitter's wall clock in the benchmark (2026-09)


class DryRunAdmitter(Admitter):
    """An admitter that decides but applies nothing, so every cycle sees the same queue.

    Its cycles gather the facts and decide exactly as the real admitter's; only the ledger and
    the queue are left as they were (no reservation, hold or queue move), which a benchmark needs
    to measure the same cycle over and over.
    """

    def _admit(self, *_: object, **__: object) -> None:
        return None

    def _preempt(self, *_: object, **__: object) -> None:
        return None


def _raw_node(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    allocatable = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _raw_pods(gang: Admitted) -> list[dict[str, Any]]:
    created = datetime.fromtimestamp(WALL + gang.admitted_at, UTC).isoformat()
    out = []
    for pod, node in (gang.nodes or {}).items():
        gpus = (gang.requests or {})[pod][GPU] // 1000
        requests = {GPU: str(gpus), "cpu": str(gpus * 11), "memory": f"{gpus * 64}Gi"}
        out.append(
            {
                "metadata": {
                    "name": pod,
                    "namespace": gang.key[0],
                    "creationTimestamp": created,
                    "labels": {
                        "training.kubeflow.org/operator-name": "torchgate",
                        "training.kubeflow.org/job-name": gang.key[1],
                    },
                },
                "spec": {
                    "nodeName": node,
                    "priority": gang.priority,
                    "containers": [{"name": "pytorch", "resources": {"requests": requests}}],
                },
                "status": {"phase": "Running"},
            }
        )
    return out


def admitter_for(
    pool: Pool, waiting: Sequence[WaitingGang], labelled: Labelled
) -> tuple[DryRunAdmitter, list[list[dict[str, Any]]]]:
    """A dry-run admitter fed the case through its informer handlers and reconcilers' requests.

    Returns it with each running gang's pods (raw), for the events between cycles.
    """
    settings = PoolSettings(preemption=pool.preemption, topology=TopologySettings(levels=LEVELS))
    admitter = DryRunAdmitter(
        on_admit_job=lambda key: None,
        on_reason=lambda key: None,
        teams=lambda: pool.teams,
        pool_settings=lambda: (settings,),
        clock=lambda: 0.0,
        wall_clock=lambda: WALL,
    )
    for name, labels in labelled:
        admitter.on_node("ADDED", _raw_node(name, labels), None)
    gangs = [_raw_pods(gang) for gang in pool.admitted]
    for pods in gangs:
        for pod in pods:
            admitter.on_pod("ADDED", pod, None)
    for gang in waiting:
        level = gang.topology.level
        admitter.request(
            gang.key,
            GangRequest(
                uid=f"uid-{gang.key[1]}",
                demands=tuple(PodDemand(pod, gang.requests[pod]) for pod in gang.pods),
                min_count=len(gang.pods),
                usage=gang.usage,
                priority=gang.priority,
                created=gang.created,
                gpus=GpuSources(GPU),
                topology_level=None if level is None else LEVELS[level],
                topology_required=gang.topology.required,
            ),
        )
    return admitter, gangs


def measure_admitter(
    admitter: DryRunAdmitter,
    gangs: Sequence[list[dict[str, Any]]],
    rounds: int,
    budget: float,
    seed: int,
) -> dict[str, object]:
    """CPU time of the admitter's whole cycle, one running gang ending before each.

    Before each cycle one running gang's pods are deleted (the event that wakes a cycle); after
    it they come back, so every cycle sees about the same pool and two gangs' worth of changes.
    """
    rng = random.Random(seed)
    cpu: list[float] = []
    for _ in range(rounds):
        ended = gangs[rng.randrange(len(gangs))]
        for pod in ended:
            admitter.on_pod("DELETED", pod, None)
        started = time.thread_time()
        admitter.cycle()
        cpu.append(time.thread_time() - started)
        for pod in ended:
            admitter.on_pod("ADDED", pod, None)
        if len(cpu) >= 3 and sum(cpu) > budget:
            break
    median, p90 = _percentiles(cpu)
    return {
        "admitter_rounds": len(cpu),
        "admitter_cycle_cpu_ms_median": round(median * 1000, 2),
        "admitter_cycle_cpu_ms_p90": round(p90 * 1000, 2),
    }


def run_case(
    case: Case, *, seed: int, rounds: int, budget: float, admitter: bool
) -> dict[str, object]:
    """Build one case and measure its cycle (and, with ``admitter``, the admitter's)."""
    pool, waiting, labelled = build(
        seed, nodes=case.nodes, waiting=case.waiting, quota_full=case.at_quota
    )
    figures = measure(lambda: decide(pool, waiting, now=0.0), rounds, budget)
    if admitter:
        shell, gangs = admitter_for(pool, waiting, labelled)
        figures |= measure_admitter(shell, gangs, rounds, budget, seed)
    topology_times: list[float] = []
    for _ in range(3):
        started = time.thread_time()
        build_topology(LEVELS, labelled)
        topology_times.append(time.thread_time() - started)
    return {
        "nodes": case.nodes,
        "waiting_gangs": case.waiting,
        "at_quota": case.at_quota,
        "running_gangs": len(pool.admitted),
        **figures,
        "build_topology_cpu_ms_median": round(statistics.median(topology_times) * 1000, 2),
    }


def build_info(gc_setting: str) -> dict[str, object]:
    """How the cycle ran: compiled or interpreted (its modules' files) and the GC thresholds."""
    files = {module.__name__: module.__file__ or "" for module in (decide_module, topology_module)}
    return {
        "compiled": all(not name.endswith(".py") for name in files.values()),
        "module_files": files,
        "gc": gc_setting,
        "gc_thresholds": list(gc.get_threshold()),
    }


def main() -> None:
    """Run the chosen cases and print their figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        default=",".join(case.name for case in CASES),
        help="comma-separated: NODESxWAITING[-at-quota] (default: every case)",
    )
    parser.add_argument("--rounds", type=int, default=20, help="cycles per case (default 20)")
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=60.0,
        help="stop a case's rounds (after 3) once they took this much CPU (default 60)",
    )
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument(
        "--admitter",
        action="store_true",
        help="also measure the admitter's whole cycle (facts gathered from its ledger and queue)",
    )
    parser.add_argument(
        "--gc",
        choices=("cpython", "controller"),
        default="cpython",
        help="garbage-collector thresholds: CPython's defaults (default) or the controller's",
    )
    args = parser.parse_args()
    if args.gc == "controller":
        gc.set_threshold(*command.GC_THRESHOLDS)
    by_name = {case.name: case for case in CASES}
    chosen = []
    for name in args.cases.split(","):
        nodes, _, rest = name.strip().partition("x")
        waiting, _, quota = rest.partition("-")
        chosen.append(
            by_name.get(name) or Case(int(nodes), int(waiting), at_quota=quota == "at-quota")
        )
    results = {
        case.name: run_case(
            case,
            seed=args.seed,
            rounds=args.rounds,
            budget=args.budget_seconds,
            admitter=args.admitter,
        )
        for case in chosen
    }
    report = {"seed": args.seed, "levels": len(LEVELS), "build": build_info(args.gc)}
    print(json.dumps(report | {"cases": results}, indent=2))


if __name__ == "__main__":
    main()

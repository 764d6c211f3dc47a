"""Benchmark one pool-sharing admission cycle: 100 waiting gangs, 1,000 nodes, 3 topology levels.

Why this shape: issue 16 sets the target "admission decision time for 100 waiting gangs on 1,000
nodes with three topology levels, at most 10 ms per cycle". The admitter runs a cycle whenever
capacity is freed, so this is the latency between a pod ending and the next gang being admitted,
and the CPU it costs the controller per event.

The pool: 4 blocks x 10 racks x 25 hosts (levels ``torchgate.io/block``, ``torchgate.io/rack``,
``kubernetes.io/hostname``), 8 GPUs, 96 CPUs, 1 TiB and 110 pods per node. Three teams share it
(nominal 3,000 / 3,000 / 2,000 GPUs, borrowing limit 1,000 for the third). About 70 % of the GPUs
are held by running gangs of mixed sizes (1 to 32 whole-node pods, or 1 to 8 pods of 1, 2 or 4
GPUs), priorities 0, 100 and 1,000, randomly admitted over the last hour. The 100 waiting gangs
have the same mix of sizes and priorities; a third require a rack, a third prefer one. Fixed seed,
so every round decides the same cycle.

Measured: ``admission.decide`` (builds the per-cycle capacity, decides every waiting gang: quota,
placement, preemption), median and p90 over ``--rounds``; ``build_topology`` (done once per node
set change, not per cycle) separately. Prints JSON; asserts nothing.

    .venv/bin/python benchmarks/topology_bench.py --rounds 50
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Mapping

from torchgate.controller.admission.decide import Admit, Pool, Preempt, Wait, WaitingGang, decide
from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import build_topology, shape_of
from torchgate.pytorchjob.pool import GPUS, Limit, PreemptionSettings, TeamQuota, TopologyRequest

GPU = "nvidia.com/gpu"
LEVELS = ("torchgate.io/block", "torchgate.io/rack", "kubernetes.io/hostname")
NODE = {GPU: 8000, "cpu": 96000, "memory": 2**40 * 1000, "pods": 110000}
TEAMS = {
    "vision": TeamQuota("vision", ("vision",), {GPUS: Limit(3_000_000)}),
    "speech": TeamQuota("speech", ("speech",), {GPUS: Limit(3_000_000)}),
    "ads": TeamQuota("ads", ("ads",), {GPUS: Limit(2_000_000, 1_000_000)}),
}


def _gang_shape(rng: random.Random) -> tuple[int, int]:
    """(pods, GPUs per pod): whole-node gangs of 1-32 pods, or small pods."""
    if rng.random() < 0.6:
        return rng.choice((1, 2, 4, 8, 16, 32)), 8
    return rng.randint(1, 8), rng.choice((1, 2, 4))


def _requests(gpus: int) -> dict[str, int]:
    return {GPU: gpus * 1000, "cpu": gpus * 11000, "memory": gpus * 2**36 * 1000, "pods": 1000}


Labelled = list[tuple[str, dict[str, str]]]


def build(
    seed: int, *, priorities: tuple[int, ...] = (0, 100, 1000)
) -> tuple[Pool, list[WaitingGang], Labelled]:
    """The benchmark's pool, waiting gangs and labelled nodes (deterministic for a seed)."""
    rng = random.Random(seed)
    nodes = [
        (
            f"n-{b}-{r}-{h}",
            {LEVELS[0]: f"b{b}", LEVELS[1]: f"b{b}r{r}", LEVELS[2]: f"n-{b}-{r}-{h}"},
        )
        for b in range(4)
        for r in range(10)
        for h in range(25)
    ]
    topology = build_topology(LEVELS, nodes)
    free: dict[str, dict[str, int]] = {name: dict(NODE) for name, _ in nodes}
    names = [name for name, _ in nodes]
    admitted: list[Admitted] = []
    held, target = 0, int(0.7 * 8 * len(nodes))
    index = 0
    while held < target:
        pods, gpus = _gang_shape(rng)
        team = rng.choice(list(TEAMS))
        start = rng.randrange(0, len(names))
        placement: dict[str, str] = {}
        cursor = start
        for pod in range(pods):
            for _ in range(len(names)):
                node = names[cursor % len(names)]
                cursor += 1
                if free[node][GPU] >= gpus * 1000:
                    placement[f"r{index}-{pod}"] = node
                    for key, value in _requests(gpus).items():
                        free[node][key] -= value
                    break
        requests = {pod: _requests(gpus) for pod in placement}
        admitted.append(
            Admitted(
                key=(team, f"running-{index}"),
                team=team,
                priority=rng.choice(priorities),
                usage={GPUS: len(placement) * gpus * 1000},
                admitted_at=-rng.uniform(0, 3600),
                nodes=placement,
                requests=requests,
            )
        )
        held += len(placement) * gpus
        index += 1
    waiting: list[WaitingGang] = []
    for i in range(100):
        pods, gpus = _gang_shape(rng)
        team = rng.choice(list(TEAMS))
        names_ = tuple(f"w{i}-{p}" for p in range(pods))
        requests = {pod: _requests(gpus) for pod in names_}
        topo = rng.choice((TopologyRequest(), TopologyRequest(1, True), TopologyRequest(1, False)))
        waiting.append(
            WaitingGang(
                key=(team, f"waiting-{i}"),
                team=team,
                priority=rng.choice(priorities),
                created=f"2026-11-25T10:{i // 60:02d}:{i % 60:02d}Z",
                pods=names_,
                requests=requests,
                usage={GPUS: pods * gpus * 1000},
                shape=shape_of(requests.values()),
                topology=topo,
            )
        )
    pool = Pool(
        topology=topology,
        free=free,
        teams=TEAMS,
        admitted=admitted,
        preemption=PreemptionSettings(minimum_run_seconds=600),
    )
    return pool, waiting, nodes


def _summary(outcomes: list[Admit | Preempt | Wait]) -> Mapping[str, int]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        kind = type(outcome).__name__
        if isinstance(outcome, Wait):
            kind = f"Wait:{outcome.kind}"
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def _measure(pool: Pool, waiting: list[WaitingGang], rounds: int) -> dict[str, object]:
    """Median and p90 wall and CPU time of ``decide`` over ``rounds`` identical cycles."""
    wall: list[float] = []
    cpu: list[float] = []
    outcomes: list[Admit | Preempt | Wait] = []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.thread_time()
        outcomes = decide(pool, waiting, now=0.0)
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    wall.sort()
    cpu.sort()
    p90 = int(0.9 * (rounds - 1))
    return {
        "running_gangs": len(pool.admitted),
        "cycle_wall_ms_median": round(statistics.median(wall) * 1000, 2),
        "cycle_wall_ms_p90": round(wall[p90] * 1000, 2),
        "cycle_cpu_ms_median": round(statistics.median(cpu) * 1000, 2),
        "cycle_cpu_ms_p90": round(cpu[p90] * 1000, 2),
        "outcomes": _summary(outcomes),
    }


def main() -> None:
    """Run the benchmark and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    pool, waiting, nodes = build(args.seed)
    mixed = _measure(pool, waiting, args.rounds)
    pool_one, waiting_one, _ = build(args.seed, priorities=(0,))
    uniform = _measure(pool_one, waiting_one, args.rounds)
    topology_times: list[float] = []
    for _ in range(max(5, args.rounds // 5)):
        started = time.perf_counter()
        build_topology(LEVELS, nodes)
        topology_times.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "nodes": len(pool.topology.node_names),
                "levels": len(LEVELS),
                "waiting_gangs": len(waiting),
                "rounds": args.rounds,
                "mixed_priorities": mixed,
                "one_priority": uniform,
                "build_topology_ms_median": round(statistics.median(topology_times) * 1000, 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

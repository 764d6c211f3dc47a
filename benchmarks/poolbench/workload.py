"""The workloads both pool benchmarks run (pure): gangs, bursts, two teams, the labelled pool.

A gang is ``pods`` whole-node pods that run ``seconds`` once admitted. Sizes are log-uniform in
``1..largest`` (as many 1-2 pod gangs as 16-32 pod ones, per octave), so a burst has many small
gangs and a few large ones; every workload is a function of its seed, so the simulation and the
cluster run see the same gangs; ``knavigator`` is NVIDIA knavigator's fixed gang burst (53 jobs
of 1-32 replicas), the one workload not drawn from a seed. The pool is ``count`` nodes in racks of
``NODES_PER_RACK``, labelled as the dev cluster labels them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from torchgate.pytorchjob.pool import GPUS, Limit, TeamQuota

GPU = "nvidia.com/gpu"
RACK = "topology.torchgate.io/rack"  # the dev cluster's label
HOSTNAME = "kubernetes.io/hostname"
LEVELS = (RACK, HOSTNAME)
NODES_PER_RACK = 8


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


# NVIDIA knavigator's gang-scheduling workload (resources/benchmarks/gang-scheduling/workflows,
# the SubmitObj tasks in order): (how many jobs, replicas each). 53 jobs, 288 whole-node pods:
# on 32 nodes nine waves of exactly 32 in submission order, so the optimum with 30 s pods is 270 s.
KNAVIGATOR_TASKS: tuple[tuple[int, int], ...] = (
    (1, 32), (2, 16), (3, 10), (1, 2), (4, 8), (5, 6), (2, 1), (6, 5), (1, 2),
    (7, 4), (1, 2), (2, 1), (8, 4), (9, 3), (1, 5),
)  # fmt: skip


def knavigator(*, seconds: float = 30.0, namespace: str = "burst") -> list[Job]:
    """The knavigator gang burst in submission order, named so that name order is that order.

    The apiserver stamps creation in whole seconds, so the admission order among jobs created in
    the same second is by name: ``kn-000`` ... ``kn-052``.
    """
    sizes = [replicas for count, replicas in KNAVIGATOR_TASKS for _ in range(count)]
    return [Job(namespace, f"kn-{i:03d}", size, seconds) for i, size in enumerate(sizes)]


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


def pool_nodes(count: int) -> list[tuple[str, dict[str, str]]]:
    """``count`` nodes ``n000``..., racks of ``NODES_PER_RACK`` (the cluster run uses the same)."""
    return [
        (f"n{i:03d}", {RACK: f"r{i // NODES_PER_RACK}", HOSTNAME: f"n{i:03d}"})
        for i in range(count)
    ]

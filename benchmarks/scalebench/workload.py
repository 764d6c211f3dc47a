"""The steady arrival stream: mixed gangs with fake run times, at a rate sized to the pool. Pure.

Rules:
- Gang shapes are drawn uniformly from ``SHAPES`` (pods x GPUs per pod): single pods, whole-node
  gangs of 2 to 16 nodes, and one 8-pod gang of 1-GPU pods sharing a node.
- Arrivals are a Poisson stream (exponential gaps, seeded): the rate keeps ``load`` of ``gpus``
  GPUs busy on average, ``load * gpus / (mean gang GPUs * mean run seconds)`` gangs a second.
- Run times are uniform in ``[run_seconds, run_seconds + spread]`` (kwok ends the Master then).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

# (pods, GPUs per pod)
SHAPES: Final = ((1, 8), (2, 8), (4, 8), (8, 1), (8, 8), (16, 8))


@dataclass(frozen=True)
class Arrival:
    """One gang of the stream: when it is submitted (seconds from the stream's start)."""

    at: float
    name: str
    pods: int
    gpus_per_pod: int
    run_seconds: int


def mean_gang_gpus() -> float:
    """The GPUs of the average gang of ``SHAPES``."""
    return sum(pods * gpus for pods, gpus in SHAPES) / len(SHAPES)


def arrival_rate(gpus: int, load: float, run_seconds: int, spread: int) -> float:
    """Gangs a second that keep ``load`` of ``gpus`` busy on average."""
    mean_run = run_seconds + spread / 2
    return load * gpus / (mean_gang_gpus() * mean_run)


def arrivals(
    *, rate: float, seconds: float, run_seconds: int, spread: int, seed: int
) -> list[Arrival]:
    """The stream for ``seconds`` at ``rate`` gangs a second."""
    draw = random.Random(seed)
    stream: list[Arrival] = []
    at = draw.expovariate(rate)
    while at < seconds:
        pods, gpus = draw.choice(SHAPES)
        run = run_seconds + draw.randint(0, spread)
        stream.append(Arrival(at, f"s-{len(stream):05d}", pods, gpus, run))
        at += draw.expovariate(rate)
    return stream

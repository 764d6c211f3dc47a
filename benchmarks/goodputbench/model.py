"""What the goodput benchmark runs and how its figures are computed. Pure.

Rules:

1. The workload is a fixed mix of gangs of whole 8-GPU nodes (``GANG_NODES``: 16, 8, 8, 4, 4,
   4, 2, 2, 2, 2, 1, 1, 1, 1 = 56 nodes) that run for the whole benchmark; the rest of the pool
   (8 of 64 nodes) is spare, so a gang that loses a node can run again whole at once, as in a
   pool that keeps spares for exactly this.
2. Nodes fail at a fixed rate: one every ``interval`` seconds of wall time. Meta's Llama 3 run
   saw 419 unexpected interruptions in 54 days on 16,384 GPUs; :func:`llama3_interval_hours`
   gives that rate on this pool, and :func:`time_compression` how much faster the benchmark's
   interval is (one per 10 minutes on 512 GPUs is about 600 times the Llama 3 rate). The failed
   node is one holding a gang pod (every GPU of the Llama 3 job was busy), chosen by a seeded
   generator, and it comes back (is repaired) ``repair`` seconds later.
3. A failure's recovery time runs from the failure to the moment every pod of the gang runs
   again, in a later gang attempt. Its GPU time lost is the gang's GPUs times that time.
4. The floor of a failure is the gang's GPUs times (detection + restart): detection is the bound
   the configuration sets (the node-monitor grace period, after which Kubernetes marks the node
   not Ready, plus ``--node-lost-seconds``), restart is the time the same gang took from its
   creation to running whole when it was first submitted alone to an idle pool, measured in the
   same run. The ratio of lost to floor is the overhead torchgate adds.
5. The share of GPU time lost is the GPU time lost over the GPU time the gangs held during the
   failure phase.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

GPUS_PER_NODE: Final = 8
POOL_NODES: Final = 64
GANG_NODES: Final = (16, 8, 8, 4, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1)
LLAMA3_INTERRUPTIONS: Final = 419
LLAMA3_DAYS: Final = 54
LLAMA3_GPUS: Final = 16_384


def gang_names() -> list[tuple[str, int]]:
    """(job name, nodes) of the workload's gangs, biggest first (rule 1)."""
    return [(f"g{index:02d}-{nodes}n", nodes) for index, nodes in enumerate(GANG_NODES)]


def llama3_interval_hours(gpus: int) -> float:
    """Hours between failures on ``gpus`` GPUs at the Llama 3 per-GPU failure rate (rule 2)."""
    per_gpu_hour = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 24 * LLAMA3_GPUS)
    return 1.0 / (per_gpu_hour * gpus)


def time_compression(interval_seconds: float, gpus: int) -> float:
    """How many times the Llama 3 rate one failure per ``interval_seconds`` is (rule 2)."""
    return llama3_interval_hours(gpus) * 3600.0 / interval_seconds


@dataclass(frozen=True, slots=True)
class Failure:
    """One node failure and its gang's recovery (rule 3); seconds, monotonic-relative."""

    node: str
    job: str
    gpus: int
    failed_at: float
    recovered_at: float | None
    detection_bound: float
    restart_floor: float

    @property
    def recovery_seconds(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.failed_at

    def gpu_hours_lost(self, end: float) -> float:
        """GPU-hours the gang was not whole (until ``end`` when it never recovered)."""
        until = self.recovered_at if self.recovered_at is not None else end
        return self.gpus * (until - self.failed_at) / 3600.0

    @property
    def floor_gpu_hours(self) -> float:
        """Rule 4: the gang's GPUs times (detection bound + its own restart time)."""
        return self.gpus * (self.detection_bound + self.restart_floor) / 3600.0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` percentile of ``values`` (NaN when empty)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def summarise(failures: Sequence[Failure], *, held_gpu_hours: float, end: float) -> dict[str, Any]:
    """The figures README quotes (rules 3-5), and how many gangs never ran whole again.

    Recovery p50/p99 over the failures, GPU-hours lost per failure and against the floor, the
    share of GPU time lost.
    """
    recovered = [f for f in failures if f.recovered_at is not None]
    seconds = [f.recovery_seconds for f in recovered if f.recovery_seconds is not None]
    lost = [f.gpu_hours_lost(end) for f in failures]
    ratios = [f.gpu_hours_lost(end) / f.floor_gpu_hours for f in recovered]
    return {
        "failures": len(failures),
        "not_recovered": len(failures) - len(recovered),
        "recovery_seconds_p50": percentile(seconds, 0.5),
        "recovery_seconds_p99": percentile(seconds, 0.99),
        "recovery_seconds_max": max(seconds, default=float("nan")),
        "gpu_hours_lost_per_failure_p50": percentile(lost, 0.5),
        "gpu_hours_lost_total": sum(lost),
        "floor_gpu_hours_total": sum(f.floor_gpu_hours for f in failures),
        "lost_over_floor_p50": percentile(ratios, 0.5),
        "lost_over_floor_p99": percentile(ratios, 0.99),
        "lost_over_floor_total": (
            sum(lost) / sum(f.floor_gpu_hours for f in failures) if failures else float("nan")
        ),
        "share_of_gpu_time_lost": sum(lost) / held_gpu_hours if held_gpu_hours else float("nan"),
    }


def failure_rows(failures: Sequence[Failure], end: float) -> list[Mapping[str, Any]]:
    """Every failure's figures, for the JSON."""
    return [
        {
            "node": f.node,
            "job": f.job,
            "gpus": f.gpus,
            "failed_at": round(f.failed_at, 2),
            "recovery_seconds": f.recovery_seconds,
            "gpu_hours_lost": f.gpu_hours_lost(end),
            "floor_gpu_hours": f.floor_gpu_hours,
            "restart_floor_seconds": f.restart_floor,
        }
        for f in failures
    ]

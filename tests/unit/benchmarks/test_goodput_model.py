"""The goodput benchmark's arithmetic (``benchmarks/goodputbench/model.py``): rate, loss, floor.

The figures README quotes are only as good as this: the failure rate scaled from Llama 3, the GPU
time a failure costs against its floor, and the share of GPU time lost.
"""

from __future__ import annotations

import math

import pytest

from benchmarks.goodputbench.model import (
    GANG_NODES,
    GPUS_PER_NODE,
    POOL_NODES,
    Failure,
    gang_names,
    llama3_interval_hours,
    summarise,
    time_compression,
)


def failure(gpus: int, failed_at: float, recovered_at: float | None) -> Failure:
    return Failure(
        node="n000",
        job="g",
        gpus=gpus,
        failed_at=failed_at,
        recovered_at=recovered_at,
        detection_bound=80.0,
        restart_floor=10.0,
    )


def test_the_workload_leaves_spare_nodes_for_a_gang_that_lost_one() -> None:
    assert sum(nodes for _, nodes in gang_names()) == sum(GANG_NODES) == POOL_NODES - 8


def test_the_llama3_rate_on_512_gpus_is_one_failure_per_about_99_hours() -> None:
    # 419 interruptions in 54 days on 16,384 GPUs.
    assert llama3_interval_hours(16_384) == pytest.approx(54 * 24 / 419)
    assert llama3_interval_hours(POOL_NODES * GPUS_PER_NODE) == pytest.approx(98.98, abs=0.01)
    assert time_compression(600, 512) == pytest.approx(593.9, abs=0.1)


def test_a_failure_loses_the_gang_s_gpus_until_it_is_whole_again_against_its_floor() -> None:
    one = failure(16, failed_at=100.0, recovered_at=190.0)
    assert one.recovery_seconds == 90.0
    assert one.gpu_hours_lost(end=1000.0) == pytest.approx(16 * 90 / 3600)
    assert one.floor_gpu_hours == pytest.approx(16 * 90 / 3600)  # 80 s detection + 10 s restart


def test_the_summary_counts_a_gang_never_whole_again_until_the_end() -> None:
    figures = summarise(
        [failure(8, 0.0, 180.0), failure(8, 600.0, None)], held_gpu_hours=8.0, end=900.0
    )
    assert figures["failures"] == 2
    assert figures["not_recovered"] == 1
    assert figures["recovery_seconds_p50"] == 180.0
    assert figures["lost_over_floor_p50"] == pytest.approx(2.0)
    assert figures["gpu_hours_lost_total"] == pytest.approx(8 * (180 + 300) / 3600)
    assert figures["share_of_gpu_time_lost"] == pytest.approx(8 * 480 / 3600 / 8.0)


def test_no_failure_gives_no_figure_rather_than_zero() -> None:
    figures = summarise([], held_gpu_hours=1.0, end=10.0)
    assert math.isnan(figures["recovery_seconds_p50"])
    assert figures["gpu_hours_lost_total"] == 0

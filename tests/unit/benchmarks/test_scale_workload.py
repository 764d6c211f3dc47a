"""The scale benchmark's steady stream (``benchmarks/scalebench/workload.py``).

Its figures are read as "the controller under a pool about ``load`` busy", so the arrival rate
must give that load on average, the stream must be the same for the same seed (before and after
runs compare), and every gang must fit the pool's 8-GPU nodes.
"""

from __future__ import annotations

from benchmarks.scalebench.workload import SHAPES, arrival_rate, arrivals, mean_gang_gpus


def test_the_rate_keeps_the_asked_share_of_gpus_busy_on_average() -> None:
    rate = arrival_rate(gpus=8000, load=0.5, run_seconds=20, spread=40)
    busy_gpus = rate * mean_gang_gpus() * (20 + 40 / 2)  # Little's law
    assert abs(busy_gpus - 4000) < 1e-6


def test_the_same_seed_gives_the_same_stream_and_another_seed_another() -> None:
    first = arrivals(rate=5, seconds=60, run_seconds=20, spread=40, seed=23)
    again = arrivals(rate=5, seconds=60, run_seconds=20, spread=40, seed=23)
    other = arrivals(rate=5, seconds=60, run_seconds=20, spread=40, seed=24)
    assert first == again
    assert first != other


def test_the_stream_lasts_its_seconds_in_order_with_unique_names_and_run_times_in_range() -> None:
    stream = arrivals(rate=20, seconds=120, run_seconds=20, spread=40, seed=1)
    assert 2000 < len(stream) < 2800  # 2,400 expected
    times = [a.at for a in stream]
    assert times == sorted(times)
    assert times[0] > 0
    assert times[-1] < 120
    assert len({a.name for a in stream}) == len(stream)
    assert all(20 <= a.run_seconds <= 60 for a in stream)
    assert {(a.pods, a.gpus_per_pod) for a in stream} == set(SHAPES)


def test_every_shape_fits_8_gpu_nodes() -> None:
    assert all(gpus in (1, 2, 4, 8) and pods >= 1 for pods, gpus in SHAPES)

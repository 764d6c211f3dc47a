"""The webhook benchmark's target line: torchgate's throughput at least 0.40 of bare's, per route.

The ratio is the median over rounds of torchgate's throughput over bare's in the same round; a
route below the target reads ``FAIL`` and fails the run (``webhook_bench.py`` exits 1).
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.webhookbench.stats import summarise, target_line


def round_row(server: str, route: str, attempt: int, rps: float) -> dict[str, Any]:
    return {
        "server": server,
        "route": route,
        "generator": "python",
        "attempt": attempt,
        "throughput_rps": rps,
        "errors": 0,
        "server_cpu_us_per_review": 1e6 / rps,
    }


def rounds(mutate: list[float], validate: list[float]) -> list[dict[str, Any]]:
    """Three rounds of bare at 10,000 reviews/s, torchgate at the given shares of it."""
    rows = []
    for route, shares in (("mutate", mutate), ("validate", validate)):
        for attempt, share in enumerate(shares, start=1):
            rows.append(round_row("bare", route, attempt, 10_000.0))
            rows.append(round_row("torchgate", route, attempt, 10_000.0 * share))
    return rows


@pytest.mark.parametrize(
    ("mutate", "validate", "passes", "marks"),
    [
        ([0.45, 0.41, 0.50], [0.42, 0.40, 0.44], True, ["mutate 0.45 PASS", "validate 0.42 PASS"]),
        ([0.45, 0.41, 0.50], [0.39, 0.38, 0.45], False, ["mutate 0.45 PASS", "validate 0.39 FAIL"]),
        ([0.30, 0.52, 0.33], [0.60, 0.61, 0.62], False, ["mutate 0.33 FAIL", "validate 0.61 PASS"]),
    ],
    ids=["both-above", "validate-below", "mutate-median-below-despite-one-good-round"],
)
def test_a_route_below_the_target_fails_the_target_line(
    mutate: list[float], validate: list[float], passes: bool, marks: list[str]
) -> None:
    line, passed = target_line(summarise([], rounds(mutate, validate)))
    assert passed is passes
    assert line.startswith("TARGET ")
    for mark in marks:
        assert mark in line


def test_a_route_without_bare_is_not_judged() -> None:
    rows = [round_row("torchgate", "mutate", 1, 1_000.0)]
    line, passed = target_line(summarise([], rows))
    assert passed is True
    assert "mutate n/a" in line
    assert "FAIL" not in line

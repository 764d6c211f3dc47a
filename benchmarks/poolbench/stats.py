"""Statistics both pool benchmarks share (pure): medians over rounds and step series.

Rounds are summarised as ``{"median": ..., "rounds": [...]}``: the median of the values that are
numbers (a figure a round could not measure is ``None`` and does not count) beside every round's
value, so a reader sees the spread. Occupancy over time is a step series ``[(time, value), ...]``
that holds each value until the next step.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any


def median_of(rows: Iterable[Any]) -> float | None:
    """Median of the values that are numbers (``None``: no value)."""
    values = [v for v in rows if isinstance(v, int | float)]
    return statistics.median(values) if values else None


def over(rows: Sequence[Any], *path: str) -> dict[str, Any]:
    """The figure at ``path`` in every round: its median and every round's value."""
    values = []
    for row in rows:
        value: Any = row
        for part in path:
            value = value[part]
        values.append(value)
    return {"median": median_of(values), "rounds": values}


def first_time_at_least(series: Sequence[tuple[float, int]], level: float) -> float | None:
    """The first time a step series reaches ``level`` (``None``: never)."""
    for when, value in series:
        if value >= level:
            return when
    return None


def integral(series: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """The area under a step series between two times."""
    total, last_t, last_v = 0.0, start, 0
    for when, value in series:
        if when > start:
            total += (min(when, end) - last_t) * last_v
            last_t = min(when, end)
        last_v = value
        if when >= end:
            break
    return total + max(0.0, end - last_t) * last_v

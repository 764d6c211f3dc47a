"""Gang arithmetic (``pytorchjob.gang``): tables and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchgate.pytorchjob import gang


@pytest.mark.parametrize(
    ("low", "high", "workers", "expected"),
    [
        (1, 3, 2, (1, 3)),
        (None, 4, 2, (4, 4)),
        (2, None, 5, (2, 2)),
        (None, None, 3, (3, 3)),
        (None, None, 0, (0, 0)),
    ],
    ids=["both", "max-only", "min-only", "neither", "neither-no-workers"],
)
def test_elastic_bounds(
    low: int | None, high: int | None, workers: int, expected: gang.Bounds
) -> None:
    assert gang.elastic_bounds(low, high, workers=workers) == expected


@pytest.mark.parametrize(
    ("masters", "workers", "elastic", "expected"),
    [
        (1, 3, None, 4),
        (0, 3, None, 3),
        (1, 4, (2, 4), 3),
        (0, 4, (2, 4), 2),
        (1, 2, (2, 4), 3),
        (1, 2, (5, 5), 3),
        (1, 2, (0, 2), 3),
    ],
    ids=[
        "all",
        "worker-only",
        "elastic-minimum",
        "elastic-worker-only",
        "minimum-equals-workers",
        "minimum-above-workers",
        "zero-minimum",
    ],
)
def test_default_gang_size(
    masters: int, workers: int, elastic: gang.Bounds | None, expected: int
) -> None:
    assert gang.default_gang_size(masters=masters, workers=workers, elastic=elastic) == expected


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [(None, 4), (0, 4), (-1, 4), (2, 2), (5, 5), (6, 4)],
    ids=["unset", "zero", "negative", "lower", "total", "above-total"],
)
def test_min_available(wanted: int | None, expected: int) -> None:
    assert gang.min_available(wanted, total=5, default=4) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8", 8),
        (8, 8),
        (8.0, 8),
        ("08", 8),
        ("0", None),
        ("auto", None),
        ("gpu", None),
        (" 8", None),
        ("-2", None),
        ("٣", None),
        (True, None),
        (None, None),
        (2.5, None),
    ],
)
def test_integer_nproc(value: object, expected: int | None) -> None:
    assert gang.integer_nproc(value) == expected


@pytest.mark.parametrize(
    ("total", "nproc", "expected"), [(3, "4", 12), (3, "auto", 3), (3, None, 3), (0, "4", 0)]
)
def test_world_size(total: int, nproc: object, expected: int) -> None:
    assert gang.world_size(total=total, nproc_per_node=nproc) == expected


@pytest.mark.parametrize(
    ("total", "elastic", "expected"), [(3, None, "3"), (3, (1, 4), "1:4"), (2, (2, 2), "2:2")]
)
def test_nnodes(total: int, elastic: gang.Bounds | None, expected: str) -> None:
    bounds = gang.nnodes(total=total, elastic=elastic)
    assert gang.format_nnodes(bounds, elastic=elastic is not None) == expected


@pytest.mark.parametrize(
    ("total", "masters", "elastic", "expected"),
    [(3, 1, None, "3"), (3, 1, (1, 4), "2:5"), (2, 0, (2, 2), "2:2"), (3, 1, (2, 2), "3:3")],
    ids=["not-elastic", "master-adds-a-node", "worker-only", "default-bounds-with-master"],
)
def test_nnodes_counts_the_master_as_a_node(
    total: int, masters: int, elastic: gang.Bounds | None, expected: str
) -> None:
    bounds = gang.nnodes(total=total, elastic=elastic, masters=masters)
    assert gang.format_nnodes(bounds, elastic=elastic is not None) == expected


counts = st.integers(0, 64)
bounds = st.one_of(st.none(), st.integers(1, 64))


@given(counts, counts, bounds, bounds, st.one_of(st.none(), st.integers(-2, 130)))
def test_gang_size_is_a_count_of_the_jobs_pods(
    masters: int, workers: int, low: int | None, high: int | None, wanted: int | None
) -> None:
    elastic = gang.elastic_bounds(low, high, workers=workers)
    total = gang.total_replicas([masters, workers])
    size = gang.default_gang_size(masters=masters, workers=workers, elastic=elastic)
    assert masters <= size <= total
    assert gang.default_gang_size(masters=masters, workers=workers, elastic=None) == total
    if elastic[0] >= workers:
        assert size == total
    chosen = gang.min_available(wanted, total=total, default=size)
    assert chosen == (wanted if wanted is not None and 1 <= wanted <= total else size)


@pytest.mark.parametrize(
    ("wanted", "total", "expected"),
    [(1, 3, True), (3, 3, True), (0, 3, False), (4, 3, False), (-1, None, False), (9, None, True)],
    ids=["one", "all", "zero", "above-total", "negative-unknown-total", "unknown-total"],
)
def test_is_min_available(wanted: int, total: int | None, expected: bool) -> None:
    assert gang.is_min_available(wanted, total=total) is expected

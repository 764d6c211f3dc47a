"""Resource amounts in milli-units: arithmetic and how people read them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from torchgate.pytorchjob.units import format_amount, format_milli, pod_units, to_units

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        (GPU, 16_000, "16"),
        ("cpu", 500, "500m"),
        ("memory", 64 * 2**30 * 1000, "64Gi"),
        ("memory", 1_000_000, "1000"),
        ("cpu", 16_500, "16500m"),
    ],
)
def test_format_quantity(resource: str, amount: int, text: str) -> None:
    assert format_amount(resource, amount) == text


@pytest.mark.parametrize(("value", "text"), [(8000, "8"), (1500, "1.5"), (0, "0"), (1, "0.001")])
def test_format_milli(value: int, text: str) -> None:
    assert format_milli(value) == text


@pytest.mark.parametrize(
    ("amounts", "capacity", "expected"),
    [
        ({"cpu": Decimal("0.0005")}, False, {"cpu": 1}),
        ({"cpu": Decimal("0.0005")}, True, {"cpu": 0}),
        ({"nvidia.com/gpu": Decimal(-2)}, True, {"nvidia.com/gpu": 0}),
        ({"nvidia.com/gpu": Decimal(0)}, False, {}),
    ],
    ids=["request-rounds-up", "capacity-rounds-down", "negative-capacity", "zero-request"],
)
def test_to_units(amounts: dict[str, Decimal], capacity: bool, expected: dict[str, int]) -> None:
    assert to_units(amounts, capacity=capacity) == expected


def test_a_pod_takes_its_effective_requests_and_one_pod_slot() -> None:
    pod_spec = {
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        "containers": [
            {"name": "a", "resources": {"limits": {GPU: 1}, "requests": {"cpu": "500m"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "0"}}},
        ],
    }
    assert pod_units(pod_spec) == {GPU: 1000, "cpu": 2000, "pods": 1000}

"""Resource amounts in milli-units: arithmetic and how people read them."""

from __future__ import annotations

import pytest

from torchgate.pytorchjob.units import format_amount

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

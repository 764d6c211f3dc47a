"""Resource quantities parsed as the apiserver parses them, however many digits they hold."""

from __future__ import annotations

from decimal import Decimal

import pytest

from torchgate.pytorchjob.quantity import MAX_QUANTITY, QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("value", "expected"),
    [("100m", Decimal("0.1")), ("2Gi", Decimal(2**31)), ("1e3", Decimal(1000)), (4, Decimal(4))],
    ids=["milli", "binary", "exponent", "number"],
)
def test_quantities_are_exact(value: object, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value",
    ["1e1000000", "9" * 5000, "9" * 5000 + "Ki", "10E", 10**30, 1e300],
    ids=["exponent-beyond-decimal", "5000-digits", "5000-digits-binary", "10E", "int", "float"],
)
def test_a_quantity_beyond_the_apiserver_maximum_is_capped(value: object) -> None:
    # found by fuzzing: 1e1000000 raised decimal.Overflow, 5000 digits crashed the webhook later
    assert parse_quantity(value) == MAX_QUANTITY == 2**63 - 1


def test_a_negative_quantity_beyond_the_maximum_is_capped_too() -> None:
    assert parse_quantity("-" + "9" * 30) == -MAX_QUANTITY


def test_an_exponent_beyond_32_bits_is_not_a_quantity() -> None:
    with pytest.raises(QuantityError):  # was a ValueError: Python converts at most 4300 digits
        parse_quantity("1e" + "9" * 5000)

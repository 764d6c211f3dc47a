"""Kubernetes resource quantities (``resource.Quantity``), parsed exactly.

Why not a library: the asyncio Kubernetes client ships no quantity parser, and both halves of
torchgate need one that agrees with the apiserver: the webhook refuses what the apiserver would
refuse (``$GPU_PER_NODE`` is not a quantity) and the controller sums requests against node
allocatable without float rounding (``100m`` CPU times 30 must be exactly 3).

As the apiserver's ``ParseQuantity``: an exponent suffix (``1e3``) that is not a 32-bit integer is
not a quantity, and a quantity beyond ``2^63 - 1`` is capped to it (``maxAllowed``), so however
many digits a manifest holds, what is parsed stays a number that can be counted and printed.
"""

from __future__ import annotations

import functools
import re
from decimal import MAX_EMAX, MIN_EMIN, Decimal, InvalidOperation, localcontext

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# The grammar of resource.Quantity: <signedNumber><suffix>.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?|[eE][+-]?[0-9]+)\Z"
)


MAX_QUANTITY = Decimal(2**63 - 1)
"""The apiserver's ``maxAllowed``: a larger quantity is capped to it."""
_MAX_EXPONENT_DIGITS = 9  # an exponent of more digits may not fit 32 bits: refused (ErrSuffix)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity given as a string or a JSON number; raise ``QuantityError`` if invalid.

    Booleans and ``null`` are not quantities (YAML turns ``nvidia.com/gpu:`` into ``null``).
    """
    if type(value) is str:
        return _parse_text(value)
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return _capped(Decimal(value))
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity")
        return _capped(Decimal(repr(value)))
    if not isinstance(value, str):
        raise QuantityError(f"{type(value).__name__} is not a quantity")
    return _parse_text(value)


# The same few quantities ("1", "8", "64Gi") recur in every pod of every job, and each admission
# review parses dozens of them; Decimals are immutable, so sharing the parsed values is safe.
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    match = _QUANTITY.match(value)
    if not match:
        raise QuantityError(f"{value!r} is not a quantity")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{value!r} is not a quantity") from exc
    suffix = match["suffix"]
    if suffix in _BINARY:
        return _capped(number * _BINARY[suffix])
    if suffix in _DECIMAL:
        return _capped(number * _DECIMAL[suffix])
    exponent = suffix[1:].lstrip("+-")
    if len(exponent) > _MAX_EXPONENT_DIGITS:
        raise QuantityError(f"{value!r} is not a quantity: its exponent is too large")
    with localcontext() as context:  # room for any 32-bit exponent: scaled exactly, then capped
        context.Emax, context.Emin = MAX_EMAX, MIN_EMIN
        return _capped(number.scaleb(int(suffix[1:])))


def _capped(amount: Decimal) -> Decimal:
    if amount > MAX_QUANTITY:
        return MAX_QUANTITY
    if amount < -MAX_QUANTITY:
        return -MAX_QUANTITY
    return amount

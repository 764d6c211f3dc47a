"""Resource amounts as integer milli-units: the one unit system of quota and placement.

Why integers: the admission cycle adds and compares amounts of every node and every gang many
times per cycle; integer arithmetic is exact (``100m`` CPU times 30 is exactly ``3``) and several
times faster than ``Decimal``. A Kubernetes quantity becomes milli-units once, where it is read,
and is never converted back except to be shown.

Invariants:

- ``Units`` maps a resource name to an amount in milli-units (``8`` GPUs are ``8000``).
- A request rounds up (a request never shrinks), a capacity rounds down (capacity never grows).

Rules (each one function):

1. ``fits``: requests fit in free capacity when every requested amount is at most what is free.
2. ``format_amount``: an amount as people write it for its resource: ``16``, ``500m``, ``64Gi``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

MILLI: Final = 1000

Units = Mapping[str, int]

_MEMORY_LIKE = re.compile(r"^(memory|ephemeral-storage|hugepages-.*)$")
_BINARY_SUFFIXES: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
)


def fits(free: Units, requests: Units) -> bool:
    """Whether every requested amount is at most what ``free`` has of it (rule 1)."""
    return all(free.get(name, 0) >= amount for name, amount in requests.items())


def format_amount(resource: str, amount: int) -> str:
    """``amount`` (milli-units) as people write it for ``resource`` (rule 2).

    Whole amounts print as integers (memory-like resources with a binary suffix when exact),
    others in milli-units: ``16``, ``64Gi``, ``500m``.
    """
    whole, rest = divmod(amount, MILLI)
    if rest:
        return f"{amount}m"
    if _MEMORY_LIKE.match(resource) and whole:
        for suffix, size in _BINARY_SUFFIXES:
            if whole % size == 0:
                return f"{whole // size}{suffix}"
    return str(whole)

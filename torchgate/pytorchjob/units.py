"""Resource amounts as integer milli-units: the one unit system of quota and placement.

Why integers: the admission cycle adds and compares amounts of every node and every gang many
times per cycle; integer arithmetic is exact (``100m`` CPU times 30 is exactly ``3``) and several
times faster than ``Decimal``. A Kubernetes quantity becomes milli-units once, where it is read
(a node's allocatable, a pod's requests, a TeamQuota's amounts), and is converted back only to
be shown. The webhook counts a gang's quota usage in the same units as the controller, so both
compare the same numbers with a team's quota.

Invariants:

- ``Units`` maps a resource name to an amount in milli-units (``8`` GPUs are ``8000``).
- A request rounds up (a request never shrinks) and holds positive amounts only; a capacity
  rounds down (capacity never grows) and is never negative.

Rules (each one function):

1. ``request_units`` / ``capacity_units``: a quantity in milli-units, rounded up as a request,
   down (and at least zero) as a capacity; ``to_units`` converts a map of them (a request map
   drops amounts that are not positive).
2. ``pod_units``: what a pod takes from its node: its effective requests (``spec.pod_requests``)
   plus one ``pods`` slot, as kube-scheduler counts them, plus the GPUs its claims ask for
   (``devices.pod_claimed_by_key``) under the resource key of their DeviceClass (its
   ``extendedResourceName``, else the policy's GPU resource), so a claimed GPU weighs as much as
   a requested one (a count only allocation knows weighs nothing: the webhook refuses it).
3. ``add`` / ``subtract``: amounts summed per resource, in place.
4. ``fits``: requests fit in free capacity when every requested amount is at most what is free.
5. ``format_amount``: an amount as a quantity is written for its resource (``16``, ``500m``,
   ``64Gi``); ``format_milli`` as a plain number (``8``, ``1.5``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources, pod_claimed_by_key
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity
from torchgate.pytorchjob.spec import pod_requests

MILLI: Final = 1000
PODS: Final = "pods"  # the resource every pod takes one of, whatever it requests

Units = Mapping[str, int]

_MEMORY_LIKE = re.compile(r"^(memory|ephemeral-storage|hugepages-.*)$")
_BINARY_SUFFIXES: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
)


# ------------------------------------------------------------------ rule 1: converting


def request_units(amount: Decimal) -> int:
    """A requested quantity in milli-units, rounded up (rule 1)."""
    return math.ceil(amount * MILLI)


def capacity_units(amount: Decimal) -> int:
    """A quantity of capacity in milli-units, rounded down, never below zero (rule 1)."""
    return max(0, math.floor(amount * MILLI))


def to_units(amounts: Mapping[str, Decimal], *, capacity: bool = False) -> dict[str, int]:
    """``amounts`` in milli-units: as capacity, or as requests (positive amounts only)."""
    if capacity:
        return {name: capacity_units(value) for name, value in amounts.items()}
    return {name: request_units(value) for name, value in amounts.items() if value > 0}


def parse_capacity(values: object) -> dict[str, int]:
    """A capacity map (a node's ``allocatable``) from raw quantities; bad entries are skipped."""
    out: dict[str, int] = {}
    if not isinstance(values, Mapping):
        return out
    for name, quantity in values.items():
        try:
            out[str(name)] = capacity_units(parse_quantity(quantity))
        except QuantityError:
            continue
    return out


# ------------------------------------------------------------------ rule 2: a pod


def pod_units(
    pod_spec: Mapping[str, Any],
    gpus: GpuSources | None = None,
    claims: ClaimLookup = NO_CLAIMS,
) -> dict[str, int]:
    """What a pod takes: effective requests, one pod slot, and its claimed GPUs (rule 2)."""
    requests = to_units(pod_requests(pod_spec))
    requests[PODS] = requests.get(PODS, 0) + MILLI
    if gpus is not None and gpus.counts_claims:
        for key, count in pod_claimed_by_key(pod_spec, gpus, claims).items():
            requests[key] = requests.get(key, 0) + count * MILLI
    return requests


# ------------------------------------------------------------------ rules 3-4: arithmetic


def add(total: dict[str, int], amounts: Units) -> None:
    """Add ``amounts`` to ``total`` in place (rule 3)."""
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount


def subtract(total: dict[str, int], amounts: Units) -> None:
    """Subtract ``amounts`` from ``total`` in place (rule 3)."""
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) - amount


def fits(free: Units, requests: Units) -> bool:
    """Whether every requested amount is at most what ``free`` has of it (rule 4)."""
    return all(free.get(name, 0) >= amount for name, amount in requests.items())


# ------------------------------------------------------------------ rule 5: showing


def format_amount(resource: str, amount: int) -> str:
    """``amount`` as a quantity of ``resource`` is written: ``16``, ``64Gi``, ``500m`` (rule 5).

    Whole amounts print as integers (memory-like resources with a binary suffix when exact),
    others in milli-units.
    """
    whole, rest = divmod(amount, MILLI)
    if rest:
        return f"{amount}m"
    if _MEMORY_LIKE.match(resource) and whole:
        for suffix, size in _BINARY_SUFFIXES:
            if whole % size == 0:
                return f"{whole // size}{suffix}"
    return str(whole)


def format_milli(value: int) -> str:
    """``8000`` -> ``8``, ``1500`` -> ``1.5``: an amount as a plain number (rule 5)."""
    whole, rest = divmod(value, MILLI)
    return str(whole) if not rest else str(Decimal(value) / MILLI)

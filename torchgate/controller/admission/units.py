"""The admitter's facts in the units of the sharing cycle: milli-units, teams, gangs, statuses.

Why a module of its own: the admitter keeps capacity in ``Decimal`` per resource name (what the
ledger reads from pods and nodes), while ``sharing.decide`` counts integer milli-units with the
GPUs of every policy under one quota key (``pool.GPUS``). Converting in one pure place keeps the
admitter a shell and lets the rules be tested without one.

Rules (each one function):

1. ``to_units``: an amount map in milli-units; requests round up, capacity rounds down (a request
   never shrinks, capacity never grows), negative capacity counts as none.
2. ``quota_usage``: what a gang counts against its team: the sum of its pods' requests per
   resource, the policy's GPU resource under ``pool.GPUS``.
3. ``topology_levels``: the cycle's levels are those of the valid policies, in the order they
   are first declared (one pool normally has one policy defining them); a job's request names a
   level by label key and is mapped into them (``job_topology``).
4. ``protection``: one pool-wide protection: the longest ``minimumRunSeconds`` and the lowest
   ``neverPreemptPriority`` of the policies, and never below ``HELD_PRIORITY``, the priority the
   admitter gives gangs that hold capacity without pods yet (reservations and holds), so that
   a cycle never picks a gang whose pods are being created as a victim.
5. ``team_statuses``: a TeamQuota's status: GPUs used and borrowed (over nominal), admitted and
   waiting jobs; ``quota_conditions``: ``Valid`` with the errors that left a team out.
6. ``gpu_free_nodes``: the nodes a gang that asks for no GPU tries first (``topology`` rule 0):
   those whose allocatable has none of the policy's GPU resource; ``None`` for a gang that asks
   for GPUs (it has no such preference).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from torchgate.controller.admission.quota import Admitted
from torchgate.pytorchjob.fieldpath import FieldError
from torchgate.pytorchjob.pool import (
    GPUS,
    MILLI,
    PreemptionSettings,
    TeamQuota,
    TopologyRequest,
)

HELD_PRIORITY: Final = 1 << 62
Resources = Mapping[str, Decimal]


def to_units(amounts: Resources, *, capacity: bool = False) -> dict[str, int]:
    """``amounts`` in milli-units (rule 1)."""
    if capacity:
        return {name: max(0, math.floor(value * MILLI)) for name, value in amounts.items()}
    return {name: math.ceil(value * MILLI) for name, value in amounts.items() if value > 0}


def quota_usage(requests: Iterable[Resources], gpu_resource: str) -> dict[str, int]:
    """What a gang of pods with these requests counts against quota (rule 2)."""
    total: dict[str, Decimal] = {}
    for pod in requests:
        for name, amount in pod.items():
            key = GPUS if name == gpu_resource else name
            total[key] = total.get(key, Decimal(0)) + amount
    return to_units(total)


def gpu_free_nodes(
    usage: Mapping[str, int], gpu_resource: str, nodes: Iterable[tuple[str, Resources]]
) -> frozenset[str] | None:
    """The nodes (name, allocatable) without GPUs, for a gang of quota ``usage`` (rule 6)."""
    if usage.get(GPUS, 0) > 0:
        return None
    return frozenset(name for name, allocatable in nodes if allocatable.get(gpu_resource, 0) <= 0)


def topology_levels(declared: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """The cycle's topology levels: every policy's, in first-declared order (rule 3)."""
    levels: list[str] = []
    for policy_levels in declared:
        for level in policy_levels:
            if level not in levels:
                levels.append(level)
    return tuple(levels)


def job_topology(level: str | None, required: bool, levels: Sequence[str]) -> TopologyRequest:
    """A job's request (level named by label key) as an index into the cycle's levels."""
    if level is None or level not in levels:
        return TopologyRequest()
    return TopologyRequest(list(levels).index(level), required)


def protection(settings: Iterable[PreemptionSettings]) -> PreemptionSettings:
    """The pool-wide protection of several policies, held gangs included (rule 4)."""
    minimum = 0
    never = HELD_PRIORITY
    for one in settings:
        minimum = max(minimum, one.minimum_run_seconds)
        if one.never_preempt_priority is not None:
            never = min(never, one.never_preempt_priority)
    return PreemptionSettings(minimum_run_seconds=minimum, never_preempt_priority=never)


def epoch_seconds(timestamp: object) -> float | None:
    """An RFC 3339 timestamp (``creationTimestamp``) as seconds since the epoch, else ``None``."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def team_statuses(
    teams: Mapping[str, TeamQuota],
    admitted: Iterable[Admitted],
    waiting: Iterable[str | None],
) -> dict[str, dict[str, int]]:
    """Team name -> its status counters (rule 5); teams without jobs get zeros."""
    out = {
        name: {"usedGPUs": 0, "borrowedGPUs": 0, "admittedJobs": 0, "waitingJobs": 0}
        for name in teams
    }
    used: dict[str, int] = {}
    for gang in admitted:
        if gang.team in out:
            out[gang.team]["admittedJobs"] += 1
            used[gang.team] = used.get(gang.team, 0) + gang.usage.get(GPUS, 0)
    for team in waiting:
        if team in out:
            out[team]["waitingJobs"] += 1
    for name, amount in used.items():
        limit = teams[name].limits.get(GPUS)
        nominal = limit.nominal if limit is not None else amount
        out[name]["usedGPUs"] = math.ceil(amount / MILLI)
        out[name]["borrowedGPUs"] = math.ceil(max(0, amount - nominal) / MILLI)
    return out


def quota_conditions(errors: Sequence[FieldError]) -> list[dict[str, Any]]:
    """The ``Valid`` condition of a TeamQuota (without its transition time)."""
    if not errors:
        return [{"type": "Valid", "status": "True", "reason": "Valid", "message": ""}]
    message = "; ".join(str(error) for error in errors)
    return [{"type": "Valid", "status": "False", "reason": "Invalid", "message": message[:1024]}]

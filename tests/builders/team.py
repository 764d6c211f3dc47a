"""TeamQuotas: the raw object, and the parsed ``TeamQuota`` the admission rules read.

``team`` goes through the product's parser (``parse_team_quota``), so a parsed quota is always
one the controller and the webhook would accept; quotas in whole GPUs, as the CRD spells them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchgate.pytorchjob.pool import TeamQuota, parse_team_quota

DELETED_AT = "2026-01-03T00:00:00Z"  # a TeamQuota's deletionTimestamp, when one is being deleted


def team_quota(
    name: str, namespaces: object = None, *, version: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A TeamQuota object; ``namespaces`` and spec fields given as ``None`` are left out."""
    metadata: dict[str, Any] = {"name": name}
    if version is not None:
        metadata["resourceVersion"] = version
    fields = {"namespaces": namespaces, **spec}
    return {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": metadata,
        "spec": {key: value for key, value in fields.items() if value is not None},
    }


def parsed_team(
    name: str,
    gpus: int,
    borrowing: int | None = None,
    *,
    namespaces: Sequence[str] | None = None,
    deleting: bool = False,
    **spec: Any,
) -> TeamQuota:
    """Team ``name`` owning ``namespaces`` (its own name by default), ``gpus`` nominal GPUs.

    ``borrowing`` is its borrowing limit in GPUs (``None``: no limit); ``spec`` adds other fields
    (``cohort``, ``resources``); ``deleting``: its TeamQuota has a ``deletionTimestamp``.
    """
    raw = team_quota(
        name,
        list(namespaces or [name]),
        nominalGPUs=gpus,
        borrowingLimitGPUs=borrowing,
        **spec,
    )
    if deleting:
        raw["metadata"]["deletionTimestamp"] = DELETED_AT
    parsed, errors = parse_team_quota(raw)
    assert parsed is not None, errors
    assert errors == [], errors
    return parsed

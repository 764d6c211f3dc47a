"""PlacementPolicies: the raw object, the parsed policy, and its pool-sharing sections parsed.

Parsed forms go through the product's parsers (``parse_policy``, ``parse_pool_settings``), so a
test cannot build a policy the webhook or the controller would refuse; fields are spelled as in
the CRD (``topology={"levels": [...]}``, ``preemption={"minimumRunSeconds": 600}``).
"""

from __future__ import annotations

from typing import Any

from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy
from torchgate.pytorchjob.pool import PoolSettings, parse_pool_settings


def policy(name: str = "p", **spec: Any) -> dict[str, Any]:
    """A PlacementPolicy object with the given spec fields."""
    return {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "PlacementPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def parsed_policy(name: str = "p", **spec: Any) -> PlacementPolicy:
    """``policy(name, **spec)`` parsed (``parse_policy``, which must accept it)."""
    parsed, errors = parse_policy(policy(name, **spec))
    assert parsed is not None, errors
    assert errors == [], errors
    return parsed


def pool_settings(**spec: Any) -> PoolSettings:
    """The ``preemption`` and ``topology`` sections of ``policy(**spec)``, as parsed."""
    settings, errors = parse_pool_settings(policy(**spec))
    assert errors == [], errors
    return settings

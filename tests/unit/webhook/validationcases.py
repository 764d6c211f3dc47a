"""Shared vocabulary of the validation tests: error types, field paths, job edits, table cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.builders.policy import parsed_policy
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.webhook.validation import Verdict, validate_create

REQUIRED = ErrorType.REQUIRED
INVALID = ErrorType.INVALID
NOT_SUPPORTED = ErrorType.NOT_SUPPORTED
FORBIDDEN = ErrorType.FORBIDDEN
DUPLICATE = ErrorType.DUPLICATE
TOO_LONG = ErrorType.TOO_LONG
NOT_FOUND = ErrorType.NOT_FOUND

SPECS = "spec.pytorchReplicaSpecs"
M = f"{SPECS}[Master]"
W = f"{SPECS}[Worker]"
MPOD = f"{M}.template.spec"
WPOD = f"{W}.template.spec"
MC0 = f"{MPOD}.containers[0]"
WC0 = f"{WPOD}.containers[0]"
GPU = "nvidia.com/gpu"

Pairs = list[tuple[ErrorType, str]]
Edit = Callable[[dict[str, Any]], None]


def pairs(verdict: Verdict) -> Pairs:
    return [(error.type, error.field) for error in verdict.errors]


def warned(verdict: Verdict) -> list[str]:
    """The field paths of the verdict's warnings, in order."""
    return [str(warning.path) for warning in verdict.warnings]


def setting(*path_and_value: Any) -> Edit:
    """An edit that sets the value at a path of keys/indexes (creating no parents)."""
    *path, value = path_and_value

    def edit(raw: dict[str, Any]) -> None:
        node: Any = raw
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def removing(*path: Any) -> Edit:
    def edit(raw: dict[str, Any]) -> None:
        node: Any = raw
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


def master_pod(*path: Any) -> tuple[Any, ...]:
    return ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", *path)


def master_container(*path: Any) -> tuple[Any, ...]:
    return master_pod("containers", 0, *path)


def case(
    case_id: str,
    raw: dict[str, Any],
    expected: Pairs,
    active_policy: PlacementPolicy = DEFAULT_POLICY,
) -> Any:
    return pytest.param(raw, active_policy, expected, id=case_id)


def check(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> Verdict:
    verdict = validate_create(raw, active_policy)
    assert pairs(verdict) == expected
    assert verdict.allowed is (expected == [])
    return verdict


def torchrun(*options: str) -> list[str]:
    return ["torchrun", *options, "train.py"]


VOLUME = {"name": "data", "emptyDir": {}}
HOSTS = parsed_policy("hosts", allowedHosts=["node-a", "node-b"])

"""``spec.quarantine`` of a PlacementPolicy: defaults, values and malformed fields by path."""

from __future__ import annotations

from typing import Any

import pytest

from torchgate.pytorchjob.policy import QuarantineSettings, parse_policy


def policy(quarantine: object) -> dict[str, Any]:
    return {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "PlacementPolicy",
        "metadata": {"name": "pool"},
        "spec": {"quarantine": quarantine},
    }


def test_without_the_section_the_defaults_apply() -> None:
    parsed, errors = parse_policy(policy(None))
    assert errors == []
    assert parsed is not None
    assert parsed.quarantine == QuarantineSettings(3, 1800, 3600, 600)


def test_given_fields_are_taken_and_missing_ones_default() -> None:
    parsed, errors = parse_policy(policy({"faults": 0, "stuckPodSeconds": 10}))
    assert errors == []
    assert parsed is not None
    assert parsed.quarantine == QuarantineSettings(0, 1800, 3600, 10)


@pytest.mark.parametrize(
    ("section", "paths"),
    [
        pytest.param([], ["spec.quarantine"], id="not-an-object"),
        pytest.param({"faults": -1}, ["spec.quarantine.faults"], id="negative-faults"),
        pytest.param({"windowSeconds": 0}, ["spec.quarantine.windowSeconds"], id="zero-window"),
        pytest.param(
            {"cooldownSeconds": "1h", "stuckPodSeconds": -5},
            ["spec.quarantine.cooldownSeconds", "spec.quarantine.stuckPodSeconds"],
            id="not-positive-integers",
        ),
    ],
)
def test_malformed_fields_are_refused_with_their_paths(section: object, paths: list[str]) -> None:
    parsed, errors = parse_policy(policy(section))
    assert parsed is None
    assert [(e.type.value, str(e.path)) for e in errors] == [
        ("FieldValueInvalid", p) for p in paths
    ]

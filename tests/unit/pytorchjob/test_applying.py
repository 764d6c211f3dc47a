"""``kubectl apply``'s three-way JSON merge patch, and RFC 7386's application of it."""

from __future__ import annotations

from typing import Any

import pytest

from torchgate.pytorchjob.applying import merge_patch, three_way_patch

STORED = {
    "spec": {
        "replicas": 1,
        "containers": [{"name": "pytorch", "ports": [23456]}],
        "runPolicy": {"cleanPodPolicy": "Running"},
    }
}
APPLIED = {"spec": {"replicas": 1, "containers": [{"name": "pytorch"}]}}


@pytest.mark.parametrize(
    ("last_applied", "submitted", "stored", "patch"),
    [
        (APPLIED, APPLIED, APPLIED, {}),
        (
            APPLIED,
            APPLIED,
            STORED,
            {"spec": {"containers": [{"name": "pytorch"}]}},
        ),
        (
            APPLIED,
            {"spec": {"replicas": 3, "containers": [{"name": "pytorch"}]}},
            APPLIED,
            {"spec": {"replicas": 3}},
        ),
        (
            {"spec": {"replicas": 1, "suspend": True}},
            {"spec": {"replicas": 1}},
            {"spec": {"replicas": 1, "suspend": True, "runPolicy": {"x": 1}}},
            {"spec": {"suspend": None}},
        ),
        (
            {"spec": {"replicas": 1}},
            {"spec": {"replicas": 1, "labels": {}}},
            {"spec": {"replicas": 1}},
            {"spec": {"labels": {}}},
        ),
        (
            {"spec": {"runPolicy": {"a": 1, "b": 2}}},
            {"spec": {"runPolicy": {"a": 1, "c": 3}}},
            {"spec": {"runPolicy": {"a": 1, "b": 2, "d": 4}}},
            {"spec": {"runPolicy": {"b": None, "c": 3}}},
        ),
    ],
    ids=[
        "nothing-changed",
        "a-list-the-server-added-to-is-sent-whole",
        "a-change",
        "a-removal-goes-what-the-server-added-stays",
        "an-empty-object-is-a-value",
        "removals-and-additions-merge",
    ],
)
def test_the_patch_holds_the_changes_and_the_removals_from_the_last_applied(
    last_applied: dict[str, Any], submitted: dict[str, Any], stored: dict[str, Any], patch: Any
) -> None:
    assert three_way_patch(last_applied, submitted, stored) == patch


def test_the_patched_object_keeps_what_the_manifest_never_had() -> None:
    submitted = {"spec": {"replicas": 3, "containers": [{"name": "pytorch"}]}}

    patched = merge_patch(STORED, three_way_patch(APPLIED, submitted, STORED))

    assert patched == {
        "spec": {
            "replicas": 3,
            "containers": [{"name": "pytorch"}],
            "runPolicy": {"cleanPodPolicy": "Running"},
        }
    }
    assert STORED["spec"]["containers"] == [{"name": "pytorch", "ports": [23456]}]  # unchanged


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
        ({"a": {"x": 1}}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({"a": 1}, {"a": {"x": 1, "y": None}}, {"a": {"x": 1}}),
        ({"a": 1}, {"b": None}, {"a": 1}),
    ],
    ids=["null-deletes", "objects-merge", "lists-replace", "a-value-becomes-an-object", "no-op"],
)
def test_a_merge_patch_applies_as_rfc_7386_says(
    target: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert merge_patch(target, patch) == expected

"""The tolerations a template may not have agree with the placement's own matching."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as hs

from torchgate.pytorchjob.names import TAINT_QUARANTINE
from torchgate.pytorchjob.taints import (
    EVERY_TAINT,
    RESERVED_TAINTS,
    TAINT_UNSCHEDULABLE,
    Taint,
    Toleration,
    escapes,
    toleration_of,
)

KEYS = ("", TAINT_QUARANTINE, TAINT_UNSCHEDULABLE, "nvidia.com/gpu", "node.kubernetes.io/not-ready")
VALUES = ("", "PodStuck", "NodeLost")
EFFECTS = ("", "NoSchedule", "NoExecute", "PreferNoSchedule")
OPERATORS = ("Exists", "Equal", "", "Gt")
UNKNOWN_KEY = "example.com/an-admins-taint-yet-unknown"

tolerations = hs.builds(
    Toleration,
    hs.sampled_from(KEYS),
    hs.sampled_from(OPERATORS),
    hs.sampled_from(VALUES),
    hs.sampled_from(EFFECTS),
)


@given(tolerations)
def test_escapes_names_exactly_what_the_placement_would_tolerate(toleration: Toleration) -> None:
    every = any(
        toleration.tolerates(Taint(UNKNOWN_KEY, value, effect))
        for value in VALUES
        for effect in ("NoSchedule", "NoExecute")
    )
    reserved = [
        key
        for key in RESERVED_TAINTS
        if any(toleration.tolerates(Taint(key, value, "NoSchedule")) for value in VALUES)
    ]

    found = escapes(toleration)

    if every:
        assert found == EVERY_TAINT
    elif reserved:
        assert [found] == reserved
    else:
        assert found is None


def test_a_quarantine_of_any_cause_is_escaped_by_naming_the_key() -> None:
    assert escapes(toleration_of({"key": TAINT_QUARANTINE, "value": "x"})) == TAINT_QUARANTINE
    assert escapes(toleration_of({"operator": "Exists", "effect": "PreferNoSchedule"})) is None

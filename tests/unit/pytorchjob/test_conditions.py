"""``lastTransitionTime`` moves only when a condition's status moves (``pytorchjob.conditions``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchgate.pytorchjob.conditions import (
    conditions_of,
    stamp_transitions,
    status_to_write,
    transition_time,
)

BEFORE = "2026-03-01T10:00:00Z"
NOW = "2026-03-01T12:00:00Z"


def test_conditions_of_drops_malformed_entries() -> None:
    valid = {"type": "Created", "status": "True"}
    assert conditions_of({"conditions": [valid, None, {"status": "True"}, "x", {"type": 3}]}) == [
        valid
    ]
    assert conditions_of({"conditions": "junk"}) == []
    assert conditions_of(None) == []


@pytest.mark.parametrize(
    ("previous", "began"),
    [
        ([], NOW),
        ([{"type": "Valid", "status": "True", "lastTransitionTime": BEFORE}], BEFORE),
        ([{"type": "Valid", "status": "False", "lastTransitionTime": BEFORE}], NOW),
        ([{"type": "Other", "status": "True", "lastTransitionTime": BEFORE}], NOW),
        ([{"type": "Valid", "status": "True"}], NOW),
        ([{"type": "Valid", "status": "True", "lastTransitionTime": 7}], NOW),
        ([{"type": "Valid", "status": "True", "lastTransitionTime": ""}], NOW),
    ],
    ids=[
        "new",
        "same-status-kept",
        "status-changed",
        "other-type",
        "no-time-stored",
        "time-not-text",
        "time-empty",
    ],
)
def test_a_condition_began_when_its_status_last_changed(
    previous: list[dict[str, Any]], began: str
) -> None:
    assert transition_time(previous, "Valid", "True", now=NOW) == began


def test_stamping_keeps_the_time_of_unchanged_statuses_and_replaces_any_time_carried() -> None:
    previous = [
        {"type": "Valid", "status": "True", "reason": "Valid", "lastTransitionTime": BEFORE},
        {"type": "OverQuota", "status": "True", "lastTransitionTime": BEFORE},
    ]
    written = stamp_transitions(
        [
            {"type": "Valid", "status": "True", "reason": "Other", "message": "new words"},
            {"type": "Deleting", "status": "True", "lastTransitionTime": "1999-01-01T00:00:00Z"},
        ],
        previous,
        now=NOW,
    )
    assert [(c["type"], c["lastTransitionTime"]) for c in written] == [
        ("Valid", BEFORE),
        ("Deleting", NOW),
    ]
    assert written[0]["message"] == "new words"


CONDITIONS = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["Valid", "Deleting", "OverQuota"]), "status": st.sampled_from(
            ["True", "False", "Unknown"]
        )}
    ),
    max_size=3,
    unique_by=lambda c: c["type"],
)  # fmt: skip


@given(CONDITIONS, CONDITIONS)
def test_writing_the_same_conditions_again_later_changes_no_time(
    first: list[dict[str, Any]], then: list[dict[str, Any]]
) -> None:
    earlier = stamp_transitions(first, [], now=BEFORE)
    written = stamp_transitions(then, earlier, now=NOW)
    assert stamp_transitions(then, written, now="2026-03-02T00:00:00Z") == written
    for condition in written:
        unchanged = {"type": condition["type"], "status": condition["status"]} in first
        assert condition["lastTransitionTime"] == (BEFORE if unchanged else NOW)


VALID = {"type": "Valid", "status": "True", "reason": "Accepted", "message": "in use"}


@pytest.mark.parametrize(
    ("previous", "written"),
    [
        ({"conditions": [{**VALID, "lastTransitionTime": BEFORE}]}, None),
        ({"conditions": [{**VALID, "lastTransitionTime": BEFORE}], "other": 1}, None),
        ({"conditions": [{**VALID, "message": "old", "lastTransitionTime": BEFORE}]}, BEFORE),
        ({"conditions": [{**VALID, "status": "False", "lastTransitionTime": BEFORE}]}, NOW),
        ({}, NOW),
        (None, NOW),
        ("junk", NOW),
        ({"conditions": "junk"}, NOW),
    ],
    ids=["says-it-all", "other-fields-not-compared", "new-message", "status-moved", "empty",
         "none", "not-a-status", "malformed-conditions"],
)  # fmt: skip
def test_a_status_is_written_only_when_the_previous_one_does_not_say_it_all(
    previous: object, written: str | None
) -> None:
    status = status_to_write({"conditions": [VALID]}, previous, now=NOW)
    if written is None:
        assert status is None
    else:
        assert status == {"conditions": [{**VALID, "lastTransitionTime": written}]}


@given(CONDITIONS, CONDITIONS)
def test_a_status_written_over_itself_writes_nothing(
    first: list[dict[str, Any]], then: list[dict[str, Any]]
) -> None:
    earlier = status_to_write({"conditions": first, "usedGPUs": 1}, None, now=BEFORE)
    written = status_to_write({"conditions": then, "usedGPUs": 1}, earlier, now=NOW)
    assert status_to_write({"conditions": then, "usedGPUs": 1}, written or earlier, now="x") is None

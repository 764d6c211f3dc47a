"""``quarantine.rules``: counting a node's faults, when it is quarantined, lifted or tidied.

Table tests per rule, a property test of the sliding window, and the patches applied to a Node
(as a JSON merge patch would) to show what ``kubectl`` then sees.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from tests.builders.node import node
from tests.unit.controller.helpers import NOW
from torchgate.controller.quarantine import rules
from torchgate.controller.quarantine.rules import Fault, NodeQuarantine, Outage, Quarantine
from torchgate.pytorchjob import moments
from torchgate.pytorchjob.policy import QuarantineSettings

# Spelled out rather than imported: the code under test must agree with these.
TAINT = "torchgate.io/quarantine"
UNTIL = "torchgate.io/quarantine-until"
SETTINGS = QuarantineSettings(faults=3, window_seconds=600, cooldown_seconds=1800)


def fault(ago: float, cause: str = "PodStuck", node_name: str = "a100-1") -> Fault:
    return Fault(node_name, cause, NOW - timedelta(seconds=ago), ("team", f"job-{ago:g}"))


@pytest.mark.parametrize(
    ("ages", "expected"),
    [
        pytest.param([], 0, id="none"),
        pytest.param([10, 20, 599], 3, id="all-inside-the-window"),
        pytest.param([10, 600, 900], 1, id="the-window-is-open-at-its-start"),
    ],
)
def test_recent_counts_only_faults_inside_the_sliding_window(
    ages: list[float], expected: int
) -> None:
    counted = rules.recent([fault(a) for a in ages], now=NOW, window_seconds=600)
    assert len(counted) == expected
    assert list(counted) == sorted(counted, key=lambda f: f.at)


@pytest.mark.parametrize(
    ("faults", "settings", "expected"),
    [
        pytest.param([fault(5), fault(10)], SETTINGS, None, id="below-the-threshold"),
        pytest.param(
            [fault(5), fault(10), fault(15)],
            SETTINGS,
            Quarantine("PodStuck", NOW + timedelta(seconds=1800)),
            id="at-the-threshold",
        ),
        pytest.param(
            [fault(5), fault(10), fault(700)], SETTINGS, None, id="one-is-out-of-the-window"
        ),
        pytest.param(
            [fault(5, "NodeLost"), fault(10, "PodStuck"), fault(15, "PodStuck")],
            SETTINGS,
            Quarantine("PodStuck", NOW + timedelta(seconds=1800)),
            id="the-cause-most-faults-had",
        ),
        pytest.param(
            [fault(5, "NodeLost"), fault(10, "PodStuck")],
            QuarantineSettings(faults=2, window_seconds=600, cooldown_seconds=60),
            Quarantine("NodeLost", NOW + timedelta(seconds=60)),
            id="ties-go-to-the-latest",
        ),
        pytest.param(
            [fault(1), fault(2), fault(3), fault(4)],
            QuarantineSettings(faults=0),
            None,
            id="zero-faults-never-quarantines",
        ),
    ],
)
def test_due_quarantines_at_the_threshold_for_the_cooldown(
    faults: list[Fault], settings: QuarantineSettings, expected: Quarantine | None
) -> None:
    assert rules.due(faults, now=NOW, settings=settings) == expected


@given(hs.lists(hs.floats(min_value=0, max_value=2000), max_size=12))
def test_a_quarantine_is_due_exactly_when_enough_faults_are_recent(ages: list[float]) -> None:
    inside = sum(1 for a in ages if a < SETTINGS.window_seconds)
    found = rules.due([fault(a) for a in ages], now=NOW, settings=SETTINGS)
    assert (found is not None) == (inside >= SETTINGS.faults)


# ------------------------------------------------------------------ rule 6: one per outage

BLIP = Outage("NotReady", NOW - timedelta(seconds=100))
LATER_BLIP = Outage("NotReady", NOW - timedelta(seconds=40))
XID = Outage("nvidia.com/gpu-health", NOW - timedelta(seconds=90))


def outage_fault(ago: float, outage: Outage | None, cause: str = "NodeLost") -> Fault:
    return Fault("a100-1", cause, NOW - timedelta(seconds=ago), ("team", f"job-{ago:g}"), outage)


@pytest.mark.parametrize(
    ("faults", "counted", "quarantined"),
    [
        pytest.param([outage_fault(a, BLIP) for a in (90, 80, 70)], 1, False,
                     id="one-blip-under-three-gangs"),
        pytest.param([outage_fault(90, BLIP), outage_fault(30, LATER_BLIP),
                      outage_fault(10, Outage("NotReady", NOW - timedelta(seconds=15)))], 3, True,
                     id="three-separate-blips"),
        pytest.param([outage_fault(a, XID, "NodeTainted") for a in (80, 70)]
                     + [outage_fault(20, Outage("nvidia.com/gpu-health", NOW))], 2, False,
                     id="the-same-taint-added-again-is-another-outage"),
        pytest.param([outage_fault(80, XID, "NodeTainted"), outage_fault(70, BLIP)], 2, False,
                     id="a-taint-and-a-blip-are-two"),
        pytest.param([outage_fault(a, None, "PodStuck") for a in (30, 20, 10)], 3, True,
                     id="faults-of-their-own-count-each"),
        pytest.param([outage_fault(90, BLIP), outage_fault(80, BLIP),
                      outage_fault(30, None, "PodStuck"), outage_fault(20, None, "PodStuck")],
                     3, True, id="a-blip-and-two-stuck-pods"),
        pytest.param([outage_fault(700, BLIP), outage_fault(500, BLIP), outage_fault(400, BLIP)],
                     1, False, id="an-outage-whose-first-fault-left-the-window-counts-once"),
    ],
)  # fmt: skip
def test_the_faults_of_one_outage_count_once_however_many_gangs_it_took(
    faults: list[Fault], counted: int, quarantined: bool
) -> None:
    recent = rules.recent(faults, now=NOW, window_seconds=SETTINGS.window_seconds)
    assert len(rules.one_per_outage(recent)) == counted
    assert (rules.due(faults, now=NOW, settings=SETTINGS) is not None) == quarantined


def test_the_cause_of_a_quarantine_is_the_one_most_outages_had() -> None:
    """Three gangs one blip took down do not outvote two stuck pods."""
    faults = [
        *(outage_fault(a, BLIP) for a in (90, 80, 70)),
        outage_fault(30, None, "PodStuck"),
        outage_fault(20, None, "PodStuck"),
    ]
    found = rules.due(faults, now=NOW, settings=SETTINGS)
    assert found is not None
    assert found.cause == "PodStuck"


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the apiserver applies ``application/merge-patch+json``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


OTHER_TAINT = {"key": "nvidia.com/gpu-health", "value": "unhealthy", "effect": "NoSchedule"}


def tainted_node() -> dict[str, Any]:
    raw = node("a100-1", gpus=8, taints=[dict(OTHER_TAINT)])
    raw["metadata"]["resourceVersion"] = "41"
    return raw


def test_a_quarantine_is_a_no_schedule_taint_and_two_labels_others_kept() -> None:
    raw = tainted_node()
    until = NOW + timedelta(seconds=1800)
    patch = rules.quarantine_patch(raw, Quarantine("PodStuck", until), now=NOW)
    assert patch["metadata"]["resourceVersion"] == "41"
    after = apply_merge_patch(raw, patch)
    assert after["spec"]["taints"] == [
        OTHER_TAINT,
        {"key": TAINT, "value": "PodStuck", "effect": "NoSchedule"},
    ]
    assert after["metadata"]["labels"][TAINT] == "PodStuck"
    assert after["metadata"]["labels"][UNTIL] == "20260301T123000Z"
    assert rules.quarantine_of(after) == NodeQuarantine(True, "PodStuck", until, labelled=True)


def test_a_release_removes_the_taint_and_labels_only() -> None:
    raw = tainted_node()
    quarantined = apply_merge_patch(
        raw, rules.quarantine_patch(raw, Quarantine("NodeLost", NOW), now=NOW)
    )
    released = apply_merge_patch(quarantined, rules.release_patch(quarantined))
    assert released["spec"]["taints"] == [OTHER_TAINT]
    assert TAINT not in released["metadata"]["labels"]
    assert UNTIL not in released["metadata"]["labels"]
    assert rules.quarantine_of(released) == NodeQuarantine()


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(NodeQuarantine(), (None, None), id="never-quarantined"),
        pytest.param(
            NodeQuarantine(True, "PodStuck", NOW + timedelta(seconds=90), labelled=True),
            (None, 90.0),
            id="cooling-down",
        ),
        pytest.param(
            NodeQuarantine(True, "PodStuck", NOW - timedelta(seconds=1), labelled=True),
            ("lift", None),
            id="cooldown-over",
        ),
        pytest.param(
            NodeQuarantine(False, "PodStuck", NOW + timedelta(seconds=90), labelled=True),
            ("tidy", None),
            id="cleared-by-an-admin",
        ),
        pytest.param(NodeQuarantine(True, "manual"), (None, None), id="a-hand-made-taint"),
    ],
)
def test_next_step_lifts_after_the_cooldown_and_tidies_a_cleared_node(
    state: NodeQuarantine, expected: tuple[str | None, float | None]
) -> None:
    assert rules.next_step(state, now=NOW) == expected


# ------------------------------------------------------------------ rules 7-8: the record


FAULTS = "torchgate.io/quarantine-faults"


def recorded(value: object) -> dict[str, Any]:
    raw = node("a100-1")
    raw["metadata"]["annotations"] = {FAULTS: value}
    return raw


def test_a_nodes_faults_round_trip_through_its_annotation_with_their_outages() -> None:
    blip = Outage("NotReady", NOW - timedelta(seconds=40))
    faults = (
        outage_fault(30, blip),
        outage_fault(20, Outage("Deleted")),
        Fault("a100-1", "PodStuck", NOW - timedelta(seconds=10, microseconds=7), ("team", "b")),
    )
    raw = apply_merge_patch(node("a100-1"), rules.history_patch(faults, start=None))

    history = rules.history_of(raw)

    assert history.faults == faults
    assert history.unreadable == 0
    assert [f.outage for f in history.faults] == [blip, Outage("Deleted"), None]
    entry = json.loads(raw["metadata"]["annotations"][FAULTS])[0]
    assert entry == {
        "at": "2026-03-01T11:59:30Z",
        "cause": "NodeLost",
        "job": "team/job-30",
        "outage": "NotReady",
        "outageBegan": "2026-03-01T11:59:20Z",
    }


GOOD = {"at": "2026-03-01T11:59:00Z", "cause": "NodeLost", "job": "team/a", "outage": "NotReady"}


@pytest.mark.parametrize(
    ("value", "read", "unreadable"),
    [
        pytest.param(None, 0, 0, id="absent"),
        pytest.param("[]", 0, 0, id="empty"),
        pytest.param("not json", 0, 1, id="not-json"),
        pytest.param('{"at": "x"}', 0, 1, id="an-object-not-a-list"),
        pytest.param(json.dumps([GOOD, 7, "x"]), 1, 2, id="entries-not-objects"),
        pytest.param(json.dumps([GOOD, {**GOOD, "at": "yesterday"}]), 1, 1, id="bad-time"),
        pytest.param(json.dumps([{**GOOD, "at": "2026-03-01T11:59:00"}]), 0, 1, id="no-zone"),
        pytest.param(json.dumps([{**GOOD, "job": "a"}]), 0, 1, id="job-without-namespace"),
        pytest.param(json.dumps([{**GOOD, "cause": ""}]), 0, 1, id="no-cause"),
        pytest.param(json.dumps([{**GOOD, "outage": 3}]), 0, 1, id="bad-outage"),
        pytest.param(json.dumps([{**GOOD, "outageBegan": "x"}]), 0, 1, id="bad-outage-start"),
    ],
)
def test_an_unreadable_record_is_skipped_and_counted_never_raised(
    value: object, read: int, unreadable: int
) -> None:
    history = rules.history_of(recorded(value))
    assert (len(history.faults), history.unreadable) == (read, unreadable)


def test_the_record_keeps_the_latest_faults_only_and_none_removes_it() -> None:
    many = [fault(a) for a in range(100)]
    raw = apply_merge_patch(node("a100-1"), rules.history_patch(many, start=None))
    kept = rules.history_of(raw).faults
    assert len(kept) == rules.KEPT_FAULTS
    assert kept == tuple(sorted(many, key=lambda f: f.at)[-rules.KEPT_FAULTS :])
    assert len(raw["metadata"]["annotations"][FAULTS]) < 4096

    emptied = apply_merge_patch(raw, rules.history_patch([], start=None))
    assert FAULTS not in emptied["metadata"].get("annotations", {})


def test_a_quarantine_and_an_admins_clearing_forget_the_record_a_lift_keeps_it() -> None:
    raw = apply_merge_patch(tainted_node(), rules.history_patch([fault(5)], start=None))
    quarantined = apply_merge_patch(
        raw,
        rules.quarantine_patch(raw, Quarantine("NodeLost", NOW), now=NOW - timedelta(seconds=2)),
    )
    assert rules.history_of(quarantined).faults == ()
    assert rules.count_start(quarantined) == NOW - timedelta(seconds=2)

    again = apply_merge_patch(quarantined, rules.history_patch([fault(1)], start=None))
    lifted = apply_merge_patch(again, rules.release_patch(again))
    assert rules.history_of(lifted).faults == (fault(1),)
    assert rules.count_start(lifted) == NOW - timedelta(seconds=2)  # a lift keeps the start
    cleared = apply_merge_patch(again, rules.release_patch(again, afresh_at=NOW))
    assert rules.history_of(cleared).faults == ()
    assert rules.count_start(cleared) == NOW


# ------------------------------------------------------------------ rule 9: afresh

SINCE = "torchgate.io/quarantine-faults-since"


@pytest.mark.parametrize(
    ("start", "kept"),
    [
        pytest.param(None, [30, 20, 10], id="never-started-afresh"),
        pytest.param(NOW - timedelta(seconds=20), [10], id="at-the-start-is-before-it"),
        pytest.param(NOW - timedelta(seconds=25), [20, 10], id="after-the-start-kept"),
        pytest.param(NOW, [], id="all-before"),
    ],
)
def test_no_fault_at_or_before_the_counts_start_is_written_or_read(
    start: Any, kept: list[int]
) -> None:
    faults = [fault(30), fault(20), fault(10)]
    written = apply_merge_patch(node("a100-1"), rules.history_patch(faults, start=start))
    assert rules.history_of(written).faults == tuple(fault(a) for a in kept)

    everything = apply_merge_patch(node("a100-1"), rules.history_patch(faults, start=None))
    if start is not None:
        everything["metadata"]["annotations"][SINCE] = moments.format_exact_time(start)
    assert rules.history_of(everything).faults == tuple(fault(a) for a in kept)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="absent"),
        pytest.param("yesterday", id="not-a-time"),
        pytest.param("2026-03-01T12:00:00", id="no-zone"),
        pytest.param(7, id="not-a-string"),
    ],
)
def test_an_unreadable_start_starts_nothing_and_drops_no_fault(value: object) -> None:
    raw = apply_merge_patch(node("a100-1"), rules.history_patch([fault(5)], start=None))
    raw["metadata"]["annotations"][SINCE] = value
    assert rules.count_start(raw) is None
    assert rules.history_of(raw).faults == (fault(5),)

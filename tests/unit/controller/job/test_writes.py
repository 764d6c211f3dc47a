"""The status-write policy: news now, progress after a bounded wait (table and property tests)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from torchgate.controller.job import status as st
from torchgate.controller.job.writes import (
    StatusWritePolicy,
    WriteFacts,
    is_counts_only,
    is_progress,
)
from torchgate.pytorchjob import reasons

POLICY = StatusWritePolicy(busy_hold_seconds=10.0, counts_interval_seconds=1.0)


def cond(kind: str, status: str = "True", reason: str = "R", message: str = "m") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


CREATED = cond(reasons.CREATED, reason=reasons.REASON_CREATED)
RUNNING = cond(reasons.RUNNING, reason=reasons.REASON_RUNNING)
QUEUED = cond(
    reasons.QUEUED,
    reason=reasons.REASON_WAITING_FOR_RESOURCES,
    message="waiting for 8 nvidia.com/gpu: 0 free",
)
COUNTS = {"Master": {"active": 1}}
MORE_COUNTS = {"Master": {"active": 1}, "Worker": {"active": 7}}

PROGRESS = [
    pytest.param({}, {"conditions": [CREATED]}, id="first status: Created"),
    pytest.param(None, {"conditions": [CREATED, QUEUED]}, id="first status: Created and Queued"),
    pytest.param(
        {},
        {"conditions": [CREATED], "startTime": "t0"},
        id="first status: Created and startTime",
    ),
    pytest.param(
        {"conditions": [CREATED, QUEUED]},
        {"conditions": [CREATED, {**QUEUED, "message": "waiting: 8 free"}]},
        id="Queued message changes",
    ),
    pytest.param(
        {"conditions": [CREATED, QUEUED]},
        {"conditions": [CREATED], "startTime": "t0"},
        id="Queued goes, startTime appears",
    ),
    pytest.param({"conditions": [CREATED]}, {"conditions": [CREATED, RUNNING]}, id="Running True"),
    pytest.param(
        {"conditions": [CREATED, RUNNING], "replicaStatuses": COUNTS},
        {"conditions": [CREATED, RUNNING], "replicaStatuses": MORE_COUNTS},
        id="counts only",
    ),
]

NEWS = [
    pytest.param(
        {"conditions": [CREATED]},
        {"conditions": [CREATED, cond(reasons.SUCCEEDED)]},
        id="Succeeded",
    ),
    pytest.param(
        {"conditions": [CREATED]}, {"conditions": [CREATED, cond(reasons.FAILED)]}, id="Failed"
    ),
    pytest.param(
        {"conditions": [RUNNING]}, {"conditions": [cond(reasons.RESTARTING)]}, id="Restarting"
    ),
    pytest.param(
        {"conditions": [RUNNING]},
        {"conditions": [cond(reasons.RUNNING, "False")]},
        id="Running turns False",
    ),
    pytest.param(
        {"conditions": [CREATED]},
        {"conditions": [CREATED, cond(reasons.SUSPENDED)]},
        id="Suspended",
    ),
    pytest.param({"startTime": "t0"}, {"startTime": "t1"}, id="startTime changed"),
    pytest.param({"startTime": "t0"}, {"startTime": None}, id="startTime dropped"),
    pytest.param({}, {"completionTime": "t1"}, id="completionTime"),
    pytest.param({}, {"somethingElse": 1}, id="a field the policy does not know"),
]


@pytest.mark.parametrize(("written", "wanted"), PROGRESS)
def test_progress_is_told_from_news(written: dict[str, Any] | None, wanted: dict[str, Any]) -> None:
    assert is_progress(written, wanted)


@pytest.mark.parametrize(("written", "wanted"), NEWS)
def test_news_is_told_from_progress(written: dict[str, Any], wanted: dict[str, Any]) -> None:
    assert not is_progress(written, wanted)


@pytest.mark.parametrize(("written", "wanted"), NEWS)
@pytest.mark.parametrize(
    "facts",
    [WriteFacts(0.0, None, 0), WriteFacts(0.0, 0.1, 100), WriteFacts(3.0, 3.0, 5)],
    ids=["idle", "creating", "pending a while"],
)
def test_news_is_written_now_whatever_the_facts(
    written: dict[str, Any], wanted: dict[str, Any], facts: WriteFacts
) -> None:
    assert POLICY.delay(written, wanted, facts) == 0.0


CONDITION_WRITTEN = {"conditions": [CREATED]}
CONDITION_WANTED = {"conditions": [CREATED, RUNNING], "replicaStatuses": COUNTS}
COUNTS_WRITTEN = {"conditions": [CREATED, RUNNING], "replicaStatuses": COUNTS}
COUNTS_WANTED = {"conditions": [CREATED, RUNNING], "replicaStatuses": MORE_COUNTS}


@pytest.mark.parametrize(
    ("written", "wanted", "facts", "delay"),
    [
        pytest.param(
            CONDITION_WRITTEN, CONDITION_WANTED, WriteFacts(0.0, 0.2, 0), 0.0, id="quiet: now"
        ),
        pytest.param(
            CONDITION_WRITTEN,
            CONDITION_WANTED,
            WriteFacts(0.0, None, 1),
            10.0,
            id="creates pending, new change: up to 10 s",
        ),
        pytest.param(
            CONDITION_WRITTEN,
            CONDITION_WANTED,
            WriteFacts(4.0, 30.0, 32),
            6.0,
            id="creates pending, pending 4 s: 6 s more",
        ),
        pytest.param(
            CONDITION_WRITTEN,
            CONDITION_WANTED,
            WriteFacts(10.0, 30.0, 32),
            0.0,
            id="creates pending, held 10 s: now",
        ),
        pytest.param(
            CONDITION_WRITTEN,
            CONDITION_WANTED,
            WriteFacts(25.0, 30.0, 32),
            0.0,
            id="creates pending, overdue: now",
        ),
        pytest.param(
            COUNTS_WRITTEN,
            COUNTS_WANTED,
            WriteFacts(0.0, 0.25, 0),
            0.75,
            id="counts alone, written 0.25 s ago: the rest of the second",
        ),
        pytest.param(
            COUNTS_WRITTEN,
            COUNTS_WANTED,
            WriteFacts(0.0, 1.0, 0),
            0.0,
            id="counts alone, written a second ago: now",
        ),
        pytest.param(
            COUNTS_WRITTEN,
            COUNTS_WANTED,
            WriteFacts(0.0, None, 0),
            0.0,
            id="counts alone, never written by this process: now",
        ),
        pytest.param(
            COUNTS_WRITTEN,
            COUNTS_WANTED,
            WriteFacts(2.0, 8.0, 3),
            8.0,
            id="counts alone while creates are pending: the busy hold",
        ),
    ],
)
def test_progress_waits_a_bounded_time(
    written: dict[str, Any], wanted: dict[str, Any], facts: WriteFacts, delay: float
) -> None:
    assert POLICY.delay(written, wanted, facts) == pytest.approx(delay)


@pytest.mark.parametrize(
    ("written", "wanted", "counts_only"),
    [
        pytest.param(COUNTS_WRITTEN, COUNTS_WANTED, True, id="counts"),
        pytest.param(CONDITION_WRITTEN, CONDITION_WANTED, False, id="a condition too"),
        pytest.param(None, {"replicaStatuses": COUNTS}, False, id="a first status"),
        pytest.param(COUNTS_WRITTEN, {**COUNTS_WANTED, "startTime": "t0"}, False, id="a time too"),
    ],
)
def test_counts_only_changes(
    written: dict[str, Any] | None, wanted: dict[str, Any], counts_only: bool
) -> None:
    assert is_counts_only(written, wanted) is counts_only


def test_a_policy_without_holds_writes_everything_now() -> None:
    policy = StatusWritePolicy(busy_hold_seconds=0.0, counts_interval_seconds=0.0)
    assert policy.delay(COUNTS_WRITTEN, COUNTS_WANTED, WriteFacts(0.0, 0.1, 50)) == 0.0


# ------------------------------------------------------------------ properties

KINDS = [
    reasons.CREATED,
    reasons.QUEUED,
    reasons.RUNNING,
    reasons.RESTARTING,
    reasons.SUCCEEDED,
    reasons.FAILED,
    reasons.SUSPENDED,
]
conditions = hs.lists(
    hs.builds(
        cond,
        hs.sampled_from(KINDS),
        hs.sampled_from([st.TRUE, st.FALSE]),
        hs.sampled_from(["A", "B"]),
        hs.sampled_from(["m", "n"]),
    ),
    max_size=4,
)
statuses = hs.fixed_dictionaries(
    {},
    optional={
        "conditions": conditions,
        "replicaStatuses": hs.sampled_from([COUNTS, MORE_COUNTS]),
        "startTime": hs.sampled_from(["t0", "t1", None]),
        "completionTime": hs.sampled_from(["t2", None]),
    },
)


@hs.composite
def facts(draw: hs.DrawFn) -> WriteFacts:
    """Facts as the reconciler can see them: a status pending since the last write at most."""
    pending = draw(hs.floats(0.0, 100.0, allow_nan=False))
    last = draw(hs.none() | hs.floats(0.0, 100.0, allow_nan=False).map(lambda s: s + pending))
    return WriteFacts(pending, last, draw(hs.integers(0, 200)))


policies = hs.builds(
    StatusWritePolicy,
    hs.floats(0.0, 30.0, allow_nan=False),
    hs.floats(0.0, 5.0, allow_nan=False),
)


def longest_hold(policy: StatusWritePolicy) -> float:
    """No status waits longer than this (from when it was first wanted or last written)."""
    return max(policy.busy_hold_seconds, policy.counts_interval_seconds, 0.0)


@given(policies, statuses, statuses, facts())
def test_no_status_waits_longer_than_the_longest_hold(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
) -> None:
    delay = policy.delay(written, wanted, fact)
    assert delay >= 0.0
    assert fact.pending_seconds + delay <= longest_hold(policy) + 1e-9 or delay == 0.0
    if fact.since_last_write is not None:
        assert delay <= longest_hold(policy)


@given(policies, statuses, statuses, facts())
def test_what_is_not_progress_is_never_held(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
) -> None:
    if not is_progress(written, wanted):
        assert policy.delay(written, wanted, fact) == 0.0


@given(policies, statuses, statuses, facts(), hs.floats(0.0, 50.0, allow_nan=False))
def test_waiting_longer_never_makes_the_wait_longer(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
    later: float,
) -> None:
    since = None if fact.since_last_write is None else fact.since_last_write + later
    after = WriteFacts(fact.pending_seconds + later, since, fact.creates_pending)
    assert policy.delay(written, wanted, after) <= policy.delay(written, wanted, fact)


@given(policies, statuses, statuses, facts())
def test_pending_creates_never_shorten_a_wait(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
) -> None:
    idle = WriteFacts(fact.pending_seconds, fact.since_last_write, 0)
    busy = WriteFacts(fact.pending_seconds, fact.since_last_write, max(1, fact.creates_pending))
    assert policy.delay(written, wanted, busy) >= policy.delay(written, wanted, idle)

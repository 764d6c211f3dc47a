"""The status-write policy: news now, progress after a bounded wait (table and property tests)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from torchgate.controller import status as st
from torchgate.controller.writepolicy import StatusWritePolicy, WriteFacts, is_progress

POLICY = StatusWritePolicy(busy_hold_seconds=10.0, settle_seconds=1.0)


def cond(kind: str, status: str = "True", reason: str = "R", message: str = "m") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


CREATED = cond(st.CREATED, reason=st.REASON_CREATED)
RUNNING = cond(st.RUNNING, reason=st.REASON_RUNNING)
QUEUED = cond(st.QUEUED, reason=st.REASON_WAITING, message="waiting for 8 nvidia.com/gpu: 0 free")
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
        {"conditions": [CREATED, cond(st.SUCCEEDED)]},
        id="Succeeded",
    ),
    pytest.param(
        {"conditions": [CREATED]}, {"conditions": [CREATED, cond(st.FAILED)]}, id="Failed"
    ),
    pytest.param({"conditions": [RUNNING]}, {"conditions": [cond(st.RESTARTING)]}, id="Restarting"),
    pytest.param(
        {"conditions": [RUNNING]},
        {"conditions": [cond(st.RUNNING, "False")]},
        id="Running turns False",
    ),
    pytest.param(
        {"conditions": [CREATED]},
        {"conditions": [CREATED, cond(st.SUSPENDED)]},
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
    [WriteFacts(0.0, 0), WriteFacts(0.0, 100), WriteFacts(3.0, 5)],
    ids=["idle", "creating", "pending a while"],
)
def test_news_is_written_now_whatever_the_facts(
    written: dict[str, Any], wanted: dict[str, Any], facts: WriteFacts
) -> None:
    assert POLICY.delay(written, wanted, facts) == 0.0


PROGRESS_WRITTEN = {"conditions": [CREATED]}
PROGRESS_WANTED = {"conditions": [CREATED, RUNNING], "replicaStatuses": COUNTS}


@pytest.mark.parametrize(
    ("facts", "delay"),
    [
        pytest.param(WriteFacts(0.0, 0), 1.0, id="idle, new change: settles 1 s"),
        pytest.param(WriteFacts(0.4, 0), 0.6, id="idle, pending 0.4 s: the rest of the second"),
        pytest.param(WriteFacts(1.0, 0), 0.0, id="idle, settled: now"),
        pytest.param(WriteFacts(7.0, 0), 0.0, id="idle after a busy hold: now"),
        pytest.param(WriteFacts(0.0, 1), 10.0, id="creates pending, new change: up to 10 s"),
        pytest.param(WriteFacts(4.0, 32), 6.0, id="creates pending, pending 4 s: 6 s more"),
        pytest.param(WriteFacts(10.0, 32), 0.0, id="creates pending, held 10 s: now"),
        pytest.param(WriteFacts(25.0, 32), 0.0, id="creates pending, overdue: now"),
    ],
)
def test_progress_waits_a_bounded_time(facts: WriteFacts, delay: float) -> None:
    assert POLICY.delay(PROGRESS_WRITTEN, PROGRESS_WANTED, facts) == pytest.approx(delay)


def test_a_policy_without_holds_writes_everything_now() -> None:
    policy = StatusWritePolicy(busy_hold_seconds=0.0, settle_seconds=0.0)
    assert policy.delay(PROGRESS_WRITTEN, PROGRESS_WANTED, WriteFacts(0.0, 50)) == 0.0


# ------------------------------------------------------------------ properties

KINDS = [st.CREATED, st.QUEUED, st.RUNNING, st.RESTARTING, st.SUCCEEDED, st.FAILED, st.SUSPENDED]
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
facts = hs.builds(
    WriteFacts,
    hs.floats(0.0, 100.0, allow_nan=False),
    hs.integers(0, 200),
)
policies = hs.builds(
    StatusWritePolicy,
    hs.floats(0.0, 30.0, allow_nan=False),
    hs.floats(0.0, 30.0, allow_nan=False),
)


@given(policies, statuses, statuses, facts)
def test_no_status_waits_longer_than_the_longest_hold(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
) -> None:
    delay = policy.delay(written, wanted, fact)
    assert delay >= 0.0
    assert fact.pending_seconds + delay <= policy.longest_hold + 1e-9 or delay == 0.0


@given(policies, statuses, statuses, facts)
def test_what_is_not_progress_is_never_held(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
) -> None:
    if not is_progress(written, wanted):
        assert policy.delay(written, wanted, fact) == 0.0


@given(policies, statuses, statuses, facts, hs.floats(0.0, 50.0, allow_nan=False))
def test_waiting_longer_never_makes_the_wait_longer(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
    later: float,
) -> None:
    after = WriteFacts(fact.pending_seconds + later, fact.creates_pending)
    assert policy.delay(written, wanted, after) <= policy.delay(written, wanted, fact)


@given(policies, statuses, statuses, facts)
def test_pending_creates_never_shorten_a_wait(
    policy: StatusWritePolicy,
    written: dict[str, Any],
    wanted: dict[str, Any],
    fact: WriteFacts,
) -> None:
    idle = WriteFacts(fact.pending_seconds, 0)
    busy = WriteFacts(fact.pending_seconds, max(1, fact.creates_pending))
    assert policy.delay(written, wanted, busy) >= policy.delay(written, wanted, idle)

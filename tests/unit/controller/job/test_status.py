"""Condition transitions with the training-operator's semantics, and replica counts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.builders.job import job, parsed_job, with_uid
from tests.builders.pod import pod
from tests.unit.controller.helpers import NOW
from torchgate.controller.job import status as st

LATER = NOW + timedelta(minutes=5)


def cond(
    kind: str, status: str = "True", reason: str = "R", message: str = "m", at: datetime = NOW
) -> dict[str, Any]:
    stamp = st.format_time(at)
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }


def kinds(conditions: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in conditions]


def test_new_condition_is_appended_with_timestamps() -> None:
    result = st.set_condition([], "Created", "True", "PyTorchJobCreated", "created", NOW)
    assert result == [cond("Created", reason="PyTorchJobCreated", message="created")]


def test_unchanged_condition_keeps_everything() -> None:
    before = [cond("Created"), cond("Running")]
    assert st.set_condition(before, "Created", "True", "R", "m", LATER) == before


def test_changed_condition_moves_to_the_end() -> None:
    before = [cond("Created"), cond("Running", reason="PyTorchJobRunning")]
    result = st.set_condition(before, "Created", "False", "Other", "m", LATER)
    assert kinds(result) == [("Running", "True"), ("Created", "False")]
    assert result[-1]["lastTransitionTime"] == st.format_time(LATER)


def test_reason_change_without_status_change_keeps_transition_time() -> None:
    before = [cond("Queued", reason="A")]
    result = st.set_condition(before, "Queued", "True", "B", "m", LATER)
    assert result[-1]["lastTransitionTime"] == st.format_time(NOW)
    assert result[-1]["lastUpdateTime"] == st.format_time(LATER)


def test_message_only_change_updates_in_place() -> None:
    before = [cond("Queued", message="8 free"), cond("Created")]
    result = st.set_condition(before, "Queued", "True", "R", "6 free", LATER)
    assert kinds(result) == kinds(before)
    assert result[0]["message"] == "6 free"
    assert result[0]["lastTransitionTime"] == st.format_time(NOW)
    assert result[0]["lastUpdateTime"] == st.format_time(LATER)


@pytest.mark.parametrize(("present", "new"), [("Running", "Restarting"), ("Restarting", "Running")])
def test_running_and_restarting_replace_each_other(present: str, new: str) -> None:
    before = [cond("Created"), cond(present)]
    result = st.set_condition(before, new, "True", "R2", "m", LATER)
    assert kinds(result) == [("Created", "True"), (new, "True")]


@pytest.mark.parametrize("final", ["Succeeded", "Failed"])
def test_finishing_turns_running_false(final: str) -> None:
    before = [cond("Created"), cond("Running")]
    result = st.set_condition(before, final, "True", "R", "m", LATER)
    assert kinds(result) == [("Created", "True"), ("Running", "False"), (final, "True")]
    assert result[1]["lastTransitionTime"] == st.format_time(LATER)


def test_nothing_changes_once_failed() -> None:
    before = [cond("Created"), cond("Failed")]
    for kind in ("Running", "Succeeded", "Failed", "Queued"):
        assert st.set_condition(before, kind, "True", "X", "y", LATER) == before


def test_set_condition_does_not_mutate_its_input() -> None:
    before = [cond("Created"), cond("Running")]
    snapshot = [dict(c) for c in before]
    st.set_condition(before, "Succeeded", "True", "R", "m", LATER)
    assert before == snapshot


def test_remove_condition() -> None:
    before = [cond("Created"), cond("Queued"), cond("Running")]
    assert kinds(st.remove_condition(before, "Queued")) == [
        ("Created", "True"),
        ("Running", "True"),
    ]


def test_replica_statuses_count_phases_per_type() -> None:
    spec = parsed_job(with_uid(job("demo").master().workers(4).build()))
    pods = [
        pod("demo-master-0", replica_type="Master"),
        pod("demo-worker-0", replica_type="Worker"),
        pod("demo-worker-1", replica_type="Worker", deleted="2026-01-01T00:00:00Z"),
        pod("demo-worker-2", replica_type="Worker", phase="Pending"),
        pod("demo-worker-3", replica_type="Worker", phase="Succeeded"),
        pod("demo-worker-4", replica_type="Worker", phase="Failed"),
        pod("demo-ps-0", replica_type="Ps"),
        {"metadata": None},
    ]
    assert st.replica_statuses(spec, pods) == {
        "Master": {
            "active": 1,
            "succeeded": 0,
            "failed": 0,
            "selector": "training.kubeflow.org/job-name=demo,"
            "training.kubeflow.org/operator-name=torchgate,"
            "training.kubeflow.org/replica-type=master",
        },
        "Worker": {
            "active": 1,
            "succeeded": 1,
            "failed": 1,
            "selector": "training.kubeflow.org/job-name=demo,"
            "training.kubeflow.org/operator-name=torchgate,"
            "training.kubeflow.org/replica-type=worker",
        },
    }

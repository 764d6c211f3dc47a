"""The progress deadline: the job's annotation and the policy's default, refused by field path."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import job
from tests.builders.policy import policy
from torchgate.pytorchjob.policy import DEFAULT_POLICY, parse_policy
from torchgate.webhook.validation import validate_create, validate_update

ANNOTATION = "torchgate.io/progress-deadline-seconds"
PATH = f"metadata.annotations[{ANNOTATION}]"


def with_deadline(value: Any) -> dict[str, Any]:
    raw = job().master().workers(1).build()
    raw["metadata"]["annotations"] = {ANNOTATION: value}
    return raw


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "2m", "", 30])
def test_a_deadline_that_is_not_positive_whole_seconds_is_refused(value: Any) -> None:
    verdict = validate_create(with_deadline(value), DEFAULT_POLICY)
    assert [(e.type.value, e.field) for e in verdict.errors] == [("FieldValueInvalid", PATH)]


def test_a_positive_deadline_is_admitted() -> None:
    assert validate_create(with_deadline("600"), DEFAULT_POLICY).allowed


def test_an_update_that_breaks_the_deadline_is_refused() -> None:
    old, new = with_deadline("600"), with_deadline("soon")
    verdict = validate_update(old, new, DEFAULT_POLICY)
    assert [(e.type.value, e.field) for e in verdict.errors] == [("FieldValueInvalid", PATH)]


@pytest.mark.parametrize(
    ("value", "parsed", "paths"),
    [
        (None, None, []),
        (900, 900, []),
        (0, None, ["spec.progressDeadlineSeconds"]),
        ("900", None, ["spec.progressDeadlineSeconds"]),
    ],
)
def test_the_policys_default_deadline_is_a_positive_integer(
    value: Any, parsed: int | None, paths: list[str]
) -> None:
    spec = {} if value is None else {"progressDeadlineSeconds": value}
    result, errors = parse_policy(policy("p", **spec))
    assert [str(e.path) for e in errors] == paths
    if not paths:
        assert result is not None
        assert result.progress_deadline_seconds == parsed

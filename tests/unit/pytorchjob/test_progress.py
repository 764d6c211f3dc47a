"""``progress``: the deadline, the probe the controller adds, and how a hang is recognised.

The probe's script is run for real here (``sh``, ``date``, ``stat``, ``touch``), with the
termination log redirected to a temporary file, against a progress file of a chosen age.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from torchgate.pytorchjob import progress


@pytest.mark.parametrize(
    ("annotations", "policy_default", "expected"),
    [
        pytest.param({}, None, None, id="none"),
        pytest.param({}, 600, 600, id="the-policys"),
        pytest.param({progress.ANNOTATION_PROGRESS_DEADLINE: "120"}, 600, 120, id="the-jobs-wins"),
        pytest.param({progress.ANNOTATION_PROGRESS_DEADLINE: "0"}, 600, None, id="zero-is-none"),
        pytest.param({progress.ANNOTATION_PROGRESS_DEADLINE: "2m"}, None, None, id="malformed"),
    ],
)
def test_the_deadline_is_the_jobs_annotation_else_the_policys(
    annotations: dict[str, str], policy_default: int | None, expected: int | None
) -> None:
    assert progress.progress_deadline(annotations, policy_default) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("30", 30), (30, 30), ("-1", None), ("1.5", None), (True, None), ("", None), ("٣", None)],
)
def test_parse_deadline_takes_positive_whole_seconds_only(
    value: object, expected: int | None
) -> None:
    assert progress.parse_deadline(value) == expected


@pytest.mark.parametrize("digits", [20, 5000])
def test_a_deadline_of_more_digits_than_an_int64_is_no_deadline(digits: int) -> None:
    assert progress.parse_deadline("9" * digits) is None  # 5000 digits: once a ValueError


@pytest.mark.parametrize(("deadline", "period"), [(1, 1), (9, 3), (30, 10), (3600, 10)])
def test_the_probe_looks_a_third_of_the_deadline_apart_within_1_to_10_seconds(
    deadline: int, period: int
) -> None:
    probe = progress.liveness_probe(deadline)
    assert probe["periodSeconds"] == period
    assert probe["failureThreshold"] == 1
    assert probe["exec"]["command"][:2] == ["sh", "-c"]


def run_probe(tmp_path: Path, deadline: int, *, age: float | None) -> tuple[int, str]:
    """Run the probe against a progress file ``age`` s old (``None``: no file yet)."""
    target = tmp_path / "progress"
    if age is not None:
        target.touch()
        moment = time.time() - age
        os.utime(target, (moment, moment))
    log = tmp_path / "termination-log"
    script = progress.probe_script(deadline).replace(progress.TERMINATION_LOG, str(log))
    env = {"PATH": os.environ["PATH"], progress.PROGRESS_FILE_ENV: str(target)}
    result = subprocess.run(["sh", "-c", script], env=env, check=False, timeout=10)
    return result.returncode, log.read_text() if log.exists() else ""


def test_the_probe_passes_while_the_file_is_fresh(tmp_path: Path) -> None:
    assert run_probe(tmp_path, 30, age=5) == (0, "")


def test_the_first_probe_creates_the_file_and_starts_the_clock(tmp_path: Path) -> None:
    assert run_probe(tmp_path, 30, age=None) == (0, "")
    assert (tmp_path / "progress").exists()


def test_a_stale_file_fails_the_probe_with_a_message_recognised_as_a_hang(tmp_path: Path) -> None:
    code, message = run_probe(tmp_path, 30, age=100)
    assert code == 1
    assert progress.is_hang(message)
    assert "deadline 30s" in message


@pytest.mark.parametrize("message", [None, "", "Error", "OOMKilled", "no progress"])
def test_other_endings_are_not_hangs(message: object) -> None:
    assert not progress.is_hang(message)


# ------------------------------------------------------------------ the sides agree


README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_webhook_checks_the_annotation_the_controller_reads() -> None:
    from tests.builders.job import job, parsed_job, with_uid
    from torchgate.controller.job.pods import build_pod
    from torchgate.pytorchjob.policy import DEFAULT_POLICY
    from torchgate.webhook.validation import validate_create

    raw = job().master().workers(1).build()
    raw["metadata"]["annotations"] = {progress.ANNOTATION_PROGRESS_DEADLINE: "soon"}
    (error,) = validate_create(raw, DEFAULT_POLICY).errors
    assert error.field == f"metadata.annotations[{progress.ANNOTATION_PROGRESS_DEADLINE}]"
    raw = with_uid(raw)

    raw["metadata"]["annotations"] = {progress.ANNOTATION_PROGRESS_DEADLINE: "90"}
    spec = parsed_job(raw)
    deadline = progress.progress_deadline(spec.annotations, None)
    assert deadline == 90
    pod = build_pod(
        raw, spec, "Master", 0, node=None, attempt=1, gpus="nvidia.com/gpu",
        progress_deadline=deadline,
    )  # fmt: skip
    (pytorch,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in pytorch["env"]}
    assert env[progress.PROGRESS_FILE_ENV] == progress.PROGRESS_FILE
    assert f"${{{progress.PROGRESS_FILE_ENV}:-" in pytorch["livenessProbe"]["exec"]["command"][2]


def test_readme_names_the_annotation_and_the_variable() -> None:
    text = README.read_text(encoding="utf-8")
    assert progress.ANNOTATION_PROGRESS_DEADLINE in text
    assert progress.PROGRESS_FILE_ENV in text
    assert progress.PROGRESS_FILE in text

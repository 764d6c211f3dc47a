"""``torchgate controller``: flags refused before it touches the cluster; its process settings."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Iterator

import pytest

from torchgate.cli import main
from torchgate.controller.command import add_arguments, manager_settings


@pytest.mark.parametrize("flag", ["--workers", "--write-concurrency"])
def test_a_concurrency_below_one_is_refused_naming_the_flag(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["controller", "--kubeconfig", "/nonexistent", flag, "0"]) == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "3601"])
def test_a_finish_grace_outside_its_range_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["controller", "--kubeconfig", "/nonexistent", "--finish-grace-seconds", value]
    assert main(argv) == 2
    assert "--finish-grace-seconds must be between 0 and 3600" in capsys.readouterr().err


def first_generation_collections_during(allocations: int) -> int:
    before = gc.get_stats()[0]["collections"]
    kept = [{"metadata": {"name": str(i)}} for i in range(allocations)]  # like a decoded pod
    after = gc.get_stats()[0]["collections"]
    del kept
    return after - before


@pytest.fixture
def restore_gc_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


@pytest.mark.usefixtures("restore_gc_thresholds")
def test_the_controller_process_runs_the_cycle_collector_rarely() -> None:
    gc.set_threshold(700, 10, 10)  # CPython's default
    assert first_generation_collections_during(100_000) > 100
    # The cluster is unreachable: the command ends with 1, after it set up its process.
    assert main(["controller", "--kubeconfig", "/nonexistent"]) == 1
    assert first_generation_collections_during(100_000) <= 5


@pytest.mark.parametrize("value", ["-1", "3601"])
def test_a_node_lost_bound_outside_its_range_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["controller", "--kubeconfig", "/nonexistent", "--node-lost-seconds", value]
    assert main(argv) == 2
    assert "--node-lost-seconds must be between 0 and 3600" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "gang_objects"),
    [([], True), (["--gang-objects"], True), (["--no-gang-objects"], False)],
)
def test_gang_objects_are_on_unless_the_flag_turns_them_off(
    flags: list[str], gang_objects: bool
) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    settings = manager_settings(parser.parse_args(flags))

    assert settings.options.gang_objects is gang_objects


@pytest.mark.parametrize("value", ["-1", "3601"])
def test_a_failure_window_outside_its_range_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["controller", "--kubeconfig", "/nonexistent", "--failure-window-seconds", value]
    assert main(argv) == 2
    assert "--failure-window-seconds must be between 0 and 3600" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "seconds"), [([], 5.0), (["--failure-window-seconds", "0"], 0.0)]
)
def test_the_failure_window_reaches_the_reconciler_and_defaults_to_5_seconds(
    flags: list[str], seconds: float
) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    settings = manager_settings(parser.parse_args(flags))

    assert settings.options.failure_window_seconds == seconds
    assert "(default 5)" in " ".join(parser.format_help().split())


@pytest.mark.parametrize(
    ("flag", "value", "rule"),
    [
        ("--starvation-seconds", "-1", "must be at least 0"),
        ("--stuck-termination-seconds", "-5", "must be at least 0"),
        ("--gang-backoff-seconds", "-10", "must be at least 0"),
        ("--resync-seconds", "0", "must be at least 1"),
        ("--arrival-settle-seconds", "-0.5", "must be at least 0"),
        ("--wave-hold-seconds", "-2", "must be at least 0"),
    ],
)
def test_a_negative_wait_is_refused_naming_the_flag(
    flag: str, value: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["controller", "--kubeconfig", "/nonexistent", flag, value]) == 2
    assert f"{flag} {rule}" in capsys.readouterr().err

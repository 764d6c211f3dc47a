"""The pool on one screen: what ``torchgate top`` prints for a pool view and a width."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from torchgate.ask.poolscreen import duration, render, table
from torchgate.pytorchjob.outlook import (
    DomainView,
    NodeProblem,
    PoolView,
    Preemptor,
    QueueEntry,
    TeamView,
)

NOW = datetime(2026, 11, 26, 18, 30, tzinfo=UTC)
G = 1000

VIEW = PoolView(
    gpu_resource="nvidia.com/gpu",
    teams=(
        TeamView("speech", "h100", 16 * G, None, 0, 0, 8 * G, 0, 0, 0, None),
        TeamView("vision", "h100", 8 * G, 8 * G, 16 * G, 8 * G, 0, 2, 1, 32 * G, 312.5),
    ),
    domains=(
        DomainView("topology.kubernetes.io/rack", "r1", 2, 16 * G, 16 * G, 0),
        DomainView("topology.kubernetes.io/rack", "r2", 2, 16 * G, 0, 16 * G),
    ),
    unusable_nodes=(
        NodeProblem("gpu-7", "lost (Ready is Unknown)", "2026-11-26T18:20:00Z"),
        NodeProblem("gpu-9", "tainted torchgate.io/quarantine:NoSchedule"),
    ),
    queue=(
        QueueEntry(
            "team-vision/big-pretraining-run-with-a-long-name",
            1,
            "vision",
            100,
            32 * G,
            "Quota",
            "WaitingForQuota",
            "team vision is at its quota (16/8 GPUs; may borrow 0 more) and the cohort has "
            "nothing left to lend; 2 jobs (24 GPUs) ahead in the pool",
            312.5,
        ),
    ),
    waiting_jobs=1,
    total_gpus=32 * G,
    used_gpus=16 * G,
)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (45.9, "45s"), (312.5, "5m12s"), (7380, "2h03m"), (273600, "3d04h")],
)
def test_durations_have_two_units_at_most(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def test_every_line_fits_a_100_column_terminal_and_the_queue_reason_is_cut_there() -> None:
    lines = render(VIEW, NOW, width=100)

    assert max(len(line) for line in lines) <= 100
    row = lines.index(next(line for line in lines if "big-pretraining" in line))
    assert lines[row].split()[-1] == "WaitingForQuota"
    assert lines[row + 1].startswith("   team vision is at its quota (16/8 GPUs")
    assert lines[row + 1].endswith("…")


def test_plain_text_is_never_cut_and_has_no_escape_sequences() -> None:
    lines = render(VIEW, NOW)

    assert not any("\x1b" in line for line in lines)
    assert any(line.endswith("2 jobs (24 GPUs) ahead in the pool") for line in lines)


def test_the_screen_shows_teams_domains_unusable_nodes_and_the_queue_head() -> None:
    rows = [line.split() for line in render(VIEW, NOW, width=100)]

    assert ["vision", "h100", "8", "16", "8", "0", "2", "1", "32", "5m12s"] in rows
    assert ["speech", "h100", "16", "0", "0", "8", "0", "0", "0"] in rows
    assert ["topology.kubernetes.io/rack", "r1", "2", "16", "16", "0"] in rows
    assert ["gpu-7", "18:20:00", "(10m00s", "ago)", "lost", "(Ready", "is", "Unknown)"] in rows
    assert ["gpu-9", "tainted", "torchgate.io/quarantine:NoSchedule"] in rows
    assert " ".join(rows[0]).startswith(
        "torchgate top nvidia.com/gpu: 16 of 32 used, 16 free; waiting jobs: 1"
    )


def test_a_large_pools_title_keeps_its_counts_on_a_100_column_terminal() -> None:
    big = replace(VIEW, total_gpus=2048 * G, used_gpus=1024 * G, waiting_jobs=150)

    (title, *_) = render(big, NOW, width=100)

    assert "1024 of 2048 used, 1024 free; waiting jobs: 150" in title
    assert len(title) <= 100


def test_an_empty_pool_says_so_in_each_section() -> None:
    text = "\n".join(render(PoolView(gpu_resource="nvidia.com/gpu"), NOW, width=100))

    assert "no TeamQuotas" in text
    assert "every node is usable" in text
    assert "no job is waiting" in text


def test_table_right_aligns_numbers_and_cuts_only_the_last_column() -> None:
    lines = table(["NAME", "N", "WHY"], [["a", "10", "x" * 50], ["bb", "2", "short"]],
                  numeric=frozenset({1}), width=20)  # fmt: skip

    assert lines == ["NAME   N  WHY", "a     10  xxxxxxxxx…", "bb     2  short"]


def test_a_job_preempting_is_shown_with_its_victims_not_only_counted() -> None:
    preemptor = Preemptor("team-vision/urgent", "vision", 16 * G, ("team-speech/low-1",))
    held = replace(VIEW, preempting=(preemptor,), waiting_jobs=2)

    rows = [line.split() for line in render(held, NOW, width=100)]

    assert ["team-vision/urgent", "vision", "16", "team-speech/low-1"] in rows
    queue_header = next(row for row in rows if row[1:2] == ["QUEUE"])
    assert queue_header[2:5] == ["(first", "1", "of"]
    assert queue_header[5] == "1)"  # the queue alone: the preemptor is not in it


def test_a_pool_whose_only_waiting_job_preempts_does_not_say_nothing_waits() -> None:
    preemptor = Preemptor("default/urgent", None, 8 * G, ("default/low",))
    view = PoolView(gpu_resource="nvidia.com/gpu", preempting=(preemptor,), waiting_jobs=1)

    lines = render(view, NOW, width=100)

    assert "no job is waiting" not in lines
    assert ["default/urgent", "8", "default/low"] in [line.split() for line in lines]


def test_on_a_terminal_tables_growing_with_the_pool_show_their_first_rows_and_count_the_rest() -> (
    None
):
    big = replace(
        VIEW,
        domains=tuple(
            DomainView("kubernetes.io/hostname", f"gpu-{i}", 1, 8 * G, 8 * G, 0) for i in range(500)
        ),
        unusable_nodes=tuple(NodeProblem(f"rack-7-{i}", "NotReady") for i in range(64)),
        preempting=tuple(Preemptor(f"ns/urgent-{i}", None, 8 * G, ("ns/low",)) for i in range(30)),
    )

    screen = render(big, NOW, width=100)
    piped = render(big, NOW)

    assert len(screen) < 80, "the title, the teams and the queue head stay on one screen"
    assert screen[0] == piped[0]
    for first, hidden, left in (("gpu-0", "gpu-10", 490), ("rack-7-0", "rack-7-10", 54),
                                ("ns/urgent-0", "ns/urgent-10", 20)):  # fmt: skip
        assert any(first in line for line in screen)
        assert not any(f"{hidden} " in line for line in screen)
        assert f"… and {left} more (piped, all are shown)" in screen
        assert any(f"{hidden} " in line for line in piped)
    assert len(piped) > 500 + 64 + 30
    assert max(len(line) for line in screen) <= 100

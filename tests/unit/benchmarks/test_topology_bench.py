"""``topology_bench.py`` says how its cycles ran: the GC thresholds, compiled or interpreted.

Its figures are compared across builds and settings, so the JSON must say which one produced
them: a cycle measured under the controller's garbage-collector thresholds is not comparable
with one under CPython's, nor a compiled cycle with an interpreted one.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator

import pytest

from benchmarks import topology_bench
from torchgate.controller.command import GC_THRESHOLDS


@pytest.fixture
def thresholds_kept() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds_kept")
@pytest.mark.parametrize(
    ("setting", "expected"), [("controller", GC_THRESHOLDS), ("cpython", gc.get_threshold())]
)
def test_the_report_names_the_gc_thresholds_and_the_interpreted_build(
    setting: str,
    expected: tuple[int, ...],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["topology_bench.py", "--cases", "250x1", "--rounds", "1", "--gc", setting]
    monkeypatch.setattr(sys, "argv", argv)

    topology_bench.main()

    build = json.loads(capsys.readouterr().out)["build"]
    assert build["gc"] == setting
    assert build["gc_thresholds"] == list(expected)
    assert build["compiled"] is False  # the development tree runs interpreted
    assert all(path.endswith(".py") for path in build["module_files"].values())

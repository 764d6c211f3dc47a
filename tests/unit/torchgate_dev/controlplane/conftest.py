"""Fixtures of the control-plane tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.torchgate_dev.controlplane.planefiles import fake_stage
from torchgate_dev.controlplane import kwok


@pytest.fixture
def stages_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "stages"
    folder.mkdir()
    for file_name in kwok.UPSTREAM_STAGE_FILES:
        (folder / file_name).write_text(fake_stage(file_name.removesuffix(".yaml")))
    return folder

"""Shared helpers of the control-plane tests: repository files, fake executables and stages."""

from __future__ import annotations

import stat
import textwrap
from pathlib import Path
from typing import Any

import yaml

from torchgate_dev.controlplane import kwok

REPO_ROOT = Path(__file__).resolve().parents[4]
PYTORCHJOB_CRD = REPO_ROOT / "manifests" / "crds" / "kubeflow.org_pytorchjobs.yaml"
POLICY_CRD = REPO_ROOT / "manifests" / "crds" / "torchgate.io_placementpolicies.yaml"
SAMPLE_POLICY = REPO_ROOT / "manifests" / "samples" / "placementpolicy.yaml"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def executable(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_stage(name: str, kind: str = "Pod") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": kwok.STAGE_API_VERSION,
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": {}},
        }
    )


def start_ticks(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[19])

"""The state file: processes and plane state round-trip, corrupt files, orphaned records."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.torchgate_dev.controlplane.planefiles import (
    start_ticks,
)
from torchgate_dev.controlplane.cluster import ClusterFeatures, ControlPlane, ControlPlaneError
from torchgate_dev.controlplane.processes import ManagedProcess
from torchgate_dev.controlplane.state import PlaneState, orphaned

# ----------------------------------------------------------------------------- state file


def test_managed_process_round_trips_through_json(tmp_path: Path) -> None:
    process = ManagedProcess("etcd", 123, 456, tmp_path / "etcd.log")

    assert ManagedProcess.from_json(process.to_json()) == process


def test_from_state_without_a_state_file_is_a_control_plane_error(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="no control plane state"):
        ControlPlane.from_state(tmp_path)


@pytest.mark.parametrize(
    "content",
    ["not json", '{"version": 99}', '{"version": 1, "processes": [{"pid": "x"}]}', "[]"],
    ids=["not-json", "wrong-version", "bad-process", "not-an-object"],
)
def test_from_state_with_a_corrupt_state_file_is_a_control_plane_error(
    tmp_path: Path, content: str
) -> None:
    (tmp_path / "state.json").write_text(content)

    with pytest.raises(ControlPlaneError, match="unreadable control plane state"):
        ControlPlane.from_state(tmp_path)


@given(
    token=st.none() | st.text(min_size=1, max_size=20),
    seconds=st.none() | st.floats(min_value=0, max_value=1e6),
    detached=st.booleans(),
    owns_workdir=st.booleans(),
    pids=st.lists(st.integers(min_value=1, max_value=2**22), max_size=4),
    node=st.none() | st.fixed_dictionaries({"name": st.text(min_size=1, max_size=10)}),
)
def test_plane_state_round_trips_through_json(
    token: str | None,
    seconds: float | None,
    detached: bool,
    owns_workdir: bool,
    pids: list[int],
    node: dict[str, Any] | None,
) -> None:
    state = PlaneState(
        server="https://127.0.0.1:6443",
        token=token,
        ca_file=Path("/w/pki/ca.crt"),
        kubeconfig=Path("/w/kubeconfig"),
        startup_seconds=seconds,
        detached=detached,
        owner=None if detached else {"pid": 1, "start_ticks": 2},
        owns_workdir=owns_workdir,
        processes=tuple(ManagedProcess(f"p{pid}", pid, pid, Path("/w/logs/p.log")) for pid in pids),
        real_node=node,
    )

    again = PlaneState.from_json(json.loads(json.dumps(state.to_json())))

    # The token is written as a string: None comes back as "None" (a started plane has one).
    assert again == dataclasses.replace(state, token=str(token))


@pytest.mark.parametrize(
    ("raw", "orphan"),
    [
        ([], False),
        ({"detached": True, "owner": None}, False),
        ({"detached": False, "owner": {"pid": "x"}}, False),
        ({"detached": False, "owner": None}, False),
        ({"detached": False, "owner": "live"}, False),
        ({"detached": False, "owner": "dead"}, True),
    ],
    ids=["not-a-record", "detached", "malformed-owner", "no-owner", "live-owner", "dead-owner"],
)
def test_a_recorded_control_plane_is_an_orphan_only_when_its_owner_is_gone(
    raw: Any, orphan: bool
) -> None:
    with subprocess.Popen(["true"]) as gone:
        gone.wait()
    owners = {
        "live": {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())},
        "dead": {"pid": gone.pid, "start_ticks": 1},
    }
    if isinstance(raw, dict) and isinstance(raw.get("owner"), str):
        raw = {**raw, "owner": owners[raw["owner"]]}

    assert orphaned(raw) is orphan


def test_the_kubernetes_version_and_features_round_trip_and_older_files_lack_them() -> None:
    features = ClusterFeatures(
        feature_gates={"GenericWorkload": True, "DRAExtendedResource": False},
        runtime_config={"scheduling.k8s.io/v1beta1": "true"},
        controllers=("podgroup-protection-controller",),
    )
    state = PlaneState(
        server="https://127.0.0.1:6443",
        token="t",
        ca_file=Path("/w/pki/ca.crt"),
        kubeconfig=Path("/w/kubeconfig"),
        startup_seconds=4.2,
        detached=True,
        owner=None,
        owns_workdir=False,
        processes=(),
        real_node=None,
        kubernetes_version="1.37.2",
        features=features,
    )
    raw = json.loads(json.dumps(state.to_json()))

    assert PlaneState.from_json(raw) == state
    older = {k: v for k, v in raw.items() if k not in ("kubernetes_version", "features")}
    assert PlaneState.from_json(older) == dataclasses.replace(
        state, kubernetes_version=None, features=ClusterFeatures()
    )

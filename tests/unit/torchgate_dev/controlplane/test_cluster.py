"""ControlPlane: before start, start-up failures with misbehaving fake binaries, orphans."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.torchgate_dev.controlplane.planefiles import (
    executable,
    start_ticks,
)
from torchgate_dev.controlplane.binaries import (
    Binaries,
)
from torchgate_dev.controlplane.cluster import ControlPlane, ControlPlaneError
from torchgate_dev.controlplane.kubeconfig import admin_kubeconfig
from torchgate_dev.controlplane.processes import ManagedProcess


def test_properties_before_start_are_a_control_plane_error() -> None:
    plane = ControlPlane()

    with pytest.raises(ControlPlaneError, match="not started"):
        _ = plane.kubeconfig
    assert not plane.is_running()
    plane.stop()  # nothing to stop is fine


# ----------------------------------------------------------------------------- start-up failures


def fake_binaries(folder: Path, stages_dir: Path, *, etcd: str) -> Binaries:
    folder.mkdir()
    never = "exec sleep 600\n"
    return Binaries(
        kube_apiserver=executable(folder / "kube-apiserver", never),
        kube_controller_manager=executable(folder / "kube-controller-manager", never),
        kube_scheduler=executable(folder / "kube-scheduler", never),
        etcd=executable(folder / "etcd", etcd),
        kwok=executable(folder / "kwok", never),
        kubelet=executable(folder / "kubelet", never),
        kube_proxy=executable(folder / "kube-proxy", never),
        stages_dir=stages_dir,
    )


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            found.append(int(entry.name))
    return found


def test_a_process_dying_at_start_up_is_reported_with_its_log(
    tmp_path: Path, stages_dir: Path
) -> None:
    binaries = fake_binaries(
        tmp_path / "bin", stages_dir, etcd='echo "etcd: unknown flag --bogus" >&2\nexit 2\n'
    )
    workdir = tmp_path / "work"

    with pytest.raises(ControlPlaneError, match="etcd exited with status 2") as failure:
        ControlPlane(binaries=binaries, workdir=workdir).start()

    assert "unknown flag --bogus" in str(failure.value)
    assert (workdir / "logs" / "etcd.log").is_file()  # a given work dir keeps its logs
    assert not (workdir / "state.json").exists()


def test_start_up_timeout_stops_what_started_and_removes_the_temp_dir(
    tmp_path: Path, stages_dir: Path
) -> None:
    binaries = fake_binaries(tmp_path / "bin", stages_dir, etcd="exec sleep 600\n")
    plane = ControlPlane(binaries=binaries, startup_timeout=0.5)

    with pytest.raises(ControlPlaneError, match=r"timed out .* etcd /health"):
        plane.start()

    assert processes_mentioning(str(tmp_path / "bin")) == []
    assert not plane.workdir.exists()


def test_start_refuses_missing_kwok_stages(tmp_path: Path, stages_dir: Path) -> None:
    binaries = fake_binaries(tmp_path / "bin", stages_dir, etcd="exec sleep 600\n")
    (stages_dir / "pod-delete.yaml").unlink()

    with pytest.raises(ControlPlaneError, match=r"pod-delete\.yaml"):
        ControlPlane(binaries=binaries, workdir=tmp_path / "work").start()

    assert processes_mentioning(str(tmp_path / "bin")) == []


def test_kubectl_failure_carries_its_stderr(tmp_path: Path) -> None:
    kubectl = executable(tmp_path / "kubectl", 'echo "error: nope" >&2\nexit 1\n')
    config = admin_kubeconfig("https://127.0.0.1:1", tmp_path / "ca.crt", "t")
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    plane = ControlPlane.attach(path, kubectl=str(kubectl))

    with pytest.raises(Exception, match="error: nope") as failure:
        plane.kubectl("get", "pods")

    assert failure.value.cmd == ["kubectl", "get", "pods"]  # type: ignore[attr-defined]
    assert plane.kubectl("get", "pods", check=False).returncode == 1
    plane.stop()


# ----------------------------------------------------------------------------- orphans


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def orphan_candidate(root: Path, name: str, pid: int, owner: dict[str, int] | None) -> Path:
    workdir = root / f"torchgate-cp-{name}"
    workdir.mkdir()
    process = ManagedProcess("etcd", pid, start_ticks(pid), workdir / "etcd.log")
    state = {
        "version": 1,
        "server": "https://127.0.0.1:1",
        "token": "t",
        "ca_file": str(workdir / "ca.crt"),
        "kubeconfig": str(workdir / "kubeconfig"),
        "startup_seconds": None,
        "detached": owner is None,
        "owner": owner,
        "owns_workdir": True,
        "processes": [process.to_json()],
    }
    (workdir / "state.json").write_text(json.dumps(state))
    return workdir


def test_control_planes_of_a_dead_owner_are_stopped_and_others_left_alone(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        orphan, owned, detached = (
            stack.enter_context(subprocess.Popen(["sleep", "600"], start_new_session=True))
            for _ in range(3)
        )
        with subprocess.Popen(["true"]) as gone:
            gone.wait()
        dead_owner = {"pid": gone.pid, "start_ticks": 1}
        live_owner = {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}
        orphan_dir = orphan_candidate(tmp_path, "orphan", orphan.pid, dead_owner)
        orphan_candidate(tmp_path, "owned", owned.pid, live_owner)
        orphan_candidate(tmp_path, "detached", detached.pid, None)

        stopped = ControlPlane.stop_orphans(tmp_path)

        assert stopped == [orphan_dir]
        assert not orphan_dir.exists()
        assert not alive(orphan.pid)
        assert alive(owned.pid)
        assert alive(detached.pid)
        for process in (owned, detached):
            process.kill()

"""``torchgate dev`` end to end: one command up, seed 000 through the webhook, one command down.

The command line runs as a subprocess, as a newcomer runs it, against the cached binaries
(``TORCHGATE_CONTROLPLANE_BIN``). It starts a control plane of its own in a temp dir, beside the
session's. What is checked is the cluster it leaves (stored objects, nodes, registrations) and
the processes it leaves: none, after ``down`` and after a failed ``up``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import REPO_ROOT
from torchgate_dev.controlplane.binaries import BIN_DIR_ENV, Binaries

pytestmark = pytest.mark.e2e

SEEDS = REPO_ROOT.parent / "shared" / "seeds" / "manifests"
SEED_000 = SEEDS / "000-pytorch-dist-mnist-nccl.yaml"
SEED_003 = SEEDS / "003-torchrun-cpu.yaml"
REPLICA_IMAGE = "spec.pytorchReplicaSpecs[{}].template.spec.containers[0].image"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
REAL_NODE = ("registry", "containerd", "coredns", "kubelet")


def torchgate_dev(
    *args: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchgate", "dev", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def start_ticks(pid: int) -> int | None:
    """Start time of a live (non-zombie) process, None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def recorded_processes(root: Path) -> dict[str, tuple[int, int]]:
    """Process name -> (pid, start ticks), from the control plane's and dev's state files."""
    control_plane = json.loads((root / "state.json").read_text())["processes"]
    products = json.loads((root / "dev.json").read_text())
    entries = [*control_plane, *(products[k] for k in ("webhook", "controller") if products[k])]
    return {entry["name"]: (entry["pid"], entry["start_ticks"]) for entry in entries}


def still_running(processes: dict[str, tuple[int, int]]) -> list[str]:
    return [name for name, (pid, ticks) in processes.items() if start_ticks(pid) == ticks]


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that name ``text`` (every process of a dev cluster does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command and start_ticks(int(entry.name)) is not None:
            found.append(command)
    return found


def wait_until(predicate: Any, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


@pytest.fixture
def dev_env(control_plane_binaries: Binaries) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env[BIN_DIR_ENV] = str(control_plane_binaries.kube_apiserver.parent)
    return env


@pytest.fixture
def dev_dir(tmp_path: Path, dev_env: dict[str, str]) -> Iterator[Path]:
    root = (tmp_path / "my dev").resolve()  # a space, as in a home directory's "My Projects"
    yield root
    torchgate_dev("down", "--dir", str(root), env=dev_env)  # a safety net; a no-op when passed


def test_dev_up_serves_seed_000_through_the_webhook_and_down_leaves_nothing(
    dev_dir: Path, dev_env: dict[str, str]
) -> None:
    up = torchgate_dev("up", "--dir", str(dev_dir), "--no-seed-images", env=dev_env)

    assert up.returncode == 0, up.stderr
    (exports,) = up.stdout.splitlines()
    words = shlex.split(exports)  # as the shell it is pasted into reads it
    assert words[:2] == ["export", f"KUBECONFIG={dev_dir / 'kubeconfig'}"], exports
    assert re.fullmatch(r"TORCHGATE_CONTROLLER=https://127\.0\.0\.1:\d+", words[2]), exports
    assert words[3:] == [f"TORCHGATE_CONTROLLER_CA={dev_dir / 'tls' / 'ca.crt'}"], exports
    processes = recorded_processes(dev_dir)
    assert set(processes) >= {*CONTROL_PLANE, *REAL_NODE, "webhook"}
    assert still_running(processes) == list(processes)

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", f"--kubeconfig={dev_dir / 'kubeconfig'}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def get(*args: str) -> Any:
        result = kubectl("get", *args, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    # Seed 000 as published names the placeholder image <训练镜像>: refused at both images.
    refused = kubectl("apply", "-f", str(SEED_000))
    assert refused.returncode != 0
    assert f"{REPLICA_IMAGE.format('Master')}: Invalid value" in refused.stderr
    assert f"{REPLICA_IMAGE.format('Worker')}: Invalid value" in refused.stderr
    assert kubectl("get", "pytorchjob", "pytorch-dist-mnist-nccl").returncode != 0
    # With the placeholder replaced by the local demo image, as the walkthrough says, it runs.
    seed = dev_dir.parent / SEED_000.name
    seed.write_text(SEED_000.read_text(encoding="utf-8").replace("<训练镜像>", "pytorch-demo"))
    applied = kubectl("apply", "-f", str(seed))

    assert applied.returncode == 0, applied.stderr
    assert "Warning: torchgate: will start now on a100-" in applied.stderr, "the forecast"
    stored = get("pytorchjob", "pytorch-dist-mnist-nccl")
    assert stored["spec"]["runPolicy"]["managedBy"] == "torchgate.io/controller"
    assert stored["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert stored["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    for replica in ("Master", "Worker"):
        pod = stored["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        (container,) = pod["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
        assert {"name": "pytorchjob-port", "containerPort": 23456} in container["ports"]
        assert pod["nodeSelector"] == {"pool": "a100"}, "placement from the dev policy"

    # The controller runs it: the whole gang lands in the a100 pool.
    def bound_pods(job: str) -> list[Any] | None:
        found = get("pods", "--selector", f"training.kubeflow.org/job-name={job}")["items"]
        bound = [p for p in found if p["spec"].get("nodeName")]
        return bound if len(bound) == 2 else None

    pods = wait_until(lambda: bound_pods("pytorch-dist-mnist-nccl"), timeout=30)
    assert pods, "the controller did not run seed 000"
    assert {p["spec"]["nodeName"].split("-")[0] for p in pods} == {"a100"}

    nodes = sorted(
        (n["metadata"]["name"], n["metadata"]["labels"]["pool"], n["status"]["allocatable"])
        for n in get("nodes", "--selector", "pool,!torchgate.io/real-node")["items"]
    )
    gpus = [(name, pool, allocatable.get("nvidia.com/gpu")) for name, pool, allocatable in nodes]
    assert gpus == [
        *((f"a100-{i}", "a100", "8") for i in range(4)),
        # The DRA pool: no GPU in allocatable, 8 published per node in a ResourceSlice.
        *((f"dra-{i}", "dra", None) for i in range(2)),
        *((f"t4-{i}", "t4", "8") for i in range(2)),
    ]
    published = {
        s["spec"]["nodeName"]: len(s["spec"]["devices"]) for s in get("resourceslices")["items"]
    }
    assert published == {"dra-0": 8, "dra-1": 8}
    (real_node,) = get("nodes", "--selector", "torchgate.io/real-node=true")["items"]
    assert real_node["metadata"]["labels"]["pool"] == "a100", "the real node joins the first pool"
    # README's main job asks for no GPU: of its pool (fake GPU nodes in racks, and the real node
    # without topology labels) it goes to the node that can run it.
    assert kubectl("apply", "-f", str(SEED_003)).returncode == 0
    cpu_pods = wait_until(lambda: bound_pods("torchrun-cpu"), timeout=30)
    assert cpu_pods, "the controller did not place seed 003"
    assert {p["spec"]["nodeName"] for p in cpu_pods} == {real_node["metadata"]["name"]}
    ready = [c for c in real_node["status"]["conditions"] if c["type"] == "Ready"]
    assert [c["status"] for c in ready] == ["True"]

    # The training-operator's default cleanPodPolicy None, under the dev policy: a GPU-free job
    # keeps its pods, a GPU job may not keep them.
    def keeping_pods(manifest: Path) -> Path:
        text = manifest.read_text(encoding="utf-8").replace("<训练镜像>", "pytorch-demo")
        raw = yaml.safe_load(text)
        raw["metadata"]["name"] += "-keep"
        raw["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}
        written = dev_dir.parent / f"keep-{manifest.name}"
        written.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return written

    kept = kubectl("create", "--dry-run=server", "-f", str(keeping_pods(SEED_003)))
    assert kept.returncode == 0, kept.stderr
    not_kept = kubectl("create", "--dry-run=server", "-f", str(keeping_pods(SEED_000)))
    assert not_kept.returncode != 0
    assert "spec.runPolicy.cleanPodPolicy: Forbidden" in not_kept.stderr
    for kind, path in (("mutating", "/mutate"), ("validating", "/validate")):
        webhook = get(f"{kind}webhookconfiguration", "torchgate")["webhooks"][0]  # the jobs' one
        assert webhook["clientConfig"]["url"].startswith("https://127.0.0.1:")
        assert webhook["clientConfig"]["url"].endswith(path)
        assert webhook["failurePolicy"] == "Fail"
    # The webhook watches the cluster's policies and reports on each in its status.
    valid = wait_until(
        lambda: [
            c
            for c in get("placementpolicy", "dev-a100").get("status", {}).get("conditions", [])
            if c["type"] == "Valid"
        ]
    )
    assert [c["status"] for c in valid] == ["True"]

    again = torchgate_dev("up", "--dir", str(dev_dir), "--no-seed-images", env=dev_env)
    status = torchgate_dev("status", "--dir", str(dev_dir), env=dev_env)

    assert again.returncode == 0, again.stderr
    assert again.stdout == up.stdout
    assert recorded_processes(dev_dir) == processes
    assert status.returncode == 0, status.stderr

    # An `up` stopped between starting the webhook and registering it leaves the webhook running
    # and the apiserver without its configurations: not "up", and the next `up` registers it.
    for kind in ("mutating", "validating"):
        deleted = kubectl("delete", f"{kind}webhookconfiguration", "torchgate")
        assert deleted.returncode == 0, deleted.stderr
    unregistered = torchgate_dev("status", "--dir", str(dev_dir), env=dev_env)
    assert unregistered.returncode == 1, unregistered.stderr
    completed = torchgate_dev("up", "--dir", str(dev_dir), "--no-seed-images", env=dev_env)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == up.stdout
    assert recorded_processes(dev_dir) == processes, "the webhook that ran is registered"
    refused_again = kubectl("create", "--dry-run=server", "-f", str(SEED_000))
    assert f"{REPLICA_IMAGE.format('Master')}: Invalid value" in refused_again.stderr
    assert torchgate_dev("status", "--dir", str(dev_dir), env=dev_env).returncode == 0

    down = torchgate_dev("down", "--dir", str(dev_dir), env=dev_env)

    assert down.returncode == 0, down.stderr
    assert wait_until(lambda: not still_running(processes), timeout=5), still_running(processes)
    assert processes_mentioning(str(dev_dir)) == []
    assert not dev_dir.exists()
    assert torchgate_dev("status", "--dir", str(dev_dir), env=dev_env).returncode == 3


def test_failed_dev_up_stops_what_it_started_and_keeps_the_logs(
    dev_dir: Path, dev_env: dict[str, str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        up = torchgate_dev(
            "up", "--dir", str(dev_dir), "--webhook-port", port, "--no-controller",
            "--pool", "a100=1", env=dev_env,
        )  # fmt: skip

    assert up.returncode == 1
    assert up.stdout == ""
    assert "Traceback" not in up.stderr
    assert processes_mentioning(str(dev_dir)) == []
    assert sorted(path.name for path in dev_dir.iterdir()) == ["logs", "webhook.log"]

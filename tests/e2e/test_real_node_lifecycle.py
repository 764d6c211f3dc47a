"""The real node leaves nothing behind: not after a clean stop, not after its owner was killed.

A real node leaves state outside its processes (container shims and their children, pod network
namespaces, mounts, the bridge, cgroups). These tests start one in a subprocess, give it a running
pod, kill the subprocess with SIGKILL (no cleanup runs, as when CI kills a test run), and check
that the next start tears all of it down and that its own stop leaves nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.node.config import NodeNetwork

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

STARTER = """
import sys, time
from pathlib import Path
from torchgate_dev.controlplane.cluster import ControlPlane
ControlPlane(real_node=True, workdir=Path(sys.argv[1])).start()
print("up", flush=True)
time.sleep(600)
"""

PAUSE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "sleeper", "namespace": "default"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "registry.torchgate.local/pause:3.10",
                "imagePullPolicy": "IfNotPresent",
            }
        ]
    },
}


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in command and state != "Z":
            found.append(int(entry.name))
    return found


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=60,
        check=True,
    )
    return done.stdout


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def bridge_exists() -> bool:
    return Path(f"/sys/class/net/{NodeNetwork().bridge}").exists()


def test_a_killed_owners_node_is_torn_down_by_the_next_start_and_a_stop_leaves_nothing(
    tmp_path: Path,
) -> None:
    first = tmp_path / "first"
    owner = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(first)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        if owner.stdout.readline().strip() != "up":
            owner.wait(timeout=30)
            assert owner.stderr is not None
            pytest.fail(f"the owner did not start its node: {owner.stderr.read()[-3000:]}")
        kubeconfig = first / "kubeconfig"
        kubectl(kubeconfig, "apply", "-f", "-", input=json.dumps(PAUSE_POD))
        wait_until(
            lambda: (
                kubectl(kubeconfig, "get", "pod", "sleeper", "-o", "jsonpath={.status.phase}")
                == "Running"
            ),
            timeout=60,
            what="the pod to run",
        )
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.communicate()
    # Killed without cleanup: its kubelet, containerd and the pod's shim still run.
    orphans = processes_mentioning(str(first))
    assert orphans
    assert bridge_exists()

    second = tmp_path / "second"
    with ControlPlane(real_node=True, workdir=second) as plane:
        assert plane.node_name is not None
        wait_until(
            lambda: not processes_mentioning(str(first)), timeout=15, what="the orphans to stop"
        )
        assert bridge_exists(), "the new node has its own bridge"

    assert processes_mentioning(str(second)) == []
    assert not bridge_exists()
    assert "KUBE-" not in iptables_rules(), "kubelet's and kube-proxy's chains are removed"


def iptables_rules() -> str:
    return "".join(
        subprocess.run([save], capture_output=True, text=True, check=False).stdout
        for save in ("iptables-save", "ip6tables-save")
    )

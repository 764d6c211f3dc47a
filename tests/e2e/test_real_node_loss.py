"""A lost real node: its gang runs again elsewhere, and the ranks it leaves behind are fenced.

The kubelet of ``real-0`` is frozen (SIGSTOP) while a gang runs there: containerd and the
containers go on, the node stops heartbeating, and the controller manager marks it ``Unknown``
after its node-monitor grace period (Kubernetes' default, 50 s). The dev cluster's controller runs
with its default ``--node-lost-seconds`` (30): the gang must run again whole on the fake nodes
within 90 s of the node going ``NotReady``, with ``backoffLimit: 0`` unspent.

The gang's Worker keeps doing what a rank left behind does: it resolves ``MASTER_ADDR`` and dials
``MASTER_PORT`` from its own env, twice a second, and writes what happened to a host folder. The
new attempt's Master runs on a kwok node, where nothing runs, so the test stands in for its
rendezvous: a real TCP listener on the node address, on the new attempt's ``MASTER_PORT``, and the
new Master pod's IP set to that address, so its name resolves there as a real pod's would. The
stale Worker, with its own env, must be refused; from the stale Worker's own network namespace
the stand-in must accept the new attempt's port (so the refusal is the fence, not the network).
When the kubelet resumes (SIGCONT), it must kill every container of the first attempt: checked in
containerd's own task list and in ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controller_process import condition, dump, events_of, get_job, is_true, live_pods
from tests.e2e.test_real_node import RealNodeCluster, demo_job, is_ready
from tests.e2e.test_real_node import real as real  # the fixture: a dev cluster with real-0
from torchgate_dev.node.config import NodeNetwork, NodePaths

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

LISTEN = (
    "import os, socket\n"
    "server = socket.create_server(('', int(os.environ['MASTER_PORT'])), backlog=64)\n"
    "while True:\n"
    "    server.accept()[0].close()\n"
)
# A rank trying to (re)join its rendezvous with the env it was started with.
DIAL = (
    "import os, socket, time\n"
    "host, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])\n"
    "log = open(f\"/probe/attempt-{os.environ['GANG_ATTEMPT']}.log\", 'a', buffering=1)\n"
    "while True:\n"
    "    address = result = '-'\n"
    "    try:\n"
    "        address = socket.gethostbyname(host)\n"
    "        socket.create_connection((address, port), timeout=2).close()\n"
    "        result = 'connected'\n"
    "    except ConnectionRefusedError:\n"
    "        result = 'refused'\n"
    "    except OSError as error:\n"
    "        result = type(error).__name__\n"
    "    log.write(f'{time.time():.2f} {address} {port} {result}\\n')\n"
    "    time.sleep(0.5)\n"
)
ATTEMPT_FROM_POD = {
    "name": "GANG_ATTEMPT",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['torchgate.io/gang-attempt']"}},
}


@pytest.fixture(autouse=True)
def _clean(real: RealNodeCluster) -> Iterator[None]:
    yield
    real.clean_up_test()


@pytest.fixture
def probe_folder(real: RealNodeCluster, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A namespace whose jobs may mount ``tmp_path/probe`` (the stale rank's log)."""
    namespace = real.new_namespace("fenced")
    folder = tmp_path / "probe"
    folder.mkdir()
    folder.chmod(0o777)
    policy = f"probe-{namespace}"
    real.apply(
        {
            "apiVersion": "torchgate.io/v1alpha1",
            "kind": "PlacementPolicy",
            "metadata": {"name": policy},
            "spec": {"namespaces": [namespace], "allowedHostPaths": [str(tmp_path)]},
        }
    )
    yield namespace, folder
    real.kubectl("delete", "placementpolicy", policy, check=False)


def fenced_job(namespace: str, folder: Path) -> dict[str, Any]:
    job = demo_job(
        "fenced",
        namespace,
        master=["python3", "-c", LISTEN],
        worker=["python3", "-c", DIAL],
        restart_policy="OnFailure",
    )
    job["spec"]["runPolicy"] = {"backoffLimit": 0}
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["volumes"] = [{"name": "probe", "hostPath": {"path": str(folder)}}]
    worker["containers"][0]["volumeMounts"] = [{"name": "probe", "mountPath": "/probe"}]
    worker["containers"][0]["env"] = [ATTEMPT_FROM_POD]
    return job


def attempt_running(real: RealNodeCluster, namespace: str, attempt: int) -> list[Any] | None:
    pods = live_pods(real, namespace, "fenced")
    ok = len(pods) == 2 and all(
        p["status"].get("phase") == "Running"
        and p["metadata"]["annotations"]["torchgate.io/gang-attempt"] == str(attempt)
        for p in pods
    )
    return pods if ok else None


def container_id(pod: dict[str, Any]) -> str:
    return str(pod["status"]["containerStatuses"][0]["containerID"].split("://")[1])


def task_pids(real: RealNodeCluster) -> dict[str, int]:
    """Container id -> host PID of each task containerd runs (its own view)."""
    socket_path = NodePaths(work=real.plane.workdir / "node", cache=Path()).containerd_socket
    listed = subprocess.run(
        ["ctr", "--address", str(socket_path), "-n", "k8s.io", "tasks", "ls"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    return {row[0]: int(row[1]) for row in rows if len(row) >= 3 and row[2] == "RUNNING"}


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def dials(log: Path, since: float) -> list[tuple[str, int, str]]:
    """(address, port, result) of the stale rank's attempts logged after ``since``."""
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        stamp, address, port, result = line.split()
        if float(stamp) > since:
            found.append((address, int(port), result))
    return found


class StandIn:
    """A TCP listener that counts who connected: the new attempt's rendezvous endpoint."""

    def __init__(self, address: str, port: int) -> None:
        self.server = socket.create_server((address, port))
        self.peers: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, peer = self.server.accept()
            except OSError:
                return
            self.peers.append(peer[0])
            connection.close()

    def close(self) -> None:
        self.server.close()


def test_a_gang_on_a_frozen_kubelet_runs_again_elsewhere_and_its_old_ranks_cannot_join(
    real: RealNodeCluster, probe_folder: tuple[str, Path]
) -> None:
    namespace, folder = probe_folder
    fakes = real.add_gpu_nodes(2, f"gpu-{namespace}")
    real.wait_for(lambda: all(is_ready(real.get("node", n)) for n in fakes), what="fake nodes")
    job = fenced_job(namespace, folder)
    real.wait_for(lambda: real.apply(job) is None, timeout=20, what="the policy to take effect")
    first = real.wait_for(
        lambda: attempt_running(real, namespace, 1), timeout=120, what="the gang on real-0"
    )
    assert {p["spec"]["nodeName"] for p in first} == {real.node}
    log = folder / "attempt-1.log"
    real.wait_for(
        lambda: "connected" in {r for _, _, r in dials(log, 0)},
        timeout=30,
        what="the Worker to reach its Master",
    )
    old = {p["metadata"]["name"]: container_id(p) for p in first}
    stale_ip = next(p for p in first if p["metadata"]["name"] == "fenced-worker-0")["status"][
        "podIP"
    ]
    stale_pid = task_pids(real)[old["fenced-worker-0"]]
    stale_env = environ_of(stale_pid)
    assert stale_env["MASTER_PORT"] == "23456"

    kubelet = real.plane.pids()["kubelet"]
    os.kill(kubelet, signal.SIGSTOP)  # its containers go on; the node stops heartbeating
    stand_in: StandIn | None = None
    try:
        unready = real.wait_for(
            lambda: (c := node_ready(real))["status"] != "True" and c,
            timeout=120,
            what="real-0 NotReady",
        )
        again = real.wait_for(
            lambda: attempt_running(real, namespace, 2), timeout=120, what="the gang elsewhere"
        )
        since = (
            datetime.now(UTC) - datetime.fromisoformat(unready["lastTransitionTime"])
        ).total_seconds()
        print(f"real-0 {unready['status']}: gang Running again on fake nodes {since:.1f}s later")
        assert since < 90
        assert real.node not in {p["spec"]["nodeName"] for p in again}
        stored = get_job(real, namespace, "fenced")
        assert stored is not None
        assert not is_true(stored, "Failed"), dump(stored)
        assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})
        assert (condition(stored, "Restarting") or condition(stored, "Running")) is not None
        lost = [e for e in events_of(real, namespace, "fenced") if e["reason"] == "NodeLost"]
        assert lost
        assert real.node in lost[0]["message"]
        # The first attempt's pods were force-deleted while their containers still run.
        assert {old["fenced-master-0"], old["fenced-worker-0"]} <= set(task_pids(real))

        # The fence: the new attempt's rendezvous is on a port the stale rank does not have.
        new_master = next(p for p in again if p["metadata"]["name"] == "fenced-master-0")
        new_port = int(env_of(new_master)["MASTER_PORT"])
        assert new_port != int(stale_env["MASTER_PORT"])
        assert {env_of(p)["MASTER_PORT"] for p in again} == {str(new_port)}
        address = NodeNetwork().gateway
        stand_in = StandIn(address, new_port)
        ip = {"podIP": address, "podIPs": [{"ip": address}]}
        real.kubectl(
            "patch", "pod", "fenced-master-0", "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": ip}),
        )  # fmt: skip
        moved = time.time()
        refused = real.wait_for(
            lambda: (found := [d for d in dials(log, moved) if d[0] == address])[3:] and found,
            timeout=30,
            what="the stale rank to dial the new Master's address (4 times)",
        )
        assert {(port, result) for _, port, result in refused} == {(23456, "refused")}
        assert stand_in.peers == [], "the stale rank dialed the new Master and never got in"
        reach = subprocess.run(
            [
                "nsenter", "-t", str(stale_pid), "-n", sys.executable, "-c",
                f"import socket; socket.create_connection(({address!r}, {new_port}), 2).close()",
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert reach.returncode == 0, reach.stderr
        assert stand_in.peers == [stale_ip], "from the stale rank's network, the new port is open"
        print(
            f"stale rank: {len(refused)} dials of {address}:23456 refused; the stand-in on "
            f"{address}:{new_port} reached from its network namespace"
        )
    finally:
        os.kill(kubelet, signal.SIGCONT)
        if stand_in is not None:
            stand_in.close()

    resumed = time.monotonic()
    real.wait_for(
        lambda: not set(old.values()) & set(task_pids(real)),
        timeout=60,
        what="the kubelet to kill the first attempt's containers",
    )
    took = time.monotonic() - resumed
    print(f"kubelet resumed: the first attempt's containers gone {took:.1f}s later")
    assert not Path(f"/proc/{stale_pid}").exists() or "Z" in proc_state(stale_pid)
    real.wait_for(lambda: node_ready(real)["status"] == "True", timeout=90, what="real-0 Ready")
    quiet_since = time.time()
    time.sleep(2)
    assert dials(log, quiet_since) == [], "nothing of the first attempt runs any more"


def node_ready(real: RealNodeCluster) -> dict[str, Any]:
    found = real.get("node", real.node)
    assert found is not None
    (ready,) = [c for c in found["status"]["conditions"] if c["type"] == "Ready"]
    return dict(ready)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    (pytorch,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    return {e["name"]: e.get("value", "") for e in pytorch.get("env", [])}


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"

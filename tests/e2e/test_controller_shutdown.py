"""Stopping the leading controller (SIGTERM: node drain, rolling upgrade) on the real control plane.

What the on-call needs of a stop: the process exits within the pod's grace period (30 s, then the
kubelet sends SIGKILL) and hands its Lease back, so the standby leads at once instead of waiting
for the Lease to expire (15 s), even mid-burst and even while the apiserver hangs.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, create_job
from torchgate.cli import main as torchgate
from torchgate_dev.ports import free_port

pytestmark = pytest.mark.e2e
JOBS = 20
WORKERS = 3
GRACE_SECONDS = 30.0  # ControllerProcess.stop: SIGTERM, SIGKILL this long after
LEASE_SECONDS = 15.0  # LeaderElector's lease_duration


def holder(cluster: Cluster, lease: str) -> str | None:
    spec = (cluster.get("lease", lease, "default") or {}).get("spec") or {}
    return spec.get("holderIdentity") or None


def leading(process: ControllerProcess) -> float | None:
    """The replica's ``torchgate_controller_leader`` (None when it does not export one)."""
    found = re.search(r"^torchgate_controller_leader (\S+)$", process.metrics(), re.MULTILINE)
    return float(found.group(1)) if found else None


def test_a_leader_stopped_mid_burst_hands_its_lease_to_the_standby_at_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = cluster.new_namespace("stop")
    label = f"stop-{namespace[-6:]}"
    cluster.add_gpu_nodes(10, label, gpus=8, labels={"pool": label})
    lease = f"torchgate-stop-{namespace[-6:]}"
    extra = ("--leader-election-id", lease)
    leader = ControllerProcess(cluster.kubeconfig, tmp_path, *extra, leader_elect=True).start()
    first = cluster.wait_for(lambda: holder(cluster, lease), what="a leader")
    standby = ControllerProcess(cluster.kubeconfig, tmp_path, *extra, leader_elect=True).start()
    try:
        # Both are scraped; only the metrics tell the on-call which one acts.
        assert (leading(leader), leading(standby)) == (1.0, 0.0)
        selector = {"nodeSelector": {"pool": label}}
        jobs = [
            job(f"j{i:02d}", namespace)
            .master(gpus=1, pod_spec=selector)
            .workers(WORKERS, gpus=1, pod_spec=selector)
            .build()
            for i in range(JOBS)
        ]
        threads = [threading.Thread(target=create_job, args=(cluster, j)) for j in jobs]
        for thread in threads:
            thread.start()
        cluster.wait_for(
            lambda: len(cluster.list_objects("pods", namespace)) >= 6,
            timeout=60,
            what="the first gangs being created",
        )
        stopped = time.monotonic()
        assert leader.stop() == 0, leader.log()
        exited = time.monotonic()
        for thread in threads:
            thread.join()

        successor = cluster.wait_for(
            lambda: holder(cluster, lease) not in (None, first) and holder(cluster, lease),
            timeout=30,
            what="the standby leading",
        )
        took_over = time.monotonic()
        cluster.wait_for(lambda: leading(standby) == 1.0, timeout=5, what="the standby's metrics")

        def converged() -> list[dict[str, object]] | None:
            pods = cluster.list_objects("pods", namespace)
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            done = len(pods) == JOBS * (WORKERS + 1) and len(running) == len(pods)
            return pods if done else None

        pods = cluster.wait_for(converged, timeout=120, what="every gang Running")
    finally:
        if standby.process is not None and standby.process.poll() is None:
            standby.stop()
    print(
        f"exited {exited - stopped:.1f}s after SIGTERM; "
        f"{successor} led {took_over - exited:.1f}s after the exit"
    )
    assert exited - stopped < GRACE_SECONDS
    # Handed over, not expired: the standby retries every 2 s, a Lease not given up lasts 15 s.
    assert took_over - exited < LEASE_SECONDS / 2
    assert set(Counter(p["metadata"]["name"] for p in pods).values()) == {1}
    for found in cluster.list_objects("pytorchjobs", namespace):
        assert "torchgate.io/restarts" not in found["metadata"].get("annotations", {})


def test_a_leader_exits_within_the_grace_period_while_a_pool_answer_waits_on_a_hung_apiserver(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert torchgate(["certs", "--out-dir", str(tmp_path), "--ip", "127.0.0.1"]) == 0
    port = free_port()
    namespace = cluster.new_namespace("hung")
    lease = f"torchgate-hung-{namespace[-6:]}"
    leader = ControllerProcess(
        cluster.kubeconfig, tmp_path, "--leader-election-id", lease,
        "--pool-service-port", str(port), "--pool-service-bind-address", "127.0.0.1",
        "--tls-cert-file", str(tmp_path / "tls.crt"),
        "--tls-private-key-file", str(tmp_path / "tls.key"),
        leader_elect=True,
    ).start()  # fmt: skip
    cluster.wait_for(lambda: holder(cluster, lease), what="a leader")
    trusting = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    url = f"https://127.0.0.1:{port}"

    def served() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1, context=trusting):
                return True
        except OSError:
            return False

    def ask_for_the_pool() -> None:
        # Its token review waits on the hung apiserver; the answer does not matter.
        request = urllib.request.Request(
            f"{url}/v1/pool", headers={"Authorization": "Bearer someone"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=trusting):
                pass
        except OSError:
            pass

    cluster.wait_for(served, what="the pool service")
    apiserver = cluster.plane.pids()["kube-apiserver"]
    os.kill(apiserver, signal.SIGSTOP)
    try:
        asking = threading.Thread(target=ask_for_the_pool)
        asking.start()
        time.sleep(1.0)  # the answer is waiting on its TokenReview
        stopped = time.monotonic()
        code = leader.stop()
        took = time.monotonic() - stopped
        asking.join()
    finally:
        os.kill(apiserver, signal.SIGCONT)
    cluster.plane.restart_exited()
    print(f"exited {took:.1f}s after SIGTERM, code {code}")
    assert code == 0, leader.log()  # not SIGKILLed at the end of the grace period
    assert took < GRACE_SECONDS


def test_a_leader_stopped_as_the_first_pods_of_a_wave_appear_leaves_every_gang_its_event(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A rolling upgrade mid-wave: every gang admitted has its ``GangAdmitted`` Event.

    The Events of a wave's admissions wait for their jobs' statuses, which wait for the wave's
    creates, and the recorder's backlog grows meanwhile: a leader stopped then sends them.
    """
    jobs_count, nodes = 40, 20
    namespace = cluster.new_namespace("stopev")
    label = f"stopev-{namespace[-6:]}"
    cluster.add_gpu_nodes(nodes, label, gpus=8, labels={"pool": label})
    first = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    selector = {"nodeSelector": {"pool": label}}
    jobs = [
        job(f"j{i:02d}", namespace)
        .master(gpus=1, pod_spec=selector)
        .workers(WORKERS, gpus=1, pod_spec=selector)
        .build()
        for i in range(jobs_count)
    ]
    threads = [threading.Thread(target=create_job, args=(cluster, j)) for j in jobs]
    for thread in threads:
        thread.start()
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    cluster.wait_for(
        lambda: cluster.api_request("GET", pods_path)[1]["items"],
        timeout=60,
        what="the wave's first pod",
    )
    assert first.stop() == 0, first.log()
    for thread in threads:
        thread.join()
    second = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    try:

        def converged() -> bool:
            pods = cluster.list_objects("pods", namespace)
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return len(running) == len(pods) == jobs_count * (WORKERS + 1)

        cluster.wait_for(converged, timeout=120, what="every gang Running")

        def without_event() -> list[str]:
            admitted = {
                e["involvedObject"]["name"]
                for e in cluster.list_objects("events", namespace)
                if e.get("reason") == "GangAdmitted"
            }
            return sorted(
                j["metadata"]["name"] for j in jobs if j["metadata"]["name"] not in admitted
            )

        deadline = time.monotonic() + 20  # Events are sent in the background
        while without_event() and time.monotonic() < deadline:
            time.sleep(0.5)
        missing = without_event()
    finally:
        assert second.stop() == 0, second.log()
    assert missing == []

"""A controller stopped (SIGTERM) in each phase of its start exits 0 at once, on the real apiserver.

The phases: a standby waiting for a Lease another replica holds, a leader whose caches are still
listing, and a leader that has just logged "caches synced" (its first admission cycles, status
writes and Lease renewals starting). A rolling upgrade or a node drain stops a replica at any of
these moments; each must exit well within the pod's 30 s grace period (the Deployment sets none:
Kubernetes' default). The cancellation races each phase's own loops only by chance here;
``tests/unit/controller/test_stop_at_any_moment.py`` lands a stop in every step of them.

And a standby stopped at the moment it takes the Lease: the apiserver has applied its write, its
answer is on the way. The Lease is then the stopping replica's without it knowing; it must give it
back all the same, or its successor waits out the Lease (15 s). A relay in front of the apiserver
delays every answer to that replica, so the stop lands in that moment for certain.
"""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess

pytestmark = pytest.mark.e2e
EXITS_WITHIN_SECONDS = 15.0
LEASE_SECONDS = 15.0  # LeaderElector's lease_duration
ANSWER_DELAY_SECONDS = 1.5


def stopped_in(process: ControllerProcess) -> float:
    """SIGTERM; the seconds until the process exited 0 (fails when it did not)."""
    assert process.process is not None
    sent = time.monotonic()
    process.process.send_signal(signal.SIGTERM)
    try:
        process.process.wait(timeout=EXITS_WITHIN_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"no exit {EXITS_WITHIN_SECONDS:g}s after SIGTERM:\n{process.log()}")
    took = time.monotonic() - sent
    assert process.stop() == 0, process.log()  # exited already: its code, its log closed
    return took


def test_a_controller_stopped_in_each_phase_of_its_start_exits_0_at_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = cluster.new_namespace("stopstart")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.apply(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "held", "namespace": namespace},
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )
    lease = ("--leader-election-namespace", namespace, "--leader-election-id")
    took: dict[str, float] = {}

    standby = ControllerProcess(cluster.kubeconfig, tmp_path, *lease, "held", leader_elect=True)
    standby.start()
    time.sleep(1)  # it has read the Lease and retries every 2 s
    took["standby"] = stopped_in(standby)
    assert "became the leader" not in standby.log()

    # Its metrics port opens before it has created its Lease or listed anything.
    starting = ControllerProcess(cluster.kubeconfig, tmp_path, *lease, "new", leader_elect=True)
    took["starting"] = stopped_in(starting.start())

    synced = ControllerProcess(cluster.kubeconfig, tmp_path, *lease, "synced", leader_elect=True)
    synced.start()
    cluster.wait_for(lambda: "caches synced" in synced.log(), what="caches synced")
    took["synced"] = stopped_in(synced)

    print({phase: f"{seconds:.1f}s" for phase, seconds in took.items()})


class SlowAnswers:
    """A TCP relay to the apiserver whose answers reach the client ``delay`` seconds late.

    What the client sends goes through at once, so the apiserver applies a write while its answer
    is still held here (TLS passes through untouched: the relay sees bytes only).
    """

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        self.listener.close()
        for connection in self.connections:
            connection.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(client)
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.connections.append(upstream)
            for source, sink, delay in ((client, upstream, 0.0), (upstream, client, self.delay)):
                threading.Thread(target=self._pipe, args=(source, sink, delay), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, delay: float) -> None:
        held: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def deliver() -> None:
            while True:
                due, data = held.get()
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    if not data:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(data)
                except OSError:
                    return

        threading.Thread(target=deliver, daemon=True).start()
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            held.put((time.monotonic() + delay, data))
            if not data:
                return


@contextmanager
def answers_delayed(cluster: Cluster, tmp_path: Path, delay: float) -> Iterator[Path]:
    """A kubeconfig of ``cluster`` through a :class:`SlowAnswers` relay."""
    config: dict[str, Any] = yaml.safe_load(cluster.kubeconfig.read_text())
    server = urlsplit(cluster.plane.server)
    assert server.hostname is not None
    assert server.port is not None
    relay = SlowAnswers((server.hostname, server.port), delay)
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://{server.hostname}:{relay.port}"
    kubeconfig = tmp_path / "slow-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    try:
        yield kubeconfig
    finally:
        relay.close()


def lease_holder(cluster: Cluster, namespace: str, name: str) -> str:
    status, lease = cluster.api_request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    )
    assert status == 200, lease
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def test_a_standby_stopped_as_it_takes_the_lease_gives_it_to_the_next_replica_at_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = cluster.new_namespace("stoptake")
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/ctl"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = {"holderIdentity": "another-replica", "leaseDurationSeconds": 3600}
    cluster.apply(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "ctl", "namespace": namespace},
            "spec": {**held, "acquireTime": now, "renewTime": now},
        }
    )
    lease_flags = ("--leader-election-namespace", namespace, "--leader-election-id", "ctl")
    with answers_delayed(cluster, tmp_path, ANSWER_DELAY_SECONDS) as slow_kubeconfig:
        taking = ControllerProcess(slow_kubeconfig, tmp_path, *lease_flags, leader_elect=True)
        taking.start()
        time.sleep(3 * ANSWER_DELAY_SECONDS)  # it has read the Lease held by another replica
        status, lease = cluster.api_request("GET", lease_path)
        assert status == 200, lease
        lease["spec"]["holderIdentity"] = ""  # the other replica gave it up: take it
        status, lease = cluster.api_request("PUT", lease_path, lease)
        assert status == 200, lease
        taken_by = cluster.wait_for(
            lambda: lease_holder(cluster, namespace, "ctl"), timeout=30, what="the Lease taken"
        )
        assert taking.process is not None
        taking.process.send_signal(signal.SIGTERM)  # its answer is on its way
        stopped = time.monotonic()
        successor = ControllerProcess(cluster.kubeconfig, tmp_path, *lease_flags, leader_elect=True)
        successor.start()
        try:
            taking.process.wait(timeout=EXITS_WITHIN_SECONDS)
            exited = time.monotonic() - stopped
            assert taking.stop() == 0, taking.log()  # exited already: its code, its log closed
            led_by = cluster.wait_for(
                lambda: (
                    lease_holder(cluster, namespace, "ctl") not in ("", taken_by)
                    and lease_holder(cluster, namespace, "ctl")
                ),
                timeout=2 * LEASE_SECONDS,
                what="the next replica leading",
            )
            took_over = time.monotonic() - stopped
        finally:
            if taking.process.poll() is None:
                taking.kill()
            successor.stop()
    print(f"taken by {taken_by}; exited {exited:.1f}s, {led_by} led {took_over:.1f}s after SIGTERM")
    # The stop met the take in flight: had the answer come first, this tested a leader's stop.
    assert "became the leader" not in taking.log(), taking.log()
    # Given back, not expired: the next replica retries every 2 s, a Lease kept lasts 15 s.
    assert took_over < LEASE_SECONDS * 2 / 3, successor.log()

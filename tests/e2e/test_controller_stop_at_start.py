"""A controller stopped (SIGTERM) in each phase of its start exits 0 at once, on the real apiserver.

The phases: a standby waiting for a Lease another replica holds, a leader whose caches are still
listing, and a leader that has just logged "caches synced" (its first admission cycles, status
writes and Lease renewals starting). A rolling upgrade or a node drain stops a replica at any of
these moments; each must exit well within the pod's 30 s grace period (the Deployment sets none:
Kubernetes' default). The cancellation races each phase's own loops only by chance here;
``tests/unit/controller/test_stop_at_any_moment.py`` lands a stop in every step of them.
"""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess

pytestmark = pytest.mark.e2e
EXITS_WITHIN_SECONDS = 15.0


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

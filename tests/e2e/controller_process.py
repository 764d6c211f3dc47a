"""Run ``torchgate controller`` as a real process for e2e tests, and read the cluster fast.

The controller under test is the console command itself (a subprocess), never an in-process
object, so flags, signal handling and leader election are exercised as in a Deployment. Reads go
straight to the API (one HTTPS request, no kubectl process) because several tests measure how
quickly things happen. The module-scoped fixture ``controller`` (one controller per test module,
checked to exit 0 when stopped) is shared by import: ``from ... import controller as controller``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from torchgate_dev.controlplane.processes import terminate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


FINISH_GRACE_SECONDS = 1.0
"""The e2e controllers' ``--finish-grace-seconds`` (kwok pods never end on their own: short)."""


class ControllerProcess:
    """One ``torchgate controller`` process with its log file and metrics port."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        *extra: str,
        leader_elect: bool = False,
        manage_unowned: bool = True,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.metrics_port = free_port()
        self.log_path = log_dir / f"controller-{self.metrics_port}.log"
        self.args = [
            sys.executable,
            "-m",
            "torchgate",
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            *(["--manage-unowned"] if manage_unowned else []),
            "--metrics-bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--gang-backoff-seconds",
            "2",
            "--finish-grace-seconds",
            str(FINISH_GRACE_SECONDS),
            "--leader-elect" if leader_elect else "--no-leader-elect",
            "--leader-election-namespace",
            "default",
            *extra,
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> ControllerProcess:
        self._log = self.log_path.open("ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self.process = subprocess.Popen(
            self.args, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"controller exited early:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"controller did not open its metrics port:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, mid-flight."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._log.close()

    def stop(self) -> int:
        assert self.process is not None
        code = terminate(self.process, grace=30)  # a pod's default terminationGracePeriodSeconds
        self._log.close()
        return code

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextmanager
def running_controller(kubeconfig: Path, log_dir: Path, *extra: str) -> Iterator[ControllerProcess]:
    """A started controller (``extra``: its further flags) that must exit 0 when stopped after.

    What the e2e modules' ``controller`` fixtures hold: one controller for the module, whose clean
    exit on SIGTERM is checked at the end (its log in the message when it is not).
    """
    process = ControllerProcess(kubeconfig, log_dir, *extra).start()
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def controller(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    """The module's controller with the e2e defaults; a module that imports it has its own."""
    with running_controller(cluster.kubeconfig, tmp_path_factory.mktemp("controller")) as process:
        yield process


def job_path(namespace: str, name: str = "") -> str:
    base = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
    return f"{base}/{name}" if name else base


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    status, body = cluster.api_request("GET", job_path(namespace, name))
    return body if status == 200 else None


def create_job(cluster: Cluster, job: dict[str, Any]) -> dict[str, Any]:
    namespace = job["metadata"]["namespace"]
    status, body = cluster.api_request("POST", job_path(namespace), job)
    assert status == 201, body
    return body


def job_pods(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = urllib.request.quote(f"training.kubeflow.org/job-name={job}")
    status, body = cluster.api_request(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    )
    assert status == 200, body
    return list(body["items"])


def live_pods(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    """Pods of a job that are not being deleted."""
    return [
        p for p in job_pods(cluster, namespace, job) if not p["metadata"].get("deletionTimestamp")
    ]


def condition(job: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for item in (job or {}).get("status", {}).get("conditions", []):
        if item.get("type") == kind:
            return dict(item)
    return None


def is_true(job: dict[str, Any] | None, kind: str) -> bool:
    found = condition(job, kind)
    return found is not None and found.get("status") == "True"


def events_of(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = urllib.request.quote(f"involvedObject.name={name}")
    status, body = cluster.api_request(
        "GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}"
    )
    assert status == 200, body
    return list(body["items"])


def times_told(cluster: Cluster, name: str, reason: str) -> int:
    """How many times cluster-scoped object ``name`` was told ``reason``: its Events' counts.

    Events of a cluster-scoped object (a TeamQuota, a PlacementPolicy) live in ``default``.
    """
    return sum(
        int(event.get("count") or 1)
        for event in events_of(cluster, "default", name)
        if event.get("reason") == reason
    )


def events_once(
    cluster: Cluster, namespace: str, name: str, *reasons: str, timeout: float = 30
) -> list[dict[str, Any]]:
    """``name``'s events once each of ``reasons`` is among them.

    The controller records an Event after the change it reports (pods deleted, status written),
    so a test that has just seen the change may read the events a moment before it lands.
    """

    def found() -> list[dict[str, Any]] | None:
        events = events_of(cluster, namespace, name)
        return events if set(reasons) <= {e["reason"] for e in events} else None

    return cluster.wait_for(found, timeout=timeout, what=f"events {', '.join(reasons)} of {name}")


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:4000]

"""Run ``torchgate webhook`` as a real process behind the e2e apiserver, and restart it.

The webhook under test is the console command (a subprocess on loopback with certificates from
``torchgate certs``), registered by URL with ``failurePolicy: Fail`` through the same pure
function ``torchgate dev`` uses, so the apiserver really calls it and really refuses writes while
it is away. Restarting it is what a rolling restart of the webhook's pods does to the apiserver:
the endpoint goes away and comes back with the same certificates.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster
from torchgate_dev import devcluster
from torchgate_dev.apiserver import wait_for_admission, webhook_ready
from torchgate_dev.launch import webhook_command
from torchgate_dev.paths import CA_CERT
from torchgate_dev.ports import free_port
from torchgate_dev.state import DevError


class LocalWebhook:
    """``torchgate webhook`` as a subprocess on loopback, stoppable and restartable."""

    def __init__(self, cluster: Cluster, workdir: Path, *, controller_port: int = 0) -> None:
        self.cluster = cluster
        self.tls = workdir / "tls"
        self.log = workdir / "webhook.log"
        self.port = free_port()
        self.controller_port = controller_port  # asks a controller there for forecasts
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def make_certificates(self) -> bytes:
        """``torchgate certs`` writes CA and serving certificate; returns the CA bundle."""
        command = ["certs", "--out-dir", str(self.tls), "--ip", "127.0.0.1"]
        result = subprocess.run(
            [sys.executable, "-m", "torchgate", *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return (self.tls / CA_CERT).read_bytes()

    def start(self) -> None:
        argv = webhook_command(
            port=self.port,
            tls_dir=self.tls,
            kubeconfig=self.cluster.kubeconfig,
            controller_port=self.controller_port,
        )
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while not webhook_ready(self.port, self.tls / CA_CERT):
            if self.process.poll() is not None:
                pytest.fail(
                    f"torchgate webhook exited with {self.process.returncode}; see {self.log}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"torchgate webhook not ready after 60s; see {self.log}")
            time.sleep(0.1)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def register(self, ca_bundle: bytes) -> None:
        self.cluster.apply(devcluster.webhook_configurations(self.url, ca_bundle=ca_bundle))

    def unregister(self) -> None:
        self.cluster.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            devcluster.CONFIGURATION_NAME, "--ignore-not-found",
        )  # fmt: skip

    def restart(self) -> None:
        """Stop (SIGTERM) and start again on the same port, as a pod restart would."""
        self.stop()
        self.start()


@contextmanager
def registered_webhook(cluster: Cluster, workdir: Path) -> Iterator[LocalWebhook]:
    """A started webhook registered with the apiserver; unregistered and stopped at exit."""
    if cluster.plane.attached:
        pytest.skip(
            "the webhook runs on this machine's loopback; an attached cluster cannot call it"
        )
    server = LocalWebhook(cluster, workdir)
    ca_bundle = server.make_certificates()
    server.start()
    try:
        server.register(ca_bundle)
        problem = None
        try:
            wait_for_admission(cluster.api_request, timeout=30)
        except DevError as error:
            problem = str(error)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        yield server
    finally:
        server.unregister()  # first: other modules must not meet a Fail webhook that is gone
        server.stop()


@pytest.fixture(scope="module")
def webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWebhook]:
    """The module's webhook, registered with ``failurePolicy: Fail``, called by the apiserver.

    Shared by import (``from ... import webhook as webhook``): a module that imports it has one of
    its own, gone before the next module starts.
    """
    with registered_webhook(cluster, tmp_path_factory.mktemp("webhook")) as server:
        yield server

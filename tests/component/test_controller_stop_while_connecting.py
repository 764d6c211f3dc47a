"""A controller process stopped while it starts (imports, loads its configuration) exits 0 at once.

Loading the configuration can take long before any request is sent: a kubeconfig's exec
credential plugin (a cloud provider's token helper) runs then, and may wait on its own network.
Kubernetes sends SIGTERM at any moment (a rollout right after the start), so the controller must
take it from its first moment, not only once it is connected. The plugin here writes its pid and
then never answers, so the signal lands, for certain, while the connect is in progress; the
kubeconfig's server accepts connections and never answers (nothing may depend on reaching it).
Before that, its modules load (about half a second); an import hook holds the controller's
command module there, so a signal lands for certain during the import as well.
No cluster is needed: the real process, its real signal handling, nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

# The Deployment's terminationGracePeriodSeconds is Kubernetes' default, 30 s: well within it.
EXITS_WITHIN_SECONDS = 10.0
PLUGIN_STARTS_WITHIN_SECONDS = 60.0  # the interpreter start and imports, on a busy machine


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A local TCP port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def stalling_kubeconfig(tmp_path: Path, server_port: int) -> tuple[Path, Path]:
    """A kubeconfig whose exec credential plugin writes its pid to a file, then hangs."""
    pid_file = tmp_path / "plugin.pid"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{server_port}"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": sys.executable,
                        "args": [str(plugin)],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig, pid_file


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_controller_stopped_while_its_credential_plugin_runs_exits_0_at_once(
    tmp_path: Path, silent_server: int, signum: signal.Signals
) -> None:
    kubeconfig, pid_file = stalling_kubeconfig(tmp_path, silent_server)
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    command = [sys.executable, "-m", "torchgate", "controller", "--kubeconfig", str(kubeconfig)]
    process = subprocess.Popen(
        [*command, "--metrics-port", "0", "--no-leader-elect"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    plugin_pid = None
    try:
        deadline = time.monotonic() + PLUGIN_STARTS_WITHIN_SECONDS
        while not pid_file.exists() or not pid_file.read_text():
            assert process.poll() is None, process.communicate()[0].decode()
            assert time.monotonic() < deadline, "the credential plugin never ran"
            time.sleep(0.02)
        plugin_pid = int(pid_file.read_text())
        sent = time.monotonic()
        process.send_signal(signum)
        try:
            output, _ = process.communicate(timeout=EXITS_WITHIN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            pytest.fail(f"no exit {EXITS_WITHIN_SECONDS:g}s after the signal:\n{output.decode()}")
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if plugin_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(plugin_pid, signal.SIGKILL)
    print(f"exited {took:.2f}s after {signum.name}, code {process.returncode}")
    assert process.returncode == 0, output.decode()


# Holds the import of the controller's command module for a while, once it has said so in a file.
STALLED_IMPORT = """
import importlib.abc, pathlib, sys, time

class Stall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torchgate.controller.command":
            pathlib.Path(sys.argv[1]).write_text("importing")
            time.sleep(2)
        return None

sys.meta_path.insert(0, Stall())
from torchgate.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_controller_stopped_while_its_modules_load_exits_0_without_connecting(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "importing"
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    # No kubeconfig there: a controller that went on to connect would exit 1.
    controller = ["controller", "--kubeconfig", str(tmp_path / "absent"), "--metrics-port", "0"]
    process = subprocess.Popen(
        [sys.executable, "-c", STALLED_IMPORT, str(marker), *controller],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + PLUGIN_STARTS_WITHIN_SECONDS
        while not marker.exists():
            assert process.poll() is None, process.communicate()[0].decode()
            assert time.monotonic() < deadline, "the controller's module was never imported"
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=EXITS_WITHIN_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output.decode()

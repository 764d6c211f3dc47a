"""A long-running command stopped while it starts (imports, loads its configuration) exits 0.

Kubernetes sends SIGTERM at any moment (a rollout right after the start), so the pods' commands
(``torchgate controller``, ``torchgate webhook`` and the webhook's sidecar ``torchgate certs
--watch``) must take it from their first moment, not only once they are connected or serving.
Loading the configuration can take long before any request is sent: a kubeconfig's exec
credential plugin (a cloud provider's token helper) runs then, and may wait on its own network.
The plugin here writes its pid and then never answers, so the signal lands, for certain, while the
connect is in progress; the kubeconfig's server accepts connections and never answers (nothing may
depend on reaching it). Before that, the modules load (about half a second); an import hook holds
each command's module there, so a signal lands for certain during the import as well.
No cluster is needed: the real processes, their real signal handling, nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.builders.policy import policy
from torchgate.cli import main as torchgate

# The Deployments' terminationGracePeriodSeconds is Kubernetes' default, 30 s: well within it.
EXITS_WITHIN_SECONDS = 10.0
PLUGIN_STARTS_WITHIN_SECONDS = 60.0  # the interpreter start and imports, on a busy machine


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A local TCP port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A serving certificate for the webhook, made by ``torchgate certs``."""
    directory = tmp_path_factory.mktemp("tls")
    assert torchgate(["certs", "--out-dir", str(directory), "--ip", "127.0.0.1"]) == 0
    return directory


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


# command -> its arguments, given the kubeconfig and the webhook's certificate directory
Arguments = Callable[[Path, Path], list[str]]
COMMANDS: dict[str, tuple[str, Arguments]] = {
    "controller": (
        "torchgate.controller.command",
        lambda kubeconfig, tls: [
            *("controller", "--kubeconfig", str(kubeconfig)),
            *("--metrics-port", "0", "--no-leader-elect"),
        ],
    ),
    "webhook": (
        "torchgate.webhook.command",
        lambda kubeconfig, tls: [
            *("webhook", "--kubeconfig", str(kubeconfig), "--port", "0"),
            *("--tls-cert-file", str(tls / "tls.crt")),
            *("--tls-private-key-file", str(tls / "tls.key")),
        ],
    ),
    "certs-watch": (
        "torchgate.certs.command",
        lambda kubeconfig, tls: [
            *("certs", "--watch", "--kubeconfig", str(kubeconfig)),
            *("--ip", "127.0.0.1", "--secret", "torchgate-system/webhook-tls"),
        ],
    ),
}
STOPS = pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"]
)


def without_cluster() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}


@STOPS
@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_stopped_while_its_credential_plugin_runs_exits_0_at_once(
    tmp_path: Path, silent_server: int, tls: Path, command: str, signum: signal.Signals
) -> None:
    kubeconfig, pid_file = stalling_kubeconfig(tmp_path, silent_server)
    arguments = COMMANDS[command][1](kubeconfig, tls)
    process = subprocess.Popen(
        [sys.executable, "-m", "torchgate", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=without_cluster(),
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
    print(f"{command} exited {took:.2f}s after {signum.name}, code {process.returncode}")
    assert process.returncode == 0, output.decode()


# Holds the import of a command's module for a while, once it has said so in a file.
STALLED_IMPORT = """
import importlib.abc, pathlib, sys, time

class Stall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == sys.argv[2]:
            pathlib.Path(sys.argv[1]).write_text("importing")
            time.sleep(2)
        return None

sys.meta_path.insert(0, Stall())
from torchgate.cli import main
sys.exit(main(sys.argv[3:]))
"""


def stopped_while_importing(
    tmp_path: Path, module: str, arguments: list[str], signum: signal.Signals
) -> tuple[int, str]:
    """Exit code and output of ``torchgate ARGUMENTS`` sent ``signum`` as it imports ``module``."""
    marker = tmp_path / "importing"
    process = subprocess.Popen(
        [sys.executable, "-c", STALLED_IMPORT, str(marker), module, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=without_cluster(),
    )
    try:
        deadline = time.monotonic() + PLUGIN_STARTS_WITHIN_SECONDS
        while not marker.exists():
            assert process.poll() is None, process.communicate()[0].decode()
            assert time.monotonic() < deadline, f"{module} was never imported"
            time.sleep(0.02)
        process.send_signal(signum)
        output, _ = process.communicate(timeout=EXITS_WITHIN_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, output.decode()


@STOPS
@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_stopped_while_its_modules_load_exits_0_without_connecting(
    tmp_path: Path, tls: Path, command: str, signum: signal.Signals
) -> None:
    module, arguments = COMMANDS[command]
    # No kubeconfig there: a command that went on to connect would exit 1 (or retry for ever).
    code, output = stopped_while_importing(
        tmp_path, module, arguments(tmp_path / "absent", tls), signum
    )

    assert code == 0, output


def test_a_webhook_stopped_before_it_serves_exits_without_its_shutdown_delay(
    tmp_path: Path, tls: Path
) -> None:
    """Nothing waits in its start with policy files; the delay is for a pod that was serving."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(policy("gpu-pool")))
    webhook = [
        *("webhook", "--policy", str(policy_file), "--port", "0"),
        *("--shutdown-delay-seconds", str(EXITS_WITHIN_SECONDS * 6)),
        *("--tls-cert-file", str(tls / "tls.crt")),
        *("--tls-private-key-file", str(tls / "tls.key")),
    ]

    code, output = stopped_while_importing(
        tmp_path, "torchgate.webhook.command", webhook, signal.SIGTERM
    )

    assert code == 0, output

"""Starting and stopping the webhook and the controller, with their command lines and certificates.

The command lines are pure (:func:`webhook_command`, :func:`controller_command`); the rest is the
process shell: every process runs detached in its own session with its output appended to a log
(:mod:`torchgate_dev.controlplane.processes` does the bookkeeping), and children never inherit the
caller's ``KUBECONFIG``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from torchgate_dev.controlplane import processes
from torchgate_dev.controlplane.processes import ManagedProcess
from torchgate_dev.paths import CA_CERT, PACKAGE_ROOT, TLS_CERT, TLS_KEY
from torchgate_dev.state import DevError

_STOP_GRACE_SECONDS: Final = 10.0
_LOG_TAIL_LINES: Final = 12


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # children get --kubeconfig; never someone else's cluster
    env["PYTHONUNBUFFERED"] = "1"
    # The children must run this very code, also from a checkout that is not pip-installed.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def spawn(name: str, argv: Sequence[str], log_path: Path, *, cwd: Path) -> ManagedProcess:
    """Start a detached process in its own session, stdout and stderr appended to ``log_path``."""
    return processes.spawn(name, argv, log_path, cwd=cwd, env=_child_environment(), banner=True)


def stop_process(process: ManagedProcess, *, grace: float = _STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds; reap it if it is ours."""
    processes.stop(process, grace=grace)


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last lines of a log, for error messages."""
    return processes.log_tail(path, lines)


def webhook_command(
    *, port: int, tls_dir: Path, kubeconfig: Path, controller_port: int = 0
) -> list[str]:
    """``torchgate webhook`` on loopback, watching the cluster's PlacementPolicies.

    With ``controller_port``, it asks the controller's pool service there for forecasts,
    trusting the CA in ``tls_dir`` (the controller serves a certificate of the same CA).
    """
    forecasts = (
        [
            "--controller-url", f"https://127.0.0.1:{controller_port}",
            "--controller-ca-file", str(tls_dir / CA_CERT),
        ]
        if controller_port
        else []
    )  # fmt: skip
    return [
        sys.executable, "-m", "torchgate", "webhook",
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--tls-cert-file", str(tls_dir / TLS_CERT),
        "--tls-private-key-file", str(tls_dir / TLS_KEY),
        "--kubeconfig", str(kubeconfig),
        *forecasts,
    ]  # fmt: skip


def controller_command(
    *, kubeconfig: Path, metrics_port: int, pool_port: int = 0, tls_dir: Path | None = None
) -> list[str]:
    """``torchgate controller`` for every namespace, running jobs that name no other manager.

    No leader election: ``dev`` runs exactly one controller per cluster (its state file says
    which), and a Lease left by a killed controller would only delay the next one. With
    ``pool_port`` it serves the pool service on loopback with the certificate in ``tls_dir``
    (the webhook's: it names 127.0.0.1).
    """
    pool = (
        [
            "--pool-service-port", str(pool_port),
            "--pool-service-bind-address", "127.0.0.1",
            "--tls-cert-file", str(tls_dir / TLS_CERT),
            "--tls-private-key-file", str(tls_dir / TLS_KEY),
        ]
        if pool_port and tls_dir is not None
        else []
    )  # fmt: skip
    return [
        sys.executable, "-m", "torchgate", "controller",
        "--kubeconfig", str(kubeconfig),
        "--manage-unowned",
        "--no-leader-elect",
        "--metrics-bind-address", "127.0.0.1",
        "--metrics-port", str(metrics_port),
        *pool,
    ]  # fmt: skip


def make_certificates(tls_dir: Path, *, now: datetime | None = None) -> bytes:
    """CA and serving certificate (IP SAN 127.0.0.1, DNS localhost) in ``tls_dir``; the CA PEM.

    Valid material already there is kept (the ``certs`` rotation plan decides), so a restarted
    webhook presents the certificate the apiserver already trusts.

    Raises:
        DevError: The files cannot be read or written.
    """
    # Imported here: certs.store loads the Kubernetes client (~1.5 s), which status and down
    # never need.
    from torchgate.certs.authority import CertificateError, plan_rotation
    from torchgate.certs.store import CertsError, read_directory, write_directory

    try:
        plan = plan_rotation(
            read_directory(tls_dir),
            dns_names=("localhost",),
            ips=("127.0.0.1",),
            now=now or datetime.now(UTC),
        )
        write_directory(tls_dir, plan.material)
    except (CertsError, CertificateError) as error:
        raise DevError(f"webhook certificates in {tls_dir}: {error}") from None
    return plan.material.ca_cert

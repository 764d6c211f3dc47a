"""Keeping a control plane's processes accountable: stop order, signals, owners, probes.

Rules:

- Stop order is clients, then the apiserver, then etcd (:func:`stop_tiers`).
- While a control plane runs attached to this process, SIGTERM and SIGHUP unwind like Ctrl-C
  (:data:`TERMINATION_GUARD`), so ``finally`` blocks and atexit hooks stop the processes.
- Probes answer a boolean within a short timeout and never raise.
"""

from __future__ import annotations

import os
import signal
import ssl
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Final

from torchgate.kube import blocking
from torchgate.kube.errors import ApiError
from torchgate_dev.controlplane import processes
from torchgate_dev.controlplane.processes import ManagedProcess

_LOG_TAIL_LINES: Final = 15


def stop_tiers(processes: Sequence[ManagedProcess]) -> list[list[ManagedProcess]]:
    """Stop order: clients, then the apiserver, then etcd.

    An apiserver whose etcd vanished first spends its whole grace period retrying it.
    """
    last = ("kube-apiserver", "etcd")
    tiers = [[p for p in processes if p.name not in last]]
    tiers += [[p for p in processes if p.name == name] for name in last]
    return [tier for tier in tiers if tier]


def tail(process: ManagedProcess) -> str:
    """The last lines of the process's log, for error messages."""
    return processes.log_tail(process.log_path, _LOG_TAIL_LINES)


def child_environment() -> dict[str, str]:
    """The environment of a component: ours without ``KUBECONFIG`` (each gets its own)."""
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return env


def _interrupt(signum: int, frame: FrameType | None) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


class TerminationGuard:
    """Turns SIGTERM/SIGHUP into KeyboardInterrupt while a control plane runs here.

    The default action of those signals kills Python without running ``finally`` blocks or
    atexit hooks, which would leave the processes behind. KeyboardInterrupt unwinds the stack,
    and pytest answers it by stopping the session and tearing fixtures down. Only default
    handlers are replaced (never someone else's), only from the main thread (Python's rule),
    and they come back when the last control plane here stops.
    """

    _SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._replaced: list[signal.Signals] = []

    def acquire(self) -> None:
        """Count one more control plane here; the first one installs the handlers."""
        with self._lock:
            self._users += 1
            if self._users == 1 and threading.current_thread() is threading.main_thread():
                for signum in self._SIGNALS:
                    if signal.getsignal(signum) is signal.SIG_DFL:
                        signal.signal(signum, _interrupt)
                        self._replaced.append(signum)

    def release(self) -> None:
        """Count one control plane less; the last one restores the default handlers."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or threading.current_thread() is not threading.main_thread():
                return
            for signum in self._replaced:
                if signal.getsignal(signum) is _interrupt:
                    signal.signal(signum, signal.SIG_DFL)
            self._replaced.clear()


TERMINATION_GUARD = TerminationGuard()


def insecure_context() -> ssl.SSLContext:
    """TLS without verification: ``/healthz`` of components with self-signed certificates."""
    # KCM and the scheduler serve /healthz with self-signed certificates made at start-up.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def node_ready(url: str, context: ssl.SSLContext, token: str | None) -> bool:
    """Whether the Node at ``url`` reports the Ready condition True."""
    try:
        node = blocking.get(url, tls=context, token=token)
    except (ApiError, ValueError):
        return False
    if not isinstance(node, dict):
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def server_version(server: str, context: ssl.SSLContext, token: str | None) -> str | None:
    """The Kubernetes version an apiserver reports (``/version``), ``1.37.2``; None if unknown."""
    try:
        answer = blocking.get(f"{server}/version", tls=context, token=token)
    except (ApiError, ValueError):
        return None
    version = answer.get("gitVersion") if isinstance(answer, dict) else None
    return version.removeprefix("v") if isinstance(version, str) and version else None


def http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    """Whether ``url`` answers 200 (a bearer ``token`` if given)."""
    return blocking.probe(url, tls=context, token=token) == 200

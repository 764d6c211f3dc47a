"""Where one control plane keeps its files inside its work dir, and its loopback ports.

Everything of a control plane (certificates, the admin token, etcd data, one log per process, the
state file) lives in one work dir, so several can run side by side and leave nothing elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

from torchgate_dev.ports import free_port

STATE_FILE: Final = "state.json"


@dataclass(frozen=True, slots=True)
class Layout:
    """Where everything of one control plane lives inside its work dir."""

    root: Path

    @property
    def pki(self) -> Path:
        """Certificates and keys."""
        return self.root / "pki"

    @property
    def ca_cert(self) -> Path:
        """The CA that signed the apiserver's serving certificate (clients trust this)."""
        return self.pki / "ca.crt"

    @property
    def serving_cert(self) -> Path:
        """The apiserver's serving certificate."""
        return self.pki / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        """The apiserver's serving key."""
        return self.pki / "apiserver.key"

    @property
    def service_account_key(self) -> Path:
        """Signs and verifies ServiceAccount tokens (apiserver and KCM)."""
        return self.pki / "sa.key"

    @property
    def tokens(self) -> Path:
        """Static token file with the admin user."""
        return self.pki / "tokens.csv"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (token auth); used by KCM, the scheduler, kwok and tests."""
        return self.root / "kubeconfig"

    @property
    def scheduler_config(self) -> Path:
        """KubeSchedulerConfiguration."""
        return self.root / "scheduler.yaml"

    @property
    def kwok_config(self) -> Path:
        """The Stage set kwok plays."""
        return self.root / "kwok-stages.yaml"

    @property
    def etcd_data(self) -> Path:
        """The data dir of etcd."""
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        """One log file per process."""
        return self.root / "logs"

    @property
    def state(self) -> Path:
        """PIDs and endpoints, for ``from_state``."""
        return self.root / STATE_FILE

    @property
    def audit_policy(self) -> Path:
        """The apiserver's audit policy (written only with ``ControlPlane(audit_log=True)``)."""
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log, one JSON event per line (with ``audit_log=True``)."""
        return self.logs / "audit.log"

    @property
    def kubelet_client_cert(self) -> Path:
        """The apiserver's client certificate for kubelets (logs, exec, port-forward)."""
        return self.pki / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        """Its key."""
        return self.pki / "apiserver-kubelet-client.key"

    @property
    def node(self) -> Path:
        """The real node's per-run files (configuration, kubelet root, container state)."""
        return self.root / "node"

    def generated(self) -> tuple[Path, ...]:
        """Everything ``start()`` writes (and wipes before writing again)."""
        return (
            self.pki,
            self.kubeconfig,
            self.scheduler_config,
            self.kwok_config,
            self.audit_policy,
            self.etcd_data,
            self.logs,
            self.state,
            self.node,
        )


@dataclass(frozen=True, slots=True)
class Ports:
    """Loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def pick(cls) -> Self:
        """Six distinct ports, free now and outside the kernel's ephemeral range (``free_port``)."""
        return cls(*(free_port() for _ in range(6)))

"""A control plane's state file (``state.json``): what lets another process find and stop it.

Rules: the file is written after every process start (so a start-up killed half-way leaves a
trail), owner-only (it holds the admin token and names processes to signal), and names the owning
process unless the control plane was started detached; a control plane whose owner is gone is an
orphan (:func:`orphaned`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from torchgate_dev.controlplane import processes
from torchgate_dev.controlplane.components import ClusterFeatures
from torchgate_dev.controlplane.processes import ManagedProcess

STATE_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class PlaneState:
    """What ``state.json`` records; ``owner`` is None for a detached control plane."""

    server: str
    token: str | None
    ca_file: Path | None
    kubeconfig: Path
    startup_seconds: float | None
    detached: bool
    owner: Mapping[str, int] | None
    owns_workdir: bool
    processes: tuple[ManagedProcess, ...]
    real_node: Mapping[str, Any] | None
    kubernetes_version: str | None = None
    """What the apiserver reported once ready (``1.37.2``); None before, or when unknown."""
    features: ClusterFeatures = field(default_factory=ClusterFeatures)
    """What it was started with beyond the defaults."""

    def to_json(self) -> dict[str, Any]:
        """JSON form for the state file."""
        return {
            "version": STATE_VERSION,
            "server": self.server,
            "token": self.token,
            "ca_file": str(self.ca_file),
            "kubeconfig": str(self.kubeconfig),
            "startup_seconds": self.startup_seconds,
            "detached": self.detached,
            # Whose lifetime bounds the processes; a dead owner makes them orphans.
            "owner": dict(self.owner) if self.owner is not None else None,
            "owns_workdir": self.owns_workdir,
            "processes": [process.to_json() for process in self.processes],
            "real_node": dict(self.real_node) if self.real_node is not None else None,
            "kubernetes_version": self.kubernetes_version,
            "features": self.features.to_json(),
        }

    @classmethod
    def from_json(cls, raw: Any) -> PlaneState:
        """Inverse of :meth:`to_json`.

        Raises:
            ValueError: An unsupported version (KeyError, TypeError or AttributeError on other
                bad input).
        """
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported state version {raw.get('version')!r}")
        seconds = raw["startup_seconds"]
        node = raw.get("real_node")
        owner = raw.get("owner")
        version = raw.get("kubernetes_version")
        return cls(
            server=str(raw["server"]),
            token=str(raw["token"]),
            ca_file=Path(raw["ca_file"]),
            kubeconfig=Path(raw["kubeconfig"]),
            startup_seconds=None if seconds is None else float(seconds),
            detached=bool(raw.get("detached", False)),
            owner=owner if isinstance(owner, Mapping) else None,
            owns_workdir=bool(raw.get("owns_workdir", False)),
            processes=tuple(ManagedProcess.from_json(item) for item in raw["processes"]),
            real_node=node if isinstance(node, Mapping) else None,
            kubernetes_version=version if isinstance(version, str) else None,
            features=ClusterFeatures.from_json(raw.get("features") or {}),
        )

    def save(self, path: Path) -> None:
        """Write the state file, owner-only."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(json.dumps(self.to_json(), indent=2).encode())


def read_raw(path: Path) -> object | None:
    """The decoded state file, or None when it is missing or not JSON."""
    try:
        raw: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw


def owner_is_alive(owner: object) -> bool:
    """Whether the process recorded as a control plane's owner still runs (unsure: True)."""
    if not isinstance(owner, Mapping):
        return True
    try:
        pid, ticks = int(owner["pid"]), int(owner["start_ticks"])
    except (KeyError, TypeError, ValueError):
        return True
    stat = processes.proc_stat(pid)
    return stat is not None and stat[1] == ticks and stat[0] != "Z"


def this_process() -> dict[str, int]:
    """This process as an owner record (PID and start time in clock ticks)."""
    stat = processes.proc_stat(os.getpid())
    return {"pid": os.getpid(), "start_ticks": stat[1] if stat else 0}


def orphaned(raw: object) -> bool:
    """Whether a decoded state file names an owner that is gone (detached ones have none)."""
    return (
        isinstance(raw, Mapping)
        and not raw.get("detached")
        and not owner_is_alive(raw.get("owner"))
    )

"""What ``dev.json`` records (the webhook's and the controller's processes), and removing DIR.

Rules: the state file is owner-only (it names processes to signal); an unreadable one is a
:class:`DevError`, never silently ignored; ``remove_files`` removes only the paths a dev cluster
writes (:meth:`~torchgate_dev.paths.DevLayout.owned`), so a mistaken ``--dir`` loses nobody's
files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from torchgate_dev.controlplane.processes import ManagedProcess
from torchgate_dev.paths import DevLayout

_STATE_VERSION: Final = 1


class DevError(Exception):
    """Something the person running ``torchgate dev`` must know.

    The first line of the message says what failed; further lines may quote the end of a log.
    """


@dataclass(frozen=True, slots=True)
class Product:
    """A torchgate process started here: the webhook or the controller."""

    process: ManagedProcess
    port: int

    def to_json(self) -> dict[str, Any]:
        """JSON form for the state file."""
        return {**self.process.to_json(), "port": self.port}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Product:
        """Inverse of :meth:`to_json`; raises KeyError/TypeError/ValueError on bad input."""
        return cls(process=ManagedProcess.from_json(raw), port=int(raw["port"]))


@dataclass(frozen=True, slots=True)
class DevState:
    """What ``dev.json`` records besides the control plane's own state file."""

    webhook: Product | None = None
    controller: Product | None = None
    controller_error: str | None = None
    images: ManagedProcess | None = None
    pools: tuple[str, ...] = ()
    populated: bool = False
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    pool_port: int = 0  # the controller's pool service (the webhook asks it for forecasts)

    def products(self) -> list[Product]:
        """The recorded product processes, controller first (it is stopped first)."""
        return [p for p in (self.controller, self.webhook) if p is not None]

    def to_json(self) -> dict[str, Any]:
        """JSON form for the state file."""
        return {
            "version": _STATE_VERSION,
            "webhook": self.webhook.to_json() if self.webhook else None,
            "controller": self.controller.to_json() if self.controller else None,
            "controller_error": self.controller_error,
            "images": self.images.to_json() if self.images else None,
            "pools": list(self.pools),
            "populated": self.populated,
            "started_at": self.started_at,
            "pool_port": self.pool_port,
        }

    @classmethod
    def load(cls, path: Path) -> DevState | None:
        """The state in ``path``; None when there is none.

        Raises:
            DevError: The file exists but cannot be read.
        """
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise DevError(f"unreadable dev state {path}: {error}") from None
        try:
            if raw.get("version") != _STATE_VERSION:
                raise ValueError(f"unsupported version {raw.get('version')!r}")
            webhook, controller = raw.get("webhook"), raw.get("controller")
            controller_error = raw.get("controller_error")
            images = raw.get("images")
            return cls(
                images=ManagedProcess.from_json(images) if images else None,
                webhook=Product.from_json(webhook) if webhook else None,
                controller=Product.from_json(controller) if controller else None,
                controller_error=str(controller_error) if controller_error else None,
                pools=tuple(str(pool) for pool in raw.get("pools", [])),
                populated=bool(raw.get("populated", False)),
                started_at=str(raw.get("started_at", "")),
                pool_port=int(raw.get("pool_port", 0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise DevError(f"unreadable dev state {path}: {error}") from None

    def save(self, path: Path) -> None:
        """Write the state file (owner-only: it names processes to signal)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.to_json(), out, indent=2)


def remove_files(layout: DevLayout, *, keep_logs: bool) -> None:
    """Remove what a dev cluster wrote in DIR (not the logs with ``keep_logs``), then DIR if empty.

    Only known paths are removed, so a mistaken ``--dir`` never loses anyone's files.
    """
    kept = set(layout.logs()) if keep_logs else set()
    for path in layout.owned():
        if path in kept:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    with contextlib.suppress(OSError):
        layout.root.rmdir()  # only when empty

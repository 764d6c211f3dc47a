"""Kubeconfigs: the admin one a control plane writes, and reading the current context of any.

Pure: a parsed kubeconfig in, a dict or a :class:`KubeconfigTarget` out.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from torchgate_dev.controlplane.errors import ControlPlaneError

ADMIN_USER: Final = "torchgate-admin"


def admin_kubeconfig(server: str, ca_file: Path, token: str) -> dict[str, Any]:
    """A kubeconfig for the admin token user, trusting ``ca_file``."""
    name = "torchgate-local"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": ADMIN_USER}}],
        "current-context": name,
    }


@dataclass(frozen=True, slots=True)
class KubeconfigTarget:
    """What the current context of a kubeconfig points at."""

    server: str
    ca_file: Path | None
    ca_data: bytes | None
    token: str | None


def read_kubeconfig(raw: object, *, base_dir: Path) -> KubeconfigTarget:
    """The server, CA and token of the current context of a parsed kubeconfig.

    Raises:
        ControlPlaneError: The kubeconfig lacks a usable current context.
    """

    def section(kind: str, name: object) -> Mapping[str, Any]:
        entries = raw.get(kind + "s") if isinstance(raw, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping) and entry.get("name") == name:
                body = entry.get(kind)
                if isinstance(body, Mapping):
                    return body
        raise ControlPlaneError(f"kubeconfig: no {kind} named {name!r} (in {kind}s[])")

    current = raw.get("current-context") if isinstance(raw, Mapping) else None
    if not isinstance(current, str) or not current:
        raise ControlPlaneError("kubeconfig: current-context is not set")
    context = section("context", current)
    cluster = section("cluster", context.get("cluster"))
    user = section("user", context.get("user")) if context.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise ControlPlaneError(
            f"kubeconfig: cluster {context.get('cluster')!r} has no https server"
        )
    ca_path = cluster.get("certificate-authority")
    ca_data = cluster.get("certificate-authority-data")
    token = user.get("token")
    return KubeconfigTarget(
        server=server,
        ca_file=(base_dir / ca_path) if isinstance(ca_path, str) and ca_path else None,
        ca_data=base64.b64decode(ca_data) if isinstance(ca_data, str) and ca_data else None,
        token=token if isinstance(token, str) and token else None,
    )

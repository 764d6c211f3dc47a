"""The control plane's real node: claiming this machine's node, starting it, tearing it down.

The node's own processes and configuration are :mod:`torchgate_dev.node.runtime`'s; this module
wires them into a control plane. Rules:

- One real node per machine: it is *claimed* (a claim file in the node cache names the work dir);
  a claim whose control plane no longer runs for anyone is taken over after its leftovers are
  torn down.
- The processes start in dependency order (registry and containerd, CoreDNS, then the kubelet and
  kube-proxy), each awaited before the next, and the node counts as started when it is Ready.
- Teardown runs twice: after the kubelet stops (so it does not restart what is torn down) and
  after containerd stops (shims, mounts, network namespaces and the bridge outlive it).
- The node's three identities (kubelet, CoreDNS, kube-proxy) authenticate with static tokens
  made per control plane (:meth:`RealNode.token_lines`).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from torchgate_dev.controlplane.binaries import Binaries, BinariesUnavailable, ensure_coredns
from torchgate_dev.controlplane.errors import ControlPlaneError
from torchgate_dev.controlplane.layout import Layout
from torchgate_dev.controlplane.supervision import http_ok, node_ready
from torchgate_dev.node import config as node_config
from torchgate_dev.node import runtime as node_runtime
from torchgate_dev.node.images import node_cache
from torchgate_dev.node.registry import RegistryClient, RegistryError
from torchgate_dev.ports import free_port

REAL_NODE_NAME: Final = "real-0"


@dataclass(frozen=True, slots=True)
class Hooks:
    """What the node needs from its control plane while it starts."""

    spawn: Callable[[str, Sequence[str]], None]
    """Start a process of the control plane (it is stopped with the control plane)."""
    wait_until: Callable[[Mapping[str, Callable[[], bool]]], None]
    """Wait until every named check passes (raises ControlPlaneError on timeout or a crash)."""
    record: Callable[[], None]
    """Write the control plane's state file (so a killed start-up leaves a trail to clean)."""
    apply: Callable[[str], object]
    """``kubectl apply`` a YAML stream."""


def _tokens() -> tuple[str, str, str]:
    return (secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(32))


@dataclass(slots=True)
class RealNode:
    """The real node of one control plane; ``since`` is set once this machine's node is claimed."""

    name: str = REAL_NODE_NAME
    labels: dict[str, str] = field(default_factory=dict)
    tokens: tuple[str, str, str] = field(default_factory=_tokens, repr=False)
    """Static tokens of the kubelet, CoreDNS and kube-proxy."""
    since: float | None = None
    registry: str | None = None
    """``127.0.0.1:<port>`` of the node's image registry, once chosen."""
    kube_proxy: Path | None = None

    # ---------------------------------------------------------------- pure

    def token_lines(self) -> list[str]:
        """The node's lines of the apiserver's static token file (``token,user,uid[,groups]``)."""
        node_token, dns_token, proxy_token = self.tokens
        user = node_config.node_user(self.name)
        proxy = node_config.KUBE_PROXY_USER
        return [
            f'{node_token},{user},{user},"system:nodes"',
            f"{dns_token},{node_config.DNS_USER},{node_config.DNS_USER}",
            f"{proxy_token},{proxy},{proxy}",
        ]

    def to_json(self) -> dict[str, Any] | None:
        """The state file's ``real_node`` entry; None until the node was claimed."""
        if self.since is None:
            return None
        return {
            "name": self.name,
            "since": self.since,
            "registry": self.registry,
            "kube_proxy": str(self.kube_proxy) if self.kube_proxy else None,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RealNode:
        """Inverse of :meth:`to_json`; raises KeyError/TypeError/ValueError on bad input."""
        return cls(
            name=str(raw["name"]),
            since=float(raw["since"]),
            registry=str(raw["registry"]) if raw.get("registry") else None,
            kube_proxy=Path(raw["kube_proxy"]) if raw.get("kube_proxy") else None,
        )

    # ---------------------------------------------------------------- start

    @staticmethod
    def find_binaries(binaries: Binaries) -> node_runtime.NodeBinaries:
        """The node's executables (kubelet and kube-proxy from ``binaries``, CoreDNS built).

        Raises:
            ControlPlaneError: One is missing or cannot be built.
        """
        try:
            return node_runtime.find_binaries(
                binaries.kubelet, binaries.kube_proxy, ensure_coredns()
            )
        except (node_runtime.NodeUnavailable, BinariesUnavailable) as error:
            raise ControlPlaneError(f"real node: {error}") from error

    def claim(
        self,
        layout: Layout,
        node_binaries: node_runtime.NodeBinaries,
        *,
        owner_running: Callable[[Path], bool],
        record: Callable[[], None],
    ) -> None:
        """Take this machine's real node, clear what a dead earlier owner left, make the bridge.

        Args:
            layout: The claiming control plane's files.
            node_binaries: The node's executables.
            owner_running: Whether the control plane in a work dir still runs for someone (an
                orphan is stopped by this call and answers False).
            record: Writes the control plane's state file (called once the claim is made).

        Raises:
            ControlPlaneError: Another running control plane holds the node, or the bridge
                cannot be made.
        """
        cache = node_cache()
        network = node_config.NodeNetwork()
        since = time.time()
        try:
            stale = node_runtime.claim(cache, layout.root, since, owner_running)
        except node_runtime.NodeUnavailable as error:
            raise ControlPlaneError(f"real node: {error}") from error
        self.since = since
        self.kube_proxy = node_binaries.kube_proxy
        record()
        if stale is not None:  # its owner is gone; what its node left must go first
            node_runtime.teardown(
                node_config.NodePaths(work=Layout(stale.workdir).node, cache=cache),
                network,
                since=stale.since,
                ctr=node_binaries.ctr,
                kube_proxy=node_binaries.kube_proxy,
            )
        try:
            node_runtime.ensure_bridge(network)
        except node_runtime.NodeUnavailable as error:
            raise ControlPlaneError(f"real node: {error}") from error

    def start(
        self,
        node_binaries: node_runtime.NodeBinaries,
        layout: Layout,
        *,
        server: str,
        token: str | None,
        hooks: Hooks,
    ) -> None:
        """Start the node's processes in order and wait until the node is Ready.

        Raises:
            ControlPlaneError: A process did not come up (its log is quoted) or the node's
                configuration could not be prepared.
        """
        cache = node_cache()
        paths = node_config.NodePaths(work=layout.node, cache=cache)
        network = node_config.NodeNetwork()
        ports = node_runtime.NodePorts(
            registry=free_port(),
            kubelet=free_port(),
            kube_proxy_healthz=free_port(),
            kube_proxy_metrics=free_port(),
            kubelet_healthz=free_port(),
            dns_health=free_port(),
            dns_ready=free_port(),
        )
        registry = f"127.0.0.1:{ports.registry}"
        self.registry = registry
        hooks.record()
        node_token, dns_token, proxy_token = self.tokens
        endpoints = node_runtime.NodeEndpoints(
            server=server,
            ca_file=layout.ca_cert,
            node_token=node_token,
            dns_token=dns_token,
            proxy_token=proxy_token,
        )
        try:
            node_runtime.prepare(
                paths,
                network,
                node_binaries,
                endpoints,
                ports,
                node_name=self.name,
                registry_storage=cache / "registry",
            )
        except node_runtime.NodeUnavailable as error:
            raise ControlPlaneError(f"real node: {error}") from error
        hooks.apply(yaml.safe_dump_all(node_config.dns_cluster_role()))
        node_runtime.collect_registry_garbage(node_binaries, paths)
        hooks.spawn("registry", node_runtime.registry_command(node_binaries, paths))
        hooks.spawn("containerd", node_runtime.containerd_command(node_binaries, paths))
        hooks.wait_until(
            {
                "registry /v2/": lambda: http_ok(f"http://{registry}/v2/"),
                "containerd": lambda: node_runtime.containerd_ready(node_binaries, paths),
            }
        )
        node_runtime.ensure_sandbox_image(node_binaries, paths, registry)
        with contextlib.suppress(RegistryError):
            node_runtime.prune_images(
                node_binaries, paths, RegistryClient(registry).tagged_digests()
            )
        hooks.spawn("coredns", node_runtime.coredns_command(node_binaries, paths))
        hooks.wait_until(
            {"coredns /ready": lambda: http_ok(f"http://127.0.0.1:{ports.dns_ready}/ready")}
        )
        hooks.spawn(
            "kubelet",
            node_runtime.kubelet_command(node_binaries, paths, network, self.name, self.labels),
        )
        hooks.spawn("kube-proxy", node_runtime.kube_proxy_command(node_binaries, paths))
        node_url = f"{server}/api/v1/nodes/{self.name}"
        api = ssl.create_default_context(cafile=str(layout.ca_cert))
        hooks.wait_until(
            {
                f"node {self.name} Ready": lambda: node_ready(node_url, api, token),
                "kube-proxy /healthz": lambda: http_ok(
                    f"http://127.0.0.1:{ports.kube_proxy_healthz}/healthz"
                ),
            }
        )

    # ---------------------------------------------------------------- stop

    def teardown(self, workdir: Path) -> Callable[[], None] | None:
        """The node's teardown, if it was claimed (a start was attempted); else None."""
        if self.since is None:
            return None
        paths = node_config.NodePaths(work=Layout(workdir).node, cache=node_cache())
        since = self.since
        ctr = shutil.which("ctr")
        kube_proxy = self.kube_proxy

        def teardown() -> None:
            node_runtime.teardown(
                paths,
                node_config.NodeNetwork(),
                since=since,
                ctr=Path(ctr) if ctr else None,
                kube_proxy=kube_proxy,
            )

        return teardown

    def release(self, workdir: Path) -> None:
        """Give this machine's node back (after the teardown)."""
        node_runtime.release_claim(node_cache(), workdir)
        self.since = None

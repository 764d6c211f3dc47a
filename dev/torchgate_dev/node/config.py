"""What the local real node's processes are told: containerd, CNI, kubelet and CoreDNS settings.

Why a real node at all: kwok shows pods ``Running`` but runs nothing, so the env contract, DNS of
the rendezvous Service, release of GPUs and whole-gang restarts can only be seen in a real
container. One kubelet on this machine, with containerd and runc from Debian, runs them for real.

The rules these settings keep (each is a test in ``tests/unit/torchgate_dev/node/test_config.py``):

- **Nothing leaves this machine.** Pods sit on one Linux bridge with a private subnet, no masquerade
  and no default route: a pod reaches its peers, the node address (where cluster DNS and the
  kubelet listen) and the Service range, nothing else.
- **Nothing outside the work and cache folders is touched.** containerd, the kubelet and CNI get
  their own root, state, socket and configuration folders; images live in the cache so a second
  run pulls nothing.
- **Images come from the loopback registry.** ``docker.io`` and ``registry.torchgate.local`` both
  resolve to it (containerd's ``hosts.toml`` mirrors), so a manifest that says
  ``imagePullPolicy: Always`` with a ``docker.io/...`` name works as written, and the pod sandbox
  (``pause``) image is ours.
- **The kubelet runs on this machine's cgroup v1 hierarchy** (``failCgroupV1: false``, the cgroupfs
  driver that containerd 1.6 uses: containerd 1.x has no ``RuntimeConfig`` RPC, so the kubelet
  falls back to its own ``cgroupDriver`` setting, which Kubernetes 1.36 and 1.37 still allow),
  never evicts for disk, and never garbage-collects images (the torch images are expensive to pull
  again).
- **Least privilege on the API**: the kubelet is ``system:node:<name>`` (Node authorizer), CoreDNS
  has its own identity with read-only access to what it serves.

Everything here is pure: values in, documents out. ``runtime.py`` writes and runs them.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

REGISTRY_ALIAS: Final = "registry.torchgate.local"
"""A registry name of our own, served by the loopback registry (the ``pause`` image lives here)."""

EXAMPLE_REGISTRY: Final = "registry.example.com"
"""README's install steps push and name ``registry.example.com/torchgate``; on the local node it is
the loopback registry too, so those steps run as written (``example.com`` is reserved for
documentation: no real registry is shadowed)."""
MIRRORED_REGISTRIES: Final = ("docker.io", REGISTRY_ALIAS, EXAMPLE_REGISTRY)
SANDBOX_IMAGE: Final = f"{REGISTRY_ALIAS}/pause:3.10"
CLUSTER_DOMAIN: Final = "cluster.local"
REAL_NODE_LABEL: Final = "torchgate.io/real-node"
DNS_USER: Final = "torchgate-local-dns"
KUBE_PROXY_USER: Final = "system:kube-proxy"
"""The user the built-in ClusterRoleBinding ``system:node-proxier`` grants kube-proxy's rights."""
APISERVER_KUBELET_CLIENT: Final = "kube-apiserver-kubelet-client"


@dataclass(frozen=True, slots=True)
class NodeNetwork:
    """The pod network of the real node: one bridge, one subnet, the node's address on it."""

    bridge: str = "torchgate0"
    subnet: str = "10.88.0.0/24"
    service_cidr: str = "10.96.0.0/16"

    @property
    def gateway(self) -> str:
        """The bridge's own address: the node IP, cluster DNS and the pods' only next hop."""
        return str(next(ipaddress.IPv4Network(self.subnet).hosts()))

    @property
    def gateway_cidr(self) -> str:
        """The gateway with the subnet's prefix length, as ``ip addr add`` takes it."""
        return f"{self.gateway}/{ipaddress.IPv4Network(self.subnet).prefixlen}"


@dataclass(frozen=True, slots=True)
class NodePaths:
    """Where one real node keeps its files: ``work`` is per run, ``cache`` survives runs.

    containerd's state (its socket, and its shims' sockets below it) lives in ``run``, a short
    fixed path: a Unix socket path has at most 107 bytes, which a pytest temp dir exceeds, and
    there is one real node per machine anyway.
    """

    work: Path
    cache: Path
    run: Path = Path("/run/torchgate-node")

    @property
    def containerd_root(self) -> Path:
        """Containerd's content store and snapshots: the pulled images (kept between runs)."""
        return self.cache / "containerd"

    @property
    def containerd_state(self) -> Path:
        """Containerd's runtime state (sockets of shims, mounts of running containers)."""
        return self.run / "containerd"

    @property
    def containerd_socket(self) -> Path:
        """The CRI and containerd API socket."""
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        """Containerd's config.toml."""
        return self.work / "containerd.toml"

    @property
    def registry_hosts(self) -> Path:
        """Containerd's ``config_path``: one ``<registry>/hosts.toml`` per mirrored registry."""
        return self.work / "registry-hosts"

    @property
    def cni_config(self) -> Path:
        """The CNI configuration folder (one conflist)."""
        return self.work / "cni"

    @property
    def cni_ipam(self) -> Path:
        """host-local's allocation records."""
        return self.work / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir`` (pod volumes are mounted below it)."""
        return self.work / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        """The KubeletConfiguration file."""
        return self.work / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        """The kubelet's kubeconfig (identity ``system:node:<name>``)."""
        return self.work / "kubelet.kubeconfig"

    @property
    def resolv_conf(self) -> Path:
        """The host resolv.conf the kubelet reads: empty, so no host search path leaks in."""
        return self.work / "resolv.conf"

    @property
    def corefile(self) -> Path:
        """CoreDNS's configuration."""
        return self.work / "Corefile"

    @property
    def dns_kubeconfig(self) -> Path:
        """CoreDNS's kubeconfig (identity :data:`DNS_USER`)."""
        return self.work / "coredns.kubeconfig"

    @property
    def registry_config(self) -> Path:
        """The loopback registry's configuration."""
        return self.work / "registry.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        """The KubeProxyConfiguration file."""
        return self.work / "kube-proxy.yaml"

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        """kube-proxy's kubeconfig (identity ``system:kube-proxy``)."""
        return self.work / "kube-proxy.kubeconfig"

    @property
    def logs(self) -> Path:
        """One log file per process."""
        return self.work / "logs"


def containerd_config(paths: NodePaths, *, cni_bin_dir: Path, runc: Path) -> str:
    """Containerd 1.6's config.toml (format version 2) for the CRI plugin and nothing else.

    The snapshotters that need kernel features or tools this machine lacks are disabled so
    containerd starts quietly; the runc shim uses cgroupfs, like the kubelet.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f"root = {_toml(paths.containerd_root)}",
        f"state = {_toml(paths.containerd_state)}",
        "disabled_plugins = ["
        + ", ".join(
            _toml(f"io.containerd.snapshotter.v1.{name}")
            for name in ("aufs", "btrfs", "devmapper", "zfs")
        )
        + "]",
        "",
        "[grpc]",
        f"  address = {_toml(paths.containerd_socket)}",
        "",
        f"[{cri}]",
        f"  sandbox_image = {_toml(SANDBOX_IMAGE)}",
        "  enable_unprivileged_ports = false",
        # This machine withholds CAP_SYS_RESOURCE even from root, so a negative oom_score_adj
        # (-998 for sandboxes, -997 for Guaranteed pods) fails the container's start; containerd
        # then keeps every score at or above its own (0).
        "  restrict_oom_score_adj = true",
        "",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        "",
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        "",
        f"[{cri}.containerd.runtimes.runc.options]",
        f"  BinaryName = {_toml(runc)}",
        "  SystemdCgroup = false",
        "",
        f"[{cri}.cni]",
        f"  bin_dir = {_toml(cni_bin_dir)}",
        f"  conf_dir = {_toml(paths.cni_config)}",
        "  max_conf_num = 1",
        "",
        f"[{cri}.registry]",
        f"  config_path = {_toml(paths.registry_hosts)}",
        "",
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {_toml(paths.containerd_root / 'opt')}",
        "",
    ]
    return "\n".join(lines)


def registry_hosts_toml(registry: str, mirror: str) -> str:
    """``hosts.toml`` sending pulls of ``registry`` to the plain-HTTP ``mirror`` (host:port).

    ``server`` stays the real registry, as containerd expects; the mirror is tried first and,
    on this machine, it is the only one that answers.
    """
    server = "https://registry-1.docker.io" if registry == "docker.io" else f"https://{registry}"
    return "\n".join(
        [
            f"server = {_toml(server)}",
            "",
            f"[host.{_toml('http://' + mirror)}]",
            '  capabilities = ["pull", "resolve"]',
            "",
        ]
    )


def cni_conflist(network: NodeNetwork, paths: NodePaths) -> dict[str, Any]:
    """The bridge network: no masquerade, no default route, a route to the Service range only."""
    return {
        "cniVersion": "1.0.0",
        "name": "torchgate",
        "plugins": [
            {
                "type": "bridge",
                "bridge": network.bridge,
                "isGateway": True,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": network.subnet, "gateway": network.gateway}]],
                    "routes": [{"dst": network.service_cidr}],
                    "dataDir": str(paths.cni_ipam),
                },
            }
        ],
    }


def kubelet_configuration(
    network: NodeNetwork,
    paths: NodePaths,
    *,
    client_ca: Path,
    port: int,
    healthz_port: int,
) -> dict[str, Any]:
    """The KubeletConfiguration (``kubelet.config.k8s.io/v1beta1``) of the real node."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This machine mounts cgroup v1 (with a v2 mount beside it); 1.35+ refuses v1 by default.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": network.gateway,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [network.gateway],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(paths.resolv_conf),
        "failSwapOn": False,
        "serializeImagePulls": False,
        # Disk is shared with the developer's files: never evict pods or delete images for it.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 110,
        "registerNode": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "shutdownGracePeriod": "0s",
        # The default (-999) cannot be set without CAP_SYS_RESOURCE, which this machine withholds.
        "oomScoreAdj": 0,
    }


def kube_proxy_configuration(
    network: NodeNetwork,
    kubeconfig: Path,
    node_name: str,
    *,
    healthz_port: int,
    metrics_port: int,
) -> dict[str, Any]:
    """kube-proxy in iptables mode, changing no kernel setting and opening nothing outside.

    It routes ClusterIP Services on this machine: pods reach the apiserver through the
    ``kubernetes`` Service and the apiserver reaches in-cluster webhooks through theirs. The
    conntrack sizes and timeouts are left as the kernel has them (0 = do not touch), NodePorts
    listen only on the node address, never on loopback (no ``route_localnet``) or another
    interface.
    """
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": network.subnet,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{network.gateway}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def corefile(network: NodeNetwork, paths: NodePaths, *, health_port: int, ready_port: int) -> str:
    """CoreDNS answering cluster names on the node address; nothing is forwarded anywhere.

    The kubeconfig's path is quoted: the dev cluster's DIR may hold spaces (``--dir "my dev"``),
    which would otherwise split it into two arguments and stop CoreDNS at start-up.

    No ``cache`` plugin: a Worker that asks for ``<job>-master-0`` before its Service exists must
    not be told "no such name" for the next half minute.
    """
    return "\n".join(
        [
            ".:53 {",
            f"    bind {network.gateway}",
            "    errors",
            f"    health 127.0.0.1:{health_port}",
            f"    ready 127.0.0.1:{ready_port}",
            f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{",
            f"        kubeconfig {_corefile_word(paths.dns_kubeconfig)}",
            "        pods insecure",
            "        fallthrough in-addr.arpa ip6.arpa",
            "    }",
            "}",
            "",
        ]
    )


def dns_cluster_role() -> list[dict[str, Any]]:
    """The ClusterRole and binding CoreDNS's ``kubernetes`` plugin needs, read-only."""
    name = DNS_USER
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "namespaces", "pods"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
        },
    ]


def token_kubeconfig(server: str, ca_file: Path, user: str, token: str) -> dict[str, Any]:
    """A kubeconfig for one token identity."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }


def node_user(node_name: str) -> str:
    """The kubelet's user name, which the Node authorizer recognises."""
    return f"system:node:{node_name}"


def _toml(value: object) -> str:
    # A JSON string is a valid TOML basic string for the paths and names used here.
    return json.dumps(str(value))


def _corefile_word(value: object) -> str:
    """``value`` as one Corefile token: in double quotes, a double quote in it escaped."""
    return '"' + str(value).replace('"', '\\"') + '"'

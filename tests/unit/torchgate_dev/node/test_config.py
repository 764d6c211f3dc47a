"""The real node's settings keep the rules in ``torchgate_dev.node.config``'s docstring."""

from __future__ import annotations

import ipaddress
import shlex
import tomllib
from pathlib import Path

import pytest

from torchgate_dev.node import config
from torchgate_dev.node.config import NodeNetwork, NodePaths

PATHS = NodePaths(work=Path("/run/work"), cache=Path("/cache/node"))
NETWORK = NodeNetwork()


def containerd() -> dict[str, object]:
    return tomllib.loads(
        config.containerd_config(PATHS, cni_bin_dir=Path("/usr/lib/cni"), runc=Path("/sbin/runc"))
    )


def cri(parsed: dict[str, object]) -> dict[str, object]:
    plugins = parsed["plugins"]
    assert isinstance(plugins, dict)
    found = plugins["io.containerd.grpc.v1.cri"]
    assert isinstance(found, dict)
    return found


def test_containerd_keeps_images_in_the_cache_and_state_in_the_work_dir() -> None:
    parsed = containerd()

    assert parsed["root"] == "/cache/node/containerd"
    assert parsed["state"] == "/run/torchgate-node/containerd"
    assert parsed["grpc"] == {"address": "/run/torchgate-node/containerd/containerd.sock"}
    assert len(str(PATHS.containerd_socket)) < 60, "shim sockets below it add ~60 bytes"


def test_containerd_uses_cgroupfs_our_sandbox_image_and_the_mirror_config() -> None:
    found = cri(containerd())

    runc = found["containerd"]["runtimes"]["runc"]  # type: ignore[index]
    assert runc["options"] == {"BinaryName": "/sbin/runc", "SystemdCgroup": False}
    assert found["sandbox_image"] == config.SANDBOX_IMAGE
    assert found["registry"] == {"config_path": "/run/work/registry-hosts"}
    assert found["cni"]["conf_dir"] == "/run/work/cni"  # type: ignore[index]
    # No negative oom_score_adj: this machine withholds CAP_SYS_RESOURCE.
    assert found["restrict_oom_score_adj"] is True


@pytest.mark.parametrize(
    ("registry", "server"),
    [
        ("docker.io", "https://registry-1.docker.io"),
        (config.REGISTRY_ALIAS, f"https://{config.REGISTRY_ALIAS}"),
    ],
)
def test_every_mirrored_registry_pulls_from_the_loopback_registry_over_http(
    registry: str, server: str
) -> None:
    parsed = tomllib.loads(config.registry_hosts_toml(registry, "127.0.0.1:5000"))

    assert parsed["server"] == server
    assert parsed["host"] == {"http://127.0.0.1:5000": {"capabilities": ["pull", "resolve"]}}


def test_pod_network_has_no_masquerade_and_no_default_route() -> None:
    (bridge,) = config.cni_conflist(NETWORK, PATHS)["plugins"]

    assert bridge["ipMasq"] is False
    assert bridge["isDefaultGateway"] is False
    routes = [ipaddress.ip_network(r["dst"]) for r in bridge["ipam"]["routes"]]
    assert routes == [ipaddress.ip_network(NETWORK.service_cidr)]
    assert all(not route.is_global and route.prefixlen > 0 for route in routes)
    (subnet,) = (r["subnet"] for r in bridge["ipam"]["ranges"][0])
    assert ipaddress.ip_network(subnet).is_private


def test_the_node_address_is_the_bridge_gateway_and_serves_dns() -> None:
    kubelet = config.kubelet_configuration(
        NETWORK, PATHS, client_ca=Path("/ca.crt"), port=10250, healthz_port=10248
    )

    assert NETWORK.gateway == "10.88.0.1"
    assert NETWORK.gateway_cidr == "10.88.0.1/24"
    assert kubelet["address"] == NETWORK.gateway
    assert kubelet["clusterDNS"] == [NETWORK.gateway]
    assert f"bind {NETWORK.gateway}" in config.corefile(NETWORK, PATHS, health_port=1, ready_port=2)


def test_kubelet_runs_on_cgroup_v1_authenticates_callers_and_never_evicts_for_disk() -> None:
    kubelet = config.kubelet_configuration(
        NETWORK, PATHS, client_ca=Path("/ca.crt"), port=10250, healthz_port=10248
    )

    assert kubelet["failCgroupV1"] is False
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["authentication"]["anonymous"] == {"enabled": False}
    assert kubelet["authorization"] == {"mode": "Webhook"}
    assert kubelet["readOnlyPort"] == 0
    assert kubelet["imageGCHighThresholdPercent"] == 100
    assert all(
        value == "0%" for key, value in kubelet["evictionHard"].items() if key != "memory.available"
    )


def test_dns_answers_cluster_names_only_and_caches_no_denial() -> None:
    corefile = config.corefile(NETWORK, PATHS, health_port=1, ready_port=2)

    assert "forward" not in corefile
    assert "cache" not in corefile
    assert f'kubeconfig "{PATHS.dns_kubeconfig}"' in corefile


def test_dns_reads_its_kubeconfig_from_a_dir_with_spaces_as_one_argument() -> None:
    paths = NodePaths(work=Path("/tmp/my dev/node"), cache=Path("/cache/node"))
    corefile = config.corefile(NETWORK, paths, health_port=1, ready_port=2)

    # CoreDNS splits a Corefile line into words as a POSIX shell does for double quotes.
    lines = [shlex.split(line) for line in corefile.splitlines()]
    assert ["kubeconfig", "/tmp/my dev/node/coredns.kubeconfig"] in lines


def test_dns_identity_may_only_read() -> None:
    role, binding = config.dns_cluster_role()

    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"list", "watch"}
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": config.DNS_USER}
    ]


def test_the_kubelet_identity_is_one_the_node_authorizer_knows() -> None:
    assert config.node_user("real-0") == "system:node:real-0"


def test_kube_proxy_touches_no_kernel_setting_and_opens_node_ports_on_the_node_address_only() -> (
    None
):
    proxy = config.kube_proxy_configuration(
        NETWORK, Path("/k"), "real-0", healthz_port=1, metrics_port=2
    )

    assert proxy["mode"] == "iptables"
    assert proxy["nodePortAddresses"] == [f"{NETWORK.gateway}/32"]
    assert proxy["iptables"]["localhostNodePorts"] is False
    assert proxy["conntrack"]["maxPerCore"] == 0
    assert proxy["healthzBindAddress"].startswith("127.0.0.1:")
    assert proxy["metricsBindAddress"].startswith("127.0.0.1:")
    assert proxy["clusterCIDR"] == NETWORK.subnet

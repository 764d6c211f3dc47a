"""Configuration files for each component (torchgate_dev.controlplane.components)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.components import (
    configuration_files,
    controller_manager_command,
    kwok_command,
)
from torchgate_dev.controlplane.kubeconfig import read_kubeconfig
from torchgate_dev.controlplane.layout import Layout, Ports

PORTS = Ports(2379, 2380, 6443, 10257, 10259, 10247)


def binaries_in(folder: Path) -> Binaries:
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok")
    return Binaries(
        *(folder / name for name in names),
        kubelet=folder / "kubelet",
        kube_proxy=folder / "kube-proxy",
        stages_dir=folder / "stages",
    )


@pytest.mark.parametrize("audit", [False, True], ids=["no-audit", "audit"])
def test_configuration_files_give_each_component_its_file(tmp_path: Path, audit: bool) -> None:
    layout = Layout(tmp_path)

    files = configuration_files(
        layout,
        server="https://127.0.0.1:6443",
        admin_token="admin-token",
        node_tokens=["node-token,system:node:n,system:node:n"],
        audit=audit,
        stages="kind: Stage\n",
    )

    expected = {layout.tokens, layout.kubeconfig, layout.scheduler_config, layout.kwok_config}
    assert set(files) == expected | ({layout.audit_policy} if audit else set())
    assert files[layout.tokens].splitlines() == [
        'admin-token,torchgate-admin,torchgate-admin,"system:masters"',
        "node-token,system:node:n,system:node:n",
    ]
    target = read_kubeconfig(yaml.safe_load(files[layout.kubeconfig]), base_dir=tmp_path)
    assert (target.server, target.token, target.ca_file) == (
        "https://127.0.0.1:6443",
        "admin-token",
        layout.ca_cert,
    )
    scheduler = yaml.safe_load(files[layout.scheduler_config])
    assert scheduler["clientConnection"]["kubeconfig"] == str(layout.kubeconfig)
    kinds = [doc["kind"] for doc in yaml.safe_load_all(files[layout.kwok_config])]
    assert kinds == ["Stage", "KwokConfiguration"]


def test_the_controller_manager_runs_what_a_cluster_does_to_pods_on_sick_nodes(
    tmp_path: Path,
) -> None:
    command = controller_manager_command(binaries_in(tmp_path), Layout(tmp_path), PORTS)
    controllers = next(a for a in command if a.startswith("--controllers=")).split("=")[1]
    assert {
        "node-lifecycle-controller",
        "taint-eviction-controller",
        "pod-garbage-collector-controller",
    } <= set(controllers.split(","))


def test_kwok_forgets_a_node_whose_heartbeat_is_stopped(tmp_path: Path) -> None:
    command = kwok_command(binaries_in(tmp_path), Layout(tmp_path), PORTS)
    assert "--manage-nodes-with-label-selector=torchgate.io/fake-heartbeat!=stopped" in command

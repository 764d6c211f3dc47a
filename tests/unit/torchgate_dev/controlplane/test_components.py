"""Configuration files for each component (torchgate_dev.controlplane.components)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.torchgate_dev.controlplane.test_binaries import build_dir
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.components import (
    CONTROLLERS,
    ClusterFeatures,
    NodeLeases,
    apiserver_command,
    configuration_files,
    controller_manager_command,
    kwok_command,
    parse_feature_gates,
    parse_runtime_config,
    scheduler_command,
)
from torchgate_dev.controlplane.kubeconfig import read_kubeconfig
from torchgate_dev.controlplane.layout import Layout, Ports


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


# ----------------------------------------------------------------------------- features


def test_node_leases_set_kwok_renewals_and_the_node_monitor_grace_period(tmp_path: Path) -> None:
    binaries = Binaries.in_directory(build_dir(tmp_path / "bin"))
    layout = Layout(tmp_path / "plane")
    ports = Ports(
        etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4, scheduler=5, kwok=6
    )

    default_kwok = kwok_command(binaries, layout, ports)
    default_kcm = controller_manager_command(binaries, layout, ports)
    scale_kwok = kwok_command(binaries, layout, ports, NodeLeases(duration_seconds=160))
    scale_kcm = controller_manager_command(
        binaries, layout, ports, leases=NodeLeases(duration_seconds=160)
    )

    assert flag(default_kwok, "node-lease-duration-seconds") == ["40"]
    assert flag(default_kcm, "node-monitor-grace-period") == ["50s"]
    assert flag(scale_kwok, "node-lease-duration-seconds") == ["160"]
    assert flag(scale_kcm, "node-monitor-grace-period") == ["200s"]


def test_a_node_lease_kwok_cannot_renew_each_second_is_refused() -> None:
    with pytest.raises(ValueError, match="under 4 s"):
        NodeLeases(duration_seconds=3)


def command_lines(features: ClusterFeatures, tmp_path: Path) -> dict[str, list[str]]:
    binaries = Binaries.in_directory(build_dir(tmp_path / "bin"))
    layout = Layout(tmp_path / "plane")
    ports = Ports(
        etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4, scheduler=5, kwok=6
    )
    return {
        "apiserver": apiserver_command(binaries, layout, ports, features=features),
        "kcm": controller_manager_command(binaries, layout, ports, features=features),
        "scheduler": scheduler_command(binaries, layout, ports, features=features),
    }


def flag(argv: list[str], name: str) -> list[str]:
    return [arg.partition("=")[2] for arg in argv if arg.startswith(f"--{name}=")]


def test_feature_gates_reach_apiserver_kcm_and_scheduler_alike(tmp_path: Path) -> None:
    features = ClusterFeatures(feature_gates={"GenericWorkload": True, "DRADeviceTaints": False})

    lines = command_lines(features, tmp_path)

    for argv in lines.values():
        assert flag(argv, "feature-gates") == ["DRADeviceTaints=false,GenericWorkload=true"]


def test_runtime_config_reaches_the_apiserver_only(tmp_path: Path) -> None:
    features = ClusterFeatures(runtime_config={"scheduling.k8s.io/v1beta1": "true"})

    lines = command_lines(features, tmp_path)

    assert flag(lines["apiserver"], "runtime-config") == ["scheduling.k8s.io/v1beta1=true"]
    assert flag(lines["kcm"], "runtime-config") == flag(lines["scheduler"], "runtime-config") == []


def test_extra_controllers_join_torchgates_set_once(tmp_path: Path) -> None:
    # resourceclaim-controller is in torchgate's set (DRA claims from templates).
    features = ClusterFeatures(
        controllers=("podgroup-protection-controller", "namespace-controller")
    )

    (controllers,) = flag(command_lines(features, tmp_path)["kcm"], "controllers")

    assert controllers.split(",") == [*CONTROLLERS, "podgroup-protection-controller"]


def test_without_features_no_gate_or_runtime_config_is_passed(tmp_path: Path) -> None:
    lines = command_lines(ClusterFeatures(), tmp_path)

    for argv in lines.values():
        assert flag(argv, "feature-gates") == flag(argv, "runtime-config") == []
    assert not ClusterFeatures()


@pytest.mark.parametrize(
    ("text", "gates"),
    [
        ("GenericWorkload=true", {"GenericWorkload": True}),
        (" A=TRUE, B=false ,", {"A": True, "B": False}),
        ("", {}),
    ],
)
def test_feature_gates_parse_as_the_components_write_them(
    text: str, gates: dict[str, bool]
) -> None:
    assert parse_feature_gates(text) == gates


@pytest.mark.parametrize(
    "text", ["GenericWorkload", "GenericWorkload=yes", "generic-workload=true"]
)
def test_malformed_feature_gates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Name=true or Name=false"):
        parse_feature_gates(text)


def test_runtime_config_parses_and_a_bare_api_means_true() -> None:
    assert parse_runtime_config("scheduling.k8s.io/v1beta1,resource.k8s.io/v1beta2=false") == {
        "scheduling.k8s.io/v1beta1": "true",
        "resource.k8s.io/v1beta2": "false",
    }


@pytest.mark.parametrize("text", ["Scheduling/V1=true", "a/b/c=true", "api/all="])
def test_malformed_runtime_config_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="group/version"):
        parse_runtime_config(text)


@pytest.mark.parametrize(
    "features",
    [
        {"feature_gates": {"not a gate": True}},
        {"runtime_config": {"scheduling.k8s.io/v1beta1": ""}},
        {"controllers": ("Resource Claims",)},
    ],
    ids=["gate", "runtime-config", "controller"],
)
def test_features_the_components_would_refuse_are_refused_before_start(
    features: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match="is not a"):
        ClusterFeatures(**features)


def test_features_describe_what_is_set() -> None:
    features = ClusterFeatures(
        feature_gates={"GenericWorkload": True}, controllers=("resourceclaim-controller",)
    )

    assert features.describe() == (
        "feature gates GenericWorkload=true; KCM controllers resourceclaim-controller"
    )
    assert ClusterFeatures().describe() == "none"


def test_the_controller_manager_runs_what_a_cluster_does_to_pods_on_sick_nodes(
    tmp_path: Path,
) -> None:
    (controllers,) = flag(command_lines(ClusterFeatures(), tmp_path)["kcm"], "controllers")

    assert {
        "node-lifecycle-controller",
        "taint-eviction-controller",
        "pod-garbage-collector-controller",
    } <= set(controllers.split(","))


def test_with_a_real_node_the_controller_manager_runs_what_the_chart_needs(
    tmp_path: Path,
) -> None:
    # Deployments and their ReplicaSets, and Jobs: the chart's pre-delete hook is one, and
    # without the job controller `helm uninstall` waits out its timeout on a Job with no pod.
    binaries = Binaries.in_directory(build_dir(tmp_path / "bin"))
    ports = Ports(
        etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4, scheduler=5, kwok=6
    )
    layout = Layout(tmp_path / "plane")

    (with_node,) = flag(
        controller_manager_command(binaries, layout, ports, real_node=True), "controllers"
    )
    (without,) = flag(controller_manager_command(binaries, layout, ports), "controllers")

    wanted = {"deployment-controller", "replicaset-controller", "job-controller"}
    assert wanted <= set(with_node.split(","))
    assert not wanted & set(without.split(","))


def test_kwok_forgets_a_node_whose_heartbeat_is_stopped(tmp_path: Path) -> None:
    binaries = Binaries.in_directory(build_dir(tmp_path / "bin"))
    ports = Ports(
        etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4, scheduler=5, kwok=6
    )

    argv = kwok_command(binaries, Layout(tmp_path / "plane"), ports)

    assert flag(argv, "manage-nodes-with-label-selector") == [
        "torchgate.io/fake-heartbeat!=stopped"
    ]

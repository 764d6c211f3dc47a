"""Webhook registration, GPU pools, probes and the parts of ``torchgate dev`` without a cluster."""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from torchgate import cli
from torchgate.certs import store
from torchgate_dev import devcluster, packagedata
from torchgate_dev.apiserver import wait_for_admission
from torchgate_dev.cluster import DevCluster, UpOptions, settings_conflicts
from torchgate_dev.command import EXIT_NOT_FOUND, up_options
from torchgate_dev.controlplane.components import ClusterFeatures
from torchgate_dev.controlplane.layout import Layout
from torchgate_dev.controlplane.processes import ManagedProcess, is_alive
from torchgate_dev.devcluster import NodePool, ServiceEndpoint
from torchgate_dev.launch import (
    controller_command,
    make_certificates,
    spawn,
    stop_process,
    webhook_command,
)
from torchgate_dev.paths import CA_CERT, TLS_CERT, TLS_KEY, DevLayout, default_dir
from torchgate_dev.state import DevError, DevState, Product, remove_files

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


# ----------------------------------------------------------------------------- registration


def test_configurations_register_both_routes_by_url_and_fail_closed() -> None:
    mutating, validating = devcluster.webhook_configurations("https://127.0.0.1:8443", ca_bundle=CA)

    assert (mutating["kind"], validating["kind"]) == (
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    )
    assert mutating["metadata"] == validating["metadata"] == {"name": "torchgate"}
    for configuration, path in ((mutating, "/mutate"), (validating, "/validate")):
        webhook = configuration["webhooks"][0]  # the jobs' (the policies' one: below)
        assert webhook["clientConfig"]["url"] == f"https://127.0.0.1:8443{path}"
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == CA
        assert webhook["rules"][0] == {
            "apiGroups": ["kubeflow.org"],
            "apiVersions": ["v1"],
            "resources": ["pytorchjobs"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["timeoutSeconds"] == 5
        assert webhook["namespaceSelector"] == {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system"],
                }
            ]
        }
    assert mutating["webhooks"][0]["name"] != validating["webhooks"][0]["name"]
    # Only the validating route judges scales (kubectl scale, an HPA): a Scale is not a job.
    assert len(mutating["webhooks"][0]["rules"]) == 1
    assert validating["webhooks"][0]["rules"][1:] == [
        {
            "apiGroups": ["kubeflow.org"],
            "apiVersions": ["v1"],
            "resources": ["pytorchjobs/scale"],
            "operations": ["UPDATE"],
            "scope": "Namespaced",
        }
    ]


def test_policies_and_quotas_go_to_the_validating_route_and_a_webhook_down_lets_them_through() -> (
    None
):
    mutating, validating = devcluster.webhook_configurations(
        "https://127.0.0.1:8443", ca_bundle=CA, failure_policy="Fail"
    )

    assert len(mutating["webhooks"]) == 1
    jobs, policies = validating["webhooks"]
    assert policies["name"] == devcluster.POLICIES_WEBHOOK != jobs["name"]
    assert policies["clientConfig"] == jobs["clientConfig"]
    assert policies["rules"] == [
        {
            "apiGroups": ["torchgate.io"],
            "apiVersions": ["v1alpha1"],
            "resources": ["placementpolicies", "teamquotas"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Cluster",
        }
    ]
    assert (jobs["failurePolicy"], policies["failurePolicy"]) == ("Fail", "Ignore")
    assert policies["matchConditions"] == [devcluster.NOT_BEING_DELETED]
    assert "namespaceSelector" not in policies  # cluster-scoped objects: it would not apply


def _held(url: str = "https://127.0.0.1:8443", *, ca: bytes = CA) -> list[dict[str, Any]]:
    """The configurations as the apiserver returns them: its defaults and metadata added."""
    held = devcluster.webhook_configurations(url, ca_bundle=ca)
    for obj in held:
        obj["metadata"].update(resourceVersion="7", uid="u")
        for webhook in obj["webhooks"]:
            webhook["objectSelector"] = {}
    return held


def _without_policies_webhook() -> list[dict[str, Any]]:
    held = _held()
    held[1]["webhooks"] = held[1]["webhooks"][:1]
    return held


@pytest.mark.parametrize(
    ("found", "current"),
    [
        (_held(), True),
        ([None, None], False),
        ([_held()[0], None], False),
        (_held("https://127.0.0.1:9443"), False),
        (_held(ca=b"another CA"), False),
        (_without_policies_webhook(), False),
        ([{"webhooks": None}, {}], False),
        (_held()[:1], False),
    ],
    ids=[
        "as-registered",
        "none",
        "validating-missing",
        "other-port",
        "other-ca",
        "a-webhook-missing",
        "malformed",
        "one-of-two",
    ],
)
def test_the_registration_is_current_only_when_both_configurations_call_this_webhook(
    found: list[dict[str, Any] | None], current: bool
) -> None:
    expected = devcluster.webhook_configurations("https://127.0.0.1:8443", ca_bundle=CA)

    assert devcluster.registration_current(expected, found) is current


def test_configurations_can_point_at_a_service() -> None:
    endpoint = ServiceEndpoint(namespace="torchgate-system", name="torchgate-webhook")

    mutating, validating = devcluster.webhook_configurations(endpoint, ca_bundle=CA)

    assert mutating["webhooks"][0]["clientConfig"]["service"] == {
        "namespace": "torchgate-system",
        "name": "torchgate-webhook",
        "path": "/mutate",
        "port": 443,
    }
    assert validating["webhooks"][0]["clientConfig"]["service"]["path"] == "/validate"
    assert "url" not in mutating["webhooks"][0]["clientConfig"]


@pytest.mark.parametrize(
    ("endpoint", "arguments"),
    [
        ("http://127.0.0.1:8443", {}),
        ("https://127.0.0.1:8443/?x=1", {}),
        ("https://127.0.0.1:8443#frag", {}),
        ("127.0.0.1:8443", {}),
        ("https://127.0.0.1:8443", {"ca_bundle": b"  \n"}),
        ("https://127.0.0.1:8443", {"timeout_seconds": 0}),
        ("https://127.0.0.1:8443", {"timeout_seconds": 31}),
        ("https://127.0.0.1:8443", {"failure_policy": "Sometimes"}),
        (ServiceEndpoint("ns", "svc", port=0), {}),
    ],
    ids=[
        "http", "query", "fragment", "no-scheme", "empty-ca", "timeout-0", "timeout-31",
        "failure-policy", "service-port-0",
    ],
)  # fmt: skip
def test_configurations_refuse_what_the_apiserver_would(
    endpoint: devcluster.Endpoint, arguments: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=r"."):
        devcluster.webhook_configurations(endpoint, **{"ca_bundle": CA, **arguments})


def test_no_excluded_namespaces_means_an_empty_selector() -> None:
    (mutating, _) = devcluster.webhook_configurations(
        "https://127.0.0.1:1", ca_bundle=CA, excluded_namespaces=()
    )
    assert mutating["webhooks"][0]["namespaceSelector"] == {}


# ----------------------------------------------------------------------------- pools


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a100=4x8", NodePool("a100", 4, 8)),
        ("t4=2", NodePool("t4", 2, 8)),
        (" cpu=3x0 ", NodePool("cpu", 3, 0)),
    ],
    ids=["count-and-gpus", "default-gpus", "cpu-only"],
)
def test_pool_specs_parse(text: str, expected: NodePool) -> None:
    assert devcluster.parse_pool(text) == expected


@pytest.mark.parametrize(
    "text",
    ["a100", "A100=1", "a100=0", "a100=1x65", "a100=x8", "-a=1", "a_b=1", "a=1x2x3", "a=501"],
)
def test_bad_pool_specs_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        devcluster.parse_pool(text)


def test_pool_nodes_are_named_labelled_and_sized() -> None:
    # The default DRA pool's nodes (the last two) list no GPU: see the DRA test below.
    nodes = devcluster.pool_nodes(devcluster.DEFAULT_POOLS)[:-2]

    assert [
        (n["metadata"]["name"], n["metadata"]["labels"]["pool"], n["status"]["allocatable"])
        for n in nodes
    ] == [
        (name, pool, {**nodes[0]["status"]["allocatable"], "nvidia.com/gpu": "8"})
        for name, pool in [
            *((f"a100-{i}", "a100") for i in range(4)),
            ("t4-0", "t4"),
            ("t4-1", "t4"),
        ]
    ]
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)
    assert devcluster.DEFAULT_POOLS[0].describe() == "a100-0..3 (pool=a100, 8 GPUs each)"


def test_the_dra_pool_publishes_its_gpus_in_resource_slices() -> None:
    pools = [NodePool("a", 1), NodePool("dra", 2, 4, dra=True)]
    nodes = devcluster.pool_nodes(pools)
    assert [("nvidia.com/gpu" in n["status"]["allocatable"]) for n in nodes] == [True, False, False]
    devices = devcluster.pool_devices(pools)
    classes = [o["metadata"]["name"] for o in devices if o["kind"] == "DeviceClass"]
    assert classes == ["gpu.nvidia.com", "gpu-extended.nvidia.com"]
    slices = {
        o["spec"]["nodeName"]: len(o["spec"]["devices"])
        for o in devices
        if o["kind"] == "ResourceSlice"
    }
    assert slices == {"dra-0": 4, "dra-1": 4}
    assert devcluster.pool_devices([NodePool("a", 1)]) == []
    assert devcluster.parse_pool("dra=2x4:dra") == NodePool("dra", 2, 4, dra=True)
    assert devcluster.DEFAULT_POOLS[2].describe() == "dra-0..1 (pool=dra, 8 GPUs each, through DRA)"


def test_pool_nodes_carry_block_rack_and_hostname_topology() -> None:
    nodes = devcluster.pool_nodes([NodePool("a100", 9), NodePool("t4", 2)])
    levels = devcluster.TOPOLOGY_LEVELS
    assert levels == (
        "topology.torchgate.io/block",
        "topology.torchgate.io/rack",
        "kubernetes.io/hostname",
    )
    placed = {
        n["metadata"]["name"]: tuple(n["metadata"]["labels"][key] for key in levels) for n in nodes
    }
    assert placed["a100-0"] == ("a100-b0", "a100-r0", "a100-0")
    assert placed["a100-1"] == ("a100-b0", "a100-r0", "a100-1")
    assert placed["a100-3"] == ("a100-b0", "a100-r1", "a100-3")
    assert placed["a100-4"] == ("a100-b1", "a100-r2", "a100-4")
    assert placed["a100-8"] == ("a100-b2", "a100-r4", "a100-8")
    assert placed["t4-1"] == ("t4-b0", "t4-r0", "t4-1")
    # Racks of two nodes, blocks of two racks: every rack in exactly one block.
    racks: dict[str, set[str]] = {}
    for block, rack, _ in placed.values():
        racks.setdefault(rack, set()).add(block)
    assert all(len(blocks) == 1 for blocks in racks.values())


def test_a_pool_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        devcluster.pool_nodes([NodePool("a", 1), NodePool("a", 2)])


# ----------------------------------------------------------------------------- probes


def test_probes_differ_only_in_the_stray_argument() -> None:
    plain = devcluster.probe_job("default")
    stray = devcluster.probe_job("default", stray_argument=True)

    for replica in ("Master", "Worker"):
        plain_args = plain["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        stray_args = stray["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        assert stray_args["containers"][0]["args"] == [
            *plain_args["containers"][0]["args"],
            devcluster.PROBE_STRAY_ARGUMENT,
        ]
    assert "runPolicy" not in plain["spec"]
    assert devcluster.probe_path("ns").endswith("/namespaces/ns/pytorchjobs?dryRun=All")


@pytest.mark.parametrize(
    ("status", "body", "seen"),
    [
        (201, {"spec": {"runPolicy": {"cleanPodPolicy": "Running"}}}, True),
        (201, {"spec": {"pytorchReplicaSpecs": {}}}, False),  # stored as sent: no mutation
        (422, {"spec": {"runPolicy": {"cleanPodPolicy": "Running"}}}, False),
        (500, {"reason": "InternalError"}, False),
    ],
    ids=["defaulted", "not-defaulted", "refused", "webhook-down"],
)
def test_mutation_seen(status: int, body: dict[str, Any], seen: bool) -> None:
    assert devcluster.mutation_seen(status, body) is seen


@pytest.mark.parametrize(
    ("status", "body", "seen"),
    [
        (422, {"details": {"causes": [{"field": "spec.x[Master].containers[0].args"}]}}, True),
        (422, {"details": {"causes": [{"field": "metadata.uid"}]}}, False),
        (201, {"spec": {}}, False),
        (500, {"details": {"causes": [{"message": "failed calling webhook"}]}}, False),
    ],
    ids=["refused-for-args", "refused-for-something-else", "stored", "webhook-down"],
)
def test_validation_seen(status: int, body: dict[str, Any], seen: bool) -> None:
    assert devcluster.validation_seen(status, body) is seen


def test_wait_for_admission_names_what_the_probes_got() -> None:
    def refusing(method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        return 422, {"reason": "Invalid", "message": "metadata.uid: Forbidden"}

    with pytest.raises(DevError, match=r"mutating and validating.*HTTP 422 Invalid metadata"):
        wait_for_admission(refusing, timeout=0.01)


def test_wait_for_admission_returns_once_both_routes_answer() -> None:
    def admitting(method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        args = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        if devcluster.PROBE_STRAY_ARGUMENT in args["args"]:
            return 422, {"details": {"causes": [{"field": "spec.containers[0].args"}]}}
        return 201, {"spec": {"runPolicy": {"cleanPodPolicy": "Running"}}}

    assert wait_for_admission(admitting, timeout=1) < 1


# ----------------------------------------------------------------------------- dev pieces


def test_file_names_match_the_certs_store() -> None:
    assert (CA_CERT, TLS_CERT, TLS_KEY) == (
        store.CA_CERT,
        store.TLS_CERT,
        store.TLS_KEY,
    )


def test_certificates_name_loopback_and_are_kept_when_valid(tmp_path: Path) -> None:
    first = make_certificates(tmp_path / "tls")
    serving = (tmp_path / "tls" / TLS_CERT).read_bytes()

    again = make_certificates(tmp_path / "tls")

    assert again == first
    assert (tmp_path / "tls" / TLS_CERT).read_bytes() == serving
    certificate = x509.load_pem_x509_certificate(serving)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)


def test_product_commands_parse_with_the_real_command_line() -> None:
    commands = [
        webhook_command(port=1, tls_dir=Path("/t"), kubeconfig=Path("/k")),
        controller_command(kubeconfig=Path("/k"), metrics_port=2),
    ]
    for argv in commands:
        assert argv[:3] == [sys.executable, "-m", "torchgate"]
        arguments = argv[3:]
        args = cli.build_parser(arguments[0]).parse_args(arguments)
        assert str(args.kubeconfig) == "/k"
    webhook = cli.build_parser("webhook").parse_args(commands[0][3:])
    assert (webhook.bind, webhook.port) == ("127.0.0.1", 1)


def test_state_round_trips(tmp_path: Path) -> None:
    process = ManagedProcess("webhook", 12, 34, tmp_path / "webhook.log")
    state = DevState(
        webhook=Product(process, 8443), controller_error="boom", pools=("a",), populated=True
    )
    state.save(tmp_path / "dev.json")

    assert DevState.load(tmp_path / "dev.json") == state
    assert DevState.load(tmp_path / "missing.json") is None
    assert (tmp_path / "dev.json").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    "content", ["{", "[]", '{"version": 99}', '{"version": 1, "webhook": {"pid": "x"}}']
)
def test_unreadable_state_is_one_clear_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "dev.json").write_text(content)
    with pytest.raises(DevError, match="unreadable dev state"):
        DevState.load(tmp_path / "dev.json")


def test_removing_files_spares_what_dev_did_not_write(tmp_path: Path) -> None:
    layout = DevLayout(tmp_path)
    for path in (layout.state, layout.webhook_log, Layout(tmp_path).kubeconfig):
        path.write_text("x")
    (layout.tls).mkdir()
    (layout.tls / "ca.crt").write_text("x")
    Layout(tmp_path).logs.mkdir()
    (tmp_path / "notes.txt").write_text("mine")

    remove_files(layout, keep_logs=True)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "notes.txt", "webhook.log"]
    remove_files(layout, keep_logs=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_removing_everything_removes_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "dev"
    (root / "logs").mkdir(parents=True)
    remove_files(DevLayout(root), keep_logs=False)
    assert not root.exists()


def test_default_dir_is_at_the_top_of_the_checkout(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a" / "b").mkdir(parents=True)

    assert default_dir(tmp_path / "a" / "b") == tmp_path.resolve() / ".dev"


def test_stop_process_ends_the_group_and_spares_a_recycled_pid(tmp_path: Path) -> None:
    process = spawn("sleeper", ["sleep", "60"], tmp_path / "sleep.log", cwd=tmp_path)
    impostor = ManagedProcess("sleeper", process.pid, process.start_ticks + 1, process.log_path)

    stop_process(impostor, grace=0.2)
    assert is_alive(process)

    stop_process(process, grace=5)
    assert not is_alive(process)


# ----------------------------------------------------------------------------- command line


def run_dev(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchgate", "dev", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["up", "--pool", "A100=4"],
        ["up", "--webhook-port", "70000"],
        ["up", "--timeout", "0"],
        ["sideways"],
    ],
    ids=["bad-pool", "bad-port", "bad-timeout", "bad-action"],
)
def test_bad_flags_are_usage_errors(args: list[str]) -> None:
    result = run_dev(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_a_pool_given_twice_is_one_line_error(tmp_path: Path) -> None:
    result = run_dev("up", "--dir", str(tmp_path / "d"), "--pool", "a=1", "--pool", "a=2")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


def parse_dev(*args: str) -> argparse.Namespace:
    return cli.build_parser("dev").parse_args(["dev", *args])


def test_kubernetes_version_flag_picks_a_supported_version_and_features_pass_through() -> None:
    args = parse_dev(
        "up",
        "--kubernetes-version",
        "v1.36.3",
        "--feature-gates",
        "GenericWorkload=true",
        "--runtime-config",
        "scheduling.k8s.io/v1alpha2=true",
        "--kcm-controllers",
        "resourceclaim-controller,podgroup-protection-controller",
    )

    options = up_options(args)

    assert options.kubernetes_version == "1.36.3"
    assert options.features == ClusterFeatures(
        feature_gates={"GenericWorkload": True},
        runtime_config={"scheduling.k8s.io/v1alpha2": "true"},
        controllers=("resourceclaim-controller", "podgroup-protection-controller"),
    )


def test_without_the_flag_the_version_is_left_to_the_environment_or_the_default() -> None:
    options = up_options(parse_dev("up"))

    assert options.kubernetes_version is None
    assert options.features == ClusterFeatures()


def test_an_unsupported_kubernetes_version_is_a_usage_error_naming_the_supported_ones(
    tmp_path: Path,
) -> None:
    result = run_dev("up", "--dir", str(tmp_path / "d"), "--kubernetes-version", "1.35.0")

    assert result.returncode == 2
    assert "supported: 1.37.2 (default), 1.36.3" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("asked", "running", "conflicts"),
    [
        (UpOptions(), ("1.36.3", ClusterFeatures()), []),
        (UpOptions(kubernetes_version="1.36.3"), ("1.36.3", ClusterFeatures()), []),
        (
            UpOptions(kubernetes_version="1.37.2"),
            ("1.36.3", ClusterFeatures()),
            ["Kubernetes 1.36.3, not 1.37.2"],
        ),
        (
            UpOptions(features=ClusterFeatures(feature_gates={"GenericWorkload": True})),
            ("1.37.2", ClusterFeatures()),
            ["none, not feature gates GenericWorkload=true"],
        ),
        (UpOptions(), ("1.37.2", ClusterFeatures(feature_gates={"GenericWorkload": True})), []),
    ],
    ids=["nothing-asked", "same-version", "other-version", "other-features", "features-kept"],
)
def test_a_running_cluster_is_completed_only_with_the_settings_it_runs_with(
    asked: UpOptions, running: tuple[str, ClusterFeatures], conflicts: list[str]
) -> None:
    assert settings_conflicts(*running, asked) == conflicts


def test_status_and_down_without_a_cluster(tmp_path: Path) -> None:
    assert run_dev("status", "--dir", str(tmp_path / "none")).returncode == EXIT_NOT_FOUND
    down = run_dev("down", "--dir", str(tmp_path / "none"))
    assert (down.returncode, down.stdout) == (0, "")


def test_the_export_line_and_the_commands_paste_into_a_shell_whatever_dir_holds(
    tmp_path: Path,
) -> None:
    root = tmp_path / "my dev's $HOME"
    root.mkdir()
    process = ManagedProcess("controller", 2**22 + 1, 1, root / "controller.log")
    DevState(controller=Product(process, 8080), pool_port=8443).save(root / "dev.json")
    dev = DevCluster(root)

    script = 'eval "$1"; printf "%s\\n" "$KUBECONFIG" "$TORCHGATE_CONTROLLER_CA"'
    shell = subprocess.run(
        ["bash", "-c", script, "-", dev.exports(dev.health())],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    status = run_dev("status", "--dir", str(tmp_path / "no dev"))

    assert shell.stdout.splitlines() == [str(root / "kubeconfig"), str(root / "tls" / CA_CERT)]
    assert shlex.split(dev.command("down")) == ["torchgate", "dev", "down", "--dir", str(root)]
    hint = status.stderr.strip().split("start one with: ", 1)[1].removesuffix(")")
    assert shlex.split(hint) == ["torchgate", "dev", "up", "--dir", str(tmp_path / "no dev")]


@pytest.mark.parametrize("where", ["a-file", "under-a-file", "proc"])
def test_up_where_no_dir_can_be_kept_says_so_and_what_to_do(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("mine")
    root = {
        "a-file": tmp_path / "a-file",
        "under-a-file": tmp_path / "a-file" / "dev",
        "proc": Path("/proc/torchgate-dev"),
    }[where]

    result = run_dev("up", "--no-real-node", "--dir", str(root))

    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"torchgate dev: error: cannot keep a dev cluster in {root}: ")
    assert line.endswith("choose a writable directory with --dir")
    assert (tmp_path / "a-file").read_text() == "mine"


def test_a_corrupt_state_file_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "dev.json").write_text(json.dumps({"version": 1, "webhook": {"pid": []}}))
    result = run_dev("status", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- API paths


def test_everything_dev_creates_has_an_apply_path() -> None:
    objects = [
        *devcluster.pool_nodes([NodePool("a", 1)]),
        *devcluster.webhook_configurations("https://127.0.0.1:1", ca_bundle=CA),
        {
            "apiVersion": "torchgate.io/v1alpha1",
            "kind": "PlacementPolicy",
            "metadata": {"name": "p"},
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "pytorchjobs.kubeflow.org"},
        },
    ]

    paths = [devcluster.apply_path(obj) for obj in objects]

    assert paths[0] == "/api/v1/nodes/a-0?fieldManager=torchgate-dev&force=true"
    assert devcluster.object_path(objects[1]) == (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/torchgate"
    )
    assert all(path.endswith("?fieldManager=torchgate-dev&force=true") for path in paths)
    assert len(set(paths)) == len(paths)


def test_the_dev_samples_team_quotas_have_an_apply_path() -> None:
    documents = yaml.safe_load_all(packagedata.SAMPLE_POLICY.read_text(encoding="utf-8"))
    quotas = [d for d in documents if d["kind"] == "TeamQuota"]
    assert [devcluster.object_path(q) for q in quotas] == [
        "/apis/torchgate.io/v1alpha1/teamquotas/vision",
        "/apis/torchgate.io/v1alpha1/teamquotas/speech",
    ]


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}},
        {"apiVersion": "v1", "kind": "Node"},
    ],
    ids=["other-kind", "no-name"],
)
def test_apply_path_refuses_what_dev_does_not_make(obj: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a kind torchgate dev makes"):
        devcluster.apply_path(obj)


def test_the_dev_webhook_asks_the_dev_controllers_pool_service_with_the_ca_it_serves() -> None:
    webhook_argv = webhook_command(
        port=1, tls_dir=Path("/t"), kubeconfig=Path("/k"), controller_port=3
    )
    controller_argv = controller_command(
        kubeconfig=Path("/k"), metrics_port=2, pool_port=3, tls_dir=Path("/t")
    )

    webhook = cli.build_parser("webhook").parse_args(webhook_argv[3:])
    controller = cli.build_parser("controller").parse_args(controller_argv[3:])

    assert webhook.controller_url == "https://127.0.0.1:3"
    assert webhook.controller_ca_file == Path("/t/ca.crt")
    assert (controller.pool_service_port, controller.pool_service_bind_address) == (3, "127.0.0.1")
    assert controller.tls_cert_file == webhook.tls_cert_file == Path("/t/tls.crt")
    assert (
        cli.build_parser("controller")
        .parse_args(controller_command(kubeconfig=Path("/k"), metrics_port=2)[3:])
        .pool_service_port
        == 0
    ), "no pool service unless asked"


def test_the_pool_port_survives_the_state_file(tmp_path: Path) -> None:
    state = DevState(pool_port=4242)
    state.save(tmp_path / "dev.json")

    loaded = DevState.load(tmp_path / "dev.json")

    assert loaded is not None
    assert loaded.pool_port == 4242

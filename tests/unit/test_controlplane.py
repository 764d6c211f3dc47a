"""The control-plane harness without a cluster: stages, nodes, CRDs, keys, config, failures.

The e2e suite proves the harness against real binaries; these tests pin the parts that can be
checked offline (and the failure paths, with fake binaries that misbehave on purpose).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import stat
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given
from hypothesis import strategies as st

from torchgate.controlplane import kwok
from torchgate.controlplane.binaries import (
    BIN_DIR_ENV,
    Binaries,
    BinariesUnavailable,
    build_binaries,
    ensure_binaries,
)
from torchgate.controlplane.cluster import ControlPlane, ControlPlaneError
from torchgate.controlplane.components import configuration_files
from torchgate.controlplane.kubeconfig import admin_kubeconfig, read_kubeconfig
from torchgate.controlplane.layout import Layout
from torchgate.controlplane.pki import write_pki
from torchgate.controlplane.processes import ManagedProcess
from torchgate.controlplane.realnode import RealNode
from torchgate.controlplane.state import PlaneState, orphaned
from torchgate.node import config as node_config
from torchgate.pytorchjob.policy import JobDefaults, PlacementPolicy, parse_policy

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTORCHJOB_CRD = REPO_ROOT / "manifests" / "crds" / "kubeflow.org_pytorchjobs.yaml"
POLICY_CRD = REPO_ROOT / "manifests" / "crds" / "torchgate.io_placementpolicies.yaml"
SAMPLE_POLICY = REPO_ROOT / "manifests" / "samples" / "placementpolicy.yaml"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def executable(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_stage(name: str, kind: str = "Pod") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": kwok.STAGE_API_VERSION,
            "kind": "Stage",
            "metadata": {"name": name},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": {}},
        }
    )


@pytest.fixture
def stages_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "stages"
    folder.mkdir()
    for file_name in kwok.UPSTREAM_STAGE_FILES:
        (folder / file_name).write_text(fake_stage(file_name.removesuffix(".yaml")))
    return folder


# ----------------------------------------------------------------------------- kwok stages


def selector_keys(stage: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        expression["jq"]["key"]: (
            expression["jq"]["operator"],
            tuple(expression["jq"].get("values", ())),
        )
        for expression in stage["spec"]["selector"]["matchExpressions"]
    }


def test_torchgate_stages_act_only_on_running_pods_not_being_deleted() -> None:
    for stage in kwok.torchgate_stages():
        keys = selector_keys(stage)
        assert stage["spec"]["resourceRef"] == {"apiGroup": "v1", "kind": "Pod"}
        assert keys[".metadata.deletionTimestamp"] == ("DoesNotExist", ())
        assert keys[".status.phase"] == ("In", ("Running",))
        (step,) = stage["spec"]["steps"]
        assert step["patch"]["subresource"] == "status"
        assert step["patch"]["root"] == "status"


def test_exit_code_and_run_seconds_stages_never_match_the_same_pod() -> None:
    stages = {stage["metadata"]["name"]: stage for stage in kwok.torchgate_stages()}
    exit_keys = selector_keys(stages[kwok.EXIT_STAGE])
    run_keys = selector_keys(stages[kwok.RUN_SECONDS_STAGE])

    shared = [key for key in exit_keys if kwok.ANNOTATION_FAKE_EXIT_CODE in key]
    assert len(shared) == 1
    assert exit_keys[shared[0]] == ("In", ("true",))
    assert run_keys[shared[0]] == ("NotIn", ("true",))


def test_run_seconds_stage_delays_until_a_deadline_from_its_annotation() -> None:
    stages = {stage["metadata"]["name"]: stage for stage in kwok.torchgate_stages()}
    delay = stages[kwok.RUN_SECONDS_STAGE]["spec"]["delay"]

    assert kwok.ANNOTATION_FAKE_RUN_SECONDS in delay["durationFrom"]["jq"]["expression"]
    assert "delay" not in stages[kwok.EXIT_STAGE]["spec"]


def test_stage_jq_keys_have_a_fallback_for_pods_without_the_annotation() -> None:
    # A jq error would make kwok skip every stage for that pod, so absent keys must yield "".
    for stage in kwok.torchgate_stages():
        for key in selector_keys(stage):
            if "annotations" in key:
                assert '// "")' in key


def test_stage_set_is_upstream_then_torchgate_and_round_trips_as_yaml(stages_dir: Path) -> None:
    text = kwok.render_stages(stages_dir)

    documents = list(yaml.safe_load_all(text))
    names = [document["metadata"]["name"] for document in documents]
    assert names == [
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-delete",
        kwok.EXIT_STAGE,
        kwok.RUN_SECONDS_STAGE,
    ]
    assert documents[4:] == kwok.torchgate_stages()


@pytest.mark.parametrize(
    "extra",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        {"apiVersion": kwok.STAGE_API_VERSION, "kind": "Stage", "metadata": {}},
        {"apiVersion": kwok.STAGE_API_VERSION, "kind": "Stage", "metadata": "oops"},
        {"apiVersion": kwok.STAGE_API_VERSION, "kind": "Stage", "metadata": {"name": "pod-ready"}},
    ],
    ids=["not-a-stage", "no-name", "bad-metadata", "duplicate-name"],
)
def test_stage_set_refuses_bad_documents(extra: dict[str, Any]) -> None:
    upstream = [yaml.safe_load(fake_stage("pod-ready")), extra]

    with pytest.raises(ValueError, match="document 1"):
        kwok.stage_documents(upstream)


def test_missing_upstream_stage_file_names_the_file(stages_dir: Path) -> None:
    (stages_dir / "pod-ready.yaml").unlink()

    with pytest.raises(ValueError, match=r"pod-ready\.yaml"):
        kwok.load_upstream_stages(stages_dir)


def test_stage_printer_prints_torchgate_stages_without_a_folder(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert kwok.main([]) == 0

    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert documents == kwok.torchgate_stages()


def test_stage_printer_exits_1_for_a_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kwok.main([str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("factory", "value"),
    [
        (kwok.exit_code_annotation, -1),
        (kwok.exit_code_annotation, 256),
        (kwok.run_seconds_annotation, -1),
    ],
    ids=["exit-negative", "exit-too-big", "seconds-negative"],
)
def test_annotations_refuse_values_kwok_would_ignore(factory: Any, value: int) -> None:
    with pytest.raises(ValueError, match=str(value)):
        factory(value)


def test_annotations_carry_the_value_as_a_string() -> None:
    assert kwok.exit_code_annotation(137) == {kwok.ANNOTATION_FAKE_EXIT_CODE: "137"}
    assert kwok.run_seconds_annotation(30) == {kwok.ANNOTATION_FAKE_RUN_SECONDS: "30"}


# ----------------------------------------------------------------------------- fake GPU nodes


def test_gpu_node_is_managed_by_kwok_and_untainted() -> None:
    node = kwok.gpu_node("gpu-0", gpus=4, rdma=2, labels={"pool": "a"})

    assert node["metadata"]["annotations"][kwok.NODE_ANNOTATION] == kwok.NODE_ANNOTATION_VALUE
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-0"
    assert node["metadata"]["labels"]["pool"] == "a"
    assert "taints" not in node["spec"]
    for section in ("capacity", "allocatable"):
        resources = node["status"][section]
        assert resources["nvidia.com/gpu"] == "4"
        assert resources["rdma/hca"] == "2"
        assert resources["cpu"] == "64"
        assert resources["memory"] == "512Gi"


def test_gpu_node_takes_taints_and_another_gpu_resource() -> None:
    taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}

    node = kwok.gpu_node("amd-0", gpus=2, gpu_resource="amd.com/gpu", taints=[taint])

    assert node["spec"]["taints"] == [taint]
    assert node["status"]["allocatable"]["amd.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]


def test_gpu_node_capacity_and_allocatable_are_independent_copies() -> None:
    node = kwok.gpu_node("gpu-0")
    node["status"]["allocatable"]["cpu"] = "1"

    assert node["status"]["capacity"]["cpu"] == "64"


@pytest.mark.parametrize("field", ["gpus", "rdma", "pods"])
def test_gpu_node_refuses_negative_counts(field: str) -> None:
    with pytest.raises(ValueError, match="negative"):
        kwok.gpu_node("gpu-0", **{field: -1})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- CRDs


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}[*]")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    nodes = dict(walk(schema))
    assert path in nodes, f"{path} is not in the schema"
    return nodes[path]


@pytest.mark.parametrize("crd_path", [PYTORCHJOB_CRD, POLICY_CRD], ids=lambda p: p.name)
def test_crd_schemas_are_structural(crd_path: Path) -> None:
    for path, node in walk(schema_of(load(crd_path))):
        typed = "type" in node or node.get("x-kubernetes-int-or-string") is True
        assert typed, f"{path or '<root>'} has no type"


def test_pytorchjob_crd_types_values_but_leaves_enums_to_the_webhook() -> None:
    crd = load(PYTORCHJOB_CRD)
    schema = schema_of(crd)
    replica = ".spec.pytorchReplicaSpecs[*]"

    assert crd["metadata"]["name"] == "pytorchjobs.kubeflow.org"
    assert crd["spec"]["scope"] == "Namespaced"
    assert node_at(schema, ".spec")["required"] == ["pytorchReplicaSpecs"]
    assert node_at(schema, f"{replica}.replicas")["type"] == "integer"
    assert node_at(schema, f"{replica}.template")["x-kubernetes-preserve-unknown-fields"]
    assert node_at(schema, ".spec.runPolicy.suspend")["default"] is False
    assert node_at(schema, ".spec.nprocPerNode")["type"] == "string"
    for path in (f"{replica}.restartPolicy", ".spec.runPolicy.cleanPodPolicy"):
        assert "enum" not in node_at(schema, path)
    assert not [path for path, node in walk(schema) if "enum" in node]


def test_pytorchjob_crd_has_every_run_and_elastic_policy_field() -> None:
    schema = schema_of(load(PYTORCHJOB_CRD))
    run_policy = node_at(schema, ".spec.runPolicy")["properties"]
    scheduling = run_policy["schedulingPolicy"]["properties"]
    elastic = node_at(schema, ".spec.elasticPolicy")["properties"]

    assert set(run_policy) == {
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "suspend",
        "managedBy",
        "schedulingPolicy",
    }
    assert set(scheduling) == {
        "minAvailable",
        "queue",
        "minResources",
        "priorityClass",
        "scheduleTimeoutSeconds",
    }
    assert set(elastic) == {
        "minReplicas",
        "maxReplicas",
        "rdzvBackend",
        "rdzvHost",
        "rdzvPort",
        "rdzvId",
        "rdzvConf",
        "standalone",
        "nProcPerNode",
        "maxRestarts",
        "metrics",
    }
    assert elastic["metrics"]["items"]["x-kubernetes-preserve-unknown-fields"]


def test_pytorchjob_crd_subresources_and_columns_match_upstream() -> None:
    (version,) = load(PYTORCHJOB_CRD)["spec"]["versions"]

    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
    }
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns == {
        "State": ".status.conditions[-1:].type",
        "Age": ".metadata.creationTimestamp",
    }
    status = node_at(schema_of(load(PYTORCHJOB_CRD)), ".status.replicaStatuses[*]")
    assert set(status["properties"]) == {
        "active",
        "succeeded",
        "failed",
        "selector",
        "labelSelector",
    }


# Where each PlacementPolicy attribute lives in the CRD; a new attribute fails this test until
# the CRD (and this table) learn about it.
POLICY_FIELDS = {
    "namespaces": ".spec.namespaces",
    "priority": ".spec.priority",
    "node_selector": ".spec.nodeSelector",
    "tolerations": ".spec.tolerations",
    "allowed_hosts": ".spec.allowedHosts",
    "max_gpus_per_job": ".spec.maxGPUsPerJob",
    "gpu_resource": ".spec.gpuResource",
    "rdma_resources": ".spec.rdmaResources",
    "shared_memory_size_limit": ".spec.sharedMemory.sizeLimit",
    "allowed_host_paths": ".spec.allowedHostPaths",
    "allow_privileged": ".spec.allowPrivileged",
    "allow_clean_pod_policy_none": ".spec.allowCleanPodPolicyNone",
    "job_defaults": ".spec.jobDefaults",
    "preemption": ".spec.preemption",
    "topology": ".spec.topology",
}
JOB_DEFAULT_FIELDS = {
    "clean_pod_policy": "cleanPodPolicy",
    "backoff_limit": "backoffLimit",
    "ttl_seconds_after_finished": "ttlSecondsAfterFinished",
    "managed_by": "managedBy",
    "schedule_timeout_seconds": "scheduleTimeoutSeconds",
}


def test_policy_crd_has_a_field_for_every_policy_attribute() -> None:
    schema = schema_of(load(POLICY_CRD))
    attributes = {f.name for f in dataclasses.fields(PlacementPolicy)} - {"name", "builtin"}
    defaults = {f.name for f in dataclasses.fields(JobDefaults)}

    assert attributes == set(POLICY_FIELDS)
    assert defaults == set(JOB_DEFAULT_FIELDS)
    for path in POLICY_FIELDS.values():
        node_at(schema, path)
    job_defaults = node_at(schema, ".spec.jobDefaults")["properties"]
    assert set(job_defaults) == set(JOB_DEFAULT_FIELDS.values())
    assert set(node_at(schema, ".spec")["properties"]) == {
        path.split(".")[2] for path in POLICY_FIELDS.values()
    }


def test_policy_crd_types_tolerations_and_shared_memory() -> None:
    schema = schema_of(load(POLICY_CRD))

    toleration = node_at(schema, ".spec.tolerations[]")["properties"]
    assert set(toleration) == {"key", "operator", "value", "effect", "tolerationSeconds"}
    assert toleration["tolerationSeconds"]["type"] == "integer"
    size = node_at(schema, ".spec.sharedMemory.sizeLimit")
    assert size["x-kubernetes-int-or-string"] is True


def test_policy_crd_is_cluster_scoped_with_status_and_columns() -> None:
    crd = load(POLICY_CRD)
    (version,) = crd["spec"]["versions"]

    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["pp"]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    conditions = node_at(schema_of(crd), ".status.conditions")
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert [column["name"] for column in version["additionalPrinterColumns"]] == [
        "Priority",
        "Namespaces",
        "GPU-Limit",
        "Age",
    ]


def test_sample_policy_parses_cleanly_and_uses_only_schema_fields() -> None:
    sample = load(SAMPLE_POLICY)
    schema = schema_of(load(POLICY_CRD))

    parsed, errors = parse_policy(sample)

    assert errors == []
    assert parsed is not None
    assert parsed.matches("team-vision")
    known = dict(walk(schema))
    for key, value in sample["spec"].items():
        assert f".spec.{key}" in known
        if isinstance(value, dict) and key != "nodeSelector":
            for inner in value:
                assert f".spec.{key}.{inner}" in known


# ----------------------------------------------------------------------------- kubeconfig, PKI


def test_admin_kubeconfig_reads_back_as_its_server_ca_and_token(tmp_path: Path) -> None:
    config = admin_kubeconfig("https://127.0.0.1:6443", tmp_path / "ca.crt", "s3cret")

    target = read_kubeconfig(yaml.safe_load(yaml.safe_dump(config)), base_dir=Path("/elsewhere"))

    assert target.server == "https://127.0.0.1:6443"
    assert target.ca_file == tmp_path / "ca.crt"
    assert target.token == "s3cret"
    assert target.ca_data is None


def test_kubeconfig_with_inline_ca_and_relative_paths(tmp_path: Path) -> None:
    raw = {
        "current-context": "kind",
        "contexts": [{"name": "kind", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://x:1", "certificate-authority-data": "UEVN"},
            }
        ],
        "users": [{"name": "u", "user": {"client-certificate": "u.crt"}}],
    }

    target = read_kubeconfig(raw, base_dir=tmp_path)

    assert target.ca_data == b"PEM"
    assert target.token is None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"contexts": []},
        {"current-context": "x", "contexts": [{"name": "y", "context": {}}]},
        {
            "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "c"}}],
            "clusters": [{"name": "c", "cluster": {"server": "http://plain:80"}}],
        },
    ],
    ids=["empty", "no-current-context", "unknown-context", "not-https"],
)
def test_unusable_kubeconfig_is_a_control_plane_error(raw: Any) -> None:
    with pytest.raises(ControlPlaneError, match="kubeconfig"):
        read_kubeconfig(raw, base_dir=Path("."))


def test_attach_reports_an_unreadable_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="cannot read kubeconfig"):
        ControlPlane.attach(tmp_path / "missing")


def test_attached_plane_writes_inline_ca_and_removes_its_scratch_dir(tmp_path: Path) -> None:
    config = admin_kubeconfig("https://127.0.0.1:6443", Path("unused"), "t")
    del config["clusters"][0]["cluster"]["certificate-authority"]
    config["clusters"][0]["cluster"]["certificate-authority-data"] = "UEVN"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))

    plane = ControlPlane.attach(path)
    ca_file = plane.ca_file

    assert plane.attached
    assert ca_file is not None
    assert ca_file.read_bytes() == b"PEM"
    plane.stop()
    assert not plane.workdir.exists()


def test_pki_serving_certificate_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    layout = Layout(tmp_path)

    write_pki(layout)

    ca = x509.load_pem_x509_certificate(layout.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(layout.serving_cert.read_bytes())
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    assert "kubernetes.default.svc" in names.get_values_for_type(x509.DNSName)
    key = serialization.load_pem_private_key(layout.service_account_key.read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey)
    for path in (layout.serving_key, layout.service_account_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_pki_kubelet_client_certificate_is_a_system_masters_client_of_the_same_ca(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)

    write_pki(layout)

    ca = x509.load_pem_x509_certificate(layout.ca_cert.read_bytes())
    client = x509.load_pem_x509_certificate(layout.kubelet_client_cert.read_bytes())
    client.verify_directly_issued_by(ca)
    subject = {attribute.oid: attribute.value for attribute in client.subject}
    assert subject[NameOID.COMMON_NAME] == node_config.APISERVER_KUBELET_CLIENT
    assert subject[NameOID.ORGANIZATION_NAME] == "system:masters"
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key = serialization.load_pem_private_key(layout.kubelet_client_key.read_bytes(), None)
    assert key.public_key().public_numbers() == client.public_key().public_numbers()
    assert stat.S_IMODE(layout.kubelet_client_key.stat().st_mode) == 0o600


def test_pki_serving_certificate_names_every_address_the_apiserver_is_reached_by(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)

    write_pki(layout)

    serving = x509.load_pem_x509_certificate(layout.serving_cert.read_bytes())
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    assert ips == {"127.0.0.1", node_config.NodeNetwork().gateway, "10.96.0.1"}
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    }


# ----------------------------------------------------------------------------- state file


def test_managed_process_round_trips_through_json(tmp_path: Path) -> None:
    process = ManagedProcess("etcd", 123, 456, tmp_path / "etcd.log")

    assert ManagedProcess.from_json(process.to_json()) == process


def test_from_state_without_a_state_file_is_a_control_plane_error(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="no control plane state"):
        ControlPlane.from_state(tmp_path)


@pytest.mark.parametrize(
    "content",
    ["not json", '{"version": 99}', '{"version": 1, "processes": [{"pid": "x"}]}', "[]"],
    ids=["not-json", "wrong-version", "bad-process", "not-an-object"],
)
def test_from_state_with_a_corrupt_state_file_is_a_control_plane_error(
    tmp_path: Path, content: str
) -> None:
    (tmp_path / "state.json").write_text(content)

    with pytest.raises(ControlPlaneError, match="unreadable control plane state"):
        ControlPlane.from_state(tmp_path)


@given(
    token=st.none() | st.text(min_size=1, max_size=20),
    seconds=st.none() | st.floats(min_value=0, max_value=1e6),
    detached=st.booleans(),
    owns_workdir=st.booleans(),
    pids=st.lists(st.integers(min_value=1, max_value=2**22), max_size=4),
    node=st.none() | st.fixed_dictionaries({"name": st.text(min_size=1, max_size=10)}),
)
def test_plane_state_round_trips_through_json(
    token: str | None,
    seconds: float | None,
    detached: bool,
    owns_workdir: bool,
    pids: list[int],
    node: dict[str, Any] | None,
) -> None:
    state = PlaneState(
        server="https://127.0.0.1:6443",
        token=token,
        ca_file=Path("/w/pki/ca.crt"),
        kubeconfig=Path("/w/kubeconfig"),
        startup_seconds=seconds,
        detached=detached,
        owner=None if detached else {"pid": 1, "start_ticks": 2},
        owns_workdir=owns_workdir,
        processes=tuple(ManagedProcess(f"p{pid}", pid, pid, Path("/w/logs/p.log")) for pid in pids),
        real_node=node,
    )

    again = PlaneState.from_json(json.loads(json.dumps(state.to_json())))

    # The token is written as a string: None comes back as "None" (a started plane has one).
    assert again == dataclasses.replace(state, token=str(token))


def test_real_node_record_is_absent_until_claimed_and_round_trips_after() -> None:
    node = RealNode(name="real-0", labels={"pool": "a100"})
    assert node.to_json() is None
    node.since, node.registry, node.kube_proxy = 12.5, "127.0.0.1:5000", Path("/bin/kube-proxy")

    record = node.to_json()

    assert record is not None
    again = RealNode.from_json(json.loads(json.dumps(record)))
    assert (again.name, again.since, again.registry, again.kube_proxy) == (
        "real-0",
        12.5,
        "127.0.0.1:5000",
        Path("/bin/kube-proxy"),
    )


def test_real_node_tokens_name_the_kubelet_dns_and_kube_proxy_identities() -> None:
    node = RealNode(name="real-0")

    lines = [line.split(",") for line in node.token_lines()]

    assert [fields[0] for fields in lines] == list(node.tokens)
    assert len(set(node.tokens)) == 3
    assert [fields[1] for fields in lines] == [
        node_config.node_user("real-0"),
        node_config.DNS_USER,
        node_config.KUBE_PROXY_USER,
    ]
    assert [fields[3:] for fields in lines] == [['"system:nodes"'], [], []]


@pytest.mark.parametrize(
    ("raw", "orphan"),
    [
        ([], False),
        ({"detached": True, "owner": None}, False),
        ({"detached": False, "owner": {"pid": "x"}}, False),
        ({"detached": False, "owner": None}, False),
        ({"detached": False, "owner": "live"}, False),
        ({"detached": False, "owner": "dead"}, True),
    ],
    ids=["not-a-record", "detached", "malformed-owner", "no-owner", "live-owner", "dead-owner"],
)
def test_a_recorded_control_plane_is_an_orphan_only_when_its_owner_is_gone(
    raw: Any, orphan: bool
) -> None:
    with subprocess.Popen(["true"]) as gone:
        gone.wait()
    owners = {
        "live": {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())},
        "dead": {"pid": gone.pid, "start_ticks": 1},
    }
    if isinstance(raw, dict) and isinstance(raw.get("owner"), str):
        raw = {**raw, "owner": owners[raw["owner"]]}

    assert orphaned(raw) is orphan


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


def test_properties_before_start_are_a_control_plane_error() -> None:
    plane = ControlPlane()

    with pytest.raises(ControlPlaneError, match="not started"):
        _ = plane.kubeconfig
    assert not plane.is_running()
    plane.stop()  # nothing to stop is fine


# ----------------------------------------------------------------------------- start-up failures


def fake_binaries(folder: Path, stages_dir: Path, *, etcd: str) -> Binaries:
    folder.mkdir()
    never = "exec sleep 600\n"
    return Binaries(
        kube_apiserver=executable(folder / "kube-apiserver", never),
        kube_controller_manager=executable(folder / "kube-controller-manager", never),
        kube_scheduler=executable(folder / "kube-scheduler", never),
        etcd=executable(folder / "etcd", etcd),
        kwok=executable(folder / "kwok", never),
        kubelet=executable(folder / "kubelet", never),
        kube_proxy=executable(folder / "kube-proxy", never),
        stages_dir=stages_dir,
    )


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            found.append(int(entry.name))
    return found


def test_a_process_dying_at_start_up_is_reported_with_its_log(
    tmp_path: Path, stages_dir: Path
) -> None:
    binaries = fake_binaries(
        tmp_path / "bin", stages_dir, etcd='echo "etcd: unknown flag --bogus" >&2\nexit 2\n'
    )
    workdir = tmp_path / "work"

    with pytest.raises(ControlPlaneError, match="etcd exited with status 2") as failure:
        ControlPlane(binaries=binaries, workdir=workdir).start()

    assert "unknown flag --bogus" in str(failure.value)
    assert (workdir / "logs" / "etcd.log").is_file()  # a given work dir keeps its logs
    assert not (workdir / "state.json").exists()


def test_start_up_timeout_stops_what_started_and_removes_the_temp_dir(
    tmp_path: Path, stages_dir: Path
) -> None:
    binaries = fake_binaries(tmp_path / "bin", stages_dir, etcd="exec sleep 600\n")
    plane = ControlPlane(binaries=binaries, startup_timeout=0.5)

    with pytest.raises(ControlPlaneError, match=r"timed out .* etcd /health"):
        plane.start()

    assert processes_mentioning(str(tmp_path / "bin")) == []
    assert not plane.workdir.exists()


def test_start_refuses_missing_kwok_stages(tmp_path: Path, stages_dir: Path) -> None:
    binaries = fake_binaries(tmp_path / "bin", stages_dir, etcd="exec sleep 600\n")
    (stages_dir / "pod-delete.yaml").unlink()

    with pytest.raises(ControlPlaneError, match=r"pod-delete\.yaml"):
        ControlPlane(binaries=binaries, workdir=tmp_path / "work").start()

    assert processes_mentioning(str(tmp_path / "bin")) == []


def test_kubectl_failure_carries_its_stderr(tmp_path: Path) -> None:
    kubectl = executable(tmp_path / "kubectl", 'echo "error: nope" >&2\nexit 1\n')
    config = admin_kubeconfig("https://127.0.0.1:1", tmp_path / "ca.crt", "t")
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    plane = ControlPlane.attach(path, kubectl=str(kubectl))

    with pytest.raises(Exception, match="error: nope") as failure:
        plane.kubectl("get", "pods")

    assert failure.value.cmd == ["kubectl", "get", "pods"]  # type: ignore[attr-defined]
    assert plane.kubectl("get", "pods", check=False).returncode == 1
    plane.stop()


# ----------------------------------------------------------------------------- binaries


def build_dir(folder: Path) -> Path:
    folder.mkdir()
    for name in (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "etcd",
        "kwok",
        "kubelet",
        "kube-proxy",
    ):
        executable(folder / name, "exit 0\n")
    (folder / "stages").mkdir()
    return folder


def path_with_go(tmp_path: Path) -> str:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    executable(tools / "go", "exit 0\n")
    return f"{tools}:{os.environ['PATH']}"


def test_missing_go_is_reported_as_such(tmp_path: Path) -> None:
    with pytest.raises(BinariesUnavailable, match="Go is not installed") as failure:
        build_binaries(environ={"PATH": str(tmp_path)})

    assert failure.value.go_missing


def test_failed_build_quotes_the_end_of_its_output(tmp_path: Path) -> None:
    script = executable(tmp_path / "build.sh", 'echo "compile error in foo.go" >&2\nexit 3\n')
    progress = io.StringIO()

    with pytest.raises(BinariesUnavailable, match="exited with 3") as failure:
        build_binaries(script=script, progress=progress, environ={"PATH": path_with_go(tmp_path)})

    assert not failure.value.go_missing
    assert "compile error in foo.go" in str(failure.value)
    assert "compile error in foo.go" in progress.getvalue()


def test_build_returns_the_folder_it_printed_last(tmp_path: Path) -> None:
    folder = build_dir(tmp_path / "bin")
    script = executable(tmp_path / "build.sh", f'echo "[build] ok" >&2\necho "{folder}"\n')

    binaries = build_binaries(
        script=script, progress=io.StringIO(), environ={"PATH": path_with_go(tmp_path)}
    )

    assert binaries == Binaries.in_directory(folder)
    assert binaries.kwok == folder / "kwok"


def test_build_that_prints_no_folder_is_an_error(tmp_path: Path) -> None:
    script = executable(tmp_path / "build.sh", "exit 0\n")

    with pytest.raises(BinariesUnavailable, match="no binary folder"):
        build_binaries(
            script=script, progress=io.StringIO(), environ={"PATH": path_with_go(tmp_path)}
        )


def test_incomplete_binary_folder_lists_what_is_missing(tmp_path: Path) -> None:
    folder = build_dir(tmp_path / "bin")
    (folder / "kwok").unlink()
    (folder / "stages").rmdir()

    with pytest.raises(BinariesUnavailable, match="kwok, stages/"):
        Binaries.in_directory(folder)


def test_binary_folder_from_the_environment_skips_the_build(tmp_path: Path) -> None:
    folder = build_dir(tmp_path / "bin")

    binaries = ensure_binaries(
        script=tmp_path / "no-such-script.sh", environ={BIN_DIR_ENV: str(folder), "PATH": ""}
    )

    assert binaries.etcd == folder / "etcd"


# ----------------------------------------------------------------------------- orphans


def start_ticks(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[19])


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def orphan_candidate(root: Path, name: str, pid: int, owner: dict[str, int] | None) -> Path:
    workdir = root / f"torchgate-cp-{name}"
    workdir.mkdir()
    process = ManagedProcess("etcd", pid, start_ticks(pid), workdir / "etcd.log")
    state = {
        "version": 1,
        "server": "https://127.0.0.1:1",
        "token": "t",
        "ca_file": str(workdir / "ca.crt"),
        "kubeconfig": str(workdir / "kubeconfig"),
        "startup_seconds": None,
        "detached": owner is None,
        "owner": owner,
        "owns_workdir": True,
        "processes": [process.to_json()],
    }
    (workdir / "state.json").write_text(json.dumps(state))
    return workdir


def test_control_planes_of_a_dead_owner_are_stopped_and_others_left_alone(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        orphan, owned, detached = (
            stack.enter_context(subprocess.Popen(["sleep", "600"], start_new_session=True))
            for _ in range(3)
        )
        with subprocess.Popen(["true"]) as gone:
            gone.wait()
        dead_owner = {"pid": gone.pid, "start_ticks": 1}
        live_owner = {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}
        orphan_dir = orphan_candidate(tmp_path, "orphan", orphan.pid, dead_owner)
        orphan_candidate(tmp_path, "owned", owned.pid, live_owner)
        orphan_candidate(tmp_path, "detached", detached.pid, None)

        stopped = ControlPlane.stop_orphans(tmp_path)

        assert stopped == [orphan_dir]
        assert not orphan_dir.exists()
        assert not alive(orphan.pid)
        assert alive(owned.pid)
        assert alive(detached.pid)
        for process in (owned, detached):
            process.kill()

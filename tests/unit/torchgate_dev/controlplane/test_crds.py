"""The CRDs the control plane installs: structural schemas, fields, columns, sample policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.torchgate_dev.controlplane.planefiles import (
    POLICY_CRD,
    PYTORCHJOB_CRD,
    SAMPLE_POLICY,
    load,
)
from torchgate.pytorchjob.policy import (
    JobDefaults,
    PlacementPolicy,
    QuarantineSettings,
    parse_policy,
)

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
    columns = version["additionalPrinterColumns"]
    shown = {c["name"]: c["jsonPath"] for c in columns if not c.get("priority")}
    assert shown == {
        "State": ".status.conditions[-1:].type",
        "Age": ".metadata.creationTimestamp",
    }
    # torchgate's own columns only with -o wide, read from the Queued condition (no new field).
    wide = {c["name"]: c["jsonPath"] for c in columns if c.get("priority") == 1}
    assert wide == {
        "Waiting-For": '.status.conditions[?(@.type=="Queued")].reason',
        "Queue": '.status.conditions[?(@.type=="Queued")].message',
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
    "gpu_device_classes": ".spec.gpuDeviceClasses",
    "rdma_resources": ".spec.rdmaResources",
    "shared_memory_size_limit": ".spec.sharedMemory.sizeLimit",
    "allowed_host_paths": ".spec.allowedHostPaths",
    "allow_privileged": ".spec.allowPrivileged",
    "allow_clean_pod_policy_none": ".spec.allowCleanPodPolicyNone",
    "job_defaults": ".spec.jobDefaults",
    "preemption": ".spec.preemption",
    "topology": ".spec.topology",
    "quarantine": ".spec.quarantine",
    "progress_deadline_seconds": ".spec.progressDeadlineSeconds",
}
QUARANTINE_FIELDS = {
    "faults": "faults",
    "window_seconds": "windowSeconds",
    "cooldown_seconds": "cooldownSeconds",
    "stuck_pod_seconds": "stuckPodSeconds",
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
    attributes = {f.name for f in dataclasses.fields(PlacementPolicy) if f.init} - {"name"}
    defaults = {f.name for f in dataclasses.fields(JobDefaults)}

    assert attributes == set(POLICY_FIELDS)
    assert defaults == set(JOB_DEFAULT_FIELDS)
    for path in POLICY_FIELDS.values():
        node_at(schema, path)
    job_defaults = node_at(schema, ".spec.jobDefaults")["properties"]
    assert set(job_defaults) == set(JOB_DEFAULT_FIELDS.values())
    assert {f.name for f in dataclasses.fields(QuarantineSettings)} == set(QUARANTINE_FIELDS)
    quarantine = node_at(schema, ".spec.quarantine")["properties"]
    assert {k: v["type"] for k, v in quarantine.items()} == dict.fromkeys(
        QUARANTINE_FIELDS.values(), "integer"
    )
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

"""The pool-sharing CRDs (TeamQuota, PlacementPolicy's preemption and topology) and samples.

The CRD schemas type every field the parsers read, and every TeamQuota the parser accepts fits
its CRD (as the apiserver would prune and validate it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import manifestset as ms
from torchgate_dev import devcluster, packagedata

REPO_ROOT = ms.REPO_ROOT
CANONICAL_CRDS = REPO_ROOT / "manifests" / "crds"

# ------------------------------------------------------------------------ pool-sharing CRDs

TEAMQUOTA_CRD = CANONICAL_CRDS / "torchgate.io_teamquotas.yaml"
POLICY_CRD = CANONICAL_CRDS / "torchgate.io_placementpolicies.yaml"
SAMPLES = REPO_ROOT / "manifests" / "samples"


def crd_version(path: Path) -> dict[str, Any]:
    (version,) = yaml.safe_load(path.read_text(encoding="utf-8"))["spec"]["versions"]
    return dict(version)


def crd_schema(path: Path) -> dict[str, Any]:
    return dict(crd_version(path)["schema"]["openAPIV3Schema"])


def schema_node(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    """The schema node at ``.spec.x.y`` (``[]`` steps into list items)."""
    node = schema
    for step in dotted.strip(".").split("."):
        items = step.endswith("[]")
        node = node["properties"][step.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


def conformance_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Where ``value`` breaks a structural schema (types, required, minimum), like the apiserver.

    Enough of OpenAPI v3 for torchgate's CRDs: ``type``, ``properties`` (unknown fields would be
    pruned, not refused, and so would ``null`` values), ``items``, ``additionalProperties``,
    ``required``, ``minimum``, ``enum`` and int-or-string.
    """
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [f"{path}: not an int or a string"]
    kind = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    if kind in checks and not checks[kind](value):
        return [f"{path}: not {kind}"]
    errors: list[str] = []
    if kind == "integer" and "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: below {schema['minimum']}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: not one of {schema['enum']}")
    if kind == "object":
        errors += [
            f"{path}.{key}: required" for key in schema.get("required", ()) if key not in value
        ]
        for key, child in value.items():
            if child is None:
                continue  # the apiserver prunes a null of a non-nullable field before validating
            if key in schema.get("properties", {}):
                errors += conformance_errors(child, schema["properties"][key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += conformance_errors(child, schema["additionalProperties"], f"{path}.{key}")
    if kind == "array" and "items" in schema:
        for index, item in enumerate(value):
            errors += conformance_errors(item, schema["items"], f"{path}[{index}]")
    return errors


def test_teamquota_crd_is_cluster_scoped_with_status_and_the_documented_columns() -> None:
    crd = yaml.safe_load(TEAMQUOTA_CRD.read_text(encoding="utf-8"))
    version = crd_version(TEAMQUOTA_CRD)
    assert crd["metadata"]["name"] == "teamquotas.torchgate.io"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == "TeamQuota"
    assert crd["spec"]["names"]["shortNames"] == ["tq"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    # docs/pool-sharing.md: NAME COHORT NOMINAL BORROW-LIMIT USED BORROWED OVER-QUOTA WAITING AGE
    columns = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Cohort", ".spec.cohort"),
        ("Nominal", ".spec.nominalGPUs"),
        ("Borrow-Limit", ".spec.borrowingLimitGPUs"),
        ("Used", ".status.usedGPUs"),
        ("Borrowed", ".status.borrowedGPUs"),
        ("Over-Quota", ".status.overQuotaGPUs"),
        ("Waiting", ".status.waitingJobs"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    schema = crd_schema(TEAMQUOTA_CRD)
    for column in version["additionalPrinterColumns"]:
        if not column["jsonPath"].startswith(".metadata"):
            assert schema_node(schema, column["jsonPath"])["type"] == column["type"], column


def test_teamquota_crd_types_every_field_the_parser_reads() -> None:
    schema = crd_schema(TEAMQUOTA_CRD)
    spec = schema_node(schema, ".spec")
    assert set(spec["properties"]) == {
        "namespaces",
        "cohort",
        "nominalGPUs",
        "borrowingLimitGPUs",
        "resources",
    }
    assert spec["required"] == ["namespaces", "nominalGPUs"]
    resource = schema_node(schema, ".spec.resources[]")
    assert set(resource["properties"]) == {"name", "nominal", "borrowingLimit"}
    assert resource["properties"]["nominal"]["x-kubernetes-int-or-string"] is True
    # The status fields the controller writes (admission/poolsource.py), and its conditions.
    status = schema_node(schema, ".status")["properties"]
    assert {"usedGPUs", "borrowedGPUs", "overQuotaGPUs", "admittedJobs", "waitingJobs"} <= set(
        status
    )
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    for path, node in _walk(schema):
        typed = "type" in node or node.get("x-kubernetes-int-or-string") is True
        assert typed, f"{path or '<root>'} has no type (not a structural schema)"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)]
    for name, child in schema.get("properties", {}).items():
        found += _walk(child, f"{path}.{name}")
    if "items" in schema:
        found += _walk(schema["items"], f"{path}[]")
    return found


def test_policy_crd_types_the_preemption_and_topology_sections() -> None:
    schema = crd_schema(POLICY_CRD)
    preemption = schema_node(schema, ".spec.preemption")["properties"]
    topology = schema_node(schema, ".spec.topology")["properties"]
    assert {k: v["type"] for k, v in preemption.items()} == {
        "minimumRunSeconds": "integer",
        "neverPreemptPriority": "integer",
    }
    assert {k: v["type"] for k, v in topology.items()} == {
        "levels": "array",
        "defaultLevel": "string",
        "defaultMode": "string",
    }
    assert topology["levels"]["items"] == {"type": "string"}


@pytest.mark.parametrize(
    "sample", [SAMPLES / "teamquota.yaml", packagedata.SAMPLE_POLICY], ids=lambda path: path.name
)
def test_pool_sharing_samples_parse_cleanly_and_fit_their_crds(sample: Path) -> None:
    from torchgate.pytorchjob.policy import parse_policy
    from torchgate.pytorchjob.pool import parse_team_quota, resolve_teams

    documents = list(yaml.safe_load_all(sample.read_text(encoding="utf-8")))
    quotas = []
    for document in documents:
        if document["kind"] == "TeamQuota":
            quota, errors = parse_team_quota(document)
            schema = crd_schema(TEAMQUOTA_CRD)
            quotas.append(quota)
        else:
            _, errors = parse_policy(document)
            schema = crd_schema(POLICY_CRD)
        assert errors == []
        assert conformance_errors(document, schema) == []
    assert len(quotas) == 2, "a pair of teams"
    assert resolve_teams(q for q in quotas if q is not None).errors == {}


def test_dev_policy_lists_the_fake_pools_topology_levels() -> None:
    documents = yaml.safe_load_all(packagedata.SAMPLE_POLICY.read_text("utf-8"))
    (dev_policy,) = [d for d in documents if d["metadata"]["name"] == "dev-a100"]
    assert tuple(dev_policy["spec"]["topology"]["levels"]) == devcluster.TOPOLOGY_LEVELS


_quantity = st.one_of(
    st.integers(0, 10**6), st.sampled_from(["1", "500m", "64Gi", "2.5", "1e3", "-1", "x"])
)


@settings(max_examples=150, deadline=None)
@given(
    spec=st.fixed_dictionaries(
        {},
        optional={
            "namespaces": st.one_of(
                st.lists(st.sampled_from(["a", "b", "team-c", ""]), max_size=3),
                st.just("a"),
                st.just(None),
            ),
            "cohort": st.sampled_from(["dev", "h100", "Not_A_Label", "", 3]),
            "nominalGPUs": st.one_of(st.integers(-2, 64), st.just("8"), st.just(1.5)),
            "borrowingLimitGPUs": st.one_of(st.integers(-2, 64), st.none()),
            "resources": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["cpu", "memory", "gpus"])},
                    optional={"nominal": _quantity, "borrowingLimit": _quantity},
                ),
                max_size=2,
            ),
        },
    )
)
def test_every_team_quota_the_parser_accepts_fits_the_crd(spec: dict[str, Any]) -> None:
    # The CRD never refuses what the webhook and controller would use: a stricter schema would
    # make a valid quota impossible to create.
    from torchgate.pytorchjob.pool import parse_team_quota

    document: dict[str, Any] = {"apiVersion": "torchgate.io/v1alpha1", "kind": "TeamQuota"}
    document |= {"metadata": {"name": "t"}, "spec": spec}
    quota, _ = parse_team_quota(document)
    if quota is not None:
        assert conformance_errors(document, crd_schema(TEAMQUOTA_CRD)) == []

"""The chart's schemas of ``placementPolicies[].spec``, ``teamQuotas[].spec``: the CRDs', closed.

The CRDs (manifests/crds/torchgate.io_placementpolicies.yaml, torchgate.io_teamquotas.yaml) are
the one declaration of each kind's fields and types. The apiserver prunes a field the CRD does not
know, and Helm 3 creates objects without strict field validation, so a misspelt field
(``nodeSelecter``, ``nominalGPU``) would be dropped with only a log line and the policy would
silently place jobs anywhere, the quota hold its team to nothing. The chart's values.schema.json
therefore carries each CRD's spec schema with ``additionalProperties: false`` on every object
whose properties it lists: ``helm install`` and ``helm template`` refuse the typo (and a wrong
type, and a missing required field) before anything is created. :func:`closed_spec_schema`
derives that copy; tests/unit/test_chart_policies.py and test_chart_quotas.py check the chart's
copies equal it. ``python -m tests.chartschema [placementPolicies|teamQuotas]`` prints it.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CRDS = REPO_ROOT / "manifests" / "crds"
POLICY_CRD = CRDS / "torchgate.io_placementpolicies.yaml"
QUOTA_CRD = CRDS / "torchgate.io_teamquotas.yaml"
VALUES_SCHEMA = REPO_ROOT / "manifests" / "chart" / "torchgate" / "values.schema.json"
# The chart's list values of cluster objects -> the CRD each entry's spec follows.
CRD_OF_VALUE = {"placementPolicies": POLICY_CRD, "teamQuotas": QUOTA_CRD}


def crd_spec_schema(value: str) -> dict[str, Any]:
    """The openAPIV3Schema node for ``spec`` of the CRD behind ``value`` (its only version)."""
    crd = yaml.safe_load(CRD_OF_VALUE[value].read_text(encoding="utf-8"))
    (version,) = crd["spec"]["versions"]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``additionalProperties: false`` wherever it lists an object's properties."""
    node = copy.deepcopy(schema)
    if "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    for name, child in node.get("properties", {}).items():
        node["properties"][name] = closed(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = closed(node[key])
    return node


def closed_spec_schema(value: str) -> dict[str, Any]:
    """What values.schema.json must say of ``<value>[].spec``."""
    return closed(crd_spec_schema(value))


def chart_spec_schema(value: str) -> dict[str, Any]:
    """What values.schema.json says of ``<value>[].spec``."""
    schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    spec: dict[str, Any] = schema["properties"][value]["items"]["properties"]["spec"]
    return spec


def crd_policy_spec_schema() -> dict[str, Any]:
    """The PlacementPolicy CRD's ``spec`` schema."""
    return crd_spec_schema("placementPolicies")


def closed_policy_spec_schema() -> dict[str, Any]:
    """What values.schema.json must say of ``placementPolicies[].spec``."""
    return closed_spec_schema("placementPolicies")


def chart_policy_spec_schema() -> dict[str, Any]:
    """What values.schema.json says of ``placementPolicies[].spec``."""
    return chart_spec_schema("placementPolicies")


if __name__ == "__main__":
    value = sys.argv[1] if len(sys.argv) > 1 else "placementPolicies"
    print(json.dumps(closed_spec_schema(value), indent=2))

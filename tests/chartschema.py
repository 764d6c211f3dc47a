"""The chart's schema for ``placementPolicies[].spec``: the PlacementPolicy CRD's, closed.

The CRD (manifests/crds/torchgate.io_placementpolicies.yaml) is the one declaration of a
policy's fields and types. The apiserver prunes a field the CRD does not know, and Helm 3 creates
objects without strict field validation, so a misspelt field (``nodeSelecter``) would be dropped
with only a log line and the policy would silently place jobs anywhere. The chart's
values.schema.json therefore carries the CRD's spec schema with ``additionalProperties: false``
on every object whose properties it lists: ``helm install`` and ``helm template`` refuse the typo
(and a wrong type) before anything is created. :func:`closed_policy_spec_schema` derives that
copy; tests/unit/test_chart_policies.py checks the chart's copy equals it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
POLICY_CRD = REPO_ROOT / "manifests" / "crds" / "torchgate.io_placementpolicies.yaml"
VALUES_SCHEMA = REPO_ROOT / "manifests" / "chart" / "torchgate" / "values.schema.json"


def crd_policy_spec_schema() -> dict[str, Any]:
    """The CRD's openAPIV3Schema node for ``spec`` (its only version)."""
    crd = yaml.safe_load(POLICY_CRD.read_text(encoding="utf-8"))
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


def closed_policy_spec_schema() -> dict[str, Any]:
    """What values.schema.json must say of ``placementPolicies[].spec``."""
    return closed(crd_policy_spec_schema())


def chart_policy_spec_schema() -> dict[str, Any]:
    """What values.schema.json says of ``placementPolicies[].spec``."""
    schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    spec: dict[str, Any] = schema["properties"]["placementPolicies"]["items"]["properties"]["spec"]
    return spec


if __name__ == "__main__":
    print(json.dumps(closed_policy_spec_schema(), indent=2))

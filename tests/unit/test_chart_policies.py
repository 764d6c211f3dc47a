"""The chart refuses a ``placementPolicies`` entry the PlacementPolicy CRD would not keep whole.

Without it, ``helm install`` with a misspelt field (``nodeSelecter``) succeeded: the apiserver
pruned the field, Helm logged one ``unknown field`` line, and the stored policy placed its
namespaces' jobs on any node. A wrong type failed only halfway through the install, after the
webhook configurations were created. Now values.schema.json carries the CRD's spec schema,
closed (tests/chartschema.py), so both stop ``helm install``/``helm template`` first, naming the
value; every field the CRD declares is still accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.chartschema import (
    chart_policy_spec_schema,
    closed_policy_spec_schema,
    crd_policy_spec_schema,
)
from tests.helmtool import CHART, run_helm


def test_the_charts_policy_schema_is_the_crds_closed() -> None:
    expected = closed_policy_spec_schema()
    assert chart_policy_spec_schema() == expected, (
        "out of date: replace placementPolicies.items.properties.spec in values.schema.json "
        "with the output of `python -m tests.chartschema`"
    )


def example(schema: dict[str, Any]) -> Any:
    """A value of every field ``schema`` declares (the widest policy the CRD keeps)."""
    if schema.get("x-kubernetes-int-or-string"):
        return "1Gi"
    if "enum" in schema:
        return schema["enum"][-1]
    kind = schema["type"]
    if kind == "object":
        if "properties" in schema:
            return {name: example(child) for name, child in schema["properties"].items()}
        return {"example.com/key": example(schema["additionalProperties"])}
    if kind == "array":
        return [example(schema["items"])]
    return {"string": "value", "integer": 1, "boolean": True}[kind]


def render_policy(tmp_path: Path, spec: Any) -> tuple[int, str, list[ms.Obj]]:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"placementPolicies": [{"name": "p1", "spec": spec}]}), encoding="utf-8"
    )
    result = run_helm("template", "torchgate", str(CHART), f"--values={values}", check=False)
    objects = ms.parse_documents(result.stdout) if result.returncode == 0 else []
    return result.returncode, result.stderr, objects


def test_every_field_the_crd_declares_is_accepted(tmp_path: Path) -> None:
    spec = example(crd_policy_spec_schema())
    returncode, stderr, objects = render_policy(tmp_path, spec)
    assert returncode == 0, stderr
    assert ms.find(objects, "PlacementPolicy", "p1")["spec"] == spec


@pytest.mark.parametrize(
    ("spec", "refused_at"),
    [
        ({"nodeSelecter": {"pool": "h100"}, "priority": 10}, "/placementPolicies/0/spec"),
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "efect": "NoSchedule"}]},
            "/placementPolicies/0/spec/tolerations/0",
        ),
        ({"jobDefaults": {"cleanpodPolicy": "None"}}, "/placementPolicies/0/spec/jobDefaults"),
        ({"quarantine": {"window": 600}}, "/placementPolicies/0/spec/quarantine"),
        ({"priority": "high"}, "/placementPolicies/0/spec/priority"),
        ({"namespaces": "team-vision"}, "/placementPolicies/0/spec/namespaces"),
        ({"maxGPUsPerJob": 8.5}, "/placementPolicies/0/spec/maxGPUsPerJob"),
    ],
    ids=[
        "misspelt-field",
        "misspelt-toleration-field",
        "misspelt-job-default",
        "misspelt-quarantine-field",
        "string-for-integer",
        "string-for-list",
        "fraction-for-integer",
    ],
)
def test_a_policy_the_crd_would_not_keep_whole_is_refused_naming_the_value(
    tmp_path: Path, spec: dict[str, Any], refused_at: str
) -> None:
    returncode, stderr, _ = render_policy(tmp_path, spec)
    assert returncode != 0
    assert f"at '{refused_at}'" in stderr

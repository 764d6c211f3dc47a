"""The chart creates the pool's TeamQuotas from ``teamQuotas``, installable with its CRDs.

An admin who keeps the pool's configuration in one values file could list PlacementPolicies but
not TeamQuotas, and neither could be listed for a first install: Helm builds every object of a
release before creating any, so a PlacementPolicy or TeamQuota beside the CRDs that define them
stopped ``helm install`` whole (``no matches for kind``). Now ``teamQuotas`` entries are held
to the TeamQuota CRD by the schema (tests/chartschema.py), as ``placementPolicies`` entries are
to theirs, and both kinds are a post-install hook exactly when the install brings their CRD,
carrying the release's ownership metadata so the next ``helm upgrade`` adopts them as ordinary
objects of the release (tests/e2e/test_helm_pool_values.py installs, enforces and upgrades one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.chartschema import chart_spec_schema, closed_spec_schema, crd_spec_schema
from tests.helmtool import CHART, run_helm
from tests.unit.test_chart_policies import example

HOOK = "helm.sh/hook"
SERVED = "--api-versions=torchgate.io/v1alpha1/PlacementPolicy,torchgate.io/v1alpha1/TeamQuota"


def test_the_charts_quota_schema_is_the_crds_closed() -> None:
    assert chart_spec_schema("teamQuotas") == closed_spec_schema("teamQuotas"), (
        "out of date: replace teamQuotas.items.properties.spec in values.schema.json "
        "with the output of `python -m tests.chartschema teamQuotas`"
    )


def render(tmp_path: Path, values: dict[str, Any], *args: str) -> tuple[int, str, list[ms.Obj]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    result = run_helm(
        "template", "torchgate", str(CHART), "--namespace=pool-admin", f"--values={path}", *args,
        check=False,
    )  # fmt: skip
    objects = ms.parse_documents(result.stdout) if result.returncode == 0 else []
    return result.returncode, result.stderr, objects


def render_quota(tmp_path: Path, spec: Any) -> tuple[int, str, list[ms.Obj]]:
    return render(tmp_path, {"teamQuotas": [{"name": "vision", "spec": spec}]})


def test_every_field_the_crd_declares_is_accepted(tmp_path: Path) -> None:
    spec = example(crd_spec_schema("teamQuotas"))
    returncode, stderr, objects = render_quota(tmp_path, spec)
    assert returncode == 0, stderr
    assert ms.find(objects, "TeamQuota", "vision")["spec"] == spec


@pytest.mark.parametrize(
    ("spec", "refused_at"),
    [
        ({"namespaces": ["team-vision"], "nominalGPU": 32}, "/teamQuotas/0/spec"),
        ({"namespaces": ["team-vision"]}, "/teamQuotas/0/spec"),
        ({"namespaces": "team-vision", "nominalGPUs": 32}, "/teamQuotas/0/spec/namespaces"),
        ({"namespaces": ["team-vision"], "nominalGPUs": "32"}, "/teamQuotas/0/spec/nominalGPUs"),
        ({"namespaces": ["team-vision"], "nominalGPUs": -8}, "/teamQuotas/0/spec/nominalGPUs"),
        (
            {"namespaces": ["v"], "nominalGPUs": 8, "resources": [{"name": "cpu", "nominl": 64}]},
            "/teamQuotas/0/spec/resources/0",
        ),
    ],
    ids=[
        "misspelt-field",
        "missing-nominal",
        "string-for-list",
        "string-for-integer",
        "negative-count",
        "misspelt-resource-field",
    ],
)
def test_a_quota_the_crd_would_not_keep_whole_is_refused_naming_the_value(
    tmp_path: Path, spec: dict[str, Any], refused_at: str
) -> None:
    returncode, stderr, _ = render_quota(tmp_path, spec)
    assert returncode != 0
    assert f"at '{refused_at}'" in stderr


POOL_VALUES = {
    "placementPolicies": [{"name": "research", "spec": {"namespaces": ["team-vision"]}}],
    "teamQuotas": [{"name": "vision", "spec": {"namespaces": ["team-vision"], "nominalGPUs": 8}}],
}


def pool_objects(objects: list[ms.Obj]) -> list[ms.Obj]:
    return [
        ms.find(objects, "PlacementPolicy", "research"),
        ms.find(objects, "TeamQuota", "vision"),
    ]


def test_a_first_install_bringing_the_crds_creates_them_after_it_owned_by_the_release(
    tmp_path: Path,
) -> None:
    returncode, stderr, objects = render(tmp_path, POOL_VALUES)
    assert returncode == 0, stderr
    for obj in pool_objects(objects):
        annotations = obj["metadata"]["annotations"]
        assert annotations[HOOK] == "post-install", ms.identity(obj)
        # What `helm upgrade` requires to adopt an existing object into the release.
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert annotations["meta.helm.sh/release-name"] == "torchgate"
        assert annotations["meta.helm.sh/release-namespace"] == "pool-admin"


@pytest.mark.parametrize(
    "args", [(SERVED,), ("--is-upgrade",)], ids=["install-onto-served-crds", "upgrade"]
)
def test_they_are_ordinary_objects_of_the_release_once_their_kinds_are_served(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    returncode, stderr, objects = render(tmp_path, POOL_VALUES, *args)
    assert returncode == 0, stderr
    for obj in pool_objects(objects):
        assert HOOK not in obj["metadata"].get("annotations", {}), ms.identity(obj)

"""The rendered install manifests, every way a cluster admin can produce them.

One place that knows the renderings (kustomize base and overlays, the Helm chart with the value
combinations that mirror the overlays), so unit tests check invariants on all of them and e2e
tests apply the same objects. Rendering shells out to ``kubectl kustomize`` and helm
(:mod:`tests.helmtool`); results are cached per process.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helmtool import helm_template

REPO_ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = REPO_ROOT / "manifests"
SAMPLE_POLICY = MANIFESTS / "samples" / "placementpolicy.yaml"
NAMESPACE = "torchgate-system"

KUSTOMIZATIONS: Mapping[str, Path] = {
    "base": MANIFESTS / "base",
    "overlays/default": MANIFESTS / "overlays" / "default",
    "overlays/with-pytorchjob-crd": MANIFESTS / "overlays" / "with-pytorchjob-crd",
    "overlays/cert-manager": MANIFESTS / "overlays" / "cert-manager",
    "overlays/network-policy": MANIFESTS / "overlays" / "network-policy",
    "overlays/monitoring": MANIFESTS / "overlays" / "monitoring",
}

# Helm value sets, named after the kustomization each must render the same objects as.
SAMPLE = "@sample"  # stands for a values file holding the sample PlacementPolicy
CHART_VALUES: Mapping[str, tuple[str, ...]] = {
    "base": (),
    "overlays/default": (SAMPLE,),
    "overlays/with-pytorchjob-crd": (
        SAMPLE,
        "--set=crds.pytorchJob=true",
        "--set=controller.manageUnowned=true",
    ),
    "overlays/cert-manager": (SAMPLE, "--set=certManager.enabled=true"),
    "overlays/network-policy": (SAMPLE, "--set=networkPolicy.enabled=true"),
    "overlays/monitoring": (
        SAMPLE,
        "--set=monitoring.dashboard=true",
        "--set=monitoring.ruleConfigMap=true",
        "--set=monitoring.prometheusRule=true",
    ),
}

# Labels and annotations only Helm adds (release bookkeeping); ignored when comparing.
HELM_ONLY_LABELS = frozenset(
    {
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    }
)
# The hook and ownership annotations: the chart's PlacementPolicies and TeamQuotas are a
# post-install hook when the CRDs come with the install (helm template renders that case),
# recording the install's revision (torchgate.installedInRevisionKey in the chart).
HELM_ONLY_ANNOTATIONS = frozenset(
    {
        "helm.sh/resource-policy",
        "helm.sh/hook",
        "helm.sh/hook-delete-policy",
        "meta.helm.sh/release-name",
        "meta.helm.sh/release-namespace",
        "torchgate.io/installed-in-revision",
    }
)

# Objects only the chart renders: its pre-delete hook, which stops the controller before Helm
# deletes its RBAC (README's kustomize uninstall scales it to zero by hand), and the Role that
# lets the hook scale it. (kind, name)
CHART_ONLY = frozenset(
    {
        ("Job", "torchgate-controller-stop"),
        ("Role", "torchgate-controller-stop"),
        ("RoleBinding", "torchgate-controller-stop"),
    }
)

Obj = dict[str, Any]


def parse_documents(text: str) -> list[Obj]:
    """The non-empty YAML documents of a stream."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kubectl_executable() -> str:
    """Kubectl on PATH (it carries kustomize), or skip."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl (with its built-in kustomize) is not on PATH")
    return found


@functools.cache
def _kustomize_text(directory: Path) -> str:
    result = subprocess.run(
        [kubectl_executable(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return result.stdout


def kustomize(name: str) -> list[Obj]:
    """The objects of one kustomization (see :data:`KUSTOMIZATIONS`)."""
    return parse_documents(_kustomize_text(KUSTOMIZATIONS[name]))


def sample_policy_values() -> Obj:
    """Chart values that create manifests/samples/placementpolicy.yaml."""
    sample = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))
    return {"placementPolicies": [{"name": sample["metadata"]["name"], "spec": sample["spec"]}]}


@functools.cache
def _chart_text(values: tuple[str, ...]) -> str:
    with tempfile.TemporaryDirectory(prefix="torchgate-values-") as scratch:
        sample_file = Path(scratch) / "sample.yaml"
        sample_file.write_text(yaml.safe_dump(sample_policy_values()), encoding="utf-8")
        arguments: list[str] = []
        for value in values:
            arguments += ["--values", str(sample_file)] if value == SAMPLE else [value]
        return helm_template(arguments)


def chart(values: Sequence[str] = ()) -> list[Obj]:
    """The chart rendered with extra helm arguments (:data:`SAMPLE` for the sample policy)."""
    return parse_documents(_chart_text(tuple(values)))


def normalized(obj: Any) -> Any:
    """An object without Helm's release labels/annotations, empty maps dropped."""
    if isinstance(obj, Mapping):
        out: Obj = {}
        for key, value in obj.items():
            if key == "labels" and isinstance(value, Mapping):
                value = {k: v for k, v in value.items() if k not in HELM_ONLY_LABELS}
            if key == "annotations" and isinstance(value, Mapping):
                value = {k: v for k, v in value.items() if k not in HELM_ONLY_ANNOTATIONS}
            if isinstance(value, Mapping) and not value and key in ("labels", "annotations"):
                continue
            out[key] = normalized(value)
        return out
    if isinstance(obj, list):
        return [normalized(item) for item in obj]
    return obj


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    """(apiVersion, kind, namespace, name)."""
    metadata = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], metadata.get("namespace"), metadata["name"])


def by_identity(objects: Sequence[Obj]) -> dict[tuple[str, str, str | None, str], Obj]:
    """Objects keyed by :func:`identity`; duplicates are an error."""
    keyed: dict[tuple[str, str, str | None, str], Obj] = {}
    for obj in objects:
        key = identity(obj)
        if key in keyed:
            raise AssertionError(f"rendered twice: {key}")
        keyed[key] = obj
    return keyed


def find(objects: Sequence[Obj], kind: str, name: str) -> Obj:
    """The one object of that kind and name."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name}, found {len(found)}")
    return found[0]


RENDERING_IDS = (
    *(f"kustomize:{name}" for name in KUSTOMIZATIONS),
    *(f"helm:{name}" for name in CHART_VALUES),
)


def render(rendering_id: str) -> list[Obj]:
    """One rendering from :data:`RENDERING_IDS`."""
    tool, name = rendering_id.split(":", 1)
    return kustomize(name) if tool == "kustomize" else chart(CHART_VALUES[name])

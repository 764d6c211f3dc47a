"""The install renderings without installing: ``helm lint``, and server-side dry runs.

- ``helm lint`` passes for the chart's value combinations (no cluster needed).
- Every kustomization and chart rendering passes ``kubectl apply --server-side --dry-run=server``
  against the e2e cluster with no warning (Pod Security "restricted" included). cert-manager and
  the Prometheus operator are not installed there, so minimal stand-in CRDs for ``Certificate``
  and ``Issuer`` (``cert-manager.io/v1``) and ``PrometheusRule`` (``monitoring.coreos.com/v1``),
  any content accepted, let those objects be dry-run too: their kind, scope and namespace are
  checked, their owners' schemas are not.
- ``helm install`` with a misspelt PlacementPolicy field in the values stops at the chart's
  schema: no release, nothing created.

Installing for real, as README.md says, is test_install.py (collected after this module, as
these tests were when they lived there).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import manifestset as ms
from tests.e2e.conftest import Cluster
from tests.e2e.installation import (
    NAMESPACE,
    force_uninstall,
)
from tests.helmtool import CHART, run_helm

STAND_INS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    for group, kind, plural in (
        ("cert-manager.io", "Certificate", "certificates"),
        ("cert-manager.io", "Issuer", "issuers"),
        ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    )
]
STAND_IN_NAMES = [crd["metadata"]["name"] for crd in STAND_INS]


# --------------------------------------------------------------------------------- helm lint


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set=crds.pytorchJob=true", "--set=controller.manageUnowned=true"],
        ["--set=certManager.enabled=true"],
        ["--set=webhook.replicas=1", "--set=namespace.create=false"],
        [
            "--set=monitoring.dashboard=true",
            "--set=monitoring.ruleConfigMap=true",
            "--set=monitoring.prometheusRule=true",
        ],
    ],
    ids=["default", "with-pytorchjob-crd", "cert-manager", "single-replica", "monitoring"],
)
def test_helm_lint_passes(values: list[str]) -> None:
    result = run_helm("lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_catches_bad_values() -> None:
    # values.schema.json turns a typo or a wrong policy into a lint failure.
    result = run_helm("lint", str(CHART), "--set=webhook.failurePolicy=Sometimes", check=False)
    assert result.returncode != 0
    result = run_helm("lint", str(CHART), "--set=webhok.replicas=3", check=False)
    assert result.returncode != 0


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("image.repository=registry.example.com/torchgate:0.1.0", "/image/repository"),
        ("image.repository=torchgate@sha256:0123abcd", "/image/repository"),
        ("image.repository=registry.example.com/ torchgate", "/image/repository"),
        ("image.tag=sha256:0123abcd", "/image/tag"),
        ("image.tag=0.1.0 ", "/image/tag"),
    ],
    ids=["tag-in-repository", "digest-in-repository", "space", "digest-as-tag", "trailing-space"],
)
def test_an_image_that_could_never_be_pulled_is_refused_at_install(value: str, field: str) -> None:
    # The chart writes <repository>:<tag>; a repository with its own tag would give
    # "registry.example.com/torchgate:0.1.0:0.1.0", which the apiserver stores and the kubelet
    # refuses (InvalidImageName): no webhook replica ever ready, every PyTorchJob write refused.
    result = run_helm("template", "torchgate", str(CHART), f"--set={value}", check=False)
    assert result.returncode != 0
    assert f"at '{field}'" in result.stderr


@pytest.mark.parametrize(
    "repository",
    ["torchgate", "registry.example.com/torchgate", "localhost:5000/team/torchgate"],
)
def test_image_repositories_with_a_registry_port_and_a_path_are_accepted(repository: str) -> None:
    result = run_helm(
        "template", "torchgate", str(CHART), f"--set=image.repository={repository}",
        "--set=image.tag=0.1.1",
    )  # fmt: skip
    assert f"image: {repository}:0.1.1" in result.stdout


# ---------------------------------------------------------------------------- server dry runs


@pytest.fixture(scope="module")
def stand_in_crds(cluster: Cluster) -> Iterator[None]:
    """Minimal CRDs for cert-manager's and the Prometheus operator's kinds (module docstring)."""
    missing = [name for name in STAND_IN_NAMES if cluster.get("crd", name) is None]
    if missing:
        cluster.apply([crd for crd in STAND_INS if crd["metadata"]["name"] in missing])
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            *(f"crd/{name}" for name in missing),
        )  # fmt: skip
    yield
    if missing:
        cluster.kubectl("delete", "crd", *missing, "--ignore-not-found")


@pytest.fixture
def system_namespace(cluster: Cluster) -> Iterator[None]:
    """The torchgate namespace, for real (namespaced objects cannot be dry-run without it).

    Made here (with the install's Pod Security labels) and deleted again, unless it exists.
    """
    cluster.wait_for(
        lambda: (
            (cluster.get("namespace", NAMESPACE) or {}).get("status", {}).get("phase")
            != "Terminating"
        ),
        timeout=120,
        what=f"namespace {NAMESPACE} not terminating",
    )
    if cluster.get("namespace", NAMESPACE) is not None:
        yield
        return
    cluster.apply(ms.find(ms.kustomize("base"), "Namespace", NAMESPACE))
    try:
        yield
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


@pytest.mark.e2e
@pytest.mark.parametrize("rendering_id", ms.RENDERING_IDS)
def test_rendering_applies_cleanly_as_a_server_dry_run(
    cluster: Cluster, system_namespace: None, stand_in_crds: None, rendering_id: str
) -> None:
    objects = ms.render(rendering_id)
    result = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=torchgate-install",
        "-f", "-", "-o", "name",
        input=yaml.safe_dump_all(objects, sort_keys=False),
    )  # fmt: skip
    assert result.stderr.strip() == "", "no warnings (Pod Security restricted included)"
    applied = result.stdout.split()
    assert len(applied) == len(objects)
    # Nothing was stored: a dry run.
    assert cluster.get("deployment", "torchgate-webhook", NAMESPACE) is None
    assert cluster.get("validatingwebhookconfiguration", "torchgate") is None


@pytest.mark.e2e
def test_a_non_restricted_pod_would_be_warned_about(
    cluster: Cluster, system_namespace: None
) -> None:
    # Guards the test above: the namespace really enforces "restricted" and the warning shows.
    objects = ms.kustomize("base")
    webhook = ms.find(objects, "Deployment", "torchgate-webhook")
    webhook["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "allowPrivilegeEscalation"
    ] = True
    result = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", "-o", "name",
        input=json.dumps(webhook),
    )  # fmt: skip
    assert "would violate PodSecurity" in result.stderr


# ------------------------------------------------------------------------ refused at install


@pytest.mark.e2e
def test_a_misspelt_policy_field_stops_helm_install_before_anything_is_created(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Without the chart's policy schema, the apiserver pruned "nodeSelecter" (Helm 3 sends no
    # strict field validation; one "unknown field" log line) and the install succeeded with a
    # policy that placed jobs anywhere.
    values = tmp_path / "values.yaml"
    policy = {"name": "typo-h100", "spec": {"nodeSelecter": {"pool": "h100"}, "priority": 10}}
    values.write_text(yaml.safe_dump({"placementPolicies": [policy]}), encoding="utf-8")
    environment = {"KUBECONFIG": str(cluster.kubeconfig)}
    crds = ("placementpolicies.torchgate.io", "teamquotas.torchgate.io")
    # As README's helm-1-adopt-crds step does, so the install would otherwise go through.
    cluster.kubectl("label", "crd", *crds, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    cluster.kubectl(
        "annotate", "crd", *crds, "meta.helm.sh/release-name=torchgate",
        "meta.helm.sh/release-namespace=default", "--overwrite",
    )  # fmt: skip
    try:
        result = run_helm(
            "install", "torchgate", str(CHART), "--namespace", "default", f"--values={values}",
            env=environment, check=False, timeout=300,
        )  # fmt: skip
        assert result.returncode != 0
        assert "at '/placementPolicies/0/spec'" in result.stderr
        assert cluster.get("placementpolicy", "typo-h100") is None
        assert cluster.get("validatingwebhookconfiguration", "torchgate") is None
        releases = run_helm("list", "--all", "--namespace", "default", "-q", env=environment)
        assert releases.stdout.split() == []
    finally:
        force_uninstall(cluster)
        cluster.kubectl("delete", "placementpolicy", "typo-h100", "--ignore-not-found")
        cluster.kubectl("label", "crd", *crds, "app.kubernetes.io/managed-by-")
        cluster.kubectl(
            "annotate", "crd", *crds,
            "meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-",
        )  # fmt: skip

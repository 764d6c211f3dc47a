"""The install renderings without installing: ``helm lint``, and server-side dry runs.

- ``helm lint`` passes for the chart's value combinations (no cluster needed).
- Every kustomization and chart rendering passes ``kubectl apply --server-side --dry-run=server``
  against the e2e cluster with no warning (Pod Security "restricted" included). cert-manager is
  not installed there, so minimal stand-in CRDs for ``Certificate`` and ``Issuer``
  (``cert-manager.io/v1``, any content accepted) let those objects be dry-run too: their kind,
  scope and namespace are checked, cert-manager's own schema is not.

Installing for real, as README.md says, is test_install.py (collected after this module, as
these tests were when they lived there).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from tests import manifestset as ms
from tests.e2e.conftest import Cluster
from tests.e2e.installation import (
    NAMESPACE,
)
from tests.helmtool import CHART, run_helm

CERT_MANAGER_STAND_INS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
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
    for kind, plural in (("Certificate", "certificates"), ("Issuer", "issuers"))
]


# --------------------------------------------------------------------------------- helm lint


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set=crds.pytorchJob=true", "--set=controller.manageUnowned=true"],
        ["--set=certManager.enabled=true"],
        ["--set=webhook.replicas=1", "--set=namespace.create=false"],
    ],
    ids=["default", "with-pytorchjob-crd", "cert-manager", "single-replica"],
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


# ---------------------------------------------------------------------------- server dry runs


@pytest.fixture(scope="module")
def cert_manager_stand_ins(cluster: Cluster) -> Iterator[None]:
    """Minimal cert-manager.io/v1 Certificate and Issuer CRDs (see the module docstring)."""
    existing = cluster.get("crd", "certificates.cert-manager.io")
    if existing is None:
        cluster.apply(CERT_MANAGER_STAND_INS)
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io",
        )  # fmt: skip
    yield
    if existing is None:
        cluster.kubectl(
            "delete", "crd", "certificates.cert-manager.io", "issuers.cert-manager.io",
            "--ignore-not-found",
        )  # fmt: skip


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
    cluster: Cluster, system_namespace: None, cert_manager_stand_ins: None, rendering_id: str
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

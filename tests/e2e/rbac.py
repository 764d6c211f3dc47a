"""Run torchgate's components as their ServiceAccounts, with exactly the install's RBAC.

Why: a component tested with the admin kubeconfig can call anything, so a missing Role rule only
shows up on a real install, as a 403 in the middle of an admission or a reconcile. Tests that run
``torchgate controller`` / ``webhook`` / ``certs`` with the kubeconfig from
:func:`service_account_kubeconfig` are held to the RBAC of ``manifests/base``.

::

    kubeconfig = service_account_kubeconfig(cluster, "torchgate-system", "torchgate-controller")
    ControllerProcess(kubeconfig, ..., "--leader-election-namespace", "torchgate-system")

The grants name fixed objects (resourceNames): the Lease ``torchgate-controller``, the Secret
``torchgate-webhook-tls`` and the webhook configurations ``torchgate``, and namespaced ones live
in the ServiceAccount's namespace; components run this way must use those names (the defaults of
the install). Another ``namespace`` than ``torchgate-system`` gets the same RBAC there, with the
cluster-wide bindings renamed per namespace so that several such namespaces can coexist.
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Cluster
from torchgate_dev.controlplane.cluster import KUBECTL_ENV

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
BASE_NAMESPACE = "torchgate-system"
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
TOKEN_DURATION = "2h"


def base_rbac_objects(cluster: Cluster, namespace: str = BASE_NAMESPACE) -> list[dict[str, Any]]:
    """The Namespace, ServiceAccounts and RBAC of ``manifests/base``, moved to ``namespace``."""
    rendered = cluster.kubectl("kustomize", str(BASE)).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc and doc.get("kind") in RBAC_KINDS]
    if namespace == BASE_NAMESPACE:
        return objects
    return [_moved(obj, namespace) for obj in objects]


def _moved(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    moved = copy.deepcopy(dict(obj))
    metadata = moved["metadata"]
    if moved["kind"] == "Namespace":
        metadata["name"] = namespace
        metadata.setdefault("labels", {})["kubernetes.io/metadata.name"] = namespace
        return moved
    if metadata.get("namespace") == BASE_NAMESPACE:
        metadata["namespace"] = namespace
    elif moved["kind"] in ("ClusterRoleBinding", "RoleBinding"):
        # Cluster-wide (or in "default"): one binding per namespace, not one overwriting another.
        metadata["name"] = f"{metadata['name']}--{namespace}"
    for subject in moved.get("subjects", []):
        if subject.get("namespace") == BASE_NAMESPACE:
            subject["namespace"] = namespace
    return moved


def apply_base_rbac(cluster: Cluster, namespace: str = BASE_NAMESPACE) -> list[dict[str, Any]]:
    """Apply (server-side, idempotent) the base RBAC into ``namespace``; return the objects."""
    objects = base_rbac_objects(cluster, namespace)
    text = yaml.safe_dump_all(objects, sort_keys=False)
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=torchgate-e2e", "-f", "-", input=text
    )
    return objects


def _probe(objects: Sequence[Mapping[str, Any]], namespace: str, name: str) -> list[list[str]]:
    """One ``kubectl auth can-i`` per role bound to the account: true once RBAC is in effect."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    checks: list[list[str]] = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == name
            and s.get("namespace") == namespace
            for s in binding.get("subjects", [])
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace")
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        rule = role["rules"][0]
        group = rule["apiGroups"][0]
        resource = rule["resources"][0] + (f".{group}" if group else "")
        target = f"{resource}/{rule['resourceNames'][0]}" if rule.get("resourceNames") else resource
        checks.append(
            ["auth", "can-i", rule["verbs"][0], target, *(["--namespace", scope] if scope else [])]
        )
    return checks


def service_account_kubeconfig(cluster: Cluster, namespace: str, name: str) -> Path:
    """A kubeconfig that acts as ServiceAccount ``namespace/name``, with the install's RBAC.

    Applies the base RBAC (see the module docstring), asks the TokenRequest API for a token
    (valid 2 hours, bound to the ServiceAccount; no Secret is created) and writes a kubeconfig
    for it next to the cluster's own files. Returns once the apiserver authorizes the account's
    rules.

    Raises:
        ValueError: the base has no ServiceAccount ``name``.
    """
    objects = apply_base_rbac(cluster, namespace)
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    if name not in accounts:
        raise ValueError(f"no ServiceAccount {name!r} in {BASE}; there are {sorted(accounts)}")
    path = token_kubeconfig(cluster, namespace, name)
    user = f"system:serviceaccount:{namespace}:{name}"
    for check in _probe(objects, namespace, name):
        cluster.wait_for(
            functools.partial(_allowed, cluster, path, check),
            timeout=30,
            what=f"RBAC in effect for {user}: kubectl {' '.join(check)}",
        )
    return path


def token_kubeconfig(cluster: Cluster, namespace: str, name: str) -> Path:
    """A kubeconfig that acts as the existing ServiceAccount ``namespace/name``, whatever its RBAC.

    The token comes from the TokenRequest API (valid 2 hours; no Secret is created).
    """
    token = cluster.kubectl(
        "create", "token", name, "--namespace", namespace, f"--duration={TOKEN_DURATION}"
    ).stdout.strip()
    user = f"system:serviceaccount:{namespace}:{name}"
    cluster_entry: dict[str, Any] = {"server": cluster.plane.server}
    if cluster.plane.ca_file is not None:
        cluster_entry["certificate-authority"] = str(cluster.plane.ca_file)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "torchgate", "cluster": cluster_entry}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "torchgate", "user": user}}],
        "current-context": user,
    }
    directory = cluster.plane.workdir / "serviceaccounts"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{namespace}.{name}.kubeconfig"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        yaml.safe_dump(config, stream, sort_keys=False)
    return path


def _allowed(cluster: Cluster, kubeconfig: Path, check: Sequence[str]) -> bool:
    # As the account itself (its own kubeconfig), not by impersonation: what it will really get.
    kubectl = shutil.which(os.environ.get(KUBECTL_ENV) or "kubectl") or "kubectl"
    result = subprocess.run(
        [
            kubectl,
            f"--kubeconfig={kubeconfig}",
            f"--cache-dir={cluster.plane.workdir / 'kubectl-cache'}",
            *check,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.stdout.strip() == "yes"

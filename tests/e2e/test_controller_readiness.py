"""The controller's ``/readyz`` on the real control plane: what ``kubectl rollout`` waits for.

The controller runs as a ServiceAccount whose RBAC is granted piece by piece, so each state a
replica goes through lasts as long as the test wants: a candidate that cannot read its Lease
(not ready: it could never take over), a leader whose caches cannot list PriorityClasses yet
(not ready: it has not synced), then the full grant (ready). ``/healthz`` stays ok throughout:
none of these is helped by a restart.
"""

from __future__ import annotations

import copy
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess
from tests.e2e.rbac import base_rbac_objects, token_kubeconfig

pytestmark = pytest.mark.e2e
ACCOUNT = "controller"


def probe(process: ControllerProcess, route: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{process.metrics_port}{route}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def controller_role_without(cluster: Cluster, name: str, resource: str) -> dict[str, Any]:
    """The install's controller ClusterRole, renamed, without the rules naming ``resource``."""
    (role,) = [
        o
        for o in base_rbac_objects(cluster)
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "torchgate-controller"
    ]
    role = copy.deepcopy(role)
    role["metadata"] = {"name": name}
    role["rules"] = [r for r in role["rules"] if resource not in r["resources"]]
    return role


def binding(kind: str, name: str, namespace: str, role: str) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if kind == "RoleBinding" else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role" if kind == "RoleBinding" else "ClusterRole",
            "name": role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }


def role(kind: str, name: str, namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if kind == "Role" else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "rules": rules,
    }


def test_readyz_waits_for_the_lease_then_for_the_caches(cluster: Cluster, tmp_path: Path) -> None:
    namespace = cluster.new_namespace("readyz")
    granted = f"readyz-{namespace}"
    cluster.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT,
                                                                      "namespace": namespace}}
    )  # fmt: skip
    cluster.apply(controller_role_without(cluster, granted, "priorityclasses"))
    cluster.apply(binding("ClusterRoleBinding", granted, namespace, granted))
    kubeconfig = token_kubeconfig(cluster, namespace, ACCOUNT)
    process = ControllerProcess(
        kubeconfig,
        tmp_path,
        "--leader-election-namespace",
        namespace,
        "--leader-election-id",
        "readyz",
        leader_elect=True,
    ).start()
    try:
        # No RBAC on leases: it can never take over, so a rollout must not count it.
        cluster.wait_for(
            lambda: (
                probe(process, "/readyz")
                == (503, "standby: the leader Lease has not been read yet\n")
            ),
            what="a candidate that cannot read its Lease answering 503",
        )
        assert probe(process, "/healthz")[0] == 200

        lease_rules = [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "create", "update"],
            }
        ]
        cluster.apply(role("Role", "lease", namespace, lease_rules))
        cluster.apply(binding("RoleBinding", "lease", namespace, "lease"))
        # It leads now, but cannot list PriorityClasses: its caches are not synced.
        cluster.wait_for(
            lambda: probe(process, "/readyz") == (503, "leader: caches not synced yet\n"),
            timeout=60,
            what="the leader answering 503 while its caches cannot sync",
        )
        assert cluster.get("lease", "readyz", namespace) is not None
        assert probe(process, "/healthz")[0] == 200

        priority_rules = [
            {
                "apiGroups": ["scheduling.k8s.io"],
                "resources": ["priorityclasses"],
                "verbs": ["list", "watch"],
            }
        ]
        cluster.apply(role("ClusterRole", f"{granted}-pc", namespace, priority_rules))
        cluster.apply(binding("ClusterRoleBinding", f"{granted}-pc", namespace, f"{granted}-pc"))
        # The informer lists again within its backoff (at most 30 s): synced, ready.
        cluster.wait_for(
            lambda: probe(process, "/readyz") == (200, "ok\n"),
            timeout=90,
            what="the leader answering ok once its caches are synced",
        )
    finally:
        assert process.stop() == 0, process.log()
        for name in (granted, f"{granted}-pc"):
            cluster.kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found")

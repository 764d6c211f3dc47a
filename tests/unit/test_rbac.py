"""RBAC is exactly what the code needs: every call covered, nothing granted that nobody calls.

The needs are read from the source (tests/rbacmodel.py) and must equal the table below, which a
person wrote by reading the code: a new API call changes the scan, fails
``test_the_code_makes_exactly_the_calls_in_the_table`` and points at its line, so the table, the
Roles in manifests/ and the chart get updated together. Then, for every rendering (kustomize
base/overlays, Helm values), each need must be granted to the identity that runs it, and each
grant must serve a need, at the narrowest scope (a Role when one namespace suffices,
resourceNames when the object is always the same). The checks themselves are tested against
manifests with a rule removed or widened, so they cannot pass vacuously.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import pytest

from tests import manifestset as ms
from tests import rbacmodel as rm

# (component, group, resource, verb) -> where the code does it. Read from the code; the scan
# must agree. Namespaces and names come from the deployed flags (see rbacmodel.needs).
CALLS: dict[tuple[str, str, str, str], str] = {
    # controller/manager.py: Informer(api, RESOURCE) -> list + watch (torchgate/kube/informer.py)
    ("controller", "kubeflow.org", "pytorchjobs", "list"): "informer",
    ("controller", "kubeflow.org", "pytorchjobs", "watch"): "informer",
    ("controller", "", "pods", "list"): "informer (all namespaces: node capacity)",
    ("controller", "", "pods", "watch"): "informer",
    ("controller", "", "services", "list"): "informer (label-selected)",
    ("controller", "", "services", "watch"): "informer",
    ("controller", "", "nodes", "list"): "informer",
    ("controller", "", "nodes", "watch"): "informer",
    ("controller", "torchgate.io", "placementpolicies", "list"): "informer",
    ("controller", "torchgate.io", "placementpolicies", "watch"): "informer",
    ("controller", "torchgate.io", "teamquotas", "list"): "informer",
    ("controller", "torchgate.io", "teamquotas", "watch"): "informer",
    ("controller", "scheduling.k8s.io", "priorityclasses", "list"): "informer",
    ("controller", "scheduling.k8s.io", "priorityclasses", "watch"): "informer",
    ("controller", "resource.k8s.io", "deviceclasses", "list"): "informer (claimed GPUs)",
    ("controller", "resource.k8s.io", "deviceclasses", "watch"): "informer",
    ("controller", "resource.k8s.io", "resourceclaims", "list"): "informer (all namespaces)",
    ("controller", "resource.k8s.io", "resourceclaims", "watch"): "informer",
    ("controller", "resource.k8s.io", "resourceclaimtemplates", "list"): "informer",
    ("controller", "resource.k8s.io", "resourceclaimtemplates", "watch"): "informer",
    ("controller", "resource.k8s.io", "resourceslices", "list"): "informer (GPU capacity)",
    ("controller", "resource.k8s.io", "resourceslices", "watch"): "informer",
    ("controller", "resource.k8s.io", "devicetaintrules", "list"): "informer (devices out of use)",
    ("controller", "resource.k8s.io", "devicetaintrules", "watch"): "informer",
    # torchgate/controller/job/reconciler.py
    ("controller", "kubeflow.org", "pytorchjobs", "patch"): "restart-count annotation",
    ("controller", "kubeflow.org", "pytorchjobs", "delete"): "ttlSecondsAfterFinished",
    ("controller", "kubeflow.org", "pytorchjobs/status", "patch"): "status",
    ("controller", "", "pods", "create"): "_create(PODS)",
    ("controller", "", "pods", "delete"): "_delete(PODS)",
    ("controller", "", "services", "create"): "_create(SERVICES)",
    ("controller", "", "services", "delete"): "_delete(SERVICES)",
    ("controller", "", "services", "get"): "a Service of a job's Service name not the job's",
    ("controller", "", "services", "patch"): "_adopt: an orphaned Service of the job's",
    ("controller", "kubeflow.org", "pytorchjobs", "get"): "_adopt: the job read past the cache",
    ("controller", "", "events", "create"): "_record",
    ("controller", "scheduling.k8s.io", "workloads", "create"): "_create_object(WORKLOADS)",
    ("controller", "scheduling.k8s.io", "podgroups", "create"): "_create_object(POD_GROUPS)",
    ("controller", "scheduling.k8s.io", "podgroups", "deletecollection"): "older attempts",
    # torchgate/controller/admission/poolsource.py
    ("controller", "torchgate.io", "teamquotas/status", "patch"): "usage, borrowing, Valid",
    ("controller", "torchgate.io", "teamquotas", "patch"): "finalizer while gangs are admitted",
    ("controller", "apps", "deployments", "get"): "its own, as it stops: successor or uninstall",
    # torchgate/controller/stop.py (`torchgate controller stop`, the chart's pre-delete hook)
    ("controller stop", "apps", "deployments", "get"): "the Deployment: replicas, pod selector",
    ("controller stop", "apps", "deployments/scale", "patch"): "scale it to zero",
    ("controller stop", "", "pods", "list"): "its pods, until they are gone",
    ("controller stop", "torchgate.io", "teamquotas", "list"): "which still hold the finalizer",
    # torchgate/controller/quarantine/keeper.py
    ("controller", "", "nodes", "patch"): "quarantine taint, labels, faults annotation",
    # controller/poolservice.py (mark_leader) and kube/access.py (every caller of the pool service)
    ("controller", "", "pods", "patch"): "the leader label on its own pod; _adopt an orphan",
    ("controller", "authentication.k8s.io", "tokenreviews", "create"): "whose token",
    ("controller", "authorization.k8s.io", "subjectaccessreviews", "create"): "may they",
    # controller/leader.py
    ("controller", "coordination.k8s.io", "leases", "get"): "acquire/renew/release",
    ("controller", "coordination.k8s.io", "leases", "create"): "first acquire",
    ("controller", "coordination.k8s.io", "leases", "update"): "renew/release (PUT)",
    # webhook/policysource.py
    ("webhook", "torchgate.io", "placementpolicies", "list"): "informer",
    ("webhook", "torchgate.io", "placementpolicies", "watch"): "informer",
    ("webhook", "torchgate.io", "placementpolicies/status", "patch"): "Valid condition",
    ("webhook", "torchgate.io", "teamquotas", "list"): "informer (quota ceilings)",
    ("webhook", "torchgate.io", "teamquotas", "watch"): "informer",
    ("webhook", "resource.k8s.io", "deviceclasses", "list"): "informer (claimed GPUs)",
    ("webhook", "resource.k8s.io", "deviceclasses", "watch"): "informer",
    ("webhook", "resource.k8s.io", "resourceclaims", "list"): "informer (all namespaces)",
    ("webhook", "resource.k8s.io", "resourceclaims", "watch"): "informer",
    ("webhook", "resource.k8s.io", "resourceclaimtemplates", "list"): "informer",
    ("webhook", "resource.k8s.io", "resourceclaimtemplates", "watch"): "informer",
    ("webhook", "resource.k8s.io", "resourceclaimtemplates", "get"): "one the caches miss",
    ("webhook", "resource.k8s.io", "resourceclaims", "get"): "one the caches miss",
    ("webhook", "kubeflow.org", "pytorchjobs", "get"): "the job a scale review is about",
    ("webhook", "", "events", "create"): "invalid policy, namespace default",
    # certs/store.py
    ("certs", "", "secrets", "get"): "read_secret",
    ("certs", "", "secrets", "create"): "write_secret (absent)",
    ("certs", "", "secrets", "patch"): "write_secret (present)",
    ("certs", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"): "read",
    ("certs", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"): "caBundle",
    ("certs", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"): "read",
    (
        "certs",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "patch",
    ): "caBundle",
}


@pytest.fixture(scope="module")
def scan() -> rm.CodeScan:
    return rm.scan_code()


def test_the_code_makes_exactly_the_calls_in_the_table(scan: rm.CodeScan) -> None:
    found: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for component, group, resource, verb, _, where in scan.calls:
        found[(component, group, resource, verb)].append(where)
    new = {key: found[key] for key in sorted(set(found) - set(CALLS))}
    gone = sorted(set(CALLS) - set(found))
    assert not new, f"API calls missing from CALLS (and maybe from the Roles): {new}"
    assert not gone, f"CALLS lists calls the code no longer makes: {gone}"


def violations(objects: list[ms.Obj], scan: rm.CodeScan) -> list[str]:
    """Everything wrong with the RBAC of one rendering, one line each."""
    problems: list[str] = []
    account_of = rm.accounts(objects)
    needed = rm.needs(objects, scan)
    granted = rm.grants(objects)
    for need in needed:
        account = account_of[need.component]
        if not any(rm.covers(grant, need, account) for grant in granted):
            problems.append(f"not granted: {need} at {need.where}, to {account}")
    components_of: dict[str, set[str]] = defaultdict(set)
    for component, account in account_of.items():
        components_of[account].add(component)
    for grant in granted:
        served = [
            need
            for need in needed
            if need.component in components_of[grant.account]
            and rm.covers(grant, need, grant.account)
        ]
        if not served:
            exempt = any(
                (component, grant.group, grant.resource, grant.verb) in rm.ADMISSION_ONLY
                for component in components_of[grant.account]
            )
            if not exempt:
                problems.append(f"granted but never needed: {grant}")
            continue
        if grant.namespace is None and all(
            need.namespace not in (None, rm.ANY_NAMESPACE) for need in served
        ):
            namespaces = sorted({str(need.namespace) for need in served})
            problems.append(f"cluster-wide but only used in {namespaces}: {grant}")
        if (
            not grant.names
            and grant.verb in rm.NAMED_VERBS
            and all(need.name is not None for need in served)
        ):
            names = sorted({str(need.name) for need in served})
            problems.append(f"could be limited to resourceNames {names}: {grant}")
    for obj in objects:
        if obj["kind"] in ("Role", "ClusterRole") and rm.has_wildcard(obj):
            problems.append(f"wildcard in {obj['kind']} {obj['metadata']['name']}")
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            if (obj["kind"], obj["metadata"]["name"]) in rm.USER_BINDINGS:
                continue
            for subject in obj.get("subjects", []):
                if subject["kind"] != "ServiceAccount" or subject["namespace"] != ms.NAMESPACE:
                    problems.append(f"{obj['kind']} {obj['metadata']['name']} binds {subject}")
    return problems


@pytest.mark.parametrize("rendering_id", ms.RENDERING_IDS)
def test_rbac_is_exactly_what_the_deployed_code_needs(rendering_id: str, scan: rm.CodeScan) -> None:
    assert violations(ms.render(rendering_id), scan) == []


def test_each_component_runs_as_its_own_account() -> None:
    assert rm.accounts(ms.kustomize("base")) == {
        "webhook": "torchgate-webhook",
        "certs": "torchgate-webhook",
        "controller": "torchgate-controller",
    }
    assert rm.accounts(ms.kustomize("overlays/cert-manager")) == {
        "webhook": "torchgate-webhook",
        "controller": "torchgate-controller",
    }


def test_secrets_are_reachable_only_by_name_in_torchgates_namespace() -> None:
    for grant in rm.grants(ms.kustomize("base")):
        if grant.resource == "secrets":
            assert grant.namespace == ms.NAMESPACE, grant
            assert grant.verb == "create" or grant.names == ("torchgate-webhook-tls",), grant


# ------------------------------------------------------------- the checks can fail


def _rule_owner(objects: list[ms.Obj], kind: str, name: str) -> dict[str, Any]:
    return ms.find(objects, kind, name)


def test_a_missing_rule_is_reported(scan: rm.CodeScan) -> None:
    objects = copy.deepcopy(ms.kustomize("base"))
    role = _rule_owner(objects, "ClusterRole", "torchgate-controller")
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["nodes"]]
    found = violations(objects, scan)
    assert any("not granted: controller: list core/nodes" in line for line in found), found


def test_an_unused_verb_is_reported(scan: rm.CodeScan) -> None:
    objects = copy.deepcopy(ms.kustomize("base"))
    role = _rule_owner(objects, "ClusterRole", "torchgate-webhook")
    role["rules"][0]["verbs"].append("delete")
    found = violations(objects, scan)
    assert any(
        "never needed: torchgate-webhook: delete torchgate.io/placementpolicies" in line
        for line in found
    ), found


def test_a_cluster_wide_grant_for_one_namespace_is_reported(scan: rm.CodeScan) -> None:
    objects = copy.deepcopy(ms.kustomize("base"))
    role = _rule_owner(objects, "ClusterRole", "torchgate-controller")
    role["rules"].append(
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["torchgate-controller"],
            "verbs": ["get"],
        }
    )
    found = violations(objects, scan)
    assert any("cluster-wide but only used in ['torchgate-system']" in line for line in found)


def test_a_grant_that_could_name_its_object_is_reported(scan: rm.CodeScan) -> None:
    objects = copy.deepcopy(ms.kustomize("base"))
    role = _rule_owner(objects, "Role", "torchgate-webhook-certs")
    del role["rules"][0]["resourceNames"]
    found = violations(objects, scan)
    assert any(
        "could be limited to resourceNames ['torchgate-webhook-tls']" in line for line in found
    )


def test_a_wildcard_is_reported(scan: rm.CodeScan) -> None:
    objects = copy.deepcopy(ms.kustomize("base"))
    _rule_owner(objects, "ClusterRole", "torchgate-webhook")["rules"][0]["verbs"] = ["*"]
    assert any("wildcard" in line for line in violations(objects, scan))


def test_a_new_call_site_changes_the_scan(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The scan reads source files; a call added to a copy of the controller shows up in it.
    import shutil

    package = tmp_path / "torchgate" / "controller"
    shutil.copytree(rm.REPO_ROOT / "torchgate" / "controller", package)
    extra = package / "job" / "reconciler.py"
    extra.write_text(
        extra.read_text(encoding="utf-8")
        + "\n\nasync def _extra(api: KubeApi) -> None:\n"
        + '    await api.request("GET", NODES.path(None, "some-node"))\n'
        + "\nfrom controller.kube import NODES  # noqa: E402\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(rm, "REPO_ROOT", tmp_path)
    scanned = {call[:4] for call in rm.scan_code(["controller"]).calls}
    assert ("controller", "", "nodes", "get") in scanned


def test_users_may_only_reach_the_pool_services_port_through_the_proxy() -> None:
    for rendering_id in ms.RENDERING_IDS:
        objects = ms.render(rendering_id)
        binding = ms.find(objects, "RoleBinding", "torchgate-controller-proxy")
        assert binding["subjects"] == [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": "system:authenticated",
            }
        ]
        role = ms.find(objects, "Role", binding["roleRef"]["name"])
        assert role["metadata"]["namespace"] == ms.NAMESPACE
        assert role["rules"] == [
            {
                "apiGroups": [""],
                "resources": ["services/proxy"],
                "resourceNames": ["https:torchgate-controller:https"],
                "verbs": ["get", "create"],
            }
        ]


def test_forecasts_are_for_whoever_may_edit_a_namespace_and_the_pool_view_is_bound_by_admins() -> (
    None
):
    objects = ms.kustomize("base")
    forecasts = ms.find(objects, "ClusterRole", "torchgate-forecasts")
    labels = forecasts["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    viewer = ms.find(objects, "ClusterRole", "torchgate-pool-viewer")
    assert viewer["rules"] == [
        {"apiGroups": ["torchgate.io"], "resources": ["pools"], "verbs": ["get"]}
    ]
    bound = {
        obj["roleRef"]["name"]
        for obj in objects
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding")
    }
    assert "torchgate-pool-viewer" not in bound

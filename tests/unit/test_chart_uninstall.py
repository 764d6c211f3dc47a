"""``helm uninstall`` stops the controller first (the pre-delete hook), so no TeamQuota is stuck.

The controller keeps the finalizer ``torchgate.io/gangs-running`` on a TeamQuota while its team
has admitted gangs; a leader stopped by the uninstall itself (Deployment, RBAC and ServiceAccount
deleted in one pass) could no longer take it off. The chart's pre-delete hook Job runs
``torchgate controller stop`` as the controller's ServiceAccount, with a Role of its own that
may only scale that one Deployment (tests/unit/test_rbac.py holds it to the code's calls on every
rendering; tests/e2e/test_helm_pool_values.py uninstalls a release with a running gang).
"""

from __future__ import annotations

import copy

from tests import manifestset as ms
from tests import rbacmodel as rm
from tests.unit.test_rbac import violations
from torchgate.cli import build_parser

STOP = "torchgate-controller-stop"


def stop_job(objects: list[ms.Obj]) -> ms.Obj:
    return ms.find(objects, "Job", STOP)


def test_the_stop_job_is_a_pre_delete_hook_that_does_not_linger() -> None:
    job = stop_job(ms.chart())
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # Its Role and RoleBinding are ordinary objects of the release: there when the hook runs.
    for kind in ("Role", "RoleBinding"):
        assert "helm.sh/hook" not in (
            ms.find(ms.chart(), kind, STOP)["metadata"].get("annotations") or {}
        )


def test_the_stop_job_scales_the_controllers_deployment_in_its_namespace() -> None:
    for values in ((), ("--set=namespace.name=gpu-admin",)):
        objects = ms.chart(values)
        controller = ms.find(objects, "Deployment", "torchgate-controller")
        namespace = controller["metadata"]["namespace"]
        job = stop_job(objects)
        assert job["metadata"]["namespace"] == namespace
        pod = job["spec"]["template"]["spec"]
        assert (
            pod["serviceAccountName"]
            == controller["spec"]["template"]["spec"]["serviceAccountName"]
        )
        assert pod["restartPolicy"] == "Never"
        (container,) = pod["containers"]
        assert (
            container["image"] == controller["spec"]["template"]["spec"]["containers"][0]["image"]
        )
        args = [a.replace("$(POD_NAMESPACE)", namespace) for a in container["args"]]
        parsed = build_parser("controller").parse_args(args)
        assert parsed.action == "stop"
        assert (parsed.stop_namespace, parsed.stop_deployment) == (
            namespace,
            controller["metadata"]["name"],
        )
        assert 0 < parsed.stop_timeout < job["spec"]["activeDeadlineSeconds"]


def test_the_stop_pod_has_the_controllers_security_and_placement() -> None:
    values = (
        "--set=controller.nodeSelector.role=system",
        "--set=controller.priorityClassName=system-cluster-critical",
    )
    objects = ms.chart(values)
    controller = ms.find(objects, "Deployment", "torchgate-controller")["spec"]["template"]["spec"]
    pod = stop_job(objects)["spec"]["template"]["spec"]
    assert pod["securityContext"] == controller["securityContext"]
    assert pod["containers"][0]["securityContext"] == controller["containers"][0]["securityContext"]
    assert pod["nodeSelector"] == {"role": "system"}
    assert pod["priorityClassName"] == "system-cluster-critical"


def test_the_stop_role_may_only_scale_the_controllers_deployment() -> None:
    objects = ms.chart()
    stop_grants = [g for g in rm.grants(objects) if g.role == f"Role/{STOP}"]
    assert [(g.account, g.resource, g.verb, g.namespace, g.names) for g in stop_grants] == [
        (
            "torchgate-controller",
            "deployments/scale",
            "patch",
            ms.NAMESPACE,
            ("torchgate-controller",),
        )
    ]
    # The running controller gets no scale permission anywhere else.
    assert [g for g in rm.grants(objects) if g.resource == "deployments/scale"] == stop_grants


def test_without_its_role_the_stop_job_is_reported_not_granted() -> None:
    objects = copy.deepcopy(ms.chart())
    objects = [o for o in objects if not (o["kind"] == "Role" and o["metadata"]["name"] == STOP)]
    objects = [
        o for o in objects if not (o["kind"] == "RoleBinding" and o["metadata"]["name"] == STOP)
    ]
    found = violations(objects, rm.scan_code())
    assert any(
        "not granted: controller stop: patch apps/deployments/scale 'torchgate-controller'" in line
        for line in found
    ), found

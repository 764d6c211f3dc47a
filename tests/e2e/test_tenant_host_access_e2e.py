"""A tenant who may only edit PyTorchJobs gets no access to its nodes through torchgate's pods.

The tenant (a user impersonated by the admin, bound to a Role that grants PyTorchJobs and nothing
else) cannot create a pod, but the controller creates the job's pods from its templates. So what
a template asks for is what the tenant gets: the host's PID, IPC or network namespace, a port of
the node (``hostPort``), or a capability that amounts to a privileged container (``SYS_ADMIN``,
``ALL``), would let the tenant's training code see and signal every process on the node, other
tenants' included, take the node's traffic, or leave the node. The validating webhook refuses
each at its field unless the namespace's PlacementPolicy says ``allowPrivileged``; under such a
policy the controller creates the pods as written. So too what would take the pods out of the
admin's control of the pool or of the kernel's confinement: a toleration of every taint (the
pods would run on nodes torchgate quarantined), a ``nodeName`` (refused under every policy: it
skips the placement), an ``Unconfined`` seccomp or AppArmor profile, in its field or in the
legacy AppArmor annotation the apiserver still copies into the field when it creates the pod.
A legacy annotation the apiserver refuses in every pod (an AppArmor one naming no container) is
refused under every policy: stored, the job's pods would never be created.
"""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders.job import job
from tests.builders.policy import policy
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, live_pods
from tests.e2e.test_webhook_e2e import causes, jobs_path
from tests.e2e.webhook_process import LocalWebhook, registered_webhook
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.names import TAINT_QUARANTINE

pytestmark = pytest.mark.e2e

FORBIDDEN = ErrorType.FORBIDDEN.value
POD = "spec.pytorchReplicaSpecs[{}].template.spec"
PODS = (POD.format("Master"), POD.format("Worker"))


@pytest.fixture(scope="module")
def webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWebhook]:
    with registered_webhook(cluster, tmp_path_factory.mktemp("webhook")) as server:
        yield server


@pytest.fixture(scope="module")
def controller(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    process = ControllerProcess(cluster.kubeconfig, tmp_path_factory.mktemp("controller")).start()
    yield process
    assert process.stop() == 0, process.log()


def tenant_in(cluster: Cluster, namespace: str) -> str:
    """A user who may do anything with PyTorchJobs in ``namespace``, and nothing else."""
    user = f"tenant-{namespace}"
    cluster.kubectl(
        "create", "role", "pytorchjob-editor", "--namespace", namespace,
        "--verb=get,list,watch,create,update,patch,delete", "--resource=pytorchjobs.kubeflow.org",
    )  # fmt: skip
    cluster.kubectl(
        "create", "rolebinding", "pytorchjob-editor", "--namespace", namespace,
        "--role=pytorchjob-editor", f"--user={user}",
    )  # fmt: skip
    return user


def as_user(
    cluster: Cluster, user: str, method: str, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """A raw API call made as ``user`` (the admin impersonating it)."""
    token = cluster.plane.token
    if token is None:
        pytest.skip("impersonation needs the admin token; the attached kubeconfig has none")
    request = urllib.request.Request(
        cluster.plane.server + path, data=json.dumps(body).encode(), method=method
    )
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Impersonate-User", user)
    request.add_header("Content-Type", "application/json")
    context = ssl.create_default_context(
        cafile=str(cluster.plane.ca_file) if cluster.plane.ca_file else None
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return int(response.status), json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), json.loads(error.read() or b"{}")


def host_access_job(name: str, namespace: str, pool: str) -> dict[str, Any]:
    """A CPU job whose templates share the host's namespaces, add ``SYS_ADMIN``, take a port."""
    pod_spec = {
        "hostPID": True,
        "hostIPC": True,
        "hostNetwork": True,
        "nodeSelector": {"pool": pool},
    }
    raw = job(name, namespace).master(pod_spec=pod_spec).workers(1, pod_spec=pod_spec).build()
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        (training,) = replica["template"]["spec"]["containers"]
        training["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
        training["ports"] = [{"name": "kubelet", "containerPort": 10250, "hostPort": 10250}]
    return raw


def test_a_tenant_gets_the_nodes_namespaces_only_where_the_policy_allows_privilege(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("tenant")
    user = tenant_in(cluster, namespace)
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "direct"}}
    status, _ = as_user(cluster, user, "POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert status == 403  # torchgate's pods are the tenant's only pods

    status, body = as_user(
        cluster, user, "POST", jobs_path(namespace), host_access_job("host", namespace, pool)
    )

    assert status == 422, body
    assert causes(body) == {
        *(
            (FORBIDDEN, f"{pod_path}.{field}")
            for pod_path in PODS
            for field in ("hostNetwork", "hostPID", "hostIPC")
        ),
        *(
            (FORBIDDEN, f"{pod_path}.containers[0].{field}")
            for pod_path in PODS
            for field in ("securityContext.capabilities.add[0]", "ports[0].hostPort")
        ),
    }
    assert cluster.list_objects("pytorchjobs", namespace) == []

    pods = pods_under_an_allowing_policy(
        cluster, user, namespace, host_access_job("host", namespace, pool)
    )
    for created_pod in pods:
        assert created_pod["spec"]["hostPID"] is True
        assert created_pod["spec"]["hostNetwork"] is True


def pods_under_an_allowing_policy(
    cluster: Cluster, user: str, namespace: str, wanted: dict[str, Any]
) -> list[dict[str, Any]]:
    """The two pods of ``wanted``, stored by ``user`` under a policy with ``allowPrivileged``.

    The policy is taken away again before returning (whatever happened).
    """
    allowing = policy(f"e2e-privileged-{secrets.token_hex(3)}", namespaces=[namespace])
    allowing["spec"]["allowPrivileged"] = True
    name = wanted["metadata"]["name"]
    try:
        cluster.apply(allowing)
        cluster.wait_for(
            lambda: as_user(cluster, user, "POST", jobs_path(namespace), wanted)[0] == 201 or None,
            timeout=15,
            what="the allowing policy in use",
        )
        pods: list[dict[str, Any]] = cluster.wait_for(
            lambda: (found := live_pods(cluster, namespace, name)) and len(found) == 2 and found,
            timeout=60,
            what="the job's two pods",
        )
        return pods
    finally:
        cluster.kubectl(
            "delete", "placementpolicy", allowing["metadata"]["name"], "--ignore-not-found",
            check=False,
        )  # fmt: skip


def escaping_job(name: str, namespace: str, pool: str, *, escape: bool) -> dict[str, Any]:
    """A CPU job in ``pool``; with ``escape``, one that would leave the admin's control."""
    named = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod_spec: dict[str, Any] = {"nodeSelector": {"pool": pool}, "tolerations": [named]}
    if escape:
        pod_spec["tolerations"] = [named, {"operator": "Exists"}]
        pod_spec["nodeName"] = f"{pool}-q-0"
        pod_spec["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}
    return job(name, namespace).master(pod_spec=pod_spec).workers(1, pod_spec=pod_spec).build()


def test_a_tenant_cannot_tolerate_the_quarantine_nor_pick_the_node(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("tenant")
    user = tenant_in(cluster, namespace)
    pool = f"p{namespace[-6:]}"
    quarantine = {"key": TAINT_QUARANTINE, "value": "PodStuck", "effect": "NoSchedule"}
    cluster.add_gpu_nodes(1, f"{pool}-q", labels={"pool": pool}, taints=[quarantine])
    healthy = cluster.add_gpu_nodes(2, f"{pool}-h", labels={"pool": pool})

    status, body = as_user(
        cluster,
        user,
        "POST",
        jobs_path(namespace),
        escaping_job("escape", namespace, pool, escape=True),
    )

    assert status == 422, body
    assert causes(body) == {
        *(
            (FORBIDDEN, f"{pod_path}.{field}")
            for pod_path in PODS
            for field in ("tolerations[1]", "nodeName")
        ),
        *((FORBIDDEN, f"{pod_path}.securityContext.seccompProfile.type") for pod_path in PODS),
    }
    status, body = as_user(
        cluster,
        user,
        "POST",
        jobs_path(namespace),
        escaping_job("named", namespace, pool, escape=False),
    )
    assert status == 201, body
    pods = cluster.wait_for(
        lambda: (
            (found := live_pods(cluster, namespace, "named"))
            and all(p["spec"].get("nodeName") for p in found)
            and len(found) == 2
            and found
        ),
        timeout=60,
        what="the job's two pods bound",
    )
    assert {p["spec"]["nodeName"] for p in pods} <= set(healthy)  # not the quarantined node


APPARMOR = "container.apparmor.security.beta.kubernetes.io/pytorch"
SECCOMP = "seccomp.security.alpha.kubernetes.io/pod"


def legacy_annotated_job(name: str, namespace: str, pool: str) -> dict[str, Any]:
    """A CPU job whose templates unconfine ``pytorch`` through the legacy annotations."""
    pod_spec = {"nodeSelector": {"pool": pool}}
    raw = job(name, namespace).master(pod_spec=pod_spec).workers(1, pod_spec=pod_spec).build()
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"] = {
            "annotations": {APPARMOR: "unconfined", SECCOMP: "unconfined"}
        }
    return raw


def test_a_tenant_cannot_unconfine_a_container_through_the_legacy_apparmor_annotation(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("tenant")
    user = tenant_in(cluster, namespace)
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(2, pool, labels={"pool": pool})

    status, body = as_user(
        cluster, user, "POST", jobs_path(namespace), legacy_annotated_job("aa", namespace, pool)
    )

    assert status == 422, body
    assert causes(body) == {
        (
            FORBIDDEN,
            f"spec.pytorchReplicaSpecs[{replica}].template.metadata.annotations[{APPARMOR}]",
        )
        for replica in ("Master", "Worker")
    }  # the seccomp annotation does nothing: warned, not refused
    assert cluster.list_objects("pytorchjobs", namespace) == []

    pods = pods_under_an_allowing_policy(
        cluster, user, namespace, legacy_annotated_job("aa", namespace, pool)
    )
    for created_pod in pods:  # what the refusal prevents: the apiserver unconfined pytorch
        containers = created_pod["spec"]["containers"]
        training = next(c for c in containers if c["name"] == "pytorch")
        security = training.get("securityContext", {})
        assert security.get("appArmorProfile") == {"type": "Unconfined"}, created_pod
        assert "seccompProfile" not in security  # the seccomp annotation is not copied
        assert "seccompProfile" not in created_pod["spec"].get("securityContext", {})


SIDECAR_APPARMOR = "container.apparmor.security.beta.kubernetes.io/sidecar"


def failed_creates(cluster: Cluster, namespace: str) -> list[str]:
    """The FailedCreate events' messages in ``namespace``, once there is one."""

    def messages() -> list[str] | None:
        events = cluster.list_objects("events", namespace)
        return [e["message"] for e in events if e.get("reason") == "FailedCreate"] or None

    return cluster.wait_for(messages, timeout=30, what="a FailedCreate event")


def test_an_apparmor_annotation_naming_no_container_is_refused(
    cluster: Cluster, webhook: LocalWebhook, controller: ControllerProcess
) -> None:
    """The apiserver would refuse every pod ("container not found"): the job would never run."""
    namespace = cluster.new_namespace("tenant")
    user = tenant_in(cluster, namespace)
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    pod_spec = {"nodeSelector": {"pool": pool}}
    wanted = job("nc", namespace).master(pod_spec=pod_spec).workers(1, pod_spec=pod_spec).build()
    wanted["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {SIDECAR_APPARMOR: "runtime/default"}  # no container is named sidecar
    }

    status, body = as_user(cluster, user, "POST", jobs_path(namespace), wanted)

    # stored, each of the job's pods fails to create: the failure message shows those events
    assert status == 422, failed_creates(cluster, namespace) if status == 201 else body
    assert causes(body) == {
        (
            ErrorType.INVALID.value,
            f"spec.pytorchReplicaSpecs[Worker].template.metadata.annotations[{SIDECAR_APPARMOR}]",
        )
    }
    assert cluster.list_objects("pytorchjobs", namespace) == []

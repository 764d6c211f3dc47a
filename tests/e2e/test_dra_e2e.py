"""GPUs through Dynamic Resource Allocation, on kwok DRA nodes, with the webhook and the controller.

Each test gets its own namespace, a PlacementPolicy for it (its own node pool, ``gpuDeviceClasses``,
``maxGPUsPerJob``) and its own DRA nodes: kwok nodes with no GPU in allocatable whose 8 GPUs
each are published in a ResourceSlice (``torchgate_dev.controlplane.kwok``). kube-scheduler
allocates the claims (the KCM's ``resourceclaim-controller`` makes them from the templates);
torchgate counts the claimed GPUs (webhook and controller) and plans nodes from the slices.
A TeamQuota owning a test's namespace (in a cohort of its own) counts the same claimed GPUs.
Assertions read the cluster's state: the stored job, pods and their nodes, conditions, the
TeamQuota's status.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders.claims import (
    claim_refs,
    claim_template,
    claiming_pod,
    device_request,
    device_taint_rule,
)
from tests.builders.job import container, job
from tests.builders.policy import policy
from tests.builders.team import team_quota
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    events_of,
    get_job,
    live_pods,
)
from tests.e2e.test_webhook_e2e import LocalWebhook, causes
from torchgate.kube.resources import DEVICE_TAINT_RULES
from torchgate.pytorchjob.devices import RESOURCE_CLAIM_TEMPLATE
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate_dev.apiserver import wait_for_admission
from torchgate_dev.controlplane import kwok
from torchgate_dev.state import DevError

pytestmark = pytest.mark.e2e

FORBIDDEN = ErrorType.FORBIDDEN.value
GPU = "nvidia.com/gpu"
NCCL = ["--backend", "nccl"]


@pytest.fixture(scope="module")
def torchgate(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    """The webhook (registered, ``failurePolicy: Fail``) and the controller, both watching."""
    if cluster.plane.attached:
        pytest.skip("the webhook runs on this machine's loopback; an attached cluster cannot")
    cluster.apply(kwok.dra_device_classes())
    server = LocalWebhook(cluster, tmp_path_factory.mktemp("dra-webhook"))
    ca_bundle = server.make_certificates()
    server.start()
    controller = ControllerProcess(cluster.kubeconfig, tmp_path_factory.mktemp("dra-controller"))
    try:
        server.register(ca_bundle)
        try:
            wait_for_admission(cluster.api_request, timeout=30)
        except DevError as error:
            pytest.fail(str(error), pytrace=False)
        controller.start()
        yield controller
    finally:
        controller.stop()
        server.unregister()
        server.stop()


class DraPool:
    """A namespace with its policy and DRA nodes (removed after the test)."""

    def __init__(self, cluster: Cluster, nodes: int, *, max_gpus: int = 32) -> None:
        self.cluster = cluster
        self.namespace = cluster.new_namespace("dra")
        self.name = f"dra-{secrets.token_hex(3)}"
        self.nodes = [f"{self.name}-{index}" for index in range(nodes)]
        cluster.apply(
            policy(
                self.name,
                namespaces=[self.namespace],
                priority=1000,
                nodeSelector={"pool": self.name},
                gpuDeviceClasses=[kwok.DRA_CLASS, kwok.DRA_EXTENDED_CLASS],
                maxGPUsPerJob=max_gpus,
                sharedMemory={"sizeLimit": "1Gi"},
            )
        )
        cluster.apply([kwok.dra_node(node, labels={"pool": self.name}) for node in self.nodes])
        cluster.apply(claim_template("eight", device_request(count=8), namespace=self.namespace))

    def publish(self, node: str, taints: dict[int, list[dict[str, str]]] | None = None) -> None:
        """The node's 8 GPUs in a ResourceSlice (``taints``: device index -> device taints)."""
        self.cluster.apply(kwok.gpu_resource_slice(node, 8, taints=taints))

    def clean_up(self) -> None:
        self.cluster.kubectl(
            "delete", "pytorchjobs", "--all", "-n", self.namespace, "--wait=false", check=False
        )
        self.cluster.kubectl("delete", "placementpolicy", self.name, check=False)
        self.cluster.kubectl(
            "delete", "resourceslices", *(f"{n}-{kwok.DRA_DRIVER}" for n in self.nodes),
            "--ignore-not-found", check=False,
        )  # fmt: skip
        self.cluster.kubectl("delete", "nodes", *self.nodes, "--ignore-not-found", check=False)
        self.cluster.clean_up_test()


@pytest.fixture
def pool(cluster: Cluster, torchgate: ControllerProcess) -> Iterator[DraPool]:
    created = DraPool(cluster, 2, max_gpus=16)
    yield created
    created.clean_up()


@pytest.fixture
def team(cluster: Cluster, torchgate: ControllerProcess) -> Iterator[tuple[DraPool, str]]:
    """A DRA pool whose namespace a TeamQuota of 8 GPUs owns, alone in its cohort.

    ``maxGPUsPerJob`` (32) is above anything the test asks for, so only the quota refuses.
    """
    created = DraPool(cluster, 2, max_gpus=32)
    name = f"{created.name}-team"
    cluster.apply(
        team_quota(name, [created.namespace], cohort=created.name, nominalGPUs=8,
                   borrowingLimitGPUs=0)
    )  # fmt: skip
    yield created, name
    created.clean_up()
    cluster.kubectl("delete", "teamquota", name, "--ignore-not-found", check=False)


def claiming_job(name: str, namespace: str, workers: int) -> dict[str, Any]:
    """Workers whose pods each claim 8 GPUs through the ResourceClaimTemplate ``eight``."""
    pytorch = container(args=NCCL)
    pytorch["resources"] = claim_refs("gpus")
    pod_spec = claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "eight"))
    return job(name, namespace).workers(workers, containers=[pytorch], pod_spec=pod_spec).build()


def extended_job(name: str, namespace: str, workers: int) -> dict[str, Any]:
    """Workers asking for 8 ``example.com/gpu`` each: served by DRA (KEP-5004)."""
    pytorch = container(args=NCCL, limits={kwok.DRA_EXTENDED_RESOURCE: 8})
    return job(name, namespace).workers(workers, containers=[pytorch]).build()


def create(cluster: Cluster, raw: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    namespace = raw["metadata"]["namespace"]
    return cluster.api_request(
        "POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", raw
    )


def dry_run(cluster: Cluster, raw: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    namespace = raw["metadata"]["namespace"]
    return cluster.api_request(
        "POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs?dryRun=All", raw
    )


def quota_status(cluster: Cluster, name: str) -> dict[str, Any]:
    found = cluster.get("teamquota", name)
    return dict((found or {}).get("status") or {})


def queued_reason(cluster: Cluster, namespace: str, name: str) -> str | None:
    found = condition(get_job(cluster, namespace, name), "Queued")
    return found["reason"] if found and found.get("status") == "True" else None


def running_nodes(cluster: Cluster, namespace: str, name: str, count: int) -> list[str] | None:
    pods = live_pods(cluster, namespace, name)
    if len(pods) != count or any(p["status"].get("phase") != "Running" for p in pods):
        return None
    return sorted(p["spec"]["nodeName"] for p in pods)


def waiting_message(cluster: Cluster, namespace: str, name: str) -> str | None:
    queued = condition(get_job(cluster, namespace, name), "Queued")
    if queued is None or queued.get("status") != "True":
        return None
    return str(queued.get("message") or "") or None


@pytest.mark.parametrize("build", [claiming_job, extended_job], ids=["template", "kep-5004"])
def test_a_gang_of_claimed_gpus_is_counted_placed_on_dra_nodes_or_waits(
    cluster: Cluster, pool: DraPool, build: Any
) -> None:
    for node in pool.nodes:
        pool.publish(node)
    # The webhook counts 8 GPUs per pod: maxGPUsPerJob 16 refuses three Workers...
    status, body = create(cluster, build("too-big", pool.namespace, 3))
    assert status == 422, body
    assert causes(body) == {(FORBIDDEN, "spec.pytorchReplicaSpecs")}
    # ... and admits two, with nccl, and gives them /dev/shm.
    status, body = create(cluster, build("fits", pool.namespace, 2))
    assert status == 201, body
    template = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    mounts = template["containers"][0].get("volumeMounts") or []
    assert any(mount["mountPath"] == "/dev/shm" for mount in mounts)
    # The controller places the gang on the DRA nodes, one pod per node's 8 GPUs.
    nodes = cluster.wait_for(
        lambda: running_nodes(cluster, pool.namespace, "fits", 2),
        timeout=90,
        what="the gang running on the DRA nodes",
    )
    assert nodes == sorted(pool.nodes)
    # A second gang does not fit and waits, with the GPUs it needs as the reason.
    status, body = create(cluster, build("waits", pool.namespace, 1))
    assert status == 201, body
    message = cluster.wait_for(
        lambda: waiting_message(cluster, pool.namespace, "waits"),
        timeout=60,
        what="the second gang to wait",
    )
    wanted = kwok.DRA_EXTENDED_RESOURCE if build is extended_job else GPU
    assert f"waiting for 8 {wanted}" in message, message
    assert live_pods(cluster, pool.namespace, "waits") == []


def test_a_device_taint_keeps_gangs_off_its_node(cluster: Cluster, pool: DraPool) -> None:
    tainted, healthy = pool.nodes
    pool.publish(tainted, taints={5: [{"key": "example.com/xid", "effect": "NoSchedule"}]})
    pool.publish(healthy)
    status, body = create(cluster, claiming_job("one", pool.namespace, 1))
    assert status == 201, body
    nodes = cluster.wait_for(
        lambda: running_nodes(cluster, pool.namespace, "one", 1),
        timeout=90,
        what="the gang running off the tainted device's node",
    )
    assert nodes == [healthy]
    status, body = create(cluster, claiming_job("two", pool.namespace, 1))
    assert status == 201, body
    message = cluster.wait_for(
        lambda: waiting_message(cluster, pool.namespace, "two"),
        timeout=60,
        what="the gang to wait rather than go to the tainted device's node",
    )
    assert f"waiting for 8 {GPU}" in message, message
    assert live_pods(cluster, pool.namespace, "two") == []


def test_a_noexecute_device_taint_restarts_the_gang_whole_off_its_device(
    cluster: Cluster, torchgate: ControllerProcess
) -> None:
    """The KCM evicts the pod of the tainted GPU; torchgate places the whole gang again."""
    pool = DraPool(cluster, 3, max_gpus=16)
    try:
        for node in pool.nodes:
            pool.publish(node)
        status, body = create(cluster, claiming_job("gang", pool.namespace, 2))
        assert status == 201, body
        first = cluster.wait_for(
            lambda: running_pods(cluster, pool.namespace, "gang", 2, first_attempt=True),
            timeout=90,
            what="the gang running",
        )
        (sick,) = [p["spec"]["nodeName"] for p in first if p["metadata"]["name"] == "gang-worker-0"]
        pool.publish(sick, taints={3: [{"key": "example.com/xid", "effect": "NoExecute"}]})
        again = cluster.wait_for(
            lambda: running_pods(cluster, pool.namespace, "gang", 2, first_attempt=False),
            timeout=90,
            what="the gang running again whole, off the node of the tainted GPU",
        )
        assert sick not in {p["spec"]["nodeName"] for p in again}
        reasons = {e.get("reason") for e in events_of(cluster, pool.namespace, "gang")}
        assert "PodDisrupted" in reasons, reasons
    finally:
        pool.clean_up()


def running_pods(
    cluster: Cluster, namespace: str, name: str, count: int, *, first_attempt: bool
) -> list[dict[str, Any]] | None:
    """The job's ``count`` pods, all Running in one gang attempt (the first or a later one)."""
    pods = live_pods(cluster, namespace, name)
    attempts = {p["metadata"]["annotations"]["torchgate.io/gang-attempt"] for p in pods}
    ok = (
        len(pods) == count
        and len(attempts) == 1
        and (attempts == {"1"}) == first_attempt
        and all(p["status"].get("phase") == "Running" for p in pods)
    )
    return pods if ok else None


def test_a_pod_claiming_more_gpus_than_any_node_has_waits_naming_its_device_class(
    cluster: Cluster, pool: DraPool
) -> None:
    for node in pool.nodes:
        pool.publish(node)
    cluster.apply(claim_template("sixteen", device_request(count=16), namespace=pool.namespace))
    raw = claiming_job("huge", pool.namespace, 1)
    template = raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    template["resourceClaims"][0]["resourceClaimTemplateName"] = "sixteen"
    status, body = create(cluster, raw)
    assert status == 201, body
    message = cluster.wait_for(
        lambda: waiting_message(cluster, pool.namespace, "huge"),
        timeout=60,
        what="the job to wait",
    )
    assert f"it asks 16 {GPU} (claimed devices of DeviceClass {kwok.DRA_CLASS})" in message, message
    assert live_pods(cluster, pool.namespace, "huge") == []


def test_a_device_taint_rule_keeps_gangs_off_its_node(cluster: Cluster, pool: DraPool) -> None:
    status, discovery = cluster.api_request("GET", DEVICE_TAINT_RULES.discovery_path())
    if status != 200 or not DEVICE_TAINT_RULES.served_in(discovery):
        pytest.skip("resource.k8s.io/v1 DeviceTaintRule is served from Kubernetes 1.37")
    tainted, healthy = pool.nodes
    for node in pool.nodes:
        pool.publish(node)
    # An admin takes one failing GPU of a node out of use, as kubectl create devicetaintrule does.
    rule = device_taint_rule(
        f"{pool.name}-xid", driver=kwok.DRA_DRIVER, pool=tainted, device="gpu-5"
    )
    cluster.apply(rule)
    try:
        status, body = create(cluster, claiming_job("one", pool.namespace, 1))
        assert status == 201, body
        nodes = cluster.wait_for(
            lambda: running_nodes(cluster, pool.namespace, "one", 1),
            timeout=90,
            what="the gang running off the node of the device the rule taints",
        )
        assert nodes == [healthy]
        status, body = create(cluster, claiming_job("two", pool.namespace, 1))
        assert status == 201, body
        message = cluster.wait_for(
            lambda: waiting_message(cluster, pool.namespace, "two"),
            timeout=60,
            what="the gang to wait rather than go to the node of the device the rule taints",
        )
        assert f"waiting for 8 {GPU}" in message, message
        assert live_pods(cluster, pool.namespace, "two") == []
    finally:
        cluster.kubectl("delete", "devicetaintrule", rule["metadata"]["name"], check=False)


@pytest.mark.parametrize("build", [claiming_job, extended_job], ids=["template", "kep-5004"])
def test_a_team_quota_counts_claimed_gpus_in_the_webhook_and_the_controller(
    cluster: Cluster, team: tuple[DraPool, str], build: Any
) -> None:
    pool, quota = team
    for node in pool.nodes:
        pool.publish(node)  # 16 GPUs: room for both gangs below, so only the quota holds one back
    # The controller has read the TeamQuota (it writes its status) before any job exists.
    cluster.wait_for(
        lambda: quota_status(cluster, quota).get("conditions"),
        timeout=20,
        what=f"the controller to report on TeamQuota {quota}",
    )

    # The webhook: two Workers claim 16 GPUs, more than the team can ever hold (8, no
    # borrowing), though within maxGPUsPerJob.
    def refused() -> dict[str, Any] | None:
        status, body = dry_run(cluster, build("never", pool.namespace, 2))
        return body if status == 422 else None

    body = cluster.wait_for(refused, timeout=15, what="the webhook to know the TeamQuota")
    assert causes(body) == {(FORBIDDEN, "spec.pytorchReplicaSpecs")}

    # The controller: one Worker's 8 claimed GPUs are the team's whole quota...
    status, body = create(cluster, build("holds", pool.namespace, 1))
    assert status == 201, body
    cluster.wait_for(
        lambda: running_nodes(cluster, pool.namespace, "holds", 1),
        timeout=45,
        what="the first gang running",
    )
    used = cluster.wait_for(
        lambda: quota_status(cluster, quota).get("usedGPUs"),
        timeout=20,
        what=f"TeamQuota {quota} to count the running gang",
    )
    assert used == 8
    # ... so a second gang waits for quota, though a DRA node with 8 free GPUs is left.
    status, body = create(cluster, build("waits", pool.namespace, 1))
    assert status == 201, body
    cluster.wait_for(
        lambda: queued_reason(cluster, pool.namespace, "waits") == "WaitingForQuota",
        timeout=20,
        what="the second gang to wait for quota",
    )
    assert live_pods(cluster, pool.namespace, "waits") == []

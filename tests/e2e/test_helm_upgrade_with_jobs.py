"""A values-only ``helm upgrade`` while gangs run and wait, as an admin tuning the controller does.

torchgate is installed with the chart onto a control plane with the real node (the image built
from the Dockerfile); one 8-GPU kwok node holds a running gang, a second gang of the same size
waits behind it. ``helm upgrade --reset-then-reuse-values --set
controller.tuning.starvationSeconds=600`` (same image) rolls the controller Deployment. Then:

- the running gang's pods are the same pods (same uids, none added), no restart is charged and
  the job never leaves Running;
- the waiting gang still waits, with no pod, until the running one ends, and then starts, placed
  by the upgraded controller.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.builders.policy import policy
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import create_job, get_job, is_true, live_pods
from tests.e2e.installation import (
    IMAGE,
    NAMESPACE,
    component_pods,
    force_uninstall,
    four_pod_gang,
    installable_cluster,
    local_real_node_binaries,
    run_chart,
    running_pods,
    wait_rolled_out,
)
from torchgate.pytorchjob import names

pytestmark = [pytest.mark.e2e, pytest.mark.real_node, pytest.mark.timeout(900)]

TORCHGATE_CRDS = ("placementpolicies.torchgate.io", "teamquotas.torchgate.io")


@pytest.fixture(scope="module")
def helm_installed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The chart installed with README's values; both Deployments rolled out."""
    binaries = local_real_node_binaries(request)
    with installable_cluster(binaries, tmp_path_factory.mktemp("helm-upgrade")) as cluster:
        # README's helm-1-adopt-crds: the CRDs were applied with kubectl.
        cluster.kubectl(
            "label", "crd", *TORCHGATE_CRDS, "app.kubernetes.io/managed-by=Helm", "--overwrite"
        )
        cluster.kubectl(
            "annotate", "crd", *TORCHGATE_CRDS, "meta.helm.sh/release-name=torchgate",
            "meta.helm.sh/release-namespace=default", "--overwrite",
        )  # fmt: skip
        try:
            run_chart(
                cluster, "install", f"--set=image.repository={IMAGE}", "--set=image.tag=0.1.0"
            )
            wait_rolled_out(cluster)
            yield cluster
        finally:
            force_uninstall(cluster)


def lease_holder(cluster: Cluster) -> str:
    """The pod whose controller holds the Lease torchgate-controller ("" when none)."""
    lease = cluster.get("lease", "torchgate-controller", NAMESPACE) or {}
    identity = str(lease.get("spec", {}).get("holderIdentity") or "")
    return identity.rsplit("_", 1)[0]


def restarts(cluster: Cluster, namespace: str, name: str) -> str:
    found = get_job(cluster, namespace, name) or {}
    annotations = found.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(names.ANNOTATION_RESTARTS, "0"))


def test_a_values_only_upgrade_leaves_the_running_gang_alone_and_the_waiting_one_starts(
    helm_installed: Cluster,
) -> None:
    cluster = helm_installed
    namespace = cluster.new_namespace("upgrade")
    pool = f"up-{namespace[-6:]}"
    # Tainted as GPU pools are, so the upgraded controller's pods (no tolerations by default)
    # stay off the kwok node, where kwok would only pretend to run them.
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    cluster.add_gpu_nodes(1, pool, gpus=8, labels={"pool": pool}, taints=[gpu_taint])
    cluster.apply(
        policy(
            f"run-{namespace}",
            namespaces=[namespace],
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            jobDefaults={"managedBy": "torchgate.io/controller"},
        )
    )
    try:
        create_job(cluster, four_pod_gang("first", namespace, pool))
        before = cluster.wait_for(
            lambda: running_pods(cluster, namespace, "first"), timeout=120, what="first Running"
        )
        create_job(cluster, four_pod_gang("second", namespace, pool))
        cluster.wait_for(
            lambda: is_true(get_job(cluster, namespace, "second"), "Queued") or None,
            timeout=60,
            what="second Queued",
        )
        controllers = {p["metadata"]["name"] for p in component_pods(cluster, "controller")}

        run_chart(
            cluster, "upgrade", "--reset-then-reuse-values",
            "--set=controller.tuning.starvationSeconds=600",
        )  # fmt: skip
        wait_rolled_out(cluster)
        upgraded = component_pods(cluster, "controller")
        assert not controllers & {p["metadata"]["name"] for p in upgraded}, "controller rolled"
        (args,) = {tuple(p["spec"]["containers"][0]["args"]) for p in upgraded}
        assert "--starvation-seconds=600" in args
        # An upgraded controller holds the Lease (its identity starts with its pod's name);
        # give it time to act wrongly.
        new_pods = {p["metadata"]["name"] for p in upgraded}
        cluster.wait_for(
            lambda: lease_holder(cluster) in new_pods, timeout=120, what="an upgraded leader"
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert running_pods(cluster, namespace, "first") == before, "first's pods untouched"
            assert live_pods(cluster, namespace, "second") == [], "second still waits"
            time.sleep(1)
        assert restarts(cluster, namespace, "first") == "0"
        assert is_true(get_job(cluster, namespace, "first"), "Running")

        cluster.finish_pod(namespace, "first-master-0", 0)
        cluster.wait_for(
            lambda: is_true(get_job(cluster, namespace, "first"), "Succeeded"),
            timeout=120,
            what="first Succeeded",
        )
        cluster.wait_for(
            lambda: running_pods(cluster, namespace, "second"),
            timeout=180,
            what="second started by the upgraded controller",
        )
        assert restarts(cluster, namespace, "first") == "0"
    finally:
        cluster.kubectl("delete", "placementpolicy", f"run-{namespace}", "--ignore-not-found")

"""The pool's TeamQuotas and PlacementPolicies kept in the Helm values file, as an admin does.

A cluster that never had torchgate (the PyTorchJob CRD only) gets ``helm install`` with a values
file listing a team's TeamQuota (8 GPUs, no borrowing) and the PlacementPolicy that runs its jobs
with torchgate's controller on a tainted 16-GPU kwok node. Then:

- the install succeeds (before, Helm stopped it whole with ``no matches for kind
  "PlacementPolicy"``: it builds every object of a release before creating the release's CRDs);
- the quota is enforced: a first 8-GPU gang runs, a second waits ``WaitingForQuota`` with no pod
  although the node has room;
- the first ``helm upgrade`` (a controller setting changed) adopts the quota and the policy into
  the release; the next, raising ``nominalGPUs`` to 16, starts the second gang (the quota updated
  in place), and one without the entry deletes it: while its gangs run it keeps governing them
  (its finalizer), and it is gone once they end.

And a plain ``helm uninstall`` (no scaling the controller to zero first) of a release whose
TeamQuota's team has a running gang leaves no TeamQuota behind: the chart's pre-delete hook
stops the controller while its RBAC still exists, so its leader takes the finalizer off (before,
the leader stopped by the uninstall could no longer write, and ``helm uninstall --wait`` timed
out on the TeamQuota).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import condition, create_job, get_job, live_pods
from tests.e2e.installation import (
    IMAGE,
    cluster_without_torchgate,
    four_pod_gang,
    run_chart,
    run_chart_with_values,
    running_pods,
    wait_rolled_out,
)
from tests.helmtool import run_helm
from torchgate.pytorchjob.pool import QUOTA_FINALIZER

pytestmark = [pytest.mark.e2e, pytest.mark.real_node, pytest.mark.timeout(900)]

TEAM_NAMESPACE = "team-vision"
POOL = "helm-pool"
QUOTA = "vision"
POLICY = "vision-on-gpus"


@pytest.fixture(scope="module")
def fresh_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A cluster with the real node, the PyTorchJob CRD and no trace of torchgate."""
    workdir = tmp_path_factory.mktemp("helm-pool")
    leftovers = [("teamquota", QUOTA), ("placementpolicy", POLICY)]
    with cluster_without_torchgate(request, workdir, leftovers=leftovers) as cluster:
        yield cluster


def pool_values(nominal_gpus: int | None) -> dict[str, Any]:
    """The admin's values: the policy, and the team's quota unless ``nominal_gpus`` is None."""
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    quotas = []
    if nominal_gpus is not None:
        spec = {"namespaces": [TEAM_NAMESPACE], "nominalGPUs": nominal_gpus}
        quotas.append({"name": QUOTA, "spec": {**spec, "borrowingLimitGPUs": 0}})
    return {
        "image": {"repository": IMAGE, "tag": "0.1.0"},
        "placementPolicies": [
            {
                "name": POLICY,
                "spec": {
                    "namespaces": [TEAM_NAMESPACE],
                    "tolerations": [gpu_toleration],
                    "jobDefaults": {"managedBy": "torchgate.io/controller"},
                },
            }
        ],
        "teamQuotas": quotas,
    }


def helm(cluster: Cluster, tmp_path: Path, verb: str, values: dict[str, Any]) -> None:
    run_chart_with_values(cluster, verb, values, tmp_path / f"values-{verb}.yaml")


def queued_reason(cluster: Cluster, name: str) -> str | None:
    found = condition(get_job(cluster, TEAM_NAMESPACE, name), "Queued")
    return found["reason"] if found and found.get("status") == "True" else None


def test_quota_and_policy_from_the_values_file_are_installed_enforced_and_upgraded(
    fresh_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = fresh_cluster
    assert cluster.get("crd", "teamquotas.torchgate.io") is None, "a cluster without torchgate"
    cluster.kubectl("create", "namespace", TEAM_NAMESPACE)
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    cluster.add_gpu_nodes(1, POOL, gpus=16, labels={"pool": POOL}, taints=[gpu_taint])

    helm(cluster, tmp_path, "install", pool_values(nominal_gpus=8))
    wait_rolled_out(cluster)
    quota = cluster.get("teamquota", QUOTA)
    assert quota is not None
    assert quota["spec"]["nominalGPUs"] == 8
    assert cluster.get("placementpolicy", POLICY) is not None

    create_job(cluster, four_pod_gang("first", TEAM_NAMESPACE, POOL))
    cluster.wait_for(
        lambda: running_pods(cluster, TEAM_NAMESPACE, "first"), timeout=120, what="first Running"
    )
    create_job(cluster, four_pod_gang("second", TEAM_NAMESPACE, POOL))
    reason = cluster.wait_for(
        lambda: queued_reason(cluster, "second"), timeout=60, what="second Queued"
    )
    assert reason == "WaitingForQuota"
    assert live_pods(cluster, TEAM_NAMESPACE, "second") == []

    # As docs/operations.md says: the upgrade that adopts them leaves them as installed.
    adopting = pool_values(nominal_gpus=8) | {"logging": {"level": "DEBUG", "format": "text"}}
    helm(cluster, tmp_path, "upgrade", adopting)
    wait_rolled_out(cluster)
    helm(cluster, tmp_path, "upgrade", pool_values(nominal_gpus=16))
    cluster.wait_for(
        lambda: running_pods(cluster, TEAM_NAMESPACE, "second"),
        timeout=120,
        what="second started within the raised quota",
    )
    raised = cluster.get("teamquota", QUOTA)
    assert raised is not None
    assert raised["metadata"]["uid"] == quota["metadata"]["uid"], "updated, not replaced"

    # Removed from the values, the quota is deleted; its gangs still run, so it keeps governing
    # them (the finalizer) until they end, then it is gone (docs/pool-sharing.md).
    helm(cluster, tmp_path, "upgrade", pool_values(nominal_gpus=None))
    deleting = cluster.wait_for(
        lambda: (
            (q := cluster.get("teamquota", QUOTA)) and q["metadata"].get("deletionTimestamp") and q
        ),
        timeout=60,
        what="the quota being deleted",
    )
    assert QUOTA_FINALIZER in deleting["metadata"]["finalizers"], "its gangs still run"
    for name in ("first", "second"):
        cluster.kubectl("delete", "pytorchjob", name, "-n", TEAM_NAMESPACE, "--wait=false")
    cluster.wait_for(
        lambda: cluster.get("teamquota", QUOTA) is None,
        timeout=90,
        what="the quota deleted once its gangs ended",
    )
    assert cluster.get("placementpolicy", POLICY) is not None


def test_a_plain_helm_uninstall_with_a_running_gang_leaves_no_teamquota_behind(
    fresh_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = fresh_cluster
    if cluster.get("namespace", TEAM_NAMESPACE) is None:
        cluster.kubectl("create", "namespace", TEAM_NAMESPACE)
    pool = "helm-uninstall"
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    cluster.add_gpu_nodes(1, pool, gpus=16, labels={"pool": pool}, taints=[gpu_taint])
    # The quota as an object of the release (on a first install it is a hook object, which
    # `helm uninstall` leaves; the next upgrade adopts it).
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(pool_values(nominal_gpus=8)), encoding="utf-8")
    run_chart(cluster, "upgrade", "--install", f"--values={values_file}")
    installed = cluster.get("teamquota", QUOTA)
    assert installed is not None
    if "helm.sh/hook" in (installed["metadata"].get("annotations") or {}):
        run_chart(cluster, "upgrade", f"--values={values_file}")
    wait_rolled_out(cluster)
    create_job(cluster, four_pod_gang("kept", TEAM_NAMESPACE, pool))
    cluster.wait_for(
        lambda: running_pods(cluster, TEAM_NAMESPACE, "kept"), timeout=120, what="kept Running"
    )
    cluster.wait_for(
        lambda: (
            QUOTA_FINALIZER
            in (cluster.get("teamquota", QUOTA) or {}).get("metadata", {}).get("finalizers", [])
        ),
        timeout=60,
        what="the quota's finalizer while its gang runs",
    )

    started = time.monotonic()
    uninstall = run_helm(
        "uninstall", "torchgate", "--namespace", "default", "--wait", "--timeout=3m",
        env={"KUBECONFIG": str(cluster.kubeconfig)}, timeout=300, check=False,
    )  # fmt: skip
    took = time.monotonic() - started

    assert uninstall.returncode == 0, uninstall.stderr
    assert cluster.get("teamquota", QUOTA) is None, "the leader took its finalizer off"
    assert took < 180, f"helm uninstall took {took:.0f}s"
    assert running_pods(cluster, TEAM_NAMESPACE, "kept"), "the gang keeps running"
    cluster.kubectl("delete", "pytorchjob", "kept", "-n", TEAM_NAMESPACE, "--wait=false")

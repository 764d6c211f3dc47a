"""Deleting a TeamQuota while its team's gangs run, on the real control plane.

The controller keeps its finalizer on a TeamQuota while the team has admitted gangs
(``admission/poolsource.py`` rule 3): deleted meanwhile, the TeamQuota still governs its running
gangs (another team still reclaims what they borrow), admits no new gang of its team (it waits,
told why) and says so in its status; it goes once its gangs end, and at once when the controller
stops (no deletion waits for a controller that is gone). Assertions read the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    get_job,
    is_true,
    live_pods,
)
from tests.e2e.test_pool_sharing import QUOTA_CRD, Pool, queued_reason, quota_status, wait_running
from torchgate.pytorchjob.pool import QUOTA_FINALIZER

pytestmark = pytest.mark.e2e


@pytest.fixture
def controller(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    cluster.kubectl("apply", "-f", str(QUOTA_CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/teamquotas.torchgate.io"
    )
    process = ControllerProcess(cluster.kubeconfig, tmp_path_factory.mktemp("controller")).start()
    yield process
    if process.process is not None and process.process.poll() is None:
        assert process.stop() == 0, process.log()


@pytest.fixture
def pool(cluster: Cluster, controller: ControllerProcess) -> Iterator[Pool]:
    made = Pool(cluster)
    yield made
    made.clean_up()


def finalizers(cluster: Cluster, name: str) -> list[str] | None:
    """The TeamQuota's finalizers; ``None`` once it is gone."""
    found = cluster.get("teamquota", name)
    return None if found is None else list(found["metadata"].get("finalizers") or [])


def test_a_team_quota_deleted_while_its_gangs_run_keeps_governing_them_until_they_end(
    cluster: Cluster, pool: Pool, controller: ControllerProcess
) -> None:
    pool.nodes(3)  # 24 GPUs
    lender, borrower = cluster.new_namespace("lender"), cluster.new_namespace("borrower")
    other = cluster.new_namespace("other")
    pool.team("lender", [lender], 8)
    team_b = pool.team("borrower", [borrower], 8)
    team_o = pool.team("other", [other], 8)
    pool.job(other, "o0", pods=1, gpus=8)
    wait_running(cluster, other, "o0", 1)
    pool.job(borrower, "b0", pods=1, gpus=8)
    wait_running(cluster, borrower, "b0", 1)
    pool.job(borrower, "b1", pods=1, gpus=8)
    wait_running(cluster, borrower, "b1", 1)  # the lender's idle quota, borrowed
    cluster.wait_for(
        lambda: QUOTA_FINALIZER in (finalizers(cluster, team_b) or []),
        timeout=20,
        what="the controller's finalizer on the borrowing team's TeamQuota",
    )

    cluster.kubectl("delete", "teamquota", team_b, "--wait=false")
    status = cluster.wait_for(
        lambda: (
            (s := quota_status(cluster, team_b))
            and [c["type"] for c in s.get("conditions", [])] == ["Valid", "Deleting"]
            and s
        ),
        timeout=20,
        what="the TeamQuota's status to say it is being deleted",
    )
    assert status["admittedJobs"] == 2
    pool.job(borrower, "b2", pods=1, gpus=8)
    cluster.wait_for(
        lambda: queued_reason(cluster, borrower, "b2") == "WaitingForQuota",
        timeout=20,
        what="the deleted team's new job to wait",
    )
    queued = condition(get_job(cluster, borrower, "b2"), "Queued")
    assert queued is not None
    assert f"TeamQuota {team_b} is being deleted" in queued["message"]

    pool.job(lender, "l0", pods=1, gpus=8)
    wait_running(cluster, lender, "l0", 1)  # the lender still reclaims what the borrower borrows
    assert is_true(get_job(cluster, borrower, "b1"), "Preempted")
    assert live_pods(cluster, borrower, "b2") == [], "no new gang of the deleted team"
    assert QUOTA_FINALIZER in (finalizers(cluster, team_b) or []), "b0 still runs"

    cluster.kubectl("delete", "pytorchjob", "b0", "b1", "b2", "-n", borrower, "--wait=false")
    cluster.wait_for(
        lambda: finalizers(cluster, team_b) is None,
        timeout=90,  # the pods end with their grace period
        what="the TeamQuota to go once its gangs ended",
    )

    # A TeamQuota deleted while its gang runs goes when the controller stops.
    cluster.wait_for(
        lambda: QUOTA_FINALIZER in (finalizers(cluster, team_o) or []),
        timeout=20,
        what="the finalizer on the other team's TeamQuota",
    )
    cluster.kubectl("delete", "teamquota", team_o, "--wait=false")
    assert controller.stop() == 0, controller.log()
    cluster.wait_for(
        lambda: finalizers(cluster, team_o) is None,
        timeout=10,
        what="the TeamQuota to go once the controller stopped",
    )
    assert running_still(cluster, other, "o0"), "stopping the controller deletes no pod"


def running_still(cluster: Cluster, namespace: str, name: str) -> bool:
    pods = live_pods(cluster, namespace, name)
    return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)

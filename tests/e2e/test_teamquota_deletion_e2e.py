"""A TeamQuota's lifecycle while its team's gangs run, on the real control plane.

Deleted, kept across a rolling upgrade, released by an uninstall, lowered below its usage.

The controller keeps its finalizer on a TeamQuota while the team has admitted gangs
(``admission/poolsource.py`` rule 3): deleted meanwhile, the TeamQuota still governs its running
gangs (another team still reclaims what they borrow), admits no new gang of its team (it waits,
told why) and says so in its status; it goes once its gangs end. A stopping leader keeps the
finalizer while its Deployment still asks for replicas (a rolling upgrade: the next leader
carries on) and takes it off every TeamQuota when the Deployment is scaled to zero (README's
uninstall), so neither the uninstall nor deleting the CRD waits for running gangs; a controller
run by hand (no ``--deployment``) takes it off when it stops. A quota lowered below what its
running gangs use says so (``overQuotaGPUs``, an ``OverQuota`` condition, a Warning Event), keeps
them running and holds the team's new gangs; a restarted controller reads that from the stored
status, so it neither records the Event again nor moves the conditions' ``lastTransitionTime``.
Assertions read the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    get_job,
    is_true,
    live_pods,
    times_told,
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

    # A TeamQuota deleted while its gang runs goes when a controller run by hand stops.
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


def controller_deployment(namespace: str) -> dict[str, Any]:
    """The controller's Deployment as the install has it; its pods never schedule here."""
    labels = {"app.kubernetes.io/name": "torchgate", "app.kubernetes.io/component": "controller"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "torchgate-controller", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"torchgate.io/no-such-node": "true"},
                    "containers": [{"name": "controller", "image": "torchgate"}],
                },
            },
        },
    }


def test_a_rolling_upgrade_keeps_a_deleted_team_quota_and_an_uninstall_lets_it_and_the_crd_go(
    cluster: Cluster,
    pool: Pool,
    controller: ControllerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    assert controller.stop() == 0, controller.log()  # replaced by controllers of a Deployment
    system = cluster.new_namespace("torchgate")
    cluster.apply(controller_deployment(system))
    flags = ("--deployment", "torchgate-controller", "--leader-election-namespace", system)
    logs = tmp_path_factory.mktemp("deployed")
    old = ControllerProcess(cluster.kubeconfig, logs, *flags).start()
    pool.nodes(2)
    gone, kept = cluster.new_namespace("gone"), cluster.new_namespace("kept")
    team_gone, team_kept = pool.team("gone", [gone], 8), pool.team("kept", [kept], 8)
    pool.job(gone, "g0", pods=1, gpus=8)
    pool.job(kept, "k0", pods=1, gpus=8)
    wait_running(cluster, gone, "g0", 1)
    wait_running(cluster, kept, "k0", 1)
    for team in (team_gone, team_kept):
        cluster.wait_for(
            lambda team=team: QUOTA_FINALIZER in (finalizers(cluster, team) or []),
            timeout=20,
            what=f"the finalizer on TeamQuota {team}",
        )
    cluster.kubectl("delete", "teamquota", team_gone, "--wait=false")

    # A rolling upgrade: the leader stops while its Deployment still asks for 2 replicas.
    assert old.stop() == 0, old.log()
    assert finalizers(cluster, team_gone) == [QUOTA_FINALIZER], "the deletion still waits"
    new = ControllerProcess(cluster.kubeconfig, logs, *flags).start()
    try:
        pool.job(gone, "g1", pods=1, gpus=8)
        cluster.wait_for(
            lambda: queued_reason(cluster, gone, "g1") == "WaitingForQuota",
            timeout=20,
            what="the next leader to keep the deleted team closed to new gangs",
        )
        queued = condition(get_job(cluster, gone, "g1"), "Queued")
        assert queued is not None
        assert f"TeamQuota {team_gone} is being deleted" in queued["message"]

        # Uninstall as README says: the controller scaled to zero first.
        cluster.kubectl("scale", "deployment", "torchgate-controller", "-n", system, "--replicas=0")
        assert new.stop() == 0, new.log()
        assert finalizers(cluster, team_gone) is None, "no successor: the TeamQuota goes"
        assert finalizers(cluster, team_kept) == [], "nor does another TeamQuota keep it"
        # Deleting the CRD (every TeamQuota) waits for no gang either.
        cluster.kubectl("delete", "crd", "teamquotas.torchgate.io", "--timeout=30s")
        assert running_still(cluster, gone, "g0")
        assert running_still(cluster, kept, "k0")
    finally:
        if new.process is not None and new.process.poll() is None:
            new.stop()
        cluster.kubectl("apply", "-f", str(QUOTA_CRD))
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/teamquotas.torchgate.io"
        )


def test_a_quota_lowered_below_its_running_gangs_says_so_and_holds_new_gangs(
    cluster: Cluster, pool: Pool
) -> None:
    pool.nodes(3)
    namespace = cluster.new_namespace("lowered")
    team = pool.team("lowered", [namespace], 16, borrowingLimitGPUs=0)
    pool.job(namespace, "r0", pods=1, gpus=8)
    pool.job(namespace, "r1", pods=1, gpus=8)
    wait_running(cluster, namespace, "r0", 1)
    wait_running(cluster, namespace, "r1", 1)

    cluster.kubectl("patch", "teamquota", team, "--type=merge", "-p", '{"spec":{"nominalGPUs":8}}')
    status = cluster.wait_for(
        lambda: (s := quota_status(cluster, team)) and s.get("overQuotaGPUs") == 8 and s,
        timeout=20,
        what="the TeamQuota's status to count the GPUs beyond its lowered quota",
    )
    over = [c for c in status["conditions"] if c["type"] == "OverQuota"]
    assert [(c["status"], c["reason"]) for c in over] == [("True", "UsageAboveQuota")]
    events = cluster.kubectl(
        "get", "events", "-n", "default", "-o", "json",
        "--field-selector", f"involvedObject.name={team},reason=UsageAboveQuota",
    ).stdout  # fmt: skip
    assert '"type": "Warning"' in events

    pool.job(namespace, "r2", pods=1, gpus=8)
    cluster.wait_for(
        lambda: queued_reason(cluster, namespace, "r2") == "WaitingForQuota",
        timeout=20,
        what="the team's new gang to wait for quota",
    )
    queued = condition(get_job(cluster, namespace, "r2"), "Queued")
    assert queued is not None
    assert f"team {team} is over its quota (16/8 GPUs" in queued["message"]
    assert running_still(cluster, namespace, "r0"), "running gangs are not preempted for it"
    assert running_still(cluster, namespace, "r1")


def test_a_restarted_controller_tells_a_team_over_its_quota_no_second_time(
    cluster: Cluster, pool: Pool, controller: ControllerProcess
) -> None:
    pool.nodes(3)
    namespace = cluster.new_namespace("restarted")
    team = pool.team("restarted", [namespace], 16, borrowingLimitGPUs=0)
    pool.job(namespace, "r0", pods=1, gpus=8)
    pool.job(namespace, "r1", pods=1, gpus=8)
    wait_running(cluster, namespace, "r0", 1)
    wait_running(cluster, namespace, "r1", 1)
    cluster.kubectl("patch", "teamquota", team, "--type=merge", "-p", '{"spec":{"nominalGPUs":8}}')
    cluster.wait_for(
        lambda: times_told(cluster, team, "UsageAboveQuota") == 1,
        timeout=20,
        what="the UsageAboveQuota Event",
    )
    before = quota_status(cluster, team)
    began = {c["type"]: c["lastTransitionTime"] for c in before["conditions"]}
    assert set(began) == {"Valid", "OverQuota"}

    assert controller.stop() == 0, controller.log()
    controller.start()
    pool.job(namespace, "r2", pods=1, gpus=8)  # waits: the new controller writes the status
    status = cluster.wait_for(
        lambda: (s := quota_status(cluster, team)) and s.get("waitingJobs") == 1 and s,
        timeout=30,
        what="the restarted controller to write the TeamQuota's status",
    )
    assert times_told(cluster, team, "UsageAboveQuota") == 1, "the stored status already said so"
    assert status["overQuotaGPUs"] == 8
    assert {c["type"]: c["lastTransitionTime"] for c in status["conditions"]} == began
    assert running_still(cluster, namespace, "r0")
    assert running_still(cluster, namespace, "r1")

"""Sharing a GPU pool on the real control plane: team quotas, whole-gang preemption, topology.

Each test gets its own namespaces, its own kwok nodes (a pool label of its own, topology labels
where it needs them), and its own cluster-scoped objects (TeamQuotas in a cohort of their own,
PriorityClasses, a PlacementPolicy), deleted after it. Assertions read the cluster: pods and
their nodes, job conditions, Events, TeamQuota status; never logs.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.builders.job import job
from tests.builders.policy import policy
from tests.builders.team import team_quota
from tests.e2e.conftest import REPO_ROOT, Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    create_job,
    dump,
    events_of,
    get_job,
    is_true,
    live_pods,
    running_controller,
)
from torchgate_dev.controlplane import kwok

pytestmark = pytest.mark.e2e
QUOTA_CRD = REPO_ROOT / "manifests" / "crds" / "torchgate.io_teamquotas.yaml"
BLOCK, RACK = "topology.torchgate.io/block", "topology.torchgate.io/rack"
STUCK_SECONDS = 2


@pytest.fixture(scope="module")
def controller(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    cluster.kubectl("apply", "-f", str(QUOTA_CRD))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/teamquotas.torchgate.io"
    )
    logs = tmp_path_factory.mktemp("controller")
    with running_controller(
        cluster.kubeconfig, logs, "--stuck-termination-seconds", str(STUCK_SECONDS)
    ) as process:
        yield process


class Pool:
    """One test's pool: nodes with a label of their own, and cluster objects to delete."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.label = f"share-{secrets.token_hex(3)}"
        self.cluster_objects: list[tuple[str, str]] = []

    def nodes(self, count: int, *, prefix: str = "", **labels: str) -> list[str]:
        return self.cluster.add_gpu_nodes(
            count, f"{self.label}{prefix}", gpus=8, labels={"pool": self.label, **labels}
        )

    def apply(self, obj: dict[str, Any]) -> None:
        self.cluster.apply(obj)
        self.cluster_objects.append((obj["kind"].lower(), obj["metadata"]["name"]))

    def team(self, name: str, namespaces: list[str], nominal: int, **spec: Any) -> str:
        full = f"{self.label}-{name}"
        self.apply(team_quota(full, namespaces, cohort=self.label, nominalGPUs=nominal, **spec))
        return full

    def priority_class(self, name: str, value: int, **fields: Any) -> str:
        full = f"{self.label}-{name}"
        self.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": full},
                "value": value,
                **fields,
            }
        )
        return full

    def job(
        self,
        namespace: str,
        name: str,
        *,
        pods: int,
        gpus: int,
        priority_class: str | None = None,
        annotations: dict[str, str] | None = None,
        backoff_limit: int | None = None,
    ) -> dict[str, Any]:
        pod_spec: dict[str, Any] = {"nodeSelector": {"pool": self.label}}
        if priority_class is not None:
            pod_spec["priorityClassName"] = priority_class
        built = job(name, namespace).master(gpus=gpus, pod_spec=pod_spec)
        if pods > 1:
            built = built.workers(pods - 1, gpus=gpus, pod_spec=pod_spec)
        for key, value in (annotations or {}).items():
            built = built.annotate(key, value)
        if backoff_limit is not None:
            built = built.run_policy(backoffLimit=backoff_limit)
        return create_job(self.cluster, built.build())

    def clean_up(self) -> None:
        for kind, name in reversed(self.cluster_objects):
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def pool(cluster: Cluster, controller: ControllerProcess) -> Iterator[Pool]:
    made = Pool(cluster)
    yield made
    made.clean_up()


# ------------------------------------------------------------------ reading the cluster


def running(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The job's live pods when all of them are Running, else []."""
    found = live_pods(cluster, namespace, name)
    return found if found and all(p["status"].get("phase") == "Running" for p in found) else []


def wait_running(cluster: Cluster, namespace: str, name: str, count: int) -> list[dict[str, Any]]:
    return cluster.wait_for(
        lambda: (pods := running(cluster, namespace, name)) and len(pods) == count and pods,
        timeout=60,
        what=f"{count} Running pods of {namespace}/{name}",
    )


def queued_reason(cluster: Cluster, namespace: str, name: str) -> str | None:
    found = condition(get_job(cluster, namespace, name), "Queued")
    return found["reason"] if found and found.get("status") == "True" else None


def reasons(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e.get("message", "")) for e in events_of(cluster, namespace, name)]


def rank_of(pod: dict[str, Any]) -> int:
    (pytorch,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    env = {e["name"]: e.get("value", "") for e in pytorch.get("env", [])}
    return int(env["RANK"])


def node_labels(cluster: Cluster, node: str) -> dict[str, str]:
    found = cluster.get("node", node)
    assert found is not None
    return dict(found["metadata"].get("labels") or {})


def quota_status(cluster: Cluster, name: str) -> dict[str, Any]:
    found = cluster.get("teamquota", name)
    return dict((found or {}).get("status") or {})


# ------------------------------------------------------------------ quotas


def test_two_teams_sharing_a_pool_each_get_their_quota(cluster: Cluster, pool: Pool) -> None:
    pool.nodes(4)  # 32 GPUs
    vision, speech = cluster.new_namespace("vision"), cluster.new_namespace("speech")
    team_v = pool.team("vision", [vision], 16, borrowingLimitGPUs=0)
    team_s = pool.team("speech", [speech], 16, borrowingLimitGPUs=0)
    for index in range(4):  # both submit more than their share at once
        pool.job(vision, f"v{index}", pods=1, gpus=8)
        pool.job(speech, f"s{index}", pods=1, gpus=8)

    def settled() -> dict[str, list[str]] | None:
        out: dict[str, list[str]] = {vision: [], speech: []}
        for namespace, prefix in ((vision, "v"), (speech, "s")):
            for index in range(4):
                if running(cluster, namespace, f"{prefix}{index}"):
                    out[namespace].append(f"{prefix}{index}")
                elif queued_reason(cluster, namespace, f"{prefix}{index}") != "WaitingForQuota":
                    return None
        return out

    result = cluster.wait_for(settled, timeout=60, what="two jobs of each team running")
    assert len(result[vision]) == 2, result
    assert len(result[speech]) == 2, result
    waiting = [n for n in ("v0", "v1", "v2", "v3") if n not in result[vision]]
    assert any(r == "WaitingForQuota" for r, _ in reasons(cluster, vision, waiting[0]))
    for team in (team_v, team_s):
        status = cluster.wait_for(
            lambda team=team: (s := quota_status(cluster, team)).get("waitingJobs") == 2 and s,
            timeout=20,
            what=f"status of TeamQuota {team}",
        )
        assert (status["usedGPUs"], status["borrowedGPUs"], status["admittedJobs"]) == (16, 0, 2)
        assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Valid", "True")]


def test_a_team_borrows_idle_gpus_and_gives_them_back_by_preemption(
    cluster: Cluster, pool: Pool
) -> None:
    pool.nodes(2)  # 16 GPUs
    lender, borrower = cluster.new_namespace("lender"), cluster.new_namespace("borrower")
    pool.team("lender", [lender], 8)
    team_b = pool.team("borrower", [borrower], 8)
    pool.job(borrower, "b0", pods=1, gpus=8, backoff_limit=0)
    wait_running(cluster, borrower, "b0", 1)
    pool.job(borrower, "b1", pods=1, gpus=8, backoff_limit=0)
    wait_running(cluster, borrower, "b1", 1)  # the lender's idle quota, borrowed
    status = cluster.wait_for(
        lambda: (s := quota_status(cluster, team_b)).get("borrowedGPUs") == 8 and s,
        timeout=20,
        what="the borrower's status to show 8 borrowed GPUs",
    )
    assert status["usedGPUs"] == 16

    pool.job(lender, "l0", pods=1, gpus=8)
    wait_running(cluster, lender, "l0", 1)  # its quota came back
    preempted = [n for n in ("b0", "b1") if is_true(get_job(cluster, borrower, n), "Preempted")]
    assert preempted == ["b1"], "the borrowed gang (the newer one) gives the quota back"
    assert running(cluster, borrower, "b0"), "the gang within nominal quota keeps running"
    assert live_pods(cluster, borrower, "b1") == []
    victim = get_job(cluster, borrower, "b1")
    assert f"{lender}/l0" in condition(victim, "Preempted")["message"]  # type: ignore[index]
    assert any(
        r == "Preempted" and f"{lender}/l0" in m for r, m in reasons(cluster, borrower, "b1")
    )
    assert not is_true(victim, "Failed"), "a preemption is not a failure (backoffLimit 0)"
    assert (
        cluster.wait_for(
            lambda: queued_reason(cluster, borrower, "b1"), timeout=20, what="b1 queued again"
        )
        == "WaitingForQuota"
    )


# ------------------------------------------------------------------ priority


# ------------------------------------------------------------------ backfill


def test_backfill_never_delays_the_head_gang(cluster: Cluster, pool: Pool) -> None:
    # Behind a head gang waiting for a running gang with a deadline, only a gang sure to end
    # before that deadline uses the free node; one with no known end waits behind the head.
    pool.nodes(3)
    namespace = cluster.new_namespace("fill")
    pod_spec = {"nodeSelector": {"pool": pool.label}}

    def gang(name: str, pods: int, *, deadline: int | None, run_seconds: int | None) -> None:
        built = job(name, namespace).master(gpus=8, pod_spec=pod_spec)
        if pods > 1:
            built = built.workers(pods - 1, gpus=8, pod_spec=pod_spec)
        if deadline is not None:
            built = built.run_policy(activeDeadlineSeconds=deadline)
        raw = built.build()
        if run_seconds is not None:
            master = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
            master["metadata"] = {"annotations": kwok.run_seconds_annotation(run_seconds)}
        create_job(cluster, raw)

    gang("old", 2, deadline=60, run_seconds=15)
    wait_running(cluster, namespace, "old", 2)
    gang("a-head", 3, deadline=None, run_seconds=None)  # needs old's nodes and the free one
    gang("b-long", 1, deadline=None, run_seconds=None)  # no known end: never into the gap
    gang("c-short", 1, deadline=20, run_seconds=2)  # ends long before old's deadline
    cluster.wait_for(
        lambda: is_true(get_job(cluster, namespace, "c-short"), "Succeeded"),
        timeout=60,
        what="c-short ran in the gap and succeeded",
    )
    assert live_pods(cluster, namespace, "b-long") == []
    pods = wait_running(cluster, namespace, "a-head", 3)  # once old ends, not after b-long
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    assert live_pods(cluster, namespace, "b-long") == []


def test_a_high_priority_gang_preempts_whole_lower_priority_gangs(
    cluster: Cluster, pool: Pool
) -> None:
    pool.nodes(3)  # 24 GPUs
    namespace = cluster.new_namespace("prio")
    low = pool.priority_class("low", 10)
    high = pool.priority_class("high", 1000)
    lows = [f"low{index}" for index in range(3)]
    for name in lows:  # three gangs of 2 x 4 GPUs fill the pool
        pool.job(namespace, name, pods=2, gpus=4, priority_class=low, backoff_limit=0)
    for name in lows:
        wait_running(cluster, namespace, name, 2)
    started = time.monotonic()
    pool.job(namespace, "urgent", pods=2, gpus=8, priority_class=high)  # 16 GPUs
    pods = wait_running(cluster, namespace, "urgent", 2)
    latency = time.monotonic() - started
    assert len({p["spec"]["nodeName"] for p in pods}) == 2

    victims = [n for n in lows if is_true(get_job(cluster, namespace, n), "Preempted")]
    assert victims, "lower-priority gangs were preempted"
    for name in lows:  # whole gangs only: every low job has all its pods or none
        live = live_pods(cluster, namespace, name)
        assert len(live) in (0, 2), (name, [p["metadata"]["name"] for p in live])
        if name in victims:
            assert live == [] or not running(cluster, namespace, name)
            assert any(
                r == "Preempted" and f"{namespace}/urgent" in m
                for r, m in reasons(cluster, namespace, name)
            )
            assert not is_true(get_job(cluster, namespace, name), "Failed")
    assert len(victims) == 2, "the cheapest set: two gangs free two nodes"
    assert latency < 60


def test_preempted_gangs_run_again_soon_after_their_preemptor_is_deleted(
    cluster: Cluster, pool: Pool
) -> None:
    """The preemptor's pods, still there after its job is deleted, are not taken twice.

    As the pool benchmark runs it: priorities from ``runPolicy.schedulingPolicy`` (pods carry
    none), the preemptor deleted with its pods once it runs. Each victim must get nodes of its
    own, not one another's, which would leave a gang unbound until the schedule timeout (60 s).
    The overlap needs an interleaving of pod events, so this catches the fault in some runs only;
    ``test_a_victim_whose_job_is_gone_is_not_preempted_twice_onto_held_nodes`` (unit) in every.
    """
    pool.nodes(16)
    namespace = cluster.new_namespace("back")
    low = pool.priority_class("low", 10)
    high = pool.priority_class("high", 1000)

    def gang(name: str, pods: int, priority_class: str) -> None:
        pod_spec = {"nodeSelector": {"pool": pool.label}}
        built = job(name, namespace).master(gpus=8, pod_spec=pod_spec)
        if pods > 1:
            built = built.workers(pods - 1, gpus=8, pod_spec=pod_spec)
        create_job(cluster, built.scheduling(priorityClass=priority_class).build())

    lows = [f"low{index}" for index in range(4)]
    for name in lows:  # four gangs of four whole-node pods fill the pool
        gang(name, 4, low)
    for name in lows:
        wait_running(cluster, namespace, name, 4)
    for round_ in (1, 2):
        urgent = f"urgent{round_}"
        gang(urgent, 8, high)
        wait_running(cluster, namespace, urgent, 8)
        victims = [n for n in lows if is_true(get_job(cluster, namespace, n), "Preempted")]
        assert len(victims) == 2, round_

        cluster.api_request(
            "DELETE", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{urgent}"
        )
        cluster.api_request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0"
            f"&labelSelector=training.kubeflow.org/job-name%3D{urgent}",
        )
        cluster.wait_for(
            lambda: all(running(cluster, namespace, name) for name in lows),
            timeout=30,
            what=f"every low gang Running again after {urgent} is deleted",
        )
        nodes = [
            p["spec"]["nodeName"] for name in lows for p in live_pods(cluster, namespace, name)
        ]
        assert len(set(nodes)) == 16, (round_, nodes)


STUCK_FINALIZER = "e2e.torchgate.io/stuck"


def test_a_preemptor_whose_victim_is_stuck_terminating_gives_up_its_hold(
    cluster: Cluster, pool: Pool
) -> None:
    """A victim pod that never goes (its node lost) must not hold the preemptor forever.

    The finalizer plays the lost node: the pod stays Terminating past its grace period. The
    module's controller gives up such a hold after ``STUCK_SECONDS``; the preemptor is then
    decided again and runs on a node that appeared meanwhile.
    """
    pool.nodes(1)
    namespace = cluster.new_namespace("stuck")
    low = pool.priority_class("low", 10)
    high = pool.priority_class("high", 1000)
    pool.job(namespace, "stuck", pods=1, gpus=8, priority_class=low, backoff_limit=0)
    (victim,) = wait_running(cluster, namespace, "stuck", 1)
    name = victim["metadata"]["name"]
    finalizers = {"metadata": {"finalizers": [STUCK_FINALIZER]}}
    cluster.kubectl(
        "patch", "pod", name, "-n", namespace, "--type=merge", "-p", json.dumps(finalizers)
    )
    try:
        pool.job(namespace, "urgent", pods=1, gpus=8, priority_class=high)
        cluster.wait_for(
            lambda: (
                (cluster.get("pod", name, namespace) or {})
                .get("metadata", {})
                .get("deletionTimestamp")
            ),
            what="the victim pod to be deleted",
        )
        (spare,) = pool.nodes(1, prefix="-spare")

        (pod,) = wait_running(cluster, namespace, "urgent", 1)

        assert pod["spec"]["nodeName"] == spare
        assert is_true(get_job(cluster, namespace, "stuck"), "Preempted")
        assert cluster.get("pod", name, namespace) is not None, "the victim is still stuck"
    finally:
        cluster.kubectl(
            "patch", "pod", name, "-n", namespace, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]), check=False,
        )  # fmt: skip


def test_a_protected_gang_is_not_preempted_before_its_minimum_run_time(
    cluster: Cluster, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("protect")
    minimum = 15
    pool.apply(
        policy(
            f"{pool.label}-protect",
            namespaces=[namespace],
            preemption={"minimumRunSeconds": minimum},
        )
    )
    low = pool.priority_class("low", 10)
    high = pool.priority_class("high", 1000)
    pool.job(namespace, "long", pods=1, gpus=8, priority_class=low)
    (pod,) = wait_running(cluster, namespace, "long", 1)
    created = pod["metadata"]["creationTimestamp"]
    pool.job(namespace, "urgent", pods=1, gpus=8, priority_class=high)
    reason = cluster.wait_for(
        lambda: queued_reason(cluster, namespace, "urgent"), timeout=20, what="urgent queued"
    )
    assert reason == "WaitingForResources", "protected GPUs are not free capacity"
    time.sleep(5)
    assert running(cluster, namespace, "long"), "protected: still running"
    assert not live_pods(cluster, namespace, "urgent")
    assert not is_true(get_job(cluster, namespace, "long"), "Preempted")

    wait_running(cluster, namespace, "urgent", 1)
    victim = get_job(cluster, namespace, "long")
    preempted_at = condition(victim, "Preempted")["lastTransitionTime"]  # type: ignore[index]
    ran = _seconds(preempted_at) - _seconds(created)
    assert ran >= minimum - 1, dump(victim)  # timestamps have one-second resolution


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# ------------------------------------------------------------------ topology


def test_a_gang_requiring_a_rack_lands_in_one_rack_with_ranks_contiguous_by_rack(
    cluster: Cluster, pool: Pool
) -> None:
    for rack in ("r1", "r2", "r3"):
        pool.nodes(2, prefix=f"-{rack}", **{BLOCK: "b1", RACK: f"{pool.label}-{rack}"})
    namespace = cluster.new_namespace("topo")
    pool.apply(
        policy(
            f"{pool.label}-topo",
            namespaces=[namespace],
            topology={"levels": [BLOCK, RACK, "kubernetes.io/hostname"]},
        )
    )
    pool.job(
        namespace, "racked", pods=4, gpus=4, annotations={"torchgate.io/topology-required": RACK}
    )
    pods = wait_running(cluster, namespace, "racked", 4)
    racks = {node_labels(cluster, p["spec"]["nodeName"])[RACK] for p in pods}
    assert len(racks) == 1, racks

    # A gang larger than a rack spans racks, its ranks in rack order (no rack visited twice).
    pool.job(
        namespace, "wide", pods=6, gpus=4, annotations={"torchgate.io/topology-preferred": RACK}
    )
    pods = wait_running(cluster, namespace, "wide", 6)
    by_rank = sorted(pods, key=rank_of)
    assert [rank_of(p) for p in by_rank] == list(range(6))
    sequence = [node_labels(cluster, p["spec"]["nodeName"])[RACK] for p in by_rank]
    runs = [rack for i, rack in enumerate(sequence) if i == 0 or sequence[i - 1] != rack]
    assert len(runs) == len(set(runs)) == 2, sequence
    assert not racks & set(sequence), "the first gang's rack is full"
    nodes = [p["spec"]["nodeName"] for p in by_rank]
    node_runs = [n for i, n in enumerate(nodes) if i == 0 or nodes[i - 1] != n]
    assert len(node_runs) == len(set(node_runs)), f"consecutive ranks share a node: {nodes}"

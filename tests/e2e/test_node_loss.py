"""A pool that heals itself, on kwok: lost nodes, health taints, quarantine of a failing node.

The control plane runs what a real one runs for this (the node lifecycle, taint-eviction and pod
garbage collection controllers). A fake node *stops heartbeating* when it gets the label
``torchgate.io/fake-heartbeat=stopped``: kwok forgets it, so its Lease and Ready condition go
stale and nothing confirms the deletion of its pods, as with a node cut off from the control
plane. The controller runs with ``--node-lost-seconds 5`` (the node-monitor grace period of the
controller manager stays Kubernetes' default, 50 s). Every gang is 8-GPU pods with
``backoffLimit: 0``, in a pool of its own; assertions read pods, the job, its Events and the
controller's metrics, never logs.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    create_job,
    dump,
    events_of,
    events_once,
    get_job,
    is_true,
    job_pods,
    live_pods,
)
from tests.e2e.node_outages import (
    QUARANTINE,
    QUARANTINE_UNTIL,
    STOPPED,
    all_running_in_attempt,
    apply_quarantine_policy,
    bring_back,
    delete_policy,
    metric,
    new_pool_namespace,
    node_events,
    quarantine_taint,
    ready_condition,
    resume_heartbeats,
    running_on,
    set_not_ready,
)
from tests.e2e.node_outages import controller as controller  # the module-scoped fixture
from torchgate_dev.controlplane import kwok

pytestmark = pytest.mark.e2e


def gang(cluster: Cluster, namespace: str, pool: str) -> list[dict[str, Any]]:
    """A Master and a Worker of 8 GPUs each in ``pool``, ``backoffLimit: 0``, both Running."""
    raw = (
        job("gang", namespace)
        .master(gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .workers(1, gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .run_policy(backoffLimit=0)
        .build()
    )
    create_job(cluster, raw)
    return cluster.wait_for(lambda: attempt_running(cluster, namespace, 1), what="the gang Running")


def attempt_running(cluster: Cluster, namespace: str, attempt: int) -> list[dict[str, Any]] | None:
    """Both pods of the gang when both are Running in gang attempt ``attempt``, else None."""
    pods = live_pods(cluster, namespace, "gang")
    return pods if all_running_in_attempt(pods, 2, attempt) else None


def restarted_off(cluster: Cluster, namespace: str, node: str) -> list[dict[str, Any]] | None:
    """Both pods Running in one later attempt, neither on ``node``, else None.

    A later attempt, not the second: Kubernetes' taint-eviction controller deletes by pod name
    (kubernetes/kubernetes#140639), so when it acts after torchgate placed the gang again it may
    evict the new pod of the same name, which is one more (uncounted) restart.
    """
    pods = live_pods(cluster, namespace, "gang")
    attempts = {p["metadata"]["annotations"]["torchgate.io/gang-attempt"] for p in pods}
    ok = (
        len(pods) == 2
        and len(attempts) == 1
        and attempts != {"1"}
        and all(p["status"].get("phase") == "Running" for p in pods)
        and node not in {p["spec"]["nodeName"] for p in pods}
    )
    return pods if ok else None


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    (pytorch,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    return {e["name"]: e.get("value", "") for e in pytorch.get("env", [])}


def gang_restarts(controller: ControllerProcess, cause: str) -> float:
    prefix = f'torchgate_controller_gang_restarts_total{{cause="{cause}"}} '
    lines = [line for line in controller.metrics().splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


def test_a_gang_on_a_node_that_stops_heartbeating_runs_again_whole_elsewhere(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace, pool = new_pool_namespace(cluster, "lost")
    cluster.add_gpu_nodes(3, pool, labels={"pool": pool})
    first = gang(cluster, namespace, pool)
    worker = next(p for p in first if p["metadata"]["name"] == "gang-worker-0")
    lost = worker["spec"]["nodeName"]
    old_port = int(env_of(worker)["MASTER_PORT"])

    cluster.kubectl("label", "node", lost, STOPPED)
    try:
        unknown = cluster.wait_for(
            lambda: (ready := ready_condition(cluster, lost))["status"] != "True" and ready,
            timeout=120,
            what=f"{lost} to stop being Ready",
        )
        again = cluster.wait_for(
            lambda: attempt_running(cluster, namespace, 2), timeout=90, what="the gang again"
        )
        since = (
            datetime.now(UTC) - datetime.fromisoformat(unknown["lastTransitionTime"])
        ).total_seconds()
        print(f"node {lost} {unknown['status']}: gang Running again {since:.1f}s later")
        assert since < 90

        assert lost not in {p["spec"]["nodeName"] for p in again}
        assert {p["metadata"]["name"] for p in again} == {"gang-master-0", "gang-worker-0"}
        assert {env_of(p)["MASTER_PORT"] for p in again} == {str(old_port + 1)}
        stored = get_job(cluster, namespace, "gang")
        assert stored is not None
        assert not is_true(stored, "Failed"), dump(stored)
        assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})
        restarting = condition(stored, "Restarting")
        running = condition(stored, "Running")
        assert (restarting or running) is not None, dump(stored)
        events = [
            e
            for e in events_once(cluster, namespace, "gang", "NodeLost")
            if e["reason"] == "NodeLost"
        ]
        assert lost in events[0]["message"]
        assert gang_restarts(controller, "NodeLost") >= 1
        # Force-deleted: nothing of the first attempt is left waiting for the lost node's kubelet.
        assert {p["metadata"]["uid"] for p in job_pods(cluster, namespace, "gang")}.isdisjoint(
            p["metadata"]["uid"] for p in first
        )
    finally:
        resume_heartbeats(cluster, lost)
    cluster.wait_for(
        lambda: ready_condition(cluster, lost)["status"] == "True", what=f"{lost} Ready again"
    )
    time.sleep(2)  # the node is back: still nothing of the first attempt, the gang untouched
    assert attempt_running(cluster, namespace, 2) is not None


def test_a_no_execute_health_taint_puts_the_gang_back_together_within_15_seconds(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace, pool = new_pool_namespace(cluster, "taint")
    cluster.add_gpu_nodes(3, pool, labels={"pool": pool})
    first = gang(cluster, namespace, pool)
    sick = next(p for p in first if p["metadata"]["name"] == "gang-worker-0")["spec"]["nodeName"]

    tainted_at = time.monotonic()
    cluster.kubectl("taint", "node", sick, "nvidia.com/gpu-health=unhealthy:NoExecute")
    again = cluster.wait_for(
        lambda: restarted_off(cluster, namespace, sick), timeout=30, what="the gang again"
    )
    took = time.monotonic() - tainted_at
    attempt = again[0]["metadata"]["annotations"]["torchgate.io/gang-attempt"]
    print(f"NoExecute taint on {sick}: gang Running again elsewhere after {took:.1f}s ({attempt=})")
    assert took < 15

    stored = get_job(cluster, namespace, "gang")
    assert stored is not None
    assert not is_true(stored, "Failed"), dump(stored)
    assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})
    events = [
        e
        for e in events_once(cluster, namespace, "gang", "NodeTainted")
        if e["reason"] == "NodeTainted"
    ]
    assert "nvidia.com/gpu-health" in events[0]["message"]
    assert sick in events[0]["message"]
    assert gang_restarts(controller, "NodeTainted") >= 1


def test_a_no_schedule_taint_keeps_new_gangs_off_and_leaves_running_ones_alone(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("cordon")
    pool = f"ns-{namespace[-6:]}"
    cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    half = {"nodeSelector": {"pool": pool}}
    create_job(cluster, job("first", namespace).master(gpus=4, pod_spec=half).build())
    (running,) = cluster.wait_for(
        lambda: [p for p in live_pods(cluster, namespace, "first") if p["spec"].get("nodeName")],
        what="the first gang bound",
    )
    busy = running["spec"]["nodeName"]

    cluster.kubectl("taint", "node", busy, "nvidia.com/gpu-health=degraded:NoSchedule")
    create_job(cluster, job("second", namespace).master(gpus=4, pod_spec=half).build())
    (placed,) = cluster.wait_for(
        lambda: [p for p in live_pods(cluster, namespace, "second") if p["spec"].get("nodeName")],
        what="the second gang bound",
    )

    assert placed["spec"]["nodeName"] != busy, "4 GPUs were free there, but it is tainted"
    time.sleep(2)
    (still,) = live_pods(cluster, namespace, "first")
    assert still["metadata"]["uid"] == running["metadata"]["uid"]
    assert not [e for e in events_of(cluster, namespace, "first") if e["reason"] == "NodeTainted"]


def test_a_gang_whose_node_is_deleted_runs_again_whole_elsewhere_at_once(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """``kubectl delete node`` under a running gang: lost at once, no ``Ready`` spell to wait for.

    Nothing confirms the deletion of the pods bound to a deleted node (kwok forgets them); the
    gang restarts once, uncounted, named by the node's deletion, on the nodes left.
    """
    namespace, pool = new_pool_namespace(cluster, "delnode")
    cluster.add_gpu_nodes(3, pool, labels={"pool": pool})
    first = gang(cluster, namespace, pool)
    worker = next(p for p in first if p["metadata"]["name"] == "gang-worker-0")
    deleted = worker["spec"]["nodeName"]
    restarts_before = gang_restarts(controller, "NodeLost")

    cluster.kubectl("delete", "node", deleted, "--wait=false")
    again = cluster.wait_for(
        lambda: attempt_running(cluster, namespace, 2), timeout=30, what="the gang again"
    )

    assert deleted not in {p["spec"]["nodeName"] for p in again}
    stored = get_job(cluster, namespace, "gang")
    assert stored is not None
    assert not is_true(stored, "Failed"), dump(stored)
    assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})
    events = [
        e for e in events_once(cluster, namespace, "gang", "NodeLost") if e["reason"] == "NodeLost"
    ]
    assert len(events) == 1, events
    assert int(events[0].get("count") or 1) == 1, events
    assert f"node {deleted} was deleted" in events[0]["message"]
    assert gang_restarts(controller, "NodeLost") >= restarts_before + 1
    time.sleep(3)  # nothing left of the first attempt takes the gang down again
    assert attempt_running(cluster, namespace, 2) is not None
    assert {p["metadata"]["uid"] for p in job_pods(cluster, namespace, "gang")} == {
        p["metadata"]["uid"] for p in again
    }


def test_an_elastic_job_losing_a_worker_node_runs_on_fewer_and_takes_it_back_without_restart(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Three Workers (``minReplicas: 1``) on the pool's three nodes; one node stops heartbeating.

    The gang restarts whole (restarts are whole-gang) with the two Workers the two nodes left
    hold; the third is left out and named in ``Running`` (no partial gang, no pod left Pending
    for kube-scheduler); when its node is back it starts beside them, in the same attempt.
    """
    namespace, pool = new_pool_namespace(cluster, "ellost")
    cluster.add_gpu_nodes(3, pool, labels={"pool": pool})
    elastic = (
        job("gang", namespace)
        .workers(3, gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
        .elastic(minReplicas=1, maxReplicas=3)
        .run_policy(backoffLimit=0)
    )
    create_job(cluster, elastic.build())

    def running(count: int, attempt: int) -> list[dict[str, Any]] | None:
        pods = live_pods(cluster, namespace, "gang")
        return pods if all_running_in_attempt(pods, count, attempt) else None

    first = cluster.wait_for(lambda: running(3, 1), timeout=60, what="three Workers")
    lost = next(p for p in first if p["metadata"]["name"] == "gang-worker-2")["spec"]["nodeName"]
    set_not_ready(cluster, lost)
    try:
        fewer = cluster.wait_for(lambda: running(2, 2), timeout=60, what="two Workers again")
        assert lost not in {p["spec"]["nodeName"] for p in fewer}

        def waits_named() -> dict[str, Any] | None:
            found = condition(get_job(cluster, namespace, "gang"), "Running")
            return found if found and "gang-worker-2" in found.get("message", "") else None

        cluster.wait_for(waits_named, timeout=30, what="Running naming gang-worker-2")
        assert not is_true(get_job(cluster, namespace, "gang"), "Failed")
    finally:
        resume_heartbeats(cluster, lost)
    grown = cluster.wait_for(lambda: running(3, 2), timeout=60, what="the third Worker back")
    kept = {p["metadata"]["uid"] for p in fewer}
    assert kept <= {p["metadata"]["uid"] for p in grown}, "the two Workers were not restarted"
    assert gang_restarts(controller, "NodeLost") >= 1


# ------------------------------------------------------------------ quarantine


def test_a_node_that_fails_every_sandbox_is_quarantined_and_clearing_returns_it_to_use(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """The failing job's pods stay in ContainerCreating on ``bad`` (kwok's sandbox-failure stage).

    ``good`` is busy at first, so without quarantine every attempt would land on ``bad`` again;
    the policy quarantines after 2 stuck pods, 5 s each.
    """
    namespace, pool = new_pool_namespace(cluster, "quar")
    bad, good = cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    settings = {"faults": 2, "stuckPodSeconds": 5, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    on_pool = {"nodeSelector": {"pool": pool}}
    try:
        blocker = job("blocker", namespace).master(
            gpus=8, pod_spec={"nodeSelector": {"kubernetes.io/hostname": good}}
        )
        create_job(cluster, blocker.build())
        cluster.wait_for(lambda: running_on(cluster, namespace, "blocker"), what="the blocker")

        def fail_sandboxes_on_bad(raw: dict[str, Any]) -> None:
            template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
            template["metadata"] = {"annotations": kwok.sandbox_failure_annotation(bad)}

        failing = (
            job("failing", namespace)
            .master(gpus=8, pod_spec=on_pool)
            .run_policy(backoffLimit=0)
            .edit(fail_sandboxes_on_bad)
        )
        create_job(cluster, failing.build())
        taint = cluster.wait_for(
            lambda: quarantine_taint(cluster, bad), timeout=120, what=f"{bad} quarantined"
        )
        assert taint == {"key": QUARANTINE, "value": "PodStuck", "effect": "NoSchedule"}
        shown = cluster.kubectl(
            "get", "node", bad, "--no-headers", "-L", f"{QUARANTINE},{QUARANTINE_UNTIL}"
        ).stdout
        print(shown.strip())
        labels = cluster.get("node", bad)["metadata"]["labels"]  # type: ignore[index]
        assert labels[QUARANTINE] == "PodStuck"
        assert labels[QUARANTINE] in shown
        assert labels[QUARANTINE_UNTIL] in shown
        assert quarantine_taint(cluster, good) is None
        assert metric(controller, "torchgate_controller_quarantined_nodes") == 1
        quarantines = 'torchgate_controller_node_quarantines_total{cause="PodStuck"}'
        assert metric(controller, quarantines) >= 1
        assert gang_restarts(controller, "PodStuck") >= 2
        events = events_once(cluster, namespace, "failing", "PodStuck", "NodeQuarantined")
        reasons = [e["reason"] for e in events]
        assert "PodStuck" in reasons
        assert "NodeQuarantined" in reasons
        cluster.wait_for(
            lambda: any(e["reason"] == "NodeQuarantined" for e in node_events(cluster, bad)),
            what=f"the Event on {bad}",
        )
        stored = get_job(cluster, namespace, "failing")
        assert stored is not None
        assert not is_true(stored, "Failed"), dump(stored)
        assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})

        # The next gang goes elsewhere: once the good node is free, the failing job runs there.
        cluster.kubectl("delete", "pytorchjob", "blocker", "--namespace", namespace)
        placed = cluster.wait_for(
            lambda: running_on(cluster, namespace, "failing"), timeout=60, what="failing again"
        )
        assert placed == good

        # A gang that fits only on the quarantined node waits; clearing it returns the node.
        create_job(cluster, job("next", namespace).master(gpus=8, pod_spec=on_pool).build())
        time.sleep(5)
        assert live_pods(cluster, namespace, "next") == []
        cluster.kubectl("taint", "nodes", bad, f"{QUARANTINE}-")
        placed = cluster.wait_for(
            lambda: running_on(cluster, namespace, "next"), timeout=60, what="next on the node"
        )
        assert placed == bad
        cluster.wait_for(
            lambda: QUARANTINE_UNTIL not in cluster.get("node", bad)["metadata"]["labels"],  # type: ignore[index]
            what="the quarantine labels tidied",
        )
        assert metric(controller, "torchgate_controller_quarantined_nodes") == 0
    finally:
        delete_policy(cluster, name)


def test_a_gang_whose_only_nodes_are_quarantined_is_told_so_as_soon_as_they_are_back(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Both nodes the gang may use are lost under it and quarantined at their first fault.

    While they are NotReady its ``Queued`` condition says so; once they are Ready again but
    quarantined it must say that at once (what an admin acts on: clear the quarantine), not
    when the message is next refreshed (every 30 s) while the cooldown (an hour) runs.
    Cleared by hand, the nodes take the gang again.
    """
    namespace, pool = new_pool_namespace(cluster, "qonly")
    nodes = cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    settings = {"faults": 1, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)

    def queued_saying(words: str) -> dict[str, Any] | None:
        found = condition(get_job(cluster, namespace, "gang"), "Queued")
        ok = found is not None and found["status"] == "True" and words in found["message"]
        return found if ok else None

    try:
        gang(cluster, namespace, pool)
        for node in nodes:
            set_not_ready(cluster, node)
        cluster.wait_for(
            lambda: queued_saying("2 NotReady"), timeout=60, what="Queued naming 2 NotReady"
        )
        cluster.wait_for(
            lambda: all(quarantine_taint(cluster, node) for node in nodes),
            timeout=20,
            what=f"{nodes} quarantined",
        )
        for node in nodes:
            bring_back(cluster, node)
        queued = cluster.wait_for(
            lambda: queued_saying("2 quarantined"), timeout=10, what="Queued naming 2 quarantined"
        )
        assert "NotReady" not in queued["message"], queued["message"]

        for node in nodes:
            cluster.kubectl("taint", "nodes", node, f"{QUARANTINE}-")
        cluster.wait_for(
            lambda: attempt_running(cluster, namespace, 2), timeout=30, what="the gang again"
        )
    finally:
        for node in nodes:
            resume_heartbeats(cluster, node)
        delete_policy(cluster, name)


def test_draining_a_node_for_maintenance_moves_its_gangs_and_does_not_quarantine_it(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """``kubectl drain`` of a node holding three gangs, as many as the default quarantine counts.

    Each gang restarts elsewhere on its eviction; none of the evictions is the node's fault.
    """
    namespace, pool = new_pool_namespace(cluster, "drain")
    (busy,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    jobs = [f"small-{index}" for index in range(3)]
    for name in jobs:
        small = job(name, namespace).master(gpus=2, pod_spec={"nodeSelector": {"pool": pool}})
        create_job(cluster, small.build())
    for name in jobs:
        assert cluster.wait_for(lambda name=name: running_on(cluster, namespace, name)) == busy
    (spare,) = cluster.add_gpu_nodes(1, f"{pool}-spare", labels={"pool": pool})

    drained = cluster.kubectl("drain", busy, "--ignore-daemonsets", "--timeout=60s", timeout=90)
    assert drained.returncode == 0
    for name in jobs:
        placed = cluster.wait_for(
            lambda name=name: running_on(cluster, namespace, name), what=f"{name} again"
        )
        assert placed == spare
        events = events_once(cluster, namespace, name, "PodDisrupted")
        disrupted = [e["message"] for e in events if e["reason"] == "PodDisrupted"]
        assert busy in disrupted[0]
    cluster.kubectl("uncordon", busy)
    time.sleep(2)  # the controller has heard of every restart: still no quarantine
    assert quarantine_taint(cluster, busy) is None
    assert (
        metric(controller, 'torchgate_controller_node_quarantines_total{cause="PodDisrupted"}') == 0
    )


def test_two_nodes_of_a_gang_lost_at_once_are_both_named_and_both_quarantined(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Both nodes of the gang stop heartbeating together, as in a rack that loses power.

    The policy quarantines a node at its first fault, so each node charged is seen on the Node.
    """
    namespace, pool = new_pool_namespace(cluster, "rack")
    cluster.add_gpu_nodes(4, pool, labels={"pool": pool})
    settings = {"faults": 1, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    lost: list[str] = []
    try:
        lost = sorted(p["spec"]["nodeName"] for p in gang(cluster, namespace, pool))
        for node in lost:
            cluster.kubectl("label", "node", node, STOPPED)
        cluster.wait_for(
            lambda: restarted_off(cluster, namespace, lost[0]), timeout=150, what="the gang again"
        )
        assert not {p["spec"]["nodeName"] for p in live_pods(cluster, namespace, "gang")} & set(
            lost
        )
        events = [
            e
            for e in events_once(cluster, namespace, "gang", "NodeLost")
            if e["reason"] == "NodeLost"
        ]
        assert all(node in events[0]["message"] for node in lost), events[0]["message"]
        taints = [quarantine_taint(cluster, node) for node in lost]
        assert taints == [{"key": QUARANTINE, "value": "NodeLost", "effect": "NoSchedule"}] * 2
    finally:
        for node in lost:
            resume_heartbeats(cluster, node)
        delete_policy(cluster, name)


def test_two_nodes_of_a_gang_lost_seconds_apart_are_both_charged_by_its_one_restart(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """A rack's nodes turn NotReady a few seconds apart (their leases are staggered).

    The second node is lost 3 s after the first, within the failure window (5 s) of the gang's
    restart: that one restart charges both nodes, so with a policy quarantining a node at its
    first fault both are quarantined, and the gang restarts once, off both.
    """
    namespace, pool = new_pool_namespace(cluster, "stagger")
    cluster.add_gpu_nodes(4, pool, labels={"pool": pool})
    settings = {"faults": 1, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    lost: list[str] = []
    try:
        pods = gang(cluster, namespace, pool)
        lost = [p["spec"]["nodeName"] for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
        set_not_ready(cluster, lost[0])
        time.sleep(3)
        set_not_ready(cluster, lost[1])
        again = cluster.wait_for(
            lambda: attempt_running(cluster, namespace, 2), timeout=60, what="the gang again"
        )
        assert not {p["spec"]["nodeName"] for p in again} & set(lost)
        cluster.wait_for(
            lambda: all(quarantine_taint(cluster, node) for node in lost),
            timeout=20,
            what=f"both {lost} quarantined",
        )
        time.sleep(2)  # the second node is lost by now: no second restart for it
        assert attempt_running(cluster, namespace, 2) is not None
    finally:
        for node in lost:
            resume_heartbeats(cluster, node)
        delete_policy(cluster, name)


def test_a_crash_its_node_is_tainted_for_a_moment_later_is_the_nodes_fault_not_the_jobs(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """An Xid: the rank dies first (CUDA error, exit code 1), the health taint comes 1 s later.

    Under ``ExitCode`` exit code 1 would end the job for good, and ``backoffLimit: 0`` would
    end it under any policy; the crash is judged ``--failure-window-seconds`` (5, the default)
    after it, when the node's taint makes it the node's fault. The policy quarantines a node at
    its first fault, so the charge is seen on the Node.
    """
    namespace, pool = new_pool_namespace(cluster, "xid")
    cluster.add_gpu_nodes(3, pool, labels={"pool": pool})
    settings = {"faults": 1, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    on_pool = {"nodeSelector": {"pool": pool}}
    try:
        exit_code_policy = (
            job("gang", namespace)
            .master(gpus=8, restart_policy="ExitCode", pod_spec=on_pool)
            .workers(1, gpus=8, restart_policy="ExitCode", pod_spec=on_pool)
            .run_policy(backoffLimit=0)
        )
        create_job(cluster, exit_code_policy.build())
        first = cluster.wait_for(
            lambda: attempt_running(cluster, namespace, 1), what="the gang Running"
        )
        sick = next(p for p in first if p["metadata"]["name"] == "gang-worker-0")["spec"][
            "nodeName"
        ]
        counted_before = gang_restarts(controller, "ContainerFailed")

        cluster.finish_pod(namespace, "gang-worker-0", 1)
        cluster.wait_for(
            lambda: (
                (pod := cluster.get("pod", "gang-worker-0", namespace))
                and pod["status"].get("phase") == "Failed"
            ),
            what="gang-worker-0 Failed",
        )
        time.sleep(1)
        cluster.kubectl("taint", "node", sick, "nvidia.com/gpu-health=unhealthy:NoExecute")
        cluster.wait_for(
            lambda: restarted_off(cluster, namespace, sick), timeout=30, what="the gang again"
        )

        stored = get_job(cluster, namespace, "gang")
        assert stored is not None
        assert not is_true(stored, "Failed"), dump(stored)
        assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {})
        events = [
            e
            for e in events_once(cluster, namespace, "gang", "NodeTainted")
            if e["reason"] == "NodeTainted"
        ]
        assert sick in events[0]["message"]
        assert "gang-worker-0 failed" in events[0]["message"]
        assert gang_restarts(controller, "ContainerFailed") == counted_before
        taint = cluster.wait_for(
            lambda: quarantine_taint(cluster, sick), what=f"{sick} quarantined"
        )
        assert taint == {"key": QUARANTINE, "value": "NodeTainted", "effect": "NoSchedule"}
    finally:
        delete_policy(cluster, name)


def test_a_job_whose_image_exists_nowhere_fails_on_its_backoff_limit_and_quarantines_nothing(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Every pod of the job waits in ImagePullBackOff on whatever node it lands (kwok's stage).

    The first stuck pull is a fault of its node (uncounted restart), every later one the job's:
    with ``backoffLimit: 1`` the job restarts once more, counted, then fails. The policy would
    quarantine a node after 2 faults, which a job that blamed a node on every attempt would reach.
    """
    namespace, pool = new_pool_namespace(cluster, "pull")
    nodes = cluster.add_gpu_nodes(2, pool, labels={"pool": pool})
    settings = {"faults": 2, "stuckPodSeconds": 5, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    try:

        def image_never_pulls(raw: dict[str, Any]) -> None:
            template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
            template["metadata"] = {"annotations": kwok.image_pull_failure_annotation()}

        typo = (
            job("typo", namespace)
            .master(gpus=8, pod_spec={"nodeSelector": {"pool": pool}})
            .run_policy(backoffLimit=1)
            .edit(image_never_pulls)
        )
        create_job(cluster, typo.build())

        def failed() -> dict[str, Any] | None:
            stored = get_job(cluster, namespace, "typo")
            return stored if stored is not None and is_true(stored, "Failed") else None

        stored = cluster.wait_for(failed, timeout=110, what="typo Failed")
        ended = condition(stored, "Failed")
        assert ended is not None
        assert ended["reason"] == "BackoffLimitExceeded", dump(stored)
        annotations = stored["metadata"]["annotations"]
        assert annotations["torchgate.io/restarts"] == "1"
        assert annotations["torchgate.io/image-pull-stuck"] in nodes
        events = events_once(cluster, namespace, "typo", "PodStuck", "ImagePullFailed")
        reasons = [e["reason"] for e in events]
        assert reasons.count("PodStuck") == 1
        assert "ImagePullFailed" in reasons
        assert all(quarantine_taint(cluster, n) is None for n in nodes)
        assert gang_restarts(controller, "ImagePullFailed") >= 1
    finally:
        delete_policy(cluster, name)

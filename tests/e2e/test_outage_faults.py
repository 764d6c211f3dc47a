"""One outage of a node is one fault, however many gangs it took down, on kwok.

The admin's view of quarantine: it should measure how flaky a node is, not how many gangs it
hosted. A node running three small gangs that loses its power for a moment takes all three down
at once; under the default policy (3 faults in 30 minutes) that must not quarantine it when it
comes back, while a node equally flaky that ran one big gang would not be quarantined either.
Separate outages still add up: a node that goes NotReady again under another gang is quarantined
at the threshold. A node rebooted by its admin (the kubelet's graceful node shutdown) is no
fault at all, however many gangs it held (also when its kubelet reaches their priority group
only after ``--node-lost-seconds``: their pods are then left to that kubelet, not
force-deleted), and a gang its kubelet refused to start while it shut down is no failure of
the job. Nodes are made NotReady as in ``test_node_loss``
(heartbeats stopped, ``Ready=False`` posted) and come back when kwok heartbeats again; the
controller runs with ``--node-lost-seconds 5``. Assertions read pods, Nodes and the
controller's metrics, never logs.
"""

from __future__ import annotations

import json
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
    events_once,
    get_job,
    live_pods,
)
from tests.e2e.node_outages import (
    QUARANTINE,
    STOPPED,
    add_spare,
    all_running_in_attempt,
    apply_quarantine_policy,
    bring_back,
    delete_policy,
    metric,
    new_pool_namespace,
    node_labels,
    post_ready_false,
    quarantine_taint,
    resume_heartbeats,
    running_on,
    set_not_ready,
)
from tests.e2e.node_outages import controller as controller  # the module-scoped fixture

pytestmark = pytest.mark.e2e

GANGS = 3


def nodes_of(cluster: Cluster, namespace: str, attempt: int) -> set[str] | None:
    """The nodes of the one-pod gangs when all are Running in gang attempt ``attempt``."""
    pods = [pod for i in range(GANGS) for pod in live_pods(cluster, namespace, f"small{i}")]
    ok = all_running_in_attempt(pods, GANGS, attempt)
    return {str(p["spec"]["nodeName"]) for p in pods} if ok else None


def start_small_gangs(cluster: Cluster, namespace: str, pool: str) -> set[str]:
    """``GANGS`` one-pod gangs of 2 GPUs in ``pool``; the nodes they run on, once all Running."""
    on_pool = {"nodeSelector": {"pool": pool}}
    for i in range(GANGS):
        create_job(cluster, job(f"small{i}", namespace).master(gpus=2, pod_spec=on_pool).build())
    return cluster.wait_for(
        lambda: nodes_of(cluster, namespace, 1), timeout=60, what="the 3 gangs Running"
    )


def test_a_node_running_three_gangs_that_blips_once_is_not_quarantined_under_the_default_policy(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Three one-pod gangs on one node; it goes NotReady, they restart on a spare; it comes back.

    No PlacementPolicy selects the namespace: the built-in default (3 faults) applies.
    """
    namespace, pool = new_pool_namespace(cluster, "blip")
    (blip,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    stopped = False
    try:
        assert start_small_gangs(cluster, namespace, pool) == {blip}
        spare = add_spare(cluster, pool)

        set_not_ready(cluster, blip)
        stopped = True
        again = cluster.wait_for(
            lambda: nodes_of(cluster, namespace, 2), timeout=60, what="the 3 gangs on the spare"
        )
        assert again == {spare}
        restarts = metric(controller, 'torchgate_controller_gang_restarts_total{cause="NodeLost"}')
        assert restarts == GANGS

        bring_back(cluster, blip)
        stopped = False
        time.sleep(2)  # the keeper has had every fault of the outage by now
        assert quarantine_taint(cluster, blip) is None
        assert QUARANTINE not in node_labels(cluster, blip)
    finally:
        if stopped:
            resume_heartbeats(cluster, blip)


def test_a_health_taint_under_three_gangs_is_one_fault_under_the_default_policy(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """``kubectl taint ...:NoExecute`` (no ``timeAdded``) takes three one-pod gangs down at once.

    The controller dates such a taint by the first look that saw it, so every gang's restart
    names the same outage, however many looks apart they are.
    """
    namespace, pool = new_pool_namespace(cluster, "xid")
    (sick,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    assert start_small_gangs(cluster, namespace, pool) == {sick}
    spare = add_spare(cluster, pool)

    cluster.kubectl("taint", "node", sick, "nvidia.com/gpu-health=unhealthy:NoExecute")
    again = cluster.wait_for(
        lambda: nodes_of(cluster, namespace, 2), timeout=60, what="the 3 gangs on the spare"
    )
    assert again == {spare}
    assert metric(controller, 'torchgate_controller_gang_restarts_total{cause="NodeTainted"}') == 3
    time.sleep(2)  # the keeper has had every fault of the taint by now
    assert quarantine_taint(cluster, sick) is None


def test_a_node_whose_separate_outages_reach_the_threshold_is_quarantined(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Two NotReady spells of one node, each under a gang of its own; the policy says 2 faults."""
    namespace, pool = new_pool_namespace(cluster, "flaky")
    (flaky,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    settings = {"faults": 2, "windowSeconds": 600, "cooldownSeconds": 3600}
    name = apply_quarantine_policy(cluster, pool, [namespace], settings)
    on_pool = {"nodeSelector": {"pool": pool}}
    stopped = False
    try:
        create_job(cluster, job("first", namespace).master(gpus=8, pod_spec=on_pool).build())
        assert cluster.wait_for(lambda: running_on(cluster, namespace, "first")) == flaky
        spare = add_spare(cluster, pool)

        set_not_ready(cluster, flaky)
        stopped = True
        moved = cluster.wait_for(
            lambda: (on := running_on(cluster, namespace, "first")) != flaky and on,
            timeout=60,
            what="the first gang off the flaky node",
        )
        assert moved == spare
        bring_back(cluster, flaky)
        stopped = False
        time.sleep(2)
        assert quarantine_taint(cluster, flaky) is None  # one outage so far

        create_job(cluster, job("second", namespace).master(gpus=8, pod_spec=on_pool).build())
        assert cluster.wait_for(lambda: running_on(cluster, namespace, "second")) == flaky
        set_not_ready(cluster, flaky)
        stopped = True
        taint = cluster.wait_for(
            lambda: quarantine_taint(cluster, flaky), timeout=60, what=f"{flaky} quarantined"
        )
        assert taint == {"key": QUARANTINE, "value": "NodeLost", "effect": "NoSchedule"}
    finally:
        if stopped:
            resume_heartbeats(cluster, flaky)
        delete_policy(cluster, name)


def post_shutting_down(cluster: Cluster, node: str) -> None:
    """``Ready=False`` as the kubelet posts it once its node shutdown manager began."""
    post_ready_false(cluster, node, reason="KubeletNotReady", message="node is shutting down")


def shut_down_gracefully(cluster: Cluster, node: str, pods: list[str], namespace: str) -> None:
    """What the kubelet writes when systemd-logind tells it ``node`` is shutting down.

    Its node shutdown manager (pkg/kubelet/nodeshutdown) marks every pod it terminates with the
    ``DisruptionTarget`` condition (reason ``TerminationByKubelet``, its shutdown message) at
    once, while the containers stop (the phase turns ``Failed``, reason ``Terminated``, only
    after), and posts the node ``Ready=False`` with the message ``node is shutting down``. kwok
    forgets the node first (its heartbeats stop, as the machine's will), so it keeps what is
    written here.
    """
    cluster.kubectl("label", "node", node, STOPPED)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    shutdown = "Pod was terminated in response to imminent node shutdown."
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": shutdown,
        "lastTransitionTime": now,
    }
    for pod in pods:
        cluster.kubectl(
            "patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=strategic",
            "-p", json.dumps({"status": {"conditions": [condition]}}),
        )  # fmt: skip
    post_shutting_down(cluster, node)


def test_a_node_rebooted_under_three_gangs_is_no_fault_and_is_not_quarantined(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """A kernel update's reboot: the kubelet shuts three one-pod gangs down gracefully.

    They restart on a spare, uncounted; the node comes back and is not quarantined under the
    default policy (3 faults), which three faults of its own would have done.
    """
    namespace, pool = new_pool_namespace(cluster, "reboot")
    (rebooted,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    stopped = False
    try:
        assert start_small_gangs(cluster, namespace, pool) == {rebooted}
        spare = add_spare(cluster, pool)
        before = metric(
            controller, 'torchgate_controller_gang_restarts_total{cause="PodDisrupted"}'
        )

        pods = [f"small{i}-master-0" for i in range(GANGS)]
        shut_down_gracefully(cluster, rebooted, pods, namespace)
        stopped = True
        again = cluster.wait_for(
            lambda: nodes_of(cluster, namespace, 2), timeout=60, what="the 3 gangs on the spare"
        )
        assert again == {spare}
        restarts = metric(
            controller, 'torchgate_controller_gang_restarts_total{cause="PodDisrupted"}'
        )
        assert restarts - before == GANGS

        bring_back(cluster, rebooted)
        stopped = False
        time.sleep(2)  # the keeper has had every restart of the reboot by now
        assert quarantine_taint(cluster, rebooted) is None
        assert QUARANTINE not in node_labels(cluster, rebooted)
    finally:
        if stopped:
            resume_heartbeats(cluster, rebooted)


def test_gangs_a_shutdown_reaches_late_restart_as_lost_charge_no_fault_and_are_not_force_deleted(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """``shutdownGracePeriodByPodPriority``: the kubelet reaches the training pods' group late.

    The node posts ``Ready=False`` "node is shutting down" while the lower groups stop, longer
    than ``--node-lost-seconds``: the three one-pod gangs restart as ``NodeLost``, the node is
    charged nothing (the default policy's 3 faults would quarantine it), and their pods are
    deleted gracefully, left for the kubelet to stop (the test confirms each deletion as the
    kubelet would, once it has seen the pod wait for it).
    """
    namespace, pool = new_pool_namespace(cluster, "prio")
    (rebooted,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    stopped = False
    try:
        assert start_small_gangs(cluster, namespace, pool) == {rebooted}
        spare = add_spare(cluster, pool)
        before = metric(controller, 'torchgate_controller_gang_restarts_total{cause="NodeLost"}')

        cluster.kubectl("label", "node", rebooted, STOPPED)
        stopped = True
        post_shutting_down(cluster, rebooted)
        pods = [f"small{i}-master-0" for i in range(GANGS)]

        def awaited() -> list[dict[str, Any]] | None:
            found = [cluster.get("pod", pod, namespace=namespace) for pod in pods]
            waiting = [
                p
                for p in found
                if p is not None
                and p["spec"].get("nodeName") == rebooted
                and p["metadata"].get("deletionTimestamp")
            ]
            return waiting if len(waiting) == GANGS else None

        waiting = cluster.wait_for(awaited, timeout=60, what="the 3 pods deleted gracefully")
        assert all(p["metadata"]["deletionGracePeriodSeconds"] > 0 for p in waiting)
        time.sleep(3)  # a force deletion would have removed them by now
        still = awaited()
        assert still is not None, "the pods on the node shutting down were force-deleted"
        restarts = metric(controller, 'torchgate_controller_gang_restarts_total{cause="NodeLost"}')
        assert restarts - before == GANGS
        for pod in pods:  # the kubelet confirms each deletion once the container stopped
            cluster.kubectl(
                "delete", "pod", pod, "-n", namespace, "--grace-period=0", "--force", "--wait=false"
            )
        again = cluster.wait_for(
            lambda: nodes_of(cluster, namespace, 2), timeout=60, what="the 3 gangs on the spare"
        )
        assert again == {spare}

        bring_back(cluster, rebooted)
        stopped = False
        time.sleep(2)  # the keeper has had every restart of the reboot by now
        assert quarantine_taint(cluster, rebooted) is None
        assert QUARANTINE not in node_labels(cluster, rebooted)
    finally:
        if stopped:
            resume_heartbeats(cluster, rebooted)


def test_a_gang_refused_by_a_node_shutting_down_runs_elsewhere_and_spends_no_backoff(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Placed in the moment before the node posted NotReady: the kubelet refuses its pod.

    kwok has forgotten the node (its heartbeats stopped; still Ready for the controller
    manager's grace period), so the pod stays bound and unstarted, and the refusal is written as
    the kubelet's ``rejectPod`` writes it. ``backoffLimit: 0``: counted as the program's
    failure, it would end the job.
    """
    namespace, pool = new_pool_namespace(cluster, "refused")
    (closing,) = cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    cluster.kubectl("label", "node", closing, STOPPED)
    stopped = True
    try:
        on_pool = {"nodeSelector": {"pool": pool}}
        raw = job("late", namespace).master(gpus=8, pod_spec=on_pool).run_policy(backoffLimit=0)
        create_job(cluster, raw.build())
        bound = cluster.wait_for(
            lambda: [p for p in live_pods(cluster, namespace, "late") if p["spec"].get("nodeName")],
            timeout=30,
            what="the pod bound to the closing node",
        )
        assert bound[0]["spec"]["nodeName"] == closing
        spare = add_spare(cluster, pool)

        rejected = {
            "phase": "Failed",
            "reason": "NodeShutdown",
            "message": "Pod was rejected: Pod was rejected as the node is shutting down.",
        }
        cluster.kubectl(
            "patch", "pod", "late-master-0", "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": rejected}),
        )  # fmt: skip
        post_shutting_down(cluster, closing)

        assert (
            cluster.wait_for(
                lambda: running_on(cluster, namespace, "late"),
                timeout=60,
                what="the gang elsewhere",
            )
            == spare
        )
        found = get_job(cluster, namespace, "late")
        assert found is not None
        assert condition(found, "Failed") is None
        assert "torchgate.io/restarts" not in found["metadata"].get("annotations", {})
        events = events_once(cluster, namespace, "late", "PodDisrupted")
        disrupted = [e["message"] for e in events if e["reason"] == "PodDisrupted"]
        assert closing in disrupted[0]
    finally:
        if stopped:
            resume_heartbeats(cluster, closing)

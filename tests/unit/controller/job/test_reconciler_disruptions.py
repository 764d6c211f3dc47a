"""The reconciler's side of a disruption: what reaches the apiserver, in what order, and counts.

A reconciler over caches holding one running gang, a node cache, and an API that records every
request (patches answered as the apiserver would). Each test asserts the requests sent, the job
stored afterwards and the restarts metric.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

import orjson

from tests.builders.job import gpu_job, with_uid
from tests.builders.node import node
from tests.builders.pod import deleted_with_grace, disruption_target, set_phase, tolerating
from tests.unit.controller.helpers import NOW, World, merge_patch
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.controller.quarantine.rules import Fault, Outage, history_of, one_per_outage
from torchgate.kube.errors import decode_error
from torchgate.kube.informer import Informer
from torchgate.kube.resources import NODES, PODS, PYTORCHJOBS, SERVICES
from torchgate.pytorchjob.names import ANNOTATION_QUARANTINE_FAULTS
from torchgate.pytorchjob.policy import QuarantineSettings

MASTER, W0 = "demo-master-0", "demo-worker-0"
RESERVATION = {MASTER: "a100-0", W0: "a100-1"}
KEY = ("default", "demo")
# The apiserver's answer to a create in a namespace being deleted (kube-apiserver 1.37).
NAMESPACE_TERMINATING = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'events "x" is forbidden: unable to create new content in namespace default '
    "because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "x",
        "kind": "events",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace default is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}


class RecordingApi:
    """Records every request; answers job patches with the patched job, deletes with nothing.

    ``namespace_terminating``: every create is refused as in a namespace being deleted.
    """

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.namespace_terminating = False

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        self.requests.append((method, path, dict(query or {}), copy.deepcopy(body)))
        if method == "POST" and self.namespace_terminating:
            raise decode_error(403, orjson.dumps(NAMESPACE_TERMINATING), method, path)
        if method == "PATCH" and "/pytorchjobs/" in path:
            self.job = merge_patch(self.job, copy.deepcopy(body))
            version = int(self.job["metadata"].get("resourceVersion", "1")) + 1
            self.job["metadata"]["resourceVersion"] = str(version)
            return copy.deepcopy(self.job)
        return {} if method == "DELETE" else body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}

    def deletes(self) -> dict[str, dict[str, str]]:
        """Pod name -> query of its DELETE."""
        return {
            path.rsplit("/", 1)[1]: query
            for method, path, query, _ in self.requests
            if method == "DELETE" and "/pods/" in path
        }


class Rig:
    """One running gang (Master on a100-0, Worker on a100-1) and the nodes' cache."""

    def __init__(
        self, *, backoff_limit: int = 0, annotations: Mapping[str, str] | None = None
    ) -> None:
        builder = gpu_job("demo", workers=1).run_policy(backoffLimit=backoff_limit)
        world = World(with_uid(builder.build()))
        world.apply(world.plan())
        world.apply(world.plan(reservation=RESERVATION))
        world.job_raw["metadata"]["resourceVersion"] = "1"
        world.job_raw["metadata"].setdefault("annotations", {}).update(annotations or {})
        self.api = RecordingApi(copy.deepcopy(world.job_raw))
        self.jobs = Informer(self.api, PYTORCHJOBS)
        self.jobs.remember(copy.deepcopy(world.job_raw))
        self.pods = Informer(self.api, PODS)
        self.pods.index_by(job_key_of_pod)
        for name, pod in world.pods.items():
            self.pods.remember(set_phase(pod, "Running", node=RESERVATION[name]))
        services = Informer(self.api, SERVICES)
        services.index_by(job_key_of_pod)
        self.nodes = Informer(self.api, NODES)
        for name in ("a100-0", "a100-1"):
            self.nodes.remember(node(name))
        self.metrics = ControllerMetrics()
        self.faults: list[tuple[Fault, QuarantineSettings]] = []
        self.reconciler = Reconciler(
            self.api,
            jobs=self.jobs,
            pods=self.pods,
            services=services,
            policies=lambda: (),
            priority_of=lambda name: 0,
            admitter=Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None),
            metrics=self.metrics,
            options=Options(manage_unowned=True, node_lost_seconds=30),
            clock=lambda: NOW,
            nodes=self.nodes,
            node_faults=lambda fault, settings: self.faults.append((fault, settings)),
        )

    def restarts(self, cause: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            "torchgate_controller_gang_restarts_total", {"cause": cause}
        )


async def test_a_deleted_node_force_deletes_its_pods_after_moving_the_job_to_a_new_attempt() -> (
    None
):
    rig = Rig()
    rig.nodes.forget("", "a100-1")

    await rig.reconciler.reconcile(KEY)

    deletes = rig.api.deletes()
    assert deletes == {MASTER: {}, W0: {"gracePeriodSeconds": "0"}}
    methods = [(method, path.rsplit("/", 1)[1]) for method, path, _, _ in rig.api.requests]
    assert methods.index(("PATCH", "demo")) < methods.index(("DELETE", W0))
    annotations = rig.api.job["metadata"]["annotations"]
    assert annotations["torchgate.io/gang-attempt"] == "2"
    assert "torchgate.io/restarts" not in annotations
    assert rig.restarts("NodeLost") == 1
    restarting = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Restarting"]
    assert restarting[0]["reason"] == "NodeLost"
    assert "a100-1 was deleted" in restarting[0]["message"]


async def test_two_nodes_lost_at_once_are_both_named_and_both_charged_a_fault() -> None:
    rig = Rig()
    rig.nodes.forget("", "a100-0")
    rig.nodes.forget("", "a100-1")

    await rig.reconciler.reconcile(KEY)

    assert rig.api.deletes() == {
        MASTER: {"gracePeriodSeconds": "0"},
        W0: {"gracePeriodSeconds": "0"},
    }
    assert rig.restarts("NodeLost") == 1
    restarting = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Restarting"]
    assert "a100-0 was deleted" in restarting[0]["message"]
    assert "a100-1 was deleted" in restarting[0]["message"]
    assert sorted(rig.faults, key=lambda recorded: recorded[0].node) == [
        (Fault("a100-0", "NodeLost", NOW, KEY), QuarantineSettings()),
        (Fault("a100-1", "NodeLost", NOW, KEY), QuarantineSettings()),
    ]


def evicted(rig: Rig, name: str, reason: str) -> None:
    pod = rig.pods.get("default", name)
    assert pod is not None
    rig.pods.remember(disruption_target(pod, at="2026-03-01T11:59:58Z", reason=reason))


async def test_a_drain_restarts_the_gang_uncounted_and_blames_no_node() -> None:
    rig = Rig()
    evicted(rig, W0, "EvictionByEvictionAPI")

    await rig.reconciler.reconcile(KEY)

    assert rig.api.job["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert "torchgate.io/restarts" not in rig.api.job["metadata"]["annotations"]
    assert rig.restarts("PodDisrupted") == 1
    assert rig.faults == []


async def test_an_eviction_by_the_kubelet_blames_its_node() -> None:
    rig = Rig()
    evicted(rig, W0, "TerminationByKubelet")

    await rig.reconciler.reconcile(KEY)

    assert rig.restarts("PodDisrupted") == 1
    assert rig.faults == [(Fault("a100-1", "PodDisrupted", NOW, KEY), QuarantineSettings())]


async def test_a_graceful_shutdown_of_its_node_restarts_the_gang_uncounted_and_blames_no_node() -> (
    None
):
    rig = Rig()
    pod = rig.pods.get("default", W0)
    assert pod is not None
    shutdown = "Pod was terminated in response to imminent node shutdown."
    terminated = disruption_target(
        pod, at="2026-03-01T11:59:58Z", reason="TerminationByKubelet", message=shutdown
    )
    rig.pods.remember(terminated)

    await rig.reconciler.reconcile(KEY)

    assert rig.api.job["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert "torchgate.io/restarts" not in rig.api.job["metadata"]["annotations"]
    assert rig.restarts("PodDisrupted") == 1
    assert rig.faults == []


async def test_a_member_refused_by_a_node_shutting_down_restarts_the_gang_and_spends_nothing() -> (
    None
):
    """``backoffLimit: 0``: counted as a failure, the refusal would end the job."""
    rig = Rig()
    pod = rig.pods.get("default", W0)
    assert pod is not None
    refused = set_phase(pod, "Failed", reason="NodeShutdown")
    refused["status"]["message"] = (
        "Pod was rejected: Pod was rejected as the node is shutting down."
    )
    rig.pods.remember(refused)

    await rig.reconciler.reconcile(KEY)

    assert rig.api.job["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert "torchgate.io/restarts" not in rig.api.job["metadata"]["annotations"]
    conditions = {c["type"]: c for c in rig.api.job["status"]["conditions"]}
    assert "Failed" not in conditions
    assert conditions["Restarting"]["reason"] == "PodDisrupted"
    assert rig.faults == []


async def test_a_node_shutting_down_past_the_bound_restarts_the_gang_and_charges_no_fault() -> None:
    """Under ``shutdownGracePeriodByPodPriority``, the training pods are not marked yet.

    The lower priority group's wait outlasts ``--node-lost-seconds``; the node still posts
    ``Ready=False`` "node is shutting down", so its kubelet is alive: it is a reboot, no fault
    of the node, and the worker is deleted gracefully, for its kubelet to stop within its grace.
    """
    rig = Rig()
    closing = node("a100-1")
    closing["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "node is shutting down",
            "lastTransitionTime": "2026-03-01T11:59:15Z",
        }
    ]
    rig.nodes.remember(closing)

    await rig.reconciler.reconcile(KEY)

    assert rig.api.job["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert rig.restarts("NodeLost") == 1
    assert rig.faults == []
    assert rig.api.deletes() == {MASTER: {}, W0: {}}


async def test_a_node_not_ready_is_looked_at_again_when_it_would_count_as_lost() -> None:
    rig = Rig()
    sick = node("a100-1")
    sick["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-03-01T11:59:50Z"}
    ]
    rig.nodes.remember(sick)

    assert await rig.reconciler.reconcile(KEY) == 20
    assert rig.api.deletes() == {}
    assert rig.restarts("NodeLost") is None


async def test_a_member_that_vanished_is_judged_by_the_last_state_the_watch_reported() -> None:
    rig = Rig()
    worker = rig.pods.get("default", W0)
    assert worker is not None
    tainted = node(
        "a100-1",
        taints=[{"key": "nvidia.com/gpu-health", "value": "unhealthy", "effect": "NoExecute"}],
    )
    rig.nodes.remember(tainted)
    rig.pods.forget("default", W0)
    rig.reconciler.on_pod("DELETED", set_phase(worker, "Running", deleted=NOW), None)

    await rig.reconciler.reconcile(KEY)

    assert rig.restarts("NodeTainted") == 1
    assert set(rig.api.deletes()) == {MASTER}


async def test_a_containers_own_failure_counts_as_a_failure() -> None:
    rig = Rig(backoff_limit=3)
    worker = rig.pods.get("default", W0)
    assert worker is not None
    rig.pods.remember(set_phase(worker, "Failed", exit_code=1))

    await rig.reconciler.reconcile(KEY)

    annotations = rig.api.job["metadata"]["annotations"]
    assert (annotations["torchgate.io/restarts"], annotations["torchgate.io/gang-attempt"]) == (
        "1",
        "2",
    )
    assert rig.restarts("ContainerFailed") == 1
    assert all(query == {} for query in rig.api.deletes().values())


def stuck_on(rig: Rig, name: str, *, scheduled: str, reason: str = "ContainerCreating") -> None:
    pod = rig.pods.get("default", name)
    assert pod is not None
    pending = set_phase(pod, "Pending")
    pending["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}
    ]
    pending["status"]["containerStatuses"] = [
        {"name": "pytorch", "state": {"waiting": {"reason": reason}}}
    ]
    rig.pods.remember(pending)


async def test_a_pod_its_node_cannot_start_restarts_the_gang_uncounted_and_blames_the_node() -> (
    None
):
    rig = Rig()
    stuck_on(rig, W0, scheduled="2026-03-01T11:49:59Z")  # 601 s ago: past the default bound

    await rig.reconciler.reconcile(KEY)

    annotations = rig.api.job["metadata"]["annotations"]
    assert annotations["torchgate.io/gang-attempt"] == "2"
    assert "torchgate.io/restarts" not in annotations
    assert rig.restarts("PodStuck") == 1
    assert rig.faults == [
        (Fault("a100-1", "PodStuck", NOW, KEY), QuarantineSettings()),
    ]


async def test_a_pod_still_within_its_bound_is_looked_at_again_then_and_blames_nobody() -> None:
    rig = Rig()
    stuck_on(rig, W0, scheduled="2026-03-01T11:59:00Z")  # 60 s ago

    assert await rig.reconciler.reconcile(KEY) == 540
    assert rig.faults == []


async def test_a_containers_own_failure_is_not_its_nodes_fault() -> None:
    rig = Rig(backoff_limit=3)
    worker = rig.pods.get("default", W0)
    assert worker is not None
    rig.pods.remember(set_phase(worker, "Failed", exit_code=1))

    await rig.reconciler.reconcile(KEY)

    assert rig.faults == []


def hung(rig: Rig) -> None:
    master = rig.pods.get("default", MASTER)
    assert master is not None
    failed = set_phase(master, "Failed")
    message = "torchgate: no progress for 95s (progress deadline 90s): /tmp/torchgate-progress"
    failed["status"]["containerStatuses"] = [
        {"name": "pytorch", "state": {"terminated": {"exitCode": 137, "message": message}}}
    ]
    rig.pods.remember(failed)


async def test_a_master_ended_by_the_progress_probe_restarts_the_gang_as_a_counted_hang() -> None:
    rig = Rig(backoff_limit=3)
    hung(rig)

    await rig.reconciler.reconcile(KEY)

    annotations = rig.api.job["metadata"]["annotations"]
    assert annotations["torchgate.io/restarts"] == "1"
    assert annotations["torchgate.io/gang-attempt"] == "2"
    assert rig.restarts("Hang") == 1
    assert rig.restarts("ContainerFailed") is None
    restarting = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Restarting"]
    assert restarting[0]["reason"] == "Hang"
    assert rig.faults == []


async def test_a_hang_past_the_backoff_limit_fails_the_job() -> None:
    rig = Rig(backoff_limit=0)
    hung(rig)

    await rig.reconciler.reconcile(KEY)

    failed = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed[0]["status"] == "True"
    assert failed[0]["reason"] == "BackoffLimitExceeded"


# ------------------------------------------------------------------ images that never pull

PAST_THE_BOUND = "2026-03-01T11:49:59Z"  # 601 s ago: past the default stuckPodSeconds
PULLED_BEFORE_ON = {"torchgate.io/image-pull-stuck": "a100-0"}


async def test_a_first_stuck_image_pull_blames_the_node_and_is_remembered_on_the_job() -> None:
    rig = Rig()
    stuck_on(rig, W0, scheduled=PAST_THE_BOUND, reason="ImagePullBackOff")

    await rig.reconciler.reconcile(KEY)

    annotations = rig.api.job["metadata"]["annotations"]
    assert annotations["torchgate.io/image-pull-stuck"] == "a100-1"
    assert annotations["torchgate.io/gang-attempt"] == "2"
    assert "torchgate.io/restarts" not in annotations
    assert rig.restarts("PodStuck") == 1
    assert rig.faults == [(Fault("a100-1", "PodStuck", NOW, KEY), QuarantineSettings())]


async def test_a_later_stuck_image_pull_spends_backoff_and_blames_no_node() -> None:
    rig = Rig(backoff_limit=2, annotations=PULLED_BEFORE_ON)
    stuck_on(rig, W0, scheduled=PAST_THE_BOUND, reason="ErrImagePull")

    await rig.reconciler.reconcile(KEY)

    annotations = rig.api.job["metadata"]["annotations"]
    assert annotations["torchgate.io/restarts"] == "1"
    assert annotations["torchgate.io/gang-attempt"] == "2"
    assert annotations["torchgate.io/image-pull-stuck"] == "a100-0"
    assert rig.restarts("ImagePullFailed") == 1
    assert rig.restarts("PodStuck") is None
    restarting = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Restarting"]
    assert restarting[0]["reason"] == "ImagePullFailed"
    assert rig.faults == []


async def test_a_later_stuck_image_pull_past_the_backoff_limit_fails_the_job() -> None:
    rig = Rig(backoff_limit=0, annotations=PULLED_BEFORE_ON)
    stuck_on(rig, W0, scheduled=PAST_THE_BOUND, reason="ImagePullBackOff")

    await rig.reconciler.reconcile(KEY)

    failed = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Failed"]
    assert (failed[0]["status"], failed[0]["reason"]) == ("True", "BackoffLimitExceeded")
    assert "ImagePullFailed" in failed[0]["message"]
    assert rig.faults == []


async def test_a_stuck_sandbox_after_a_stuck_image_pull_is_still_the_nodes() -> None:
    rig = Rig(annotations=PULLED_BEFORE_ON)
    stuck_on(rig, W0, scheduled=PAST_THE_BOUND, reason="ContainerCreating")

    await rig.reconciler.reconcile(KEY)

    assert "torchgate.io/restarts" not in rig.api.job["metadata"]["annotations"]
    assert rig.faults == [(Fault("a100-1", "PodStuck", NOW, KEY), QuarantineSettings())]


def deleted_by_someone(rig: Rig, name: str) -> None:
    pod = rig.pods.get("default", name)
    assert pod is not None
    rig.pods.remember(deleted_with_grace(pod, at=NOW))


def dry_runs(rig: Rig) -> list[str]:
    """Paths of the dry-run creates sent."""
    return [
        path
        for method, path, query, _ in rig.api.requests
        if method == "POST" and query == {"dryRun": "All"}
    ]


async def test_a_deleted_member_restarts_the_gang_once_its_namespace_takes_new_objects() -> None:
    rig = Rig()
    deleted_by_someone(rig, W0)

    await rig.reconciler.reconcile(KEY)

    assert dry_runs(rig) == ["/api/v1/namespaces/default/events"]
    assert rig.api.job["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert rig.restarts("PodDeleted") == 1


async def test_members_deleted_with_their_namespace_restart_nothing_and_are_not_asked_again() -> (
    None
):
    rig = Rig()
    rig.api.namespace_terminating = True
    deleted_by_someone(rig, W0)

    assert await rig.reconciler.reconcile(KEY) is None
    assert await rig.reconciler.reconcile(KEY) is None

    assert dry_runs(rig) == ["/api/v1/namespaces/default/events"]
    assert [r for r in rig.api.requests if r[2] != {"dryRun": "All"}] == []
    assert "torchgate.io/gang-attempt" not in rig.api.job["metadata"]["annotations"]
    assert rig.restarts("PodDeleted") is None


async def test_a_create_refused_in_a_namespace_being_deleted_is_not_retried() -> None:
    rig = Rig()  # a running gang whose Service is missing: the plan creates it
    rig.api.namespace_terminating = True

    assert await rig.reconciler.reconcile(KEY) is None
    refused = list(rig.api.requests)
    assert await rig.reconciler.reconcile(KEY) is None

    assert [(method, path) for method, path, _, _ in refused] == [
        ("POST", "/api/v1/namespaces/default/services")
    ]
    assert rig.api.requests == refused


# ------------------------------------------------------------------ the outage of a fault


async def test_a_lost_nodes_fault_names_its_not_ready_spell() -> None:
    """The gangs one NotReady spell took down count once in quarantine (``rules`` rule 6)."""
    rig = Rig()
    lost = node("a100-1")
    lost["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-03-01T11:59:00Z"}
    ]
    rig.nodes.remember(lost)

    await rig.reconciler.reconcile(KEY)

    ((fault, _),) = rig.faults
    assert (fault.node, fault.cause) == ("a100-1", "NodeLost")
    assert fault.outage == Outage("NotReady", NOW - timedelta(seconds=60))


async def test_a_taint_without_time_added_is_dated_by_the_first_look_that_saw_it() -> None:
    """``kubectl taint`` writes no ``timeAdded``: every gang it takes names the same outage.

    A look at ``NOW`` sees the taint on a100-1 (the gang tolerates it then); 30 s later the gang
    no longer does (its pods as a gang that never tolerated it would be) and restarts.
    """
    rig = Rig()
    pods = {name: rig.pods.get("default", name) for name in (MASTER, W0)}
    toleration = {"key": "nvidia.com/gpu-health", "operator": "Exists", "effect": "NoExecute"}
    for pod in pods.values():
        assert pod is not None
        rig.pods.remember(tolerating(pod, toleration))
    sick = node("a100-1", taints=[{"key": "nvidia.com/gpu-health", "effect": "NoExecute"}])
    rig.nodes.remember(sick)

    await rig.reconciler.reconcile(KEY)
    assert rig.faults == []
    for pod in pods.values():
        assert pod is not None
        rig.pods.remember(pod)
    rig.reconciler.clock = lambda: NOW + timedelta(seconds=30)
    await rig.reconciler.reconcile(KEY)

    ((fault, _),) = rig.faults
    assert (fault.node, fault.cause) == ("a100-1", "NodeTainted")
    assert fault.outage == Outage("nvidia.com/gpu-health", NOW)


async def test_a_taint_without_time_added_after_a_restart_is_the_outage_its_node_records() -> None:
    """A new controller's first look: the taint took another gang down before the restart.

    The node's fault history (its annotation) names that outage; the second gang's fault is
    the same outage, so the node counts one fault, not two.
    """
    rig = Rig()
    sick = node("a100-1", taints=[{"key": "nvidia.com/gpu-health", "effect": "NoExecute"}])
    before = {
        "at": "2026-03-01T11:58:00Z",
        "cause": "NodeTainted",
        "job": "default/other",
        "outage": "nvidia.com/gpu-health",
        "outageBegan": "2026-03-01T11:57:30Z",
    }
    sick["metadata"].setdefault("annotations", {})[ANNOTATION_QUARANTINE_FAULTS] = orjson.dumps(
        [before]
    ).decode()
    rig.nodes.remember(sick)

    await rig.reconciler.reconcile(KEY)

    ((fault, _),) = rig.faults
    assert (fault.node, fault.cause) == ("a100-1", "NodeTainted")
    assert fault.outage == Outage("nvidia.com/gpu-health", NOW - timedelta(seconds=150))
    assert len(one_per_outage([*history_of(sick).faults, fault])) == 1

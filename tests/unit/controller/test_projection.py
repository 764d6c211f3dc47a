"""The caches' projections against every reader of cached pods and Nodes: the same answers.

Generated gangs (``test_properties.worlds``: every phase, exit code, eviction, deletion, node
state and job policy ``plan`` knows) are dressed as the apiserver and the kubelet serve them
(managedFields, env, volumes, probes, image ids, every condition, tolerations, init containers,
DisruptionTarget, waiting reasons, a grace period) and each reader is called on the whole pods
and on ``project_pod`` of them. A reader that starts reading a field the projection drops gives
a different answer here for some generated pod, and this test fails.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from tests.builders.node import node
from tests.rbacmodel import scan_code
from tests.unit.controller.helpers import NOW, World
from tests.unit.controller.job.test_properties import worlds
from torchgate.controller.admission.ledger import member_of, pod_usage
from torchgate.controller.admission.nodes import node_view
from torchgate.controller.job import disruption, model
from torchgate.controller.job import status as st
from torchgate.controller.job.disruption import NodeHealth, TimedTaint
from torchgate.controller.job.finish import released_on_end
from torchgate.controller.job.gangobjects import joins_pod_group
from torchgate.controller.job.reconciler import job_key_of_pod
from torchgate.controller.quarantine import rules as quarantine_rules
from torchgate.controller.quarantine.rules import Quarantine
from torchgate.pytorchjob import names
from torchgate.pytorchjob.cleanup import clean_pod_policy_for
from torchgate.pytorchjob.devices import GpuSources, pod_gpus
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.projection import project_node, project_pod
from torchgate.pytorchjob.taints import Taint
from torchgate.pytorchjob.units import pod_units

GPU = "nvidia.com/gpu"
SOURCES = GpuSources(GPU)
TAINTED = NodeHealth("n1", no_execute=(TimedTaint(Taint("gpu-health", "", "NoExecute"), NOW),))
LOST = NodeHealth("n1", ready="Unknown", ready_since=NOW - timedelta(seconds=300))


@hs.composite
def served(draw: hs.DrawFn, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with what the apiserver and its kubelet add, some of it read, most of it not."""
    pod = copy.deepcopy(pod)
    metadata, spec = pod["metadata"], pod["spec"]
    status = pod.setdefault("status", {})
    metadata["uid"] = "u-" + metadata["name"]
    metadata["resourceVersion"] = str(draw(hs.integers(1, 10**6)))
    metadata["managedFields"] = [{"manager": "torchgate", "fieldsV1": {"f:spec": {}}}]
    metadata.setdefault("annotations", {})["sidecar.istio.io/status"] = '{"initContainers":[]}'
    if "deletionTimestamp" in metadata and draw(hs.booleans()):
        metadata["deletionGracePeriodSeconds"] = draw(hs.sampled_from([0, 30]))
    spec.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler", priority=0)
    spec.setdefault("volumes", []).append({"name": "token", "projected": {"sources": []}})
    for container in spec["containers"]:
        container.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/log")
        container.setdefault("env", []).append({"name": "EXTRA", "value": "x" * 100})
        container["readinessProbe"] = {"exec": {"command": ["true"]}}
    if draw(hs.booleans()):
        spec["initContainers"] = [
            {
                "name": "warm-up",
                "image": "busybox",
                "command": ["sh", "-c", "true"],
                "restartPolicy": draw(hs.sampled_from(["Always", "Never"])),
                "resources": {"requests": {"cpu": "2", GPU: draw(hs.integers(0, 8))}},
            }
        ]
    if draw(hs.booleans()):
        spec["tolerations"] = [
            {"key": "gpu-health", "operator": "Exists", "effect": "NoExecute"}
            | ({"tolerationSeconds": 30} if draw(hs.booleans()) else {})
        ]
    if draw(hs.booleans()):
        spec["overhead"] = {"cpu": "250m"}
    if draw(hs.booleans()):
        spec["schedulingGroup"] = {"podGroupName": "demo-gang-1"}
    stamp = format_time(NOW - timedelta(seconds=draw(hs.integers(0, 600))))
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
        for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    if draw(hs.booleans()):
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "preempted",
                "lastTransitionTime": stamp,
            }
        )
    status.update(conditions=conditions, hostIP="10.0.0.1", podIP="10.1.0.1", qosClass="Guaranteed")
    statuses = status.setdefault("containerStatuses", [])
    if not statuses and draw(hs.booleans()):
        state = draw(
            hs.sampled_from(
                [
                    {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}},
                    {"waiting": {"reason": "ContainerCreating"}},
                    {"running": {"startedAt": stamp}},
                    {"terminated": {"exitCode": 0, "finishedAt": stamp}},
                    {"terminated": {"exitCode": 137, "message": "hang", "finishedAt": stamp}},
                ]
            )
        )
        statuses.append({"name": "pytorch", "state": state})
    for entry in statuses:
        entry.update(image="img:1", imageID="sha256:" + "0" * 64, ready=False, restartCount=2)
        entry["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": stamp}}
    return pod


@hs.composite
def served_worlds(draw: hs.DrawFn) -> tuple[World, dict[str, Any]]:
    world, options = draw(worlds())
    world.pods = {name: draw(served(pod)) for name, pod in world.pods.items()}
    return world, options


def _projected(world: World) -> World:
    return World(
        world.job_raw,
        pods={name: project_pod(pod) for name, pod in world.pods.items()},
        services=world.services,
        now=world.now,
    )


PodReader = Callable[[dict[str, Any]], object]

# Every reader of a cached pod, by where it is (each called on whole and projected pods).
READERS: dict[str, PodReader] = {
    "ledger.pod_usage": pod_usage,
    "ledger.member_of": member_of,
    "reconciler.job_key_of_pod": job_key_of_pod,
    "model.name_of": model.name_of,
    "model.attempt_of": model.attempt_of,
    "model.controlled_by": lambda pod: model.controlled_by(pod, "uid-demo"),
    "model.pytorch_exit_code": model.pytorch_exit_code,
    "model.ended_hung": model.ended_hung,
    "model.is_retryable": lambda pod: [
        model.is_retryable(policy, pod) for policy in ("Never", "ExitCode", "OnFailure")
    ],
    "status.phase_of": st.phase_of,
    "status.is_terminating": st.is_terminating,
    "disruption.node_of": disruption.node_of,
    "disruption.node_lost": lambda pod: disruption.node_lost(pod, LOST, now=NOW, lost_after=60),
    "disruption.node_tainted": lambda pod: disruption.node_tainted(pod, TAINTED, now=NOW),
    "disruption.pod_disrupted": lambda pod: disruption.pod_disrupted(pod, "n1"),
    "disruption.pod_deleted": lambda pod: [
        disruption.pod_deleted(pod, "n1", gone=gone) for gone in (True, False)
    ],
    "disruption.pod_stuck": lambda pod: disruption.pod_stuck(pod, "n1", now=NOW, stuck_after=60),
    "units.pod_units": lambda pod: pod_units(pod["spec"], SOURCES),
    "devices.pod_gpus": lambda pod: pod_gpus(pod["spec"], SOURCES),
    "gangobjects.joins_pod_group": lambda pod: joins_pod_group("demo-gang-1", [pod]),
    "cleanup.clean_pod_policy_for": lambda pod: [
        clean_pod_policy_for(policy, pod["spec"], gpus=SOURCES, allow_none=allow)
        for policy in ("None", "Running", "All")
        for allow in (True, False)
    ],
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(served_worlds())
def test_every_reader_of_a_cached_pod_answers_the_same_for_the_projected_pod(
    world_and_options: tuple[World, dict[str, Any]],
) -> None:
    world, options = world_and_options
    for pod in world.pods.values():
        kept = project_pod(pod)
        for name, reader in READERS.items():
            assert reader(kept) == reader(pod), name
    projected = _projected(world)
    replica_counts = st.replica_statuses(world.observed().job, world.pods.values())
    assert st.replica_statuses(projected.observed().job, projected.pods.values()) == replica_counts
    whole_pods = world.pods.values()
    departed = {"departed": tuple(whole_pods)}
    kept_departed = {"departed": tuple(project_pod(p) for p in whole_pods)}
    for extra, kept_extra in (({}, {}), (departed, kept_departed)):
        decision = world.plan(**options, **extra)
        assert projected.plan(**options, **kept_extra) == decision
        released = released_on_end(world.job_raw, decision, world.observed(**options), NOW)
        kept_observed = projected.observed(**options)
        assert released_on_end(world.job_raw, decision, kept_observed, NOW) == released


# Building a served world is slow on a loaded machine: the health check would fail the test for it.
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(served_worlds())
def test_the_projection_only_drops_and_projecting_twice_changes_nothing(
    world_and_options: tuple[World, dict[str, Any]],
) -> None:
    for pod in world_and_options[0].pods.values():
        kept = project_pod(pod)
        assert project_pod(kept) == kept
        assert "env" not in kept["spec"]["containers"][0]
        assert "managedFields" not in kept["metadata"]
        for section in ("metadata", "spec", "status"):
            for key, value in kept[section].items():
                if key not in ("annotations", "containers", "initContainers", "containerStatuses"):
                    assert value is pod[section][key]  # kept as it is, never copied or changed


# ------------------------------------------------------------------ nodes


@hs.composite
def served_nodes(draw: hs.DrawFn) -> dict[str, Any]:
    """A Node as its kubelet reports it: taints, quarantine labels, images, addresses, info."""
    raw = node("n1", gpus=draw(hs.integers(0, 8)))
    raw["metadata"]["resourceVersion"] = "7"
    raw["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    if draw(hs.booleans()):
        raw["metadata"]["labels"][names.LABEL_QUARANTINE] = "ContainerFailed"
        raw["metadata"]["labels"][names.LABEL_QUARANTINE_UNTIL] = "2026-03-01T13-00-00Z"
    taints = draw(
        hs.lists(
            hs.sampled_from(
                [
                    {"key": names.TAINT_QUARANTINE, "value": "Hang", "effect": "NoSchedule"},
                    {"key": "gpu-health", "effect": "NoExecute", "timeAdded": format_time(NOW)},
                    {"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
                ]
            ),
            unique_by=lambda t: t["key"],
        )
    )
    raw["spec"]["taints"] = taints
    raw["spec"]["unschedulable"] = draw(hs.booleans())
    ready = draw(hs.sampled_from(["True", "False", "Unknown"]))
    raw["status"]["conditions"] = [
        {"type": "MemoryPressure", "status": "False", "message": "ok"},
        {"type": "Ready", "status": ready, "lastTransitionTime": format_time(NOW)},
    ]
    raw["status"].update(
        images=[{"names": ["registry.example.com/train:1"], "sizeBytes": 10**9}],
        addresses=[{"type": "InternalIP", "address": "10.0.0.1"}],
        nodeInfo={"kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://2.1"},
        daemonEndpoints={"kubeletEndpoint": {"Port": 10250}},
    )
    return raw


@given(served_nodes())
def test_every_reader_of_a_cached_node_answers_the_same_for_the_projected_node(
    raw: dict[str, Any],
) -> None:
    kept = project_node(raw)
    assert "images" not in kept["status"]
    quarantine = Quarantine("ContainerFailed", NOW)
    readers: dict[str, Callable[[dict[str, Any]], object]] = {
        "nodes.node_view": node_view,
        "disruption.node_health": disruption.node_health,
        "quarantine.quarantine_of": quarantine_rules.quarantine_of,
        "quarantine.quarantine_patch": lambda n: quarantine_rules.quarantine_patch(
            n, quarantine, now=NOW
        ),
        "quarantine.release_patch": quarantine_rules.release_patch,
    }
    for name, reader in readers.items():
        assert reader(kept) == reader(raw), name


# ------------------------------------------------------------------ writes


def test_no_projected_object_is_ever_written_back() -> None:
    """The controller's writes of pods and Nodes, each of which sends no cached object.

    Pods are created from ``build_pod``'s manifests and deleted by name; the controller patches
    one pod, its own, with a label, and a job's orphaned pods with ``adoption_patch`` (the job's
    ownerReference and the pod's uid only); Nodes get merge patches of the taints and labels
    ``quarantine.rules`` computes from what ``project_node`` keeps whole (metadata and spec,
    checked above). A new write of either kind fails here until it is checked the same way.
    """
    writes = {
        (resource, verb, where.split(":")[1])
        for component, _, resource, verb, _, where in scan_code().calls
        if resource in ("pods", "nodes") and verb in ("create", "update", "patch")
    }
    assert writes == {
        ("pods", "create", "Reconciler._apply"),
        ("pods", "patch", "mark_leader"),
        ("pods", "patch", "Reconciler._adopt"),
        ("nodes", "patch", "QuarantineKeeper._patch"),
    }

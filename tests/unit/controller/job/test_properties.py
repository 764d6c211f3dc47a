"""Property tests: ranks and idempotence of ``plan`` (healthy, sick, lost and deleted nodes)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from tests.builders.job import job, parsed_job, with_uid
from tests.unit.controller.helpers import NOW, World, env_of, is_quiet
from torchgate.controller.job.disruption import NodeHealth, TimedTaint, deleted_node
from torchgate.controller.job.envvars import rendezvous_host
from torchgate.controller.job.pods import build_pod, build_service
from torchgate.pytorchjob import names
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.taints import Taint

GPU = "nvidia.com/gpu"


# ------------------------------------------------------------------ job shapes


@hs.composite
def job_shapes(draw: hs.DrawFn, *, max_workers: int = 6) -> dict[str, Any]:
    has_master = draw(hs.booleans())
    workers = draw(hs.integers(0 if has_master else 1, max_workers))
    builder = job("demo")
    restart = draw(hs.sampled_from(names.RESTART_POLICIES))
    gpus = draw(hs.integers(0, 4))
    if has_master:
        builder = builder.master(gpus=gpus or None, restart_policy=restart)
    if workers or not has_master:
        builder = builder.workers(workers, gpus=gpus or None, restart_policy=restart)
    nproc = draw(hs.sampled_from([None, "auto", "2", "gpu"]))
    if nproc is not None:
        builder = builder.nproc(nproc)
    if workers and draw(hs.booleans()):
        builder = builder.elastic(minReplicas=1, maxReplicas=workers)
    return with_uid(builder.build())


@given(job_shapes())
def test_ranks_are_exactly_0_to_n_minus_1_with_the_master_at_0(raw: dict[str, Any]) -> None:
    spec = parsed_job(raw)
    ranks: dict[str, int] = {}
    for replica in spec.replica_specs:
        for index in range(replica.replicas):
            pod = build_pod(raw, spec, replica.replica_type, index, node=None, attempt=1, gpus=GPU)
            env = env_of(pod)
            names_in_env = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
            assert len(names_in_env) == len(set(names_in_env))
            assert env["MASTER_ADDR"] == rendezvous_host(spec)
            ranks[pod["metadata"]["name"]] = int(env["RANK"])
    total = spec.total_replicas
    assert sorted(ranks.values()) == list(range(total))
    assert ranks[rendezvous_host(spec)] == 0


# ------------------------------------------------------------------ idempotence of plan

PHASES = ("Pending", "Running", "Succeeded", "Failed")
NODE_STATES = (
    NodeHealth("n1"),
    NodeHealth("n1", ready="Unknown", ready_since=NOW - timedelta(seconds=5)),
    NodeHealth("n1", ready="Unknown", ready_since=NOW - timedelta(seconds=300)),
    deleted_node("n1"),
    NodeHealth("n1", no_execute=(TimedTaint(Taint("gpu-health", "", "NoExecute"), NOW),)),
)
CONDITIONS = ("Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "Queued")


@hs.composite
def worlds(draw: hs.DrawFn) -> tuple[World, dict[str, Any]]:
    raw = draw(job_shapes(max_workers=3))
    policy: dict[str, Any] = {
        "cleanPodPolicy": draw(hs.sampled_from(names.CLEAN_POD_POLICIES)),
        "suspend": draw(hs.integers(0, 3)) == 0,
    }
    for key, values in (
        ("backoffLimit", [None, 0, 1, 3]),
        ("ttlSecondsAfterFinished", [None, 0, 30]),
        ("activeDeadlineSeconds", [None, 30, 600]),
    ):
        value = draw(hs.sampled_from(values))
        if value is not None:
            policy[key] = value
    total = sum(r.get("replicas", 1) for r in raw["spec"]["pytorchReplicaSpecs"].values())
    policy["schedulingPolicy"] = {
        "minAvailable": draw(hs.integers(0, max(total, 0))),
        "scheduleTimeoutSeconds": draw(hs.sampled_from([10, 60])),
    }
    raw["spec"]["runPolicy"] = policy
    restarts = draw(hs.integers(0, 3))
    raw["metadata"]["annotations"] = {"torchgate.io/restarts": str(restarts)}
    raw["status"] = draw(statuses())
    world = World(raw)
    spec = parsed_job(raw)
    for replica in spec.replica_specs:
        for index in range(replica.replicas + draw(hs.integers(0, 1))):
            if draw(hs.booleans()):
                continue
            base = build_pod(
                raw,
                spec,
                replica.replica_type,
                index,
                node=None,
                attempt=draw(hs.sampled_from([restarts + 1, restarts])),
                gpus=GPU,
            )
            world.pods[base["metadata"]["name"]] = draw(pod_states(base))
    if draw(hs.booleans()):
        master_type, master_index = names.master_replica(spec.has_master)
        if spec.replica(master_type) is not None:
            service = build_service(raw, spec, master_type, master_index)
            world.services[service["metadata"]["name"]] = service
    options: dict[str, Any] = {
        "allow_clean_pod_policy_none": draw(hs.booleans()),
        "wait_reason": draw(hs.sampled_from([None, "waiting for 4 nvidia.com/gpu: 2 free"])),
        "nodes": {"n1": draw(hs.sampled_from(NODE_STATES))},
    }
    # The admitter reserves only nodes that are Ready and do not taint the pods away.
    usable = ("n0", "n1") if options["nodes"]["n1"] == NODE_STATES[0] else ("n0",)
    if draw(hs.booleans()):
        options["reservation"] = {
            names.replica_name("demo", r.replica_type, i): usable[i % len(usable)]
            for r in spec.replica_specs
            for i in range(r.replicas)
        }
    return world, options


@hs.composite
def statuses(draw: hs.DrawFn) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": []}
    for kind in draw(hs.lists(hs.sampled_from(CONDITIONS), unique=True, max_size=4)):
        stamp = format_time(NOW - timedelta(seconds=draw(hs.integers(0, 100))))
        status["conditions"].append(
            {
                "type": kind,
                "status": draw(hs.sampled_from(["True", "False"])),
                "reason": "Old",
                "message": "old",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
    for key in ("startTime", "completionTime"):
        if draw(hs.booleans()):
            status[key] = format_time(NOW - timedelta(seconds=draw(hs.integers(0, 1000))))
    return status


@hs.composite
def pod_states(draw: hs.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    phase = draw(hs.sampled_from(PHASES))
    pod["status"] = {"phase": phase}
    pod["metadata"]["creationTimestamp"] = format_time(
        NOW - timedelta(seconds=draw(hs.integers(0, 120)))
    )
    if phase != "Pending" or draw(hs.booleans()):
        pod["spec"]["nodeName"] = "n1"
    if phase == "Failed":
        code = draw(hs.sampled_from([None, 0, 1, 137]))
        if code is not None:
            pod["status"]["containerStatuses"] = [
                {"name": "pytorch", "state": {"terminated": {"exitCode": code}}}
            ]
        elif draw(hs.booleans()):
            pod["status"]["reason"] = "Evicted"
    if draw(hs.integers(0, 4)) == 0:
        pod["metadata"]["deletionTimestamp"] = format_time(NOW)
    return pod


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_planning_again_after_applying_a_plan_asks_for_nothing(
    world_and_options: tuple[World, dict[str, Any]],
) -> None:
    world, options = world_and_options
    first = world.plan(**options)
    world.apply(first)
    if first.restart:
        options.pop("reservation", None)  # a restart's reconcile releases it (Admitter.release)
    if first.force_delete_pods:  # gone at once: the next plan may act on their absence
        world.apply(world.plan(**options))
    again = world.plan(**options)
    assert is_quiet(again), again

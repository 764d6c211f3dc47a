"""Kubernetes gang objects built for a job: Workload, PodGroup per attempt, the pods' group."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders.job import UID, cpu_job, job, parsed_job, with_uid
from torchgate.controller.job.gangobjects import (
    in_pod_group,
    joins_pod_group,
    pod_group_for,
    pod_group_name,
    serves_gang_objects,
    stale_pod_groups_selector,
    workload_for,
)
from torchgate.controller.job.pods import build_pod

OWNER = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "name": "demo",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}
JOB_LABELS = {
    "training.kubeflow.org/operator-name": "torchgate",
    "training.kubeflow.org/job-name": "demo",
}


def elastic_demo() -> dict[str, Any]:
    return with_uid(job("demo").workers(4).scheduling(minAvailable=2).build())


@pytest.mark.parametrize(
    ("raw", "min_count"),
    [
        (with_uid(cpu_job("demo", workers=3).build()), 4),  # Master + 3 Workers
        (with_uid(job("demo").workers(2).build()), 2),  # Workers only
        (elastic_demo(), 2),  # minAvailable below the replica count
    ],
    ids=["master-and-workers", "workers-only", "min-available"],
)
@pytest.mark.parametrize("priority_class", [None, "training-high"])
def test_workload_and_pod_group_carry_the_gang_policy(
    raw: dict[str, Any], min_count: int, priority_class: str | None
) -> None:
    spec = parsed_job(raw)
    policy: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "disruptionMode": {"all": {}},
    }
    if priority_class is not None:
        policy["priorityClassName"] = priority_class

    workload = workload_for(raw, spec, priority_class=priority_class)
    group = pod_group_for(raw, spec, 3, priority_class=priority_class)

    assert workload == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "demo",
            "namespace": "default",
            "labels": JOB_LABELS,
            "ownerReferences": [OWNER],
        },
        "spec": {
            "controllerRef": {"apiGroup": "kubeflow.org", "kind": "PyTorchJob", "name": "demo"},
            "podGroupTemplates": [{"name": "gang", **policy}],
        },
    }
    assert group == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "demo-gang-3",
            "namespace": "default",
            "labels": {**JOB_LABELS, "torchgate.io/gang-attempt": "3"},
            "ownerReferences": [OWNER],
        },
        "spec": {"workloadRef": {"workloadName": "demo", "templateName": "gang"}, **policy},
    }


@pytest.mark.parametrize(
    ("attempt", "other", "distinct"),
    [(1, 1, False), (1, 2, True), (9, 10, True)],
)
def test_each_attempt_has_a_pod_group_of_its_own(attempt: int, other: int, distinct: bool) -> None:
    spec = parsed_job(with_uid(cpu_job().build()))

    assert (pod_group_name(spec, attempt) != pod_group_name(spec, other)) is distinct


def test_stale_selector_selects_the_jobs_other_attempts() -> None:
    spec = parsed_job(with_uid(cpu_job().build()))

    assert stale_pod_groups_selector(spec, 4) == (
        "training.kubeflow.org/job-name=demo,"
        "training.kubeflow.org/operator-name=torchgate,"
        "torchgate.io/gang-attempt!=4"
    )


@pytest.mark.parametrize(
    "pod_spec",
    [None, {"schedulingGroup": {"podGroupName": "someone-elses"}}],
    ids=["unset", "overwritten"],
)
def test_a_pod_names_its_pod_group_and_the_input_is_left_alone(
    pod_spec: dict[str, Any] | None,
) -> None:
    raw = with_uid(job("demo").master(pod_spec=pod_spec).workers(1, pod_spec=pod_spec).build())
    spec = parsed_job(raw)
    pod = build_pod(raw, spec, "Worker", 0, node=None, attempt=2, gpus="nvidia.com/gpu")
    before = copy.deepcopy(pod)

    grouped = in_pod_group(pod, pod_group_name(spec, 2))

    assert grouped["spec"]["schedulingGroup"] == {"podGroupName": "demo-gang-2"}
    assert {k: v for k, v in grouped["spec"].items() if k != "schedulingGroup"} == {
        k: v for k, v in pod["spec"].items() if k != "schedulingGroup"
    }
    assert grouped["metadata"] == pod["metadata"]
    assert pod == before


def _member(group: str | None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": "demo-worker-0"}, "spec": {"containers": []}}
    return in_pod_group(pod, group) if group is not None else pod


@pytest.mark.parametrize(
    ("groups", "joins"),
    [
        ([], True),
        (["demo-gang-2", "demo-gang-2"], True),
        ([None, None], False),
        (["demo-gang-2", None], False),
        (["demo-gang-1"], False),
    ],
    ids=[
        "a new attempt",
        "an attempt in its group",
        "an attempt begun without gang objects",
        "an attempt partly in its group",
        "pods in another group",
    ],
)
def test_new_pods_join_the_pod_group_only_if_their_attempt_did(
    groups: list[str | None], joins: bool
) -> None:
    assert joins_pod_group("demo-gang-2", [_member(group) for group in groups]) is joins


@pytest.mark.parametrize(
    ("discovery", "served"),
    [
        ({"resources": [{"name": "workloads"}, {"name": "podgroups"}]}, True),
        (
            {
                "resources": [
                    {"name": "workloads"},
                    {"name": "podgroups"},
                    {"name": "podgroups/status"},
                    {"name": "priorityclasses"},
                ]
            },
            True,
        ),
        ({"resources": [{"name": "workloads"}]}, False),
        ({"resources": [{"name": "priorityclasses"}]}, False),
        ({"resources": []}, False),
        ({}, False),
        (None, False),
        ({"resources": "workloads,podgroups"}, False),
    ],
    ids=["both", "both-among-others", "no-podgroups", "neither", "empty", "no-list", "none", "bad"],
)
def test_gang_objects_are_used_only_where_both_kinds_are_served(
    discovery: object, served: bool
) -> None:
    assert serves_gang_objects(discovery) is served

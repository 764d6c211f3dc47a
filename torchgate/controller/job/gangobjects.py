"""Kubernetes' own gang objects for a job: one Workload per job, one PodGroup per gang attempt.

Why: torchgate places a gang on nodes it reserved, but kube-scheduler binds pod by pod, so a
gang whose one pod kube-scheduler refuses (a volume, a port, a node changed after admission) was
partly bound until torchgate's schedule timeout tore it down. Where the cluster serves
``scheduling.k8s.io/v1beta1`` Workload and PodGroup (``GenericWorkload``, beta and off by
default in Kubernetes 1.37), kube-scheduler's GangScheduling plugin holds every pod of a PodGroup
at Permit until ``minCount`` of them have a node, so a gang is bound all at once or not at all;
and other tools (preflight checks, dashboards, queues) see torchgate's gangs as such.

Rules (pure; the reconciler creates what these build):

1. ``workload_for``: one Workload per job, named like the job, with one PodGroup template
   ``TEMPLATE_NAME`` (gang policy, ``minCount`` = the job's ``minAvailable``, ``disruptionMode:
   All``, the job's PriorityClass) and ``controllerRef`` naming the PyTorchJob.
2. ``pod_group_for``: one PodGroup per gang attempt, named ``pod_group_name(job, attempt)``, a
   copy of the template that references it (``workloadRef``). A new attempt gets a new PodGroup,
   so the pods of a torn-down gang never count towards the next gang's ``minCount``.
3. ``in_pod_group``: each pod names its attempt's PodGroup in ``spec.schedulingGroup``.
4. ``serves_gang_objects``: the objects are created only where discovery of
   ``scheduling.k8s.io/v1beta1`` lists both ``workloads`` and ``podgroups``.
5. ``joins_pod_group``: an attempt's new pods name its PodGroup only if every pod the attempt
   has already does. An attempt begun without gang objects (the API served, or torchgate
   upgraded to create them, while it ran) keeps running without: kube-scheduler holds a pod of
   a PodGroup at PreEnqueue until ``minCount`` of the group's pods exist, so an elastic job's
   new Worker, alone in a PodGroup its running gang never joined, would stay Pending for good.
   Its next attempt gets the objects.
6. ``refused_gang``: an attempt whose Workload or PodGroup the apiserver refuses (403: a
   PriorityClass the job names but the cluster lacks, which pods alone run without; a
   ResourceQuota on their count; 422: an admission policy) runs without gang objects, as
   where they are not served, and a Warning Event says so in the apiserver's words. Retrying
   would fail every reconcile of an admitted gang, holding its nodes, with no word to its user.

Invariants: every object carries the job's controlling ownerReference, so the garbage collector
removes them with the job; every PodGroup carries the job's selector labels and its attempt
label, so the PodGroups of older attempts can be deleted by one label selector
(``stale_pod_groups_selector``). Inputs are never mutated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from torchgate.controller.job.pods import owner_reference
from torchgate.kube.resources import POD_GROUPS, WORKLOADS
from torchgate.pytorchjob import names
from torchgate.pytorchjob.spec import JobSpec

API_VERSION: Final = f"{WORKLOADS.group}/{WORKLOADS.version}"
TEMPLATE_NAME: Final = "gang"
LABEL_GANG_ATTEMPT: Final = names.ANNOTATION_GANG_ATTEMPT  # the pods' annotation, as a label


def _gang_policy(job: JobSpec, priority_class: str | None) -> dict[str, Any]:
    """The fields a PodGroup copies from its template: gang of ``minAvailable``, disrupted whole."""
    policy: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": job.min_available}},
        "disruptionMode": {"all": {}},
    }
    if priority_class:
        policy["priorityClassName"] = priority_class
    return policy


def workload_name(job: JobSpec) -> str:
    """The job's Workload is named like the job."""
    return job.name


def pod_group_name(job: JobSpec, attempt: int) -> str:
    """``<job>-gang-<attempt>``: a DNS subdomain, since job names are DNS labels (at most 63)."""
    return f"{job.name}-{TEMPLATE_NAME}-{attempt}"


def workload_for(
    job_raw: Mapping[str, Any], job: JobSpec, *, priority_class: str | None
) -> dict[str, Any]:
    """Rule 1: the job's Workload."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": job.namespace,
            "labels": names.job_selector(job.name),
            "ownerReferences": [owner_reference(job_raw, job)],
        },
        "spec": {
            "controllerRef": {"apiGroup": names.GROUP, "kind": names.KIND, "name": job.name},
            "podGroupTemplates": [
                {"name": TEMPLATE_NAME, **_gang_policy(job, priority_class)},
            ],
        },
    }


def pod_group_for(
    job_raw: Mapping[str, Any], job: JobSpec, attempt: int, *, priority_class: str | None
) -> dict[str, Any]:
    """Rule 2: the PodGroup of one gang attempt."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(job, attempt),
            "namespace": job.namespace,
            "labels": {**names.job_selector(job.name), LABEL_GANG_ATTEMPT: str(attempt)},
            "ownerReferences": [owner_reference(job_raw, job)],
        },
        "spec": {
            "workloadRef": {"workloadName": workload_name(job), "templateName": TEMPLATE_NAME},
            **_gang_policy(job, priority_class),
        },
    }


def stale_pod_groups_selector(job: JobSpec, attempt: int) -> str:
    """A label selector for the job's PodGroups of attempts other than ``attempt``."""
    return ",".join(
        [
            *(f"{key}={value}" for key, value in sorted(names.job_selector(job.name).items())),
            f"{LABEL_GANG_ATTEMPT}!={attempt}",
        ]
    )


def in_pod_group(pod: Mapping[str, Any], group: str) -> dict[str, Any]:
    """Rule 3: a copy of ``pod`` whose ``spec.schedulingGroup`` names the PodGroup ``group``."""
    spec = pod.get("spec")
    return {
        **pod,
        "spec": {
            **(spec if isinstance(spec, Mapping) else {}),
            "schedulingGroup": {"podGroupName": group},
        },
    }


def joins_pod_group(group: str, members: Iterable[Mapping[str, Any]]) -> bool:
    """Rule 5: whether new pods join ``group``, given the pods their attempt has already."""
    return all(_pod_group_of(pod) == group for pod in members)


def _pod_group_of(pod: Mapping[str, Any]) -> object:
    spec = pod.get("spec")
    scheduling_group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    return scheduling_group.get("podGroupName") if isinstance(scheduling_group, Mapping) else None


def refused_gang(words: str) -> str:
    """Rule 6: the Event message of an attempt whose gang objects the apiserver refused."""
    return f"gang objects refused, the gang runs without them: {words}"


def serves_gang_objects(discovery: object) -> bool:
    """Rule 4: whether an APIResourceList of ``scheduling.k8s.io/v1beta1`` has both kinds."""
    resources = discovery.get("resources") if isinstance(discovery, Mapping) else None
    if not isinstance(resources, list):
        return False
    served = {r.get("name") for r in resources if isinstance(r, Mapping)}
    return {WORKLOADS.plural, POD_GROUPS.plural} <= served

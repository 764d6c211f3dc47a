"""The reconciler's side of Kubernetes gang objects: what reaches the apiserver, and in what order.

A reconciler over caches holding one admitted job with no pods yet (the admitter's reservation
stubbed) and an API that records every request. Each test asserts the requests sent.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from tests.builders.job import cpu_job, with_uid
from tests.unit.controller.helpers import NOW
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.errors import AlreadyExists, Forbidden, NamespaceTerminating
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES

KEY = ("default", "demo")
RESERVATION = {"demo-master-0": "n1", "demo-worker-0": "n2"}
WORKLOADS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/workloads"
POD_GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"
PODS_PATH = "/api/v1/namespaces/default/pods"


class RecordingApi:
    """Records every request; answers creates with the body (or ``AlreadyExists`` for ``taken``)."""

    def __init__(
        self, taken: frozenset[str] = frozenset(), refused: Mapping[str, Forbidden] | None = None
    ) -> None:
        self.taken = taken
        self.refused = dict(refused or {})  # path -> the refusal of a POST there
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []

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
        if method == "POST" and path in self.taken:
            raise AlreadyExists(409, "AlreadyExists", "exists", method, path)
        if method == "POST" and path in self.refused:
            raise self.refused[path]
        return {} if method == "DELETE" else body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}

    def posted(self, path: str) -> list[Any]:
        return [body for method, p, _, body in self.requests if method == "POST" and p == path]


def reconciler(
    api: RecordingApi, *, attempt: int = 1, enabled: bool = True, served: bool = True
) -> Reconciler:
    builder = cpu_job("demo", workers=1).scheduling(priorityClass="training-high")
    if attempt > 1:
        builder = builder.annotate("torchgate.io/gang-attempt", str(attempt))
    jobs = Informer(api, PYTORCHJOBS)
    jobs.remember(with_uid(builder.build()))
    pods = Informer(api, PODS)
    pods.index_by(job_key_of_pod)
    services = Informer(api, SERVICES)
    services.index_by(job_key_of_pod)
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    admitter.reservation_for = lambda key, uid: RESERVATION  # type: ignore[method-assign]
    return Reconciler(
        api,
        jobs=jobs,
        pods=pods,
        services=services,
        policies=lambda: (),
        priority_of=lambda name: 0,
        admitter=admitter,
        metrics=ControllerMetrics(),
        options=Options(manage_unowned=True, gang_objects=enabled),
        clock=lambda: NOW,
        gang_objects_served=lambda: served,
    )


async def test_workload_and_pod_group_are_created_before_the_pods_that_name_them() -> None:
    api = RecordingApi()

    await reconciler(api).reconcile(KEY)

    (workload,) = api.posted(WORKLOADS)
    (group,) = api.posted(POD_GROUPS)
    assert workload["metadata"]["name"] == "demo"
    assert group["metadata"]["name"] == "demo-gang-1"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["spec"]["priorityClassName"] == "training-high"
    pods = api.posted(PODS_PATH)
    assert {p["metadata"]["name"] for p in pods} == set(RESERVATION)
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "demo-gang-1"} for p in pods)
    paths = [path for method, path, _, _ in api.requests if method == "POST"]
    assert max(paths.index(WORKLOADS), paths.index(POD_GROUPS)) < paths.index(PODS_PATH)
    assert not [r for r in api.requests if r[0] == "DELETE"]


@pytest.mark.parametrize(("enabled", "served"), [(True, False), (False, True), (False, False)])
async def test_without_the_api_or_with_the_flag_off_pods_are_created_as_before(
    enabled: bool, served: bool
) -> None:
    api = RecordingApi()

    await reconciler(api, enabled=enabled, served=served).reconcile(KEY)

    assert not [r for r in api.requests if "scheduling.k8s.io" in r[1]]
    pods = api.posted(PODS_PATH)
    assert len(pods) == 2
    assert not any("schedulingGroup" in p["spec"] for p in pods)


async def test_a_later_attempt_gets_a_new_pod_group_and_the_older_ones_are_deleted() -> None:
    api = RecordingApi()

    await reconciler(api, attempt=3).reconcile(KEY)

    (group,) = api.posted(POD_GROUPS)
    assert group["metadata"]["name"] == "demo-gang-3"
    deletes = [(path, query) for method, path, query, _ in api.requests if method == "DELETE"]
    assert deletes == [
        (
            POD_GROUPS,
            {
                "labelSelector": "training.kubeflow.org/job-name=demo,"
                "training.kubeflow.org/operator-name=torchgate,torchgate.io/gang-attempt!=3"
            },
        )
    ]
    assert all(
        p["spec"]["schedulingGroup"] == {"podGroupName": "demo-gang-3"}
        for p in api.posted(PODS_PATH)
    )


async def test_objects_that_exist_already_are_kept_and_the_pods_still_created() -> None:
    api = RecordingApi(taken=frozenset({WORKLOADS, POD_GROUPS}))

    await reconciler(api).reconcile(KEY)

    assert len(api.posted(PODS_PATH)) == 2


async def test_the_objects_of_an_attempt_are_created_once() -> None:
    api = RecordingApi()
    rig = reconciler(api)
    await rig.reconcile(KEY)
    rig.pods.forget("default", "demo-worker-0")  # the plan creates the missing pod again

    await rig.reconcile(KEY)

    assert len(api.posted(WORKLOADS)) == 1
    assert len(api.posted(POD_GROUPS)) == 1


async def test_an_attempt_begun_without_gang_objects_creates_its_later_pods_without() -> None:
    api = RecordingApi()
    rig = reconciler(api, served=False)
    await rig.reconcile(KEY)  # the gang runs, its pods in no PodGroup
    rig.gang_objects_served = lambda: True  # the API turned on (or torchgate upgraded)
    rig.pods.forget("default", "demo-worker-0")  # the plan creates a pod of the same attempt

    await rig.reconcile(KEY)

    later = [p for p in api.posted(PODS_PATH) if p["metadata"]["name"] == "demo-worker-0"]
    assert len(later) == 2
    assert "schedulingGroup" not in later[1]["spec"]
    assert not [r for r in api.requests if "scheduling.k8s.io" in r[1]]


async def test_a_later_pod_of_an_attempt_in_its_pod_group_joins_it() -> None:
    api = RecordingApi()
    rig = reconciler(api)
    await rig.reconcile(KEY)
    rig.pods.forget("default", "demo-worker-0")

    await rig.reconcile(KEY)

    later = [p for p in api.posted(PODS_PATH) if p["metadata"]["name"] == "demo-worker-0"]
    assert [p["spec"]["schedulingGroup"] for p in later] == [{"podGroupName": "demo-gang-1"}] * 2


NO_SUCH_CLASS = "no PriorityClass with name training-high was found"


@pytest.mark.parametrize("refused_path", [WORKLOADS, POD_GROUPS])
async def test_gang_objects_the_apiserver_refuses_leave_the_gang_to_run_without_them(
    refused_path: str,
) -> None:
    refusal = Forbidden(403, "Forbidden", NO_SUCH_CLASS, "POST", refused_path)
    api = RecordingApi(refused={refused_path: refusal})
    rig = reconciler(api)

    await rig.reconcile(KEY)
    await rig.events.flush(5)

    pods = api.posted(PODS_PATH)
    assert {p["metadata"]["name"] for p in pods} == set(RESERVATION)
    assert not any("schedulingGroup" in p["spec"] for p in pods)
    events = api.posted("/api/v1/namespaces/default/events")
    assert [(e["type"], e["reason"]) for e in events if NO_SUCH_CLASS in e["message"]] == [
        ("Warning", "FailedCreate")
    ]


async def test_gang_objects_refused_in_a_namespace_being_deleted_create_no_pods() -> None:
    refusal = NamespaceTerminating(403, "Forbidden", "being terminated", "POST", POD_GROUPS)
    api = RecordingApi(refused={POD_GROUPS: refusal})

    await reconciler(api).reconcile(KEY)

    assert api.posted(PODS_PATH) == []

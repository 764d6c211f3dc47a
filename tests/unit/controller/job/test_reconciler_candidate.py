"""A forecast's candidate asks for exactly what the job's reconcile will ask admission for."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from tests.builders.job import gpu_job, job, with_uid
from tests.builders.policy import parsed_policy
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.waiting import Waiting
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES
from torchgate.pytorchjob.policy import PlacementPolicy

RACK = "topology.torchgate.io/rack"
POLICY = parsed_policy(
    "racks", gpuResource="example.com/gpu", topology={"levels": [RACK, "kubernetes.io/hostname"]}
)


class Api:
    """Accepts every write; a status patch returns the job as stored."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        return self.job if method == "PATCH" else kw.get("body") or {}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


def reconciler_for(stored: dict[str, Any], policy: PlacementPolicy) -> Reconciler:
    api = Api(stored)
    jobs, pods, services = (Informer(api, kind) for kind in (PYTORCHJOBS, PODS, SERVICES))  # type: ignore[arg-type]
    pods.index_by(job_key_of_pod)
    services.index_by(job_key_of_pod)
    jobs.remember(stored)
    return Reconciler(
        api,  # type: ignore[arg-type]
        jobs=jobs,
        pods=pods,
        services=services,
        policies=lambda: (policy,),
        priority_of=lambda name: {"high": 1000}.get(name or "", 0),
        preempts_of=lambda name: name != "polite",
        topology_of=lambda annotations, chosen: (RACK, True),
        admitter=Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None),
        metrics=ControllerMetrics(),
        options=Options(manage_unowned=True),
    )


def terms(waiting: Waiting) -> tuple[Any, ...]:
    asked = waiting.request
    return (
        waiting.key,
        asked.uid,
        asked.demands,
        asked.min_count,
        dict(asked.usage),
        asked.priority,
        asked.created,
        asked.gpu_resource,
        asked.preempts,
        asked.topology_level,
        asked.topology_required,
    )


async def test_the_candidate_asks_what_the_reconcile_asks() -> None:
    raw = with_uid(gpu_job("demo", workers=2, gpus=4).build())
    raw["metadata"]["creationTimestamp"] = "2026-02-02T00:00:00Z"
    raw["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"
    ] = {"limits": {"example.com/gpu": 4}}
    reconciler = reconciler_for(raw, POLICY)

    asked = reconciler.candidate(raw, since=5.0)
    await reconciler.reconcile(("default", "demo"))
    queued = reconciler.admitter.queue.waiting[("default", "demo")]

    assert isinstance(asked, Waiting)
    assert terms(asked) == terms(queued)
    request = asked.request
    assert (request.priority, request.gpu_resource, request.topology_required) == (
        1000,
        "example.com/gpu",
        True,
    )


def test_a_job_the_controller_could_not_run_is_no_candidate() -> None:
    raw = gpu_job("broken").build()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "two"
    reconciler = reconciler_for(raw, POLICY)

    answer = reconciler.candidate(raw, since=0.0)

    assert isinstance(answer, list)
    assert [error.field for error in answer] == ["spec.pytorchReplicaSpecs[Master].replicas"]


def test_a_job_of_no_pods_is_no_candidate() -> None:
    # its reconcile never asks for admission; placing an empty gang raised in the forecast
    raw = job("empty").workers(0).build()
    reconciler = reconciler_for(raw, POLICY)

    answer = reconciler.candidate(raw, since=0.0)

    assert isinstance(answer, list)
    assert [error.field for error in answer] == ["spec.pytorchReplicaSpecs"]


def test_a_job_not_stored_yet_is_the_newest_of_its_priority() -> None:
    raw = gpu_job("fresh").build()  # no creationTimestamp: never stored
    reconciler = reconciler_for(raw, POLICY)
    reconciler.clock = lambda: datetime(2026, 5, 1, 8, 0, 0, tzinfo=UTC)

    asked = reconciler.candidate(raw, since=0.0)

    assert isinstance(asked, Waiting)
    assert asked.request.created == "2026-05-01T08:00:00Z"

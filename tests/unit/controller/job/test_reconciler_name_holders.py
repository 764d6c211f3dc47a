"""A Service not the job's holding its Master's Service name (the one ``MASTER_ADDR`` names).

The Service cache holds only the job's Services (label-selected), so the reconciler first learns
of a user's Service from its create's ``AlreadyExists``. A reconciler over an API that stores
Services (409 on a taken name, 404 on a missing one) and records the pods asked for: the gang
is never created beside the user's Service, the job says why, and once the Service is gone the
job's own Service and its pods are made. Assertions read the API's store, the job stored and the
Events sent.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from tests.builders.job import job, with_uid
from tests.builders.node import node
from tests.unit.controller.helpers import NOW, merge_patch
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.job.gang import NAME_HOLDER_RECHECK_SECONDS
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.errors import decode_error
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES

KEY = ("default", "sq")
MASTER = "sq-master-0"


def status_error(code: int, reason: str, path: str, method: str) -> Exception:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason}
    return decode_error(code, orjson.dumps({**body, "code": code}), method, path)


class ServicesApi:
    """Stores Services by name (409 on a taken name, 404 on a missing one); records pods."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.services: dict[str, dict[str, Any]] = {}
        self.created_pods: list[str] = []
        self.events: list[dict[str, Any]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if "/services" in path:
            return self._service(method, path, body)
        if method == "POST" and path.endswith("/pods"):
            self.created_pods.append(body["metadata"]["name"])
        if method == "POST" and path.endswith("/events"):
            self.events.append(body)
        if method == "PATCH" and "/pytorchjobs/" in path:
            self.job = merge_patch(self.job, copy.deepcopy(body))
            return copy.deepcopy(self.job)
        return {} if method == "DELETE" else body

    def _service(self, method: str, path: str, body: Any) -> Any:
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.services:
                raise status_error(409, "AlreadyExists", path, method)
            self.services[name] = {**copy.deepcopy(body), "kind": "Service"}
            return copy.deepcopy(body)
        name = path.rsplit("/", 1)[-1]
        if method == "GET" and name in self.services:
            return copy.deepcopy(self.services[name])
        raise status_error(404, "NotFound", path, method)

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Rig:
    """A job of a Master and a Worker, not admitted yet, on two 8-GPU nodes."""

    def __init__(self) -> None:
        raw = with_uid(job("sq").master(gpus=1).workers(1, gpus=1).build())
        self.api = ServicesApi(copy.deepcopy(raw))
        self.jobs = Informer(self.api, PYTORCHJOBS)
        self.jobs.remember(copy.deepcopy(raw))
        pods = Informer(self.api, PODS)
        pods.index_by(job_key_of_pod)
        self.services = Informer(self.api, SERVICES)
        self.services.index_by(job_key_of_pod)
        self.admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
        for index in range(2):
            self.admitter.on_node("ADDED", node(f"n{index}", gpus=8), None)
        self.reconciler = Reconciler(
            self.api,
            jobs=self.jobs,
            pods=pods,
            services=self.services,
            policies=lambda: (),
            priority_of=lambda name: 0,
            admitter=self.admitter,
            metrics=ControllerMetrics(),
            options=Options(manage_unowned=True),
            clock=lambda: NOW,
        )

    @property
    def uid(self) -> str:
        return str(self.api.job["metadata"]["uid"])

    async def reconcile(self) -> float | None:
        """One reconcile, with the Events it records sent."""
        sender = asyncio.create_task(self.reconciler.events.run())
        try:
            requeue = await self.reconciler.reconcile(KEY)
            await asyncio.sleep(0.01)
        finally:
            sender.cancel()
        self.jobs.remember(copy.deepcopy(self.api.job))
        return requeue

    def waiting(self) -> set[tuple[str, str]]:
        """The jobs queued for admission."""
        return {waiting.key for waiting in self.admitter.queue.ordered()}

    def queued(self) -> dict[str, Any]:
        conditions = (self.api.job.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Queued"), {})


def users_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": MASTER, "namespace": "default", "uid": "users-uid"},
        "spec": {"clusterIP": "None", "selector": {"app": "mine"}},
    }


async def test_a_users_service_of_the_masters_name_keeps_the_gang_waiting_until_it_is_gone() -> (
    None
):
    rig = Rig()
    rig.api.services[MASTER] = users_service()

    assert await rig.reconcile() == 0.0, "the create's AlreadyExists: planned again at once"
    assert rig.api.created_pods == []
    assert KEY not in rig.waiting(), "not queued for admission by the plan it dropped"

    assert await rig.reconcile() == NAME_HOLDER_RECHECK_SECONDS
    assert rig.queued()["reason"] == "PodNameConflict"
    assert MASTER in rig.queued()["message"]
    conflicts = [e for e in rig.api.events if e["reason"] == "PodNameConflict"]
    assert [(e["type"], MASTER in e["message"]) for e in conflicts] == [("Warning", True)]
    rig.admitter.cycle()
    assert rig.admitter.reservation_for(KEY, rig.uid) is None, "it holds no capacity meanwhile"
    assert await rig.reconcile() == NAME_HOLDER_RECHECK_SECONDS, "looked at again, still held"
    assert rig.api.created_pods == []
    assert rig.api.services[MASTER] == users_service(), "the user's Service is never touched"
    assert len([e for e in rig.api.events if e["reason"] == "PodNameConflict"]) == 1

    del rig.api.services[MASTER]  # no event of it reaches the job: the recheck finds it gone
    await rig.reconcile()
    owners = rig.api.services[MASTER]["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] == [rig.uid], "the job's own Service now"
    assert KEY in rig.waiting()
    rig.admitter.cycle()
    assert rig.admitter.reservation_for(KEY, rig.uid) is not None
    await rig.reconcile()
    assert sorted(rig.api.created_pods) == [MASTER, "sq-worker-0"]
    assert rig.queued() == {}


async def test_the_jobs_own_service_not_yet_cached_counts_as_made() -> None:
    """A create answered AlreadyExists for the job's own Service (a cache behind) is done."""
    rig = Rig()
    await rig.reconcile()
    assert rig.api.services[MASTER]["metadata"]["ownerReferences"][0]["uid"] == rig.uid
    rig.services.forget("default", MASTER)  # the cache has not seen it yet
    rig.admitter.cycle()

    await rig.reconcile()

    assert sorted(rig.api.created_pods) == [MASTER, "sq-worker-0"]
    assert rig.queued().get("reason") != "PodNameConflict"

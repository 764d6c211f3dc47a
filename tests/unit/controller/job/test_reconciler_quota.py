"""A running elastic gang's new Worker that the namespace's ResourceQuota refuses (``waiting`` 8).

A reconciler and an admitter over caches holding a running elastic gang (two Workers on n0 and
n1 of three 8-GPU nodes) scaled to three Workers, and an API that refuses every pod create as
the apiserver's ResourceQuota admission does (403 ``exceeded quota``). Assertions read what the
admitter holds (reservations, free capacity), the job stored, the Events sent and the pods
asked for.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from tests.builders.job import job, with_uid
from tests.builders.node import node
from tests.unit.controller.helpers import NOW, World, merge_patch
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.errors import decode_error
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES

KEY = ("default", "el")
W0, W1, W2 = (f"el-worker-{i}" for i in range(3))
PLACED = {W0: "n0", W1: "n1"}
# kube-apiserver 1.37's answer to a pod its namespace's ResourceQuota has no room for.
EXCEEDED = (
    'pods "el-worker-2" is forbidden: exceeded quota: gpu-quota, requested: '
    "requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=16, limited: "
    "requests.nvidia.com/gpu=16"
)
QUOTA_REFUSAL = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": EXCEEDED,
    "reason": "Forbidden",
    "details": {"name": W2, "kind": "pods"},
    "code": 403,
}


class QuotaApi:
    """Refuses pod creates while ``refusing``; answers job patches as the apiserver would."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.refusing = True
        self.created: list[str] = []
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
        if method == "POST" and path.endswith("/pods"):
            if self.refusing:
                raise decode_error(403, orjson.dumps(QUOTA_REFUSAL), method, path)
            self.created.append(body["metadata"]["name"])
        if method == "POST" and path.endswith("/events"):
            self.events.append(body)
        if method == "PATCH" and "/pytorchjobs/" in path:
            self.job = merge_patch(self.job, copy.deepcopy(body))
            return copy.deepcopy(self.job)
        return {} if method == "DELETE" else body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Rig:
    """The running gang, scaled to three Workers; the admitter's clock is ``now``."""

    def __init__(self) -> None:
        built = job("el").workers(2, gpus=8).elastic(minReplicas=1, maxReplicas=4).build()
        world = World(with_uid(built))
        world.apply(world.plan())
        world.apply(world.plan(reservation=PLACED))
        for name, where in PLACED.items():
            world.run(name, node=where)
        world.job_raw["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3  # kubectl scale
        self.api = QuotaApi(copy.deepcopy(world.job_raw))
        self.jobs = Informer(self.api, PYTORCHJOBS)
        self.jobs.remember(copy.deepcopy(world.job_raw))
        self.pods = Informer(self.api, PODS)
        self.pods.index_by(job_key_of_pod)
        services = Informer(self.api, SERVICES)
        services.index_by(job_key_of_pod)
        self.now = 0.0
        self.admitter = Admitter(
            on_admit_job=lambda key: None,
            on_reason=lambda key: None,
            clock=lambda: self.now,
            backoff_base=10.0,
        )
        for index in range(3):
            self.admitter.on_node("ADDED", node(f"n{index}", gpus=8), None)
        for pod in world.pods.values():
            self.pods.remember(pod)
            self.admitter.on_pod("ADDED", pod, None)
        self.reconciler = Reconciler(
            self.api,
            jobs=self.jobs,
            pods=self.pods,
            services=services,
            policies=lambda: (),
            priority_of=lambda name: 0,
            admitter=self.admitter,
            metrics=ControllerMetrics(),
            options=Options(manage_unowned=True),
            clock=lambda: NOW,
        )

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

    def free_gpus(self, node_name: str) -> int:
        return self.admitter.free()[node_name].get("nvidia.com/gpu", 0) // 1000  # milli-units

    def running_message(self) -> str:
        conditions = self.api.job["status"]["conditions"]
        return str(next(c for c in conditions if c["type"] == "Running")["message"])


async def placed_and_refused(rig: Rig) -> float | None:
    await rig.reconcile()  # the running gang asks for its new Worker
    rig.admitter.cycle()
    assert rig.admitter.reservation_for(KEY, rig.api.job["metadata"]["uid"]) == {W2: "n2"}
    return await rig.reconcile()  # creates it: refused


async def test_a_refused_worker_frees_its_node_and_the_job_says_why() -> None:
    rig = Rig()

    requeue = await placed_and_refused(rig)

    assert requeue == 0.0, "planned again at once, to say why"
    assert rig.admitter.reservation_for(KEY, rig.api.job["metadata"]["uid"]) is None
    assert rig.free_gpus("n2") == 8, "the node reserved for the refused Worker is free"
    (event,) = [e for e in rig.api.events if e["reason"] == "FailedCreate"]
    assert (event["type"], event["message"]) == ("Warning", EXCEEDED)

    await rig.reconcile()
    message = rig.running_message()
    assert W2 in message
    assert "exceeded quota: gpu-quota" in message
    assert rig.api.job["metadata"].get("annotations", {}).get("torchgate.io/gang-attempt") in (
        None,
        "1",
    ), "the running gang is not restarted"


async def test_a_refused_worker_is_placed_again_only_after_its_back_off() -> None:
    rig = Rig()
    await placed_and_refused(rig)
    await rig.reconcile()  # asks again for it
    uid = rig.api.job["metadata"]["uid"]

    rig.now = 9.0
    rig.admitter.cycle()
    assert rig.admitter.reservation_for(KEY, uid) is None, "backing off for 10 s"

    rig.now = 10.0
    rig.admitter.cycle()
    assert rig.admitter.reservation_for(KEY, uid) == {W2: "n2"}
    await rig.reconcile()  # refused again: the back-off doubles
    await rig.reconcile()
    rig.now = 29.0
    rig.admitter.cycle()
    assert rig.admitter.reservation_for(KEY, uid) is None, "backing off for 20 s"

    rig.api.refusing = False  # the quota freed
    rig.now = 30.0
    rig.admitter.cycle()
    await rig.reconcile()
    assert rig.api.created == [W2]
    assert rig.admitter.growth_wait(KEY) is None, "a create that succeeds ends the refusal"


# ------------------------------------------------------------------ a gang member refused

G = ("default", "g")


class GangRig:
    """A new job of one 8-GPU Worker, two empty 8-GPU nodes, every pod create refused."""

    def __init__(self) -> None:
        self.api = QuotaApi(with_uid(job("g").workers(1, gpus=8).build()))
        self.jobs = Informer(self.api, PYTORCHJOBS)
        self.jobs.remember(copy.deepcopy(self.api.job))
        pods = Informer(self.api, PODS)
        pods.index_by(job_key_of_pod)
        services = Informer(self.api, SERVICES)
        services.index_by(job_key_of_pod)
        self.now = 0.0
        self.woken: list[tuple[str, str]] = []  # jobs whose reconcile the admitter asked for
        self.admitter = Admitter(
            on_admit_job=lambda key: None,
            on_reason=self.woken.append,
            clock=lambda: self.now,
            backoff_base=10.0,
        )
        for index in range(2):
            self.admitter.on_node("ADDED", node(f"n{index}", gpus=8), None)
        self.reconciler = Reconciler(
            self.api,
            jobs=self.jobs,
            pods=pods,
            services=services,
            policies=lambda: (),
            priority_of=lambda name: 0,
            admitter=self.admitter,
            metrics=ControllerMetrics(),
            options=Options(manage_unowned=True),
            clock=lambda: NOW,
        )

    async def reconcile(self) -> float | None:
        sender = asyncio.create_task(self.reconciler.events.run())
        try:
            requeue = await self.reconciler.reconcile(G)
            await asyncio.sleep(0.01)
        finally:
            sender.cancel()
        self.jobs.remember(copy.deepcopy(self.api.job))
        return requeue

    def reserved(self) -> Mapping[str, str] | None:
        return self.admitter.reservation_for(G, self.api.job["metadata"]["uid"])


async def test_a_refused_gang_frees_its_nodes_says_why_and_is_admitted_again_after_a_back_off() -> (
    None
):
    rig = GangRig()
    await rig.reconcile()  # asks for admission
    rig.admitter.cycle()
    assert rig.reserved() is not None

    assert await rig.reconcile() == 0.0, "refused: planned again at once, to say why"

    assert rig.reserved() is None
    assert all(gpus["nvidia.com/gpu"] == 8000 for gpus in rig.admitter.free().values())
    assert "FailedCreate" in [e["reason"] for e in rig.api.events]
    await rig.reconcile()  # asks again: queued, backing off, and woken to say why
    assert G in rig.woken
    await rig.reconcile()
    (queued,) = [c for c in rig.api.job["status"]["conditions"] if c["type"] == "Queued"]
    assert "exceeded quota: gpu-quota" in queued["message"]

    rig.now = 9.0
    rig.admitter.cycle()
    assert rig.reserved() is None, "backing off for 10 s"
    rig.now = 10.0
    rig.admitter.cycle()
    assert rig.reserved() is not None


async def test_a_refused_gang_is_not_announced_as_admitted() -> None:
    rig = GangRig()
    await rig.reconcile()  # asks for admission
    rig.admitter.cycle()

    await rig.reconcile()  # creates its pods: refused
    await rig.reconcile()

    reasons = [e["reason"] for e in rig.api.events]
    assert "FailedCreate" in reasons
    assert "GangAdmitted" not in reasons, "no pod of the gang was created: it was not admitted"


async def test_a_refused_gang_is_never_written_as_started() -> None:
    rig = GangRig()
    await rig.reconcile()  # asks for admission
    rig.admitter.cycle()

    await rig.reconcile()  # creates its pods: refused
    assert "startTime" not in rig.api.job["status"], "no pod ran: activeDeadlineSeconds waits"
    await rig.reconcile()  # asks again: queued, backing off
    await rig.reconcile()

    status = rig.api.job["status"]
    assert "startTime" not in status
    (queued,) = [c for c in status["conditions"] if c["type"] == "Queued"]
    assert (queued["status"], "exceeded quota: gpu-quota" in queued["message"]) == ("True", True)

"""A job created again under the name of an earlier one starts clean (the reconciler's docstring).

A reconciler and an admitter over caches holding one 8-GPU node and a job of 8 GPUs. The job is
deleted and created again under its name (another uid) and the deletion is never seen: the job
cache goes straight from the earlier job to the new one, as after a missed delete event. The
assertions read what the admitter holds for the name (its queue, reservations, back-off).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tests.builders.job import job, with_uid
from tests.builders.node import node
from tests.unit.controller.helpers import NOW, merge_patch
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES

KEY = ("default", "a")


class Api:
    """Accepts every write; a status patch returns the job as stored."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if method == "PATCH" and "/pytorchjobs/" in path:
            self.job = merge_patch(self.job, copy.deepcopy(body))
            return copy.deepcopy(self.job)
        return {} if method == "DELETE" else body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Rig:
    """The job ``a`` (8 GPUs, ``uid-a``) on a pool of one 8-GPU node; the admitter's clock."""

    def __init__(self) -> None:
        self.api = Api(with_uid(job("a").master(gpus=8).build(), "uid-a"))
        self.jobs = Informer(self.api, PYTORCHJOBS)  # type: ignore[arg-type]
        self.jobs.remember(copy.deepcopy(self.api.job))
        pods = Informer(self.api, PODS)  # type: ignore[arg-type]
        pods.index_by(job_key_of_pod)
        self.services = services = Informer(self.api, SERVICES)  # type: ignore[arg-type]
        services.index_by(job_key_of_pod)
        self.now = 0.0
        self.admitter = Admitter(
            on_admit_job=lambda key: None,
            on_reason=lambda key: None,
            clock=lambda: self.now,
            backoff_base=60.0,
        )
        self.admitter.on_node("ADDED", node("n0", gpus=8), None)
        self.reconciler = Reconciler(
            self.api,  # type: ignore[arg-type]
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

    async def reconcile(self) -> None:
        await self.reconciler.reconcile(KEY)
        self.jobs.remember(copy.deepcopy(self.api.job))

    def create_again(self) -> None:
        """Deleted and created again under its name, the deletion never seen.

        Its Service went with it (garbage collected) before the new job's reconcile.
        """
        self.services.forget("default", "a-master-0")
        self.api.job = with_uid(job("a").master(gpus=8).build(), "uid-a-again")
        self.jobs.remember(copy.deepcopy(self.api.job))


async def test_a_new_job_of_the_name_is_not_kept_waiting_by_the_earlier_ones_reservation() -> None:
    # Admitted, then deleted and created again before its reconcile made its pods: the
    # reservation waits for pods the new job's reconcile never makes.
    rig = Rig()
    await rig.reconcile()
    assert rig.admitter.cycle() == [KEY]
    rig.create_again()
    await rig.reconcile()
    assert rig.admitter.cycle() == [KEY], "the earlier job's pods will never come"
    assert rig.admitter.reservation_for(KEY, "uid-a-again") == {"a-master-0": "n0"}
    assert rig.admitter.reservation_for(KEY, "uid-a") is None


async def test_a_new_job_of_the_name_does_not_inherit_the_earlier_ones_back_off() -> None:
    # The earlier job's gang was torn down twice (schedule timeouts): it backs off 120 s.
    rig = Rig()
    await rig.reconcile()
    assert rig.admitter.cycle() == [KEY]
    rig.admitter.back_off(KEY, reason="its gang timed out")
    await rig.reconcile()
    assert rig.admitter.cycle() == [], "backing off"
    rig.now = 61.0
    assert rig.admitter.cycle() == [KEY]
    assert rig.admitter.back_off(KEY, reason="its gang timed out") == 120.0
    rig.create_again()
    await rig.reconcile()
    assert rig.admitter.wait_reason(KEY) is None, "told nothing of the earlier job's back-off"
    assert rig.admitter.cycle() == [KEY], "admitted at once, as a job of a name never seen"
    assert rig.admitter.back_off(KEY) == 60.0, "its own first back-off"

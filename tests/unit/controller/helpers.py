"""Shared helpers for the controller's unit tests: an in-memory world, and asking for admission.

``World`` is the tiny "apply the plan" simulator the idempotence tests use: it creates and deletes
pods and Services, merge-patches the status (as the reconciler does) and stores the restarts and
gang attempt annotations, and adopts orphans (the job's controlling reference added). Deleting a
pod gives it a ``deletionTimestamp`` (it stays until ``World.settle`` removes it), as graceful
deletion does; a forced deletion removes it at once.
``ask`` and ``free_of`` drive the admitter as the reconciler and the pod informer do. The objects
themselves come from ``tests.builders``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.builders.job import parsed_job, with_uid
from tests.builders.pod import set_phase
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.nodes import NodeView, job_demands
from torchgate.controller.admission.waiting import GangRequest, Waiting
from torchgate.controller.job.model import ANNOTATION_ATTEMPT, Observed, Plan
from torchgate.controller.job.plan import plan
from torchgate.controller.job.pods import owner_reference
from torchgate.pytorchjob import names
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.pool import gang_usage

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def env_of(pod: dict[str, Any], container: str = "pytorch") -> dict[str, str]:
    """The env of a container as a dict (last one wins, which tests assert never matters)."""
    for item in pod["spec"]["containers"]:
        if item["name"] == container:
            return {e["name"]: e.get("value", "") for e in item.get("env", [])}
    raise KeyError(container)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the reconciler writes the status (``null`` removes a key)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class World:
    """An in-memory cluster holding one job, its pods and Services."""

    job_raw: dict[str, Any]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    now: datetime = NOW

    def observed(self, **options: Any) -> Observed:
        return Observed(
            job_raw=self.job_raw,
            job=parsed_job(self.job_raw),
            now=self.now,
            pods=tuple(self.pods.values()),
            services=tuple(self.services.values()),
            **options,
        )

    def plan(self, **options: Any) -> Plan:
        return plan(self.observed(**options))

    def apply(self, result: Plan) -> None:
        stamp = format_time(self.now)
        reference = owner_reference(self.job_raw, parsed_job(self.job_raw))
        for adoption in result.adopt:  # the shell's patch adds the job's controlling reference
            store = self.pods if adoption.kind == "Pod" else self.services
            metadata = store[adoption.name]["metadata"]
            metadata["ownerReferences"] = [*metadata.get("ownerReferences", []), reference]
        for name in result.delete_pods:
            if name in self.pods:
                self.pods[name]["metadata"]["deletionTimestamp"] = stamp
        for name in result.force_delete_pods:
            self.pods.pop(name, None)
        for name in result.delete_services:
            self.services.pop(name, None)
        for manifest in result.create_pods:
            pod = copy.deepcopy(manifest)
            pod["metadata"]["creationTimestamp"] = stamp
            pod["status"] = {"phase": "Pending"}
            self.pods.setdefault(pod["metadata"]["name"], pod)
        for manifest in result.create_services:
            self.services.setdefault(manifest["metadata"]["name"], copy.deepcopy(manifest))
        if result.status is not None:
            status = self.job_raw.setdefault("status", {})
            self.job_raw["status"] = merge_patch(status, copy.deepcopy(result.status))
        annotations = self.job_raw["metadata"].setdefault("annotations", {})
        if result.restarts is not None:
            annotations[names.ANNOTATION_RESTARTS] = str(result.restarts)
        if result.attempt is not None:
            annotations[ANNOTATION_ATTEMPT] = str(result.attempt)
        if result.delete_job:
            self.job_raw["metadata"]["deletionTimestamp"] = stamp

    def settle(self) -> None:
        """Finish every graceful deletion."""
        self.pods = {n: p for n, p in self.pods.items() if "deletionTimestamp" not in p["metadata"]}

    def run(self, name: str, *, node: str = "n1") -> None:
        """The pod is bound and Running."""
        self.pods[name] = set_phase(self.pods[name], "Running", node=node)

    def finish_pod(self, name: str, phase: str, **state: Any) -> None:
        self.pods[name] = set_phase(self.pods[name], phase, **state)

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def is_quiet(result: Plan) -> bool:
    """A plan that changes nothing: no writes, no events, no deletes of the job."""
    return (
        result.status is None
        and not result.events
        and not result.create_pods
        and not result.create_services
        and not result.delete_pods
        and not result.force_delete_pods
        and not result.delete_services
        and result.restarts is None
        and result.attempt is None
        and not result.delete_job
        and not result.adopt
    )


def free_of(nodes: Iterable[NodeView], pods: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """Free capacity per node as the admitter counts it, with ``pods`` on the cluster."""
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    admitter.ledger.nodes = {node.name: node for node in nodes}
    for pod in pods:
        admitter.on_pod("ADDED", pod, None)
    return admitter.free()


def gang_request(
    raw: dict[str, Any],
    *,
    priority: int = 0,
    preempts: bool = True,
    topology: tuple[str | None, bool] = (None, False),
    created: str = "2026-01-01T00:00:00Z",
) -> tuple[tuple[str, str], GangRequest]:
    """The job's key and what its reconcile asks admission for (uid ``uid-<name>``)."""
    spec = parsed_job(with_uid(raw, uid=f"uid-{raw['metadata']['name']}"))
    gpus = GpuSources("nvidia.com/gpu")
    request = GangRequest(
        uid=spec.uid,
        demands=job_demands(spec),
        min_count=spec.min_available,
        usage=gang_usage(spec, gpus),
        priority=priority,
        created=created,
        gpus=gpus,
        preempts=preempts,
        topology_level=topology[0],
        topology_required=topology[1],
        run_limit=spec.run_policy.active_deadline_seconds,
    )
    return (spec.namespace, spec.name), request


def ask(
    admitter: Admitter,
    raw: dict[str, Any],
    *,
    priority: int = 0,
    preempts: bool = True,
    topology: tuple[str | None, bool] = (None, False),
    created: str = "2026-01-01T00:00:00Z",
) -> tuple[str, str]:
    """Ask for the job's admission as its reconcile does (uid ``uid-<name>``); its key."""
    key, request = gang_request(
        raw, priority=priority, preempts=preempts, topology=topology, created=created
    )
    admitter.request(key, request)
    return key


def candidate(
    raw: dict[str, Any],
    *,
    priority: int = 0,
    preempts: bool = True,
    topology: tuple[str | None, bool] = (None, False),
    created: str = "2026-06-01T00:00:00Z",
    since: float = 0.0,
) -> Waiting:
    """A job not asked for yet, as a forecast sees it (the terms ``ask`` would ask with)."""
    key, request = gang_request(
        raw, priority=priority, preempts=preempts, topology=topology, created=created
    )
    return Waiting(key=key, request=request, since=since)

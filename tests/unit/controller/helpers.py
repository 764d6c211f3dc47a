"""Shared helpers for the controller's unit tests: parsed jobs, pod states, an in-memory world.

``World`` is the tiny "apply the plan" simulator the idempotence tests use: it creates and deletes
pods and Services, merge-patches the status (as the reconciler does) and stores the restarts and
gang attempt annotations. Deleting a pod gives it a
``deletionTimestamp`` (it stays until ``World.settle`` removes it), as graceful deletion does; a
forced deletion removes it at once.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.nodes import NodeView
from torchgate.controller.job.model import ANNOTATION_ATTEMPT, ANNOTATION_RESTARTS, Observed, Plan
from torchgate.controller.job.plan import plan
from torchgate.controller.job.status import format_time
from torchgate.pytorchjob.spec import JobSpec, parse_job

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
UID = "0b0e1d2c-uid"


def with_uid(raw: dict[str, Any], uid: str = UID) -> dict[str, Any]:
    """The job with a ``metadata.uid`` (builders leave it out)."""
    raw = copy.deepcopy(raw)
    raw["metadata"]["uid"] = uid
    return raw


def parse(raw: dict[str, Any]) -> JobSpec:
    """``parse_job`` that must succeed."""
    spec, errors = parse_job(raw)
    assert spec is not None, errors
    assert not errors
    return spec


def env_of(pod: dict[str, Any], container: str = "pytorch") -> dict[str, str]:
    """The env of a container as a dict (last one wins, which tests assert never matters)."""
    for item in pod["spec"]["containers"]:
        if item["name"] == container:
            return {e["name"]: e.get("value", "") for e in item.get("env", [])}
    raise KeyError(container)


def set_phase(
    pod: dict[str, Any],
    phase: str,
    *,
    node: str | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    created: datetime | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    """A copy of ``pod`` in the given state."""
    pod = copy.deepcopy(pod)
    pod.setdefault("status", {})["phase"] = phase
    if node is not None:
        pod["spec"]["nodeName"] = node
    if exit_code is not None:
        pod["status"]["containerStatuses"] = [
            {"name": "pytorch", "state": {"terminated": {"exitCode": exit_code}}}
        ]
    if reason is not None:
        pod["status"]["reason"] = reason
    if created is not None:
        pod["metadata"]["creationTimestamp"] = format_time(created)
    if terminating:
        pod["metadata"]["deletionTimestamp"] = format_time(NOW)
    return pod


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
            job=parse(self.job_raw),
            now=self.now,
            pods=tuple(self.pods.values()),
            services=tuple(self.services.values()),
            **options,
        )

    def plan(self, **options: Any) -> Plan:
        return plan(self.observed(**options))

    def apply(self, result: Plan) -> None:
        stamp = format_time(self.now)
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
            annotations[ANNOTATION_RESTARTS] = str(result.restarts)
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
    )


def free_of(nodes: Iterable[NodeView], pods: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """Free capacity per node as the admitter counts it, with ``pods`` on the cluster."""
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    admitter.ledger.nodes = {node.name: node for node in nodes}
    for pod in pods:
        admitter.on_pod("ADDED", pod, None)
    return admitter.free()

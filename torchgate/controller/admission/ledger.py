"""The capacity ledger: what live pods take per node, and torchgate's pods grouped by job.

Kept from pod *events* (not recomputed per admission cycle), so a cycle costs O(nodes + waiting
jobs) even with thousands of pods. A pod counts on its node (``spec.nodeName``, or the node the
admitter planned, ``torchgate.io/planned-node``, before binding) until it is terminated or gone.
torchgate's pods (labelled with the operator and job name) are also grouped by job: the running
gangs that quota counts and preemption may choose from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.units import Units, add, pod_units, subtract

PodKey = tuple[str, str]
TERMINATED_PHASES: Final = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Member:
    """One of torchgate's pods, as the gang view of the ledger keeps it."""

    job: JobKey
    priority: int
    created: float | None
    gone_by: float | None = None  # deleted: when it should be gone (``deletionTimestamp``)


@dataclass(slots=True)
class Ledger:
    """Requests of live pods per node, and torchgate's pods grouped by job."""

    used: dict[str, dict[str, int]] = field(default_factory=dict)
    pods: dict[PodKey, tuple[str, Units]] = field(default_factory=dict)
    members: dict[PodKey, Member] = field(default_factory=dict)
    gangs: dict[JobKey, set[PodKey]] = field(default_factory=dict)

    def update(self, key: PodKey, pod: Mapping[str, Any] | None) -> bool:
        """Account for a pod's new state; return whether it freed capacity somewhere.

        A new pod only takes capacity, so it can never let a waiting gang in; only a pod that
        ended, went away or moved (bound elsewhere than planned) can.
        """
        before = self.pods.pop(key, None)
        if before is not None:
            subtract(self.used.setdefault(before[0], {}), before[1])
            member = self.members.pop(key, None)
            if member is not None:
                gang = self.gangs.get(member.job)
                if gang is not None:
                    gang.discard(key)
                    if not gang:
                        del self.gangs[member.job]
        after = pod_usage(pod) if pod is not None else None
        if after is not None and pod is not None:
            self.pods[key] = after
            add(self.used.setdefault(after[0], {}), after[1])
            member = member_of(pod)
            if member is not None:
                self.members[key] = member
                self.gangs.setdefault(member.job, set()).add(key)
        return before is not None and before != after


def pod_usage(pod: Mapping[str, Any]) -> tuple[str, Units] | None:
    """The node a pod takes capacity on and its requests; ``None`` when it takes none."""
    status = pod.get("status") or {}
    if status.get("phase") in TERMINATED_PHASES:
        return None
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        node = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            names.ANNOTATION_PLANNED_NODE
        )
    if not isinstance(node, str) or not node:
        return None
    return node, pod_units(spec)


def member_of(pod: Mapping[str, Any]) -> Member | None:
    """The job a torchgate pod belongs to, with its priority and creation; else ``None``."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    job = labels.get(names.LABEL_JOB_NAME)
    if labels.get(names.LABEL_OPERATOR_NAME) != names.OPERATOR_NAME or not isinstance(job, str):
        return None
    priority = (pod.get("spec") or {}).get("priority")
    return Member(
        job=(str(metadata.get("namespace") or ""), job),
        priority=priority if isinstance(priority, int) else 0,
        created=epoch_seconds(metadata.get("creationTimestamp")),
        gone_by=epoch_seconds(metadata.get("deletionTimestamp")),
    )


def epoch_seconds(timestamp: object) -> float | None:
    """An RFC 3339 timestamp (``creationTimestamp``) as seconds since the epoch, else ``None``."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None

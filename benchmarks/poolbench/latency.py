"""Where the live loop loses time between capacity freeing and the next gang Running (pure).

The simulation admits the next gang the instant a gang ends; on the cluster a chain of steps
lies between them, each with its own latency. For every gang that started on capacity another
gang freed, the chain is read off the benchmark watch's event times of both gangs' pods and the
controller's ``admitted`` log line:

1. ``master_end_to_delete``: the freeing gang's Master ended (``Succeeded`` seen) → the pod on the
   node the new gang waited for last is marked for deletion (torchgate's ``cleanPodPolicy``
   cleanup of the Workers; 0 when that pod was the Master itself, which frees its node by ending).
2. ``delete_to_gone``: marked for deletion → gone (kwok's pod-delete stage, the apiserver).
3. ``gone_to_admitted``: capacity freed → the admitter reserved nodes for the new gang (the
   controller's informer event, the cycle's debounce, the cycle itself).
4. ``admitted_to_created``: reservation → the gang's last pod created (its reconcile).
5. ``created_to_bound``: last pod created → last pod bound (kube-scheduler).
6. ``bound_to_running``: last pod bound → last pod Running (kwok's pod-ready stage).

``total`` runs from the Master's end to the new gang's last pod Running. Times are the watch's
monotonic clock; the controller's wall-clock log times are moved onto it by the offset taken
when the run starts (good to a few milliseconds). A gang admitted onto nodes no earlier gang
used (the first wave) has no chain and is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .stats import median_of

STEPS = (
    "master_end_to_delete",
    "delete_to_gone",
    "gone_to_admitted",
    "admitted_to_created",
    "created_to_bound",
    "bound_to_running",
    "total",
)


@dataclass(frozen=True, slots=True)
class PodTimes:
    """One pod's event times as the watch saw them (``None``: not seen)."""

    job: str
    name: str
    node: str | None = None
    added: float | None = None
    bound: float | None = None
    started: float | None = None
    ended: float | None = None  # Succeeded or Failed
    deleting: float | None = None
    gone: float | None = None

    @property
    def released(self) -> float | None:
        """When the pod stopped holding its node: it ended, or it was gone, whichever first."""
        times = [t for t in (self.ended, self.gone) if t is not None]
        return min(times) if times else None

    @property
    def is_master(self) -> bool:
        """Whether this is the gang's Master (``<job>-master-0``)."""
        return self.name == f"{self.job}-master-0"


def gang_chains(
    pods: Sequence[PodTimes], admitted: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Per gang that started on freed capacity, the seconds of each step (module docstring)."""
    by_job: dict[str, list[PodTimes]] = {}
    by_node: dict[str, list[PodTimes]] = {}
    for pod in pods:
        by_job.setdefault(pod.job, []).append(pod)
        if pod.node is not None:
            by_node.setdefault(pod.node, []).append(pod)
    chains: dict[str, dict[str, float]] = {}
    for job, own in sorted(by_job.items()):
        if not all(p.node and p.added and p.bound and p.started for p in own):
            continue
        freeing = _last_freed(own, by_node)
        if freeing is None:
            continue
        masters = [p for p in by_job[freeing.job] if p.is_master and p.ended is not None]
        if not masters:
            continue
        master_end = masters[0].ended
        assert master_end is not None
        freed = freeing.released
        assert freed is not None
        deleting = master_end if freeing.is_master else (freeing.deleting or freed)
        created = max(p.added for p in own if p.added is not None)
        bound = max(p.bound for p in own if p.bound is not None)
        running = max(p.started for p in own if p.started is not None)
        chain = {
            "master_end_to_delete": deleting - master_end,
            "delete_to_gone": freed - deleting,
            "bound_to_running": running - bound,
            "created_to_bound": bound - created,
            "total": running - master_end,
        }
        if job in admitted:
            chain["gone_to_admitted"] = admitted[job] - freed
            chain["admitted_to_created"] = created - admitted[job]
        chains[job] = {step: round(chain[step], 3) for step in STEPS if step in chain}
    return chains


def _last_freed(own: Sequence[PodTimes], by_node: Mapping[str, list[PodTimes]]) -> PodTimes | None:
    """The other gang's pod whose release was the last the gang waited for, if any."""
    latest: PodTimes | None = None
    for pod in own:
        assert pod.node is not None
        assert pod.bound is not None
        before = [
            other
            for other in by_node.get(pod.node, ())
            if other.job != pod.job and other.released is not None and other.released <= pod.bound
        ]
        if not before:
            continue
        previous = max(before, key=lambda p: p.released or 0.0)
        if latest is None or (previous.released or 0.0) > (latest.released or 0.0):
            latest = previous
    return latest


def breakdown(chains: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Median and largest seconds per step over the gangs, and how many gangs had a chain."""
    out: dict[str, Any] = {"gangs": len(chains)}
    for step in STEPS:
        values = [chain[step] for chain in chains.values() if step in chain]
        out[step] = {
            "median": median_of(values),
            "max": max(values) if values else None,
        }
    return out

"""Stopping the controller before an uninstall, so that no TeamQuota is left with its finalizer.

Why: the controller keeps ``pool.QUOTA_FINALIZER`` on a TeamQuota while its team has admitted
gangs, and a stopping leader takes it off only when no successor is coming (``poolsource`` rule
4). ``helm uninstall`` deletes the controller's Deployment, its RBAC and its ServiceAccount in one
pass, so a leader stopped by it can no longer write, and the chart's TeamQuotas (and later the
TeamQuota CRD) would wait forever. So the chart's ``pre-delete`` hook runs ``torchgate controller
stop`` first, while the ServiceAccount and the RBAC still exist (Helm runs pre-delete hooks to
completion before it deletes anything): it scales the Deployment to zero, which the stopping
leader reads as "no successor", and waits, bounded, until the controller's pods are gone (the
leader takes the finalizers off before it exits). It never fails the uninstall: it says what it
did and what is left, and exits 0.

Pure: these rules decide; ``stop`` reads and writes.

Rules (each one function):

1. ``replicas_to_stop``: the replicas the Deployment asks for when it must be scaled to zero (it
   exists, is not being deleted and asks for at least one; ``spec.replicas`` unset means 1);
   ``None`` when nothing is to scale.
2. ``pod_selector``: the label selector of the Deployment's pods (its ``spec.selector``
   ``matchLabels``), ``None`` when it has none to go by (gone, or selecting by expressions only).
3. ``held_finalizers``: the TeamQuotas that still carry ``pool.QUOTA_FINALIZER``, by name.
4. ``judge``: done when none of the controller's pods is left (the leader's shutdown is over:
   what it could take off, it took off), or, when its pods cannot be told (no selector), once no
   TeamQuota carries the finalizer; given up once ``timeout`` seconds have passed; else wait.
5. ``summary``: one line saying how it ended and which TeamQuotas still carry the finalizer,
   with how to take it off by hand.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torchgate.pytorchjob.pool import QUOTA_FINALIZER


class Verdict(enum.Enum):
    """What the wait for the controller's shutdown comes to (rule 4)."""

    WAIT = "wait"
    DONE = "done"
    GAVE_UP = "gave up"


@dataclass(frozen=True, slots=True)
class Observed:
    """One look at the cluster while waiting.

    ``pods_left``: the controller's pods still there (terminating ones count), ``None`` when they
    cannot be told apart (rule 2); ``held``: TeamQuotas carrying the finalizer, sorted.
    """

    pods_left: int | None
    held: tuple[str, ...]


def replicas_to_stop(deployment: Mapping[str, Any] | None) -> int | None:
    """Rule 1: the replicas asked for when the Deployment must be scaled to zero, else None."""
    if deployment is None or deployment.get("metadata", {}).get("deletionTimestamp"):
        return None
    replicas = deployment.get("spec", {}).get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas <= 0:
        return None
    return replicas


def pod_selector(deployment: Mapping[str, Any] | None) -> str | None:
    """Rule 2: ``key=value,...`` selecting the Deployment's pods, or None."""
    if deployment is None:
        return None
    selector = deployment.get("spec", {}).get("selector") or {}
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    if not isinstance(labels, Mapping) or not labels or selector.get("matchExpressions"):
        return None
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def held_finalizers(quotas: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Rule 3: names of the TeamQuotas that still carry ``QUOTA_FINALIZER``, sorted."""
    held = []
    for quota in quotas:
        metadata = quota.get("metadata") or {}
        finalizers = metadata.get("finalizers") or []
        if isinstance(finalizers, list) and QUOTA_FINALIZER in finalizers:
            held.append(str(metadata.get("name", "")))
    return tuple(sorted(held))


def judge(observed: Observed, *, elapsed: float, timeout: float) -> Verdict:
    """Rule 4: whether the controller's shutdown is over, still to wait for, or waited out."""
    if observed.pods_left == 0 or (observed.pods_left is None and not observed.held):
        return Verdict.DONE
    if elapsed >= timeout:
        return Verdict.GAVE_UP
    return Verdict.WAIT


def summary(observed: Observed, verdict: Verdict, *, elapsed: float) -> str:
    """Rule 5: how the wait ended, in one line."""
    if verdict is Verdict.GAVE_UP:
        left = "" if observed.pods_left is None else f" ({observed.pods_left} pod(s) left)"
        ending = f"gave up waiting for the controller to stop after {elapsed:.0f}s{left}"
    elif observed.pods_left == 0:
        ending = f"the controller stopped ({elapsed:.0f}s)"
    else:
        ending = f"no controller pod to wait for: its Deployment is gone ({elapsed:.0f}s)"
    if not observed.held:
        return f"{ending}; no TeamQuota carries the finalizer {QUOTA_FINALIZER}"
    return (
        f"{ending}; TeamQuotas still carrying the finalizer {QUOTA_FINALIZER}: "
        f"{', '.join(observed.held)} (they wait for a controller; without one, take it off: "
        "kubectl patch teamquota NAME --type=json "
        """-p='[{"op":"remove","path":"/metadata/finalizers"}]')"""
    )

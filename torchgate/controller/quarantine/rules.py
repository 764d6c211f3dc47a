"""When a node is quarantined, and what its quarantine looks like on the Node object.

Why: a node that keeps failing gangs for reasons outside the job (sandboxes or CNI that never come
up, images that never pull, repeated losses, health taints, evictions by its kubelet) costs every
gang placed on it a whole restart. Counting those faults per node and keeping the node out of new
placements for a cooldown stops the bleeding until an admin looks.

The mechanism is a ``torchgate.io/quarantine=<cause>:NoSchedule`` taint: kube-scheduler honours
it for every pod and torchgate's placement for every gang (``admission.nodes`` keeps gangs off
untolerated ``NoSchedule`` taints), so no second list of bad nodes exists to drift, and running
pods stay where they are (``NoSchedule``, not ``NoExecute``: the faults were the node's, the
gangs still on it may be fine). Two labels beside it (``torchgate.io/quarantine=<cause>``,
``torchgate.io/quarantine-until=<ISO 8601 basic>``) make ``kubectl get nodes -L`` show the cause
and the end of the cooldown. The taint is the truth: an admin clears a quarantine with
``kubectl taint nodes <node> torchgate.io/quarantine-``, and the labels of a node without the
taint are tidied away (``next_step``).

Rules (each one function):

1. ``recent``: a node's faults counted are those less than ``windowSeconds`` old (a sliding
   window); older ones are forgotten.
2. ``due``: ``faults`` recent faults, one per outage (rule 6; ``faults: 0`` never), quarantine
   the node until ``now`` plus ``cooldownSeconds``, for the cause most of them had (ties: the
   latest fault's).
3. ``quarantine_of``: what a Node says of its quarantine: the taint (and its cause) and the labels.
4. ``next_step``: a tainted node whose cooldown has ended is lifted (taint and labels removed); a
   node with the labels but not the taint was cleared by an admin and is tidied (labels removed);
   else nothing, with the seconds until the cooldown ends.
5. ``quarantine_patch`` / ``release_patch``: the JSON merge patches, carrying the node's
   ``resourceVersion`` so a concurrent change of its taints is never overwritten (409 instead).
6. ``one_per_outage``: the faults of one node from the same outage count once, however many gangs
   it took down (the first of them stands for it). Quarantine measures how flaky a node is, not
   how many gangs it hosted: a power blip of a node running three small gangs is one fault, as it
   is for a node running one big gang. An ``Outage`` is what the cluster shows of the spell
   (``job.disruption`` names it): a lost node by its ``Ready`` condition's
   ``lastTransitionTime`` (the same NotReady spell), a deleted node by its name, a ``NoExecute``
   taint by its key and ``timeAdded`` (none, as ``kubectl taint`` writes: the look that first
   saw it). A failure of a member on a healthy-looking node (stuck, evicted by its kubelet,
   disrupted) has no outage: each gang's is a fault of its own, distinct evidence of the node.

Faults live in the controller's memory: a restarted controller starts counting afresh (a
quarantine already set stays, on the Node), so no fault is counted twice across a restart and
no outage either (its faults before the restart are forgotten; those after it are counted once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from torchgate.pytorchjob import names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.policy import QuarantineSettings
from torchgate.pytorchjob.spec import as_list, as_mapping

UNTIL_FORMAT: Final = "%Y%m%dT%H%M%SZ"
Step = Literal["lift", "tidy"]


NOT_READY: Final = "NotReady"
DELETED: Final = "Deleted"


@dataclass(frozen=True, slots=True)
class Outage:
    """One spell of trouble of a node, which may take several gangs down (rule 6).

    Attributes:
        signal: What shows it: ``NOT_READY`` (its ``Ready`` condition not True), ``DELETED``
            (the node gone), else the key of the ``NoExecute`` taint.
        began: When it began as the cluster records it (``lastTransitionTime``, ``timeAdded``,
            else the first look that saw the taint); ``None``: not recorded (a deleted node).
    """

    signal: str
    began: datetime | None = None


@dataclass(frozen=True, slots=True)
class Fault:
    """One infrastructure fault: a gang restarted for ``cause`` on ``node`` at ``at``.

    ``outage`` is the spell of the node's trouble it came from (``None``: a fault of its own);
    faults are equal by what they charge, and counted once per outage by rule 6.
    """

    node: str
    cause: str
    at: datetime
    job: JobKey
    outage: Outage | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Quarantine:
    """A quarantine to set: why, and until when."""

    cause: str
    until: datetime


@dataclass(frozen=True, slots=True)
class NodeQuarantine:
    """What a Node shows of its quarantine."""

    tainted: bool = False
    cause: str = ""
    until: datetime | None = None
    labelled: bool = False


def recent(faults: Iterable[Fault], *, now: datetime, window_seconds: float) -> tuple[Fault, ...]:
    """Rule 1: the faults less than ``window_seconds`` old, oldest first."""
    start = now - timedelta(seconds=window_seconds)
    return tuple(sorted((f for f in faults if f.at > start), key=lambda f: f.at))


def due(
    faults: Sequence[Fault], *, now: datetime, settings: QuarantineSettings
) -> Quarantine | None:
    """Rule 2: the quarantine ``faults`` call for under ``settings``, if any."""
    counted = one_per_outage(recent(faults, now=now, window_seconds=settings.window_seconds))
    if settings.faults <= 0 or len(counted) < settings.faults:
        return None
    tally = Counter(f.cause for f in counted)
    most = max(tally.values())
    cause = next(f.cause for f in reversed(counted) if tally[f.cause] == most)
    return Quarantine(cause, now + timedelta(seconds=settings.cooldown_seconds))


def one_per_outage(faults: Iterable[Fault]) -> tuple[Fault, ...]:
    """Rule 6: the first of a node's ``faults`` from each outage, and every one without one."""
    seen: set[Outage] = set()
    counted: list[Fault] = []
    for fault in faults:
        if fault.outage is not None:
            if fault.outage in seen:
                continue
            seen.add(fault.outage)
        counted.append(fault)
    return tuple(counted)


def format_until(moment: datetime) -> str:
    """A label value for the end of a cooldown: ISO 8601 basic format, UTC, whole seconds."""
    return moment.astimezone(UTC).strftime(UNTIL_FORMAT)


def parse_until(value: object) -> datetime | None:
    """The moment a ``torchgate.io/quarantine-until`` label names (``None``: malformed)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, UNTIL_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def _taints(node: Mapping[str, Any]) -> list[Any]:
    return as_list(as_mapping(node.get("spec")).get("taints"))


def _is_ours(taint: object) -> bool:
    return isinstance(taint, Mapping) and taint.get("key") == names.TAINT_QUARANTINE


def quarantine_of(node: Mapping[str, Any]) -> NodeQuarantine:
    """Rule 3: the Node's quarantine taint and labels."""
    labels = as_mapping(as_mapping(node.get("metadata")).get("labels"))
    taint = next((t for t in _taints(node) if _is_ours(t)), None)
    cause = as_mapping(taint).get("value") or labels.get(names.LABEL_QUARANTINE) or ""
    return NodeQuarantine(
        tainted=taint is not None,
        cause=str(cause),
        until=parse_until(labels.get(names.LABEL_QUARANTINE_UNTIL)),
        labelled=names.LABEL_QUARANTINE in labels or names.LABEL_QUARANTINE_UNTIL in labels,
    )


def next_step(state: NodeQuarantine, *, now: datetime) -> tuple[Step | None, float | None]:
    """Rule 4: what to do about a node's quarantine now, and else in how many seconds.

    A tainted node without a readable end (an admin's hand-made taint) is left alone.
    """
    if state.tainted:
        if state.until is None:
            return None, None
        left = (state.until - now).total_seconds()
        return ("lift", None) if left <= 0 else (None, left)
    return ("tidy", None) if state.labelled else (None, None)


def _metadata_patch(node: Mapping[str, Any], labels: Mapping[str, str | None]) -> dict[str, Any]:
    metadata = as_mapping(node.get("metadata"))
    return {"resourceVersion": metadata.get("resourceVersion"), "labels": dict(labels)}


def quarantine_patch(node: Mapping[str, Any], quarantine: Quarantine) -> dict[str, Any]:
    """Rule 5: the merge patch that quarantines ``node`` (its other taints kept)."""
    taint = {"key": names.TAINT_QUARANTINE, "value": quarantine.cause, "effect": "NoSchedule"}
    others = [t for t in _taints(node) if not _is_ours(t)]
    labels = {
        names.LABEL_QUARANTINE: quarantine.cause,
        names.LABEL_QUARANTINE_UNTIL: format_until(quarantine.until),
    }
    return {"metadata": _metadata_patch(node, labels), "spec": {"taints": [*others, taint]}}


def release_patch(node: Mapping[str, Any]) -> dict[str, Any]:
    """Rule 5: the merge patch that removes the quarantine taint and labels from ``node``."""
    labels: dict[str, str | None] = {
        names.LABEL_QUARANTINE: None,
        names.LABEL_QUARANTINE_UNTIL: None,
    }
    patch: dict[str, Any] = {"metadata": _metadata_patch(node, labels)}
    taints = _taints(node)
    if any(_is_ours(t) for t in taints):
        patch["spec"] = {"taints": [t for t in taints if not _is_ours(t)]}
    return patch

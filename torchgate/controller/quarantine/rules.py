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
``torchgate.io/quarantine-until=<ISO 8601 basic>``, ``moments`` rule 5) make ``kubectl get
nodes -L`` show the cause and the end of the cooldown. The taint is the truth: an admin clears a
quarantine with ``kubectl taint nodes <node> torchgate.io/quarantine-``, and the labels of a node
without the taint are tidied away (``next_step``).

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
   ``lastTransitionTime`` (the same NotReady spell; an ``Unknown`` one that continues a
   recorded one is dated as that one, ``job.disruption.spell_of``), a deleted node by its
   name, a ``NoExecute`` taint by its key and ``timeAdded`` (none, as ``kubectl taint``
   writes: the look that first saw it). A failure of a member on a healthy-looking node
   (stuck, evicted by its kubelet, disrupted) has no outage: each gang's is a fault of its own,
   distinct evidence of the node.

7. ``history_of``: the faults a Node records of itself (``history_text`` writes them): the
   annotation ``torchgate.io/quarantine-faults``, a JSON list of ``{"at", "cause", "job"}`` with
   the outage's ``"outage"`` signal and ``"outageBegan"`` when it has one (times with a zone
   and every microsecond, ``moments`` rule 4, so they read back equal). So the count
   survives a controller restart or a leader failover (the new leader reads what the old one
   wrote), and an outage counted before it is still one fault after it (rule 6 sees its
   recorded faults; ``recorded_outages`` lets ``job.disruption`` date a taint without
   ``timeAdded`` as the outage recorded before, not anew). Entries that cannot be read (a hand
   edit, a value that is not a JSON list) are skipped and counted, never raised: the keeper
   reports them and writes the readable rest. Faults from before the count's start (rule 9)
   are not read.
8. ``history_patch``: the merge patch that writes a node's faults (the latest ``KEPT_FAULTS``
   after the count's start, rule 9, at most a few KiB; the annotation removed when none is
   left). It carries no ``resourceVersion``: only the leading controller writes the annotation,
   and a merge patch of one annotation changes nothing else of the node, so a node's heartbeats
   never conflict with it.
9. ``count_start``: a quarantine starts the count afresh, and so does an admin's clearing of
   one. ``quarantine_patch`` removes the faults and stamps the moment it is written on the Node
   (the annotation ``torchgate.io/quarantine-faults-since``, every microsecond), and so does
   tidying a node an admin cleared (``release_patch(..., afresh_at=now)``); a lift keeps both.
   A fault at or before that moment is never counted nor written again (rules 7-8), however it
   reaches a write: a fault of a job under another policy (other thresholds) recorded while the
   quarantine was pending reads the node's earlier faults back into the keeper's memory, and a
   write after the quarantine, or after its lift, would otherwise bring them back, so the node,
   once lifted, would be quarantined again at its next single fault. Read from the Node, the
   start holds across a restart or failover too. A start that cannot be read (a hand edit) is
   none: every recorded fault counts, as before any quarantine.

Expired faults are dropped (rule 1) at every write, as are those before the count's start
(rule 9). An admin forgets a node's faults with
``kubectl annotate node <node> torchgate.io/quarantine-faults-``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from torchgate.pytorchjob import moments, names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.policy import QuarantineSettings
from torchgate.pytorchjob.spec import as_list, as_mapping

KEPT_FAULTS: Final = 32
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
        until=moments.parse_label_time(labels.get(names.LABEL_QUARANTINE_UNTIL)),
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


def _afresh(moment: datetime) -> dict[str, str | None]:
    """Rule 9: the annotations that start ``node``'s count afresh at ``moment``."""
    return {
        names.ANNOTATION_QUARANTINE_FAULTS: None,
        names.ANNOTATION_QUARANTINE_FAULTS_SINCE: moments.format_exact_time(moment),
    }


def quarantine_patch(
    node: Mapping[str, Any], quarantine: Quarantine, *, now: datetime
) -> dict[str, Any]:
    """Rule 5: the merge patch that quarantines ``node`` (its other taints kept) from ``now``.

    Its count starts afresh at ``now`` (rule 9).
    """
    taint = {"key": names.TAINT_QUARANTINE, "value": quarantine.cause, "effect": "NoSchedule"}
    others = [t for t in _taints(node) if not _is_ours(t)]
    labels = {
        names.LABEL_QUARANTINE: quarantine.cause,
        names.LABEL_QUARANTINE_UNTIL: moments.format_label_time(quarantine.until),
    }
    metadata = _metadata_patch(node, labels)
    metadata["annotations"] = _afresh(now)
    return {"metadata": metadata, "spec": {"taints": [*others, taint]}}


def release_patch(node: Mapping[str, Any], *, afresh_at: datetime | None = None) -> dict[str, Any]:
    """Rule 5: the merge patch that removes the quarantine taint and labels from ``node``.

    ``afresh_at``: an admin cleared the quarantine; the count starts afresh then (rule 9).
    """
    labels: dict[str, str | None] = {
        names.LABEL_QUARANTINE: None,
        names.LABEL_QUARANTINE_UNTIL: None,
    }
    patch: dict[str, Any] = {"metadata": _metadata_patch(node, labels)}
    if afresh_at is not None:
        patch["metadata"]["annotations"] = _afresh(afresh_at)
    taints = _taints(node)
    if any(_is_ours(t) for t in taints):
        patch["spec"] = {"taints": [t for t in taints if not _is_ours(t)]}
    return patch


@dataclass(frozen=True, slots=True)
class FaultHistory:
    """What a Node records of its faults (rule 7): those read, and how many entries were not."""

    faults: tuple[Fault, ...] = ()
    unreadable: int = 0
    text: str = ""


def _entry(fault: Fault) -> dict[str, str]:
    entry = {
        "at": moments.format_exact_time(fault.at),
        "cause": fault.cause,
        "job": "/".join(fault.job),
    }
    if fault.outage is not None:
        entry["outage"] = fault.outage.signal
        if fault.outage.began is not None:
            entry["outageBegan"] = moments.format_exact_time(fault.outage.began)
    return entry


def _fault_of(node: str, entry: object) -> Fault | None:
    """One recorded entry as a fault of ``node``; ``None`` when it cannot be read whole."""
    if not isinstance(entry, Mapping):
        return None
    at = moments.parse_time(entry.get("at"), zone_required=True)
    cause, job, signal = entry.get("cause"), entry.get("job"), entry.get("outage")
    if at is None or not isinstance(cause, str) or not cause or not isinstance(job, str):
        return None
    namespace, slash, name = job.partition("/")
    if not slash or not namespace or not name:
        return None
    outage: Outage | None = None
    if signal is not None:
        began = entry.get("outageBegan")
        began_at = moments.parse_time(began, zone_required=True)
        if not isinstance(signal, str) or not signal or (began is not None and began_at is None):
            return None
        outage = Outage(signal, began_at)
    return Fault(node, cause, at, (namespace, name), outage)


def history_text(faults: Iterable[Fault]) -> str:
    """Rule 7: the annotation's value for ``faults``, oldest first, compact JSON."""
    return json.dumps([_entry(f) for f in faults], separators=(",", ":"))


def count_start(node: Mapping[str, Any]) -> datetime | None:
    """Rule 9: when ``node``'s count last started afresh; ``None``: never (or unreadable)."""
    annotations = as_mapping(as_mapping(node.get("metadata")).get("annotations"))
    value = annotations.get(names.ANNOTATION_QUARANTINE_FAULTS_SINCE)
    return moments.parse_time(value, zone_required=True)


def since(faults: Iterable[Fault], start: datetime | None) -> tuple[Fault, ...]:
    """Rule 9: the ``faults`` after ``start`` (all of them when ``None``), in their order."""
    return tuple(f for f in faults if start is None or f.at > start)


def history_of(node: Mapping[str, Any]) -> FaultHistory:
    """Rule 7: the faults ``node`` records of itself, oldest first; unreadable entries counted.

    Those at or before its count's start (rule 9) are not its faults any more.
    """
    metadata = as_mapping(node.get("metadata"))
    text = as_mapping(metadata.get("annotations")).get(names.ANNOTATION_QUARANTINE_FAULTS)
    if text is None:
        return FaultHistory()
    try:
        entries = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        entries = None
    if not isinstance(entries, list):
        return FaultHistory(unreadable=1, text=str(text))
    name = str(metadata.get("name") or "")
    read = [_fault_of(name, entry) for entry in entries]
    readable = sorted((f for f in read if f is not None), key=lambda f: f.at)
    faults = since(readable, count_start(node))
    return FaultHistory(faults, sum(1 for f in read if f is None), text)


def recorded_outages(node: Mapping[str, Any]) -> tuple[Outage, ...]:
    """Rule 7: the outages of the faults ``node`` records, oldest first.

    ``job.disruption`` dates a taint without ``timeAdded`` by them after a restart.
    """
    return tuple(f.outage for f in history_of(node).faults if f.outage is not None)


def history_patch(faults: Sequence[Fault], *, start: datetime | None) -> dict[str, Any]:
    """Rule 8: the merge patch writing the latest ``KEPT_FAULTS`` of ``faults`` (none: removed).

    Only those after ``start``, the node's count's start (rule 9), are written.
    """
    kept = sorted(since(faults, start), key=lambda f: f.at)[-KEPT_FAULTS:]
    value = history_text(kept) if kept else None
    return {"metadata": {"annotations": {names.ANNOTATION_QUARANTINE_FAULTS: value}}}

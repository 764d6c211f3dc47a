"""One job explained: its state, why, its place in the queue, where it runs, what it went through.

Why pure and apart from the command: the facts come from two places, the job as the apiserver
has it (conditions, annotations, its pods, its Events) and the controller's live outlook
(``outlook.JobOutlook``: the reason now, the place, what must end), which may be missing when the
controller does not answer. How they combine is a set of rules worth testing with plain data.

Rules (each one function):

1. ``state_of``: ``Deleting`` once its deletion was asked for (``metadata.deletionTimestamp``:
   a foreground deletion waits for its pods, a finalizer of another tool holds it): the
   controller plans nothing more for it (``job.plan`` rule 1), so neither what it last ran nor
   its queue place is what happens to it; its nodes are those its pods, terminating or not,
   still hold. Else ``Finished`` once ``Succeeded`` or ``Failed`` is True; ``Suspended`` while
   its ``spec.runPolicy.suspend`` is true (what the training-operator shows: its last
   condition, ``Suspended``; nothing of it runs or queues until it is resumed); ``Running``
   while ``Running`` is True and the job is not ``Queued``; otherwise ``Waiting`` (queued,
   restarting, resuming, or not yet seen by the controller).
2. ``explain``: a waiting job's reason is its ``Queued`` reason and its message the controller's
   live one (the condition's, rewritten at most every 30 s, when the controller does not
   answer); its position is its place in the pool's admission order (from the outlook, else from
   the place the condition's message starts with, else ``None``). A running job's nodes are its
   pods' nodes (the outlook's while its pods are being created); a finished job's message is
   its final condition's. An admitted job that is not running yet (the outlook holds its nodes,
   or the controller does not answer and it has pods) says which of its pods have not started
   and why (rule 5), never that its pods are still being created once they exist. A suspended
   job's reason and message are its ``Suspended`` condition's (``PyTorchJobSuspended``, ``PyTorchJob
   <name> is suspended.``), or say the controller has yet to act on the suspension, and its
   rendering says how to resume it (``RESUME``). Whether torchgate runs the job (``runs``, in
   every state; ``-o json``'s ``runs``, so a script tells waiting from not ours) is the
   controller's answer (``JobOutlook.runs``, its ``is_ours``: a job naming no manager is run
   only under ``--manage-unowned``), else (no answer, or an older controller's) whether its
   ``runPolicy.managedBy`` names no other controller. A waiting or suspended job torchgate does
   not run says so and who does (``outlook.run_elsewhere``), never that it is not admitted yet,
   that the controller has yet to suspend it or how to resume it (torchgate acts on neither).
   A gang restarting or preempted, not queued again yet (``Restarting`` or ``Preempted`` True,
   the latest of them, no ``Queued``), whose old pods are still going (some terminating, or none
   left and no nodes held for it) is told as that condition says (its reason: ``NodeLost``,
   ``PodDeleted``, ``Preempted``...; its message, since when) with the nodes its terminating
   pods hold, never that it is admitted and its pods are being created, nor that it is not
   admitted yet.
3. ``restarts_of``: the restarts its Events tell, newest last, each with its cause (the Event's
   reason, one of ``reasons.RESTART_EVENT_REASONS``: ``PyTorchJobRestarting``, ``Hang``,
   ``Preempted``, ``GangIncomplete``, ``GangScheduleTimeout``, or a disruption's cause such as
   ``NodeLost``) and message, once each; and how many counted against ``backoffLimit`` (the
   ``torchgate.io/restarts`` annotation). Events expire (an hour by default), so older restarts
   are only counted. Events are found by the job's name, so those about another ``uid`` (a job
   of that name deleted and created again, ``kubectl delete`` then ``apply``) are not its.
4. ``render``: the text a person reads, one fact per line. Its ``to start:`` line agrees with its
   ``clear:`` line: when its nodes out of use returning would let it start, it says they must
   return (``CLEAR_NODES``), not that other nodes must join the pool or that it waits for its turn.
5. ``not_started``: each live pod of the job that has not started, in rank order, with its node
   and why, as the kubelet says it: its first waiting container's reason and message, init
   containers first (``ImagePullBackOff (Back-off pulling image "x")``, ``ContainerCreating``),
   or that no node has taken it yet; at most ``MAX_NOT_STARTED`` are named.
6. What the user may not read is left out, not fatal: reading the job is all ``explain`` asks
   (the README's promise); its pods or Events that RBAC forbids listing are explained without
   (``unread``: ``pods`` or ``events`` -> the apiserver's refusal, which names the missing
   permission), on a line of their own and in ``-o json``'s ``unread``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from torchgate.pytorchjob import moments, names, reasons
from torchgate.pytorchjob.outlook import (
    Gang,
    JobOutlook,
    Place,
    gpus_phrase,
    named,
    place_phrase,
    run_elsewhere,
)
from torchgate.pytorchjob.spec import is_suspended, managed_by

State = Literal["Waiting", "Running", "Finished"] | reasons.SuspendedState | reasons.DeletingState
DELETING = (
    "being deleted: torchgate does nothing more with it (no queueing, no pods); garbage "
    "collection removes its pods"
)
MAX_NOT_STARTED = 4
NO_NODE_ADMITS = (
    "no job's end lets it start: nodes that admit and can hold its pods must join the pool, or "
    "it must ask for less (fewer or smaller pods), or its nodeSelector, affinity, tolerations or "
    "pinned hosts must change (it holds no one back)"
)
CLEAR_NODES = (
    "no job's end lets it start: its nodes out of use must return to use (clear:), or other nodes "
    "that admit and can hold its pods must join the pool, or it must ask for less (it holds no "
    "one back)"
)
NO_END_CLEAR_NODES = (
    "no running job's end alone lets it start: its nodes out of use must return to use (clear:)"
)
WITHIN_QUOTA = (
    "would have to end (within their team's nominal quota, they are never preempted for it; it "
    "waits for them to finish)"
)
RESUME = (
    "kubectl patch pytorchjob {name} -n {namespace} --type merge "
    """-p '{{"spec":{{"runPolicy":{{"suspend":false}}}}}}' (it queues for admission again)"""
)
# A Queued message as the controller writes it: "<place>: <reason>" (``outlook.queued_message``).
_WRITTEN = re.compile(r"^(#(\d+) of \d+ in the pool.*?(?:nothing ahead|\) ahead)): (.*)$", re.S)


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart an Event tells of."""

    at: str
    cause: str
    message: str

    def to_json(self) -> dict[str, str]:
        """The ``-o json`` form."""
        return {"at": self.at, "cause": self.cause, "message": self.message}


@dataclass(frozen=True, slots=True)
class Explanation:
    """What ``torchgate explain`` says about one job."""

    job: str
    state: State
    reason: str
    message: str
    position: int | None = None
    place: Place | None = None
    must_end: tuple[Gang, ...] = ()
    ending_lets_start: tuple[Gang, ...] = ()  # within their quota: not preempted for it
    preempting: tuple[str, ...] = ()
    starts_next_cycle: bool = False
    placeable: bool = True
    starts_if_cleared: tuple[str, ...] = ()  # nodes out of use whose return would start it
    nodes: Mapping[str, str] = field(default_factory=dict)
    domains: tuple[str, ...] = ()
    since: str | None = None
    restarts: tuple[Restart, ...] = ()
    counted_restarts: int = 0
    live: bool = True
    unanswered: str | None = None
    written_place: str | None = None  # the place as last written to its status (no live view)
    runs: bool = True  # whether torchgate runs it (``_runs``); its message says who does if not
    unread: Mapping[str, str] = field(default_factory=dict)  # pods/events -> why not (rule 6)

    def to_json(self) -> dict[str, Any]:
        """The ``-o json`` form (``state``, ``reason``, ``position``, ``message``, ``nodes``...)."""
        return {
            "job": self.job,
            "state": self.state,
            "reason": self.reason,
            "position": self.position,
            "message": self.message,
            "nodes": dict(self.nodes),
            "domains": list(self.domains),
            "since": self.since,
            "queue": None if self.place is None else self.place.to_json(),
            "mustEnd": [gang.to_json() for gang in self.must_end],
            "endingLetsStart": [gang.to_json() for gang in self.ending_lets_start],
            "preempting": list(self.preempting),
            "startsNextCycle": self.starts_next_cycle,
            "placeable": self.placeable,
            "startsIfCleared": list(self.starts_if_cleared),
            "restarts": {
                "counted": self.counted_restarts,
                "events": [restart.to_json() for restart in self.restarts],
            },
            "live": self.live,
            "controller": self.unanswered or "answered",
            "runs": self.runs,
            "unread": dict(self.unread),
        }


def _conditions(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = job.get("status")
    raw = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []


def _true(conditions: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    for condition in conditions:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


# ------------------------------------------------------------------ rule 1


def state_of(job: Mapping[str, Any]) -> State:
    """``Waiting``, ``Suspended``, ``Running`` or ``Finished`` (rule 1)."""
    if _metadata(job).get("deletionTimestamp"):
        return reasons.DELETING
    conditions = _conditions(job)
    if _true(conditions, reasons.SUCCEEDED) or _true(conditions, reasons.FAILED):
        return "Finished"
    if is_suspended(job):
        return reasons.SUSPENDED
    if _true(conditions, reasons.RUNNING) and not _true(conditions, reasons.QUEUED):
        return "Running"
    return "Waiting"


# ------------------------------------------------------------------ rule 3


def restarts_of(events: Iterable[Mapping[str, Any]], uid: object = None) -> tuple[Restart, ...]:
    """The restarts the job's Events tell, oldest first, each once (rule 3).

    With the job's ``uid``, an Event about another object of its name (an earlier job deleted
    and created again) is not the job's.
    """
    seen: dict[tuple[str, str], Restart] = {}
    for event in events:
        involved = event.get("involvedObject")
        about = involved.get("uid") if isinstance(involved, Mapping) else None
        if uid and about and about != uid:
            continue
        reason = event.get("reason")
        if reason not in reasons.RESTART_EVENT_REASONS or not isinstance(reason, str):
            continue
        at = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        message = str(event.get("message") or "")
        seen.setdefault((at, reason), Restart(at, reason, message))
    return tuple(sorted(seen.values(), key=lambda restart: restart.at))


def counted_restarts(job: Mapping[str, Any]) -> int:
    """Restarts counted against ``backoffLimit`` (the controller's annotation)."""
    annotations = _metadata(job).get("annotations")
    value = annotations.get(names.ANNOTATION_RESTARTS) if isinstance(annotations, Mapping) else None
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


# ------------------------------------------------------------------ rule 2


def explain(
    job: Mapping[str, Any],
    *,
    outlook: JobOutlook | None,
    pods: Sequence[Mapping[str, Any]] = (),
    events: Sequence[Mapping[str, Any]] = (),
    unanswered: str | None = None,
    unread: Mapping[str, str] | None = None,
) -> Explanation:
    """Combine the job, its pods and Events and the controller's outlook (rule 2)."""
    metadata = _metadata(job)
    manager = managed_by(job)
    runs = _runs(manager, outlook)
    common: dict[str, Any] = {
        "job": f"{metadata.get('namespace')}/{metadata.get('name')}",
        "state": state_of(job),
        "restarts": restarts_of(events, metadata.get("uid")),
        "counted_restarts": counted_restarts(job),
        "live": outlook is not None,
        "unanswered": unanswered,
        "unread": dict(unread or {}),
        "domains": outlook.domains if outlook is not None else (),
        "runs": runs,
    }
    conditions = _conditions(job)
    if common["state"] == reasons.DELETING:
        return Explanation(
            reason="",
            message=DELETING,
            nodes=_pod_nodes(pods, terminating=True),
            since=str(metadata.get("deletionTimestamp")),
            **common,
        )
    if common["state"] == "Finished":
        final = _true(conditions, reasons.SUCCEEDED) or _true(conditions, reasons.FAILED) or {}
        status = job.get("status")
        finished = status.get("completionTime") if isinstance(status, Mapping) else None
        return Explanation(
            reason="",
            message=str(final.get("message") or ""),
            since=str(finished) if finished else None,
            **common,
        )
    if common["state"] == "Running":
        running = _true(conditions, reasons.RUNNING) or {}
        nodes = _pod_nodes(pods) or (dict(outlook.nodes) if outlook is not None else {})
        return Explanation(
            reason="",
            message=f"running on {len(set(nodes.values()))} node(s)",
            nodes=nodes,
            since=str(running.get("lastTransitionTime") or "") or None,
            **common,
        )
    if common["state"] == reasons.SUSPENDED:
        suspended = _true(conditions, reasons.SUSPENDED)
        if not runs:  # nor will it act on the suspension, nor on a resumption
            return Explanation(
                reason=str((suspended or {}).get("reason") or ""),
                message=run_elsewhere(manager),
                since=str((suspended or {}).get("lastTransitionTime") or "") or None,
                **common,
            )
        if suspended is None:
            return Explanation(
                reason="",
                message="suspend requested (spec.runPolicy.suspend); the controller has not "
                "suspended it yet",
                nodes=_pod_nodes(pods),
                **common,
            )
        return Explanation(
            reason=str(suspended.get("reason") or ""),
            message=str(suspended.get("message") or "suspended (spec.runPolicy.suspend)"),
            since=str(suspended.get("lastTransitionTime") or "") or None,
            **common,
        )
    if not runs:
        return Explanation(reason="", message=run_elsewhere(manager), **common)
    return _waiting(job, _true(conditions, reasons.QUEUED), outlook, pods, common)


def _runs(manager: str | None, outlook: JobOutlook | None) -> bool:
    """Whether torchgate runs the job: the controller's answer, else its ``managedBy``."""
    if outlook is not None and outlook.runs is not None:
        return outlook.runs
    return manager is None or manager == names.CONTROLLER_NAME


def _waiting(
    job: Mapping[str, Any],
    queued: Mapping[str, Any] | None,
    outlook: JobOutlook | None,
    pods: Sequence[Mapping[str, Any]],
    common: dict[str, Any],
) -> Explanation:
    """A job that is not running: the live outlook first, its own status otherwise (rule 2)."""
    since = str(queued.get("lastTransitionTime") or "") or None if queued is not None else None
    message = str(queued.get("message") or "") if queued is not None else ""
    reason = str(queued.get("reason") or "") if queued is not None else ""
    if outlook is not None and outlook.known and outlook.waiting:
        return Explanation(
            reason=outlook.reason or reason,
            message=outlook.message,
            position=outlook.place.pool if outlook.place is not None else None,
            place=outlook.place,
            must_end=outlook.must_end,
            ending_lets_start=outlook.ending_lets_start,
            preempting=outlook.preempting,
            starts_next_cycle=outlook.starts_next_cycle,
            placeable=outlook.placeable,
            starts_if_cleared=outlook.starts_if_cleared,
            nodes=dict(outlook.nodes),
            since=since,
            **common,
        )
    restart = _torn_down_for(_conditions(job))
    if restart is not None and queued is None and _tearing_down(pods, outlook):
        return Explanation(
            reason=str(restart.get("reason") or ""),
            message=str(restart.get("message") or ""),
            nodes=_pod_nodes(pods, terminating=True),
            since=str(restart.get("lastTransitionTime") or "") or None,
            **common,
        )
    stuck = not_started(pods)
    if outlook is not None and outlook.known and outlook.nodes:  # admitted, pods on their way
        return Explanation(
            reason="",
            message=_admitted(stuck),
            nodes=dict(outlook.nodes),
            since=since,
            **common,
        )
    if outlook is None and queued is None and stuck:  # no live view: its pods say it was admitted
        return Explanation(reason="", message=_admitted(stuck), nodes=_pod_nodes(pods), **common)
    written = _WRITTEN.match(message)
    return Explanation(
        reason=reason,
        message=(written.group(3) if written else message) or "not admitted yet",
        position=int(written.group(2)) if written else None,
        written_place=written.group(1) if written else None,
        since=since,
        **common,
    )


def _torn_down_for(conditions: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The latest True ``Restarting`` or ``Preempted`` condition: why its gang is torn down."""
    kinds = (reasons.RESTARTING, reasons.PREEMPTED)
    found = [c for c in conditions if c.get("type") in kinds and c.get("status") == "True"]
    return found[-1] if found else None


def _tearing_down(pods: Sequence[Mapping[str, Any]], outlook: JobOutlook | None) -> bool:
    """Whether a restarting gang's old pods are still going (rule 2).

    Some terminate, or none is left while the controller holds no nodes for a new gang yet.
    """
    if any(_metadata(pod).get("deletionTimestamp") for pod in pods):
        return True
    return not pods and not (outlook is not None and outlook.known and outlook.nodes)


def _admitted(stuck: Sequence[str]) -> str:
    """An admitted job's message: its pods on their way, or those that have not started."""
    if not stuck:
        return "admitted: its pods are being created"
    shown = "; ".join(stuck[:MAX_NOT_STARTED])
    more = f"; and {len(stuck) - MAX_NOT_STARTED} more" if len(stuck) > MAX_NOT_STARTED else ""
    return f"admitted; not started: {shown}{more}"


def _rank(metadata: Mapping[str, Any]) -> tuple[int, int]:
    """A pod's place in rank order: Master, then Workers by index."""
    raw_labels = metadata.get("labels")
    labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
    role = str(labels.get(names.LABEL_REPLICA_TYPE) or "").lower()
    try:
        index = int(labels.get(names.LABEL_REPLICA_INDEX) or 0)
    except (TypeError, ValueError):
        index = 0
    return (0 if role == "master" else 1, index)


def _node_of(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


def _pod_nodes(pods: Sequence[Mapping[str, Any]], *, terminating: bool = False) -> dict[str, str]:
    """Pod -> node of the job's live pods (``terminating`` ones too), Master, then Workers."""
    found: list[tuple[tuple[int, int], str, str]] = []
    for pod in pods:
        metadata = _metadata(pod)
        node = _node_of(pod)
        if (metadata.get("deletionTimestamp") and not terminating) or not node:
            continue
        found.append((_rank(metadata), str(metadata.get("name")), node))
    return {name: node for _, name, node in sorted(found)}


# ------------------------------------------------------------------ rule 5


def not_started(pods: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Each live Pending pod, in rank order: ``<pod> on <node>: <why>`` (rule 5)."""
    found: list[tuple[tuple[int, int], str, str]] = []
    for pod in pods:
        metadata = _metadata(pod)
        status = pod.get("status")
        status = status if isinstance(status, Mapping) else {}
        if metadata.get("deletionTimestamp") or status.get("phase", "Pending") != "Pending":
            continue
        name, node = str(metadata.get("name")), _node_of(pod)
        text = f"{name} on {node}: {_waiting_for(status)}" if node else f"{name}: on no node yet"
        found.append((_rank(metadata), name, text))
    return tuple(text for _, _, text in sorted(found))


def _waiting_for(status: Mapping[str, Any]) -> str:
    """Why a bound pod has not started: its first waiting container's reason and message."""
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = status.get(key)
        for container in statuses if isinstance(statuses, list) else []:
            state = container.get("state") if isinstance(container, Mapping) else None
            waiting = state.get("waiting") if isinstance(state, Mapping) else None
            if isinstance(waiting, Mapping) and waiting.get("reason"):
                message = waiting.get("message")
                return f"{waiting['reason']} ({message})" if message else str(waiting["reason"])
    return "starting"


# ------------------------------------------------------------------ rule 4


def _ago(moment: str | None, now: datetime) -> str:
    if not moment:
        return ""
    then = moments.parse_time(moment)
    if then is None:
        return moment
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        span = f"{seconds}s"
    elif seconds < 7200:
        span = f"{seconds // 60}m"
    else:
        span = f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{moment} ({span} ago)"


def render(explanation: Explanation, now: datetime) -> list[str]:
    """The lines ``torchgate explain`` prints (rule 4)."""
    e = explanation
    reason = f" ({e.reason})" if e.reason else ""
    lines = [f"{names.KIND} {e.job}: {e.state}{reason}"]
    if e.message:
        lines.append(f"  {e.message}")
    if e.place is not None:
        lines.append(f"  queue:    {place_phrase(e.place)}")
    elif e.written_place is not None:
        lines.append(f"  queue:    {e.written_place} (as last written to its status)")
    if e.state == reasons.SUSPENDED and e.runs:
        namespace, _, name = e.job.partition("/")
        lines.append(f"  to resume: {RESUME.format(name=name, namespace=namespace)}")
    elif e.starts_next_cycle:
        lines.append("  to start: nothing; the next admission cycle admits it")
    elif e.preempting:
        lines.append(f"  to start: {named(list(e.preempting))} must terminate (preempted for it)")
    elif e.must_end:
        gangs = named([gang.phrase() for gang in e.must_end], limit=4)
        total = sum(gang.gpus for gang in e.must_end)
        gpus = f" ({gpus_phrase(total)} in all)" if len(e.must_end) > 1 else ""
        lines.append(f"  to start: {gangs} would have to end or be preempted{gpus}")
    elif e.ending_lets_start:
        gangs = named([gang.phrase() for gang in e.ending_lets_start], limit=4)
        lines.append(f"  to start: {gangs} {WITHIN_QUOTA}")
    elif e.state == "Waiting" and e.live and not e.placeable:
        lines.append(f"  to start: {CLEAR_NODES if e.starts_if_cleared else NO_NODE_ADMITS}")
    elif e.state == "Waiting" and e.live and e.starts_if_cleared:
        lines.append(f"  to start: {NO_END_CLEAR_NODES}")
    elif e.state == "Waiting" and e.live and e.place is not None:
        lines.append("  to start: no running job's end alone lets it start; it waits for its turn")
    if e.starts_if_cleared:
        back = named(list(e.starts_if_cleared), limit=8)
        lines.append(f"  clear:    {back} (out of use): clearing them would let it start")
    if e.nodes:
        pairs = [f"{node} ({pod})" for pod, node in e.nodes.items()]
        lines.append(f"  nodes:    {named(pairs, limit=8)}")
    if e.domains:
        lines.append(f"  domains:  {', '.join(e.domains)}")
    if e.since:
        label = {
            "Running": "running",
            "Finished": "finished",
            reasons.DELETING: "deleting",
            "Waiting": "waiting",
            reasons.SUSPENDED: "suspended",
        }[e.state]
        lines.append(f"  {label + ':':<9} since {_ago(e.since, now)}")
    if e.restarts or e.counted_restarts:
        lines.append(
            f"  restarts: {max(len(e.restarts), e.counted_restarts)} "
            f"({e.counted_restarts} counted against backoffLimit)"
        )
        for restart in e.restarts[-5:]:
            lines.append(f"    {restart.at} {restart.cause}: {restart.message}")
    for what, why in e.unread.items():
        lines.append(f"  (without its {what}: {why})")
    if e.unanswered:
        lines.append(f"  (live view unavailable: {e.unanswered})")
    return lines

"""Why a gang restarts when no program in it failed: its node was lost or tainted, a pod was taken.

A gang is torn down and placed again whole as soon as one member cannot go on, since a collective
cannot take one new rank back. When the member was taken by the infrastructure or by someone else,
the restart is not the job's failure: it must not spend ``backoffLimit``, and its cause and node
are named (the ``Restarting`` condition, an Event, the restarts metric), so an admin sees what
happened and a node's faults can be counted against it. ``find`` tells such a *disruption* from
the program's own end.

Each member of the current gang attempt, a pod as it is now or as it was last seen before it went
away, is judged by these rules in order; the first that applies is its disruption:

1. ``node_lost``: the member has not finished, and its node (bound, or planned before binding)
   was deleted, or its ``Ready`` condition has not been True for ``lost_after`` seconds. The
   node lifecycle controller turns ``Ready`` to ``Unknown`` only after its own node-monitor grace
   period without a heartbeat, so the bound comes on top of that. Until the bound: look again then.
   A node whose kubelet posts ``Ready=False`` because its graceful node shutdown began (the
   message ``node is shutting down``, ``NodeHealth.shutting_down``) is lost all the same, for
   the gang, but is no fault of the node (``Disruption.blames_node`` False), as rule 3's
   shutdown is not: with ``shutdownGracePeriodByPodPriority`` the kubelet marks a group's pods
   only once the lower groups' wait ran out, which may be longer than ``lost_after``, so a
   training gang of a high priority is judged by this rule before its kubelet marks it, one
   reboot at a time. Nor are its pods force-deleted (``until_force_deletion``): its kubelet is
   alive and stops them within their grace. Once it stops posting (the machine is down), the
   node lifecycle controller turns ``Ready`` to ``Unknown`` and the node is judged as any other.
2. ``node_tainted``: the member has not finished, and its node has a ``NoExecute`` taint the member
   does not tolerate, or tolerates for ``tolerationSeconds`` that have run out since the taint's
   ``timeAdded`` (what the taint-eviction controller evicts for, one pod at a time, which would
   leave a partial gang holding its GPUs). Until they run out: look again then.
3. ``pod_disrupted``: the member carries Kubernetes' ``DisruptionTarget`` condition (an eviction
   through the Eviction API, kube-scheduler's preemption, the taint-eviction controller, pod
   garbage collection, the kubelet's node-pressure eviction or shutdown) or was evicted by the
   kubelet, no later than its training container ended by itself; or its kubelet refused to
   start it because the node is shutting down (``Failed``, status reason ``NodeShutdown``: it
   was placed there just before the node's ``NotReady`` reached placement). That refusal is no
   failure of the program, which would spend ``backoffLimit`` (with ``0``, end the job), nor a
   fault of the node (a shutdown, below); the kubelet's other refusals stay the job's failures
   (a forbidden sysctl is refused on every node). An eviction someone asked for
   (``EvictionByEvictionAPI``: ``kubectl drain``, a descheduler, the cluster autoscaler) and
   kube-scheduler's preemption (``PreemptionByScheduler``) are no fault of the node
   (``Disruption.blames_node`` False): the gang restarts the same, but a drain for maintenance
   must not quarantine the node it empties, which it would as soon as the node held
   ``quarantine.faults`` gangs. Nor is a deletion by the taint-eviction controller
   (``DeletionByTaintManager``) the fault of a node that has no ``NoExecute`` taint: that
   controller deletes by name (kubernetes/kubernetes#140639), so it may take the next attempt's
   pod of the same name on a healthy node. Nor is the kubelet's graceful node shutdown
   (``TerminationByKubelet`` with its shutdown message on the condition, status reason
   ``Terminated`` once the pod is terminal; the kubelet's node-pressure eviction shares the
   condition reason but not these): systemd-logind told the kubelet the machine is going down
   because someone asked it to (an admin's or kured's reboot for a kernel or driver update, a
   cloud's maintenance or preemption notice), which says nothing of the node's health. Counted,
   one rolling reboot would quarantine every node holding ``quarantine.faults`` gangs, for an
   hour after it came back updated; a machine that crashes or loses power is not shut down
   gracefully and is judged by rule 1.
4. ``pod_deleted``: the member was deleted, or went away, no later than its training container
   ended by itself. torchgate deletes members of the current attempt only while moving the job to
   a new attempt (or ending or suspending it), so a deleted member was deleted by someone else.
   (When that someone is the namespace controller emptying the job's namespace, the job ends
   with it: ``plan`` rule 9 asks before such a restart.)
5. ``pod_stuck``: the member is bound to a node and still ``Pending`` ``stuck_after`` seconds
   after it was scheduled, with a container waiting to be created or pulled
   (``ContainerCreating``: no sandbox, no network from the CNI plugin, volumes not mounted;
   ``ErrImagePull``/``ImagePullBackOff``) or no container status at all. Its node failed to
   start it: the gang goes elsewhere. Until the bound: look again then. (``PodInitializing``
   and ``CreateContainerConfigError`` are the job's own: its init containers, its missing
   Secret.)

One rule then judges whose fault a stuck image pull is, once per gang restart:

6. ``blame_image_pull``: a stuck disruption whose members wait to pull an image
   (``ErrImagePull``/``ImagePullBackOff``) is the node's the first time in the job's life (a
   ``PodStuck`` fault of that node, ``backoffLimit`` not spent) and the job's every later time,
   on whatever node: cause ``ImagePullFailed``, counted against ``backoffLimit``, no fault of the
   node. The job remembers its first one in the annotation ``torchgate.io/image-pull-stuck`` (the
   node's name), written with the restart it caused. An image that exists nowhere (a typo, a
   private registry without a pull secret) fails the same way on every node; without this rule
   each attempt would restart uncounted for ever and add a fault to one more node until the pool
   were quarantined. With it a job adds at most one image-pull fault to one node, and restarts at
   most ``backoffLimit + 1`` times on image pulls. A later attempt on the *same* node is the job's
   too: counting it against the node again would let one job quarantine a node alone (and,
   with ``faults: 0``, restart for ever). A node whose registry mirror or disk is really broken
   still gets every other job's first fault, which is what quarantines it.

``NODE_FAULTS`` are the causes that count against the node they happened on for quarantine
(``controller.quarantine``): a lost node, a health taint, an eviction by Kubernetes, a stuck pod.
A deletion by someone is not the node's fault, nor is ``ImagePullFailed`` (rule 6), nor an
eviction someone asked for, nor a graceful node shutdown (rule 3).
``COUNTED`` are the causes that spend ``backoffLimit``: the program's own failure, a hang, an
image the job's pods could not pull a second time.

A member that finished, or whose training container ended by itself before it was disrupted (an
exit code first, an eviction after), is not disrupted: its end is the program's, which the
failure rules of ``gang`` judge, unless its node failed with it (rule 8). ``find`` returns the
gang's most severe disruption (rule order), with its node and the members it hit, so one lost
node is one cause however many ranks it held.

One rule then says which other nodes took part:

7. ``other_node_faults``: every other node that took members of the gang in the same look through
   a node fault (``NODE_FAULTS``) is named in the disruption, each with its own most severe cause,
   and charged a fault like the first (``Disruption.other_nodes``). A rack that loses power or
   a switch loses several nodes at once; naming only one would hide the others from the admin
   and from quarantine. A stuck image pull charges no other node (rule 6: a job adds at most one
   image-pull fault to one node). So is every other node whose rule 1 or 2 applies within
   ``failure_window`` seconds of this look (``soon_lost``: not Ready for ``lost_after`` minus
   the window, a toleration running out by then), charged as lost or tainted: a rack's nodes
   turn NotReady a few seconds apart (their kubelets' leases are staggered), a health taint
   tolerated for a while runs out on each node a few seconds apart, and the restart off the
   first moves the gang off the others too, so no later look of the gang would charge them (a
   node that kept taking gangs down with another would never be quarantined). A node whose
   rule applies only later is another failure's, not charged by this restart.

One rule then judges a failure its node's fault showed up with:

8. ``failed_with_its_node``: a member whose training container failed (the pod ``Failed``) at
   ``t`` on a node that shows a node fault of rules 1-2 (deleted, lost, an untolerated
   ``NoExecute`` taint) which began no later than ``t + failure_window`` seconds is taken by that
   fault (``NodeLost``/``NodeTainted``, its node charged, ``backoffLimit`` not spent), whatever
   its exit code and restart policy. A GPU that fails (an Xid) kills the program first, with a
   CUDA error and exit code 1, and the node's health checker taints the node a second or so
   later: judged at the first look, the crash would spend the job's ``backoffLimit`` (under
   ``ExitCode`` end it for good) and the node would not be charged. So until ``t +
   failure_window`` the member is *awaited* (``Finding.awaiting``): ``gang`` judges no failure
   of the gang, and a timer looks again then; after it, with no such fault, the failure is the
   program's, judged as before, that much later at most (an ``ExitCode`` permanent failure ends
   the job at most ``failure_window`` later). A fault that began in time is then judged as rules
   1-2 judge a running member, waiting for their bounds (a node not Ready for ``lost_after``
   seconds, a toleration running out). A signal the cluster records no time of (a deleted
   node, a taint without ``timeAdded``) counts from the look that sees it; a node not listed,
   a member without a finish time, and ``failure_window`` 0 leave the failure to ``gang`` at
   once.

One rule then names the outage a node fault came from, for quarantine:

9. ``outage_of``: a node fault of rules 1-2 names the outage it came from (``quarantine.rules``
   rule 6 counts the faults of one outage once, however many gangs it took down): a lost node
   its NotReady spell (its ``Ready`` condition's ``lastTransitionTime``; an ``Unknown`` spell
   that continues one the node records, ``quarantine.rules`` rule 7, that one: ``spell_of``), a
   deleted node its deletion, an untolerated ``NoExecute`` taint its key and ``timeAdded``
   (none, as ``kubectl taint`` writes: the first look of this controller that saw the taint,
   which the shell remembers, ``taints_seen``; at this controller's first look at the node,
   after a restart or a leader failover, the latest outage of that key the node records of
   itself, ``quarantine.rules`` rule 7, so that the gangs one taint takes down before and after
   a restart are one fault, not two). A failure rule 8 gives to its node's fault names that
   fault's outage (an Xid whose health taint takes three gangs down is one fault), and so do
   the other nodes of rule 7. Rules 3-5 name none: a member evicted, disrupted or stuck on a
   node that looks healthy is a fault of its gang alone (three gangs stuck or evicted on one
   node are three pieces of evidence that it is flaky).

``spell_of`` says when an ``Unknown`` spell began, for rule 9: a kubelet that posts
``Ready=False`` itself and then stops posting is turned ``Unknown`` by the node lifecycle
controller (reason ``NodeStatusUnknown``) with a new ``lastTransitionTime``, one NotReady spell
with two dates; gangs judged on either side of that change (a backlog of looks when a rack
fails, a controller restart in between) would name two outages. That controller keeps the
kubelet's ``lastHeartbeatTime``, and a kubelet that came back in between would have posted a
later one, so an ``Unknown`` spell whose last heartbeat is no later than a ``NotReady`` fault the
node records continues that fault's outage (the earliest such outage: they are one spell).

``until_lost`` says when a node counts as lost, for the force deletion of its pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Final

from torchgate.controller.job import status as st
from torchgate.controller.quarantine.rules import DELETED, NOT_READY, Fault, Outage
from torchgate.pytorchjob import moments, names
from torchgate.pytorchjob.conditions import conditions_of
from torchgate.pytorchjob.reasons import (
    CONTAINER_FAILED,
    HANG,
    IMAGE_PULL_FAILED,
    NODE_LOST,
    NODE_TAINTED,
    POD_DELETED,
    POD_DISRUPTED,
    POD_STUCK,
    Cause,
)
from torchgate.pytorchjob.spec import as_list, as_mapping, as_text, pytorch_container_name
from torchgate.pytorchjob.taints import Taint, Toleration, tolerations_of

SEVERITY: Final[tuple[Cause, ...]] = (
    NODE_LOST,
    NODE_TAINTED,
    POD_DISRUPTED,
    POD_DELETED,
    POD_STUCK,
)
NODE_FAULTS: Final[frozenset[Cause]] = frozenset(
    {NODE_LOST, NODE_TAINTED, POD_DISRUPTED, POD_STUCK}
)
COUNTED: Final[frozenset[Cause]] = frozenset({CONTAINER_FAILED, HANG, IMAGE_PULL_FAILED})

DEFAULT_LOST_AFTER_SECONDS: Final = 30.0
DEFAULT_STUCK_AFTER_SECONDS: Final = 600.0
DEFAULT_FAILURE_WINDOW_SECONDS: Final = 5.0
# Waiting reasons of a container its node could not create or pull (rule 5).
IMAGE_PULL_REASONS: Final = frozenset({"ErrImagePull", "ImagePullBackOff"})
STUCK_REASONS: Final = frozenset({"ContainerCreating"}) | IMAGE_PULL_REASONS
DISRUPTION_TARGET: Final = "DisruptionTarget"
# DisruptionTarget reasons of a disruption someone decided on, no fault of the node (rule 3).
ASKED_FOR: Final = frozenset({"EvictionByEvictionAPI", "PreemptionByScheduler"})
# The taint-eviction controller's DisruptionTarget reason: the node's fault only if tainted.
BY_TAINT: Final = "DeletionByTaintManager"
# The kubelet's DisruptionTarget reason: a node-pressure eviction or a graceful node shutdown.
BY_KUBELET: Final = "TerminationByKubelet"
# What the kubelet's node shutdown manager writes on a pod it terminates (rule 3): the message
# on the condition at once, the reason on the pod's status once it is terminal
# (pkg/kubelet/nodeshutdown ``nodeShutdownMessage``, ``nodeShutdownReason``).
NODE_SHUTDOWN_MESSAGE: Final = "Pod was terminated in response to imminent node shutdown."
NODE_SHUTDOWN_REASON: Final = "Terminated"
# The status reason of a pod the kubelet refused to start while its node shuts down (rule 3;
# ``nodeShutdownNotAdmittedReason``).
NODE_SHUTDOWN_REFUSED: Final = "NodeShutdown"
# What the kubelet's node shutdown manager adds to the node's ``Ready=False`` message while its
# graceful shutdown runs (rule 1; pkg/kubelet/nodeshutdown ``ShutdownStatus``, joined with the
# kubelet's other readiness errors when it has any).
NODE_SHUTTING_DOWN: Final = "node is shutting down"
# The ``Ready`` status the node lifecycle controller sets when the kubelet stops posting.
UNKNOWN: Final = "Unknown"
_FINISHED: Final = frozenset({"Succeeded", "Failed"})


# ------------------------------------------------------------------ what is judged


@dataclass(frozen=True, slots=True)
class TimedTaint:
    """A ``NoExecute`` taint, when it was added (``None``: unknown) and first seen.

    ``seen`` is the first look of this controller that saw a taint without ``timeAdded`` (the
    shell remembers it, ``taints_seen``): only what names its outage (rule 9) reads it.
    """

    taint: Taint
    added: datetime | None = None
    seen: datetime | None = None


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What the rules know of one node.

    Attributes:
        name: The node.
        exists: False when the node is gone from the cluster (deleted).
        ready: Its ``Ready`` condition's status (``""`` when it has none: not judged).
        ready_since: When that status began (``lastTransitionTime``).
        no_execute: Its ``NoExecute`` taints.
        shutting_down: Its kubelet posts ``Ready=False`` because its graceful node shutdown
            began (rule 1).
        heartbeat: While ``ready`` is ``Unknown``, the kubelet's last heartbeat, which the node
            lifecycle controller keeps (``lastHeartbeatTime``; ``spell_of``), else ``None``.
        spell_began: When the NotReady spell an ``Unknown`` one continues began (``spell_of``;
            ``None``: at ``ready_since``). Only what names its outage (rule 9) reads it.
    """

    name: str
    exists: bool = True
    ready: str = st.TRUE
    ready_since: datetime | None = None
    no_execute: tuple[TimedTaint, ...] = ()
    shutting_down: bool = False
    heartbeat: datetime | None = None
    spell_began: datetime | None = None


def deleted_node(name: str) -> NodeHealth:
    """A node the cluster no longer has."""
    return NodeHealth(name=name, exists=False)


def node_health(raw: Mapping[str, Any]) -> NodeHealth:
    """A ``NodeHealth`` from a raw Node (its name, ``Ready`` condition and ``NoExecute`` taints)."""
    metadata = as_mapping(raw.get("metadata"))
    spec = as_mapping(raw.get("spec"))
    ready = next(
        (
            c
            for c in conditions_of(raw.get("status"))
            if c.get("type") == "Ready" and isinstance(c.get("status"), str)
        ),
        None,
    )
    taints = tuple(
        TimedTaint(
            Taint(as_text(t.get("key")), as_text(t.get("value")), "NoExecute"),
            moments.parse_time(t.get("timeAdded")),
        )
        for t in as_list(spec.get("taints"))
        if isinstance(t, Mapping) and t.get("effect") == "NoExecute"
    )
    return NodeHealth(
        name=as_text(metadata.get("name")),
        ready=str(ready.get("status")) if ready is not None else "",
        ready_since=None if ready is None else moments.parse_time(ready.get("lastTransitionTime")),
        no_execute=taints,
        shutting_down=ready is not None
        and ready.get("status") == st.FALSE
        and NODE_SHUTTING_DOWN in as_text(ready.get("message")),
        heartbeat=moments.parse_time(ready.get("lastHeartbeatTime"))
        if ready is not None and ready.get("status") == UNKNOWN
        else None,
    )


@dataclass(frozen=True, slots=True)
class NodeFault:
    """A node that took members of a gang, how (a cause of ``NODE_FAULTS``), in which outage.

    ``outage`` (rule 9; ``None``: a fault of its own) says which faults of the node quarantine
    counts once; equal faults are equal by node and cause.
    """

    node: str
    cause: Cause
    outage: Outage | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Disruption:
    """What took a gang's members: the cause, the node, the members, in words.

    ``detail`` completes "the gang restarts because ...", naming the node and the cause (and
    those of ``other_nodes``); ``image_pull`` marks a stuck member waiting to pull an image (rule
    6 judges whose fault); ``other_nodes`` are the other nodes that took members (rule 7);
    ``blames_node`` is False for an eviction someone asked for (rule 3): no fault of the node;
    ``outage`` is the spell of the node's trouble it came from (rule 9), not compared.
    """

    cause: Cause
    node: str | None
    pods: tuple[str, ...]
    detail: str
    image_pull: bool = False
    other_nodes: tuple[NodeFault, ...] = ()
    blames_node: bool = True
    outage: Outage | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Finding:
    """A judgement: the disruption, if any, and when a rule that does not apply yet may apply.

    ``awaiting`` names the failed members whose failure is not judged before ``recheck_after``
    (rule 8: their node may still show the fault that failed them).
    """

    disruption: Disruption | None = None
    recheck_after: float | None = None
    awaiting: tuple[str, ...] = ()


NONE: Final = Finding()


# ------------------------------------------------------------------ reading pods


def pod_name(pod: Mapping[str, Any]) -> str:
    """``metadata.name`` of a pod."""
    return as_text(as_mapping(pod.get("metadata")).get("name"))


def node_of(pod: Mapping[str, Any]) -> str | None:
    """The node a pod is bound to, or the one torchgate planned for it before binding."""
    bound = as_mapping(pod.get("spec")).get("nodeName")
    if isinstance(bound, str) and bound:
        return bound
    planned = as_mapping(as_mapping(pod.get("metadata")).get("annotations")).get(
        names.ANNOTATION_PLANNED_NODE
    )
    return planned if isinstance(planned, str) and planned else None


def _ended_by_itself_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the training container terminated (``finishedAt``), if it did."""
    training = pytorch_container_name(as_mapping(pod.get("spec"))) or names.CONTAINER_NAME
    for container in as_list(as_mapping(pod.get("status")).get("containerStatuses")):
        if isinstance(container, Mapping) and container.get("name") == training:
            terminated = as_mapping(as_mapping(container.get("state")).get("terminated"))
            return moments.parse_time(terminated.get("finishedAt"))
    return None


def _ended_before(pod: Mapping[str, Any], moment: datetime | None) -> bool:
    """Whether the training container ended by itself before ``moment`` (whole seconds)."""
    ended = _ended_by_itself_at(pod)
    return ended is not None and moment is not None and ended < moment


def _deletion_requested_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's deletion was asked for: ``deletionTimestamp`` minus its grace period."""
    metadata = as_mapping(pod.get("metadata"))
    deadline = moments.parse_time(metadata.get("deletionTimestamp"))
    grace = metadata.get("deletionGracePeriodSeconds")
    if deadline is None or not isinstance(grace, int) or isinstance(grace, bool):
        return deadline
    try:
        return deadline - timedelta(seconds=grace)
    except OverflowError:  # an int64 grace period: asked before (or after) any datetime
        return (datetime.min if grace > 0 else datetime.max).replace(tzinfo=deadline.tzinfo)


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.0f}s"


# ------------------------------------------------------------------ the rules, one member each


def node_lost(
    pod: Mapping[str, Any], node: NodeHealth, *, now: datetime, lost_after: float
) -> Finding:
    """Rule 1: the member's node was deleted, or not Ready for ``lost_after`` seconds."""
    if st.phase_of(pod) in _FINISHED:
        return NONE
    return _lost(pod, node, now=now, lost_after=lost_after)


def _lost(pod: Mapping[str, Any], node: NodeHealth, *, now: datetime, lost_after: float) -> Finding:
    remaining = until_lost(node, now=now, lost_after=lost_after)
    if remaining is None:
        return NONE
    if remaining > 0:
        return Finding(recheck_after=remaining)
    outage = outage_of(node)
    if not node.exists:
        return _found(NODE_LOST, node.name, pod, f"node {node.name} was deleted", outage)
    for_how_long = _seconds((now - (node.ready_since or now)).total_seconds())
    if node.shutting_down:
        detail = f"node {node.name} is shutting down (Ready {node.ready} for {for_how_long})"
        lost = Disruption(NODE_LOST, node.name, (pod_name(pod),), detail, blames_node=False)
        return Finding(replace(lost, outage=outage))
    detail = f"node {node.name} is lost (Ready {node.ready} for {for_how_long})"
    return _found(NODE_LOST, node.name, pod, detail, outage)


def node_tainted(pod: Mapping[str, Any], node: NodeHealth, *, now: datetime) -> Finding:
    """Rule 2: a ``NoExecute`` taint of the member's node it does not tolerate (any longer)."""
    if st.phase_of(pod) in _FINISHED:
        return NONE
    return _tainted(pod, node, now=now)


def _tainted(pod: Mapping[str, Any], node: NodeHealth, *, now: datetime) -> Finding:
    if not node.no_execute:
        return NONE
    tolerations = tolerations_of(as_mapping(pod.get("spec")))
    recheck: float | None = None
    for timed in node.no_execute:
        matching = [t for t in tolerations if t.tolerates(timed.taint)]
        left = _toleration_left(matching, timed, now)
        if left is None:
            continue
        if left <= 0:
            why = "does not tolerate" if not matching else "tolerated only for a while"
            detail = f"node {node.name} has the taint {timed.taint}, which {pod_name(pod)} {why}"
            return _found(NODE_TAINTED, node.name, pod, detail, outage_of(node, timed))
        recheck = left if recheck is None else min(recheck, left)
    return Finding(recheck_after=recheck)


def _toleration_left(
    matching: Sequence[Toleration], timed: TimedTaint, now: datetime
) -> float | None:
    """Seconds until the taint evicts (``<= 0``: now), ``None`` when it never does.

    As the taint-eviction controller counts: no matching toleration evicts at once; one without
    ``tolerationSeconds`` tolerates for ever; else the shortest one counts, from ``timeAdded``
    (unknown: the taint-eviction controller's own eviction will show instead, rule 3).
    """
    if not matching:
        return 0.0
    seconds = [t.seconds for t in matching]
    if any(s is None for s in seconds):
        return None
    shortest = min(s for s in seconds if s is not None)
    if shortest <= 0:
        return 0.0
    if timed.added is None:
        return None
    return st.seconds_left(timed.added, shortest, now=now)


def pod_disrupted(
    pod: Mapping[str, Any], node: str | None, health: NodeHealth | None = None
) -> Finding:
    """Rule 3: Kubernetes marked the member ``DisruptionTarget``, or the kubelet evicted it.

    ``health`` is the member's node, when known (a taint eviction blames only a tainted node).
    """
    if st.phase_of(pod) == "Succeeded":
        return NONE
    condition = next(
        (
            c
            for c in conditions_of(pod.get("status"))
            if c.get("type") == DISRUPTION_TARGET and c.get("status") == st.TRUE
        ),
        None,
    )
    if condition is not None:
        if _ended_before(pod, moments.parse_time(condition.get("lastTransitionTime"))):
            return NONE
        reason = as_text(condition.get("reason"))
        why = ": ".join(part for part in (reason, as_text(condition.get("message"))) if part)
        detail = _where(pod, node, f"was disrupted ({why})")
        by_stale_taint = (
            reason == BY_TAINT and health is not None and health.exists and not health.no_execute
        )
        blames_node = (
            reason not in ASKED_FOR and not by_stale_taint and not _by_node_shutdown(pod, condition)
        )
        return Finding(
            Disruption(POD_DISRUPTED, node, (pod_name(pod),), detail, blames_node=blames_node)
        )
    status = as_mapping(pod.get("status"))
    if as_text(status.get("reason")) == "Evicted":
        return _found(POD_DISRUPTED, node, pod, _where(pod, node, "was evicted by its kubelet"))
    if st.phase_of(pod) == "Failed" and status.get("reason") == NODE_SHUTDOWN_REFUSED:
        why = ": ".join(p for p in (NODE_SHUTDOWN_REFUSED, as_text(status.get("message"))) if p)
        detail = _where(pod, node, f"was refused by its kubelet ({why})")
        return Finding(Disruption(POD_DISRUPTED, node, (pod_name(pod),), detail, blames_node=False))
    return NONE


def _by_node_shutdown(pod: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    """Whether the kubelet terminated the member for a graceful shutdown of its node (rule 3)."""
    if condition.get("reason") != BY_KUBELET:
        return False
    terminal_reason = as_mapping(pod.get("status")).get("reason")
    return (
        condition.get("message") == NODE_SHUTDOWN_MESSAGE or terminal_reason == NODE_SHUTDOWN_REASON
    )


def pod_deleted(pod: Mapping[str, Any], node: str | None, *, gone: bool) -> Finding:
    """Rule 4: someone deleted the member (``gone``: it went away) before it ended by itself."""
    if st.phase_of(pod) == "Succeeded":
        return NONE
    requested = _deletion_requested_at(pod)
    if requested is None and not gone:
        return NONE
    if requested is None and st.phase_of(pod) == "Failed":
        return NONE  # it failed, then went away: its end is the program's
    if _ended_before(pod, requested):
        return NONE
    return _found(POD_DELETED, node, pod, _where(pod, node, "was deleted"))


def pod_stuck(
    pod: Mapping[str, Any], node: str | None, *, now: datetime, stuck_after: float
) -> Finding:
    """Rule 5: bound and still waiting for its containers ``stuck_after`` s after scheduling."""
    spec = as_mapping(pod.get("spec"))
    if st.phase_of(pod) != "Pending" or not spec.get("nodeName") or st.is_terminating(pod):
        return NONE
    waiting = _waiting_reasons(pod)
    if waiting is not None and not waiting & STUCK_REASONS:
        return NONE
    scheduled = next(
        (
            moments.parse_time(c.get("lastTransitionTime"))
            for c in conditions_of(pod.get("status"))
            if c.get("type") == "PodScheduled" and c.get("status") == st.TRUE
        ),
        None,
    ) or moments.parse_time(as_mapping(pod.get("metadata")).get("creationTimestamp"))
    since = scheduled or now
    left = st.seconds_left(since, stuck_after, now=now)
    if left > 0:
        return Finding(recheck_after=left)
    what = ", ".join(sorted(waiting)) if waiting else "no container status"
    detail = _where(pod, node, f"did not start within {_seconds(stuck_after)} ({what})")
    pulling = bool(waiting and waiting & IMAGE_PULL_REASONS)
    return Finding(Disruption(POD_STUCK, node, (pod_name(pod),), detail, image_pull=pulling))


def failed_with_its_node(
    pod: Mapping[str, Any],
    node: NodeHealth,
    *,
    now: datetime,
    lost_after: float,
    failure_window: float,
) -> Finding:
    """Rule 8: a failed member whose node shows, by ``failure_window`` s after, a node fault."""
    failed_at = _ended_by_itself_at(pod)
    if failure_window <= 0 or st.phase_of(pod) != "Failed" or failed_at is None:
        return NONE
    window_left = st.seconds_left(failed_at, failure_window, now=now)
    in_time = _faults_begun_by(node, failed_at, failure_window, now=now)
    judged = (_lost(pod, in_time, now=now, lost_after=lost_after), _tainted(pod, in_time, now=now))
    for finding in judged:
        if finding.disruption is not None:
            when = _seconds((now - failed_at).total_seconds())
            detail = f"{finding.disruption.detail}, where {pod_name(pod)} failed {when} ago"
            return Finding(replace(finding.disruption, detail=detail))
    waits = [f.recheck_after for f in judged if f.recheck_after is not None]
    if window_left > 0:
        waits.append(window_left)
    if not waits:
        return NONE
    return Finding(recheck_after=min(waits), awaiting=(pod_name(pod),))


def _faults_begun_by(
    node: NodeHealth, failed_at: datetime, window: float, *, now: datetime
) -> NodeHealth:
    """``node`` with only the faults that began by ``window`` s after ``failed_at``.

    A fault of unknown time began ``now``. Counted in seconds, never as a datetime (a
    ``finishedAt`` near the year 9999 would overflow).
    """

    def in_time(began: datetime | None) -> bool:
        return ((began or now) - failed_at).total_seconds() <= window

    if not node.exists:
        return node if in_time(None) else NodeHealth(node.name)
    return replace(
        node,
        ready=node.ready if in_time(node.ready_since) else st.TRUE,
        no_execute=tuple(t for t in node.no_execute if in_time(t.added)),
    )


def _waiting_reasons(pod: Mapping[str, Any]) -> set[str] | None:
    """Why its containers wait (``None``: the kubelet reported none of them yet)."""
    statuses = [
        c
        for c in as_list(as_mapping(pod.get("status")).get("containerStatuses"))
        if isinstance(c, Mapping)
    ]
    if not statuses:
        return None
    return {
        as_text(as_mapping(as_mapping(c.get("state")).get("waiting")).get("reason"))
        for c in statuses
    } - {""}


def _where(pod: Mapping[str, Any], node: str | None, what: str) -> str:
    on = f" on {node}" if node else ""
    return f"pod {pod_name(pod)}{on} {what}"


def _found(
    cause: Cause,
    node: str | None,
    pod: Mapping[str, Any],
    detail: str,
    outage: Outage | None = None,
) -> Finding:
    return Finding(Disruption(cause, node, (pod_name(pod),), detail, outage=outage))


def outage_of(node: NodeHealth, taint: TimedTaint | None = None) -> Outage:
    """Rule 9: the outage a node fault of rules 1-2 (by ``taint``: rule 2) came from."""
    if taint is not None:
        return Outage(taint.taint.key, taint.added or taint.seen)
    if not node.exists:
        return Outage(DELETED)
    return Outage(NOT_READY, node.spell_began or node.ready_since)


def spell_of(node: NodeHealth, recorded: Iterable[Fault]) -> NodeHealth:
    """``node`` with an ``Unknown`` spell dated by the NotReady outage it continues (rule 9).

    That outage is the earliest one of the ``recorded`` ``NotReady`` faults of the node charged
    no earlier than its kubelet's last heartbeat, and begun no later than this spell; none:
    ``node`` as it is.
    """
    if node.heartbeat is None or node.ready_since is None:
        return node
    heartbeat, since = node.heartbeat, node.ready_since
    continued = [
        f.outage.began
        for f in recorded
        if f.outage is not None
        and f.outage.signal == NOT_READY
        and f.outage.began is not None
        and f.outage.began <= since
        and f.at >= heartbeat
    ]
    return replace(node, spell_began=min(continued)) if continued else node


def taints_seen(
    node: NodeHealth,
    seen: Mapping[Taint, datetime] | None,
    *,
    now: datetime,
    recorded: Iterable[Outage] = (),
) -> NodeHealth:
    """``node`` with each taint lacking ``timeAdded`` dated by ``seen[taint]``, else ``now``.

    ``seen`` is ``None`` at this controller's first look at the node: a taint not seen is then
    dated by the latest outage of its key among those the node ``recorded`` (rule 9), if any
    began by ``now``. A taint that comes back while this controller looks is a new outage.
    """
    earlier: dict[str, datetime] = {}
    for outage in recorded if seen is None else ():
        if outage.signal in (NOT_READY, DELETED) or outage.began is None or outage.began > now:
            continue
        earlier[outage.signal] = max(outage.began, earlier.get(outage.signal, outage.began))
    first = seen or {}
    return replace(
        node,
        no_execute=tuple(
            t
            if t.added is not None
            else replace(t, seen=first.get(t.taint) or earlier.get(t.taint.key, now))
            for t in node.no_execute
        ),
    )


# ------------------------------------------------------------------ the gang


def judge(
    pod: Mapping[str, Any],
    *,
    gone: bool,
    nodes: Mapping[str, NodeHealth],
    now: datetime,
    lost_after: float,
    stuck_after: float = DEFAULT_STUCK_AFTER_SECONDS,
    failure_window: float = DEFAULT_FAILURE_WINDOW_SECONDS,
) -> Finding:
    """The first rule that applies to one member (``gone``: its last state, before it went)."""
    name = node_of(pod)
    health = nodes.get(name) if name is not None else None
    recheck: list[float] = []
    judged: list[Finding] = []
    if health is not None:
        judged.append(node_lost(pod, health, now=now, lost_after=lost_after))
        judged.append(node_tainted(pod, health, now=now))
    judged.append(pod_disrupted(pod, name, health))
    judged.append(pod_deleted(pod, name, gone=gone))
    if not gone:
        judged.append(pod_stuck(pod, name, now=now, stuck_after=stuck_after))
    if health is not None:
        judged.append(
            failed_with_its_node(
                pod, health, now=now, lost_after=lost_after, failure_window=failure_window
            )
        )
    for finding in judged:
        if finding.disruption is not None:
            return finding
        if finding.recheck_after is not None:
            recheck.append(finding.recheck_after)
    awaiting = tuple(name for finding in judged for name in finding.awaiting)
    return Finding(recheck_after=min(recheck) if recheck else None, awaiting=awaiting)


def find(
    present: Iterable[Mapping[str, Any]],
    departed: Iterable[Mapping[str, Any]] = (),
    *,
    nodes: Mapping[str, NodeHealth],
    now: datetime,
    lost_after: float = DEFAULT_LOST_AFTER_SECONDS,
    stuck_after: float = DEFAULT_STUCK_AFTER_SECONDS,
    failure_window: float = DEFAULT_FAILURE_WINDOW_SECONDS,
) -> Finding:
    """The gang's disruption: the most severe of its members', with every member it hit.

    Args:
        present: The members of the current attempt as they are now.
        departed: The last states of members of the current attempt that went away.
        nodes: The nodes the members are (or were) on; a node not listed is not judged.
        now: The clock.
        lost_after: Seconds a node may stay not Ready before it counts as lost (rule 1).
        stuck_after: Seconds a bound pod may wait for its containers (rule 5).
        failure_window: Seconds after a member failed within which its node's fault takes
            it (rule 8); 0: a failure is the program's at once.
    """
    members = [(pod, gone) for pods, gone in ((present, False), (departed, True)) for pod in pods]
    findings = [
        judge(
            pod,
            gone=gone,
            nodes=nodes,
            now=now,
            lost_after=lost_after,
            stuck_after=stuck_after,
            failure_window=failure_window,
        )
        for pod, gone in members
    ]
    hits = [f.disruption for f in findings if f.disruption is not None]
    if not hits:
        waits = [f.recheck_after for f in findings if f.recheck_after is not None]
        awaiting = tuple(name for f in findings for name in f.awaiting)
        return Finding(recheck_after=min(waits) if waits else None, awaiting=awaiting)
    worst = _on_one_node(hits, min(hits, key=_severity))
    soon = [
        soon_lost(pod, nodes=nodes, now=now, lost_after=lost_after, failure_window=failure_window)
        for (pod, _), finding in zip(members, findings, strict=True)
        if finding.disruption is None
    ]
    others = other_node_faults([*hits, *(d for d in soon if d is not None)], first=worst)
    detail = " and ".join((worst.detail, *(o.detail for o in others)))
    return Finding(
        replace(
            worst,
            detail=detail,
            other_nodes=tuple(
                NodeFault(o.node, o.cause, o.outage) for o in others if o.node is not None
            ),
        )
    )


def soon_lost(
    pod: Mapping[str, Any],
    *,
    nodes: Mapping[str, NodeHealth],
    now: datetime,
    lost_after: float,
    failure_window: float,
) -> Disruption | None:
    """Rule 7: the member's node fault of rules 1-2 that applies within ``failure_window`` s."""
    name = node_of(pod)
    health = nodes.get(name) if name is not None else None
    if health is None or failure_window <= 0:
        return None
    judged = (
        node_lost(pod, health, now=now, lost_after=max(0.0, lost_after - failure_window)),
        node_tainted(pod, health, now=now + timedelta(seconds=failure_window)),
    )
    return next((f.disruption for f in judged if f.disruption is not None), None)


def _severity(disruption: Disruption) -> int:
    return SEVERITY.index(disruption.cause)


def _on_one_node(hits: Sequence[Disruption], worst: Disruption) -> Disruption:
    """``worst`` with every member its cause hit on its node (named when the node took them)."""
    same = [d for d in hits if (d.cause, d.node) == (worst.cause, worst.node)]
    members = tuple(sorted({pod for d in same for pod in d.pods}))
    detail = worst.detail
    if worst.cause in (NODE_LOST, NODE_TAINTED):
        detail += f" ({_members(members)})"
    image_pull = any(d.image_pull for d in same)
    blames_node = any(d.blames_node for d in same)
    return Disruption(
        worst.cause,
        worst.node,
        members,
        detail,
        image_pull=image_pull,
        blames_node=blames_node,
        outage=worst.outage,
    )


def other_node_faults(hits: Sequence[Disruption], *, first: Disruption) -> list[Disruption]:
    """Rule 7: each other node's most severe node fault among ``hits``, by node name.

    A stuck image pull charges no other node (rule 6), nor does an eviction someone asked for
    (rule 3).
    """
    by_node: dict[str, Disruption] = {}
    for hit in sorted(hits, key=_severity):
        if (
            hit.node is not None
            and hit.node != first.node
            and hit.cause in NODE_FAULTS
            and hit.blames_node
            and not hit.image_pull
        ):
            by_node.setdefault(hit.node, hit)
    return [_on_one_node(hits, by_node[node]) for node in sorted(by_node)]


def blame_image_pull(disruption: Disruption, *, stuck_before_on: str | None) -> Disruption:
    """Rule 6: a stuck image pull is the node's the job's first time, the job's every later one.

    ``stuck_before_on`` is the node of the job's first stuck image pull (its
    ``torchgate.io/image-pull-stuck`` annotation), ``None`` when it has had none.
    """
    if not disruption.image_pull or stuck_before_on is None:
        return disruption
    first = stuck_before_on or "a node"
    detail = (
        f"{disruption.detail}, and an earlier attempt could not pull its image either (on "
        f"{first}): the image is the job's fault, not the node's"
    )
    return replace(disruption, cause=IMAGE_PULL_FAILED, detail=detail)


def _members(pods: Sequence[str]) -> str:
    return f"pod{'s' if len(pods) > 1 else ''} {', '.join(pods)}"


def until_lost(node: NodeHealth | None, *, now: datetime, lost_after: float) -> float | None:
    """Seconds until a node counts as lost by rule 1 (0: it does), ``None``: Ready or unjudged."""
    if node is None or (node.exists and node.ready in ("", st.TRUE)):
        return None
    if not node.exists:
        return 0.0
    since = node.ready_since or now
    return max(0.0, st.seconds_left(since, lost_after, now=now))


def until_force_deletion(
    node: NodeHealth | None, *, now: datetime, lost_after: float
) -> float | None:
    """Seconds until pods going away on ``node`` are force-deleted (0: now), ``None``: never.

    Pods going away on a lost node are force-deleted, not awaited: no kubelet there will confirm a
    graceful deletion, so the pod would keep its name (and the gang its place) until the node came
    back. A rank of it that still runs cannot join the new attempt (``pytorchjob.contract``'s
    fence), and the node's kubelet kills it if it returns. A node shutting down (rule 1) is lost
    but its kubelet is alive, stopping its pods within their grace period (a checkpoint written
    on ``SIGTERM``): they are awaited, until its kubelet stops posting and the node turns
    ``Unknown``.
    """
    if node is not None and node.exists and node.shutting_down:
        return None
    return until_lost(node, now=now, lost_after=lost_after)

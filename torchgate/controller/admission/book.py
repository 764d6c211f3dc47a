"""The admitter's books: what is waiting, reserved, held and evicted, and what that leaves free.

Why a module of its own: the admission cycle (``admitter.py``) decides through ``sharing.decide``
and applies the outcomes; everything it decides *from* is bookkeeping kept between cycles, fed by
the informers and by the reconcilers' requests. Keeping that here lets the cycle read as "gather
facts, decide, apply" and keeps each half under the module size limit.

The rules this module owns:

- **Waiting**: a job asks once per reconcile (``request``, idempotent); it keeps its place in the
  queue (``since``) as long as its uid is the same, and asking again while capacity is reserved or
  held for it changes nothing. A job that is gone, finished, suspended or not ours is forgotten
  (``cancel``), except that a preemption victim stays one while its pods still hold their nodes.
- **Reservations** (``Reservation``): capacity promised to an admitted gang until the ledger (fed by
  pod *events*) has seen every pod; only then is it dropped (``free``), so no moment exists when
  neither counts a pod. ``release`` drops it when the job's pods were deleted.
- **Holds** (``Hold``): a preemptor's nodes, counted in full on top of the victims' pods still
  there, so nothing else takes them; ``evicting`` maps each victim to its preemptor. A hold is
  given up when every victim pod left is stuck: still there ``stuck_seconds`` after the time its
  deletion gave it (``deletionTimestamp``: the deletion plus its grace period), as on a lost node.
  The preemptor then goes back to its place in the queue and is decided again without those
  victims (they stay victims: neither counted nor chosen again while their pods are there).
- **Backoff**: a gang torn down after a schedule timeout waits ``backoff_base * 2**(n-1)`` seconds
  (at most ``backoff_max``) before it is tried again, even if it asks again in between.
- **Capacity** (``free``): allocatable minus the ledger's live pods, minus reservations not yet
  observed, minus holds, in milli-units and never below zero.
- **Gangs holding capacity** (``holding``): running gangs from the ledger (never victims) with the
  priority their reconcile reports, reservations and holds at ``preemption.HELD_PRIORITY``; this is
  what quota counts and preemption may choose from.
- **Wait reports** (``wait_reason``, ``wait_kind``): the throttled reason the cycle last reported,
  or ``Preempting`` while a hold waits for its victims.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from torchgate.controller.admission.ledger import Ledger, PodKey
from torchgate.controller.admission.nodes import NodeView, PodDemand, node_view
from torchgate.controller.admission.preemption import HELD_PRIORITY
from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import Topology, build_topology
from torchgate.pytorchjob import names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.pool import admission_order, quota_usage
from torchgate.pytorchjob.units import Units, subtract

log = logging.getLogger("torchgate.controller.admission.book")

KIND_PREEMPTING: Final = "Preempting"


@dataclass(slots=True)
class Waiting:
    """A job whose gang is not placed yet."""

    key: JobKey
    uid: str
    demands: tuple[PodDemand, ...]
    min_count: int
    usage: Units  # what the gang counts against its team's quota (``pool.gang_usage``)
    priority: int
    created: str
    gpu_resource: str
    since: float
    preempts: bool = True
    topology_level: str | None = None
    topology_required: bool = False
    not_before: float = 0.0
    reported_reason: str | None = None
    reported_kind: str | None = None
    reported_at: float | None = None

    def order(self) -> tuple[int, str, str, str]:
        """Its place in the queue (``pool.admission_order``)."""
        return admission_order(self.priority, self.created, self.key)

    def required(self) -> tuple[PodDemand, ...]:
        """The pods that must be placed together (the gang's ``minAvailable``)."""
        return self.demands[: max(0, min(self.min_count, len(self.demands)))]


@dataclass(slots=True)
class Reservation:
    """Capacity promised to a job whose pods are being created."""

    uid: str
    nodes: Mapping[str, str]  # pod name -> node
    requests: Mapping[str, Units]  # pod name -> what it takes
    since: float
    waited: float


@dataclass(slots=True)
class Hold:
    """Capacity kept for a preemptor while its victims' pods terminate."""

    reservation: Reservation
    victims: tuple[JobKey, ...]
    victim_pods: frozenset[PodKey]
    waiting: Waiting  # the preemptor's place in the queue, should the hold be given up


class AdmissionBook:
    """Waiting jobs, reservations, holds and evictions, kept between admission cycles."""

    def __init__(
        self,
        *,
        backoff_base: float = 10.0,
        backoff_max: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.clock = clock
        self.nodes: dict[str, NodeView] = {}
        self.ledger = Ledger()
        self.waiting: dict[JobKey, Waiting] = {}
        self.reservations: dict[JobKey, Reservation] = {}
        self.holds: dict[JobKey, Hold] = {}
        self.evicting: dict[JobKey, JobKey] = {}  # victim -> its preemptor
        self.gpu_resources: dict[JobKey, str] = {}
        self.priorities: dict[JobKey, int] = {}  # as asked, for the gang once it runs
        # When this process admitted the job (wall clock; pods' creation seconds after a restart).
        self.admitted_at: dict[JobKey, float] = {}
        self.timeouts: dict[JobKey, int] = {}
        self.team_status: dict[str, dict[str, int]] = {}
        self._retry_at: dict[JobKey, float] = {}
        self._topology: tuple[tuple[str, ...], Topology] | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Ask for an admission cycle soon."""
        self._wake.set()

    # ------------------------------------------------------------------ cluster events

    def on_node(self, kind: str, node: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Node informer handler."""
        name = str((node.get("metadata") or {}).get("name") or "")
        if kind == "DELETED":
            self.nodes.pop(name, None)
        else:
            view = node_view(node)
            if view is None:
                return
            if self.nodes.get(name) == view:
                return
            self.nodes[name] = view
        self._topology = None
        self.wake()

    def on_pod(self, kind: str, pod: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Pod informer handler (every pod of the cluster: they all use capacity).

        Only freed capacity wakes a cycle: while a wave of gangs is created, thousands of new pods
        would otherwise each start a cycle that can admit nothing.
        """
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if self.ledger.update(key, None if kind == "DELETED" else pod):
            self.wake()

    # ------------------------------------------------------------------ requests from reconcilers

    def request(
        self,
        key: JobKey,
        *,
        uid: str,
        demands: Sequence[PodDemand],
        min_count: int,
        usage: Units,
        priority: int,
        created: str,
        gpu_resource: str,
        preempts: bool = True,
        topology_level: str | None = None,
        topology_required: bool = False,
    ) -> None:
        """A job needs its gang placed (idempotent; keeps its place in the queue)."""
        if key in self.reservations and self.reservations[key].uid == uid:
            log.debug("%s/%s: admission asked while capacity is reserved", *key)
            return
        if key in self.holds and self.holds[key].reservation.uid == uid:
            return
        self.evicting.pop(key, None)  # a preempted gang whose pods are gone queues again
        self.gpu_resources[key] = gpu_resource
        self.priorities[key] = priority
        current = self.waiting.get(key)
        if current is not None and current.uid == uid:
            current.demands = tuple(demands)
            current.min_count = min_count
            current.usage = usage
            current.priority = priority
            current.preempts = preempts
            current.topology_level = topology_level
            current.topology_required = topology_required
            return
        self.waiting[key] = Waiting(
            key=key,
            uid=uid,
            demands=tuple(demands),
            min_count=min_count,
            usage=usage,
            priority=priority,
            created=created,
            gpu_resource=gpu_resource,
            since=self.clock(),
            preempts=preempts,
            topology_level=topology_level,
            topology_required=topology_required,
            not_before=self._retry_at.pop(key, 0.0),
        )
        self.wake()

    def note(self, key: JobKey, *, priority: int, gpu_resource: str) -> None:
        """What a running job counts as (its pods may carry no or an older priority)."""
        self.priorities[key] = priority
        self.gpu_resources[key] = gpu_resource

    def reservation_for(self, key: JobKey, uid: str) -> Mapping[str, str] | None:
        """Where the job's pods go, when capacity is reserved for it."""
        reservation = self.reservations.get(key)
        return reservation.nodes if reservation is not None and reservation.uid == uid else None

    def wait_reason(self, key: JobKey) -> str | None:
        """Why the job waits, as last reported (the newest reason, at most every refresh).

        Planning writes this into the job's status, so it must be the throttled message, not the
        newest one: the job's own status writes wake its reconcile, and every waiting job would
        otherwise rewrite its status each time the free count changes.
        """
        hold = self.holds.get(key)
        if hold is not None:
            victims = ", ".join("/".join(victim) for victim in hold.victims)
            return f"preempting {victims}: waiting for their pods to terminate"
        waiting = self.waiting.get(key)
        return waiting.reported_reason if waiting is not None else None

    def wait_kind(self, key: JobKey) -> str | None:
        """What the job waits for: ``Quota``, ``Capacity``, ``Topology`` or ``Preempting``."""
        if key in self.holds:
            return KIND_PREEMPTING
        waiting = self.waiting.get(key)
        return waiting.reported_kind if waiting is not None else None

    def preempted_by(self, key: JobKey) -> JobKey | None:
        """The preemptor when the job's gang was chosen as a victim and is being evicted."""
        return self.evicting.get(key)

    def release(self, key: JobKey) -> None:
        """Drop the job's reservation: its pods were deleted, so it no longer describes them."""
        self.reservations.pop(key, None)

    def cancel(self, key: JobKey) -> None:
        """The job is gone, finished, suspended or not ours: forget it."""
        changed = self.waiting.pop(key, None) is not None
        changed |= self.reservations.pop(key, None) is not None
        changed |= self.holds.pop(key, None) is not None
        if key not in self.ledger.gangs:  # a victim stays one while its pods hold their nodes
            self.evicting.pop(key, None)
        self.gpu_resources.pop(key, None)
        self.priorities.pop(key, None)
        self.admitted_at.pop(key, None)
        self.timeouts.pop(key, None)
        self._retry_at.pop(key, None)
        if changed:
            self.wake()

    def back_off(self, key: JobKey) -> float:
        """The job's gang was torn down after a timeout: make it wait before trying again."""
        self.reservations.pop(key, None)
        count = self.timeouts.get(key, 0) + 1
        self.timeouts[key] = count
        delay = float(min(self.backoff_base * 2.0 ** (count - 1), self.backoff_max))
        waiting = self.waiting.get(key)
        if waiting is not None:
            waiting.not_before = self.clock() + delay
        else:
            self._retry_at[key] = self.clock() + delay
        return delay

    # ------------------------------------------------------------------ what the books leave

    def free(self) -> dict[str, dict[str, int]]:
        """Free capacity per node: allocatable - live pods - reservations not yet observed - holds.

        A reserved pod counts through its reservation until the ledger (fed by pod *events*) has
        it; only then is the reservation dropped. Releasing it when the pod merely exists in a
        cache written through by the reconciler would leave a moment when neither counts it, and
        the next gang would be placed on GPUs kube-scheduler knows are taken. A hold counts in
        full (on top of the victims' pods still there), so nothing else takes its nodes.
        """
        free: dict[str, dict[str, int]] = {}
        for name, view in self.nodes.items():
            left = dict(view.allocatable)
            subtract(left, self.ledger.used.get(name, {}))
            free[name] = left
        settled: list[JobKey] = []
        for key, reservation in self.reservations.items():
            unseen = 0
            for pod, node_name in reservation.nodes.items():
                if (key[0], pod) in self.ledger.pods:
                    continue
                unseen += 1
                if node_name in free:
                    subtract(free[node_name], reservation.requests[pod])
            if not unseen:
                settled.append(key)
        for key in settled:
            del self.reservations[key]
        for hold in self.holds.values():
            for pod, node_name in hold.reservation.nodes.items():
                if node_name in free:
                    subtract(free[node_name], hold.reservation.requests[pod])
        return {name: {r: max(0, a) for r, a in left.items()} for name, left in free.items()}

    def topology_for(self, levels: tuple[str, ...]) -> Topology:
        """The domain tree of the nodes, rebuilt only when the nodes or the levels change."""
        if self._topology is None or self._topology[0] != levels:
            nodes = [(view.name, view.labels) for view in self.nodes.values()]
            self._topology = (levels, build_topology(levels, nodes))
        return self._topology[1]

    def holding(self, owner: Mapping[str, str], wall: float) -> list[Admitted]:
        """Every gang holding capacity: running gangs, reservations and holds (never victims)."""
        gangs: dict[JobKey, tuple[dict[str, str], dict[str, Units], int, float]] = {}
        for job, pods in self.ledger.gangs.items():
            if job in self.evicting:
                continue  # going away: neither counted nor chosen again
            members = [self.ledger.members[pod] for pod in pods]
            created = [m.created for m in members if m.created is not None]
            gangs[job] = (
                {pod[1]: self.ledger.pods[pod][0] for pod in pods},
                {pod[1]: self.ledger.pods[pod][1] for pod in pods},
                self.priorities.get(job, max(m.priority for m in members)),
                self.admitted_at.get(job, min(created) if created else 0.0),
            )
        held = [(k, r) for k, r in self.reservations.items()]
        held += [(k, h.reservation) for k, h in self.holds.items()]
        for job, reservation in held:
            nodes, requests, _, _ = gangs.get(job, ({}, {}, 0, wall))
            nodes = {**reservation.nodes, **nodes}
            requests = {**reservation.requests, **requests}
            gangs[job] = (nodes, requests, HELD_PRIORITY, wall)
        out = []
        for job, (nodes, requests, priority, started) in sorted(gangs.items()):
            gpu = self.gpu_resources.get(job, names.DEFAULT_GPU_RESOURCE)
            out.append(
                Admitted(
                    key=job,
                    team=owner.get(job[0]),
                    priority=priority,
                    usage=quota_usage(requests.values(), gpu),
                    admitted_at=started,
                    nodes=nodes,
                    requests=requests,
                )
            )
        return out

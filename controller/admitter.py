"""The gang admitter: which waiting job gets the free GPUs next, decided in one place.

Reconcilers run concurrently, but capacity is global: two jobs each placed against the same free
GPUs would both be created and both wait forever (the partial-gang deadlock TO#1264 describes). So
a job that needs pods only *asks* here; one admission cycle at a time looks at every waiting job in
order (priority, then creation time, then name), places each whole gang with ``place_gang`` against
the free capacity it sees, and *reserves* what it places until the job's pods show up in the pod
cache. The job's own reconcile then creates the pods from the reservation.

Capacity is a ledger kept from the cluster-wide pod and node caches (allocatable minus the requests
of every non-terminated pod on its node, or on its planned node before binding), updated per event
rather than recomputed per cycle, so a cycle costs O(nodes + waiting jobs) even with thousands of
pods.

Backfill: a job that does not fit does not block smaller jobs behind it, unless it has waited longer
than ``starvation_seconds``; from then on nothing behind it is admitted until it is, so a stream of
small jobs cannot starve a large one. A gang that timed out waits out an exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from torchgate.controller.eligibility import (
    NodeView,
    PodDemand,
    Resources,
    Signature,
    demand_requests,
    node_view,
)
from torchgate.controller.placement import Placement, Shortfall, place_gang
from torchgate.pytorchjob import names

log = logging.getLogger("torchgate.controller.admitter")

JobKey = tuple[str, str]
PodKey = tuple[str, str]
ZERO = Decimal(0)
TERMINATED_PHASES: Final = frozenset({"Succeeded", "Failed"})


class Shape:
    """What decides whether a gang fits, hashed once.

    A cycle looks up the shape of every waiting job; hashing the nested tuple (constraints and
    Decimal requests of every pod) each time cost a third of a cycle with 800 waiting jobs.
    """

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[Any, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Shape) and self._hash == other._hash and self.value == other.value
        )


@dataclass(slots=True)
class Waiting:
    """A job whose gang is not placed yet."""

    key: JobKey
    uid: str
    demands: tuple[PodDemand, ...]
    min_count: int
    priority: int
    created: str
    gpu_resource: str
    since: float
    not_before: float = 0.0
    reported_reason: str | None = None
    reported_at: float | None = None
    shape: Shape = field(init=False)

    def __post_init__(self) -> None:
        self.shape = _shape(self)

    def order(self) -> tuple[int, str, str, str]:
        """Admission order: higher priority first, then older, then by name."""
        return (-self.priority, self.created, self.key[0], self.key[1])


@dataclass(slots=True)
class Reservation:
    """Capacity promised to a job whose pods are being created."""

    uid: str
    nodes: Mapping[str, str]  # pod name -> node
    requests: Mapping[str, Resources]  # pod name -> what it takes
    since: float
    waited: float


@dataclass(slots=True)
class _Ledger:
    """Requests of live pods per node, maintained from pod events."""

    used: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    pods: dict[PodKey, tuple[str, Resources]] = field(default_factory=dict)

    def update(self, key: PodKey, pod: Mapping[str, Any] | None) -> bool:
        """Account for a pod's new state; return whether it freed capacity somewhere.

        A new pod only takes capacity, so it can never let a waiting gang in; only a pod that
        ended, went away or moved (bound elsewhere than planned) can.
        """
        before = self.pods.pop(key, None)
        if before is not None:
            _add(self.used.setdefault(before[0], {}), before[1], -1)
        after = _usage(pod) if pod is not None else None
        if after is not None:
            self.pods[key] = after
            _add(self.used.setdefault(after[0], {}), after[1], 1)
        return before is not None and before != after


def _usage(pod: Mapping[str, Any]) -> tuple[str, Resources] | None:
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
    return node, demand_requests(spec)


def _shape(waiting: Waiting) -> Shape:
    """What decides whether a gang fits: each pod's constraints and requests, and the minimum."""
    return Shape(
        (
            waiting.min_count,
            waiting.gpu_resource,
            tuple(
                (demand.signature, tuple(sorted(demand.requests.items())))
                for demand in waiting.demands
            ),
        )
    )


def _add(total: dict[str, Decimal], requests: Resources, sign: int) -> None:
    for name, amount in requests.items():
        total[name] = total.get(name, ZERO) + sign * amount


class Admitter:
    """Waiting jobs, reservations, and the admission cycle."""

    def __init__(
        self,
        *,
        on_admit_job: Callable[[JobKey], None],
        on_reason: Callable[[JobKey], None],
        on_admit: Callable[[float], None] = lambda waited: None,
        starvation_seconds: float = 300.0,
        backoff_base: float = 10.0,
        backoff_max: float = 600.0,
        reason_refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.on_admit_job = on_admit_job
        self.on_reason = on_reason
        self.on_admit = on_admit
        self.starvation_seconds = starvation_seconds
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.reason_refresh_seconds = reason_refresh_seconds
        self.clock = clock
        self.nodes: dict[str, NodeView] = {}
        self.ledger = _Ledger()
        self.waiting: dict[JobKey, Waiting] = {}
        self.reservations: dict[JobKey, Reservation] = {}
        self.timeouts: dict[JobKey, int] = {}
        self._retry_at: dict[JobKey, float] = {}
        self._shapes: dict[Shape, Shape] = {}
        self._wake = asyncio.Event()
        self.cycles = 0

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
        priority: int,
        created: str,
        gpu_resource: str,
    ) -> None:
        """A job needs its gang placed (idempotent; keeps its place in the queue)."""
        if key in self.reservations and self.reservations[key].uid == uid:
            log.debug("%s/%s: admission asked while capacity is reserved", *key)
            return
        current = self.waiting.get(key)
        if current is not None and current.uid == uid:
            current.demands = tuple(demands)
            current.min_count = min_count
            current.priority = priority
            current.shape = self._intern(_shape(current))
            return
        waiting = self.waiting[key] = Waiting(
            key=key,
            uid=uid,
            demands=tuple(demands),
            min_count=min_count,
            priority=priority,
            created=created,
            gpu_resource=gpu_resource,
            since=self.clock(),
            not_before=self._retry_at.pop(key, 0.0),
        )
        waiting.shape = self._intern(waiting.shape)
        self.wake()

    def _intern(self, shape: Shape) -> Shape:
        """One object per distinct shape, so a cycle's lookups compare by identity."""
        if len(self._shapes) > 2 * len(self.waiting) + 64:
            self._shapes = {w.shape: w.shape for w in self.waiting.values()}
        return self._shapes.setdefault(shape, shape)

    def reservation_for(self, key: JobKey, uid: str) -> Mapping[str, str] | None:
        """Where the job's pods go, when capacity is reserved for it."""
        reservation = self.reservations.get(key)
        return reservation.nodes if reservation is not None and reservation.uid == uid else None

    def wait_reason(self, key: JobKey) -> str | None:
        """Why the job waits, as last reported (the newest shortfall, at most every refresh).

        Planning writes this into the job's status, so it must be the throttled message, not the
        newest one: the job's own status writes wake its reconcile, and every waiting job would
        otherwise rewrite its status each time the free count changes.
        """
        waiting = self.waiting.get(key)
        return waiting.reported_reason if waiting is not None else None

    def release(self, key: JobKey) -> None:
        """Drop the job's reservation: its pods were deleted, so it no longer describes them."""
        self.reservations.pop(key, None)

    def cancel(self, key: JobKey) -> None:
        """The job is gone, finished, suspended or not ours: forget it."""
        changed = self.waiting.pop(key, None) is not None
        changed |= self.reservations.pop(key, None) is not None
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

    # ------------------------------------------------------------------ the cycle

    def wake(self) -> None:
        """Ask for an admission cycle soon."""
        self._wake.set()

    async def run(self, *, debounce: float = 0.02, period: float = 5.0) -> None:
        """Run admission cycles whenever woken (and every ``period`` seconds)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=period)
            await asyncio.sleep(debounce)
            self._wake.clear()
            try:
                self.cycle()
            except Exception:
                log.exception("admission cycle failed")

    def free(self) -> dict[str, dict[str, Decimal]]:
        """Free capacity per node: allocatable - live pods - reservations not yet observed.

        A reserved pod counts through its reservation until the ledger (fed by pod *events*) has
        it; only then is the reservation dropped. Releasing it when the pod merely exists in a
        cache written through by the reconciler would leave a moment when neither counts it, and
        the next gang would be placed on GPUs kube-scheduler knows are taken.
        """
        free: dict[str, dict[str, Decimal]] = {}
        for name, view in self.nodes.items():
            left = dict(view.allocatable)
            _add(left, self.ledger.used.get(name, {}), -1)
            free[name] = left
        settled: list[JobKey] = []
        for key, reservation in self.reservations.items():
            unseen = 0
            for pod, node_name in reservation.nodes.items():
                if (key[0], pod) in self.ledger.pods:
                    continue
                unseen += 1
                if node_name in free:
                    _add(free[node_name], reservation.requests[pod], -1)
            if not unseen:
                settled.append(key)
        for key in settled:
            del self.reservations[key]
        return free

    def cycle(self) -> list[JobKey]:
        """Place waiting gangs in order; return the jobs admitted."""
        self.cycles += 1
        now = self.clock()
        if not self.waiting:
            return []
        free = self.free()
        views = list(self.nodes.values())
        eligibility: MutableMapping[Signature, tuple[str, ...]] = {}
        # Within a cycle free capacity only shrinks, so a gang of the same shape that did not fit
        # will not fit either: hundreds of identical waiting jobs cost one placement, not one each.
        misses: dict[Shape, Shortfall] = {}
        admitted: list[JobKey] = []
        for waiting in sorted(self.waiting.values(), key=Waiting.order):
            if waiting.not_before > now:
                continue
            shape = waiting.shape
            outcome = misses.get(shape) or place_gang(
                waiting.demands,
                views,
                free,
                min_count=waiting.min_count,
                gpu_resource=waiting.gpu_resource,
                eligibility_cache=eligibility,
            )
            if isinstance(outcome, Placement):
                self._admit(waiting, outcome, free, now)
                admitted.append(waiting.key)
                continue
            misses[shape] = outcome
            self._still_waiting(waiting, outcome, now)
            if now - waiting.since > self.starvation_seconds:
                break  # nothing behind a starving job jumps the queue
        return admitted

    def _admit(
        self,
        waiting: Waiting,
        placement: Placement,
        free: dict[str, dict[str, Decimal]],
        now: float,
    ) -> None:
        del self.waiting[waiting.key]
        requests = {
            d.pod_name: d.requests for d in waiting.demands if d.pod_name in placement.nodes
        }
        self.reservations[waiting.key] = Reservation(
            uid=waiting.uid,
            nodes=dict(placement.nodes),
            requests=requests,
            since=now,
            waited=now - waiting.since,
        )
        for node, taken in placement.reserved.items():
            _add(free.setdefault(node, {}), taken, -1)
        self.on_admit(now - waiting.since)
        log.info(
            "admitted %s/%s onto %d node(s) after %.2fs",
            waiting.key[0],
            waiting.key[1],
            len(set(placement.nodes.values())),
            now - waiting.since,
            extra={"job": "/".join(waiting.key)},
        )
        self.on_admit_job(waiting.key)

    def _still_waiting(self, waiting: Waiting, shortfall: Shortfall, now: float) -> None:
        log.debug("%s/%s waits: %s", *waiting.key, shortfall.message)
        if waiting.reported_reason == shortfall.message:
            return
        # The free counts in the message change with every pod; rewriting the status of every
        # waiting job on each change would flood the apiserver, so refreshes are throttled.
        stale = (
            waiting.reported_at is None or now - waiting.reported_at >= self.reason_refresh_seconds
        )
        if stale:
            waiting.reported_at = now
            waiting.reported_reason = shortfall.message
            self.on_reason(waiting.key)

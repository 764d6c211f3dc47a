"""The waiting queue: jobs whose gang asks for admission, their backoff, what they were told.

Why apart from the capacity ledger: the queue changes when a reconcile asks (a job's place, its
demands, its backoff) and the ledger when the cluster changes (pods and nodes); the admission
cycle reads both and writes its outcomes back to each. Kueue keeps its queue cache and its
scheduler cache apart for the same reason. The module is pure: callers pass the time.

Rules:

1. ``request``: a job asks once per reconcile (idempotent) with a ``GangRequest``; it keeps its
   place in the queue (``since``, and the ``created`` it first asked with) as long as its uid
   is the same, with everything else as it asked last (demands, usage, priority, and the GPU
   sources of its policy: an admin who changes a policy's ``gpuResource`` changes what its
   waiting jobs count as GPUs). A new uid (the job was recreated) starts a new place.
2. ``ready``: the jobs the cycle decides, in admission order (``pool.admission_order``), leaving
   out those still backing off. The order (``ordered``) is kept until a job joins or leaves the
   queue or asks with anything changed; ``version`` counts those changes, so what is read from
   the queue (``forecasting.rank``, the gangs' facts) is kept as long as it stands.
3. ``back_off``: a gang torn down after a schedule timeout, or whose pods the apiserver refused
   to create (a ResourceQuota of its namespace), waits ``backoff_base * 2**(n-1)`` seconds (at
   most ``backoff_max``) before it is tried again, even if it asks again meanwhile; a
   ``reason`` given is what it is told until a cycle decides it again.
4. ``hold_place``: a preemptor whose nodes are held leaves the queue but keeps its place, so
   ``restore_place`` puts it back where it was should the hold be given up.
5. ``report``: what a waiting job is told (its wait kind and message) changes at once when the
   kind changes, or when the state of the nodes it could use changes why they are out of use
   (``causes``: a node NotReady, then back but quarantined, or cleared), else at most every
   ``refresh_seconds``: the free counts in a message change with every pod, and rewriting the
   status of every waiting job on each change would flood the apiserver, but a node's state
   changes seldom and is what an admin acts on (wait for the node, or clear its quarantine).
   The causes are read only when the nodes changed since the job was last looked at
   (``nodes``, the caller's version of them), and the message is phrased only when it may be
   reported.
6. ``cancel``: a job that is gone, finished, suspended or not ours is forgotten, with its
   backoffs (rules 3 and 8). So is an earlier job of a name another uid now has, whether or not
   its deletion was seen (the reconciler's module docstring): a job created again under its name
   never inherits its predecessor's back-off, its count or what it was told.
7. ``demand_by_team``: per team and ``Queued`` reason, how many jobs wait, the GPUs they count
   against their team, and the longest wait (the controller's metrics). A job of a namespace no
   team owns counts under team ``""``; one not decided yet under ``UNDECIDED``.
8. ``refuse_growth``: a running gang whose new Workers (``ledger`` rule 7) the apiserver refused
   to create (a ResourceQuota of its namespace: 403 ``exceeded quota``; an admission policy)
   has them placed again only ``backoff_base * 2**(n-1)`` seconds later (at most
   ``backoff_max``; n: refusals in a row), and is told the apiserver's words meanwhile
   (``growth_refusal``). The controller watches no quota, so a back-off is how it learns the
   quota freed; a create that succeeds (``growth_created``) ends the count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from torchgate.controller.admission.nodes import PodDemand
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.pool import GPUS, admission_order
from torchgate.pytorchjob.reasons import QUEUED_REASONS
from torchgate.pytorchjob.units import Units

UNDECIDED: Final = "Undecided"
# What a running gang's new Workers wait for while the apiserver's refusal stands (rule 8).
GROWTH_REFUSED: Final = "Refused"


@dataclass(frozen=True, slots=True)
class GangRequest:
    """What a job asks of admission for its gang: built by its reconcile, queued as asked."""

    uid: str
    demands: tuple[PodDemand, ...]  # Master first; the first ``min_count`` are the gang
    min_count: int
    usage: Units  # what the gang counts against its team's quota (``pool.gang_usage``)
    priority: int
    created: str
    gpus: GpuSources  # what its policy counts as GPUs
    preempts: bool = True
    topology_level: str | None = None
    topology_required: bool = False
    run_limit: float | None = None  # runPolicy.activeDeadlineSeconds (``backfill`` rule 4)

    @property
    def gpu_resource(self) -> str:
        """Its policy's ``gpuResource``."""
        return self.gpus.resource


@dataclass(frozen=True, slots=True)
class GrowthRequest:
    """A running elastic gang's Workers beyond ``minAvailable`` that wait (``ledger`` rule 7).

    Built by its reconcile while any wait; placed by the admitter after the waiting gangs.
    """

    uid: str
    demands: tuple[PodDemand, ...]  # the Workers waiting, in rank order
    priority: int
    created: str
    gpus: GpuSources

    def order(self, key: JobKey) -> tuple[int, str, str, str]:
        """Its place among the growths (``pool.admission_order``, as a waiting gang's)."""
        return admission_order(self.priority, self.created, key)


@dataclass(frozen=True, slots=True)
class GrowthRefusal:
    """The apiserver refused to create a running gang's new Workers (rule 8)."""

    message: str  # the apiserver's, which names the quota or policy
    count: int  # refusals in a row
    not_before: float  # the Workers are not placed again before then


@dataclass(slots=True)
class Waiting:
    """A job whose gang is not placed yet: what it asked (``request``) and its place."""

    key: JobKey
    request: GangRequest
    since: float
    not_before: float = 0.0
    reported_reason: str | None = None
    reported_kind: str | None = None
    reported_at: float | None = None
    reported_causes: object = None  # why its nodes were out of use when it was told (rule 5)
    nodes_seen: object = None  # the version of the nodes it was last looked at with (rule 5)

    def order(self) -> tuple[int, str, str, str]:
        """Its place in the queue (``pool.admission_order``)."""
        return admission_order(self.request.priority, self.request.created, self.key)

    def required(self) -> tuple[PodDemand, ...]:
        """The pods that must be placed together (the gang's ``minAvailable``)."""
        demands, min_count = self.request.demands, self.request.min_count
        return demands[: max(0, min(min_count, len(demands)))]


class WaitingQueue:
    """The jobs waiting for admission, and the places of preemptors whose nodes are held."""

    def __init__(
        self,
        *,
        backoff_base: float = 10.0,
        backoff_max: float = 600.0,
        refresh_seconds: float = 30.0,
    ) -> None:
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.refresh_seconds = refresh_seconds
        self.waiting: dict[JobKey, Waiting] = {}
        self.held_places: dict[JobKey, Waiting] = {}  # preemptors while their nodes are held
        self.timeouts: dict[JobKey, int] = {}
        self._retry_at: dict[JobKey, float] = {}
        self._retry_reason: dict[JobKey, str] = {}  # what a job backing off is told (rule 3)
        self.growth_refusals: dict[JobKey, GrowthRefusal] = {}
        self.version = 0  # bumps when a job joins or leaves or asks with anything changed
        self._ordered: list[Waiting] | None = None  # ``waiting`` in admission order

    def _changed(self) -> None:
        self.version += 1
        self._ordered = None

    # ------------------------------------------------------------------ rules 1-3

    def request(self, key: JobKey, request: GangRequest, *, now: float) -> bool:
        """Queue the job or update what it asks for (rule 1); whether it took a new place."""
        current = self.waiting.get(key)
        if current is not None and current.request.uid == request.uid:
            kept = current.request
            asked = replace(request, created=kept.created)
            if asked != kept:
                self._changed()
            current.request = asked
            return False
        self.waiting[key] = Waiting(
            key=key,
            request=request,
            since=now,
            not_before=self._retry_at.pop(key, 0.0),
            reported_reason=self._retry_reason.pop(key, None),
        )
        self._changed()
        return True

    def ordered(self) -> list[Waiting]:
        """Every queued job in admission order, backing off or not (rule 2; do not change it)."""
        if self._ordered is None:
            self._ordered = sorted(self.waiting.values(), key=Waiting.order)
        return self._ordered

    def ready(self, now: float) -> list[Waiting]:
        """The jobs to decide now, in admission order (rule 2)."""
        return [waiting for waiting in self.ordered() if waiting.not_before <= now]

    def back_off(self, key: JobKey, now: float, *, reason: str | None = None) -> float:
        """Make the job wait before it is tried again (rule 3); the delay."""
        count = self.timeouts.get(key, 0) + 1
        self.timeouts[key] = count
        delay = float(min(self.backoff_base * 2.0 ** (count - 1), self.backoff_max))
        told = None if reason is None else f"{reason}; admitted again after {delay:.0f}s"
        waiting = self.waiting.get(key)
        if waiting is not None:
            waiting.not_before = now + delay
            waiting.reported_reason = told or waiting.reported_reason
        else:
            self._retry_at[key] = now + delay
            if told is not None:
                self._retry_reason[key] = told
        return delay

    # ------------------------------------------------------------------ rule 8

    def refuse_growth(self, key: JobKey, message: str, now: float) -> float:
        """The apiserver refused the gang's new Workers: back their growth off (rule 8)."""
        before = self.growth_refusals.get(key)
        count = 1 if before is None else before.count + 1
        delay = float(min(self.backoff_base * 2.0 ** (count - 1), self.backoff_max))
        self.growth_refusals[key] = GrowthRefusal(message, count, now + delay)
        return delay

    def growth_refusal(self, key: JobKey) -> GrowthRefusal | None:
        """The last refusal of the gang's new Workers, while no create has succeeded since."""
        return self.growth_refusals.get(key)

    def growth_created(self, key: JobKey) -> None:
        """The gang's new Workers were created: their refusals are over (rule 8)."""
        self.growth_refusals.pop(key, None)

    # ------------------------------------------------------------------ leaving the queue

    def take(self, key: JobKey) -> Waiting:
        """The job was admitted: it leaves the queue."""
        self._changed()
        return self.waiting.pop(key)

    def hold_place(self, key: JobKey) -> None:
        """The job preempts: it leaves the queue and keeps its place (rule 4)."""
        self.held_places[key] = self.waiting.pop(key)
        self._changed()

    def restore_place(self, key: JobKey) -> None:
        """The job's hold is given up: back to its place, told nothing yet (rule 4)."""
        waiting = self.held_places.pop(key)
        waiting.reported_kind = waiting.reported_reason = waiting.reported_at = None
        self.waiting[key] = waiting
        self._changed()

    def drop_place(self, key: JobKey) -> None:
        """The job's hold became a reservation: its place is no longer needed."""
        self.held_places.pop(key, None)

    def cancel(self, key: JobKey) -> bool:
        """Forget the job (rule 6); whether it was waiting."""
        self.held_places.pop(key, None)
        self.timeouts.pop(key, None)
        self._retry_at.pop(key, None)
        self._retry_reason.pop(key, None)
        self.growth_refusals.pop(key, None)
        if self.waiting.pop(key, None) is None:
            return False
        self._changed()
        return True

    # ------------------------------------------------------------------ rule 5

    def report(
        self,
        waiting: Waiting,
        kind: str,
        message: Callable[[], str],
        now: float,
        *,
        nodes: object = None,
        causes: Callable[[], object] = lambda: None,
    ) -> bool:
        """Record what the job waits for, throttled (rule 5); whether what it is told changed.

        ``nodes`` is the caller's version of the nodes' state; ``causes`` says why the nodes the
        job could use are out of use (read only when ``nodes`` changed since the last look).
        """
        moved = False
        if waiting.nodes_seen != nodes:
            waiting.nodes_seen = nodes
            moved = waiting.reported_at is not None and causes() != waiting.reported_causes
        stale = (
            moved
            or waiting.reported_at is None
            or now - waiting.reported_at >= self.refresh_seconds
            or waiting.reported_kind != kind
        )
        if not stale:
            return False
        text = message()
        waiting.reported_causes = causes()
        if waiting.reported_reason == text and waiting.reported_kind == kind:
            return False
        waiting.reported_at = now
        waiting.reported_reason = text
        waiting.reported_kind = kind
        return True

    def reason(self, key: JobKey) -> str | None:
        """Why the job waits, as last reported."""
        waiting = self.waiting.get(key)
        return waiting.reported_reason if waiting is not None else None

    def kind(self, key: JobKey) -> str | None:
        """What the job waits for, as last reported: ``Quota``, ``Capacity`` or ``Topology``."""
        waiting = self.waiting.get(key)
        return waiting.reported_kind if waiting is not None else None


# ------------------------------------------------------------------ rule 7: demand by team


@dataclass(frozen=True, slots=True)
class Demand:
    """The jobs of one team waiting for one reason (GPUs in milli-units)."""

    team: str
    reason: str
    jobs: int
    gpus: int
    longest_wait: float


def demand_by_team(
    waiting: Iterable[Waiting], owner: Mapping[str, str], now: float
) -> list[Demand]:
    """Waiting jobs, GPUs and the longest wait per (team, reason), sorted (rule 7)."""
    totals: dict[tuple[str, str], tuple[int, int, float]] = {}
    for job in waiting:
        team = owner.get(job.key[0], "")
        reason = QUEUED_REASONS.get(job.reported_kind or "", UNDECIDED)
        jobs, gpus, longest = totals.get((team, reason), (0, 0, 0.0))
        totals[(team, reason)] = (
            jobs + 1,
            gpus + job.request.usage.get(GPUS, 0),
            max(longest, now - job.since),
        )
    return [Demand(team, reason, *counts) for (team, reason), counts in sorted(totals.items())]

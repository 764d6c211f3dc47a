"""The gang admitter: which waiting job gets the free GPUs next, decided in one place.

Reconcilers run concurrently, but capacity is global: two jobs each placed against the same free
GPUs would both be created and both wait forever (the partial-gang deadlock TO#1264 describes). So
a job that needs pods only *asks* here; one admission cycle at a time gathers the facts (free
capacity per node, the gangs holding capacity, team quotas, the policies' preemption and topology
settings) and runs ``decide``, which admits, preempts or keeps waiting every gang, whole gangs
only. The admitter applies what it returns:

- ``Admit``: the gang's nodes are reserved in the ledger (``ledger`` rule 2); the job's own
  reconcile creates the pods from the reservation (pods in rank order on the nodes chosen in
  topology order, so consecutive ranks share a domain).
- ``Preempt``: the preemptor's nodes are held and its victims marked (``ledger`` rule 3); each
  victim's own reconcile turns the mark into the deletion of all its pods, a ``Preempted``
  condition and Event. A hold settles into a reservation once the victims' pods are gone; one
  given up puts the preemptor back in its place in the queue (``waiting`` rule 4).
- Growth (``ledger`` rule 7): a running elastic gang's Workers beyond ``minAvailable`` that wait
  (``grow``, one request per job, asked by its reconcile while any wait) are placed after the
  cycle's waiting gangs were decided, on the room they left (as a gang with no deadline behind
  them: not on backfill's nodes for the head gangs, not while one starves or a freed wave is
  held) and within the team's quota; their nodes are reserved (``CapacityLedger.grow``) and the
  job's reconcile creates those pods beside the running gang, which goes on undisturbed. Pods
  whose create the apiserver refused (``extras_created``: a ResourceQuota of the namespace, an
  admission policy) leave the reservation at once, so their nodes are free for anyone, and the
  gang's growth backs off (``waiting`` rule 8) before it is placed again: the periodic cycle
  places it once the back-off ends.
- ``Wait``: the reason (``Quota``, ``Capacity`` or ``Topology``) and its message go to the queue,
  which reports them for the job's ``Queued`` condition (``waiting`` rule 5; ``Preempting``
  while a hold waits).

The admitter *has* the two parts that keep the cycle's facts between cycles, each with its own
rules: the waiting queue (``waiting``), fed by the reconcilers' requests, and the capacity ledger
(``ledger``), fed by the node and pod informers. It owns the cycle: the facts gathered per cycle,
the call to ``decide``, backfill, and applying the outcomes to both parts; it is the only part
that logs or wakes anything.

A cycle's facts grow with what changed, not with the pool: the capacity view (``Capacity``, and
the nodes' allocatable beside it) is built once per node set and then updated with the nodes
whose free capacity the ledger says may have changed (``changed_free``: pod and node events, and
the nodes whose free GPU devices from ResourceSlices and claims changed, ``set_devices``, read at
the start of every cycle); node eligibility is read again only when a node changed
(``nodes_version``) or a node gained or lost its devices (``devices_version``); a waiting gang's
facts only when it asked anew or what they came from changed, and the ready gangs are the last
cycle's while the queue (``WaitingQueue.version``), the owners and the nodes stand; the ledger
keeps the running gangs and their totals by team from events (``ledger`` rule 5); the queued
jobs' places (``forecasting.rank``) are ranked again only when a report reads them and the
queue, the owners or the teams changed since.

Backfill: a job that does not fit does not block smaller jobs behind it, except on the nodes the
cycle reserves for the first waiting gangs from the running gangs' deadlines (``backfill``: only
gangs whose own deadline ends before then may use those), and unless it has waited longer than
``starvation_seconds`` for capacity or topology; from then on nothing behind it is admitted until
it is, so a stream of small jobs cannot starve a large one whose nodes no deadline promises. A
gang one of whose pods no node admits, or that the nodes it may use could not hold whole even
empty (``nodes`` rules 5-6, read once per gang in ``_read_gang``), never starves
(``forecasting.starving``): nothing behind it could make room for it.

A gang waiting for capacity is told how much more the nodes out of use for it hold (``nodes``
rule 7: NotReady, cordoned, quarantined or tainted nodes its pods could use otherwise;
``forecasting.told``), read once per node change and only when its message is written or a
snapshot taken: ``decide`` never reads it. A snapshot taken for a forecast reads it for the
candidate too, the same way, so the warning at ``kubectl apply`` says what its queue entry would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from torchgate.controller.admission.backfill import START_SLACK_SECONDS, Reservations
from torchgate.controller.admission.decide import (
    Admit,
    Outcome,
    Pool,
    Preempt,
    Wait,
    WaitingGang,
    decide,
)
from torchgate.controller.admission.forecasting import (
    HeldNodes,
    QueuedJob,
    Snapshot,
    behind_starving,
    rank,
    starving,
    told,
    unplaceable,
)
from torchgate.controller.admission.ledger import (
    CapacityLedger,
    Growth,
    PodKey,
    Reservation,
    place_growth,
)
from torchgate.controller.admission.nodes import (
    OutOfUse,
    PodDemand,
    Signature,
    eligible_nodes,
    gang_too_large,
    no_eligible_node,
    no_node_large_enough,
    out_of_use,
    pool_of,
)
from torchgate.controller.admission.packing import WAVE_HELD
from torchgate.controller.admission.poolsource import team_statuses
from torchgate.controller.admission.preemption import protection
from torchgate.controller.admission.quota import closed_to_new_gangs
from torchgate.controller.admission.topology import (
    Capacity,
    Mixed,
    OptionalPod,
    Shape,
    Topology,
    gpu_free_nodes,
    job_topology,
    mixed_of,
    shape_of,
    summed,
    topology_levels,
)
from torchgate.controller.admission.waiting import (
    GROWTH_REFUSED,
    Demand,
    GangRequest,
    GrowthRequest,
    Waiting,
    WaitingQueue,
    demand_by_team,
)
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources
from torchgate.pytorchjob.names import DEFAULT_GPU_RESOURCE, JobKey
from torchgate.pytorchjob.outlook import Place, queued_message
from torchgate.pytorchjob.pool import (
    GPUS,
    PoolSettings,
    TeamQuota,
    TopologyRequest,
    resolve_teams,
)
from torchgate.pytorchjob.units import Units

log = logging.getLogger("torchgate.controller.admission.admitter")

KIND_PREEMPTING: Final = "Preempting"

# Free GPU devices per node and resource key, given what the ledger counts for a live pod.
DeviceCapacity = Callable[[Callable[[PodKey], Units | None]], dict[str, dict[str, int]]]


class Admitter:
    """The admission cycle over a waiting queue and a capacity ledger."""

    def __init__(
        self,
        *,
        on_admit_job: Callable[[JobKey], None],
        on_reason: Callable[[JobKey], None],
        on_admit: Callable[[float], None] = lambda waited: None,
        teams: Callable[[], Mapping[str, TeamQuota]] = dict,
        pool_settings: Callable[[], Sequence[PoolSettings]] = tuple,
        starvation_seconds: float = 300.0,
        backoff_base: float = 10.0,
        backoff_max: float = 600.0,
        reason_refresh_seconds: float = 30.0,
        stuck_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        claims_for: Callable[[str], ClaimLookup] = lambda _: NO_CLAIMS,
        device_capacity: DeviceCapacity | None = None,
        arrival_settle_seconds: float = 0.0,
        wave_hold_seconds: float = 0.0,
    ) -> None:
        self.queue = WaitingQueue(
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            refresh_seconds=reason_refresh_seconds,
        )
        self.ledger = CapacityLedger(claims_for)
        # Free GPU devices per node from ResourceSlices (``slices.free_devices``), given what the
        # ledger counts per live pod; None: no DRA devices are counted.
        self.device_capacity = device_capacity
        self.on_admit_job = on_admit_job
        self.on_reason = on_reason
        self.on_admit = on_admit
        self.teams = teams
        self.growths: dict[JobKey, GrowthRequest] = {}  # running gangs' waiting Workers
        self.growth_waits: dict[JobKey, str] = {}  # what those not placed wait for
        self.pool_settings = pool_settings
        self.starvation_seconds = starvation_seconds
        self.stuck_seconds = stuck_seconds
        # A cycle woken while jobs are being queued waits until none has been queued for this
        # long (``_settle_arrivals``), so jobs submitted together are decided together.
        self.arrival_settle_seconds = arrival_settle_seconds
        self._last_arrival = float("-inf")
        # Cycles may wait for the rest of a freed wave (``packing`` rule 6) this long in a row.
        self.wave_hold_seconds = wave_hold_seconds
        self._wave_held_since: float | None = None
        self.clock = clock
        self.wall_clock = wall_clock
        self.team_status: dict[str, dict[str, int]] = {}
        self.cycles = 0
        self._wake = asyncio.Event()
        self._claims_changed = False  # claims, templates or classes changed since the last read
        # Kept between cycles (``cycle``): the capacity view, updated from the ledger's changes;
        # node eligibility, until a node changes; each waiting gang's facts, until it asks
        # anew or what they were read from changes.
        self._capacity: Capacity | None = None
        self._empty: Capacity | None = None
        self._nodes = _NodeFacts((-1, -1, -1))
        self._gangs: dict[JobKey, tuple[tuple[object, ...], WaitingGang]] = {}
        # The ready gangs' facts, with what they were read from (``_gangs_of``).
        self._ready_gangs: tuple[tuple[object, ...], list[JobKey], tuple[WaitingGang, ...]] | None
        self._ready_gangs = None
        # Every queued job's place, with what it was ranked from (``_ranked``).
        self._ranking: tuple[tuple[object, ...], Mapping[JobKey, Place]] | None = None

    def wake(self) -> None:
        """Ask for an admission cycle soon."""
        self._wake.set()

    # ------------------------------------------------------------------ cluster events

    def on_node(self, kind: str, node: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Node informer handler."""
        if self.ledger.on_node(kind, node):
            self.wake()

    def on_claims(self, kind: str, obj: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Handler of the claim, template and DeviceClass informers: claimed pods count again.

        What a claimed pod counts (``ledger`` rule 6) is read from these: the next cycle counts
        claimed pods again, once for every event since (a wave of pods makes a wave of claims),
        then reads the free devices (``set_devices``).
        """
        self._claims_changed = True
        self.wake()

    def jobs_on(self, node: str) -> set[JobKey]:
        """The jobs with a live pod on ``node`` (``CapacityLedger.jobs_on``)."""
        return self.ledger.jobs_on(node)

    def on_pod(self, kind: str, pod: dict[str, Any], _: dict[str, Any] | None) -> None:
        """Pod informer handler (every pod of the cluster: they all use capacity).

        Only freed capacity wakes a cycle: while a wave of gangs is created, thousands of new pods
        would otherwise each start a cycle that can admit nothing.
        """
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if self.ledger.on_pod(key, None if kind == "DELETED" else pod):
            self.wake()

    # ------------------------------------------------------------------ requests from reconcilers

    def request(self, key: JobKey, request: GangRequest) -> None:
        """A job needs its gang placed (idempotent; keeps its place in the queue).

        Asking again while capacity is reserved or held for it changes nothing. An earlier job
        of its name (another uid) was forgotten (``cancel``) by the reconcile that found it gone.
        """
        if self.ledger.has_capacity_for(key, request.uid):
            log.debug("%s/%s: admission asked while capacity is reserved or held", *key)
            return
        self.ledger.end_eviction(key)  # a preempted gang whose pods are gone queues again
        self.ledger.note(key, priority=request.priority, gpus=request.gpus)
        if self.queue.request(key, request, now=self.clock()):
            self._last_arrival = self.clock()
            self.wake()
            if self.queue.reason(key) is not None:  # backing off, told why (``waiting`` rule 3)
                self.on_reason(key)

    def grow(self, key: JobKey, request: GrowthRequest | None) -> None:
        """A running gang's Workers that wait for room (``None``: none wait); idempotent."""
        if request is None:
            self.growths.pop(key, None)
            self.growth_waits.pop(key, None)
        elif self.growths.get(key) != request:
            self.growths[key] = request
            self.wake()

    def growth_wait(self, key: JobKey) -> str | None:
        """What the running gang's waiting Workers wait for: ``Quota`` or ``Capacity``.

        ``Refused`` while the apiserver's last refusal to create them stands (``waiting`` rule 8).
        """
        if self.queue.growth_refusal(key) is not None:
            return GROWTH_REFUSED
        return self.growth_waits.get(key)

    def growth_refusal(self, key: JobKey) -> str | None:
        """The apiserver's words when it last refused to create the gang's new Workers."""
        refusal = self.queue.growth_refusal(key)
        return refusal.message if refusal is not None else None

    def extras_created(self, key: JobKey, *, refused: Mapping[str, str]) -> None:
        """The job's reconcile created its elastic extras; ``refused``: pod -> the apiserver's no.

        Refused pods leave the reservation (their nodes free at once) and the gang's growth
        backs off (``waiting`` rule 8); none refused ends the back-off.
        """
        if not refused:
            self.queue.growth_created(key)
            return
        self.ledger.unreserve(key, refused)
        message = next(iter(refused.values()))
        delay = self.queue.refuse_growth(key, message, self.clock())
        log.warning(
            "%s/%s: creating %s refused (%s); placing them again in %.0fs",
            *key,
            ", ".join(sorted(refused)),
            message,
            delay,
            extra={"job": "/".join(key)},
        )
        self.wake()

    def note(
        self,
        key: JobKey,
        *,
        priority: int,
        gpus: GpuSources,
        ends_by: float | None = None,
    ) -> None:
        """What a running job counts as (its pods may carry no or an older priority).

        ``gpus``: what its policy counts as GPUs; ``ends_by``: when it has ended at the latest
        (wall clock), when it has a deadline.
        """
        self.ledger.note(key, priority=priority, gpus=gpus, ends_by=ends_by)

    def reservation_for(self, key: JobKey, uid: str) -> Mapping[str, str] | None:
        """Where the job's pods go, when capacity is reserved for it."""
        return self.ledger.reservation_for(key, uid)

    def wait_reason(self, key: JobKey) -> str | None:
        """Why the job waits, as last reported (the newest reason, at most every refresh).

        Planning writes this into the job's status, so it must be the throttled message, not the
        newest one: the job's own status writes wake its reconcile, and every waiting job would
        otherwise rewrite its status each time the free count changes.
        """
        hold = self.ledger.holds.get(key)
        if hold is not None:
            victims = ", ".join("/".join(victim) for victim in hold.victims)
            return f"preempting {victims}: waiting for their pods to terminate"
        return self.queue.reason(key)

    def wait_kind(self, key: JobKey) -> str | None:
        """What the job waits for: ``Quota``, ``Capacity``, ``Topology`` or ``Preempting``."""
        if key in self.ledger.holds:
            return KIND_PREEMPTING
        return self.queue.kind(key)

    def preempted_by(self, key: JobKey) -> JobKey | None:
        """The preemptor when the job's gang was chosen as a victim and is being evicted."""
        return self.ledger.preempted_by(key)

    def unreserve(self, key: JobKey, pods: Sequence[str]) -> None:
        """Reserved pods the job no longer expects (a scale down before they were created)."""
        if self.ledger.unreserve(key, pods):
            self.wake()

    def release(self, key: JobKey) -> None:
        """Drop the job's reservation: its pods were deleted, so it no longer describes them."""
        self.ledger.release(key)

    def cancel(self, key: JobKey) -> None:
        """The job is gone, finished, suspended or not ours: forget it."""
        self.growths.pop(key, None)
        self.growth_waits.pop(key, None)
        changed = self.queue.cancel(key)
        changed |= self.ledger.forget(key)
        if changed:
            self.wake()

    def back_off(self, key: JobKey, *, reason: str | None = None) -> float:
        """The job's gang was torn down after a timeout, or the apiserver refused its pods.

        Its reservation goes (their nodes free at once) and it waits before it is tried again
        (``waiting`` rule 3), told ``reason`` meanwhile.
        """
        self.ledger.release(key)
        delay = self.queue.back_off(key, self.clock(), reason=reason)
        self.wake()
        return delay

    def free(self) -> dict[str, dict[str, int]]:
        """Free capacity per node (``CapacityLedger.free``)."""
        return self.ledger.free()

    # ------------------------------------------------------------------ the cycle

    async def run(self, *, debounce: float = 0.02, period: float = 5.0) -> None:
        """Run admission cycles whenever woken (and every ``period`` seconds)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._wake.wait()
            await asyncio.sleep(debounce)
            await self._settle_arrivals()
            self._wake.clear()
            try:
                self.cycle()
            except Exception:
                log.exception("admission cycle failed")

    async def _settle_arrivals(self) -> None:
        """Wait until no job was queued for ``arrival_settle_seconds``, at most 4 times that.

        A burst of jobs reaches the controller over a second or so, in no particular order; a
        cycle run on the first few would give the room to whichever came first, not to the
        head of the queue nor to the gangs that fill it best (``packing``).
        """
        settle = self.arrival_settle_seconds
        limit = self.clock() + 4 * settle
        while True:
            now = self.clock()
            until = min(self._last_arrival + settle, limit)
            if now >= until:
                return
            await asyncio.sleep(until - now)

    def cycle(self) -> list[JobKey]:
        """Decide every waiting gang once; return the jobs admitted (reservations made)."""
        self.cycles += 1
        self._read_devices()
        now = self.clock()
        admitted = self._settle_holds(now)
        resolved = resolve_teams(self.teams().values())
        teams, owner = resolved.valid, resolved.owners
        if not self.queue.waiting:
            if teams:  # what ``kubectl get teamquotas`` shows stays current
                totals = self.ledger.team_totals(owner, self.wall_clock())
                self.team_status = team_statuses(teams, totals, ())
            return admitted + self._grow(lambda: self._current_capacity().fork(), teams, owner, now)
        wall = self.wall_clock()
        queued = self.queue.ready(now)
        closed = closed_to_new_gangs((waiting.key for waiting in queued), owner, teams)
        ready = [waiting for waiting in queued if waiting.key not in closed]
        pool, gangs, _ = self._facts(ready, teams, owner, wall)
        held_since = self._wave_held_since
        if self.wave_hold_seconds > 0 and (
            held_since is None or now - held_since < self.wave_hold_seconds
        ):
            pool = replace(pool, hold_waves=True)
        outcomes = {o.key: o for o in decide(pool, gangs, wall)}
        self._note_wave_hold(outcomes.values(), now)
        starved = self._starving(ready, gangs, outcomes, now)
        if starved is not None:  # nothing behind a starving job jumps the queue, and they say so
            outcomes = {o.key: o for o in decide(pool, gangs[: starved + 1], wall)}
            keys = [waiting.key for waiting in ready]
            outcomes.update(behind_starving(keys, starved, self.starvation_seconds))
        assert pool.totals is not None, "the facts carry the ledger's totals"
        self.team_status = team_statuses(
            teams,
            pool.totals,
            (owner.get(key[0]) for key in self.queue.waiting),
        )
        places = _Places(lambda: self._ranked(owner, teams, now))
        for key, message in closed.items():  # ``quota`` rule 5: decided by nobody
            outcomes[key] = Wait(key, "Quota", message)
        for waiting in queued:
            outcome = outcomes[waiting.key]
            if isinstance(outcome, Admit):
                self._admit(waiting, outcome.nodes, now)
                admitted.append(waiting.key)
            elif isinstance(outcome, Preempt):
                self._preempt(waiting, outcome, now)
            else:
                self._still_waiting(waiting, outcome, now, places)
        # Growth takes no room a starving gang or a freed wave waits for, nor a head gang's.
        held = any(isinstance(o, Wait) and o.reason == WAVE_HELD for o in outcomes.values())
        if starved is None and not held:
            admitted += self._grow(
                lambda: _room_left(pool, gangs, outcomes, wall), teams, owner, now
            )
        return admitted

    def _grow(
        self,
        room_left: Callable[[], Capacity],
        teams: Mapping[str, TeamQuota],
        owner: Mapping[str, str],
        now: float,
    ) -> list[JobKey]:
        """Place running gangs' waiting Workers on the room left (``ledger`` rule 7).

        ``room_left``: a capacity of their own with the room the cycle's outcomes left (read
        first: a cycle with no waiting gang reads the capacity then, which also drops the
        reservations whose pods were all seen). Returns the jobs that grew.
        """
        if not self.growths:
            return []
        room = room_left()
        growths: list[Growth] = []
        uids: dict[JobKey, str] = {}
        for key, asked in sorted(self.growths.items(), key=lambda item: item[1].order(item[0])):
            nodes = self.ledger.growable(key)
            refusal = self.queue.growth_refusal(key)
            if nodes is None or key in self.queue.waiting:
                continue
            if refusal is not None and refusal.not_before > now:
                continue  # refused by the apiserver: backing off (``waiting`` rule 8)
            extras = tuple(
                OptionalPod(d.pod_name, d.requests, self._eligible(d.signature))
                for d in asked.demands
            )
            one_per_node = any(d.host_ports for d in asked.demands)
            growths.append(Growth(key, owner.get(key[0]), nodes, extras, asked.gpus, one_per_node))
            uids[key] = asked.uid
        if not growths:
            return []
        usage = self.ledger.team_totals(owner, self.wall_clock()).usage
        grown = place_growth(room, growths, teams=teams, usage=usage)
        for growth in growths:  # what is left waits for this; its reconcile says so
            kind = grown.waiting.get(growth.key)
            if self.growth_waits.get(growth.key) != kind:
                if kind is None:
                    del self.growth_waits[growth.key]
                else:
                    self.growth_waits[growth.key] = kind
                if growth.key not in grown.placed:
                    self.on_reason(growth.key)
        placed = grown.placed
        for key, nodes in placed.items():
            by_name = {d.pod_name: d.requests for d in self.growths[key].demands}
            requests = {pod: by_name[pod] for pod in nodes}
            reservation = Reservation(uids[key], nodes, requests, since=now, waited=0.0)
            self.ledger.grow(key, reservation)
            log.info(
                "%s/%s grows by %d pod(s) onto %s",
                *key,
                len(nodes),
                ", ".join(sorted(set(nodes.values()))),
                extra={"job": "/".join(key)},
            )
            self.on_admit_job(key)
        return list(placed)

    def _current_capacity(self) -> Capacity:
        """The capacity view, brought up to date (a cycle with no waiting gang reads no facts)."""
        levels = topology_levels(s.topology.levels for s in self.pool_settings())
        return self._read_views(levels)[0]

    def _note_wave_hold(self, outcomes: Iterable[Outcome], now: float) -> None:
        """Start or end the bound on waiting for a freed wave; cycle again when it runs out."""
        if not any(isinstance(o, Wait) and o.reason == WAVE_HELD for o in outcomes):
            self._wave_held_since = None
            return
        if self._wave_held_since is None:
            self._wave_held_since = now
            with contextlib.suppress(RuntimeError):  # no event loop: cycles are driven by hand
                asyncio.get_running_loop().call_later(self.wave_hold_seconds, self.wake)

    def snapshot(
        self, candidate: Waiting | None = None, *, gpu_resource: str = DEFAULT_GPU_RESOURCE
    ) -> tuple[Snapshot, WaitingGang | None]:
        """The facts the next cycle would decide on, and ``candidate`` as a gang of it.

        Changes nothing a cycle would not change first (the ledger drops reservations whose pods
        it has all seen), so what ``forecasting`` answers from it is what the next cycle does.
        """
        self._read_devices()
        now, wall = self.clock(), self.wall_clock()
        resolved = resolve_teams(self.teams().values())
        owner = resolved.owners
        pool, gangs, extra = self._facts(
            self.queue.ready(now), resolved.valid, owner, wall, candidate
        )
        holds = tuple(
            HeldNodes(key, dict(hold.reservation.nodes), hold.victims)
            for key, hold in sorted(self.ledger.holds.items())
        )
        snapshot = Snapshot(
            pool=pool,
            gangs=tuple(gangs),
            queued=tuple(self._queued(owner, now)),
            holds=holds,
            nodes=tuple(self.ledger.nodes.values()),
            gpu_resource=gpu_resource,
            now=wall,
            starvation_seconds=self.starvation_seconds,
            out_of_use={
                key: note
                for key, waiting in self._asked_of(candidate)
                if (note := self._out_of_use(waiting)) is not None
            },
        )
        return snapshot, extra

    def _asked_of(self, candidate: Waiting | None) -> list[tuple[JobKey, Waiting]]:
        """Every queued job, ``candidate`` in place of a queued job of its key (a forecast)."""
        asked = dict(self.queue.waiting)
        if candidate is not None:
            asked[candidate.key] = candidate
        return list(asked.items())

    def demand(self) -> list[Demand]:
        """Who waits, per team and reason (``waiting.demand_by_team``; read at scrape time)."""
        owner = resolve_teams(self.teams().values()).owners
        return demand_by_team(self.queue.waiting.values(), owner, self.clock())

    def _queued(self, owner: Mapping[str, str], now: float) -> list[QueuedJob]:
        """Every queued job, in admission order (``forecasting.rank`` places them)."""
        return [
            QueuedJob(
                key=waiting.key,
                order=waiting.order(),
                team=owner.get(waiting.key[0]),
                usage=waiting.request.usage,
                waited=now - waiting.since,
                ready=waiting.not_before <= now,
                kind=waiting.reported_kind,
                message=waiting.reported_reason,
            )
            for waiting in self.queue.ordered()
        ]

    def _ranked(
        self, owner: Mapping[str, str], teams: Mapping[str, TeamQuota], now: float
    ) -> Mapping[JobKey, Place]:
        """Every queued job's place (``forecasting.rank``), kept while what it reads stands.

        A place reads the queue's order and its jobs' usage (``WaitingQueue.version``), the
        jobs' teams and the teams' cohorts: nothing a cycle that admits nothing changes.
        """
        basis = (self.queue.version, dict(owner), dict(teams))
        if self._ranking is None or self._ranking[0] != basis:
            self._ranking = (basis, rank(self._queued(owner, now), teams))
        return self._ranking[1]

    def _starving(
        self,
        ready: Sequence[Waiting],
        gangs: Sequence[WaitingGang],
        outcomes: Mapping[JobKey, Outcome],
        now: float,
    ) -> int | None:
        """Index of the first starving gang that waits for room while a later one goes ahead."""
        bound = self.starvation_seconds
        if not any(now - waiting.since > bound for waiting in ready):
            return None  # none has waited long enough to starve
        waited = {waiting.key: now - waiting.since for waiting in ready}
        keys = [waiting.key for waiting in ready]
        return starving(keys, outcomes, waited, bound, hopeless=unplaceable(gangs))

    # ------------------------------------------------------------------ facts of a cycle

    def _read_devices(self) -> None:
        """Count claimed pods again if their claims changed; read the free GPU devices afresh.

        The ledger reports the nodes whose devices changed (``set_devices``), so the capacity
        view kept across cycles follows them.
        """
        if self._claims_changed:
            self._claims_changed = False
            self.ledger.recount_claims()
        if self.device_capacity is not None:
            self.ledger.set_devices(self.device_capacity(self.ledger.units_of))

    def _capacity_views(
        self, topology: Topology, changed: Mapping[str, Units]
    ) -> tuple[Capacity, Capacity]:
        """The capacity view and the nodes' allocatable (``Pool.empty``).

        Built once per node set, then updated with the nodes that changed.
        """
        nodes = self.ledger.nodes
        capacity, empty = self._capacity, self._empty
        if capacity is None or empty is None or capacity.topology is not topology:
            capacity = self._capacity = Capacity(topology, self.ledger.free())
            allocatable = {name: self.ledger.capacity_of(name) for name in nodes}
            empty = self._empty = Capacity(topology, allocatable)
        else:
            capacity.update(changed)
            empty.update({name: self.ledger.capacity_of(name) for name in changed})
        return capacity, empty

    def _read_views(self, levels: tuple[str, ...]) -> tuple[Capacity, Capacity]:
        """The capacity views brought up to date, and the node facts kept while they stand."""
        changed = self.ledger.changed_free()
        capacity, empty = self._capacity_views(self.ledger.topology_for(levels), changed)
        # What an empty node holds changes with its free GPU devices too (a device tainted or
        # claimed outside the ledger, then back), not only when devices come or go.
        version = (self.ledger.nodes_version, self.ledger.devices_version, empty.edits)
        if self._nodes.version != version:
            self._nodes = _NodeFacts(version)
        return capacity, empty

    def _facts(
        self,
        ready: Sequence[Waiting],
        teams: Mapping[str, TeamQuota],
        owner: Mapping[str, str],
        wall: float,
        extra: Waiting | None = None,
    ) -> tuple[Pool, list[WaitingGang], WaitingGang | None]:
        """What ``decide`` gets: the pool, the ready gangs and ``extra`` as a gang.

        ``extra`` (a forecast's candidate) is read afresh and not kept: it is in no queue.
        """
        settings = self.pool_settings()
        levels = topology_levels(s.topology.levels for s in settings)
        capacity, empty = self._read_views(levels)
        gangs = self._gangs_of(ready, owner, levels)
        pool = Pool(
            capacity=capacity,
            teams=teams,
            admitted=self.ledger.holding(owner, wall),
            totals=self.ledger.team_totals(owner, wall),
            preemption=protection(s.preemption for s in settings),
            empty=empty,
        )
        return pool, gangs, self._read_gang(extra, owner, levels) if extra is not None else None

    def _gangs_of(
        self, ready: Sequence[Waiting], owner: Mapping[str, str], levels: Sequence[str]
    ) -> list[WaitingGang]:
        """The ready gangs' facts: the last cycle's while the queue, owners and nodes stand."""
        basis = (self.queue.version, dict(owner), tuple(levels), self._nodes.version)
        keys = [waiting.key for waiting in ready]
        kept = self._ready_gangs
        if kept is not None and kept[0] == basis and kept[1] == keys:
            return list(kept[2])
        for key in self._gangs.keys() - set(keys):
            del self._gangs[key]
        gangs = [self._gang(waiting, owner, levels) for waiting in ready]
        self._ready_gangs = (basis, keys, tuple(gangs))
        return gangs

    def _gang(
        self, waiting: Waiting, owner: Mapping[str, str], levels: Sequence[str]
    ) -> WaitingGang:
        """The gang's facts for ``decide``, read again only when what they come from changed."""
        source = (waiting.request, owner.get(waiting.key[0]), tuple(levels), self._nodes.version)
        known = self._gangs.get(waiting.key)
        if known is not None and known[0] == source:
            return known[1]
        gang = self._read_gang(waiting, owner, levels)
        self._gangs[waiting.key] = (source, gang)
        return gang

    def _read_gang(
        self, waiting: Waiting, owner: Mapping[str, str], levels: Sequence[str]
    ) -> WaitingGang:
        facts = self._nodes
        asked = waiting.request
        required = waiting.required()
        requests = {d.pod_name: d.requests for d in required}
        usage = asked.usage
        asks_gpus = usage.get(GPUS, 0) > 0
        preference = (asked.gpu_resource, asks_gpus)
        if preference not in facts.without_gpus:  # the same few answers for every gang
            facts.without_gpus[preference] = gpu_free_nodes(
                usage,
                asked.gpu_resource,
                ((name, self.ledger.capacity_of(name)) for name in self.ledger.nodes),
            )
        preferred = facts.without_gpus[preference]
        signatures = frozenset(demand.signature for demand in required)
        allowed = facts.allowed.get(signatures)
        if allowed is None:  # hundreds of waiting gangs share a few distinct constraint sets
            found: set[str] | None = None
            for signature in signatures:
                nodes = self._eligible(signature)
                found = set(nodes) if found is None else found & set(nodes)
            allowed = facts.allowed[signatures] = frozenset(found or ())
        shape = shape_of(
            requests.values(),
            one_per_node=any(d.host_ports for d in required),
            allowed=allowed,
            preferred=preferred,
        )
        mixed = mixed_of(
            requests,
            gpu_resource=asked.gpu_resource,
            one_per_node=shape.one_per_node,
            allowed=allowed,
            preferred=preferred,
        )
        topology = job_topology(asked.topology_level, asked.topology_required, levels)
        where = pool_of(required[0]) if required else "in the cluster"
        blocked = next((d for d in required if not facts.eligibility[d.signature]), None)
        no_node = None
        if blocked is not None:
            no_node = no_eligible_node(blocked, list(self.ledger.nodes.values()))
        else:
            no_node = next(filter(None, (self._too_large(d) for d in required)), None)
        if no_node is None and required:
            no_node = self._gang_too_large(
                list(requests.values()), shape, mixed, topology, where, asked.gpu_resource
            )
        extras = tuple(
            OptionalPod(d.pod_name, d.requests, self._eligible(d.signature))
            for d in asked.demands[len(required) :]
        )
        return WaitingGang(
            key=waiting.key,
            team=owner.get(waiting.key[0]),
            priority=asked.priority,
            created=asked.created,
            pods=tuple(requests),
            requests=requests,
            usage=usage,
            shape=shape,
            mixed=mixed,
            topology=topology,
            preempts=asked.preempts,
            extras=extras,
            where=where,
            gpu_resource=asked.gpu_resource,
            no_node=no_node,
            run_limit=asked.run_limit,
        )

    def _too_large(self, demand: PodDemand) -> str | None:
        """Why no eligible node could ever hold ``demand`` (``nodes`` rule 5), once per shape."""
        shape = (
            demand.signature,
            tuple(sorted(demand.requests.items())),
            demand.device_classes,
        )
        known = self._nodes.too_large
        if shape not in known:
            capacities = (self.ledger.capacity_of(n) for n in self._eligible(demand.signature))
            known[shape] = no_node_large_enough(demand, capacities)
        return known[shape]

    def _gang_too_large(
        self,
        requests: Sequence[Units],
        shape: Shape,
        mixed: Mixed | None,
        topology: TopologyRequest,
        where: str,
        gpu_resource: str,
    ) -> str | None:
        """Why its nodes could never hold the whole gang (``nodes`` rule 6), once per shape."""
        empty = self._empty
        if empty is None:  # read before the first cycle's capacity views: nothing to say yet
            return None
        pods = tuple(tuple(sorted(r.items())) for r in requests)
        key = (shape, mixed, pods, topology, empty.topology.levels, where, gpu_resource)
        known = self._nodes.gang_too_large
        if key not in known:
            known[key] = gang_too_large(
                empty,
                requests,
                shape,
                topology,
                where=where,
                gpu_resource=gpu_resource,
                mixed=mixed,
            )
        return known[key]

    def _out_of_use(self, waiting: Waiting) -> OutOfUse | None:
        """The nodes out of use for the gang (``nodes`` rule 7), once per node change.

        Read when its ``Queued`` message is written, when the nodes changed since the job was
        last told (``waiting`` rule 5: a change of their causes is told at once) or a snapshot
        taken, never by ``decide``.
        """
        required = waiting.required()
        signatures = frozenset(demand.signature for demand in required)
        wanted = summed(demand.requests for demand in required)
        resource = waiting.request.gpu_resource
        key = (
            signatures,
            tuple(sorted(name for name, amount in wanted.items() if amount)),
            resource,
        )
        known = self._nodes.out_of_use
        if key not in known:
            known[key] = out_of_use(
                signatures,
                self.ledger.nodes.values(),
                wanted=wanted,
                gpu_resource=resource,
                capacity_of=self.ledger.capacity_of,
            )
        return known[key]

    def _eligible(self, signature: Signature) -> tuple[str, ...]:
        """The nodes that admit ``signature`` (computed once until a node changes)."""
        eligibility = self._nodes.eligibility
        if signature not in eligibility:
            eligibility[signature] = eligible_nodes(signature, self.ledger.nodes.values())
        return eligibility[signature]

    # ------------------------------------------------------------------ applying outcomes

    def _admit(self, waiting: Waiting, nodes: Mapping[str, str], now: float) -> None:
        self.queue.take(waiting.key)
        by_name = {d.pod_name: d for d in waiting.request.demands}
        reservation = Reservation(
            uid=waiting.request.uid,
            nodes=dict(nodes),
            requests={pod: by_name[pod].requests for pod in nodes},
            since=now,
            waited=now - waiting.since,
        )
        wall = self.wall_clock()
        ends_by = None  # until its reconcile notes the deadline from the job's startTime
        if waiting.request.run_limit is not None:
            ends_by = wall + waiting.request.run_limit + START_SLACK_SECONDS
        self.ledger.reserve(waiting.key, reservation, admitted_at=wall, ends_by=ends_by)
        self.on_admit(now - waiting.since)
        log.info(
            "admitted %s/%s onto %d node(s) after %.2fs",
            waiting.key[0],
            waiting.key[1],
            len(set(nodes.values())),
            now - waiting.since,
            extra={"job": "/".join(waiting.key)},
        )
        self.on_admit_job(waiting.key)

    def _preempt(self, waiting: Waiting, outcome: Preempt, now: float) -> None:
        self.queue.hold_place(waiting.key)
        by_name = {d.pod_name: d for d in waiting.request.demands}
        reservation = Reservation(
            uid=waiting.request.uid,
            nodes=dict(outcome.nodes),
            requests={pod: by_name[pod].requests for pod in outcome.nodes},
            since=now,
            waited=now - waiting.since,
        )
        self.ledger.hold(waiting.key, reservation, outcome.victims)
        log.info(
            "%s/%s preempts %s",
            *waiting.key,
            ", ".join("/".join(v) for v in outcome.victims),
            extra={"job": "/".join(waiting.key)},
        )
        for victim in outcome.victims:
            self.on_reason(victim)
        self.on_reason(waiting.key)

    def _settle_holds(self, now: float) -> list[JobKey]:
        """Holds whose victims' pods are all gone become reservations; stuck ones are given up."""
        settled = []
        for key in list(self.ledger.holds):
            left = self.ledger.victim_pods_left(key)
            if left:
                if self.ledger.stuck(left, late=self.wall_clock() - self.stuck_seconds):
                    self._give_up(key, left)
                continue
            reservation = self.ledger.settle(key, admitted_at=self.wall_clock())
            self.queue.drop_place(key)
            self.on_admit(reservation.waited + now - reservation.since)
            settled.append(key)
            self.on_admit_job(key)
        return settled

    def _give_up(self, key: JobKey, stuck: Sequence[PodKey]) -> None:
        """The victims' pods do not go away: the preemptor is decided again without them."""
        self.ledger.give_up(key)
        self.queue.restore_place(key)
        log.warning(
            "%s/%s: %d victim pod(s) still terminating %.0fs past their grace period (%s); "
            "deciding again without them",
            *key,
            len(stuck),
            self.stuck_seconds,
            ", ".join(sorted("/".join(pod) for pod in stuck)[:5]),
            extra={"job": "/".join(key)},
        )
        self.on_reason(key)

    def _still_waiting(self, waiting: Waiting, outcome: Wait, now: float, places: _Places) -> None:
        def message() -> str:
            note = self._out_of_use(waiting) if outcome.kind == "Capacity" else None
            return queued_message(places.of(waiting.key), told(outcome.kind, outcome.message, note))

        def causes() -> object:
            note = self._out_of_use(waiting) if outcome.kind == "Capacity" else None
            return None if note is None else note.causes

        nodes = self._nodes.version
        if self.queue.report(waiting, outcome.kind, message, now, nodes=nodes, causes=causes):
            log.debug("%s/%s waits (%s): %s", *waiting.key, outcome.kind, outcome.message)
            self.on_reason(waiting.key)


def _room_left(
    pool: Pool, gangs: Sequence[WaitingGang], outcomes: Mapping[JobKey, Outcome], now: float
) -> Capacity:
    """The room the cycle's outcomes leave, without the nodes backfill keeps for head gangs.

    The outcomes are taken in admission order through ``backfill.Reservations``, as ``decide``
    took them, so the nodes reserved for the first gangs waiting for room are withheld: a
    growth is a gang with no deadline at the back of the queue (``backfill`` rule 3).
    """
    room = pool.capacity.fork()
    reservations = Reservations(room, pool.admitted, now)
    for gang in gangs:

        def replay(gang: WaitingGang) -> Outcome:
            outcome = outcomes[gang.key]
            if isinstance(outcome, Admit | Preempt):
                requests = {**gang.requests, **{e.name: e.requests for e in gang.extras}}
                room.take(outcome.nodes, {pod: requests[pod] for pod in outcome.nodes})
            return outcome

        reservations.decide(gang, replay)
    return room


@dataclass(slots=True)
class _NodeFacts:
    """What the admitter reads from the nodes for waiting gangs, kept while no node changes.

    ``version`` is the ledger's ``nodes_version`` and ``devices_version`` and the changes to the
    nodes' allocatable with their free devices (``Pool.empty``'s edits) it was read at; per
    constraint signature the eligible nodes, per set of signatures the nodes all of them admit,
    and per (GPU resource, asks for GPUs) the nodes without GPUs (``topology.gpu_free_nodes``);
    per set of signatures, resources asked and GPU resource the nodes out of use
    (``nodes.out_of_use``).
    """

    version: tuple[int, int, int]
    eligibility: dict[Signature, tuple[str, ...]] = field(default_factory=dict)
    allowed: dict[frozenset[Signature], frozenset[str]] = field(default_factory=dict)
    without_gpus: dict[tuple[str, bool], frozenset[str] | None] = field(default_factory=dict)
    too_large: dict[tuple[object, ...], str | None] = field(default_factory=dict)
    gang_too_large: dict[tuple[object, ...], str | None] = field(default_factory=dict)
    out_of_use: dict[tuple[object, ...], OutOfUse | None] = field(default_factory=dict)


class _Places:
    """Every queued job's place (``Admitter._ranked``), asked for once per cycle when first read.

    Only a job whose report is due reads its place, and on most cycles none is.
    """

    def __init__(self, compute: Callable[[], Mapping[JobKey, Place]]) -> None:
        self._compute = compute
        self._places: Mapping[JobKey, Place] | None = None

    def of(self, key: JobKey) -> Place | None:
        if self._places is None:
            self._places = self._compute()
        return self._places.get(key)

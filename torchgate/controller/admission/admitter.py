"""The gang admitter: which waiting job gets the free GPUs next, decided in one place.

Reconcilers run concurrently, but capacity is global: two jobs each placed against the same free
GPUs would both be created and both wait forever (the partial-gang deadlock TO#1264 describes). So
a job that needs pods only *asks* here; one admission cycle at a time gathers the facts (free
capacity per node, the gangs holding capacity, team quotas, the policies' preemption and topology
settings) and runs ``sharing.decide``, which admits, preempts or keeps waiting every gang, whole
gangs only. The admitter applies what it returns:

- ``Admit``: the gang's nodes are *reserved* until its pods show up in the pod cache; the job's
  own reconcile creates the pods from the reservation (pods in rank order on the nodes chosen in
  topology order, so consecutive ranks share a domain).
- ``Preempt``: the preemptor's nodes are *held* (nothing else is placed on them) while the
  victims' pods terminate; each victim is marked as preempted (``preempted_by``), which its own
  reconcile turns into the deletion of all its pods, a ``Preempted`` condition and Event; once no
  pod of any victim is left, the hold becomes a reservation.
- ``Wait``: the reason (``Quota``, ``Capacity`` or ``Topology``) and its message are reported,
  throttled, for the job's ``Queued`` condition. A capacity message names the resource that is
  short and the node filter (``topology.Shortfall``), or the filter that leaves no node at all.

What the cycle decides from is kept between cycles by ``AdmissionBook`` (``admissionbook.py``,
which this class extends): the waiting jobs, reservations, holds, evictions and backoff, and the
capacity ledger kept from the cluster-wide pod and node caches (allocatable minus the requests
of every non-terminated pod on its node, or on its planned node before binding), updated per event
rather than recomputed per cycle. The ledger also groups torchgate's pods by job, which gives the
running gangs that quota counts and preemption may choose from: their priority as the job's
reconcile reports it (``request``, ``note``), their start when this process admitted them (after
a controller restart: the first pod's creation; until a job is reconciled, its pods'
``spec.priority``). Gangs whose pods are being created
(reservations, holds) count against quota but are never victims. This module owns the cycle: the
facts gathered per cycle, the call to ``sharing.decide``, backfill, and applying the outcomes.

Backfill: a job that does not fit does not block smaller jobs behind it, unless it has waited longer
than ``starvation_seconds`` for capacity or topology; from then on nothing behind it is admitted
until it is, so a stream of small jobs cannot starve a large one. A gang that timed out waits out
an exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence

from torchgate.controller.admission.book import KIND_PREEMPTING as KIND_PREEMPTING
from torchgate.controller.admission.book import (
    AdmissionBook,
    Hold,
    Reservation,
    Waiting,
)
from torchgate.controller.admission.decide import (
    Admit,
    Outcome,
    Pool,
    Preempt,
    Wait,
    WaitingGang,
    decide,
)
from torchgate.controller.admission.ledger import PodKey
from torchgate.controller.admission.nodes import (
    Signature,
    eligible_nodes,
    no_eligible_node,
    pool_of,
)
from torchgate.controller.admission.poolsource import team_statuses
from torchgate.controller.admission.preemption import protection
from torchgate.controller.admission.topology import (
    OptionalPod,
    gpu_free_nodes,
    job_topology,
    shape_of,
    topology_levels,
)
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.pool import GPUS, PoolSettings, TeamQuota, resolve_teams

log = logging.getLogger("torchgate.controller.admission.admitter")

__all__ = ["KIND_PREEMPTING", "Admitter", "Hold", "Reservation", "Waiting"]


class Admitter(AdmissionBook):
    """The admission cycle over the books of ``AdmissionBook``."""

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
    ) -> None:
        super().__init__(backoff_base=backoff_base, backoff_max=backoff_max, clock=clock)
        self.on_admit_job = on_admit_job
        self.on_reason = on_reason
        self.on_admit = on_admit
        self.teams = teams
        self.pool_settings = pool_settings
        self.starvation_seconds = starvation_seconds
        self.reason_refresh_seconds = reason_refresh_seconds
        self.stuck_seconds = stuck_seconds
        self.wall_clock = wall_clock
        self.cycles = 0

    # ------------------------------------------------------------------ the cycle

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

    def cycle(self) -> list[JobKey]:
        """Decide every waiting gang once; return the jobs admitted (reservations made)."""
        self.cycles += 1
        now = self.clock()
        admitted = self._release_holds(now)
        resolved = resolve_teams(self.teams().values())
        teams, owner = resolved.valid, resolved.owners
        if not self.waiting:
            if teams:  # what ``kubectl get teamquotas`` shows stays current
                running = self.holding(owner, self.wall_clock())
                self.team_status = team_statuses(teams, running, ())
            return admitted
        free = self.free()
        settings = self.pool_settings()
        levels = topology_levels(s.topology.levels for s in settings)
        wall = self.wall_clock()
        ready = [w for w in sorted(self.waiting.values(), key=Waiting.order) if w.not_before <= now]
        eligibility: MutableMapping[Signature, tuple[str, ...]] = {}
        allowed_nodes: dict[frozenset[Signature], frozenset[str]] = {}
        without_gpus: dict[tuple[str, bool], frozenset[str] | None] = {}
        gangs = [
            self._gang(w, owner, levels, eligibility, allowed_nodes, without_gpus) for w in ready
        ]
        running = self.holding(owner, wall)
        pool = Pool(
            topology=self.topology_for(levels),
            free=free,
            teams=teams,
            admitted=running,
            preemption=protection(s.preemption for s in settings),
        )
        outcomes = {o.key: o for o in decide(pool, gangs, wall)}
        starving = self._starving(ready, outcomes, now)
        if starving is not None:  # nothing behind a starving job jumps the queue
            ready = ready[: starving + 1]
            outcomes = {o.key: o for o in decide(pool, gangs[: starving + 1], wall)}
        self.team_status = team_statuses(
            teams, running, (owner.get(key[0]) for key in self.waiting)
        )
        for waiting in ready:
            outcome = outcomes[waiting.key]
            if isinstance(outcome, Admit):
                self._admit(waiting, outcome.nodes, now)
                admitted.append(waiting.key)
            elif isinstance(outcome, Preempt):
                self._preempt(waiting, outcome, now)
            else:
                self._still_waiting(waiting, outcome, now)
        return admitted

    def _starving(
        self, ready: Sequence[Waiting], outcomes: Mapping[JobKey, Outcome], now: float
    ) -> int | None:
        """Index of the first starving gang that waits for room while a later one goes ahead."""
        for index, waiting in enumerate(ready):
            outcome = outcomes[waiting.key]
            if (
                isinstance(outcome, Wait)
                and outcome.kind != "Quota"
                and now - waiting.since > self.starvation_seconds
            ):
                later = ready[index + 1 :]
                if any(not isinstance(outcomes[w.key], Wait) for w in later):
                    return index
                return None
        return None

    # ------------------------------------------------------------------ facts of a cycle
    def _gang(
        self,
        waiting: Waiting,
        owner: Mapping[str, str],
        levels: Sequence[str],
        eligibility: MutableMapping[Signature, tuple[str, ...]],
        allowed_nodes: dict[frozenset[Signature], frozenset[str]],
        without_gpus: dict[tuple[str, bool], frozenset[str] | None],
    ) -> WaitingGang:
        required = waiting.required()
        requests = {d.pod_name: d.requests for d in required}
        usage = waiting.usage
        asks_gpus = usage.get(GPUS, 0) > 0
        preference = (waiting.gpu_resource, asks_gpus)
        if preference not in without_gpus:  # the same few answers for every gang of a cycle
            without_gpus[preference] = gpu_free_nodes(
                usage,
                waiting.gpu_resource,
                ((view.name, view.allocatable) for view in self.nodes.values()),
            )
        preferred = without_gpus[preference]
        signatures = frozenset(demand.signature for demand in required)
        allowed = allowed_nodes.get(signatures)
        if allowed is None:  # hundreds of waiting gangs share a few distinct constraint sets
            found: set[str] | None = None
            for signature in signatures:
                nodes = self._eligible(signature, eligibility)
                found = set(nodes) if found is None else found & set(nodes)
            allowed = allowed_nodes[signatures] = frozenset(found or ())
        blocked = next((d for d in required if not eligibility[d.signature]), None)
        no_node = None if blocked is None else no_eligible_node(blocked, list(self.nodes.values()))
        extras = tuple(
            OptionalPod(d.pod_name, d.requests, self._eligible(d.signature, eligibility))
            for d in waiting.demands[len(required) :]
        )
        return WaitingGang(
            key=waiting.key,
            team=owner.get(waiting.key[0]),
            priority=waiting.priority,
            created=waiting.created,
            pods=tuple(d.pod_name for d in required),
            requests=requests,
            usage=usage,
            shape=shape_of(
                requests.values(),
                one_per_node=any(d.host_ports for d in required),
                allowed=allowed,
                preferred=preferred,
            ),
            topology=job_topology(waiting.topology_level, waiting.topology_required, levels),
            preempts=waiting.preempts,
            extras=extras,
            where=pool_of(required[0]) if required else "in the cluster",
            gpu_resource=waiting.gpu_resource,
            no_node=no_node,
        )

    def _eligible(
        self, signature: Signature, eligibility: MutableMapping[Signature, tuple[str, ...]]
    ) -> tuple[str, ...]:
        """The nodes that admit ``signature`` (computed once per cycle)."""
        if signature not in eligibility:
            eligibility[signature] = eligible_nodes(signature, self.nodes.values())
        return eligibility[signature]

    # ------------------------------------------------------------------ applying outcomes

    def _admit(self, waiting: Waiting, nodes: Mapping[str, str], now: float) -> None:
        del self.waiting[waiting.key]
        placed = dict(nodes)
        by_name = {d.pod_name: d for d in waiting.demands}
        self.reservations[waiting.key] = Reservation(
            uid=waiting.uid,
            nodes=placed,
            requests={pod: by_name[pod].requests for pod in placed},
            since=now,
            waited=now - waiting.since,
        )
        self.admitted_at[waiting.key] = self.wall_clock()
        self.on_admit(now - waiting.since)
        log.info(
            "admitted %s/%s onto %d node(s) after %.2fs",
            waiting.key[0],
            waiting.key[1],
            len(set(placed.values())),
            now - waiting.since,
            extra={"job": "/".join(waiting.key)},
        )
        self.on_admit_job(waiting.key)

    def _preempt(self, waiting: Waiting, outcome: Preempt, now: float) -> None:
        del self.waiting[waiting.key]
        by_name = {d.pod_name: d for d in waiting.demands}
        pods = frozenset(
            pod for victim in outcome.victims for pod in self.ledger.gangs.get(victim, ())
        )
        self.holds[waiting.key] = Hold(
            reservation=Reservation(
                uid=waiting.uid,
                nodes=dict(outcome.nodes),
                requests={pod: by_name[pod].requests for pod in outcome.nodes},
                since=now,
                waited=now - waiting.since,
            ),
            victims=outcome.victims,
            victim_pods=pods,
            waiting=waiting,
        )
        log.info(
            "%s/%s preempts %s",
            *waiting.key,
            ", ".join("/".join(v) for v in outcome.victims),
            extra={"job": "/".join(waiting.key)},
        )
        for victim in outcome.victims:
            self.evicting[victim] = waiting.key
            self.reservations.pop(victim, None)
            self.on_reason(victim)
        self.on_reason(waiting.key)

    def _release_holds(self, now: float) -> list[JobKey]:
        """Holds whose victims' pods are all gone become reservations; stuck ones are given up."""
        released = []
        for key, hold in list(self.holds.items()):
            left = [pod for pod in hold.victim_pods if pod in self.ledger.pods]
            if left:
                if self._stuck(left):
                    self._give_up(key, hold, left)
                continue
            del self.holds[key]
            self.reservations[key] = hold.reservation
            self.admitted_at[key] = self.wall_clock()
            self.on_admit(hold.reservation.waited + now - hold.reservation.since)
            released.append(key)
            self.on_admit_job(key)
        return released

    def _stuck(self, pods: Sequence[PodKey]) -> bool:
        """Whether every pod was deleted and is still there ``stuck_seconds`` past its time."""
        late = self.wall_clock() - self.stuck_seconds
        for pod in pods:
            member = self.ledger.members.get(pod)
            if member is None or member.gone_by is None or member.gone_by > late:
                return False
        return True

    def _give_up(self, key: JobKey, hold: Hold, stuck: Sequence[PodKey]) -> None:
        """The victims' pods do not go away: the preemptor is decided again without them."""
        del self.holds[key]
        waiting = hold.waiting
        waiting.reported_kind = waiting.reported_reason = waiting.reported_at = None
        self.waiting[key] = waiting
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

    def _still_waiting(self, waiting: Waiting, outcome: Wait, now: float) -> None:
        # The free counts in the message change with every pod; rewriting the status of every
        # waiting job on each change would flood the apiserver, so refreshes are throttled (a new
        # kind of obstacle is reported at once). The message is phrased only when it may be
        # reported: explaining a shortfall walks the gang's nodes.
        kind = outcome.kind
        stale = (
            waiting.reported_at is None
            or now - waiting.reported_at >= self.reason_refresh_seconds
            or waiting.reported_kind != kind
        )
        if not stale:
            return
        message = outcome.message
        log.debug("%s/%s waits (%s): %s", *waiting.key, kind, message)
        if waiting.reported_reason == message and waiting.reported_kind == kind:
            return
        waiting.reported_at = now
        waiting.reported_reason = message
        waiting.reported_kind = kind
        self.on_reason(waiting.key)

"""Backfill that never delays the gangs at the head of the queue (conservative backfill).

Why: without reservations, a gang that does not fit lets every smaller gang behind it start
first. When a wave of gangs ends over a second or two, the first nodes freed go to small gangs
and the large gangs at the head wait for the next wave: on the cluster, knavigator's gang burst
took 300 s against its optimum of 270 s with backfill (274 s without), and the burst benchmark
1.14-1.25 x its optimum. Reservations make each of the first waiting gangs start the earliest
its nodes can free up, and let other gangs use those nodes only when they are sure to be gone by
then, as Slurm's and Maui's backfill do. Reserving for one gang only (EASY backfill) still lets
small gangs take the nodes the *second* gang needs the moment they free, which costs knavigator's
exactly packed waves a whole wave; so the first ``MAX_RESERVATIONS`` waiting gangs get one each.

What a gang's end is: its job's ``runPolicy.activeDeadlineSeconds``, which torchgate enforces
(the job fails and its pods are deleted at that deadline, ``job.plan``), so it is a promise, not
a guess. A running gang's latest end is ``Admitted.ends_by``; a waiting gang's run limit is
``WaitingGang.run_limit``; either is ``None`` when the job sets no deadline.

Rules, applied by ``decide`` to every gang in admission order through ``Reservations.decide``:

1. A gang *waits for room* when it waits for ``Capacity`` or ``Topology`` and some node may take
   it (a gang waiting for quota gains nothing from nodes). Each of the first
   ``MAX_RESERVATIONS`` such gangs of a cycle is given a reservation when one exists (rule 2);
   reservations are made again each cycle from the facts of that cycle.
2. A gang's reservation (``reserve``) is the earliest time ``at`` at which it fits on the nodes
   no earlier reservation holds, if every running gang whose ``ends_by`` is known and no later
   than ``at`` had ended, and the nodes it would be placed on then (``place_topology``). When it
   would not fit even with every such gang gone, it gets none (the admitter's starvation guard
   is then what keeps it from waiting forever).
3. Every later gang is decided without the free room of the reserved nodes, so none is placed
   on them, except
4. a gang that ends before the earliest reservation: ``now + run_limit + START_SLACK_SECONDS <=
   at`` (its deadline counts from its start, which comes after its pods are created and bound).
   It is decided with that room given back, and whatever it leaves free there is withheld
   again. A gang with no run limit never gets the room.

No gang's reservation is delayed by a later gang: rule 3 keeps later gangs off the reserved
nodes, rule 4 lets on only gangs gone before any reservation starts, and rule 2 reserves a gang
only nodes no earlier reservation holds. A later gang that preempts lower-priority gangs may
still free and use reserved nodes (their victims' room is not reserved room); the reserved gangs,
decided first, could have preempted them themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import (
    Capacity,
    Mixed,
    Shape,
    TopologyPlacement,
    place_topology,
)
from torchgate.pytorchjob.pool import TopologyRequest

# Seconds between a gang's admission and the start its deadline counts from (pods created,
# bound and started), with room to spare: rule 4 asks a backfilled gang to end this much earlier.
START_SLACK_SECONDS = 5.0
# Rule 1: how many waiting gangs of a cycle get a reservation (each costs up to one placement
# per distinct end of the running gangs).
MAX_RESERVATIONS = 8


class WaitingGang(Protocol):
    """What these rules read of a waiting gang.

    ``decide.WaitingGang`` is one; naming it here instead keeps this module, which ``decide``
    calls, from depending on ``decide`` in turn.
    """

    @property
    def pods(self) -> tuple[str, ...]:
        """Pod names in rank order."""

    @property
    def shape(self) -> Shape:
        """What one pod needs of a node."""

    @property
    def mixed(self) -> Mixed | None:
        """Its lead pods and the others when its pods have several shapes."""

    @property
    def topology(self) -> TopologyRequest:
        """The level it requires or prefers."""

    @property
    def no_node(self) -> str | None:
        """Why no node may take one of its pods, if so."""

    @property
    def run_limit(self) -> float | None:
        """Seconds it may run once started, if known (rule 4)."""


GangT = TypeVar("GangT", bound=WaitingGang)
OutcomeT = TypeVar("OutcomeT")


@dataclass(frozen=True, slots=True)
class Reservation:
    """Where a waiting gang goes and from when (rule 2)."""

    at: float
    nodes: frozenset[str]


def reserve(
    capacity: Capacity,
    gang: WaitingGang,
    ending: Sequence[Admitted],
    reserved: Collection[str] = frozenset(),
) -> Reservation | None:
    """Rule 2: the earliest time ``gang`` fits as the ``ending`` gangs leave, and where.

    ``ending``: the running gangs with a known end, in order of it. Their pods on ``reserved``
    nodes are not given back (those nodes are an earlier reservation's). The gangs are given
    back to ``capacity`` while the gang is tried, and taken again before returning, so
    ``capacity`` is left as it was.
    """
    given: list[tuple[dict[str, str], dict[str, dict[str, int]]]] = []
    try:
        for index, gone in enumerate(ending):
            requests = gone.requests or {}
            nodes = {p: n for p, n in (gone.nodes or {}).items() if n not in reserved}
            pods = {p: dict(requests.get(p) or {}) for p in nodes}
            capacity.give(nodes, pods)
            given.append((nodes, pods))
            if index + 1 < len(ending) and ending[index + 1].ends_by == gone.ends_by:
                continue  # every gang ending at the same time first
            placed = place_topology(capacity, gang.pods, gang.shape, gang.topology, gang.mixed)
            if isinstance(placed, TopologyPlacement):
                assert gone.ends_by is not None
                return Reservation(gone.ends_by, frozenset(placed.nodes.values()))
        return None
    finally:
        for nodes, pods in given:
            capacity.take(nodes, pods)


class Reservations:
    """The cycle's reservations for its first waiting gangs, kept while ``decide`` goes down.

    Withholding is done on the cycle's own capacity: each reserved node's free room is taken as
    if by a pod named ``RESERVED_POD_PREFIX + node``, and given back around a gang of rule 4.
    When no running gang has a known end, nothing can be reserved (rule 2) and each gang is
    decided as it is, at no cost per gang beyond that.
    """

    RESERVED_POD_PREFIX = "reserved/"

    def __init__(self, capacity: Capacity, running: Sequence[Admitted], now: float) -> None:
        """Over the cycle's ``capacity`` and the gangs holding capacity before it, at ``now``."""
        self.capacity = capacity
        self.running = running
        self.now = now
        self.made: list[Reservation] = []
        self._ending: list[Admitted] | None = None
        self._tried = 0
        self._nodes: dict[str, str] = {}
        self._held: dict[str, dict[str, int]] = {}

    def decide(self, gang: GangT, decide_one: Callable[[GangT], OutcomeT]) -> OutcomeT:
        """``decide_one(gang)`` under rules 3 and 4; then rules 1 and 2 if the gang waits."""
        if not self._ending_gangs():
            return decide_one(gang)  # no running gang has a known end: nothing to reserve
        if self.made and gang.run_limit is not None and self._ends_in_time(gang.run_limit):
            self.capacity.give(self._nodes, self._held)  # rule 4
            self._nodes, self._held = {}, {}
            try:
                outcome = decide_one(gang)
            finally:
                self._withhold()
        else:
            outcome = decide_one(gang)  # rule 3 (when anything is reserved)
        if self._tried < MAX_RESERVATIONS and _waits_for_room(gang, outcome):
            self._tried += 1
            reserved = frozenset(node for r in self.made for node in r.nodes)
            found = reserve(self.capacity, gang, self._ending_gangs(), reserved)
            if found is not None:
                self.made.append(found)
                self._withhold()
        return outcome

    def _ends_in_time(self, run_limit: float) -> bool:
        """Rule 4: the gang is gone before the earliest reservation starts."""
        earliest = min(r.at for r in self.made)
        return self.now + run_limit + START_SLACK_SECONDS <= earliest

    def _ending_gangs(self) -> list[Admitted]:
        """The running gangs with a known end, in order of it (sorted once per cycle)."""
        if self._ending is None:
            self._ending = sorted(
                (a for a in self.running if a.ends_by is not None and a.nodes and a.requests),
                key=lambda a: a.ends_by or 0.0,
            )
        return self._ending

    def _withhold(self) -> None:
        """Take whatever is free on the reserved nodes now out of the cycle's capacity."""
        index, free = self.capacity.topology.index, self.capacity.free
        taken_nodes: dict[str, str] = {}
        taken: dict[str, dict[str, int]] = {}
        for node in sorted({node for r in self.made for node in r.nodes}):
            room = {k: v for k, v in free[index[node]].items() if v > 0}
            if room:
                pod = self.RESERVED_POD_PREFIX + node
                taken_nodes[pod], taken[pod] = node, room
        self.capacity.take(taken_nodes, taken)
        for pod, room in taken.items():
            self._nodes[pod] = taken_nodes[pod]
            held = self._held.setdefault(pod, {})
            for key, amount in room.items():
                held[key] = held.get(key, 0) + amount


def _waits_for_room(gang: WaitingGang, outcome: object) -> bool:
    """Rule 1: the gang waits for room (capacity or topology), and some node may take it."""
    kind = getattr(outcome, "kind", None)
    return kind in ("Capacity", "Topology") and gang.no_node is None

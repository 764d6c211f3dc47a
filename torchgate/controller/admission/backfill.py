"""Backfill that never delays the gang at the head of the queue (EASY backfill).

Why: without a reservation, a gang that does not fit lets every smaller gang behind it start
first. When a wave of gangs ends over a second or two, the first nodes freed go to small gangs
and the large gang at the head waits for the next wave: on the cluster the burst benchmark took
1.14-1.25 x its optimum with backfill, a whole wave longer than the cycle alone decided. A
reservation makes the head's start the earliest its nodes can free up, and lets other gangs use
those nodes only when they are sure to be gone by then, as Slurm's and Maui's backfill do.

What a gang's end is: its job's ``runPolicy.activeDeadlineSeconds``, which torchgate enforces
(the job fails and its pods are deleted at that deadline, ``job.plan``), so it is a promise, not
a guess. A running gang's latest end is ``Admitted.ends_by``; a waiting gang's run limit is
``WaitingGang.run_limit``; either is ``None`` when the job sets no deadline.

Rules, applied by ``decide`` to every gang in admission order through ``HeadReservation.decide``:

1. The head is the first gang of the cycle that waits for ``Capacity`` or ``Topology`` (a gang
   waiting for quota gains nothing from nodes, and one no node may take never fits). There is
   at most one reservation per cycle; it is made again each cycle from the facts of that cycle.
2. Its reservation (``reserve``) is the earliest time ``at`` at which it fits if every running
   gang whose ``ends_by`` is known and no later than ``at`` had ended, and the nodes it would be
   placed on then (``topology.place_topology``). When it would not fit even with every such
   gang gone, nothing is reserved and later gangs are decided as without this module (the
   admitter's starvation guard is then what keeps it from waiting forever).
3. Every later gang is decided without the free room of the reserved nodes, so none is placed
   on them, except
4. a gang that ends before ``at``: ``now + run_limit + START_SLACK_SECONDS <= at`` (its deadline
   counts from its start, which comes after the pods are created and bound). It is decided
   with that room given back, and whatever it leaves free there is withheld again. A gang with
   no run limit never gets the room.

A later gang that preempts lower-priority gangs may still free and use reserved nodes (their
victims' room is not reserved room); the head, decided first, could have taken them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import Capacity, TopologyPlacement, place_topology

if TYPE_CHECKING:
    from torchgate.controller.admission.decide import Outcome, WaitingGang

# Seconds between a gang's admission and the start its deadline counts from (pods created,
# bound and started), with room to spare: rule 4 asks a backfilled gang to end this much earlier.
START_SLACK_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Reservation:
    """Where the head gang goes and from when (rule 2)."""

    at: float
    nodes: frozenset[str]


def reserve(
    capacity: Capacity, gang: WaitingGang, running: Sequence[Admitted]
) -> Reservation | None:
    """Rule 2: the earliest time the head fits as gangs with a known end leave, and where.

    The gangs are given back to ``capacity`` in order of their ends while the head is tried,
    and taken again before returning, so ``capacity`` is left as it was.
    """
    ending = sorted(
        (a for a in running if a.ends_by is not None and a.nodes and a.requests),
        key=lambda a: a.ends_by or 0.0,
    )
    given: list[Admitted] = []
    try:
        for index, gone in enumerate(ending):
            capacity.give(gone.nodes or {}, gone.requests or {})
            given.append(gone)
            if index + 1 < len(ending) and ending[index + 1].ends_by == gone.ends_by:
                continue  # every gang ending at the same time first
            placed = place_topology(capacity, gang.pods, gang.shape, gang.topology)
            if isinstance(placed, TopologyPlacement):
                assert gone.ends_by is not None
                return Reservation(gone.ends_by, frozenset(placed.nodes.values()))
        return None
    finally:
        for gone in given:
            capacity.take(gone.nodes or {}, gone.requests or {})


class HeadReservation:
    """The cycle's reservation for its head gang, kept while ``decide`` goes down the queue.

    Withholding is done on the cycle's own capacity: the reserved nodes' free room is taken as
    if by pods named ``RESERVED_POD_PREFIX + node``, and given back around a gang of rule 4.
    """

    RESERVED_POD_PREFIX = "reserved-for-head/"

    def __init__(self, capacity: Capacity, running: Sequence[Admitted], now: float) -> None:
        """Over the cycle's ``capacity`` and the gangs holding capacity before it, at ``now``."""
        self.capacity = capacity
        self.running = running
        self.now = now
        self.reservation: Reservation | None = None
        self._tried = False
        self._nodes: dict[str, str] = {}
        self._held: dict[str, dict[str, int]] = {}

    def decide(
        self, gang: WaitingGang, decide_one: Callable[[WaitingGang], Outcome | None]
    ) -> Outcome | None:
        """``decide_one(gang)`` under rules 1, 3 and 4; then rule 2 when the gang is the head."""
        reservation = self.reservation
        if reservation is None:
            outcome = decide_one(gang)
            if not self._tried and _is_head(gang, outcome):
                self._tried = True
                self.reservation = reserve(self.capacity, gang, self.running)
                if self.reservation is not None:
                    self._withhold()
            return outcome
        if gang.run_limit is None or (
            self.now + gang.run_limit + START_SLACK_SECONDS > reservation.at
        ):
            return decide_one(gang)  # rule 3
        self.capacity.give(self._nodes, self._held)  # rule 4
        try:
            return decide_one(gang)
        finally:
            self._withhold()

    def _withhold(self) -> None:
        """Take whatever is free on the reserved nodes now out of the cycle's capacity."""
        assert self.reservation is not None
        index, free = self.capacity.topology.index, self.capacity.free
        self._nodes, self._held = {}, {}
        for node in sorted(self.reservation.nodes):
            room = {k: v for k, v in free[index[node]].items() if v > 0}
            if room:
                pod = self.RESERVED_POD_PREFIX + node
                self._nodes[pod] = node
                self._held[pod] = room
        self.capacity.take(self._nodes, self._held)


def _is_head(gang: WaitingGang, outcome: Outcome | None) -> bool:
    """Rule 1: the gang waits for room (capacity or topology), and some node may take it."""
    kind = getattr(outcome, "kind", None)
    return kind in ("Capacity", "Topology") and gang.no_node is None

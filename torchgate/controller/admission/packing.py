"""Filling a freed wave: which of the first waiting gangs start now when not all of them fit.

Why: when gangs of one run time are started together they end together, so the pool frees in
waves, and how many waves a queue takes is a bin-packing question. Deciding gangs one by one in
admission order (first fit) leaves holes a later gang would have filled: on the burst benchmark
(24 gangs of 1-32 whole-node pods, equal run times) first fit took 9 waves where 8 were enough,
1.04 x the optimum on average over 200 bursts and 61 of them beyond 1.05 x. Choosing, among the
first ``PACKING_WINDOW`` waiting gangs, the ones that fill the free room best brings that to
1.004 x (7 beyond 1.05 x); a wider window costs more and gains little.

Rules, applied once per cycle by ``decide`` before it decides any gang (``held_back``):

1. The *window* is the first ``PACKING_WINDOW`` waiting gangs in admission order, the head first.
   It is packed only when every gang of it has the head's pod shape and run limit (a known
   ``run_limit``, equal for all: gangs that end together), none has optional pods, the head fits
   the free room now and the window does not (``_window``). Otherwise nothing is held back and
   the cycle is first fit, as without this module.
2. Room is counted in slots of that shape over the whole pool (``Capacity.slots``); a gang needs
   one slot per pod.
3. The chosen gangs (``choose``) are the head and the subset of the rest of the window that fills
   the most room; among equal fills, the one whose sizes, largest first, are largest (a large
   gang is the hard one to fit later); among equal sizes, the earlier gangs.
4. The choice is kept only when, followed by first fit over the gangs after the window, it fills
   at least as much room as first fit over the whole queue would (``_first_fit``); otherwise
   nothing is held back.
5. The gangs of the window not chosen are *held back*: they wait this cycle (``Capacity``,
   ``HELD_BACK``) without being decided or given a reservation, and are decided afresh by the
   next cycle.
6. A wave is decided once it has freed (``wave_freeing``, only when the admitter asks it, for a
   bounded time): while the first waiting gangs are alike (rule 1's shape and run limit), some
   room is free and a running gang is due to end (its ``ends_by``) within half that run limit,
   every gang waits (``WAVE_HELD``). On a cluster the gangs of one wave end a second or so
   apart; a cycle on the part freed so far would fill it with whatever fits and strand the large
   gangs the whole wave would take (the burst simulation with ends spread over 1 s: 1.09 x its
   optimum without, 1.04 x with).

Invariants: the head is never held back (rule 3), and it fits (rule 1), so it starts when first
fit would have started it. Counting slots is exact for whole-node pods; where it is not (a
required topology level, pods sharing nodes, quota), ``decide`` checks that every chosen gang was
admitted and decides the cycle again without holding back otherwise, so no cycle admits fewer
gangs of the window than first fit would because of this rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from torchgate.controller.admission.topology import ROOT, Capacity, OptionalPod, Shape
from torchgate.pytorchjob.names import JobKey

# Rule 1: how many waiting gangs, from the head, are packed together (the choice looks at
# up to 2 ** (PACKING_WINDOW - 1) subsets, bounded by the room).
PACKING_WINDOW = 12
# Rule 5: what a held-back gang's Queued condition says.
HELD_BACK = "waiting: the free room is filled better by other gangs among the first in the queue"
# Rule 6: what every gang's Queued condition says while a freed wave is awaited.
WAVE_HELD = "waiting for the rest of a freed wave: gangs as long as the first waiting ones end now"


class WaitingGang(Protocol):
    """What these rules read of a waiting gang (``decide.WaitingGang`` is one)."""

    @property
    def key(self) -> JobKey:
        """``(namespace, name)``."""

    @property
    def pods(self) -> tuple[str, ...]:
        """Pod names in rank order."""

    @property
    def shape(self) -> Shape:
        """What one pod needs of a node."""

    @property
    def extras(self) -> tuple[OptionalPod, ...]:
        """Pods beyond ``minAvailable``."""

    @property
    def run_limit(self) -> float | None:
        """Seconds it may run once started, if known."""


def held_back(capacity: Capacity, ordered: Sequence[WaitingGang]) -> frozenset[JobKey]:
    """The gangs of the window that wait this cycle (rules 1-5); ``ordered`` in admission order."""
    window = _window(capacity, ordered)
    if window is None:
        return frozenset()
    room = capacity.slots(ordered[0].shape).domains[ROOT]
    sizes = [len(gang.pods) for gang in window]
    later = [len(gang.pods) for gang in ordered[len(window) :] if _alike(gang, ordered[0])]
    chosen = choose(room, sizes)
    picked = sum(sizes[i] for i in chosen)
    if picked + _first_fit(room - picked, later) < _first_fit(room, sizes + later):  # rule 4
        return frozenset()
    return frozenset(gang.key for i, gang in enumerate(window) if i not in chosen)


def wave_freeing(
    capacity: Capacity, ordered: Sequence[WaitingGang], ends: Iterable[float], now: float
) -> bool:
    """Rule 6: whether part of a freed wave is still running (``ends``: the known ends)."""
    window = _alike_window(ordered)
    if window is None:
        return False
    head = window[0]
    limit = head.run_limit
    if limit is None or capacity.slots(head.shape).domains[ROOT] == 0:
        return False
    return any(end < now + limit / 2 for end in ends)


def choose(room: int, sizes: Sequence[int]) -> frozenset[int]:
    """Rule 3: indexes of ``sizes`` (the window, head first) to start in ``room`` slots.

    A subset sum over the room: for each fill reached, the best subset reaching it by rule 3's
    order, built item by item (adding the same gang to two subsets keeps their order).
    """
    head = sizes[0]
    best: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {head: ((-head,), (0,))}
    for index in range(1, len(sizes)):
        size = sizes[index]
        for fill, (largest, indexes) in list(best.items()):
            total = fill + size
            if total > room:
                continue
            candidate = (tuple(sorted((*largest, -size))), (*indexes, index))
            known = best.get(total)
            if known is None or candidate < known:
                best[total] = candidate
    return frozenset(best[max(best)][1])


def _window(capacity: Capacity, ordered: Sequence[WaitingGang]) -> Sequence[WaitingGang] | None:
    """Rule 1: the first gangs to pack, or ``None`` when first fit decides this cycle."""
    window = _alike_window(ordered)
    if window is None:
        return None
    head = window[0]
    room = capacity.slots(head.shape).domains[ROOT]
    if len(head.pods) > room or sum(len(gang.pods) for gang in window) <= room:
        return None
    return window


def _alike_window(ordered: Sequence[WaitingGang]) -> Sequence[WaitingGang] | None:
    """Rules 1 and 6: the first ``PACKING_WINDOW`` gangs when they are alike, else ``None``."""
    if len(ordered) < 2:
        return None
    head = ordered[0]
    window = ordered[:PACKING_WINDOW]
    if head.run_limit is None or not all(_alike(gang, head) for gang in window):
        return None
    return window


def _alike(gang: WaitingGang, head: WaitingGang) -> bool:
    """Same pod shape and run limit as the head, and no optional pods (rule 1)."""
    return gang.shape == head.shape and gang.run_limit == head.run_limit and not gang.extras


def _first_fit(room: int, sizes: Sequence[int]) -> int:
    """Slots first fit in this order fills of ``room`` (rule 4)."""
    used = 0
    for size in sizes:
        if used + size <= room:
            used += size
    return used

"""The best makespan a burst allows (pure): a lower bound, and the exact optimum by bin packing.

With one run time ``T`` for every gang the optimum is exact: rigid gangs of equal duration can
always be started at multiples of ``T`` (all gangs starting within one interval ``[kT, (k+1)T)``
run together at the latest of those starts, so they fit the pool at once), so the optimal
makespan is ``T`` times the fewest bins of pool nodes that hold the gang sizes, which ``min_bins``
finds by a small branch-and-bound (proven optimal when it ends within its node budget). With run
times that differ only ``lower_bound`` is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .workload import Job


def lower_bound(jobs: Sequence[Job], *, nodes: int) -> float:
    """``max(total node-seconds / nodes, longest gang)``: no schedule ends sooner."""
    work = sum(job.pods * job.seconds for job in jobs)
    return max(work / nodes, max(job.seconds for job in jobs))


@dataclass(frozen=True, slots=True)
class Bins:
    """The fewest bins found, the lower bound, and whether the search proved ``count`` optimal."""

    count: int
    bound: int
    proven: bool


def first_fit_decreasing(sizes: Sequence[int], capacity: int) -> int:
    """Bins used by first-fit decreasing (an upper bound)."""
    room: list[int] = []
    for size in sorted(sizes, reverse=True):
        for i, left in enumerate(room):
            if left >= size:
                room[i] -= size
                break
        else:
            room.append(capacity - size)
    return len(room)


def min_bins(sizes: Sequence[int], capacity: int, *, budget: int = 200_000) -> Bins:
    """The fewest bins of ``capacity`` holding ``sizes``, by branch and bound from FFD.

    Items go in decreasing order into an open bin (bins with equal room are one branch) or a new
    bin; a branch is cut when the bins used plus the items left (by volume) cannot beat the best.
    ``proven`` is ``False`` when the ``budget`` of search nodes ran out first.
    """
    if any(size > capacity for size in sizes):
        raise ValueError("an item is larger than a bin")
    items = sorted(sizes, reverse=True)
    bound = math.ceil(sum(items) / capacity)
    best = first_fit_decreasing(items, capacity)
    if best == bound:
        return Bins(best, bound, True)
    left_after = [sum(items[i:]) for i in range(len(items) + 1)]
    nodes = 0

    def search(index: int, room: list[int]) -> bool:
        nonlocal best, nodes
        nodes += 1
        if nodes > budget:
            return False
        if index == len(items):
            best = min(best, len(room))
            return True
        free = sum(room)
        if len(room) + math.ceil(max(0, left_after[index] - free) / capacity) >= best:
            return True
        size = items[index]
        tried: set[int] = set()
        for i, left in enumerate(room):
            if left >= size and left not in tried:
                tried.add(left)
                room[i] -= size
                finished = search(index + 1, room)
                room[i] += size
                if not finished:
                    return False
                if best == bound:
                    return True
        if len(room) + 1 < best:
            room.append(capacity - size)
            finished = search(index + 1, room)
            room.pop()
            if not finished:
                return False
        return True

    proven = search(0, [])
    return Bins(best, bound, proven or best == bound)

"""A de-duplicating, keyed work queue with per-key exclusivity, delays, backoff and two lanes.

The controller-runtime work queue's contract, in asyncio: a key is queued at most once however
many events arrive for it; a key being processed is never handed to a second worker — an add
during processing marks it dirty and it is queued again when the worker is done; ``add_after``
keeps the earliest pending timer per key; ``add_rate_limited`` backs off exponentially per key
until ``forget``. Reconcilers are level-triggered, so collapsing events loses nothing.

Lanes: with a thousand jobs in flight, a plain FIFO makes the reconcile that frees a finished
job's GPUs wait behind hundreds of routine ones. Keys are added to the ``URGENT`` lane (a pod
ended: GPUs may be released or a gang restarted) or the ``NORMAL`` lane; workers drain the urgent
lane first, and some workers take only urgent keys. A key added to the urgent lane while it waits
in the normal one moves up. (When a job's status is written is not the queue's business: see
``job.writes``.)

Waking: an add wakes exactly one idle worker that may take the key's lane, never all of them
(each idle worker waits on a future of its own). Waking every idle worker for each of a few
hundred pod events a second, to have all but one go back to sleep, would spend the CPU the
apiserver on the same machine needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

URGENT, NORMAL = 0, 1


class ShutDown(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue(Generic[K]):
    """Keys to reconcile, handed to one worker at a time."""

    def __init__(
        self,
        *,
        base_delay: float = 0.05,
        max_delay: float = 60.0,
    ) -> None:
        self._lanes: tuple[deque[K], ...] = (deque(), deque())
        self._queued: dict[K, int] = {}  # key -> the lane it waits in
        self._processing: set[K] = set()
        self._dirty: dict[K, int] = {}
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[K, int] = {}
        # Idle workers, oldest first: (the slowest lane it takes, the future that wakes it).
        self._idle: deque[tuple[int, asyncio.Future[int]]] = deque()
        self._shutdown = False
        self.base_delay = base_delay
        self.max_delay = max_delay

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: K, lane: int = NORMAL) -> None:
        """Queue ``key`` now (no-op if already queued; deferred if it is being processed)."""
        if self._shutdown:
            return
        if key in self._processing:
            self._dirty[key] = min(lane, self._dirty.get(key, lane))
            return
        current = self._queued.get(key)
        if current is None or lane < current:
            self._queued[key] = lane
            self._lanes[lane].append(key)  # an entry left in a slower lane is skipped later
            self._wake_one(lane)

    def _wake_one(self, lane: int) -> None:
        """Wake the longest-idle worker that takes keys of ``lane``, if any is idle."""
        for index, (max_lane, waiter) in enumerate(self._idle):
            if max_lane >= lane and not waiter.done():
                del self._idle[index]
                waiter.set_result(lane)
                return

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds, unless an earlier timer is already set."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= when:
                return
            current[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: K) -> float:
        """Queue ``key`` after its exponential backoff; return the delay used."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = float(min(self.base_delay * 2.0**failures, self.max_delay))
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff after a success."""
        self._failures.pop(key, None)

    async def get(self, max_lane: int = NORMAL) -> K:
        """The next key from lanes up to ``max_lane``; call ``done(key)`` when finished."""
        while True:
            for lane, waiting in enumerate(self._lanes[: max_lane + 1]):
                while waiting:
                    key = waiting.popleft()
                    if self._queued.get(key) == lane:
                        del self._queued[key]
                        self._processing.add(key)
                        return key
            if self._shutdown:
                raise ShutDown
            waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            entry = (max_lane, waiter)
            self._idle.append(entry)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one(waiter.result())  # pass the wakeup on: its key still waits
                raise
            finally:
                # Woken waiters were taken off the idle list by whoever woke them; a cancelled
                # one is still on it.
                if waiter.cancelled() or not waiter.done():
                    waiter.cancel()
                    with contextlib.suppress(ValueError):
                        self._idle.remove(entry)

    def done(self, key: K) -> None:
        """Mark ``key`` processed; re-queue it if events arrived meanwhile."""
        self._processing.discard(key)
        lane = self._dirty.pop(key, None)
        if lane is not None:
            self.add(key, lane)

    def shut_down(self) -> None:
        """Stop handing out keys; waiting workers get ``ShutDown``."""
        self._shutdown = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for waiting in self._lanes:
            waiting.clear()
        self._queued.clear()
        while self._idle:
            _, waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(NORMAL)

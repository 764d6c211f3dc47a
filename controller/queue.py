"""A de-duplicating, keyed work queue with per-key exclusivity, delays and backoff.

The controller-runtime work queue's contract, in asyncio: a key is queued at most once however
many events arrive for it; a key being processed is never handed to a second worker — an add
during processing marks it dirty and it is queued again when the worker is done; ``add_after``
keeps the earliest pending timer per key; ``add_rate_limited`` backs off exponentially per key
until ``forget``. Reconcilers are level-triggered, so collapsing events loses nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue(Generic[K]):
    """Keys to reconcile, handed to one worker at a time."""

    def __init__(self, *, base_delay: float = 0.05, max_delay: float = 60.0) -> None:
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[K, int] = {}
        self._wakeup = asyncio.Event()
        self._shutdown = False
        self.base_delay = base_delay
        self.max_delay = max_delay

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: K) -> None:
        """Queue ``key`` now (no-op if already queued; deferred if it is being processed)."""
        if self._shutdown:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._wakeup.set()

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

    def failures(self, key: K) -> int:
        """How many times in a row ``key`` failed."""
        return self._failures.get(key, 0)

    async def get(self) -> K:
        """The next key; the caller must call ``done(key)`` when finished."""
        while not self._queue:
            if self._shutdown:
                raise ShutDown
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        """Mark ``key`` processed; re-queue it if events arrived meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shut_down(self) -> None:
        """Stop handing out keys; waiting workers get ``ShutDown``."""
        self._shutdown = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._queue.clear()
        self._queued.clear()
        self._wakeup.set()

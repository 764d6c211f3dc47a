"""The work queue's contract: dedupe, one worker per key, delays, backoff, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from controller.queue import LOW, URGENT, ShutDown, WorkQueue


async def test_a_key_is_queued_once_however_many_events_arrive() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_an_add_during_processing_requeues_after_done_never_twice_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # an event while a worker holds the key
    assert len(queue) == 0, "the key must not be handed to a second worker"
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_add_after_keeps_the_earliest_timer() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 10)
    queue.add_after("a", 0.01)
    queue.add_after("a", 5)
    assert await asyncio.wait_for(queue.get(), timeout=1) == "a"


async def test_rate_limited_adds_back_off_exponentially_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.04)
    delays = [queue.add_rate_limited("a") for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    queue.forget("a")
    assert queue.add_rate_limited("a") == 0.01


async def test_shutdown_releases_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.shut_down()
    with pytest.raises(ShutDown):
        await waiter


async def test_urgent_keys_jump_the_queue_and_low_ones_wait() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("reason", LOW)
    queue.add("routine")
    queue.add("released", URGENT)
    queue.add("routine", URGENT)  # moves up; its old place is skipped
    got = [await queue.get() for _ in range(4 - 1)]
    assert got == ["released", "routine", "reason"]
    assert len(queue) == 0


async def test_a_dirty_key_keeps_its_most_urgent_lane() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    key = await queue.get()
    queue.add(key, URGENT)
    queue.done(key)
    assert await queue.get() == "a", "re-queued urgently, ahead of b"

"""The work queue's contract: dedupe, one worker per key, delays, backoff, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from torchgate.controller.queue import NORMAL, URGENT, ShutDown, WorkQueue


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


async def test_urgent_keys_jump_the_queue() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("routine")
    queue.add("other")
    queue.add("released", URGENT)
    queue.add("other", URGENT)  # moves up; its old place is skipped
    got = [await queue.get() for _ in range(3)]
    assert got == ["released", "other", "routine"]
    assert len(queue) == 0


async def test_a_dirty_key_keeps_its_most_urgent_lane() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    key = await queue.get()
    queue.add(key, URGENT)
    queue.done(key)
    assert await queue.get() == "a", "re-queued urgently, ahead of b"


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_an_add_resumes_one_idle_worker_and_the_others_stay_asleep() -> None:
    queue: WorkQueue[str] = WorkQueue()
    workers = [asyncio.create_task(queue.get()) for _ in range(20)]
    await settle()
    queue.add("admitted-job")
    await settle()
    done = [w for w in workers if w.done()]
    assert [w.result() for w in done] == ["admitted-job"]
    assert len(queue._idle) == 19, "the 19 idle workers still wait on their own futures"
    for worker in workers:
        worker.cancel()


async def test_an_add_wakes_only_a_worker_that_takes_its_lane() -> None:
    queue: WorkQueue[str] = WorkQueue()
    urgent_only = asyncio.create_task(queue.get(URGENT))
    await settle()
    any_lane = asyncio.create_task(queue.get())
    await settle()
    queue.add("routine")
    assert await asyncio.wait_for(any_lane, 1) == "routine"
    await settle()
    assert not urgent_only.done(), "an urgent-only worker is not handed a routine key"
    queue.add("released", URGENT)
    assert await asyncio.wait_for(urgent_only, 1) == "released"


async def test_a_woken_worker_cancelled_before_it_runs_passes_the_wakeup_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    await settle()
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("job")  # wakes the longest idle worker...
    first.cancel()  # ...which is cancelled before it takes the key
    assert await asyncio.wait_for(second, 1) == "job"
    assert first.cancelled()


async def test_shutdown_releases_every_idle_worker_of_every_lane() -> None:
    queue: WorkQueue[str] = WorkQueue()
    workers = [
        asyncio.create_task(queue.get(URGENT)),
        asyncio.create_task(queue.get(NORMAL)),
    ]
    await settle()
    queue.shut_down()
    for worker in workers:
        with pytest.raises(ShutDown):
            await asyncio.wait_for(worker, 1)

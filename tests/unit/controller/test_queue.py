"""The work queue's contract: dedupe, one worker per key, delays, backoff, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from torchgate.controller.queue import LOW, NORMAL, URGENT, ShutDown, WorkQueue


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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_held_low_keys_wait_until_the_hold_ends() -> None:
    queue: WorkQueue[str] = WorkQueue(hold_recheck=0.01)
    busy = True
    queue.add("waiting-job", LOW)
    getter = asyncio.create_task(queue.get(LOW, hold_low=lambda: busy))
    await asyncio.sleep(0.05)
    assert not getter.done(), "a low key is not handed out while the hold is on"
    queue.add("admitted-job")
    assert await asyncio.wait_for(getter, 1) == "admitted-job", "other lanes are not held"
    getter = asyncio.create_task(queue.get(LOW, hold_low=lambda: busy))
    await asyncio.sleep(0.05)
    assert not getter.done()
    busy = False  # no add wakes the worker: the hold ends on its own
    assert await asyncio.wait_for(getter, 1) == "waiting-job"


async def test_a_low_key_is_held_at_most_low_max_hold() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(low_max_hold=20, hold_recheck=0.01, clock=clock)
    queue.add("old", LOW)
    clock.now += 5
    queue.add("new", LOW)
    getter = asyncio.create_task(queue.get(LOW, hold_low=lambda: True))
    await asyncio.sleep(0.03)
    assert not getter.done()
    clock.now += 15
    assert await asyncio.wait_for(getter, 1) == "old", "held 20 s: handed out despite the hold"
    getter = asyncio.create_task(queue.get(LOW, hold_low=lambda: True))
    await asyncio.sleep(0.03)
    assert not getter.done(), "the newer key has waited 15 s only"
    getter.cancel()
    assert await queue.get(LOW) == "new", "a worker without a hold takes it at once"


async def test_a_held_low_key_moved_to_a_faster_lane_is_not_held() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("job", LOW)
    queue.add("job", URGENT)
    assert await asyncio.wait_for(queue.get(LOW, hold_low=lambda: True), 1) == "job"


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_an_add_resumes_one_idle_worker_and_the_others_stay_asleep() -> None:
    queue: WorkQueue[str] = WorkQueue(hold_recheck=60)
    looks = 0

    def held() -> bool:  # called each time a worker looks at the (held) low lane
        nonlocal looks
        looks += 1
        return True

    queue.add("waiting-job", LOW)
    workers = [asyncio.create_task(queue.get(LOW, hold_low=held)) for _ in range(20)]
    await settle()
    assert looks == 20
    assert not any(w.done() for w in workers)
    queue.add("admitted-job")
    await settle()
    done = [w for w in workers if w.done()]
    assert [w.result() for w in done] == ["admitted-job"]
    assert looks == 20, "the 19 idle workers were not resumed to find nothing"
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
    queue: WorkQueue[str] = WorkQueue(hold_recheck=60)
    queue.add("waiting-job", LOW)
    workers = [
        asyncio.create_task(queue.get(URGENT)),
        asyncio.create_task(queue.get(NORMAL)),
        asyncio.create_task(queue.get(LOW, hold_low=lambda: True)),
    ]
    await settle()
    queue.shut_down()
    for worker in workers:
        with pytest.raises(ShutDown):
            await asyncio.wait_for(worker, 1)

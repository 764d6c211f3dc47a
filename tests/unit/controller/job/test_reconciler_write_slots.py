"""The write-concurrency slots bound the writes at the apiserver and count them by state.

Requests here are coroutines blocked on an event, standing in for a slow apiserver, so each test
can look at the gauge while writes are in flight, waiting, failing or cancelled.
"""

from __future__ import annotations

import asyncio

import pytest

from torchgate.controller.job.reconciler import WriteSlots
from torchgate.controller.metrics import ControllerMetrics


def gauge_value(metrics: ControllerMetrics, write: str, state: str) -> float:
    value = metrics.registry.get_sample_value(
        "torchgate_controller_api_writes", {"write": write, "state": state}
    )
    assert value is not None
    return value


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_writes_beyond_the_slots_wait_and_the_gauge_says_so() -> None:
    metrics = ControllerMetrics()
    slots = WriteSlots(2, metrics.api_writes, "create")
    release = asyncio.Event()
    at_apiserver = 0
    most_at_once = 0

    async def write() -> None:
        nonlocal at_apiserver, most_at_once
        async with slots.take():
            at_apiserver += 1
            most_at_once = max(most_at_once, at_apiserver)
            await release.wait()
            at_apiserver -= 1

    tasks = [asyncio.create_task(write()) for _ in range(5)]
    await settle()
    assert gauge_value(metrics, "create", "in_flight") == 2
    assert gauge_value(metrics, "create", "waiting") == 3
    release.set()
    await asyncio.gather(*tasks)
    assert most_at_once == 2
    assert gauge_value(metrics, "create", "in_flight") == 0
    assert gauge_value(metrics, "create", "waiting") == 0


async def test_failed_and_cancelled_writes_give_their_slot_back() -> None:
    metrics = ControllerMetrics()
    slots = WriteSlots(1, metrics.api_writes, "delete")
    blocked = asyncio.Event()

    async def failing() -> None:
        async with slots.take():
            raise RuntimeError("apiserver said 500")

    async def stuck() -> None:
        async with slots.take():
            await blocked.wait()

    with pytest.raises(RuntimeError):
        await failing()
    holder = asyncio.create_task(stuck())
    waiter = asyncio.create_task(stuck())
    await settle()
    assert gauge_value(metrics, "delete", "in_flight") == 1
    assert gauge_value(metrics, "delete", "waiting") == 1
    waiter.cancel()  # cancelled while waiting for a slot
    holder.cancel()  # cancelled while in flight
    await asyncio.gather(holder, waiter, return_exceptions=True)
    assert gauge_value(metrics, "delete", "in_flight") == 0
    assert gauge_value(metrics, "delete", "waiting") == 0
    async with asyncio.timeout(1):  # the slot is free again
        async with slots.take():
            pass

"""Events: sent in the background by a few senders, the backlog bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from torchgate.controller.job.model import Event
from torchgate.controller.job.reconciler import EventRecorder

JOB = {"metadata": {"name": "train", "namespace": "team-a", "uid": "u1", "resourceVersion": "9"}}
WHEN = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


class RecordingApi:
    """Accepts every write and remembers it."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, Any]]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        self.posted.append((path, body))
        return body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


async def test_an_event_is_sent_in_the_background_with_its_recorded_time() -> None:
    api = RecordingApi()
    recorder = EventRecorder(api, clock=lambda: WHEN, senders=1)
    sender = asyncio.create_task(recorder.run())
    try:
        recorder.record(JOB, Event("Normal", "Waiting", "waiting for 8 nvidia.com/gpu"))
        async with asyncio.timeout(1):
            while not api.posted:  # noqa: ASYNC110 - polls what the sender wrote
                await asyncio.sleep(0.005)
    finally:
        sender.cancel()
    path, body = api.posted[0]
    assert path == "/api/v1/namespaces/team-a/events"
    assert (body["reason"], body["involvedObject"]["uid"]) == ("Waiting", "u1")
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-11-24T12:00:00Z"


def test_a_full_backlog_drops_events_and_counts_them() -> None:
    recorder = EventRecorder(RecordingApi(), clock=lambda: WHEN, backlog=2)
    for _ in range(5):
        recorder.record(JOB, Event("Warning", "Restarting", "pod exited with 137"))
    assert recorder.dropped == 3


class SlowApi(RecordingApi):
    """Takes ``delay`` seconds to answer each write; remembers the writes that were answered."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        await asyncio.sleep(self.delay)
        return await super().request(method, path, query=query, body=body)


async def test_a_flush_sends_the_backlog_and_the_sends_the_stopped_senders_left_in_flight() -> None:
    api = SlowApi(delay=0.05)
    recorder = EventRecorder(api, clock=lambda: WHEN, senders=2)
    sender = asyncio.create_task(recorder.run())
    for index in range(10):
        recorder.record(JOB, Event("Normal", "GangAdmitted", f"gang {index}"))
    await asyncio.sleep(0.01)  # two sends in flight, eight queued
    sender.cancel()  # the leader stops acting
    with contextlib.suppress(asyncio.CancelledError):
        await sender

    await recorder.flush(5)

    assert sorted(body["message"] for _, body in api.posted) == sorted(
        f"gang {index}" for index in range(10)
    )
    assert recorder.dropped == 0


async def test_a_flush_gives_up_after_its_time_and_counts_what_it_did_not_send() -> None:
    recorder = EventRecorder(SlowApi(delay=10), clock=lambda: WHEN, senders=1)
    for index in range(3):
        recorder.record(JOB, Event("Normal", "GangAdmitted", f"gang {index}"))

    async with asyncio.timeout(2):
        await recorder.flush(0.2)

    assert recorder.dropped == 3

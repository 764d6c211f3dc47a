"""Events: sent in the background by a few senders, the backlog bounded."""

from __future__ import annotations

import asyncio
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

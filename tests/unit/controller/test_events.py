"""Events: sent in the background, held (boundedly) while an admitted gang's pods are created."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from torchgate.controller.planning import Event
from torchgate.controller.reconciler import EventRecorder

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


async def test_an_event_waits_for_quiet_and_keeps_its_recorded_time() -> None:
    api, quiet = RecordingApi(), asyncio.Event()
    recorder = EventRecorder(api, clock=lambda: WHEN, quiet=quiet, senders=1)
    sender = asyncio.create_task(recorder.run())
    try:
        recorder.record(JOB, Event("Normal", "Waiting", "waiting for 8 nvidia.com/gpu"))
        await asyncio.sleep(0.05)
        assert api.posted == [], "held while pods are being created"
        quiet.set()
        async with asyncio.timeout(1):
            while not api.posted:  # noqa: ASYNC110 - polls what the sender wrote
                await asyncio.sleep(0.005)
    finally:
        sender.cancel()
    path, body = api.posted[0]
    assert path == "/api/v1/namespaces/team-a/events"
    assert (body["reason"], body["involvedObject"]["uid"]) == ("Waiting", "u1")
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-11-24T12:00:00Z"


async def test_an_event_is_held_at_most_max_hold() -> None:
    api, quiet = RecordingApi(), asyncio.Event()
    recorder = EventRecorder(api, clock=lambda: WHEN, quiet=quiet, senders=1, max_hold=0.05)
    sender = asyncio.create_task(recorder.run())
    try:
        recorder.record(JOB, Event("Warning", "Restarting", "pod exited with 137"))
        async with asyncio.timeout(1):
            while not api.posted:  # noqa: ASYNC110 - polls what the sender wrote
                await asyncio.sleep(0.005)
    finally:
        sender.cancel()
    assert not quiet.is_set(), "sent although creates were still in flight"
    assert api.posted[0][1]["reason"] == "Restarting"

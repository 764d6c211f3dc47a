"""A scripted apiserver for the informer's tests: listings in turn, watch scripts, recorded writes.

Each list returns the next listing (the last one again once they run out). Each watch replays the
next script, raising the exceptions it holds, and then ends; the watch that replays the last
script then blocks, as a quiet apiserver's would. Every call other than a GET is recorded in
``writes`` and answered with its body.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any


class ScriptedApi:
    """Lists in turn; watches replay scripts; every other call is recorded."""

    def __init__(self, listings: list[list[dict[str, Any]]], watches: list[list[Any]]) -> None:
        self.listings = listings
        self.watches = watches
        self.lists = 0
        self.watch_queries: list[dict[str, str]] = []
        self.writes: list[tuple[str, str, Any, str]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if method != "GET":
            self.writes.append((method, path, body, content_type))
            return body
        items = self.listings[min(self.lists, len(self.listings) - 1)]
        self.lists += 1
        return {"metadata": {"resourceVersion": str(100 * self.lists)}, "items": items}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        self.watch_queries.append(dict(query))
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield step
        if not self.watches:
            await asyncio.sleep(3600)


async def until(run: Callable[[], Any], predicate: Callable[[], bool]) -> None:
    """Run ``run()`` until ``predicate()`` holds (3 s at most), then cancel it."""
    task = asyncio.create_task(run())
    try:
        for _ in range(300):
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")
    finally:
        task.cancel()

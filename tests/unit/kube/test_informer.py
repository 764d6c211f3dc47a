"""Informer against a scripted API: list, watch, 410 re-list, write-through, tombstones."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from torchgate.kube.errors import Gone
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS


def pod(name: str, version: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": str(version),
            "labels": labels,
        }
    }


class ScriptedApi:
    """Lists return ``listings`` in turn; each watch replays one script, then ends or raises."""

    def __init__(self, listings: list[list[dict[str, Any]]], watches: list[list[Any]]) -> None:
        self.listings = listings
        self.watches = watches
        self.lists = 0

    async def request(self, method: str, path: str, **_: Any) -> Any:
        items = self.listings[min(self.lists, len(self.listings) - 1)]
        self.lists += 1
        return {"metadata": {"resourceVersion": str(100 * self.lists)}, "items": items}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield step
        if not self.watches:
            await asyncio.sleep(3600)


async def run_until(informer: Informer, predicate: Any) -> None:
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(200):
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")
    finally:
        task.cancel()


async def test_list_then_watch_keeps_the_cache_and_reports_events() -> None:
    api = ScriptedApi(
        [[pod("a", 1)]],
        [[{"type": "ADDED", "object": pod("b", 2)}, {"type": "DELETED", "object": pod("a", 3)}]],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, _: seen.append((kind, obj["metadata"]["name"])))
    await run_until(informer, lambda: len(seen) == 3)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert set(informer.store) == {("ns", "b")}


async def test_gone_relists_and_reports_what_changed_meanwhile() -> None:
    api = ScriptedApi(
        [[pod("a", 1), pod("b", 1)], [pod("b", 5), pod("c", 6)]],
        [[Gone(410, "Expired", "too old", "WATCH", "/")], []],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, _: seen.append((kind, obj["metadata"]["name"])))
    await run_until(informer, lambda: informer.relists == 2 and len(seen) == 5)
    assert seen[2:] == [("MODIFIED", "b"), ("ADDED", "c"), ("DELETED", "a")]


async def test_index_follows_label_changes() -> None:
    api = ScriptedApi(
        [[pod("a", 1, job="x")]],
        [[{"type": "MODIFIED", "object": pod("a", 2, job="y")}]],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    informer.index_by(lambda obj: ("ns", obj["metadata"]["labels"].get("job", "")))
    await run_until(informer, lambda: informer.indexed(("ns", "y")))
    assert informer.indexed(("ns", "x")) == []


def test_write_through_never_goes_back_in_time() -> None:
    informer = Informer(ScriptedApi([[]], []), PODS)  # type: ignore[arg-type]
    informer.remember(pod("a", 10))
    informer.remember(pod("a", 7))
    assert informer.get("ns", "a")["metadata"]["resourceVersion"] == "10"


async def test_a_late_delete_reply_cannot_resurrect_a_deleted_pod() -> None:
    api = ScriptedApi([[pod("a", 1)]], [[{"type": "DELETED", "object": pod("a", 9)}]])
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    await run_until(informer, lambda: informer.get("ns", "a") is None and api.lists)
    informer.remember(pod("a", 8))  # the reply to our DELETE, older than the watch's DELETED
    assert informer.get("ns", "a") is None
    informer.remember(pod("a", 12))  # a new pod of the same name
    assert informer.get("ns", "a") is not None


def test_managed_fields_are_not_kept() -> None:
    informer = Informer(ScriptedApi([[]], []), PODS)  # type: ignore[arg-type]
    big = pod("a", 1)
    big["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    informer.remember(big)
    assert "managedFields" not in informer.get("ns", "a")["metadata"]


async def test_a_relist_keeps_objects_written_through_after_its_snapshot() -> None:
    # The list answers with resourceVersion 100; a pod the reconciler created meanwhile has 150.
    api = ScriptedApi(
        [[pod("old", 1)], [pod("old", 1)]], [[Gone(410, "Expired", "", "WATCH", "/")], []]
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    for _ in range(100):
        if informer.relists == 1:
            break
        await asyncio.sleep(0.01)
    informer.remember(pod("just-created", 250))
    for _ in range(100):
        if informer.relists == 2:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert informer.relists == 2
    assert informer.get("ns", "just-created") is not None

"""Informer against a scripted API: list, watch, 410 re-list, write-through, tombstones."""

from __future__ import annotations

import asyncio

from tests.builders.pod import pod
from tests.unit.kube.scripted import ScriptedApi, until
from torchgate.kube.errors import Gone
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS


async def test_list_then_watch_keeps_the_cache_and_reports_events() -> None:
    api = ScriptedApi(
        [[pod("a", namespace="ns", version=1)]],
        [
            [
                {"type": "ADDED", "object": pod("b", namespace="ns", version=2)},
                {"type": "DELETED", "object": pod("a", namespace="ns", version=3)},
            ]
        ],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, _: seen.append((kind, obj["metadata"]["name"])))
    await until(informer.run, lambda: len(seen) == 3)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert set(informer.store) == {("ns", "b")}


async def test_gone_relists_and_reports_what_changed_meanwhile() -> None:
    api = ScriptedApi(
        [
            [pod("a", namespace="ns", version=1), pod("b", namespace="ns", version=1)],
            [pod("b", namespace="ns", version=5), pod("c", namespace="ns", version=6)],
        ],
        [[Gone(410, "Expired", "too old", "WATCH", "/")], []],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, _: seen.append((kind, obj["metadata"]["name"])))
    await until(informer.run, lambda: informer.relists == 2 and len(seen) == 5)
    assert seen[2:] == [("MODIFIED", "b"), ("ADDED", "c"), ("DELETED", "a")]


async def test_index_follows_label_changes() -> None:
    api = ScriptedApi(
        [[pod("a", namespace="ns", version=1, labels={"job": "x"})]],
        [
            [
                {
                    "type": "MODIFIED",
                    "object": pod("a", namespace="ns", version=2, labels={"job": "y"}),
                }
            ]
        ],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    informer.index_by(lambda obj: ("ns", obj["metadata"]["labels"].get("job", "")))
    await until(informer.run, lambda: informer.indexed(("ns", "y")))
    assert informer.indexed(("ns", "x")) == []


def test_write_through_never_goes_back_in_time() -> None:
    informer = Informer(ScriptedApi([[]], []), PODS)  # type: ignore[arg-type]
    informer.remember(pod("a", namespace="ns", version=10))
    informer.remember(pod("a", namespace="ns", version=7))
    assert informer.get("ns", "a")["metadata"]["resourceVersion"] == "10"


async def test_a_late_delete_reply_cannot_resurrect_a_deleted_pod() -> None:
    api = ScriptedApi(
        [[pod("a", namespace="ns", version=1)]],
        [[{"type": "DELETED", "object": pod("a", namespace="ns", version=9)}]],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    await until(informer.run, lambda: informer.get("ns", "a") is None and api.lists)
    # the reply to our DELETE, older than the watch's DELETED
    informer.remember(pod("a", namespace="ns", version=8))
    assert informer.get("ns", "a") is None
    informer.remember(pod("a", namespace="ns", version=12))  # a new pod of the same name
    assert informer.get("ns", "a") is not None


def test_managed_fields_are_not_kept() -> None:
    informer = Informer(ScriptedApi([[]], []), PODS)  # type: ignore[arg-type]
    big = pod("a", namespace="ns", version=1)
    big["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    informer.remember(big)
    assert "managedFields" not in informer.get("ns", "a")["metadata"]


async def test_a_relist_keeps_objects_written_through_after_its_snapshot() -> None:
    # The list answers with resourceVersion 100; a pod the reconciler created meanwhile has 150.
    api = ScriptedApi(
        [[pod("old", namespace="ns", version=1)], [pod("old", namespace="ns", version=1)]],
        [[Gone(410, "Expired", "", "WATCH", "/")], []],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    for _ in range(100):
        if informer.relists == 1:
            break
        await asyncio.sleep(0.01)
    informer.remember(pod("just-created", namespace="ns", version=250))
    for _ in range(100):
        if informer.relists == 2:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert informer.relists == 2
    assert informer.get("ns", "just-created") is not None

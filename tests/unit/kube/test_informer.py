"""Informer on a scripted API: pages, watch, 410 re-list, write-through, tombstones, projection."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.builders.node import node
from tests.builders.pod import pod
from tests.unit.kube.scripted import ScriptedApi, until
from torchgate.kube.errors import Gone
from torchgate.kube.informer import Informer, ParsedOnce
from torchgate.kube.resources import NODES, PODS
from torchgate.pytorchjob.projection import project_pod


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


def _with_env(obj: dict[str, Any]) -> dict[str, Any]:
    """A pod with what the cache drops: env, a volume, an image id."""
    obj["spec"]["containers"][0]["env"] = [{"name": "SECRET_SAUCE", "value": "x" * 1000}]
    obj["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    obj["status"]["containerStatuses"] = [
        {"name": "pytorch", "imageID": "sha256:0", "state": {"running": {}}}
    ]
    return obj


async def test_pods_are_kept_projected_whether_listed_watched_or_written_through() -> None:
    api = ScriptedApi(
        [[_with_env(pod("listed", namespace="ns", version=1))]],
        [[{"type": "ADDED", "object": _with_env(pod("watched", namespace="ns", version=2))}]],
    )
    informer = Informer(api, PODS)  # type: ignore[arg-type]
    seen: list[dict[str, Any]] = []
    informer.add_handler(lambda kind, obj, _: seen.append(obj))
    await until(informer.run, lambda: len(seen) == 2)
    informer.remember(_with_env(pod("created", namespace="ns", version=3)))
    for name in ("listed", "watched", "created"):
        kept = informer.get("ns", name)
        assert kept is not None
        assert kept == project_pod(_with_env(pod(name, namespace="ns", version=kept_version(kept))))
        assert "env" not in kept["spec"]["containers"][0]
        assert "volumes" not in kept["spec"]
        assert kept["status"]["containerStatuses"] == [
            {"name": "pytorch", "state": {"running": {}}}
        ]
    assert all("env" not in obj["spec"]["containers"][0] for obj in seen)  # handlers too


def kept_version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def test_nodes_are_kept_without_their_image_list() -> None:
    informer = Informer(ScriptedApi([[]], []), NODES)  # type: ignore[arg-type]
    raw = node("n1")
    raw["status"]["images"] = [{"names": ["registry.example.com/big:1"], "sizeBytes": 1}]
    raw["status"]["nodeInfo"] = {"kubeletVersion": "v1.37.2"}
    informer.remember(raw)
    kept = informer.get("", "n1")
    assert kept is not None
    assert "images" not in kept["status"]
    assert "nodeInfo" not in kept["status"]
    assert kept["status"]["allocatable"] == raw["status"]["allocatable"]
    assert kept["spec"] == raw["spec"]
    assert kept["metadata"] == raw["metadata"]


class PagedApi(ScriptedApi):
    """Lists in pages of the ``limit`` asked for; ``expire`` continue tokens answer 410 once."""

    def __init__(self, items: list[dict[str, Any]], *, expire: bool = False) -> None:
        super().__init__([items], [])
        self.queries: list[dict[str, str]] = []
        self.expire = expire

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        query = dict(kwargs.get("query") or {})
        self.queries.append(query)
        first = int(query.get("continue") or 0)
        if first and self.expire:
            self.expire = False
            raise Gone(410, "Expired", "continue too old", "GET", path)
        items = self.listings[0]
        page = items[first : first + int(query["limit"])]
        metadata = {"resourceVersion": "100"}
        if first + len(page) < len(items):
            metadata["continue"] = str(first + len(page))
        return {"metadata": metadata, "items": page}


async def test_a_list_is_read_in_pages_and_an_expired_continue_lists_again() -> None:
    items = [pod(f"p{i}", namespace="ns", version=i + 1) for i in range(5)]
    api = PagedApi(items, expire=True)
    informer = Informer(api, PODS, page_size=2)  # type: ignore[arg-type]
    await until(informer.run, informer.synced.is_set)
    assert sorted(informer.store) == [("ns", f"p{i}") for i in range(5)]
    assert [q.get("continue") for q in api.queries] == [None, "2", None, "2", "4"]
    assert {q["limit"] for q in api.queries} == {"2"}
    assert api.watch_queries[0]["resourceVersion"] == "100"


def test_parsed_once_parses_each_version_once_and_forgets_deleted_objects() -> None:
    objects: list[dict[str, Any]] = []
    parsed: list[tuple[str, str]] = []

    def parse(raw: dict[str, Any]) -> str:
        metadata = raw["metadata"]
        parsed.append((metadata["name"], metadata["resourceVersion"]))
        return f"{metadata['name']}@{metadata['resourceVersion']}"

    def version(name: str, number: int) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": str(number)}}

    cache = ParsedOnce(lambda: objects, parse)
    objects[:] = [version("a", 1), version("b", 1)]
    assert cache.by_name() == {"a": "a@1", "b": "b@1"}
    assert cache.by_name() == {"a": "a@1", "b": "b@1"}
    objects[:] = [version("a", 2), version("b", 1)]
    assert cache.by_name() == {"a": "a@2", "b": "b@1"}
    assert parsed == [("a", "1"), ("b", "1"), ("a", "2")]
    for number in range(20):  # many objects come and go: the results of deleted ones are dropped
        objects[:] = [version(f"gone-{number}", 1)]
        cache.by_name()
    objects[:] = [version("a", 2)]
    parsed.clear()
    assert cache.by_name() == {"a": "a@2"}
    assert parsed == [("a", "2")]

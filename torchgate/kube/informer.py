"""List-then-watch caches of API objects (what client-go calls informers).

Why: the reconciler must read state, not react to events, and reading from the apiserver on every
reconcile would make the apiserver the controller's bottleneck at thousands of pods. Each
``Informer`` lists once, then watches from the list's ``resourceVersion`` with bookmarks; when the
version is too old (410 Gone) or the stream breaks it lists again and reports the difference as
events, so a handler never misses a deletion. Handlers only enqueue keys; the cache is the truth.

This is the one list-and-watch loop of torchgate: the controller's caches and the webhook's
PlacementPolicy source are both informers.

Every object is projected as it arrives (listed, watched or written through): the cache holds
only the fields readers decide on (``pytorchjob.projection``; pods and Nodes by their kind,
anything else without ``managedFields``), so the whole object is never kept and every handler
sees the projected one. Lists are read in pages, each projected before the next is asked for, so
a list of every pod of the cluster never holds more than one page of whole pods.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from torchgate.kube.client import KubeApi
from torchgate.kube.errors import ApiError, Gone
from torchgate.kube.resources import NODES, PODS, Resource
from torchgate.pytorchjob.projection import project_node, project_pod, without_managed_fields

log = logging.getLogger("torchgate.kube.informer")

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]
IndexFunction = Callable[[Mapping[str, Any]], Key | None]
Projection = Callable[[Mapping[str, Any]], dict[str, Any]]
T = TypeVar("T")

# What each kind's cache keeps (``pytorchjob.projection``); other kinds lose only managedFields.
PROJECTIONS: dict[Resource, Projection] = {PODS: project_pod, NODES: project_node}


def key_of(obj: Mapping[str, Any]) -> Key:
    """(namespace, name) of an object."""
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


class Informer:
    """A cache of one resource (optionally one namespace / label selector), kept by list+watch."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        watch_timeout: int = 300,
        project: Projection | None = None,
        page_size: int = 500,
    ) -> None:
        """``project``: what the cache keeps of each object (default: by kind, ``PROJECTIONS``)."""
        self.api = api
        self.project = project or PROJECTIONS.get(resource, without_managed_fields)
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.store: dict[Key, dict[str, Any]] = {}
        self.handlers: list[Handler] = []
        self.synced = asyncio.Event()
        self.relists = 0
        # Why the last list or watch failed; None once a list succeeds again (a re-list after a
        # watch that ended or expired is not a failure).
        self.failure: str | None = None
        self._index_fn: IndexFunction | None = None
        self._index: dict[Key, set[Key]] = {}
        # resourceVersions of objects the watch reported DELETED, so a write-through that arrives
        # after the DELETED event (the apiserver answered our DELETE late) cannot resurrect them.
        self._tombstones: dict[Key, str] = {}

    def index_by(self, fn: IndexFunction) -> None:
        """Maintain an index from ``fn(obj)`` (e.g. the owning job's key) to objects."""
        self._index_fn = fn
        self._index = {}
        for key, obj in self.store.items():
            self._index_add(key, obj)

    def indexed(self, index_key: Key) -> list[dict[str, Any]]:
        """Objects whose index key is ``index_key``."""
        keys = self._index.get(index_key, ())
        return [self.store[k] for k in keys if k in self.store]

    def _index_add(self, key: Key, obj: Mapping[str, Any]) -> None:
        if self._index_fn is not None:
            index_key = self._index_fn(obj)
            if index_key is not None:
                self._index.setdefault(index_key, set()).add(key)

    def _index_remove(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        if self._index_fn is not None and obj is not None:
            index_key = self._index_fn(obj)
            members = self._index.get(index_key) if index_key is not None else None
            if members is not None:
                members.discard(key)
                if not members:
                    del self._index[index_key]  # type: ignore[arg-type]

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler(event_type, obj, old)`` for every change (ADDED/MODIFIED/DELETED)."""
        self.handlers.append(handler)

    def remember(self, obj: dict[str, Any]) -> None:
        """Write an object the apiserver just returned into the cache (never an older version)."""
        key = key_of(obj)
        old = self.store.get(key)
        if old is not None and _newer(old, obj):
            return
        tombstone = self._tombstones.get(key)
        if tombstone is not None and not _newer(obj, {"metadata": {"resourceVersion": tombstone}}):
            return
        self._index_remove(key, old)
        kept = self.project(obj)
        self.store[key] = kept
        self._index_add(key, kept)

    def forget(self, namespace: str, name: str) -> None:
        """Drop an object the apiserver just said is gone."""
        key = (namespace, name)
        self._index_remove(key, self.store.pop(key, None))

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object, if any."""
        return self.store.get((namespace, name))

    def values(self) -> Iterator[dict[str, Any]]:
        """All cached objects."""
        return iter(list(self.store.values()))

    def _query(self) -> dict[str, str]:
        query: dict[str, str] = {}
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        return query

    async def run(self) -> None:
        """List and watch forever (cancel to stop)."""
        backoff = 0.5
        path = self.resource.path(self.namespace)
        while True:
            try:
                version = await self._list(path)
                backoff = 0.5
                while True:
                    version = await self._watch(path, version)
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("%s: resourceVersion expired; re-listing", self.resource.plural)
            except ApiError as exc:
                self.failure = str(exc)
                log.warning("%s: %s; re-listing in %.1fs", self.resource.plural, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as exc:
                self.failure = repr(exc)
                log.exception(
                    "%s: informer failed; re-listing in %.1fs", self.resource.plural, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _list(self, path: str) -> str:
        fresh, version = await self._list_pages(path)
        kind = self.resource.plural
        previous = self.store
        snapshot = {"metadata": {"resourceVersion": version}}
        for key, held in previous.items():
            # Written through after the list's snapshot (a pod the reconciler just created): keep
            # it; the watch that follows confirms or deletes it. Dropping it would make a gang
            # look incomplete until its ADDED event arrives.
            if _newer(held, snapshot) and (key not in fresh or _newer(held, fresh[key])):
                fresh[key] = held
        self.store = fresh
        self._index = {}
        for key, obj in fresh.items():
            self._index_add(key, obj)
        self.relists += 1
        self.failure = None
        for key, obj in fresh.items():
            old = previous.get(key)
            if old is None:
                self._emit("ADDED", obj, None)
            elif _version(old) != _version(obj):
                self._emit("MODIFIED", obj, old)
        for key, old in previous.items():
            if key not in fresh:
                self._emit("DELETED", old, old)
        self.synced.set()
        log.debug("%s: listed %d", kind, len(fresh))
        return version

    async def _list_pages(self, path: str) -> tuple[dict[Key, dict[str, Any]], str]:
        """Every object, projected page by page, and the list's resourceVersion.

        Pages of ``page_size`` (``limit`` and ``continue``, as client-go's reflector lists): only
        one page of whole objects is ever decoded at once, and each apiserver call stays short.
        All pages come from the first page's snapshot; a continue token that expired answers
        410 Gone, and ``run`` lists again from the start.
        """
        fresh: dict[Key, dict[str, Any]] = {}
        query = {**self._query(), "limit": str(self.page_size)}
        while True:
            listing = await self.api.request("GET", path, query=query)
            for item in listing.get("items") or []:
                fresh[key_of(item)] = self.project(item)
            metadata = listing.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return fresh, str(metadata["resourceVersion"])
            query = {**self._query(), "limit": str(self.page_size), "continue": str(token)}

    async def _watch(self, path: str, version: str) -> str:
        query = {
            **self._query(),
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        async for event in self.api.watch(path, query):
            kind = event.get("type")
            obj = event.get("object")
            if not isinstance(obj, dict):
                continue
            version = _version(obj) or version
            if kind == "BOOKMARK":
                continue
            key = key_of(obj)
            old = self.store.get(key)
            if kind == "MODIFIED" and old is not None and _newer(old, obj):
                continue  # we already hold a newer copy written through by the reconciler
            obj = self.project(obj)
            if kind == "DELETED":
                self.store.pop(key, None)
                self._index_remove(key, old)
                self._bury(key, _version(obj))
            elif kind in ("ADDED", "MODIFIED"):
                self._index_remove(key, old)
                self.store[key] = obj
                self._index_add(key, obj)
            else:
                continue
            self._emit(str(kind), obj, old)
        return version

    def _bury(self, key: Key, version: str) -> None:
        if len(self._tombstones) >= 10_000:
            self._tombstones.clear()  # old tombstones only guard against late replies; bounded
        self._tombstones[key] = version

    def _emit(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for handler in self.handlers:
            try:
                handler(kind, obj, old)
            except Exception:  # a handler bug must not stop the cache
                log.exception("%s: event handler failed", self.resource.plural)


class ParsedOnce(Generic[T]):
    """Cached objects by name, each parsed once per resourceVersion (PlacementPolicies, TeamQuotas).

    Readers ask on every reconcile and admission cycle while the objects rarely change, and
    parsing is pure, so a result is kept until its object changes. Results of older versions and
    of deleted objects are dropped once they outnumber the current ones (plus a few).
    """

    def __init__(
        self, objects: Callable[[], Iterable[Mapping[str, Any]]], parse: Callable[[Any], T]
    ) -> None:
        self.objects = objects
        self.parse = parse
        self._parsed: dict[tuple[str, str], T] = {}

    def by_name(self) -> dict[str, T]:
        """Name -> the parse of the object's current version, in the order of ``objects``."""
        out: dict[str, T] = {}
        for raw in self.objects():
            metadata = raw.get("metadata") or {}
            marker = (str(metadata.get("name")), str(metadata.get("resourceVersion")))
            if marker not in self._parsed:
                self._parsed[marker] = self.parse(raw)
            out[marker[0]] = self._parsed[marker]
        if len(self._parsed) > 2 * len(out) + 16:
            self._parsed = {m: v for m, v in self._parsed.items() if m[0] in out}
        return out


def _newer(held: Mapping[str, Any], incoming: Mapping[str, Any]) -> bool:
    """Whether the cached copy is strictly newer than ``incoming``.

    resourceVersions are opaque strings by contract; etcd's are integers, and only when both are
    do we compare them (otherwise the incoming copy wins, as a plain informer would do).
    """
    mine, theirs = _version(held), _version(incoming)
    return mine.isdigit() and theirs.isdigit() and int(mine) > int(theirs)


def _version(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("resourceVersion") or "")

"""Where the webhook's PlacementPolicies come from: files, the cluster, or the built-in default.

Admission must never wait on the apiserver for a policy (the apiserver is waiting on *us*), so
policies are served from an in-memory cache: loaded once from ``--policy`` files, or listed and then
watched from the cluster by the access layer's informer (:mod:`torchgate.kube.informer`). A policy
that does not parse is left out and reported (log line, a Warning Event on the object and a
``Valid=False`` condition in its status); it never takes admission down. The cached choice per
namespace is dropped whenever the set changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from torchgate.kube.client import MERGE_PATCH, KubeApi
from torchgate.kube.informer import Informer
from torchgate.kube.resources import EVENTS, PLACEMENT_POLICIES
from torchgate.pytorchjob import names
from torchgate.pytorchjob.fieldpath import FieldError
from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy, select_policy

log = logging.getLogger("torchgate.webhook.policies")


class PolicyCache:
    """The current valid policies, with a per-namespace memo of the selection."""

    def __init__(self) -> None:
        self._policies: dict[str, PlacementPolicy] = {}
        self._by_namespace: dict[str, PlacementPolicy] = {}
        self.invalid: dict[str, list[FieldError]] = {}
        self.synced = asyncio.Event()

    def policy_for(self, namespace: str) -> PlacementPolicy:
        """The policy that applies to jobs in ``namespace``."""
        policy = self._by_namespace.get(namespace)
        if policy is None:
            policy = select_policy(self._policies.values(), namespace)
            self._by_namespace[namespace] = policy
        return policy

    def put(self, raw: Mapping[str, Any], source: str) -> list[FieldError]:
        """Parse and store one policy object; return its errors (empty when valid)."""
        name = _name_of(raw)
        policy, errors = parse_policy(raw)
        if policy is None:
            self._policies.pop(name, None)
            self.invalid[name] = errors
            log.error(
                "ignoring invalid PlacementPolicy %r from %s: %s",
                name,
                source,
                "; ".join(str(e) for e in errors),
            )
        else:
            self._policies[policy.name] = policy
            self.invalid.pop(policy.name, None)
        self._by_namespace.clear()
        return errors

    def remove(self, name: str) -> None:
        """Forget a deleted policy."""
        self._policies.pop(name, None)
        self.invalid.pop(name, None)
        self._by_namespace.clear()

    def replace_all(self, objects: Iterable[Mapping[str, Any]], source: str) -> None:
        """Swap in a complete set (after a list or a file reload)."""
        self._policies.clear()
        self.invalid.clear()
        for raw in objects:
            self.put(raw, source)
        self._by_namespace.clear()

    @property
    def names(self) -> list[str]:
        """Names of the valid policies, sorted."""
        return sorted(self._policies)


def _name_of(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else "<unnamed>"


class PolicyFileError(ValueError):
    """A policy file that cannot be read or parsed as YAML."""


def read_policy_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """PlacementPolicy documents from YAML files, other kinds skipped (``PolicyFileError``)."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except OSError as exc:
            raise PolicyFileError(f"{path}: cannot read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            raise PolicyFileError(f"{path}{where}: not valid YAML") from None
        for document in documents:
            if isinstance(document, dict) and document.get("kind") == names.POLICY_KIND:
                objects.append(document)
    return objects


class FilePolicies:
    """Policies from ``--policy`` files, reloaded when a file changes."""

    def __init__(self, cache: PolicyCache, paths: list[Path]) -> None:
        self.cache = cache
        self.paths = paths
        self._stamps: tuple[tuple[int, int], ...] | None = None

    def load(self) -> None:
        """Read all files now; keep the previous set if any file is unreadable."""
        try:
            stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self.paths)
            objects = read_policy_files(self.paths)
        except (OSError, PolicyFileError) as exc:
            log.error("keeping the previous policies: %s", exc)
            return
        self._stamps = stamps
        self.cache.replace_all(objects, "file")
        self.cache.synced.set()
        log.info("loaded %d policies from files: %s", len(self.cache.names), self.cache.names)

    def changed(self) -> bool:
        """Whether any file's mtime or size differs from the last load."""
        try:
            stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self.paths)
        except OSError:
            return False
        return stamps != self._stamps

    async def watch(self, interval: float) -> None:
        """Reload the files whenever they change."""
        while True:
            await asyncio.sleep(interval)
            if self.changed():
                self.load()


class ClusterPolicies:
    """Policies listed and watched from the apiserver (``torchgate.io/v1alpha1``) by an informer.

    The informer re-lists on 410 Gone or a broken stream and reports what changed meanwhile, so
    the cache follows every event; each policy's validity is then reported (best effort) by a
    second task, so admission never waits on a status write.
    """

    def __init__(self, cache: PolicyCache, api: KubeApi) -> None:
        self.cache = cache
        self.api = api
        self.informer = Informer(api, PLACEMENT_POLICIES)
        self.informer.add_handler(self._apply)
        self._pending: asyncio.Queue[str] = asyncio.Queue()
        self._reported: dict[str, str] = {}

    async def run(self) -> None:
        """Keep the cache in step with the cluster (cancel to stop)."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.informer.run())
            tasks.create_task(self._report_changes())
            await self.informer.synced.wait()
            self.cache.synced.set()

    def _apply(self, kind: str, raw: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = _name_of(raw)
        if kind == "DELETED":
            self.cache.remove(name)
            self._reported.pop(name, None)
        else:
            self.cache.put(raw, "cluster")
            self._pending.put_nowait(name)

    async def _report_changes(self) -> None:
        while True:
            name = await self._pending.get()
            raw = self.informer.get("", name)
            if raw is not None:
                await self._report(raw)

    async def _report(self, raw: Mapping[str, Any]) -> None:
        """Record a policy's validity in its status (and an Event when it is invalid)."""
        name = _name_of(raw)
        errors = self.cache.invalid.get(name, [])
        message = "; ".join(str(e) for e in errors) or "policy is valid and in use"
        if self._reported.get(name) == message:
            return
        self._reported[name] = message
        try:
            await self._set_condition(raw, errors, message)
            if errors:
                await self._event(raw, message)
        except Exception as exc:  # reporting is best effort; admission keeps working
            log.warning("could not report the state of PlacementPolicy %r: %s", name, exc)

    async def _set_condition(
        self, raw: Mapping[str, Any], errors: list[FieldError], message: str
    ) -> None:
        generation = raw.get("metadata", {}).get("generation")
        condition = {
            "type": "Valid",
            "status": "False" if errors else "True",
            "reason": "InvalidSpec" if errors else "Accepted",
            "message": message[:1024],
            "lastTransitionTime": _now(),
            "observedGeneration": generation,
        }
        await self.api.request(
            "PATCH",
            PLACEMENT_POLICIES.path(None, _name_of(raw), "status"),
            body={"status": {"conditions": [condition]}},
            content_type=MERGE_PATCH,
        )

    async def _event(self, raw: Mapping[str, Any], message: str) -> None:
        metadata = raw.get("metadata", {})
        now = _now()
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{_name_of(raw)}.", "namespace": "default"},
            "involvedObject": {
                "apiVersion": names.POLICY_API_VERSION,
                "kind": names.POLICY_KIND,
                "name": _name_of(raw),
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": "InvalidPlacementPolicy",
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": "torchgate-webhook"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.api.request("POST", EVENTS.path("default"), body=event)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

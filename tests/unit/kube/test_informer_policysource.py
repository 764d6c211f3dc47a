"""The one informer, as the webhook's PlacementPolicy and claim sources use it, and its bookmarks.

A scripted API (``scripted.ScriptedApi``) stands in for the apiserver.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tests.builders.claims import allocated_claim, device_request, resource_claim
from tests.builders.policy import policy
from tests.unit.kube.scripted import ScriptedApi, until
from torchgate.kube.errors import Gone
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PLACEMENT_POLICIES
from torchgate.pytorchjob.devices import RESOURCE_CLAIM
from torchgate.pytorchjob.policy import DEFAULT_POLICY, parse_policy
from torchgate.webhook.policysource import ClusterClaims, ClusterPolicies, PolicyCache

GOOD = policy("good", priority=5)
BAD = policy("bad", priority="high")


def versioned(obj: dict[str, Any], version: int) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(version)}}


def test_the_bad_policy_is_bad() -> None:
    assert parse_policy(BAD)[1]
    assert not parse_policy(GOOD)[1]


async def test_listed_policies_are_served_and_the_invalid_one_is_reported() -> None:
    api = ScriptedApi([[versioned(GOOD, 1), versioned(BAD, 2)]], [])
    cache = PolicyCache()
    source = ClusterPolicies(cache, api)
    await until(source.run, lambda: cache.synced.is_set() and len(api.writes) == 3)
    assert cache.names == ["good"]
    assert list(cache.invalid) == ["bad"]
    statuses = {path: body for method, path, body, _ in api.writes if method == "PATCH"}
    assert (
        statuses[PLACEMENT_POLICIES.path(None, "good", "status")]["status"]["conditions"][0][
            "status"
        ]
        == "True"
    )
    bad = statuses[PLACEMENT_POLICIES.path(None, "bad", "status")]["status"]["conditions"][0]
    assert (bad["status"], bad["reason"]) == ("False", "InvalidSpec")
    events = [(path, body) for method, path, body, _ in api.writes if method == "POST"]
    assert [(path, body["involvedObject"]["name"]) for path, body in events] == [
        ("/api/v1/namespaces/default/events", "bad")
    ]


async def test_an_empty_cluster_is_synced_with_the_default_policy_only() -> None:
    cache = PolicyCache()
    await until(ClusterPolicies(cache, ScriptedApi([[]], [])).run, cache.synced.is_set)
    assert cache.names == []
    assert cache.policy_for("any") is DEFAULT_POLICY


async def test_watched_changes_and_a_relist_after_gone_follow_the_cluster() -> None:
    fixed = policy("bad", priority=1)
    api = ScriptedApi(
        # After the 410 the re-list no longer has "good": it was deleted while unwatched.
        [[versioned(GOOD, 1), versioned(BAD, 2)], [versioned(fixed, 3)]],
        [
            [
                {"type": "MODIFIED", "object": versioned(fixed, 3)},
                Gone(410, "Expired", "", "W", ""),
            ],
        ],
    )
    cache = PolicyCache()
    source = ClusterPolicies(cache, api)
    await until(source.run, lambda: api.lists == 2 and cache.names == ["bad"])
    assert cache.invalid == {}


async def test_a_bookmark_moves_the_next_watch_to_its_resource_version() -> None:
    api = ScriptedApi(
        [[versioned(GOOD, 1)]],
        [[{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "777"}}}], []],
    )
    informer = Informer(api, PLACEMENT_POLICIES)
    await until(informer.run, lambda: len(api.watch_queries) == 2)
    first, second = api.watch_queries
    assert first["resourceVersion"] == "100"
    assert first["allowWatchBookmarks"] == "true"
    assert second["resourceVersion"] == "777"
    assert api.lists == 1  # a stream that ends is re-watched, not re-listed


async def test_the_webhook_keeps_of_each_claim_its_spec_only() -> None:
    claim = resource_claim("gpus", device_request("gpu", count=8))
    claim["status"] = allocated_claim("pool-a", 0, 1, owner="p-0")["status"]
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": f"p-{i}"} for i in range(8)]
    claims = ClusterClaims(PolicyCache(), ScriptedApi([[claim]], []))  # type: ignore[arg-type]
    await until(claims.run, claims.caches.claims.synced.is_set)
    kept = claims.caches.claims.get("default", "gpus")
    assert kept is not None
    assert "status" not in kept
    assert claims.caches.view("default").spec(RESOURCE_CLAIM, "gpus") == claim["spec"]


async def test_a_restarted_webhook_keeps_the_valid_condition_time_while_its_status_stands() -> None:
    before = "2026-03-01T10:00:00Z"
    stored = {"conditions": [{"type": "Valid", "status": "True", "lastTransitionTime": before}]}
    turned = {"conditions": [{"type": "Valid", "status": "True", "lastTransitionTime": before}]}
    api = ScriptedApi(
        [[{**versioned(GOOD, 1), "status": stored}, {**versioned(BAD, 2), "status": turned}]], []
    )
    source = ClusterPolicies(PolicyCache(), api)
    await until(source.run, lambda: len(api.writes) == 3)
    written = {
        path.split("/")[-2]: body["status"]["conditions"][0]
        for method, path, body, _ in api.writes
        if method == "PATCH"
    }
    assert (written["good"]["status"], written["good"]["lastTransitionTime"]) == ("True", before)
    assert written["bad"]["status"] == "False"
    assert written["bad"]["lastTransitionTime"] != before, "its status changed: it began now"


async def test_a_restarted_webhook_finding_the_stored_status_right_writes_nothing() -> None:
    first = ScriptedApi([[versioned(GOOD, 1), versioned(BAD, 2)]], [])
    await until(ClusterPolicies(PolicyCache(), first).run, lambda: len(first.writes) == 3)
    stored = {
        path.split("/")[-2]: body["status"]
        for method, path, body, _ in first.writes
        if method == "PATCH"
    }

    # Restarted (or a second replica): its informer lists both with the status written, and a
    # new policy listed last, whose write says the two before it were looked at.
    fresh = policy("fresh", priority=1)
    restarted = ScriptedApi(
        [
            [
                {**versioned(GOOD, 3), "status": stored["good"]},
                {**versioned(BAD, 4), "status": stored["bad"]},
                versioned(fresh, 5),
            ]
        ],
        [],
    )
    await until(ClusterPolicies(PolicyCache(), restarted).run, lambda: bool(restarted.writes))
    assert [(method, path) for method, path, *_ in restarted.writes] == [
        ("PATCH", PLACEMENT_POLICIES.path(None, "fresh", "status"))
    ], "neither the status nor the bad policy's Event again"


def _written(api: ScriptedApi, name: str, kind: str) -> list[dict[str, Any]]:
    """Each condition of type ``kind`` written for policy ``name``, in order."""
    return [
        condition
        for method, path, body, _ in api.writes
        if method == "PATCH" and path == PLACEMENT_POLICIES.path(None, name, "status")
        for condition in body["status"]["conditions"]
        if condition["type"] == kind
    ]


class HeldWatch(ScriptedApi):
    """A ScriptedApi whose watches replay their scripts only once ``go`` is set."""

    def __init__(self, listings: list[list[dict[str, Any]]], watches: list[list[Any]]) -> None:
        super().__init__(listings, watches)
        self.go = asyncio.Event()

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        await self.go.wait()
        async for event in super().watch(path, query):
            yield event


async def test_the_policy_losing_a_tie_by_name_is_shadowed_until_the_other_one_changes() -> None:
    first = policy("a-team", namespaces=["ml"], priority=5)
    second = policy("b-team", namespaces=["ml", "cv"], priority=5)
    lowered = policy("a-team", namespaces=["ml"], priority=4)
    api = HeldWatch(
        [[versioned(first, 1), versioned(second, 2)]],
        [[{"type": "MODIFIED", "object": versioned(lowered, 3)}]],
    )

    def told_then_changed() -> bool:
        if _written(api, "b-team", "Shadowed"):
            api.go.set()  # from now on, only "a-team" changes
        return len(_written(api, "b-team", "Shadowed")) == 2

    await until(ClusterPolicies(PolicyCache(), api).run, told_then_changed)

    tied, untied = _written(api, "b-team", "Shadowed")
    assert (tied["status"], tied["reason"]) == ("True", "TiedAtSamePriority")
    assert 'namespace ml by PlacementPolicy "a-team"' in tied["message"]
    assert (untied["status"], untied["reason"]) == ("False", "NoTie")
    assert [c["status"] for c in _written(api, "a-team", "Shadowed")] == ["False", "False"]

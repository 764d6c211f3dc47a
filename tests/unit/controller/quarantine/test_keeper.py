"""The quarantine keeper against an API that stores Nodes as the apiserver would.

Merge patches are applied to the stored Node and refused with 409 when they carry a stale
``resourceVersion``; assertions read the stored Nodes, the Events recorded and the metrics.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from tests.builders.node import node
from tests.unit.controller.helpers import NOW, merge_patch
from torchgate.controller.quarantine.keeper import QuarantineKeeper
from torchgate.controller.quarantine.rules import Fault, Outage
from torchgate.kube.errors import Conflict
from torchgate.kube.informer import Informer
from torchgate.kube.resources import NODES
from torchgate.pytorchjob.policy import QuarantineSettings

TAINT = "torchgate.io/quarantine"
UNTIL = "torchgate.io/quarantine-until"
SETTINGS = QuarantineSettings(faults=2, window_seconds=600, cooldown_seconds=300)
LAX = QuarantineSettings(faults=5, window_seconds=600, cooldown_seconds=300)  # another policy


class NodeApi:
    """Nodes by name; PATCH merges, with optimistic concurrency on ``resourceVersion`` if given."""

    def __init__(self, *names: str) -> None:
        self.stored = {
            name: {**node(name), "metadata": {"name": name, "resourceVersion": "1"}}
            for name in names
        }
        self.conflicts = 0

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        assert method == "PATCH"
        name = path.rsplit("/", 1)[1]
        current = self.stored[name]
        expected = body["metadata"].get("resourceVersion")  # none: no precondition
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise Conflict(409, "Conflict", "the object has been modified", method, path)
        patched = merge_patch(copy.deepcopy(current), copy.deepcopy(body))
        patched["metadata"]["resourceVersion"] = str(
            int(current["metadata"]["resourceVersion"]) + 1
        )
        self.stored[name] = patched
        return copy.deepcopy(patched)

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Rig:
    def __init__(self, api: NodeApi | None = None) -> None:
        self.api = api or NodeApi("a100-0", "a100-1")
        self.nodes = Informer(self.api, NODES)
        for raw in self.api.stored.values():
            self.nodes.remember(copy.deepcopy(raw))
        self.now = NOW
        self.events: list[tuple[str, str, str]] = []
        self.counter = Counter("q", "q", ["cause"], registry=CollectorRegistry())
        self.keeper = QuarantineKeeper(
            self.api,  # type: ignore[arg-type]
            nodes=self.nodes,
            quarantines=self.counter,
            record_event=self.record,
            clock=lambda: self.now,
        )

    def record(self, about: Any, type_: str, reason: str, message: str) -> None:
        subject = "/".join(about) if isinstance(about, tuple) else about["metadata"]["name"]
        self.events.append((subject, reason, message))

    def fault(
        self,
        job: str,
        node_name: str = "a100-1",
        cause: str = "PodStuck",
        outage: Outage | None = None,
    ) -> None:
        self.keeper.record(Fault(node_name, cause, self.now, ("team", job), outage), SETTINGS)

    def taints(self, name: str) -> list[dict[str, Any]]:
        return list(self.api.stored[name]["spec"].get("taints", []))

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.api.stored[name]["metadata"].get("labels", {}))


def quarantined(rig: Rig, name: str) -> bool:
    return any(t["key"] == TAINT for t in rig.taints(name))


async def test_a_node_is_quarantined_at_the_threshold_with_events_and_a_count() -> None:
    rig = Rig()
    rig.fault("one")
    assert await rig.keeper.converge() is None
    assert not quarantined(rig, "a100-1")

    rig.fault("two")
    assert await rig.keeper.converge() == 300
    assert rig.taints("a100-1") == [{"key": TAINT, "value": "PodStuck", "effect": "NoSchedule"}]
    assert rig.labels("a100-1")[UNTIL] == "20260301T120500Z"
    assert not quarantined(rig, "a100-0")
    assert rig.keeper.quarantined() == 1
    assert [(s, r) for s, r, _ in rig.events] == [
        ("a100-1", "NodeQuarantined"),
        ("team/one", "NodeQuarantined"),
        ("team/two", "NodeQuarantined"),
    ]
    assert "kubectl taint nodes a100-1 torchgate.io/quarantine-" in rig.events[0][2]
    assert rig.counter.labels("PodStuck")._value.get() == 1


async def test_faults_on_different_nodes_or_outside_the_window_do_not_add_up() -> None:
    rig = Rig()
    rig.fault("one", node_name="a100-0")
    rig.fault("two", node_name="a100-1")
    rig.now = NOW + timedelta(seconds=601)
    rig.fault("three", node_name="a100-1")
    await rig.keeper.converge()
    assert rig.keeper.quarantined() == 0


async def test_the_quarantine_is_lifted_when_the_cooldown_ends() -> None:
    rig = Rig()
    rig.fault("one")
    rig.fault("two")
    await rig.keeper.converge()
    rig.now = NOW + timedelta(seconds=300)

    assert await rig.keeper.converge() is None

    assert rig.taints("a100-1") == []
    assert TAINT not in rig.labels("a100-1")
    assert UNTIL not in rig.labels("a100-1")
    assert rig.events[-1][:2] == ("a100-1", "NodeQuarantineLifted")


async def test_an_admin_clears_by_removing_the_taint_and_the_count_starts_afresh() -> None:
    rig = Rig()
    rig.fault("one")
    rig.fault("two")
    await rig.keeper.converge()
    cleared = copy.deepcopy(rig.api.stored["a100-1"])
    cleared["spec"]["taints"] = []
    cleared["metadata"]["resourceVersion"] = "9"
    rig.api.stored["a100-1"] = cleared  # kubectl taint nodes a100-1 torchgate.io/quarantine-
    rig.nodes.remember(copy.deepcopy(cleared))

    await rig.keeper.converge()
    assert rig.labels("a100-1") == {}
    rig.fault("three")
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")


async def test_a_conflicting_patch_is_retried_on_the_next_pass_from_the_fresh_node() -> None:
    rig = Rig()
    rig.api.stored["a100-1"]["metadata"]["resourceVersion"] = "2"  # changed since cached
    rig.fault("one")
    rig.fault("two")
    assert await rig.keeper.converge() == 5.0
    assert rig.api.conflicts == 1
    assert not quarantined(rig, "a100-1")
    rig.nodes.remember(copy.deepcopy(rig.api.stored["a100-1"]))  # the watch catches up

    await rig.keeper.converge()
    assert quarantined(rig, "a100-1")


async def test_a_fault_under_another_policy_meanwhile_brings_no_fault_back_after_a_quarantine() -> (
    None
):
    """Rule 9: a quarantine starts the count afresh, whatever else was recorded meanwhile.

    A job under a policy quarantining at 2 faults tips the node over; before the keeper applies
    the quarantine, a job under a laxer policy (5 faults) records a fault on the same node, which
    reads the node's recorded faults back. Those are all from before the quarantine: none may be
    written after it, or the node, once lifted, is quarantined again at its next single fault.
    """
    rig = Rig()
    rig.fault("one")
    await rig.keeper.converge()
    assert [e["job"] for e in recorded(rig)] == ["team/one"]

    rig.now = NOW + timedelta(seconds=10)
    rig.fault("two")  # due under SETTINGS, not applied yet
    rig.keeper.record(Fault("a100-1", "PodStuck", rig.now, ("other", "three")), LAX)
    await rig.keeper.converge()
    assert quarantined(rig, "a100-1")
    assert recorded(rig) == []

    rig.now = NOW + timedelta(seconds=310)
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")  # lifted
    rig.now = NOW + timedelta(seconds=320)
    rig.fault("four")
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")
    assert [e["job"] for e in recorded(rig)] == ["team/four"]


async def test_a_quarantine_decided_but_not_applied_is_not_extended_by_a_stricter_policy() -> None:
    rig = Rig()
    rig.fault("one")
    rig.fault("two")  # due under SETTINGS: until NOW + 300
    strict = QuarantineSettings(faults=1, window_seconds=600, cooldown_seconds=3000)
    rig.now = NOW + timedelta(seconds=5)
    rig.keeper.record(Fault("a100-1", "NodeLost", rig.now, ("other", "three")), strict)
    await rig.keeper.converge()
    assert rig.labels("a100-1")[UNTIL] == "20260301T120500Z"
    assert rig.counter.labels("PodStuck")._value.get() == 1
    assert [s for s, _, _ in rig.events] == ["a100-1", "team/one", "team/two"]


async def test_faults_on_a_quarantined_node_do_not_quarantine_it_again() -> None:
    rig = Rig()
    rig.fault("one")
    rig.fault("two")
    await rig.keeper.converge()
    until = rig.labels("a100-1")[UNTIL]
    rig.now = NOW + timedelta(seconds=60)
    rig.fault("three")
    rig.fault("four")
    await rig.keeper.converge()
    assert rig.labels("a100-1")[UNTIL] == until
    assert rig.counter.labels("PodStuck")._value.get() == 1


async def test_the_gangs_one_outage_took_down_are_one_fault_and_separate_outages_add_up() -> None:
    """A node running three gangs blips once: one fault; it blips again: two, quarantined."""
    rig = Rig()
    blip = Outage("NotReady", NOW - timedelta(seconds=30))
    for job in ("one", "two", "three"):
        rig.fault(job, cause="NodeLost", outage=blip)
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")

    rig.now = NOW + timedelta(seconds=120)
    rig.fault("four", cause="NodeLost", outage=Outage("NotReady", NOW + timedelta(seconds=100)))
    await rig.keeper.converge()
    assert rig.taints("a100-1") == [{"key": TAINT, "value": "NodeLost", "effect": "NoSchedule"}]
    assert "after 2 infrastructure faults (NodeLost)" in rig.events[0][2]
    assert [s for s, _, _ in rig.events] == ["a100-1", "team/four", "team/one", "team/three",
                                              "team/two"]  # fmt: skip


# ------------------------------------------------------------------ across a restart


FAULTS = "torchgate.io/quarantine-faults"


def restarted(rig: Rig) -> Rig:
    """A new controller (a restart, or the standby after a failover) on the same cluster."""
    fresh = Rig(rig.api)
    fresh.now = rig.now
    return fresh


def recorded(rig: Rig, name: str = "a100-1") -> list[dict[str, Any]]:
    value = rig.api.stored[name]["metadata"].get("annotations", {}).get(FAULTS)
    return list(json.loads(value)) if value is not None else []


async def test_the_count_of_a_nodes_faults_survives_a_restart_of_the_controller() -> None:
    """One fault before the restart, one after: the threshold (2) is reached across it."""
    rig = Rig()
    rig.fault("one")
    await rig.keeper.converge()
    assert [e["job"] for e in recorded(rig)] == ["team/one"]

    rig = restarted(rig)
    rig.now = NOW + timedelta(seconds=60)
    rig.fault("two")
    await rig.keeper.converge()

    assert quarantined(rig, "a100-1")
    assert "after 2 infrastructure faults (PodStuck)" in rig.events[0][2]
    assert [s for s, _, _ in rig.events] == ["a100-1", "team/one", "team/two"]
    assert recorded(rig) == []  # a quarantine starts the count afresh


async def test_an_outage_counted_before_a_restart_is_not_counted_again_after_it() -> None:
    blip = Outage("NotReady", NOW - timedelta(seconds=30))
    rig = Rig()
    rig.fault("one", cause="NodeLost", outage=blip)
    await rig.keeper.converge()

    rig = restarted(rig)
    rig.now = NOW + timedelta(seconds=5)
    rig.fault("two", cause="NodeLost", outage=blip)  # the same spell took a second gang
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")

    rig.fault("three", cause="NodeLost", outage=Outage("NotReady", NOW))  # another spell
    await rig.keeper.converge()
    assert quarantined(rig, "a100-1")


async def test_faults_that_expired_by_the_restart_are_dropped_from_the_record() -> None:
    rig = Rig()
    rig.fault("one")
    await rig.keeper.converge()

    rig = restarted(rig)
    rig.now = NOW + timedelta(seconds=601)
    rig.fault("two")
    await rig.keeper.converge()

    assert not quarantined(rig, "a100-1")
    assert [e["job"] for e in recorded(rig)] == ["team/two"]


async def test_an_unreadable_record_is_reported_once_and_the_readable_faults_still_count() -> None:
    rig = Rig()
    good = {"at": "2026-03-01T11:59:00Z", "cause": "PodStuck", "job": "team/old"}
    rig.api.stored["a100-1"]["metadata"]["annotations"] = {FAULTS: json.dumps([good, "junk"])}
    rig.nodes.remember(copy.deepcopy(rig.api.stored["a100-1"]))  # a hand edit, as watched

    rig.fault("one", node_name="a100-1")
    await rig.keeper.converge()

    assert quarantined(rig, "a100-1")
    assert rig.events[0][:2] == ("a100-1", "NodeFaultHistoryUnreadable")

    bad = copy.deepcopy(rig.api.stored["a100-0"])
    bad["metadata"]["annotations"] = {FAULTS: "not json"}
    rig.api.stored["a100-0"] = bad
    rig.nodes.remember(copy.deepcopy(bad))
    rig.fault("two", node_name="a100-0")
    await rig.keeper.converge()
    rig.fault("three", node_name="a100-0")  # the bad value is gone now: nothing to report
    await rig.keeper.converge()

    unreadable = [s for s, r, _ in rig.events if r == "NodeFaultHistoryUnreadable"]
    assert unreadable == ["a100-1", "a100-0"]
    assert quarantined(rig, "a100-0")


async def test_an_admin_who_removes_the_record_makes_the_count_start_afresh() -> None:
    rig = Rig()
    rig.fault("one")
    await rig.keeper.converge()
    forgotten = copy.deepcopy(rig.api.stored["a100-1"])
    del forgotten["metadata"]["annotations"][FAULTS]  # kubectl annotate node ... faults-
    forgotten["metadata"]["resourceVersion"] = "9"
    rig.api.stored["a100-1"] = forgotten
    rig.nodes.remember(copy.deepcopy(forgotten))

    rig.fault("two")
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")
    assert [e["job"] for e in recorded(rig)] == ["team/two"]


async def test_faults_recorded_from_before_the_last_quarantine_never_count_after_a_restart() -> (
    None
):
    """The count's start is read from the Node, so it holds for the next controller too.

    A fault written back after the quarantine (as a controller without rule 9 did) is not counted
    by the next controller, nor written again.
    """
    rig = Rig()
    rig.fault("one")
    rig.now = NOW + timedelta(seconds=10)
    rig.fault("two")
    await rig.keeper.converge()
    stale = copy.deepcopy(rig.api.stored["a100-1"])
    old = {"at": "2026-03-01T12:00:05Z", "cause": "PodStuck", "job": "team/old"}
    stale["metadata"]["annotations"][FAULTS] = json.dumps([old])  # written back after it
    rig.api.stored["a100-1"] = stale
    rig.nodes.remember(copy.deepcopy(stale))
    rig.now = NOW + timedelta(seconds=310)
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")  # lifted

    rig = restarted(rig)
    rig.now = NOW + timedelta(seconds=320)
    rig.fault("three")
    await rig.keeper.converge()
    assert not quarantined(rig, "a100-1")
    assert [e["job"] for e in recorded(rig)] == ["team/three"]

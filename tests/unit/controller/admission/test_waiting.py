"""The waiting queue: places, admission order, backoff, held places and throttled reports."""

from __future__ import annotations

from typing import Any

from torchgate.controller.admission.waiting import (
    UNDECIDED,
    GangRequest,
    WaitingQueue,
    demand_by_team,
)
from torchgate.pytorchjob.devices import GpuSources

GPU = {"gpus": 8000}


def ask(
    queue: WaitingQueue, name: str, *, now: float = 0.0, namespace: str = "ns", **kw: Any
) -> bool:
    fields: dict[str, Any] = {
        "uid": f"uid-{name}",
        "demands": (),
        "min_count": 1,
        "usage": GPU,
        "priority": 0,
        "created": "2026-01-01T00:00:00Z",
        "gpus": GpuSources("nvidia.com/gpu"),
        **kw,
    }
    return queue.request((namespace, name), GangRequest(**fields), now=now)


def test_asking_again_keeps_the_place_and_takes_the_new_demands() -> None:
    queue = WaitingQueue()
    assert ask(queue, "a", now=1.0) is True
    assert ask(queue, "a", now=5.0, priority=7, usage={"gpus": 4000}) is False
    waiting = queue.waiting[("ns", "a")]
    asked = waiting.request
    assert (waiting.since, asked.priority, dict(asked.usage)) == (1.0, 7, {"gpus": 4000})


def test_a_recreated_job_starts_a_new_place() -> None:
    queue = WaitingQueue()
    ask(queue, "a", now=1.0)
    assert ask(queue, "a", now=5.0, uid="uid-new") is True
    assert queue.waiting[("ns", "a")].since == 5.0


def test_ready_is_in_admission_order_without_the_jobs_backing_off() -> None:
    queue = WaitingQueue(backoff_base=10)
    ask(queue, "old", created="2026-01-01T00:00:00Z")
    ask(queue, "new", created="2026-01-02T00:00:00Z")
    ask(queue, "urgent", created="2026-01-03T00:00:00Z", priority=100)
    ask(queue, "slow")
    queue.back_off(("ns", "slow"), now=0.0)
    assert [w.key[1] for w in queue.ready(now=5.0)] == ["urgent", "old", "new"]
    assert [w.key[1] for w in queue.ready(now=10.0)] == ["urgent", "old", "slow", "new"]


def test_backoff_doubles_up_to_its_maximum_and_outlives_the_next_request() -> None:
    queue = WaitingQueue(backoff_base=10, backoff_max=25)
    key = ("ns", "t")
    assert [queue.back_off(key, now=0.0) for _ in range(3)] == [10.0, 20.0, 25.0]
    ask(queue, "t", now=1.0)
    assert queue.ready(now=24.0) == []
    queue.cancel(key)
    assert queue.back_off(key, now=0.0) == 10.0, "a cancelled job starts over"


def test_a_gang_backed_off_with_a_reason_is_told_it_when_it_asks_again() -> None:
    queue = WaitingQueue(backoff_base=10)
    key = ("ns", "g")
    queue.back_off(key, now=0.0, reason="exceeded quota: q")
    ask(queue, "g", now=1.0)
    assert queue.reason(key) == "exceeded quota: q; admitted again after 10s"
    assert queue.ready(now=9.0) == []


def test_a_refused_growth_backs_off_doubling_until_a_create_succeeds_or_the_job_goes() -> None:
    queue = WaitingQueue(backoff_base=10, backoff_max=25)
    key = ("ns", "el")
    delays = [queue.refuse_growth(key, f"exceeded quota {n}", now=100.0) for n in range(3)]
    assert delays == [10.0, 20.0, 25.0]
    refusal = queue.growth_refusal(key)
    assert refusal is not None
    assert (refusal.message, refusal.count, refusal.not_before) == ("exceeded quota 2", 3, 125.0)
    queue.growth_created(key)
    assert queue.growth_refusal(key) is None
    assert queue.refuse_growth(key, "exceeded quota", now=0.0) == 10.0, "a success starts over"
    queue.cancel(key)
    assert queue.growth_refusal(key) is None, "a job forgotten is forgotten with its refusal"


def test_a_held_place_is_restored_as_it_was_with_nothing_reported() -> None:
    queue = WaitingQueue()
    ask(queue, "p", now=3.0)
    key = ("ns", "p")
    assert queue.report(queue.waiting[key], "Capacity", lambda: "full", now=3.0)
    queue.hold_place(key)
    assert key not in queue.waiting
    queue.restore_place(key)
    assert queue.waiting[key].since == 3.0
    assert (queue.reason(key), queue.kind(key)) == (None, None)


def test_reports_change_at_once_for_a_new_kind_and_else_at_most_every_refresh() -> None:
    queue = WaitingQueue(refresh_seconds=30)
    ask(queue, "w")
    waiting = queue.waiting[("ns", "w")]
    phrased: list[str] = []

    def says(text: str) -> Any:
        return lambda: phrased.append(text) or text

    assert queue.report(waiting, "Capacity", says("2 free"), now=0.0)
    assert not queue.report(waiting, "Capacity", says("3 free"), now=10.0)
    assert phrased == ["2 free"], "a message that cannot be reported is not phrased"
    assert queue.report(waiting, "Quota", says("over quota"), now=11.0), "a new kind at once"
    assert not queue.report(waiting, "Quota", says("over quota"), now=50.0), "nothing new"
    assert queue.report(waiting, "Quota", says("still over"), now=51.0)
    assert (queue.reason(waiting.key), queue.kind(waiting.key)) == ("still over", "Quota")


def test_a_change_of_why_its_nodes_are_out_of_use_is_reported_at_once() -> None:
    """Nodes NotReady, then back but quarantined: the job is told within the refresh."""
    queue = WaitingQueue(refresh_seconds=30)
    ask(queue, "w")
    waiting = queue.waiting[("ns", "w")]
    looked: list[int] = []

    def why(causes: tuple[tuple[str, int], ...]) -> Any:
        return lambda: looked.append(1) or causes

    not_ready, quarantined = (("NotReady", 2),), (("quarantined", 2),)
    assert queue.report(
        waiting, "Capacity", lambda: "2 NotReady", now=0.0, nodes=1, causes=why(not_ready)
    )
    looked.clear()
    assert not queue.report(
        waiting, "Capacity", lambda: "1 free", now=5.0, nodes=1, causes=why(not_ready)
    )
    assert looked == [], "the causes are not read while the nodes stand"
    assert not queue.report(
        waiting, "Capacity", lambda: "2 free", now=6.0, nodes=2, causes=why(not_ready)
    ), "the nodes changed, but not why they are out of use: the refresh stands"
    assert queue.report(
        waiting, "Capacity", lambda: "2 quarantined", now=7.0, nodes=3, causes=why(quarantined)
    )
    assert queue.reason(waiting.key) == "2 quarantined"
    assert not queue.report(
        waiting, "Capacity", lambda: "1 quarantined", now=8.0, nodes=3, causes=why(quarantined)
    )
    assert queue.report(waiting, "Capacity", lambda: "8 free", now=9.0, nodes=4, causes=why(()))


def test_demand_by_team_counts_jobs_gpus_and_the_longest_wait_per_team_and_reason() -> None:
    queue = WaitingQueue()
    ask(queue, "a", now=10.0)
    ask(queue, "b", now=40.0, usage={"gpus": 4000})
    queue.waiting[("ns", "a")].reported_kind = "Quota"
    queue.waiting[("ns", "b")].reported_kind = "Quota"
    ask(queue, "c", now=50.0)  # not decided yet
    ask(queue, "d", namespace="other", now=20.0)
    queue.waiting[("other", "d")].reported_kind = "Topology"

    demand = demand_by_team(queue.waiting.values(), {"ns": "vision"}, now=100.0)

    assert [(d.team, d.reason, d.jobs, d.gpus, d.longest_wait) for d in demand] == [
        ("", "WaitingForTopology", 1, 8000, 80.0),
        ("vision", UNDECIDED, 1, 8000, 50.0),
        ("vision", "WaitingForQuota", 2, 12000, 90.0),
    ]


def test_the_order_follows_a_new_priority_and_jobs_joining_and_leaving() -> None:
    queue = WaitingQueue()
    ask(queue, "a", created="2026-01-01T00:00:00Z")
    ask(queue, "b", created="2026-01-02T00:00:00Z")
    assert [w.key[1] for w in queue.ready(0.0)] == ["a", "b"]
    ask(queue, "b", created="2026-01-02T00:00:00Z", priority=10)
    assert [w.key[1] for w in queue.ready(0.0)] == ["b", "a"]
    ask(queue, "c", priority=20)
    queue.take(("ns", "b"))
    assert [w.key[1] for w in queue.ordered()] == ["c", "a"]
    queue.hold_place(("ns", "c"))
    assert [w.key[1] for w in queue.ordered()] == ["a"]
    queue.restore_place(("ns", "c"))
    queue.cancel(("ns", "a"))
    assert [w.key[1] for w in queue.ordered()] == ["c"]


def test_asking_again_unchanged_keeps_what_was_read_from_the_queue() -> None:
    queue = WaitingQueue()
    ask(queue, "a")
    version = queue.version
    ask(queue, "a")
    assert queue.version == version, "a reconcile asking again changes nothing"
    ask(queue, "a", min_count=2)
    assert queue.version > version, "new terms are read again"


def test_asking_again_with_a_changed_gpu_resource_counts_with_the_new_one() -> None:
    queue = WaitingQueue()
    ask(queue, "a", now=1.0)
    version = queue.version
    ask(queue, "a", now=5.0, gpus=GpuSources("example.com/accel"))
    waiting = queue.waiting[("ns", "a")]
    assert (waiting.since, waiting.request.gpu_resource) == (1.0, "example.com/accel")
    assert queue.version > version, "what it counts as GPUs is read again"

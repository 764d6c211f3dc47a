"""The admitter: ordering, backfill, starvation, reservations, the ledger, what a wait says."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders.job import container, gpu_job, job
from tests.builders.node import node
from tests.builders.pod import pod
from tests.unit.controller.helpers import ask
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.packing import WAVE_HELD
from torchgate.pytorchjob.devices import GpuSources

ALONE = "#1 of 1 in the pool, nothing ahead: "  # the place a lone waiting job is told


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(nodes: int = 1, gpus: int = 8, **kw: Any) -> tuple[Admitter, list[tuple[str, str]], Clock]:
    changed: list[tuple[str, str]] = []
    clock = Clock()
    admitter = Admitter(
        on_admit_job=changed.append,
        on_reason=changed.append,
        clock=clock,
        **kw,
    )
    for index in range(nodes):
        admitter.on_node("ADDED", node(f"n{index}", gpus=gpus), None)
    return admitter, changed, clock


def test_a_gang_that_fits_is_reserved_and_its_reconcile_is_woken() -> None:
    admitter, changed, _ = make(nodes=1)
    key = ask(admitter, gpu_job("a", workers=3).build())
    assert admitter.cycle() == [key]
    assert changed == [key]
    reservation = admitter.reservation_for(key, "uid-a")
    assert reservation is not None
    assert set(reservation.values()) == {"n0"}
    assert key not in admitter.queue.waiting


def test_reservations_hold_capacity_until_the_ledger_has_the_pods() -> None:
    admitter, _, _ = make(nodes=1)
    first = ask(admitter, gpu_job("a", workers=7).build())  # 8 GPUs: the whole node
    admitter.cycle()
    second = ask(admitter, gpu_job("b", workers=0).build())
    assert admitter.cycle() == [], "the reserved GPUs must not be promised twice"
    assert (
        admitter.wait_reason(second)
        == ALONE + "waiting for 1 nvidia.com/gpu in the cluster: 0 free"
    )
    reserved = admitter.reservation_for(first, "uid-a") or {}
    # Half of the pods have been seen by the pod watch: the rest still count as reserved.
    for name in list(reserved)[:4]:
        admitter.on_pod("ADDED", pod(name, node="n0", gpus=1), None)
    assert admitter.cycle() == []
    assert admitter.reservation_for(first, "uid-a") is not None
    for name in list(reserved)[4:]:
        admitter.on_pod("ADDED", pod(name, node="n0", gpus=1), None)
    assert admitter.cycle() == []
    assert admitter.reservation_for(first, "uid-a") is None, (
        "fully observed: the ledger counts them"
    )
    # One of them is deleted: its GPU is free again.
    admitter.on_pod("DELETED", pod("a-worker-6", node="n0", gpus=1), None)
    assert admitter.cycle() == [second]


def test_higher_priority_then_older_jobs_go_first() -> None:
    admitter, _, _ = make(nodes=1)
    old = ask(admitter, job("old").master(gpus=8).build(), created="2026-01-01T00:00:00Z")
    new = ask(admitter, job("new").master(gpus=8).build(), created="2026-01-02T00:00:00Z")
    urgent = ask(
        admitter,
        job("urgent").master(gpus=8).build(),
        priority=1000,
        created="2026-01-03T00:00:00Z",
    )
    assert admitter.cycle() == [urgent]
    assert old in admitter.queue.waiting
    assert new in admitter.queue.waiting


def test_small_jobs_backfill_behind_a_big_one_until_it_starves() -> None:
    admitter, _, clock = make(nodes=1, starvation_seconds=60)
    admitter.on_pod("ADDED", pod("holder", node="n0", gpus=4), None)  # the big job must wait
    big = ask(admitter, job("big").master(gpus=8).build(), created="2026-01-01T00:00:00Z")
    small = ask(admitter, job("small").master(gpus=1).build(), created="2026-01-02T00:00:00Z")
    assert admitter.cycle() == [small], "a job that does not fit must not block one that does"
    clock.now += 120
    late = ask(admitter, job("late").master(gpus=1).build(), created="2026-01-03T00:00:00Z")
    assert admitter.cycle() == [], "after starving, the big job blocks the queue behind it"
    assert big in admitter.queue.waiting
    assert late in admitter.queue.waiting


def test_a_job_held_behind_a_starving_one_is_told_whom_it_waits_for() -> None:
    admitter, changed, clock = make(nodes=1, starvation_seconds=60)
    admitter.on_pod("ADDED", pod("holder", node="n0", gpus=4), None)
    big = ask(admitter, job("big").master(gpus=8).build(), created="2026-01-01T00:00:00Z")
    admitter.cycle()
    clock.now += 120
    late = ask(admitter, job("late").master(gpus=1).build(), created="2026-01-03T00:00:00Z")
    changed.clear()

    assert admitter.cycle() == []

    assert late in changed, "its reconcile is woken to write its Queued condition"
    assert admitter.queue.kind(late) == "Capacity"
    assert admitter.wait_reason(late) == (
        "#2 of 2 in the pool, 1 job (8 GPUs) ahead: waiting behind default/big, which has "
        "waited over 60s for room: nothing is admitted ahead of it"
    )
    assert big in admitter.queue.waiting


@pytest.mark.parametrize(
    "pod_spec",
    [
        {"nodeSelector": {"pool": "no-such-pool"}},
        {"tolerations": []},  # the only node is tainted
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "gpu", "operator": "In", "values": ["h100"]}
                                ]
                            }
                        ]
                    }
                }
            }
        },
        {},  # asks more GPUs than the only node has, even empty
    ],
    ids=[
        "nodeSelector-no-node-has",
        "taint-not-tolerated",
        "affinity-no-node-matches",
        "larger-than-any-node",
    ],
)
def test_a_job_no_node_admits_never_holds_the_queue_behind_it(pod_spec: dict[str, Any]) -> None:
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    tainted = "tolerations" in pod_spec
    admitter, _, clock = make(nodes=0, starvation_seconds=60)
    admitter.on_node("ADDED", node("n0", taints=[taint] if tainted else None), None)
    welcome = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]} if tainted else {}
    lost = ask(
        admitter,
        job("lost").master(gpus=1 if pod_spec else 16, pod_spec=pod_spec).build(),
        created="2026-01-01T00:00:00Z",
    )
    assert admitter.cycle() == []
    clock.now += 120  # far past the starvation bound
    late = ask(
        admitter,
        job("late").master(gpus=1, pod_spec=welcome).build(),
        created="2026-01-03T00:00:00Z",
    )
    assert admitter.cycle() == [late], "no job ending could make room for it: it starves no one"
    assert lost in admitter.queue.waiting
    assert ": no eligible node " in admitter.wait_reason(lost)


def host_ports(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every replica on the host network (its container port is a host port)."""
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        pod_spec = replica["template"]["spec"]
        pod_spec["hostNetwork"] = True
        pod_spec["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]
    return raw


@pytest.mark.parametrize(
    ("big", "why"),
    [
        (
            job("big").master(gpus=8).workers(2, gpus=8).build(),
            "it asks 24 nvidia.com/gpu and they have 16 even empty",
        ),
        (
            host_ports(job("big").master(gpus=1).workers(2, gpus=1).build()),
            "its pods have host ports, so each needs a node of its own, and 2 node(s) it may "
            "use can take one",
        ),
    ],
    ids=["24-gpus-on-two-8-gpu-nodes", "three-host-port-pods-on-two-nodes"],
)
def test_a_gang_its_nodes_could_not_hold_even_empty_never_holds_the_queue_behind_it(
    big: dict[str, Any], why: str
) -> None:
    admitter, _, clock = make(nodes=2, starvation_seconds=60)
    admitter.on_pod("ADDED", pod("holder", node="n0", gpus=4), None)  # nothing fits it now either
    lost = ask(admitter, big, created="2026-01-01T00:00:00Z")
    assert admitter.cycle() == []
    clock.now += 120  # far past the starvation bound
    late = ask(admitter, job("late").master(gpus=1).build(), created="2026-01-03T00:00:00Z")
    assert admitter.cycle() == [late], "no job ending could make room for it: it starves no one"
    assert lost in admitter.queue.waiting
    assert admitter.wait_reason(lost).endswith(
        ": no eligible nodes in the cluster can ever hold all 3 pods of the gang: " + why
    )


def test_a_gang_its_nodes_hold_when_empty_still_starves_the_queue() -> None:
    admitter, _, clock = make(nodes=2, starvation_seconds=60)
    admitter.on_pod("ADDED", pod("holder", node="n0", gpus=4), None)
    big = ask(admitter, gpu_job("big", workers=1, gpus=8).build(), created="2026-01-01T00:00:00Z")
    assert admitter.cycle() == []
    clock.now += 120
    ask(admitter, job("late").master(gpus=1).build(), created="2026-01-03T00:00:00Z")
    assert admitter.cycle() == [], "two empty nodes hold it: it waits for room, and starves"
    assert "can ever hold" not in admitter.wait_reason(big)


def test_a_cpu_master_beside_two_8_gpu_workers_starts_on_two_8_gpu_nodes() -> None:
    admitter, _, _ = make(nodes=2)
    launcher = job("launch").master(requests={"cpu": "4"}).workers(2, gpus=8).build()
    key = ask(admitter, launcher)

    assert admitter.cycle() == [key]
    reservation = admitter.reservation_for(key, "uid-launch")
    assert reservation == {
        "launch-master-0": "n0",  # beside rank 1
        "launch-worker-0": "n0",
        "launch-worker-1": "n1",
    }


def test_a_cpu_master_waits_for_room_beside_its_workers_not_for_a_workers_room() -> None:
    admitter, _, _ = make(nodes=3)
    admitter.on_pod("ADDED", pod("holder", node="n2", gpus=4), None)
    launcher = job("launch").master(requests={"cpu": "4"}).workers(2, gpus=8).build()
    key = ask(admitter, launcher)

    assert admitter.cycle() == [key], "two free 8-GPU nodes hold its workers and its master"


def test_backfill_keeps_off_the_nodes_the_head_gets_when_a_gang_with_a_deadline_ends() -> None:
    wall = 1_000.0
    admitter, _, _ = make(nodes=3, starvation_seconds=10**9, wall_clock=lambda: wall)
    old = ("default", "old")  # 2 nodes, ends by 30 s from now (its startTime + deadline)
    for index in range(2):
        admitter.on_pod("ADDED", pod(f"old-{index}", gang=old, node=f"n{index}", gpus=8), None)
    admitter.note(old, priority=0, gpus=GpuSources("nvidia.com/gpu"), ends_by=wall + 30)
    head = ask(admitter, gpu_job("head", workers=2, gpus=8).build(), created="2026-01-01T00:00:00Z")
    long = ask(admitter, gpu_job("long", workers=0, gpus=8).build(), created="2026-01-01T00:00:01Z")
    short = ask(
        admitter,
        gpu_job("short", workers=0, gpus=8).run_policy(activeDeadlineSeconds=20).build(),
        created="2026-01-01T00:00:02Z",
    )
    # the head (3 nodes) starts when old ends; only a gang sure to be gone by then may use n2
    assert admitter.cycle() == [short]
    assert {head, long} <= admitter.queue.waiting.keys()


def test_a_timed_out_gang_waits_out_its_backoff() -> None:
    admitter, _, clock = make(nodes=1, backoff_base=10)
    key = ask(admitter, job("slow").master(gpus=1).build())
    admitter.cycle()
    assert admitter.back_off(key) == 10
    ask(admitter, job("slow").master(gpus=1).build())
    assert admitter.cycle() == []
    clock.now += 11
    assert admitter.cycle() == [key]
    assert admitter.back_off(key) == 20, "the backoff doubles"


def test_the_wait_reason_refresh_is_throttled() -> None:
    admitter, changed, clock = make(nodes=1, reason_refresh_seconds=30)
    admitter.on_pod("ADDED", pod("other", node="n0", gpus=6), None)
    key = ask(admitter, job("w").master(gpus=8).build())
    admitter.cycle()
    assert changed == [key]
    assert (
        admitter.wait_reason(key) == ALONE + "waiting for 8 nvidia.com/gpu in the cluster: 2 free"
    )
    admitter.on_pod("MODIFIED", pod("other", node="n0", gpus=5), None)
    admitter.cycle()
    assert changed == [key], "a changed free count alone does not rewrite the status at once"
    assert (
        admitter.wait_reason(key) == ALONE + "waiting for 8 nvidia.com/gpu in the cluster: 2 free"
    ), (
        "planning sees the reported reason until the next refresh, so a reconcile woken by "
        "anything else does not write the newer count either"
    )
    clock.now += 31
    admitter.on_pod("MODIFIED", pod("other", node="n0", gpus=4), None)
    admitter.cycle()
    assert changed == [key, key]
    assert (
        admitter.wait_reason(key) == ALONE + "waiting for 8 nvidia.com/gpu in the cluster: 4 free"
    )


def test_the_ledger_ignores_finished_pods_and_follows_moves() -> None:
    admitter, _, _ = make(nodes=2)
    admitter.on_pod("ADDED", pod("p", node="n0", gpus=8), None)
    assert admitter.free()["n0"]["nvidia.com/gpu"] == 0
    done = pod("p", node="n0", gpus=8)
    done["status"]["phase"] = "Succeeded"
    admitter.on_pod("MODIFIED", done, None)
    assert admitter.free()["n0"]["nvidia.com/gpu"] == 8000
    planned = pod("q", node="", planned="n1", gpus=3)
    admitter.on_pod("ADDED", planned, None)
    assert admitter.free()["n1"]["nvidia.com/gpu"] == 5000, "a planned, unbound pod holds capacity"


def test_each_cycle_sees_what_changed_since_the_last_on_nodes_pods_and_reservations() -> None:
    admitter, _, _ = make(nodes=2, gpus=8)
    admitter.on_node("ADDED", node("n2", gpus=0), None)
    for name, where in (("x", "n0"), ("y", "n1")):
        admitter.on_pod("ADDED", pod(name, node=where, gpus=8), None)
    first = ask(admitter, job("first").master(gpus=8).build())
    assert admitter.cycle() == []
    admitter.on_node("MODIFIED", node("n2", gpus=8), None)  # the same labels, now with GPUs
    assert admitter.cycle() == [first]
    second = ask(admitter, job("second").master(gpus=8).build())
    assert admitter.cycle() == [], "n2 is reserved for the first"
    admitter.release(first)  # its pods were deleted before they were seen
    assert admitter.cycle() == [second]
    third = ask(admitter, job("third").master(gpus=8).build())
    admitter.on_pod("DELETED", pod("x", node="n0", gpus=8), None)
    assert admitter.cycle() == [third]
    assert set((admitter.reservation_for(third, "uid-third") or {}).values()) == {"n0"}


def test_cancel_forgets_a_job() -> None:
    admitter, _, _ = make(nodes=1)
    key = ask(admitter, job("gone").master(gpus=1).build())
    admitter.cancel(key)
    assert admitter.cycle() == []
    assert admitter.wait_reason(key) is None


async def test_only_freed_capacity_starts_a_cycle() -> None:
    admitter, changed, _ = make(nodes=1)
    admitter.on_pod("ADDED", pod("other", node="n0", gpus=8), None)
    key = ask(admitter, job("w").master(gpus=8).build())
    loop = asyncio.create_task(admitter.run(debounce=0, period=3600))
    try:
        await wait_until(lambda: key in changed)  # the request's cycle: it waits
        cycles = admitter.cycles
        admitter.on_pod("ADDED", pod("new", node="n0", gpus=0), None)
        admitter.on_pod("MODIFIED", pod("other", node="n0", gpus=8), None)
        await asyncio.sleep(0.05)
        assert admitter.cycles == cycles, "a new or unchanged pod cannot make room"
        done = pod("other", node="n0", gpus=8)
        done["status"]["phase"] = "Succeeded"
        admitter.on_pod("MODIFIED", done, None)
        await wait_until(lambda: admitter.cycles > cycles)
        assert key in admitter.ledger.reservations, "the freed GPUs went to the waiting job"
    finally:
        loop.cancel()


# ------------------------------------------------------------------ what a capacity wait says


def with_nodes(*raws: dict[str, Any]) -> tuple[Admitter, list[tuple[str, str]], Clock]:
    admitter, changed, clock = make(nodes=0)
    for raw in raws:
        admitter.on_node("ADDED", raw, None)
    return admitter, changed, clock


def test_total_shortfall_message_names_resource_pool_and_free() -> None:
    admitter, _, _ = with_nodes(
        node("a", labels={"pool": "a100"}),
        node("b"),
        node("c", labels={"pool": "a100"}, gpus=0),
        node("d", labels={"pool": "a100"}),
    )
    admitter.on_pod("ADDED", pod("holder", node="d", gpus=8), None)  # the pool holds it empty
    selector = {"nodeSelector": {"pool": "a100"}}
    key = ask(
        admitter,
        job("w").master(gpus=8, pod_spec=selector).workers(1, gpus=8, pod_spec=selector).build(),
    )
    admitter.cycle()
    assert admitter.wait_kind(key) == "Capacity"
    assert (
        admitter.wait_reason(key)
        == ALONE + "waiting for 16 nvidia.com/gpu in pool pool=a100: 8 free"
    )


def test_pinned_hosts_name_the_pool_in_the_capacity_message() -> None:
    admitter, _, _ = with_nodes(node("h1"), node("h2"), node("other"))
    admitter.on_pod("ADDED", pod("holder", node="h1", gpus=4), None)  # the hosts hold it empty
    key = ask(admitter, gpu_job("demo", workers=1, gpus=8).hosts("h1", "h2").build())
    admitter.cycle()
    assert (
        admitter.wait_reason(key) == ALONE + "waiting for 16 nvidia.com/gpu on hosts h1,h2: 12 free"
    )


def test_a_resource_no_node_has_is_named_as_never_placeable() -> None:
    admitter, _, _ = with_nodes(node("a"))
    key = ask(admitter, job("r").master(containers=[container(limits={"rdma/hca": 1})]).build())
    admitter.cycle()
    assert admitter.wait_reason(key) == ALONE + (
        "no eligible node in the cluster can ever hold r-master-0: it asks 1 rdma/hca and the "
        "largest node it may use has 0"
    )


def test_fragmentation_is_reported_when_totals_suffice() -> None:
    admitter, _, _ = with_nodes(node("a"), node("b"))
    admitter.on_pod("ADDED", pod("x", node="a", gpus=4), None)
    admitter.on_pod("ADDED", pod("y", node="b", gpus=4), None)
    key = ask(admitter, job("f").master(gpus=8, requests={"cpu": "1"}).build())
    admitter.cycle()
    assert admitter.wait_kind(key) == "Capacity"
    assert admitter.wait_reason(key) == (
        ALONE + "waiting for 8 nvidia.com/gpu in the cluster: 8 free but fragmented: "
        "no node has 8 nvidia.com/gpu free"
    )


def test_a_gang_no_node_admits_is_told_which_filter_excludes_every_node() -> None:
    admitter, _, _ = with_nodes(node("a"), node("b"))
    selector = {"nodeSelector": {"pool": "h100"}}
    key = ask(admitter, job("s").master(gpus=1, pod_spec=selector).build())
    admitter.cycle()
    assert admitter.wait_kind(key) == "Capacity"
    assert admitter.wait_reason(key) == (
        ALONE + "no eligible node in pool pool=h100 for s-master-0: "
        "no schedulable node has the labels pool=h100"
    )


def test_host_network_replicas_never_share_a_node() -> None:
    raw = gpu_job("demo", workers=2, gpus=1).build()
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        pod_spec = replica["template"]["spec"]
        pod_spec["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]
    admitter, _, _ = with_nodes(node("a"), node("b"), node("c"), node("d"))
    key = ask(admitter, raw)
    admitter.cycle()
    assert set((admitter.reservation_for(key, "uid-demo") or {}).values()) == {"a"}
    admitter.cancel(key)
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["hostNetwork"] = True
    key = ask(admitter, raw)
    admitter.cycle()
    spread = admitter.reservation_for(key, "uid-demo") or {}
    assert sorted(spread.values()) == ["a", "b", "c"]


# ------------------------------------------------------------------ elastic extras


def test_optional_pods_are_placed_when_they_fit_and_left_out_otherwise() -> None:
    admitter, _, _ = with_nodes(node("a", gpus=8))
    elastic = job("e").workers(3, gpus=4).scheduling(minAvailable=2).build()
    key = ask(admitter, elastic)
    assert admitter.cycle() == [key]
    assert admitter.reservation_for(key, "uid-e") == {"e-worker-0": "a", "e-worker-1": "a"}
    roomy, _, _ = with_nodes(node("a", gpus=8), node("b", gpus=8))
    key = ask(roomy, elastic)
    assert roomy.cycle() == [key]
    assert roomy.reservation_for(key, "uid-e") == {
        "e-worker-0": "a",
        "e-worker-1": "a",
        "e-worker-2": "b",
    }


def test_elastic_extras_take_their_room_before_later_gangs_of_the_cycle() -> None:
    """An extra placed once the cycle is over would land on GPUs a later gang was given."""
    admitter, _, _ = with_nodes(node("a", gpus=8))
    first = ask(
        admitter,
        job("e").workers(3, gpus=2).scheduling(minAvailable=2).build(),
        created="2026-01-01T00:00:00Z",
    )
    later = ask(admitter, job("l").master(gpus=4).build(), created="2026-01-02T00:00:00Z")
    assert admitter.cycle() == [first]
    assert len(admitter.reservation_for(first, "uid-e") or {}) == 3
    assert admitter.wait_kind(later) == "Capacity"


async def wait_until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(2):
        while not condition():  # noqa: ASYNC110 - polls state the admitter owns
            await asyncio.sleep(0.005)


async def test_jobs_queued_together_are_decided_together() -> None:
    admitter = Admitter(
        on_admit_job=lambda key: None, on_reason=lambda key: None, arrival_settle_seconds=0.2
    )
    admitter.on_node("ADDED", node("n0", gpus=8), None)
    loop = asyncio.create_task(admitter.run(debounce=0, period=3600))
    try:
        # the head of the queue reaches the controller a moment after a later job
        later = ask(admitter, job("later").master(gpus=8).build(), created="2026-01-02T00:00:00Z")
        await asyncio.sleep(0.05)
        head = ask(admitter, job("head").master(gpus=8).build(), created="2026-01-01T00:00:00Z")
        await wait_until(lambda: admitter.cycles > 0)
        assert head in admitter.ledger.reservations
        assert later in admitter.queue.waiting
    finally:
        loop.cancel()


def test_a_freed_wave_is_awaited_for_at_most_the_wave_hold() -> None:
    wall = 1_000.0
    admitter, _, clock = make(
        nodes=2, starvation_seconds=10**9, wall_clock=lambda: wall, wave_hold_seconds=2.0
    )
    old = ("default", "old")  # the part of the wave still running on n1, due in 5 s
    admitter.on_pod("ADDED", pod("old-0", gang=old, node="n1", gpus=8), None)
    admitter.note(old, priority=0, gpus=GpuSources("nvidia.com/gpu"), ends_by=wall + 5)
    alike = {"activeDeadlineSeconds": 30}
    first = ask(
        admitter,
        gpu_job("first", workers=0, gpus=8).run_policy(**alike).build(),
        created="2026-01-01T00:00:00Z",
    )
    ask(
        admitter,
        gpu_job("second", workers=1, gpus=8).run_policy(**alike).build(),
        created="2026-01-01T00:00:01Z",
    )
    assert admitter.cycle() == [], "n0 is free, but the rest of its wave is due"
    assert WAVE_HELD in (admitter.wait_reason(first) or "")
    clock.now += 2.5
    assert admitter.cycle() == [first], "the hold is bounded: the head starts"


def test_a_waiting_jobs_place_follows_the_queue_between_cycles() -> None:
    """Places are kept across cycles while the queue stands, and read again when it changes."""
    admitter, _, clock = make(nodes=1, reason_refresh_seconds=30)
    admitter.on_pod("ADDED", pod("other", node="n0", gpus=6), None)
    key = ask(admitter, job("w").master(gpus=8).build())
    admitter.cycle()
    assert (admitter.wait_reason(key) or "").startswith(ALONE)
    urgent = ask(admitter, job("urgent").master(gpus=8).build(), priority=10)
    clock.now += 31
    admitter.cycle()
    assert (admitter.wait_reason(key) or "").startswith("#2 of 2 in the pool")
    assert (admitter.wait_reason(urgent) or "").startswith("#1 of 2 in the pool")
    admitter.cancel(urgent)
    clock.now += 31
    admitter.on_pod("MODIFIED", pod("other", node="n0", gpus=5), None)
    admitter.cycle()
    assert (
        admitter.wait_reason(key) == ALONE + "waiting for 8 nvidia.com/gpu in the cluster: 3 free"
    )

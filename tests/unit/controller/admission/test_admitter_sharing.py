"""The admitter's pool-sharing shell: quotas, holds while victims terminate, topology, statuses.

And the planning side of a preemption (the victim's pods, condition, Event, restart count), and
the TeamQuota source and statuses. Assertions are on the admitter's state (reservations, holds,
reasons) and on plans, never on call order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders.gang import admitted
from tests.builders.job import gpu_job, job, with_uid
from tests.builders.node import BLOCK, HOSTNAME, RACK, labelled, node, rack_nodes
from tests.builders.pod import deletion_stamp, pod
from tests.builders.policy import parsed_policy, pool_settings
from tests.builders.team import DELETED_AT, parsed_team, team_quota
from tests.unit.controller.helpers import World, ask
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.poolsource import (
    PoolSource,
    next_status,
    says_over_quota,
    team_statuses,
)
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.informer import Informer
from torchgate.kube.resources import DEPLOYMENTS, EVENTS, TEAM_QUOTAS
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.pool import (
    QUOTA_FINALIZER,
    PoolSettings,
    TeamQuota,
)

ALONE = "#1 of 1 in the pool, nothing ahead: "  # the place a lone waiting job is told

# Two racks of two nodes, r1-0 r1-1 r2-0 r2-1.
RACKED = [node(name, labels=labels) for name, labels in rack_nodes(2, 2, first=1, separator="-")]


class Clocks:
    def __init__(self) -> None:
        self.now = 100.0
        self.wall = 1_000_000.0

    def mono(self) -> float:
        return self.now

    def wall_clock(self) -> float:
        return self.wall


def make(
    nodes: list[dict[str, Any]],
    *,
    teams: dict[str, TeamQuota] | None = None,
    settings: list[PoolSettings] | None = None,
) -> tuple[Admitter, list[tuple[str, str]], Clocks]:
    woken: list[tuple[str, str]] = []
    clocks = Clocks()
    admitter = Admitter(
        on_admit_job=woken.append,
        on_reason=woken.append,
        teams=lambda: teams or {},
        pool_settings=lambda: settings or [],
        clock=clocks.mono,
        wall_clock=clocks.wall_clock,
    )
    for raw in nodes:
        admitter.on_node("ADDED", raw, None)
    return admitter, woken, clocks


def start(admitter: Admitter, key: tuple[str, str], created: str = "2026-01-01T00:00:00Z") -> None:
    """The reserved pods show up Running in the pod cache (as the reconciler creates them)."""
    reservation = admitter.ledger.reservations[key]
    for name, node_name in reservation.nodes.items():
        gpus = reservation.requests[name].get("nvidia.com/gpu", 0) // 1000
        admitter.on_pod("ADDED", pod(name, gang=key, node=node_name, gpus=gpus), None)
    admitter.free()  # the ledger has them: the reservation settles


def in_namespace(raw: dict[str, Any], namespace: str) -> dict[str, Any]:
    raw["metadata"]["namespace"] = namespace
    return raw


# ------------------------------------------------------------------ quotas


def test_a_team_over_its_quota_waits_for_quota_and_the_status_counts_it() -> None:
    teams = {"a": parsed_team("a", 8, borrowing=0, namespaces=["ns-a"])}
    admitter, _, _ = make([node("n0"), node("n1")], teams=teams)
    first = ask(admitter, in_namespace(job("a1").master(gpus=8).build(), "ns-a"))
    second = ask(
        admitter,
        in_namespace(job("a2").master(gpus=8).build(), "ns-a"),
        created="2026-01-02T00:00:00Z",
    )
    assert admitter.cycle() == [first]
    assert admitter.wait_kind(second) == "Quota"
    assert admitter.team_status["a"] == {
        "usedGPUs": 0,  # counted from the gangs holding capacity when the cycle began
        "borrowedGPUs": 0,
        "overQuotaGPUs": 0,
        "admittedJobs": 0,
        "waitingJobs": 2,
    }
    admitter.cycle()
    assert admitter.team_status["a"]["usedGPUs"] == 8
    assert admitter.team_status["a"]["waitingJobs"] == 1


def test_capacity_waits_keep_the_placement_shortfall_message() -> None:
    admitter, _, _ = make([node("n0")])
    admitter.on_pod("ADDED", pod("o", gang=("x", "other"), node="n0", gpus=6), None)
    key = ask(admitter, job("w").master(gpus=8).build())
    admitter.cycle()
    assert admitter.wait_kind(key) == "Capacity"
    assert (
        admitter.wait_reason(key) == ALONE + "waiting for 8 nvidia.com/gpu in the cluster: 2 free"
    )


# ------------------------------------------------------------------ preemption


def test_a_preemptor_holds_the_victims_nodes_until_their_pods_are_gone() -> None:
    admitter, woken, _ = make([node("n0")])
    low = ask(admitter, gpu_job("low", workers=1, gpus=4).build(), priority=1)
    admitter.cycle()
    start(admitter, low)
    high = ask(admitter, job("high").master(gpus=8).build(), priority=100)
    assert admitter.cycle() == []
    assert admitter.preempted_by(low) == high
    assert admitter.wait_kind(high) == "Preempting"
    assert admitter.reservation_for(high, "uid-high") is None, "no pod next to the victims"
    assert low in woken, "the victim's reconcile is woken to evict its gang"

    other = ask(admitter, job("other").master(gpus=1).build(), priority=1000)
    admitter.cycle()
    assert admitter.wait_kind(other) == "Capacity", "a held node is taken by nobody else"

    admitter.on_pod("DELETED", pod("low-master-0", gang=low, node="n0", gpus=0), None)
    assert admitter.cycle() == [], "one victim pod is still there"
    admitter.on_pod("DELETED", pod("low-worker-0", gang=low, node="n0", gpus=0), None)
    assert admitter.cycle() == [high]
    assert admitter.reservation_for(high, "uid-high") == {"high-master-0": "n0"}


@pytest.mark.parametrize("deletion_seen", [True, False])
def test_a_hold_on_victims_stuck_terminating_is_given_up_after_their_grace_period(
    deletion_seen: bool,
) -> None:
    """Victim pods on a lost node never go; the preemptor must not hold its nodes forever."""
    admitter, woken, clocks = make([node("n0")])
    low = ask(admitter, job("low").master(gpus=8).build(), priority=1)
    admitter.cycle()
    start(admitter, low)
    high = ask(admitter, job("high").master(gpus=8).build(), priority=100)
    admitter.cycle()
    assert admitter.wait_kind(high) == "Preempting"
    victim = pod("low-master-0", gang=low, node="n0", gpus=8)
    if deletion_seen:  # deleted with a 30 s grace period; its node never confirms
        victim["metadata"]["deletionTimestamp"] = deletion_stamp(clocks.wall + 30)
        admitter.on_pod("MODIFIED", victim, None)
    admitter.on_node("ADDED", node("n1"), None)  # room elsewhere, while the hold waits

    clocks.wall += 30 + admitter.stuck_seconds - 1
    assert admitter.cycle() == []
    assert admitter.wait_kind(high) == "Preempting", "within its grace period and the margin"
    woken.clear()
    clocks.wall += 2
    admitted = admitter.cycle()

    if not deletion_seen:  # a pod nobody deleted yet is not stuck: the hold stays
        assert admitted == []
        assert admitter.wait_kind(high) == "Preempting"
        return
    assert admitted == [high], "decided again, without the stuck victim"
    assert admitter.reservation_for(high, "uid-high") == {"high-master-0": "n1"}
    assert high in woken
    assert admitter.preempted_by(low) == high, "the stuck gang stays a victim"
    other = ask(admitter, job("other").master(gpus=8).build(), priority=100)
    admitter.cycle()
    assert admitter.wait_kind(other) == "Capacity", "the stuck pods still take n0"


def test_a_running_gang_counts_with_the_priority_its_reconcile_reports() -> None:
    admitter, _, _ = make([node("n0")])
    admitter.on_pod("ADDED", pod("vip-master-0", gang=("ns", "vip"), node="n0", gpus=8), None)
    admitter.note(("ns", "vip"), priority=500, gpus=GpuSources("nvidia.com/gpu"))
    ask(admitter, job("mid").master(gpus=8).build(), priority=100)
    admitter.cycle()
    assert admitter.preempted_by(("ns", "vip")) is None, "its pods say 0, its job says 500"


def test_preemption_policy_never_waits() -> None:
    admitter, _, _ = make([node("n0")])
    low = ask(admitter, job("low").master(gpus=8).build(), priority=1)
    admitter.cycle()
    start(admitter, low)
    polite = ask(admitter, job("polite").master(gpus=8).build(), priority=100, preempts=False)
    admitter.cycle()
    assert admitter.preempted_by(low) is None
    assert admitter.wait_kind(polite) == "Capacity"


def test_a_gang_is_protected_for_its_minimum_run_time() -> None:
    settings = [pool_settings(preemption={"minimumRunSeconds": 600})]
    admitter, _, clocks = make([node("n0")], settings=settings)
    low = ask(admitter, job("low").master(gpus=8).build(), priority=1)
    admitter.cycle()
    start(admitter, low)
    high = ask(admitter, job("high").master(gpus=8).build(), priority=100)
    clocks.wall += 599
    admitter.cycle()
    assert admitter.preempted_by(low) is None
    clocks.wall += 2
    admitter.cycle()
    assert admitter.preempted_by(low) == high


def test_a_victim_that_asks_again_is_queued_and_no_longer_evicting() -> None:
    admitter, _, _ = make([node("n0")])
    low = ask(admitter, job("low").master(gpus=8).build(), priority=1)
    admitter.cycle()
    start(admitter, low)
    ask(admitter, job("high").master(gpus=8).build(), priority=100)
    admitter.cycle()
    admitter.on_pod("DELETED", pod("low-master-0", gang=low, node="n0", gpus=0), None)
    ask(admitter, job("low").master(gpus=8).build(), priority=1)
    assert admitter.preempted_by(low) is None
    admitter.cycle()
    assert low in admitter.queue.waiting


def test_a_victim_whose_job_is_gone_is_not_preempted_twice_onto_held_nodes() -> None:
    """The pods of a deleted job still hold their nodes: the first preemptor's hold is kept.

    The deleted job is cancelled on every event of its terminating pods; it must stay a victim
    (not a candidate again), or a second preemptor is placed on nodes the first one holds, and
    one of the two gangs cannot be bound (it waits out the 60 s schedule timeout).
    """
    admitter, _, clocks = make([node(f"n{i}") for i in range(4)])
    clocks.wall = 1_800_000_000.0  # 2027: its pods (created 2026) have run for a while
    gone = ("default", "gone")
    for i in range(4):
        admitter.on_pod("ADDED", pod(f"gone-worker-{i}", gang=gone, node=f"n{i}", gpus=8), None)
    admitter.cancel(gone)  # its job was deleted; its pods are terminating
    first = ask(admitter, gpu_job("a", workers=1, gpus=8).build(), priority=100)
    second = ask(
        admitter,
        gpu_job("b", workers=1, gpus=8).build(),
        priority=100,
        created="2026-01-02T00:00:00Z",
    )
    admitter.cycle()
    assert admitter.preempted_by(gone) == first
    admitter.cancel(gone)  # a pod event of the deleted job reconciles it again
    admitter.cycle()
    for i in range(4):
        admitter.on_pod("DELETED", pod(f"gone-worker-{i}", gang=gone, node=f"n{i}", gpus=0), None)
    admitter.cycle()
    admitter.cycle()
    nodes = [admitter.reservation_for(key, f"uid-{key[1]}") for key in (first, second)]
    assert all(nodes), "both gangs are admitted once the pods are gone"
    held = [node_name for placed in nodes for node_name in (placed or {}).values()]
    assert sorted(held) == ["n0", "n1", "n2", "n3"], "no node reserved twice"


# ------------------------------------------------------------------ topology


def test_a_required_rack_gets_one_rack_and_ranks_fill_nodes_in_order() -> None:
    settings = [pool_settings(topology={"levels": [RACK, HOSTNAME]})]
    admitter, _, _ = make(RACKED, settings=settings)
    admitter.on_pod("ADDED", pod("filler", gang=("x", "y"), node="r2-0", gpus=2), None)
    key = ask(admitter, gpu_job("t", workers=3, gpus=4).build(), topology=(RACK, True))
    assert admitter.cycle() == [key]
    nodes = admitter.reservation_for(key, "uid-t")
    assert nodes is not None
    ordered = [nodes[name] for name in ("t-master-0", "t-worker-0", "t-worker-1", "t-worker-2")]
    assert {n.split("-")[0] for n in ordered} == {"r1"}, "the rack with room for all, tightest"
    assert ordered[0] == ordered[1], "consecutive ranks share a node"
    assert ordered[2] == ordered[3]


def test_a_required_rack_that_no_rack_holds_waits_for_topology() -> None:
    settings = [pool_settings(topology={"levels": [RACK]})]
    admitter, _, _ = make(RACKED, settings=settings)
    key = ask(admitter, gpu_job("t", workers=4, gpus=4).build(), topology=(RACK, True))
    admitter.cycle()
    assert admitter.wait_kind(key) == "Topology"


@pytest.mark.parametrize("levels", [(), (BLOCK, RACK, "kubernetes.io/hostname")])
def test_a_gang_without_gpus_goes_to_the_node_without_gpus(levels: tuple[str, ...]) -> None:
    """``torchgate dev up``'s pool: racked GPU nodes and one unlabelled CPU node (the real one)."""
    racked = [
        node(name, labels=labels)
        for name, labels in labelled(
            {"b1": {"r1": ["r1-0", "r1-1"], "r2": ["r2-0", "r2-1"]}}, (BLOCK, RACK)
        )
    ]
    cpu_node = node("cpu-0", gpus=0, cpu="4")  # tighter in CPU than any GPU node, and GPU-free
    settings = [pool_settings(topology={"levels": list(levels)})]
    admitter, _, _ = make([*racked, cpu_node], settings=settings)
    requests = {"cpu": "1"}
    cpu_job = job("c").master(requests=requests).workers(1, requests=requests).build()
    key = ask(admitter, cpu_job)
    assert admitter.cycle() == [key]
    assert set((admitter.reservation_for(key, "uid-c") or {}).values()) == {"cpu-0"}
    # A GPU gang never goes there, and a second CPU gang that no longer fits it takes a GPU node.
    gpu_key = ask(admitter, gpu_job("g", workers=1, gpus=1).build())
    more = ask(admitter, job("d").master(requests={"cpu": "3"}).build())
    assert set(admitter.cycle()) == {gpu_key, more}
    assert "cpu-0" not in (admitter.reservation_for(gpu_key, "uid-g") or {}).values()
    assert "cpu-0" not in (admitter.reservation_for(more, "uid-d") or {}).values()


# ------------------------------------------------------------------ planning a preemption


def running_world() -> World:
    world = World(with_uid(gpu_job("demo", workers=1).run_policy(backoffLimit=0).build()))
    world.apply(world.plan())
    reservation = {"demo-master-0": "n1", "demo-worker-0": "n1"}
    world.apply(world.plan(reservation=reservation))
    for name in world.pods:
        world.run(name)
    world.apply(world.plan(reservation=reservation))
    return world


def conditions(world: World) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in world.job_raw["status"]["conditions"]}


def test_a_preempted_gang_loses_every_pod_and_is_told_by_whom() -> None:
    world = running_world()
    result = world.plan(preempted_by="team/urgent")
    assert sorted(result.delete_pods) == ["demo-master-0", "demo-worker-0"]
    events = [(e.reason, e.message) for e in result.events]
    assert any(r == "Preempted" and "team/urgent" in m for r, m in events)
    world.apply(result)
    assert conditions(world)["Preempted"] == ("True", "Preempted")
    assert conditions(world)["Running"][0] == "False"


def test_pods_failing_while_evicted_do_not_count_against_the_backoff_limit() -> None:
    world = running_world()
    world.apply(world.plan(preempted_by="team/urgent"))
    for name in list(world.pods):
        world.finish_pod(name, "Failed", exit_code=143)
    result = world.plan(preempted_by="team/urgent")
    assert result.restarts is None
    world.apply(result)
    assert "Failed" not in conditions(world)
    world.settle()
    again = world.plan(preempted_by="team/urgent")
    assert again.needs_admission, "back in the queue once its pods are gone"


def test_the_preempted_condition_turns_false_when_admitted_again() -> None:
    world = running_world()
    world.apply(world.plan(preempted_by="team/urgent"))
    world.settle()
    world.apply(world.plan())
    world.apply(world.plan(reservation={"demo-master-0": "n2", "demo-worker-0": "n2"}))
    assert conditions(world)["Preempted"] == ("False", "Readmitted")


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("Quota", "WaitingForQuota"),
        ("Capacity", "WaitingForResources"),
        ("Topology", "WaitingForTopology"),
        ("Preempting", "WaitingForPreemption"),
        (None, "WaitingForResources"),
    ],
)
def test_the_queued_reason_says_what_the_job_waits_for(kind: str | None, reason: str) -> None:
    world = World(with_uid(gpu_job("demo", workers=1).build()))
    result = world.plan(wait_reason="waiting", wait_kind=kind)
    world.apply(result)
    assert conditions(world)["Queued"] == ("True", reason)
    assert reason in [e.reason for e in result.events]


# ------------------------------------------------------------------ TeamQuota status (pure)


@given(
    nominal=st.integers(0, 64),
    gangs=st.lists(st.integers(0, 16), max_size=8),
    waiting=st.integers(0, 5),
)
def test_team_status_borrowed_is_used_beyond_nominal(
    nominal: int, gangs: list[int], waiting: int
) -> None:
    teams = {"t": parsed_team("t", nominal, namespaces=["ns"])}
    holding = [admitted(f"j{i}", gpus, team="t") for i, gpus in enumerate(gangs)]
    status = team_statuses(teams, holding, ["t"] * waiting + [None])["t"]
    assert status["usedGPUs"] == sum(gangs)
    assert status["borrowedGPUs"] == max(0, sum(gangs) - nominal)
    assert (status["admittedJobs"], status["waitingJobs"]) == (len(gangs), waiting)


# ------------------------------------------------------------------ TeamQuota source and status


class QuotaStatusApi:
    """Records TeamQuota status patches (path -> the status sent) and metadata patches."""

    def __init__(self, deployment: dict[str, Any] | ApiError | None = None) -> None:
        self.patches: dict[str, list[dict[str, Any]]] = {}
        self.metadata: dict[str, list[dict[str, Any]]] = {}
        self.deployment = deployment  # what reading the controller's Deployment gives
        self.events: list[dict[str, Any]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if method == "POST":
            assert path == EVENTS.path("default")
            self.events.append(body)
            return body
        if method == "GET":
            assert path == DEPLOYMENTS.path(*CONTROLLER)
            if self.deployment is None:
                raise NotFound(404, "NotFound", "not found", method, path)
            if isinstance(self.deployment, ApiError):
                raise self.deployment
            return self.deployment
        assert method == "PATCH"
        if not path.endswith("/status"):
            self.metadata.setdefault(path, []).append(body["metadata"])
            return body
        self.patches.setdefault(path, []).append(body["status"])
        return body

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


def quota_source(
    api: QuotaStatusApi,
    counters: dict[str, dict[str, int]],
    *objects: dict[str, Any],
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PoolSource:
    informer = Informer(api, TEAM_QUOTAS)  # type: ignore[arg-type]
    for obj in objects:
        informer.remember(obj)
    return PoolSource(
        api,  # type: ignore[arg-type]
        quotas=informer,
        policies=lambda: [],
        team_status=lambda: counters,
        clock=clock,
    )


def test_a_namespace_claimed_twice_leaves_the_later_team_out_and_invalid() -> None:
    source = quota_source(
        QuotaStatusApi(),
        {},
        team_quota("a", version="1", namespaces=["shared"], nominalGPUs=8),
        team_quota("b", version="1", namespaces=["shared"], nominalGPUs=8),
        team_quota("c", version="1", namespaces=["own"]),  # nominalGPUs missing
    )
    assert set(source.teams()) == {"a"}
    report = source.report()
    assert [str(e.path) for e in report["b"]] == ["spec.namespaces[0]"]
    assert [str(e.path) for e in report["c"]] == ["spec.nominalGPUs"]


async def test_team_status_is_written_once_per_change() -> None:
    api = QuotaStatusApi()
    counters = {"a": {"usedGPUs": 8, "borrowedGPUs": 0, "admittedJobs": 1, "waitingJobs": 2}}
    source = quota_source(
        api,
        counters,
        team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8),
        team_quota("bad", version="1", namespaces="ns2", nominalGPUs=8),
    )
    await source.write_once()
    await source.write_once()
    path = TEAM_QUOTAS.path(None, "a", "status")
    (written,) = api.patches[path]
    assert {k: v for k, v in written.items() if k != "conditions"} == counters["a"]
    assert [(c["type"], c["status"]) for c in written["conditions"]] == [("Valid", "True")]
    (bad,) = api.patches[TEAM_QUOTAS.path(None, "bad", "status")]
    assert [(c["type"], c["status"]) for c in bad["conditions"]] == [("Valid", "False")]
    counters["a"] = {**counters["a"], "waitingJobs": 1}
    await source.write_once()
    assert len(api.patches[path]) == 2


def counted(admitted_jobs: int) -> dict[str, int]:
    return {"usedGPUs": 8, "borrowedGPUs": 0, "admittedJobs": admitted_jobs, "waitingJobs": 0}


@pytest.mark.parametrize(
    ("finalizers", "counters", "written"),
    [
        ([], {"a": counted(1)}, ["other.io/x", QUOTA_FINALIZER]),
        ([QUOTA_FINALIZER], {"a": counted(2)}, None),
        ([QUOTA_FINALIZER], {"a": counted(0)}, ["other.io/x"]),
        ([], {"a": counted(0)}, None),
        ([QUOTA_FINALIZER], {}, None),
    ],
    ids=["gangs-admitted", "kept", "none-admitted", "idle", "not-counted-yet"],
)
async def test_the_finalizer_is_on_a_team_quota_while_its_team_has_admitted_gangs(
    finalizers: list[str], counters: dict[str, dict[str, int]], written: list[str] | None
) -> None:
    api = QuotaStatusApi()
    raw = team_quota("a", version="7", namespaces=["ns"], nominalGPUs=8)
    raw["metadata"]["finalizers"] = ["other.io/x", *finalizers]
    await quota_source(api, counters, raw).write_once()
    sent = api.metadata.get(TEAM_QUOTAS.path(None, "a"), [])
    assert sent == ([] if written is None else [{"finalizers": written, "resourceVersion": "7"}])


async def test_a_team_quota_left_out_loses_its_finalizer() -> None:
    api = QuotaStatusApi()
    raw = team_quota("bad", version="3", namespaces="ns", nominalGPUs=8)
    raw["metadata"]["finalizers"] = [QUOTA_FINALIZER]
    await quota_source(api, {}, raw).write_once()
    assert api.metadata[TEAM_QUOTAS.path(None, "bad")] == [
        {"finalizers": [], "resourceVersion": "3"}
    ]


CONTROLLER = ("torchgate-system", "torchgate-controller")


def controller_deployment(replicas: int, *, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": CONTROLLER[1], "namespace": CONTROLLER[0]}
    if deleting:
        metadata["deletionTimestamp"] = DELETED_AT
    return {"metadata": metadata, "spec": {"replicas": replicas}}


def held_quotas() -> list[dict[str, Any]]:
    held = team_quota("held", version="4", namespaces=["ns"], nominalGPUs=8)
    held["metadata"].update(finalizers=[QUOTA_FINALIZER], deletionTimestamp=DELETED_AT)
    kept = team_quota("kept", version="5", namespaces=["ns2"], nominalGPUs=8)
    kept["metadata"]["finalizers"] = ["other.io/x", QUOTA_FINALIZER]
    idle = team_quota("idle", version="6", namespaces=["ns3"], nominalGPUs=8)
    return [held, kept, idle]


RELEASED = {
    TEAM_QUOTAS.path(None, "held"): [{"finalizers": [], "resourceVersion": "4"}],
    TEAM_QUOTAS.path(None, "kept"): [{"finalizers": ["other.io/x"], "resourceVersion": "5"}],
}


@pytest.mark.parametrize(
    ("deployment", "known", "released"),
    [
        (None, False, True),
        (None, True, True),
        (controller_deployment(2, deleting=True), True, True),
        (controller_deployment(0), True, True),
        (controller_deployment(2), True, False),
        (controller_deployment(1), True, False),
        (ApiError(403, "Forbidden", "no", "GET", "/"), True, False),
    ],
    ids=[
        "deployment-not-known",
        "deployment-gone",
        "deployment-being-deleted",
        "scaled-to-zero",
        "rolling-upgrade",
        "one-replica-evicted",
        "deployment-unreadable",
    ],
)
async def test_a_stopping_controller_releases_the_team_quotas_only_when_no_successor_comes(
    deployment: dict[str, Any] | ApiError | None, known: bool, released: bool
) -> None:
    api = QuotaStatusApi(deployment)
    source = quota_source(api, {}, *held_quotas())
    result = await source.release_finalizers(seconds=5, deployment=CONTROLLER if known else None)
    assert (result, api.metadata) == ((True, RELEASED) if released else (False, {}))


def test_team_status_counts_what_a_team_holds_beyond_its_lowered_quota() -> None:
    teams = {"t": parsed_team("t", 8, 0, namespaces=["ns"])}
    holding = [admitted("j0", 8, team="t"), admitted("j1", 8, team="t")]
    status = team_statuses(teams, holding, [])["t"]
    assert (status["usedGPUs"], status["borrowedGPUs"], status["overQuotaGPUs"]) == (16, 8, 8)


async def test_a_team_over_its_quota_says_so_once_with_a_condition_and_a_warning_event() -> None:
    api = QuotaStatusApi()
    over = {"usedGPUs": 16, "borrowedGPUs": 8, "overQuotaGPUs": 8}
    counters = {"a": {**over, "admittedJobs": 2, "waitingJobs": 1}}
    raw = team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8, borrowingLimitGPUs=0)
    raw["metadata"]["uid"] = "uid-a"
    source = quota_source(api, counters, raw)
    await source.write_once()
    counters["a"] = {**counters["a"], "waitingJobs": 2}
    await source.write_once()
    first, second = api.patches[TEAM_QUOTAS.path(None, "a", "status")]
    for status in (first, second):
        assert status["overQuotaGPUs"] == 8
        assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
            ("Valid", "True", "Valid"),
            ("OverQuota", "True", "UsageAboveQuota"),
        ]
    over_quota = first["conditions"][-1]["message"]
    assert over_quota.startswith("its team's admitted gangs use 16 GPUs, 8 more than its quota")
    (event,) = api.events  # once, when it went over
    assert (event["type"], event["reason"], event["involvedObject"]["name"]) == (
        "Warning",
        "UsageAboveQuota",
        "a",
    )
    counters["a"] = {**counters["a"], "usedGPUs": 8, "borrowedGPUs": 0, "overQuotaGPUs": 0}
    await source.write_once()
    third = api.patches[TEAM_QUOTAS.path(None, "a", "status")][-1]
    assert [c["type"] for c in third["conditions"]] == ["Valid"]


def stored(raw: dict[str, Any], status: dict[str, Any], version: str) -> dict[str, Any]:
    """The TeamQuota as the cache of the next controller holds it: with the status written."""
    return {**raw, "metadata": {**raw["metadata"], "resourceVersion": version}, "status": status}


OVER = {"usedGPUs": 16, "borrowedGPUs": 8, "overQuotaGPUs": 8, "admittedJobs": 2}
WITHIN = {"usedGPUs": 8, "borrowedGPUs": 0, "overQuotaGPUs": 0, "admittedJobs": 1}


async def test_a_restarted_controller_records_the_over_quota_event_no_second_time() -> None:
    counters = {"a": {**OVER, "waitingJobs": 1}}
    raw = team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8, borrowingLimitGPUs=0)
    first = QuotaStatusApi()
    await quota_source(first, counters, raw).write_once()
    (written,) = first.patches[TEAM_QUOTAS.path(None, "a", "status")]
    assert len(first.events) == 1

    # Restarted (or a new leader): its cache holds what the first one wrote.
    restarted = QuotaStatusApi()
    source = quota_source(restarted, counters, stored(raw, written, "2"))
    await source.write_once()
    assert (restarted.events, restarted.patches) == ([], {}), "it already said so"
    counters["a"] = {**counters["a"], "waitingJobs": 3}
    await source.write_once()
    assert restarted.events == []
    assert len(restarted.patches[TEAM_QUOTAS.path(None, "a", "status")]) == 1

    # Back within quota, then over again: that is news, told once.
    counters["a"] = {**WITHIN, "waitingJobs": 0}
    await source.write_once()
    counters["a"] = {**OVER, "waitingJobs": 0}
    await source.write_once()
    await source.write_once()
    assert [event["reason"] for event in restarted.events] == ["UsageAboveQuota"]


async def test_a_condition_keeps_its_transition_time_while_its_status_stands() -> None:
    moments = iter(datetime(2026, 3, 1, 12, tzinfo=UTC) + timedelta(minutes=m) for m in range(9))
    now = next(moments)
    counters = {"a": {**WITHIN, "waitingJobs": 0}}
    raw = team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8, borrowingLimitGPUs=0)
    api = QuotaStatusApi()
    source = quota_source(api, counters, raw, clock=lambda: now)
    path = TEAM_QUOTAS.path(None, "a", "status")

    def times() -> dict[str, str]:
        return {c["type"]: c["lastTransitionTime"] for c in api.patches[path][-1]["conditions"]}

    await source.write_once()
    began = times()["Valid"]
    now = next(moments)
    counters["a"] = {**counters["a"], "waitingJobs": 2}  # a counter changes: written again
    await source.write_once()
    assert len(api.patches[path]) == 2
    assert times() == {"Valid": began}
    now = next(moments)
    counters["a"] = {**OVER, "waitingJobs": 2}
    await source.write_once()
    over_since = times()["OverQuota"]
    assert (times()["Valid"], over_since) == (began, "2026-03-01T12:02:00Z")

    # A restarted controller reads the times back from the stored status.
    now = next(moments)
    counters["a"] = {**OVER, "waitingJobs": 5}
    restarted = QuotaStatusApi()
    await quota_source(
        restarted, counters, stored(raw, api.patches[path][-1], "4"), clock=lambda: now
    ).write_once()
    (status,) = restarted.patches[path]
    assert {c["type"]: c["lastTransitionTime"] for c in status["conditions"]} == {
        "Valid": began,
        "OverQuota": over_since,
    }


async def test_a_team_quota_recreated_under_its_name_gets_its_status_written() -> None:
    counters = {"a": {**WITHIN, "waitingJobs": 0}}
    old = team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8, borrowingLimitGPUs=0)
    old["metadata"]["uid"] = "uid-old"
    api = QuotaStatusApi()
    source = quota_source(api, counters, old, clock=lambda: datetime(2026, 3, 1, 12, tzinfo=UTC))
    path = TEAM_QUOTAS.path(None, "a", "status")
    await source.write_once()
    (written,) = api.patches[path]

    # Deleted and created again under its name within one write period: a new uid, no status.
    source.quotas.forget("", "a")
    new = team_quota("a", version="7", namespaces=["ns"], nominalGPUs=8, borrowingLimitGPUs=0)
    new["metadata"]["uid"] = "uid-new"
    source.quotas.remember(new)
    await source.write_once()

    assert api.patches[path] == [written, written], "the new TeamQuota's status is its own"
    source.quotas.remember(stored(new, written, "8"))
    await source.write_once()
    assert len(api.patches[path]) == 2, "and once written, not again"


async def test_a_valid_team_no_cycle_has_counted_keeps_its_stored_status() -> None:
    api = QuotaStatusApi()
    valid = team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8)
    invalid = team_quota("bad", version="1", namespaces="ns2", nominalGPUs=8)
    await quota_source(api, {}, valid, invalid).write_once()
    assert list(api.patches) == [TEAM_QUOTAS.path(None, "bad", "status")]


@pytest.mark.parametrize(
    ("status", "over"),
    [
        ({"overQuotaGPUs": 8}, True),
        ({"overQuotaGPUs": 0}, False),
        ({"conditions": [{"type": "OverQuota", "status": "True"}]}, True),
        ({"conditions": [{"type": "OverQuota", "status": "False"}]}, False),
        ({"overQuotaGPUs": "8", "conditions": "OverQuota"}, False),
        ({"overQuotaGPUs": True, "conditions": [None, 3]}, False),
        ({}, False),
    ],
    ids=["gpus", "zero", "condition", "condition-false", "malformed", "not-numbers", "empty"],
)
def test_a_status_says_over_quota_by_its_gpus_or_its_condition(
    status: dict[str, Any], over: bool
) -> None:
    assert says_over_quota(status) is over


@pytest.mark.parametrize(
    "previous",
    [None, "text", [], {"conditions": {"type": "Valid"}}, {"usedGPUs": "8", "conditions": [7]}],
    ids=["none", "text", "list", "conditions-not-list", "wrong-types"],
)
def test_any_stored_status_is_written_over_without_crashing(previous: object) -> None:
    status = {**OVER, "waitingJobs": 0, "conditions": [{"type": "OverQuota", "status": "True"}]}
    write = next_status(status, previous, now="2026-03-01T12:00:00Z")
    assert write.goes_over
    assert write.status is not None
    assert write.status["conditions"][0]["lastTransitionTime"] == "2026-03-01T12:00:00Z"


@pytest.mark.parametrize(
    ("deleting", "admitted_jobs", "types"),
    [
        (True, 2, [("Valid", "True"), ("Deleting", "True")]),
        (False, 2, [("Valid", "True")]),
        (True, 0, [("Valid", "True")]),
    ],
    ids=["deleting-with-gangs", "kept", "deleting-idle"],
)
async def test_a_team_quota_being_deleted_says_so_while_its_gangs_run(
    deleting: bool, admitted_jobs: int, types: list[tuple[str, str]]
) -> None:
    api = QuotaStatusApi()
    raw = team_quota("a", version="1", namespaces=["ns"], nominalGPUs=8)
    if deleting:
        raw["metadata"]["deletionTimestamp"] = DELETED_AT
    await quota_source(api, {"a": counted(admitted_jobs)}, raw).write_once()
    (status,) = api.patches[TEAM_QUOTAS.path(None, "a", "status")]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == types


def test_a_team_quota_being_deleted_admits_no_new_gang_but_keeps_governing_its_gangs() -> None:
    teams = {
        "a": parsed_team("a", 8, namespaces=["ns-a"], cohort="c"),
        "b": parsed_team("b", 8, namespaces=["ns-b"], cohort="c"),
    }
    admitter, _, clocks = make([node("n0"), node("n1")], teams=teams)
    a0 = ask(admitter, in_namespace(job("a0").master(gpus=8).build(), "ns-a"))
    admitter.cycle()
    start(admitter, a0)
    clocks.now += 60
    clocks.wall += 60
    a1 = ask(admitter, in_namespace(job("a1").master(gpus=8).build(), "ns-a"))
    assert admitter.cycle() == [a1], "a borrows b's idle quota"
    start(admitter, a1)

    teams["a"] = parsed_team("a", 8, namespaces=["ns-a"], cohort="c", deleting=True)
    a2 = ask(admitter, in_namespace(job("a2").master(gpus=8).build(), "ns-a"), priority=100)
    b0 = ask(admitter, in_namespace(job("b0").master(gpus=8).build(), "ns-b"))
    assert admitter.cycle() == []
    assert admitter.wait_kind(a2) == "Quota", "no new gang of a team being deleted"
    assert "TeamQuota a is being deleted" in (admitter.wait_reason(a2) or "")
    assert admitter.preempted_by(a1) == b0, "b still reclaims what a borrows"
    assert admitter.preempted_by(a0) is None, "a's gang within its quota is not reclaimed"
    assert admitter.team_status["a"]["admittedJobs"] == 2


def test_a_job_topology_request_is_named_by_its_policy_level() -> None:
    source = quota_source(QuotaStatusApi(), {})
    chosen = parsed_policy("p", topology={"levels": ["block", RACK], "defaultLevel": "block"})
    assert source.topology_of({"torchgate.io/topology-required": RACK}, chosen) == (RACK, True)
    assert source.topology_of({}, chosen) == ("block", False), "the policy's default, preferred"
    assert source.topology_of({"torchgate.io/topology-required": "zone"}, chosen) == (None, False)

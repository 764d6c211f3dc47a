"""Topology-aware gang placement: tightest domain, fewest domains, ranks following topology."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.gang import node_free, pod_requests
from tests.builders.node import labelled
from torchgate.controller.admission.topology import (
    Capacity,
    OptionalPod,
    Shape,
    Shortfall,
    Topology,
    TopologyPlacement,
    TopologyWait,
    build_topology,
    explain_shortfall,
    fits_topology,
    fragmentation,
    gpu_free_nodes,
    job_topology,
    mixed_of,
    place_extras,
    place_topology,
    shape_of,
    slots_of,
    topology_levels,
)
from torchgate.pytorchjob.pool import GPUS, TopologyRequest

GPU = "nvidia.com/gpu"
BLOCK, RACK, HOST = "torchgate.io/block", "torchgate.io/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


def domains_spanned(topology: Topology, nodes: Iterable[str], level: int) -> int:
    """How many distinct domains of ``level`` the given nodes touch."""
    return len({topology.domain_of(name, level) for name in nodes})


def pods(n: int) -> tuple[str, ...]:
    return tuple(f"job-{'master' if i == 0 else 'worker'}-{max(i - 1, 0)}" for i in range(n))


def place(
    topology: Topology,
    free: Mapping[str, Mapping[str, int]],
    count: int,
    per_pod: int = 8,
    request: TopologyRequest | None = None,
) -> TopologyPlacement | TopologyWait:
    capacity = Capacity(topology, free)
    return place_topology(
        capacity, pods(count), shape_of([pod_requests(per_pod)]), request or TopologyRequest()
    )


# Two blocks; b1 has racks of 4 and 2 hosts, b2 one rack of 3.
LAYOUT = {
    "b1": {"r1": ["h1", "h2", "h3", "h4"], "r2": ["h5", "h6"]},
    "b2": {"r3": ["h7", "h8", "h9"]},
}
TOPOLOGY = build_topology(LEVELS, labelled(LAYOUT, (BLOCK, RACK)))
EMPTY = {name: node_free(8) for name in TOPOLOGY.node_names}


def rack_of(node: str) -> str:
    return next(rack for racks in LAYOUT.values() for rack, hosts in racks.items() if node in hosts)


# ------------------------------------------------------------------ the tree and slots


def test_domains_are_keyed_by_their_whole_path_and_an_unlabelled_node_is_its_own_domain() -> None:
    topology = build_topology(
        (BLOCK, RACK),
        [
            ("a", {BLOCK: "b1", RACK: "r1"}),
            ("b", {BLOCK: "b2", RACK: "r1"}),
            ("c", {BLOCK: "b1"}),
            ("d", {RACK: "r1"}),  # no block: its own block and rack, the rack label is moot
        ],
    )
    keys = [topology.domains[d].key for d in topology.by_level[1]]
    assert keys == [("b1", "r1"), ("b2", "r1"), ("b1", "/c"), ("/d", "/d")]
    assert topology.domain_of("c", 0) == topology.domain_of("a", 0)
    assert topology.domain_of("c", 1) not in (None, topology.domain_of("a", 1))
    assert topology.domain_of("d", 0) not in (None, topology.domain_of("a", 0))
    assert topology.domain_of("nowhere", 0) is None
    assert domains_spanned(topology, ["a", "b"], 1) == 2
    assert domains_spanned(topology, ["a", "c"], 0) == 1
    assert domains_spanned(topology, ["a", "c"], 1) == 2
    own = topology.domain_of("c", 1)
    assert own is not None
    assert topology.domain_name(own) == "node c"


@pytest.mark.parametrize(
    ("free", "requests", "one_per_node", "slots"),
    [
        (node_free(8), [pod_requests(2)], False, 4),
        (node_free(7), [pod_requests(2)], False, 3),
        (node_free(8), [pod_requests(2), pod_requests(4)], False, 2),  # counted by the largest pod
        (node_free(8), [pod_requests(1)], True, 1),
        ({GPU: 8000}, [pod_requests(1)], False, 0),  # no pod slot left
        (node_free(0), [pod_requests(1)], False, 0),
    ],
    ids=["even", "remainder", "largest-pod", "host-ports", "no-pods-resource", "full"],
)
def test_slots_of_a_node(
    free: dict[str, int], requests: list[dict[str, int]], one_per_node: bool, slots: int
) -> None:
    assert slots_of(free, shape_of(requests, one_per_node=one_per_node)) == slots


def test_a_shape_unpickled_in_another_process_is_the_same_key_as_one_made_there() -> None:
    # A shape keeps its hash once taken; string hashes differ from process to process.
    made = "Shape(((GPU, 2000), ('pods', 1000)), False, frozenset({'h1', 'h2'}))"
    script = (
        "import pickle, sys\n"
        "from torchgate.controller.admission.topology import Shape\n"
        f"GPU = {GPU!r}\n"
        "unpickled = pickle.loads(sys.stdin.buffer.read())\n"
        f"print({{{made}: 'found'}}.get(unpickled))\n"
    )
    shape = Shape(((GPU, 2000), ("pods", 1000)), False, frozenset({"h1", "h2"}))
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", script],
            input=pickle.dumps(shape),
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert result.stdout.decode().strip() == "found"


# ------------------------------------------------------------------ choosing the domain


def test_a_gang_that_fits_one_node_takes_the_tightest_node() -> None:
    free = {**EMPTY, "h5": node_free(4), "h8": node_free(2)}
    placed = place(TOPOLOGY, free, 2, per_pod=2)
    assert isinstance(placed, TopologyPlacement)
    assert set(placed.nodes.values()) == {"h5"}
    assert placed.domain == f"{HOST}=h5"


def test_a_gang_goes_to_the_rack_with_the_least_free_room_that_holds_it() -> None:
    placed = place(TOPOLOGY, EMPTY, 3)
    assert isinstance(placed, TopologyPlacement)
    assert {rack_of(n) for n in placed.nodes.values()} == {"r3"}  # r3 (3 free) beats r1 (4)
    assert placed.domain == f"{RACK}=r3"


def test_equal_room_prefers_the_domain_with_fewer_nodes() -> None:
    free = {**EMPTY, "h1": node_free(0), "h2": node_free(0), "h7": node_free(0)}
    # r1 and r2 both have 2 free whole nodes, r3 too; r2 has 2 nodes, r1 4, r3 3.
    placed = place(TOPOLOGY, free, 2)
    assert isinstance(placed, TopologyPlacement)
    assert {rack_of(n) for n in placed.nodes.values()} == {"r2"}


def test_a_gang_larger_than_any_rack_stays_in_one_block_over_the_fewest_racks() -> None:
    placed = place(TOPOLOGY, EMPTY, 5)
    assert isinstance(placed, TopologyPlacement)
    nodes = list(placed.nodes.values())
    assert placed.domain == f"{BLOCK}=b1"
    assert domains_spanned(TOPOLOGY, nodes, 1) == 2


def test_ranks_follow_topology_consecutive_ranks_share_a_rack() -> None:
    placed = place(TOPOLOGY, EMPTY, 6)
    assert isinstance(placed, TopologyPlacement)
    racks = [rack_of(placed.nodes[name]) for name in pods(6)]
    assert racks == ["r1"] * 4 + ["r2"] * 2


def test_pods_of_one_gang_pack_onto_nodes_before_spreading() -> None:
    placed = place(TOPOLOGY, EMPTY, 8, per_pod=2)
    assert isinstance(placed, TopologyPlacement)
    hosts = [placed.nodes[name] for name in pods(8)]
    assert len(set(hosts)) == 2
    assert hosts[:4] == [hosts[0]] * 4
    assert hosts[4:] == [hosts[4]] * 4


# ------------------------------------------------------------------ required and preferred


def test_a_required_rack_that_no_rack_holds_waits_for_topology() -> None:
    placed = place(TOPOLOGY, EMPTY, 5, request=TopologyRequest(1, required=True))
    assert isinstance(placed, TopologyWait)
    assert placed.kind == "Topology"
    assert not fits_topology(
        Capacity(TOPOLOGY, EMPTY), 5, shape_of([pod_requests(8)]), TopologyRequest(1, True)
    )


def test_a_preferred_rack_falls_back_to_the_block_and_says_so() -> None:
    placed = place(TOPOLOGY, EMPTY, 5, request=TopologyRequest(1, required=False))
    assert isinstance(placed, TopologyPlacement)
    assert placed.level == 0
    assert placed.preference_met is False


def test_a_required_level_that_fits_is_met() -> None:
    placed = place(TOPOLOGY, EMPTY, 4, request=TopologyRequest(1, required=True))
    assert isinstance(placed, TopologyPlacement)
    assert placed.preference_met is True
    assert {rack_of(n) for n in placed.nodes.values()} == {"r1"}


def test_a_full_pool_waits_for_capacity_whatever_the_request() -> None:
    for request in (TopologyRequest(), TopologyRequest(1, True)):
        placed = place(TOPOLOGY, EMPTY, 10, request=request)
        assert isinstance(placed, TopologyWait)
        assert placed.kind == "Capacity"


def test_a_gang_spanning_blocks_uses_the_fewest_blocks() -> None:
    placed = place(TOPOLOGY, EMPTY, 8)
    assert isinstance(placed, TopologyPlacement)
    assert placed.level == -1
    assert domains_spanned(TOPOLOGY, placed.nodes.values(), 0) == 2


def test_only_allowed_nodes_are_used() -> None:
    capacity = Capacity(TOPOLOGY, EMPTY)
    shape = shape_of([pod_requests(8)], allowed=["h5", "h7", "h8"])
    placed = place_topology(capacity, pods(3), shape, TopologyRequest())
    assert isinstance(placed, TopologyPlacement)
    assert set(placed.nodes.values()) == {"h5", "h7", "h8"}
    assert isinstance(place_topology(capacity, pods(4), shape, TopologyRequest()), TopologyWait)


def test_with_host_ports_a_gang_takes_one_node_per_pod() -> None:
    capacity = Capacity(TOPOLOGY, EMPTY)
    placed = place_topology(
        capacity, pods(2), shape_of([pod_requests(1)], one_per_node=True), TopologyRequest()
    )
    assert isinstance(placed, TopologyPlacement)
    assert len(set(placed.nodes.values())) == 2


# ------------------------------------------------------------------ nodes outside the racks


CPU_FREE = {"cpu": 4000, "pods": 100_000}


def with_cpu_node(cpu: int) -> tuple[Topology, dict[str, dict[str, int]]]:
    """The racks of ``LAYOUT`` with GPUs and plenty of CPU, plus node ``cpu-0`` with no labels."""
    nodes = [*labelled(LAYOUT, (BLOCK, RACK)), ("cpu-0", {})]
    free = {name: {**node_free(8), "cpu": 64_000} for name in TOPOLOGY.node_names}
    free["cpu-0"] = {"cpu": cpu, "pods": 110_000}
    return build_topology(LEVELS, nodes), free


def test_a_node_without_topology_labels_is_a_candidate_like_any_domain() -> None:
    topology, free = with_cpu_node(cpu=4000)
    capacity = Capacity(topology, free)
    # Two 1-CPU pods: cpu-0 has room for 4, every GPU node for 64; the tightest fit is cpu-0.
    placed = place_topology(
        capacity, pods(2), shape_of([{"cpu": 1000, "pods": 1000}]), TopologyRequest()
    )
    assert isinstance(placed, TopologyPlacement)
    assert set(placed.nodes.values()) == {"cpu-0"}
    assert placed.domain == "node cpu-0"


def test_a_gang_without_gpus_takes_the_gpu_free_nodes_first_even_when_a_gpu_node_is_tighter() -> (
    None
):
    topology, free = with_cpu_node(cpu=64_000)
    free["h5"] = {**node_free(8), "cpu": 2000}  # the tightest node for two 1-CPU pods
    cpu_pods = [{"cpu": 1000, "pods": 1000}]
    plain = place_topology(Capacity(topology, free), pods(2), shape_of(cpu_pods), TopologyRequest())
    assert isinstance(plain, TopologyPlacement)
    assert set(plain.nodes.values()) == {"h5"}  # without the preference: tightest wins
    shape = shape_of(cpu_pods, preferred=["cpu-0"])
    placed = place_topology(Capacity(topology, free), pods(2), shape, TopologyRequest())
    assert isinstance(placed, TopologyPlacement)
    assert set(placed.nodes.values()) == {"cpu-0"}


def test_a_gang_that_does_not_fit_the_preferred_nodes_goes_elsewhere_whole() -> None:
    topology, free = with_cpu_node(cpu=1000)
    shape = shape_of([{"cpu": 1000, "pods": 1000}], preferred=["cpu-0"])
    placed = place_topology(Capacity(topology, free), pods(2), shape, TopologyRequest())
    assert isinstance(placed, TopologyPlacement)
    assert "cpu-0" not in placed.nodes.values()
    assert len(set(placed.nodes.values())) == 1


def test_a_preference_that_narrows_nothing_is_dropped() -> None:
    assert shape_of([pod_requests(1)], preferred=[]).preferred is None
    assert (
        shape_of([pod_requests(1)], allowed=["h1", "h2"], preferred=["h1", "h2", "h3"]).preferred
        is None
    )
    assert shape_of([pod_requests(1)], allowed=["h1", "h2"], preferred=["h2", "h3"]).preferred == {
        "h2"
    }
    assert shape_of([pod_requests(1)], allowed=["h1"], preferred=["h3"]).preferred is None


def test_job_topology_maps_a_level_name_into_the_cycle_levels() -> None:
    levels = topology_levels([("block", "rack"), ("rack", "host")])
    assert levels == ("block", "rack", "host")
    assert job_topology("rack", True, levels).level == 1
    assert job_topology("zone", True, levels).level is None


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"cpu": 1000}, frozenset({"cpu-0", "other-gpus"})),  # GPUs of another kind do not count
        ({GPUS: 1000, "cpu": 1000}, None),  # a GPU gang has no preference
    ],
)
def test_gpu_free_nodes_are_those_without_the_policy_gpu_resource(
    usage: dict[str, int], expected: frozenset[str] | None
) -> None:
    nodes = [
        ("cpu-0", {"cpu": 4000}),
        ("zero", {"cpu": 4000, "amd.com/gpu": 0}),
        ("gpu-0", {"amd.com/gpu": 8000}),
        ("other-gpus", {"nvidia.com/gpu": 8000}),
    ]
    found = gpu_free_nodes(usage, "amd.com/gpu", nodes)
    assert found == (None if expected is None else expected | {"zero"})


# ------------------------------------------------------------------ what a capacity wait says


def explain(free: Sequence[Mapping[str, int]], requests: list[dict[str, int]], **kw: bool) -> str:
    shape = shape_of(requests, **kw)
    return explain_shortfall(free, shape, requests, where="in the cluster", gpu_resource=GPU)


def test_a_shortfall_names_the_first_resource_the_gang_needs_more_of_than_is_free() -> None:
    requests = [{**pod_requests(8), "cpu": 4000}, {**pod_requests(8), "cpu": 4000}]
    free = [{**node_free(8), "cpu": 2000}, {**node_free(4), "cpu": 2000}]
    assert explain(free, requests) == "waiting for 16 nvidia.com/gpu in the cluster: 12 free"
    roomy = [{**node_free(8), "cpu": 2000}, {**node_free(8), "cpu": 2000}]
    assert explain(roomy, requests) == "waiting for 8 cpu in the cluster: 4 free"


@pytest.mark.parametrize(
    ("free", "requests", "one_per_node", "detail"),
    [
        (
            [node_free(4), node_free(4)],
            [pod_requests(8)],
            False,
            "no node has 8 nvidia.com/gpu free",
        ),
        (
            [node_free(6), node_free(6)],
            [pod_requests(4)] * 3,
            False,
            "no node has 4 nvidia.com/gpu free",
        ),
        (
            [{**node_free(8), "cpu": 0}, {**node_free(0), "cpu": 8000}],
            [{**pod_requests(4), "cpu": 4000}],
            False,
            "no node has 4 nvidia.com/gpu and 4 cpu and 1 pods free at once",
        ),
        (
            [node_free(8), node_free(8)],
            [pod_requests(1)] * 3,
            True,
            "its pods bind host ports, one per node, and no other node has room",
        ),
    ],
    ids=["no-node-holds-a-pod", "room-left-after-filling", "not-at-once", "host-ports"],
)
def test_a_gang_that_fits_in_total_but_not_per_node_is_fragmented(
    free: list[dict[str, int]], requests: list[dict[str, int]], one_per_node: bool, detail: str
) -> None:
    text = explain(free, requests, one_per_node=one_per_node)
    assert " free but fragmented: " in text
    assert text.endswith(detail)


def test_a_capacity_wait_is_explained_from_the_capacity_when_read() -> None:
    capacity = Capacity(TOPOLOGY, {**EMPTY, "h1": node_free(4)})
    shape = shape_of([pod_requests(8)], allowed=["h1", "h2"])
    shortfall = Shortfall(
        capacity, shape, [pod_requests(8)] * 3, where="on hosts h1,h2", gpu_resource=GPU
    )
    capacity.take({"p": "h2"}, {"p": pod_requests(8)})
    assert str(shortfall) == "waiting for 24 nvidia.com/gpu on hosts h1,h2: 4 free"


# ------------------------------------------------------------------ elastic extras


def test_extras_go_to_the_gangs_nodes_first_then_to_allowed_nodes_by_name() -> None:
    capacity = Capacity(TOPOLOGY, {**EMPTY, "h5": node_free(6)})
    extras = [OptionalPod(f"x{i}", pod_requests(2), ("h3", "h5", "h9")) for i in range(5)]
    placed = place_extras(capacity, {"m": "h5"}, extras)
    assert placed == {"x0": "h5", "x1": "h5", "x2": "h5", "x3": "h3", "x4": "h3"}
    assert capacity.free[TOPOLOGY.index["h5"]][GPU] == 0, "their room is taken"


def test_an_extra_that_fits_nowhere_is_left_out() -> None:
    capacity = Capacity(TOPOLOGY, {name: node_free(2) for name in TOPOLOGY.node_names})
    placed = place_extras(capacity, {"m": "h1"}, [OptionalPod("x", pod_requests(4))])
    assert placed == {}


def test_extras_of_a_gang_with_host_ports_take_nodes_of_their_own() -> None:
    capacity = Capacity(TOPOLOGY, EMPTY)
    extras = [OptionalPod(f"x{i}", pod_requests(1)) for i in range(2)]
    placed = place_extras(capacity, {"m": "h1", "w": "h2"}, extras, one_per_node=True)
    assert placed == {"x0": "h3", "x1": "h4"}


# ------------------------------------------------------------------ properties


@hs.composite
def pools(draw: hs.DrawFn) -> tuple[Topology, dict[str, dict[str, int]]]:
    blocks = draw(hs.integers(1, 3))
    layout = {
        f"b{b}": {
            f"b{b}r{r}": [f"b{b}r{r}h{h}" for h in range(draw(hs.integers(1, 4)))]
            for r in range(draw(hs.integers(1, 3)))
        }
        for b in range(blocks)
    }
    nodes = labelled(layout, (BLOCK, RACK))
    # Some nodes outside the racks: no labels at all, or a block but no rack.
    nodes += [(f"loose{i}", {}) for i in range(draw(hs.integers(0, 2)))]
    nodes += [(f"b0loose{i}", {BLOCK: "b0"}) for i in range(draw(hs.integers(0, 1)))]
    topology = build_topology(LEVELS, nodes)
    free = {
        name: node_free(draw(hs.sampled_from((0, 1, 2, 4, 6, 8)))) for name in topology.node_names
    }
    return topology, free


def _fresh_slots(
    topology: Topology, free: Mapping[str, Mapping[str, int]], per_pod: int
) -> list[int]:
    return Capacity(topology, free).domain_slots(shape_of([pod_requests(per_pod)]))


@settings(max_examples=300, deadline=None)
@given(
    pools(),
    hs.integers(1, 12),
    hs.sampled_from((1, 2, 4, 8)),
    hs.sampled_from((None, 0, 1, 2)),
    hs.booleans(),
)
def test_placement_is_whole_within_capacity_and_never_spans_more_domains_than_needed(
    pool: tuple[Topology, dict[str, dict[str, int]]],
    count: int,
    per_pod: int,
    level: int | None,
    required: bool,
) -> None:
    topology, free = pool
    placed = place(topology, free, count, per_pod, TopologyRequest(level, required))
    slots = _fresh_slots(topology, free, per_pod)
    if isinstance(placed, TopologyWait):
        assert slots[0] < count or (
            required
            and level is not None
            and all(slots[d] < count for d in topology.by_level[level])
        )
        return
    # all or nothing, and within every node's free capacity
    assert sorted(placed.nodes) == sorted(pods(count))
    used: dict[str, int] = {}
    for node in placed.nodes.values():
        used[node] = used.get(node, 0) + per_pod * 1000
    assert all(used[node] <= free[node][GPU] for node in used)
    for lvl in range(len(LEVELS)):
        if any(slots[d] >= count for d in topology.by_level[lvl]):
            # one domain of this level holds the gang, so the placement is inside one
            assert domains_spanned(topology, placed.nodes.values(), lvl) == 1
        elif lvl == 0:
            # it must span blocks: as few as the roomiest blocks allow
            room = sorted((slots[d] for d in topology.by_level[0]), reverse=True)
            needed = next(i + 1 for i in range(len(room)) if sum(room[: i + 1]) >= count)
            assert domains_spanned(topology, placed.nodes.values(), 0) == needed
    if required and level is not None:
        assert domains_spanned(topology, placed.nodes.values(), level) == 1


@settings(max_examples=200, deadline=None)
@given(pools(), hs.integers(1, 12), hs.sampled_from((1, 2, 8)))
def test_ranks_are_contiguous_in_every_domain(
    pool: tuple[Topology, dict[str, dict[str, int]]], count: int, per_pod: int
) -> None:
    topology, free = pool
    placed = place(topology, free, count, per_pod)
    if isinstance(placed, TopologyWait):
        return
    for level in range(len(LEVELS)):
        sequence = [topology.domain_of(placed.nodes[name], level) for name in pods(count)]
        runs = [d for i, d in enumerate(sequence) if i == 0 or sequence[i - 1] != d]
        assert len(runs) == len(set(runs)), f"ranks leave and re-enter a domain at level {level}"


@settings(max_examples=200, deadline=None)
@given(pools(), hs.lists(hs.tuples(hs.integers(0, 30), hs.sampled_from((1, 2, 4)), hs.booleans())))
def test_slot_counts_kept_up_to_date_equal_counts_computed_afresh(
    pool: tuple[Topology, dict[str, dict[str, int]]], moves: list[tuple[int, int, bool]]
) -> None:
    topology, free = pool
    capacity = Capacity(topology, free)
    shapes = [shape_of([pod_requests(n)]) for n in (1, 2, 8)]
    for shape in shapes:
        capacity.domain_slots(shape)
    for index, amount, give in moves:
        node = topology.node_names[index % len(topology.node_names)]
        change = ({"p": node}, {"p": pod_requests(amount)})
        if give:
            capacity.give(*change)
        else:
            capacity.take(*change)
    now = {name: capacity.free[i] for i, name in enumerate(topology.node_names)}
    for shape in shapes:
        assert capacity.domain_slots(shape) == Capacity(topology, now).domain_slots(shape)


@settings(max_examples=200, deadline=None)
@given(pools(), hs.integers(1, 12), hs.sampled_from((1, 2, 8)), hs.data())
def test_a_gang_goes_to_its_preferred_nodes_whenever_they_hold_it_and_else_as_if_none(
    pool: tuple[Topology, dict[str, dict[str, int]]], count: int, per_pod: int, data: hs.DataObject
) -> None:
    topology, free = pool
    preferred = data.draw(hs.sets(hs.sampled_from(topology.node_names)))
    request = TopologyRequest()

    def placed(shape: Shape) -> TopologyPlacement | TopologyWait:
        return place_topology(Capacity(topology, free), pods(count), shape, request)

    chosen = placed(shape_of([pod_requests(per_pod)], preferred=preferred))
    only_there = placed(shape_of([pod_requests(per_pod)], allowed=preferred))
    anywhere = placed(shape_of([pod_requests(per_pod)]))
    if isinstance(only_there, TopologyPlacement):
        assert isinstance(chosen, TopologyPlacement)
        assert chosen.nodes == only_there.nodes
    else:
        assert chosen == anywhere


@settings(max_examples=200, deadline=None)
@given(pools(), hs.integers(1, 12), hs.sampled_from((1, 2, 4, 8)), hs.booleans())
def test_a_capacity_wait_names_a_resource_that_is_short_or_a_gang_that_is_fragmented(
    pool: tuple[Topology, dict[str, dict[str, int]]], count: int, per_pod: int, one_per_node: bool
) -> None:
    topology, free = pool
    shape = shape_of([pod_requests(per_pod)], one_per_node=one_per_node)
    capacity = Capacity(topology, free)
    placed = place_topology(capacity, pods(count), shape, TopologyRequest())
    if isinstance(placed, TopologyPlacement):
        return
    text = explain_shortfall(
        capacity.free_for(shape),
        shape,
        [pod_requests(per_pod)] * count,
        where="here",
        gpu_resource=GPU,
    )
    wanted = {GPU: per_pod * count * 1000, "pods": count * 1000}
    have = {name: sum(node.get(name, 0) for node in free.values()) for name in wanted}
    short = [name for name in (GPU, "pods") if wanted[name] > have[name]]
    if short:
        assert text.startswith(f"waiting for {wanted[short[0]] // 1000} {short[0]} here: ")
        assert "fragmented" not in text
    else:
        assert "free but fragmented" in text
        assert sum(slots_of(node, shape) for node in free.values()) < count


# ------------------------------------------------------------------ a capacity kept across cycles


def brute_force_tightest(
    topology: Topology, slots: Sequence[int], level: int, count: int
) -> int | None:
    """Rule 3 by scanning: fewest slots >= count, then fewest nodes, then smallest key."""
    domains = topology.domains
    fitting = [d for d in topology.by_level[level] if slots[d] >= count]
    if not fitting:
        return None
    return min(fitting, key=lambda d: (slots[d], domains[d].node_count, domains[d].key))


def brute_force_totals(free: Iterable[Mapping[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for node in free:
        for name, amount in node.items():
            totals[name] = totals.get(name, 0) + max(0, amount)
    return totals


# one step of a capacity's life: the shell sets a node's free capacity, or a fork takes or gives
# a pod there, or a new fork is taken (the previous one is then only read)
steps = hs.lists(
    hs.tuples(
        hs.sampled_from(("update", "take", "give", "fork")),
        hs.integers(0, 30),
        hs.sampled_from((0, 1, 2, 4, 6, 8)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(pools(), steps, hs.data())
def test_a_capacity_kept_across_cycles_and_its_forks_count_as_capacities_made_afresh(
    pool: tuple[Topology, dict[str, dict[str, int]]],
    moves: list[tuple[str, int, int]],
    data: hs.DataObject,
) -> None:
    topology, free = pool
    names = topology.node_names
    allowed = frozenset(data.draw(hs.sets(hs.sampled_from(names), min_size=1)))
    shapes = [shape_of([pod_requests(n)], allowed=a) for n in (1, 2, 8) for a in (None, allowed)]
    base = Capacity(topology, free)
    truth = {name: dict(amounts) for name, amounts in free.items()}  # what the shell knows
    fork = base.fork()
    for shape in shapes[::2]:
        fork.slots(shape)  # some shapes known before the changes, some only after
    forks: list[tuple[Capacity, dict[str, dict[str, int]]]] = []
    for step, index, gpus in moves:
        node = names[index % len(names)]
        if step == "update":
            truth[node] = node_free(gpus)
            base.update({node: truth[node]})
        elif step == "fork":
            forks.append((fork, {n: dict(fork.free[i]) for i, n in enumerate(names)}))
            fork = base.fork()
        else:
            change = ({"p": node}, {"p": pod_requests(gpus)})
            if step == "take":
                fork.take(*change)
            else:
                fork.give(*change)
    seen = {n: fork.free[i] for i, n in enumerate(names)}
    for capacity, now in [*forks, (fork, seen), (base, truth)]:
        fresh = Capacity(topology, now)
        assert [capacity.free[i] for i in range(len(names))] == [now[n] for n in names]
        for shape in shapes:
            slots = capacity.slots(shape)
            assert slots.nodes == fresh.node_slots(shape)
            assert slots.domains == fresh.domain_slots(shape)
            for level in range(len(topology.levels)):
                roomiest = max((slots.domains[d] for d in topology.by_level[level]), default=0)
                assert slots.roomiest(level) == roomiest
                for count in (1, 2, 5):
                    expected = brute_force_tightest(topology, slots.domains, level, count)
                    assert slots.tightest(level, count) == expected
            totals = brute_force_totals(fresh.free_for(shape))
            assert capacity.have(shape, [GPU, "pods"]) == {
                GPU: totals.get(GPU, 0),
                "pods": totals.get("pods", 0),
            }


def mixed_shapes(names: Sequence[str], data: hs.DataObject) -> list[Shape]:
    """One to eight GPUs a pod, anywhere or on a drawn set of nodes, with and without host ports."""
    allowed = frozenset(data.draw(hs.sets(hs.sampled_from(names), min_size=1)))
    return [
        shape_of([pod_requests(n)], allowed=a, one_per_node=ports)
        for n in (1, 2, 8)
        for a in (None, allowed)
        for ports in (False, True)
    ]


@settings(max_examples=200, deadline=None)
@given(pools(), steps, hs.data())
def test_fragmentation_kept_across_cycles_and_forks_is_fragmentation_counted_afresh(
    pool: tuple[Topology, dict[str, dict[str, int]]],
    moves: list[tuple[str, int, int]],
    data: hs.DataObject,
) -> None:
    topology, free = pool
    names = topology.node_names
    shapes = mixed_shapes(names, data)
    base = Capacity(topology, free)
    fork = base.fork()
    for shape in shapes[::3]:
        fork.fragmentation(shape)  # some shapes asked about before the changes, some only after
    for step, index, gpus in moves:
        node = names[index % len(names)]
        if step == "update":
            base.update({node: node_free(gpus)})
        elif step == "fork":
            fork = base.fork()
            fork.fragmentation(shapes[index % len(shapes)])
        else:
            change = ({"p": node}, {"p": pod_requests(gpus)})
            if step == "take":
                fork.take(*change)
            else:
                fork.give(*change)
    for capacity in (fork, base):
        for shape in shapes:
            expected = plain_fragmentation(capacity.free_for(shape), shape)
            assert fragmentation(capacity.free_for(shape), shape) == expected
            assert capacity.fragmentation(shape) == expected


def plain_fragmentation(
    free: Iterable[Mapping[str, int]], shape: Shape
) -> tuple[frozenset[str], bool]:
    """Rule 7's fragmentation node by node, as first written."""
    slot = dict(shape.pod)
    short = set(slot)
    counted = False
    for node in free:
        slots = slots_of(node, shape)
        if shape.one_per_node and slots:
            continue
        counted = True
        for name in list(short):
            if node.get(name, 0) - slots * slot[name] >= slot[name]:
                short.discard(name)
    return frozenset(short), counted


RESOURCES = ("cpu", GPU, "memory", "pods")
# what one pod asks for, or a node has free: a few resources (a pod may ask for none at all)
amounts = hs.dictionaries(hs.sampled_from(RESOURCES), hs.integers(0, 8).map(lambda n: n * 1000))
asked = hs.dictionaries(hs.sampled_from(RESOURCES), hs.integers(1, 3).map(lambda n: n * 1000))


@settings(max_examples=200, deadline=None)
@given(pools(), hs.lists(asked, min_size=1, max_size=4), hs.data())
def test_slot_counts_over_several_resources_kept_up_to_date_equal_counts_made_afresh(
    pool: tuple[Topology, dict[str, dict[str, int]]],
    requests: list[dict[str, int]],
    data: hs.DataObject,
) -> None:
    """Whichever resource runs out first (or none, when a pod asks for nothing), on every reader.

    Takes may leave a node below zero of a resource; some shapes keep their spare resources
    (rule 7) from the start, the others are asked about only after some changes.
    """
    topology, _ = pool
    names = topology.node_names
    free = {name: data.draw(amounts) for name in names}
    allowed = frozenset(data.draw(hs.sets(hs.sampled_from(names), min_size=1)))
    shapes = [
        shape_of([request], one_per_node=index % 2 == 1, allowed=(None, allowed)[index // 2 % 2])
        for index, request in enumerate(requests)
    ]
    base = Capacity(topology, free)
    fork = base.fork()
    for shape in shapes[::2]:
        fork.fragmentation(shape)
    capacities = [fork]
    moves = data.draw(
        hs.lists(
            hs.tuples(
                hs.sampled_from(("update", "take", "give", "fork")),
                hs.integers(0, 30),
                hs.integers(0, len(requests) - 1),
            )
        )
    )
    for step, index, which in moves:
        node = names[index % len(names)]
        if step == "update":
            base.update({node: data.draw(amounts)})
        elif step == "fork":
            fork = base.fork()
            capacities.append(fork)
        else:
            change = ({"p": node}, {"p": requests[which]})
            if step == "take":
                fork.take(*change)
            else:
                fork.give(*change)
        fork.slots(shapes[which])
    for capacity in [*capacities, base]:
        fresh = Capacity(topology, {name: capacity.free[i] for i, name in enumerate(names)})
        for shape in shapes:
            slots = capacity.slots(shape)
            assert slots.nodes == fresh.node_slots(shape)
            assert slots.domains == fresh.domain_slots(shape)
            for level in range(len(topology.levels)):
                roomiest = max((slots.domains[d] for d in topology.by_level[level]), default=0)
                assert slots.roomiest(level) == roomiest
                for count in (1, 2, 5):
                    expected = brute_force_tightest(topology, slots.domains, level, count)
                    assert slots.tightest(level, count) == expected
            fragmented = plain_fragmentation(capacity.free_for(shape), shape)
            assert capacity.fragmentation(shape) == fragmented


def test_a_gang_asking_for_nothing_has_every_slot_through_takes_and_gives() -> None:
    capacity = Capacity(TOPOLOGY, EMPTY)
    nothing, host_ports = shape_of([{}]), shape_of([{}], one_per_node=True)
    before = list(capacity.node_slots(nothing)), list(capacity.node_slots(host_ports))
    capacity.take({"p": "h1"}, {"p": pod_requests(8)})
    capacity.give({"p": "h2"}, {"p": pod_requests(8)})
    assert (capacity.node_slots(nothing), capacity.node_slots(host_ports)) == before
    assert set(capacity.node_slots(host_ports)) == {1}


def test_a_fork_never_changes_the_original_and_keeps_what_it_saw() -> None:
    base = Capacity(TOPOLOGY, EMPTY)
    shape = shape_of([pod_requests(8)])
    fork = base.fork()
    placed = place_topology(fork, pods(4), shape, TopologyRequest(1, True))
    assert isinstance(placed, TopologyPlacement)
    fork.take(placed.nodes, {pod: pod_requests(8) for pod in placed.nodes})
    assert fork.slots(shape).domains[0] == 5
    assert base.slots(shape).domains[0] == 9, "the pool is whole for the next cycle"
    untouched = next(n for n in TOPOLOGY.node_names if n not in placed.nodes.values())
    base.update({untouched: node_free(0)})
    assert fork.free[TOPOLOGY.index[untouched]] == EMPTY[untouched], "the fork keeps what it saw"
    assert fork.have(shape, [GPU]) == {GPU: 5 * 8000}
    assert base.fork().slots(shape).domains[0] == 8


def test_a_count_no_domain_has_any_more_is_neither_the_roomiest_nor_the_tightest() -> None:
    base = Capacity(TOPOLOGY, EMPTY)
    shape = shape_of([pod_requests(1)])
    first, last = TOPOLOGY.domain_of("h1", 2), TOPOLOGY.domain_of("h9", 2)
    assert base.slots(shape).tightest(2, 8) == first
    fork = base.fork()
    fork.take({"p": "h1"}, {"p": pod_requests(1)})
    assert fork.slots(shape).tightest(2, 8) == TOPOLOGY.domain_of("h2", 2)
    assert base.slots(shape).tightest(2, 8) == first, "a fork's counts move apart from its origin's"
    others = [name for name in TOPOLOGY.node_names if name not in ("h1", "h9")]
    fork.take({name: name for name in others}, {name: pod_requests(1) for name in others})
    assert (fork.slots(shape).roomiest(2), fork.slots(shape).tightest(2, 8)) == (8, last)
    fork.take({"p": "h9"}, {"p": pod_requests(1)})  # no host has 8 slots any more
    slots = fork.slots(shape)
    assert (slots.tightest(2, 8), slots.tightest(2, 7), slots.roomiest(2)) == (None, first, 7)
    assert slots.roomiest(1) == 28  # r1: four hosts of 7


def test_the_counts_a_fork_copies_are_those_some_domain_has() -> None:
    base = Capacity(TOPOLOGY, EMPTY)
    shape = shape_of([pod_requests(1)])
    base.slots(shape)
    base.update({name: node_free(7) for name in TOPOLOGY.node_names})  # no host keeps 8
    base.update({"h1": node_free(8)})
    base.update({"h1": node_free(6)})
    copied = base.fork().slots(shape)
    for level, by_level in enumerate(TOPOLOGY.by_level):
        held = sorted({copied.domains[domain] for domain in by_level} - {0})
        assert copied.values[level] == held
        assert sorted(copied.masks[level]) == held


def test_changed_since_says_whether_any_of_the_nodes_changed_after_so_many_edits() -> None:
    capacity = Capacity(TOPOLOGY, EMPTY).fork()
    names = TOPOLOGY.node_names
    first, second = TOPOLOGY.index[names[0]], TOPOLOGY.index[names[1]]
    before = capacity.edits
    capacity.take({"p0": names[0]}, {"p0": pod_requests(1)})
    assert capacity.changed_since([first, second], before)
    assert capacity.changed_since([second, first], before)
    assert not capacity.changed_since([second], before)
    assert not capacity.changed_since([first, second], capacity.edits)
    assert not capacity.changed_since([], before)


# one step of a fork's life within a cycle: it takes or gives a pod, lends pods back for a moment
# (asking about some shapes meanwhile), or asks about a shape (counted from then on)
cycle_steps = hs.lists(
    hs.tuples(
        hs.sampled_from(("take", "give", "lend", "ask", "update-and-fork")),
        hs.lists(hs.tuples(hs.integers(0, 30), hs.sampled_from((0, 1, 2, 4, 8))), max_size=4),
        hs.integers(0, 11),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(pools(), cycle_steps, hs.data())
def test_slot_counts_kept_through_takes_gives_and_loans_equal_counts_made_afresh(
    pool: tuple[Topology, dict[str, dict[str, int]]],
    moves: list[tuple[str, list[tuple[int, int]], int]],
    data: hs.DataObject,
) -> None:
    """Every change recounts the shapes counted so far; a loan only those asked during it."""
    topology, free = pool
    names = topology.node_names
    shapes = mixed_shapes(names, data)
    base = Capacity(topology, free)
    fork = base.fork()

    def assert_afresh(capacity: Capacity, asked: Sequence[Shape]) -> None:
        fresh = Capacity(topology, {n: capacity.free[i] for i, n in enumerate(names)})
        for shape in asked:
            slots = capacity.slots(shape)
            assert slots.nodes == fresh.node_slots(shape)
            assert slots.domains == fresh.domain_slots(shape)
            for level in range(len(topology.levels)):
                for count in (1, 2, 5):
                    expected = brute_force_tightest(topology, slots.domains, level, count)
                    assert slots.tightest(level, count) == expected

    for step, changes, which in moves:
        pods_at = {f"p{i}": names[index % len(names)] for i, (index, _) in enumerate(changes)}
        requests = {f"p{i}": pod_requests(gpus) for i, (_, gpus) in enumerate(changes)}
        if step == "take":
            fork.take(pods_at, requests)
        elif step == "give":
            fork.give(pods_at, requests)
        elif step == "ask":
            fork.slots(shapes[which])
            fork.fragmentation(shapes[(which + 5) % len(shapes)])
        elif step == "update-and-fork":
            updates = zip(pods_at.values(), changes, strict=True)
            base.update({name: node_free(gpus) for name, (_, gpus) in updates})
            fork = base.fork()
            fork.slots(shapes[which])
        else:
            before = [dict(node) for node in fork.free]
            expected = [dict(node) for node in fork.free]
            for pod, node_name in pods_at.items():
                lent_to = expected[topology.index[node_name]]
                for name, amount in requests[pod].items():
                    lent_to[name] = lent_to.get(name, 0) + amount
            with fork.lent([(pods_at, requests)]):
                assert [dict(node) for node in fork.free] == expected
                assert_afresh(fork, shapes[which : which + 2])  # the others are not asked
            assert [dict(node) for node in fork.free] == before, "a loan leaves nothing behind"
    for capacity in (fork, base):
        assert_afresh(capacity, shapes)
        for shape in shapes:
            assert capacity.fragmentation(shape) == plain_fragmentation(
                capacity.free_for(shape), shape
            )


# ------------------------------------------------------------------ rule 9: several pod shapes

CPU = "cpu"


def with_cpu(gpus: int, cpu: int) -> dict[str, int]:
    """Requests or free capacity of ``gpus`` GPUs, ``cpu`` CPUs and one pod slot."""
    return {**pod_requests(gpus), CPU: cpu * 1000} if gpus else {CPU: cpu * 1000, "pods": 1000}


def node_with_cpu(gpus: int, cpu: int) -> dict[str, int]:
    return {**node_free(gpus), CPU: cpu * 1000}


def launcher_gang(workers: int, *, master_cpu: int = 4) -> dict[str, dict[str, int]]:
    """A CPU-only Master (rank 0) and ``workers`` Workers of 8 GPUs and 8 CPUs, in rank order."""
    gang = {"job-master-0": with_cpu(0, master_cpu)}
    gang |= {f"job-worker-{i}": with_cpu(8, 8) for i in range(workers)}
    return gang


def place_gang(
    topology: Topology,
    free: Mapping[str, Mapping[str, int]],
    gang: Mapping[str, Mapping[str, int]],
    request: TopologyRequest | None = None,
    *,
    one_per_node: bool = False,
) -> TopologyPlacement | TopologyWait:
    """``gang`` (pod -> requests, rank order) placed as the admitter reads it."""
    requests = {pod: dict(asked) for pod, asked in gang.items()}
    shape = shape_of(requests.values(), one_per_node=one_per_node)
    mixed = mixed_of(requests, gpu_resource=GPU, one_per_node=one_per_node)
    return place_topology(
        Capacity(topology, free), tuple(gang), shape, request or TopologyRequest(), mixed
    )


def test_a_cpu_master_goes_beside_its_gpu_workers_on_nodes_its_largest_shape_would_not_fit() -> (
    None
):
    topology = build_topology((), [("n0", {}), ("n1", {})])
    free = {name: node_with_cpu(8, 64) for name in topology.node_names}
    gang = launcher_gang(2)

    placed = place_gang(topology, free, gang)

    assert isinstance(placed, TopologyPlacement)
    # rank 0 shares a node with rank 1
    assert placed.nodes == {"job-master-0": "n0", "job-worker-0": "n0", "job-worker-1": "n1"}
    assert list(placed.nodes) == list(gang)
    assert (placed.domain, placed.level, placed.preference_met) == ("the pool", -1, True)
    # counted by its largest request per resource alone, it needs three 8-GPU slots
    largest = shape_of(gang.values())
    by_largest = place_topology(Capacity(topology, free), tuple(gang), largest, TopologyRequest())
    assert isinstance(by_largest, TopologyWait)


def test_a_gang_of_one_shape_is_not_split() -> None:
    gang = {f"job-worker-{i}": with_cpu(8, 8) for i in range(3)}
    assert mixed_of(gang, gpu_resource=GPU) is None
    # pods asking alike of the first resource (GPUs) are all leads: one shape for placement
    assert mixed_of({"a": with_cpu(8, 8), "b": with_cpu(8, 4)}, gpu_resource=GPU) is None


def test_the_master_goes_to_a_node_of_the_workers_rack_before_another_rack() -> None:
    topology = build_topology(LEVELS, labelled(LAYOUT, (BLOCK, RACK)))
    free = {name: node_with_cpu(0, 64) for name in topology.node_names}
    # rack r2 (h5, h6) holds both workers; its nodes have CPU for the workers only
    free |= {"h5": node_with_cpu(8, 8), "h6": node_with_cpu(8, 12)}

    placed = place_gang(topology, free, launcher_gang(2))

    assert isinstance(placed, TopologyPlacement)
    assert placed.nodes == {"job-master-0": "h6", "job-worker-0": "h5", "job-worker-1": "h6"}
    assert placed.domain == "torchgate.io/rack=r2"


def test_a_master_no_node_of_the_chosen_domain_holds_goes_up_the_tree_and_widens_the_domain() -> (
    None
):
    topology = build_topology(LEVELS, labelled(LAYOUT, (BLOCK, RACK)))
    free = {name: node_with_cpu(0, 2) for name in topology.node_names}
    free |= {"h5": node_with_cpu(8, 8), "h6": node_with_cpu(8, 8), "h8": node_with_cpu(0, 64)}

    preferred = place_gang(topology, free, launcher_gang(2), TopologyRequest(1, False))
    required = place_gang(topology, free, launcher_gang(2), TopologyRequest(1, True))

    assert isinstance(preferred, TopologyPlacement)
    assert preferred.nodes["job-master-0"] == "h8"
    assert (preferred.domain, preferred.level, preferred.preference_met) == ("the pool", -1, False)
    # a required rack keeps every pod in it: no rack holds all three, so the gang waits
    assert isinstance(required, TopologyWait)


def test_with_host_ports_the_master_takes_a_node_of_its_own() -> None:
    topology = build_topology((), [("n0", {}), ("n1", {}), ("n2", {})])
    free = {name: node_with_cpu(8, 64) for name in ("n0", "n1")} | {"n2": node_with_cpu(0, 64)}

    placed = place_gang(topology, free, launcher_gang(2), one_per_node=True)

    assert isinstance(placed, TopologyPlacement)
    assert placed.nodes == {"job-master-0": "n2", "job-worker-0": "n0", "job-worker-1": "n1"}


@hs.composite
def cpu_pools(draw: hs.DrawFn) -> tuple[Topology, dict[str, dict[str, int]]]:
    topology, free = draw(pools())
    return topology, {
        name: {**room, CPU: draw(hs.sampled_from((0, 2, 4, 8, 16, 32))) * 1000}
        for name, room in free.items()
    }


mixed_gangs = hs.lists(
    hs.tuples(hs.sampled_from((0, 1, 2, 4, 8)), hs.sampled_from((1, 2, 4, 8, 16))),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    cpu_pools(),
    mixed_gangs,
    hs.sampled_from((None, 0, 1, 2)),
    hs.booleans(),
    hs.booleans(),
    hs.data(),
)
def test_a_gang_of_several_shapes_is_placed_within_each_nodes_room_wherever_it_was_before(
    pool: tuple[Topology, dict[str, dict[str, int]]],
    pods_asked: list[tuple[int, int]],
    level: int | None,
    required: bool,
    one_per_node: bool,
    data: hs.DataObject,
) -> None:
    topology, free = pool
    allowed = data.draw(hs.none() | hs.sets(hs.sampled_from(topology.node_names)))
    gang = {f"p-{i}": with_cpu(gpus, cpu) for i, (gpus, cpu) in enumerate(pods_asked)}
    request = TopologyRequest(level, required)
    shape = shape_of(gang.values(), one_per_node=one_per_node, allowed=allowed)
    mixed = mixed_of(gang, gpu_resource=GPU, one_per_node=one_per_node, allowed=allowed)
    capacity = Capacity(topology, free)

    placed = place_topology(capacity, tuple(gang), shape, request, mixed)
    before = place_topology(Capacity(topology, free), tuple(gang), shape, request)

    if isinstance(before, TopologyPlacement):
        assert isinstance(placed, TopologyPlacement), "a gang placed by its largest shape"
    if isinstance(placed, TopologyWait):
        return
    assert list(placed.nodes) == list(gang)
    used: dict[str, dict[str, int]] = {}
    for pod, node in placed.nodes.items():
        assert allowed is None or node in allowed
        for name, amount in gang[pod].items():
            used.setdefault(node, {})[name] = used.setdefault(node, {}).get(name, 0) + amount
    for node, asked in used.items():
        assert all(amount <= free[node].get(name, 0) for name, amount in asked.items()), node
    if one_per_node:
        assert len(set(placed.nodes.values())) == len(gang)
    if required and level is not None:
        assert domains_spanned(topology, placed.nodes.values(), level) == 1
    # the domain named holds every pod
    if placed.level >= 0:
        first = next(iter(placed.nodes.values()))
        domain = topology.domain_of(first, placed.level)
        assert domain is not None
        assert topology.domain_name(domain) == placed.domain
        assert domains_spanned(topology, placed.nodes.values(), placed.level) == 1
    # placement counted aside: the capacity is as it was
    assert [dict(room) for room in capacity.free] == [
        dict(free.get(name) or {}) for name in topology.node_names
    ]

"""Node eligibility (kube-scheduler's filters), what a pod asks of a node, free capacity."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.gang import demand, gang_demands, node_free, pod_requests
from tests.builders.job import container, gpu_job, job, parsed_job, with_uid
from tests.builders.node import HOSTNAME, node, parsed_node
from torchgate.controller.admission.nodes import (
    NodeView,
    PodDemand,
    Requirement,
    SelectorTerm,
    eligible_nodes,
    gang_too_large,
    job_demands,
    no_eligible_node,
    node_view,
    out_of_use,
    pod_demand,
    tolerates_all,
)
from torchgate.controller.admission.topology import (
    Capacity,
    TopologyWait,
    build_topology,
    mixed_of,
    place_topology,
    shape_of,
)
from torchgate.pytorchjob.pool import TopologyRequest
from torchgate.pytorchjob.taints import Taint, Toleration, tolerations_of

GPU = "nvidia.com/gpu"


def ready(raw: dict[str, Any], *, status: str = "True") -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["status"]["conditions"] = [{"type": "Ready", "status": status}]
    return raw


def eligible(demands: list[PodDemand], nodes: list[NodeView]) -> list[str]:
    """The nodes every pod of ``demands`` may run on."""
    found = [set(eligible_nodes(d.signature, nodes)) for d in demands]
    return sorted(set.intersection(*found))


# ------------------------------------------------------------------ nodes and capacity


def test_node_view_reads_allocatable_labels_taints() -> None:
    raw = ready(
        node("n1", gpus=8, labels={"pool": "a100"}, taints=[{"key": "k", "effect": "NoSchedule"}])
    )
    raw["status"]["allocatable"]["cpu"] = "63500m"
    raw["status"]["allocatable"]["bogus"] = "lots"
    result = node_view(raw)
    assert result is not None
    assert result.allocatable["cpu"] == 63_500
    assert result.allocatable[GPU] == 8000
    assert "bogus" not in result.allocatable
    assert result.labels["pool"] == "a100"
    assert result.taints == (Taint("k", "", "NoSchedule"),)
    assert result.schedulable


@pytest.mark.parametrize(
    ("edit", "schedulable"),
    [
        (lambda n: n, True),
        (lambda n: {**n, "spec": {"unschedulable": True}}, False),
        (lambda n: ready(n, status="False"), False),
        (lambda n: ready(n, status="Unknown"), False),
        (lambda n: {**n, "status": {**n["status"], "conditions": []}}, False),
    ],
    ids=["ready", "cordoned", "not-ready", "unknown", "no-conditions"],
)
def test_node_schedulability(edit: Callable[[Any], Any], schedulable: bool) -> None:
    result = node_view(edit(ready(node("n1"))))
    assert result is not None
    assert result.schedulable is schedulable


@pytest.mark.parametrize("raw", [None, {}, {"metadata": {}}, "node"], ids=str)
def test_node_without_name_is_skipped(raw: object) -> None:
    assert node_view(raw) is None


# ------------------------------------------------------------------ matching rules


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "v", ""), Taint("k", "v", "NoExecute"), True),
        (Toleration("k", "Equal", "w", "NoSchedule"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Exists", "", "NoExecute"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("", "Exists", "", ""), Taint("any", "v", "NoExecute"), True),
        (Toleration("other", "Exists", "", ""), Taint("k", "v", "NoSchedule"), False),
        (Toleration("k", "", "v", ""), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Gt", "1", ""), Taint("k", "2", "NoSchedule"), False),
    ],
    ids=[
        "equal",
        "empty-effect-matches-all",
        "value-differs",
        "exists",
        "effect-differs",
        "empty-key-exists-matches-all",
        "key-differs",
        "empty-operator-is-equal",
        "unknown-operator",
    ],
)
def test_toleration_matching(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


LABELS = {"pool": "a100", "gpus": "8", "zone": "z1"}


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (Requirement("pool", "In", ("a100", "h100")), True),
        (Requirement("pool", "In", ("h100",)), False),
        (Requirement("missing", "In", ("x",)), False),
        (Requirement("pool", "In", ()), False),
        (Requirement("pool", "NotIn", ("h100",)), True),
        (Requirement("missing", "NotIn", ("x",)), True),
        (Requirement("pool", "NotIn", ("a100",)), False),
        (Requirement("pool", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("pool", "Exists", ("a100",)), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("pool", "DoesNotExist"), False),
        (Requirement("gpus", "Gt", ("4",)), True),
        (Requirement("gpus", "Gt", ("8",)), False),
        (Requirement("gpus", "Lt", ("9",)), True),
        (Requirement("gpus", "Lt", ("x",)), False),
        (Requirement("pool", "Gt", ("1",)), False),
        (Requirement("missing", "Gt", ("1",)), False),
        (Requirement("gpus", "Gt", ("1", "2")), False),
        (Requirement("pool", "Near", ("a100",)), False),
    ],
    ids=lambda r: (
        f"{r.key}-{r.operator}-{','.join(r.values)}" if isinstance(r, Requirement) else ""
    ),
)
def test_affinity_operators(requirement: Requirement, matches: bool) -> None:
    assert requirement.matches_labels(LABELS) is matches


@pytest.mark.parametrize(
    ("labels", "bound"), [(LABELS, "9" * 5000), ({"gpus": "9" * 5000}, "4")], ids=["bound", "label"]
)
def test_gt_with_more_digits_than_an_int64_never_matches(
    labels: dict[str, str], bound: str
) -> None:
    # a template's affinity is the user's: 5000 digits once raised in the admission cycle
    assert not Requirement("gpus", "Gt", (bound,)).matches_labels(labels)


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        (SelectorTerm(), False),
        (SelectorTerm(fields=(Requirement("metadata.name", "In", ("n1",)),)), True),
        (SelectorTerm(fields=(Requirement("metadata.name", "NotIn", ("n1",)),)), False),
        (SelectorTerm(fields=(Requirement("metadata.uid", "In", ("n1",)),)), False),
        (
            SelectorTerm(
                (Requirement("pool", "In", ("a100",)),),
                (Requirement("metadata.name", "In", ("n1",)),),
            ),
            True,
        ),
        (
            SelectorTerm(
                (Requirement("pool", "In", ("a100",)), Requirement("zone", "In", ("z2",)))
            ),
            False,
        ),
    ],
    ids=["empty-term", "field-in", "field-notin", "unknown-field", "and", "and-fails"],
)
def test_selector_terms(term: SelectorTerm, matches: bool) -> None:
    node_labels = NodeView("n1", labels=LABELS)
    assert term.matches(node_labels) is matches


# ------------------------------------------------------------------ eligibility


def test_node_selector_restricts_the_pool() -> None:
    nodes = [parsed_node("a1", labels={"pool": "a100"}), parsed_node("h1", labels={"pool": "h100"})]
    assert eligible(gang_demands(2, 4, nodeSelector={"pool": "h100"}), nodes) == ["h1"]


def test_required_affinity_terms_are_ored() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]},
                ]
            }
        }
    }
    nodes = [parsed_node("a"), parsed_node("b"), parsed_node("c")]
    assert eligible(gang_demands(1, 1, affinity=affinity), nodes) == ["c"]


def test_untolerated_taints_exclude_nodes_prefer_no_schedule_does_not() -> None:
    nodes = [
        parsed_node("a", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]),
        parsed_node("b", taints=[{"key": "gone", "effect": "NoExecute"}]),
        parsed_node("c", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
    ]
    assert eligible(gang_demands(1, 8), nodes) == ["c"]
    tolerating = gang_demands(
        2, 8, tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infer"}]
    )
    assert eligible(tolerating, nodes) == ["a", "c"]


def test_unschedulable_nodes_are_never_used() -> None:
    cordoned = node_view({**ready(node("a")), "spec": {"unschedulable": True}})
    assert cordoned is not None
    assert eligible(gang_demands(1, 1), [cordoned, parsed_node("b")]) == ["b"]


@pytest.mark.parametrize(
    ("nodes", "pod_spec", "reason"),
    [
        ([], {}, "the cluster has no nodes"),
        (
            [NodeView("a", schedulable=False), NodeView("b", schedulable=False)],
            {},
            "all 2 nodes are cordoned or not Ready",
        ),
        ([NodeView("a")], {"nodeSelector": {"pool": "a100"}}, "no schedulable node has the labels"),
        (
            [NodeView("a")],
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "x", "operator": "Exists"}]}
                            ]
                        }
                    }
                }
            },
            "no schedulable node matches the required node affinity",
        ),
        (
            [NodeView("a", taints=(Taint("gpu", "true", "NoSchedule"),))],
            {},
            "every matching node has a taint the pod does not tolerate (gpu=true:NoSchedule)",
        ),
    ],
    ids=["no-nodes", "all-cordoned", "selector", "affinity", "taints"],
)
def test_no_eligible_node_says_which_constraint_excludes_them(
    nodes: list[NodeView], pod_spec: dict[str, Any], reason: str
) -> None:
    pod = demand("demo-master-0", 1, **pod_spec)
    assert eligible_nodes(pod.signature, nodes) == ()
    message = no_eligible_node(pod, nodes)
    assert "demo-master-0" in message
    assert reason in message


def test_pinned_hosts_restrict_and_name_the_pool() -> None:
    raw = with_uid(gpu_job("demo", workers=1, gpus=8).hosts("h1", "h2").build())
    demands = list(job_demands(parsed_job(raw)))
    nodes_ok = [parsed_node("h1", gpus=8), parsed_node("h2", gpus=8), parsed_node("other", gpus=8)]
    assert eligible(demands, nodes_ok) == ["h1", "h2"]
    missing = no_eligible_node(demands[0], [parsed_node("other")])
    assert missing.startswith("no eligible node on hosts h1,h2 for demo-master-0: ")
    assert "none of the pinned hosts is a schedulable node" in missing


def test_job_demands_are_in_gang_order_with_a_pod_slot_each() -> None:
    raw = with_uid(job("demo").master(gpus=1).workers(2, gpus=2).build())
    demands = job_demands(parsed_job(raw))
    assert [d.pod_name for d in demands] == ["demo-master-0", "demo-worker-0", "demo-worker-1"]
    assert demands[1].requests == {GPU: 2000, "pods": 1000}


def test_host_ports_are_read_from_every_container() -> None:
    template = {
        "spec": {
            "hostNetwork": True,
            "initContainers": [{"name": "i", "ports": [{"hostPort": 9000, "protocol": "UDP"}]}],
            "containers": [
                container(),
                {"name": "s", "ports": [{"containerPort": 23456}, {"containerPort": True}]},
            ],
        }
    }
    assert pod_demand("p", template).host_ports == {("UDP", 9000), ("TCP", 23456)}
    no_host = {"spec": {"containers": [{"name": "s", "ports": [{"containerPort": 23456}]}]}}
    assert pod_demand("p", no_host).host_ports == frozenset()


def test_a_toleration_for_a_while_still_admits_the_node_as_kube_scheduler_does() -> None:
    spec = {
        "tolerations": [
            {"key": "gone", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
        ]
    }
    (toleration,) = tolerations_of(spec)
    assert toleration == Toleration("gone", "Exists", "", "NoExecute", seconds=60)
    assert tolerates_all([toleration], [Taint("gone", "", "NoExecute")])


# ------------------------------------------------------------------ rule 6: gang_too_large

RACK_LEVEL = "torchgate.io/rack"


def empty_pool(*gpus: int, racks: int = 1) -> Capacity:
    """Empty nodes ``n0``, ``n1``... of ``gpus`` GPUs each, dealt round-robin into ``racks``."""
    names = [f"n{i}" for i in range(len(gpus))]
    topology = build_topology(
        (RACK_LEVEL, HOSTNAME), [(n, {RACK_LEVEL: f"r{i % racks}"}) for i, n in enumerate(names)]
    )
    return Capacity(topology, {n: node_free(g) for n, g in zip(names, gpus, strict=True)})


def too_large(
    empty: Capacity,
    requests: list[dict[str, int]],
    *,
    one_per_node: bool = False,
    allowed: set[str] | None = None,
    request: TopologyRequest | None = None,
) -> str | None:
    shape = shape_of(requests, one_per_node=one_per_node, allowed=allowed)
    return gang_too_large(
        empty,
        requests,
        shape,
        request or TopologyRequest(),
        where="in the cluster",
        gpu_resource=GPU,
    )


@pytest.mark.parametrize(
    ("gpus", "pods", "options", "expected"),
    [
        ((8, 8), [8, 8, 8], {}, "it asks 24 nvidia.com/gpu and they have 16 even empty"),
        ((8, 8, 8), [8, 8, 8], {}, None),
        ((8, 8, 8), [8, 8, 8], {"allowed": {"n0", "n1"}}, "it asks 24 nvidia.com/gpu and they"),
        ((8, 8), [1, 1, 1], {"one_per_node": True}, "2 node(s) it may use can take one"),
        ((8, 8, 8), [1, 1, 1], {"one_per_node": True}, None),
        ((6, 6, 6), [4, 4, 4, 4], {}, "even empty they have room for 3 of them"),
        (
            (8, 8, 8, 8),
            [8, 8, 8],
            {"request": TopologyRequest(level=0, required=True)},
            "no torchgate.io/rack domain in the cluster can ever hold all 3 pods of the gang: "
            "the roomiest has room for 2 even empty",
        ),
        ((8, 8, 8, 8), [8, 8, 8], {"request": TopologyRequest(level=0, required=False)}, None),
    ],
    ids=[
        "24-gpus-on-two-8-gpu-nodes",
        "24-gpus-on-three-8-gpu-nodes",
        "24-gpus-on-the-two-8-gpu-nodes-it-may-use",
        "host-ports-three-pods-two-nodes",
        "host-ports-three-pods-three-nodes",
        "fragmented-even-empty",
        "required-rack-none-holds",
        "preferred-rack-falls-back-to-the-pool",
    ],
)
def test_a_gang_its_nodes_could_not_hold_even_empty_is_too_large(
    gpus: tuple[int, ...], pods: list[int], options: dict[str, Any], expected: str | None
) -> None:
    racks = 2 if "request" in options else 1
    why = too_large(empty_pool(*gpus, racks=racks), [pod_requests(g) for g in pods], **options)
    if expected is None:
        assert why is None
    else:
        assert why is not None
        assert expected in why
        if not expected.startswith("no torchgate.io/rack"):
            assert why.startswith(
                f"no eligible nodes in the cluster can ever hold all {len(pods)} pods of the gang"
            )


@settings(max_examples=300, deadline=None)
@given(
    hs.lists(hs.sampled_from((0, 1, 2, 4, 8)), min_size=1, max_size=6),
    hs.lists(hs.sampled_from((1, 2, 4, 8)), min_size=1, max_size=8),
    hs.booleans(),
    hs.integers(1, 3),
    hs.sampled_from((None, 0, 1)),
    hs.booleans(),
    hs.data(),
)
def test_a_gang_is_too_large_exactly_when_placement_on_empty_nodes_fails(
    gpus: list[int],
    pods: list[int],
    one_per_node: bool,
    racks: int,
    level: int | None,
    required: bool,
    data: hs.DataObject,
) -> None:
    empty = empty_pool(*gpus, racks=racks)
    names = [f"n{i}" for i in range(len(gpus))]
    allowed = data.draw(hs.none() | hs.sets(hs.sampled_from(names)))
    requests = [pod_requests(g) for g in pods]
    request = TopologyRequest(level=level, required=required)
    why = too_large(empty, requests, one_per_node=one_per_node, allowed=allowed, request=request)
    shape = shape_of(requests, one_per_node=one_per_node, allowed=allowed)
    placed = place_topology(empty, tuple(f"p-{i}" for i in range(len(pods))), shape, request)
    assert (why is not None) == isinstance(placed, TopologyWait), why


def cpu_pool(*rooms: tuple[int, int], racks: int = 1) -> Capacity:
    """Empty nodes ``n0``, ``n1``... of (GPUs, CPUs) each, dealt round-robin into ``racks``."""
    names = [f"n{i}" for i in range(len(rooms))]
    topology = build_topology(
        (RACK_LEVEL, HOSTNAME), [(n, {RACK_LEVEL: f"r{i % racks}"}) for i, n in enumerate(names)]
    )
    free = {n: {**node_free(g), "cpu": c * 1000} for n, (g, c) in zip(names, rooms, strict=True)}
    return Capacity(topology, free)


def cpu_pod(gpus: int, cpu: int) -> dict[str, int]:
    return {**pod_requests(gpus), "cpu": cpu * 1000} if gpus else {"cpu": cpu * 1000, "pods": 1000}


def mixed_too_large(
    empty: Capacity,
    gang: dict[str, dict[str, int]],
    *,
    one_per_node: bool = False,
    allowed: set[str] | None = None,
    request: TopologyRequest | None = None,
) -> str | None:
    shape = shape_of(gang.values(), one_per_node=one_per_node, allowed=allowed)
    mixed = mixed_of(gang, gpu_resource=GPU, one_per_node=one_per_node, allowed=allowed)
    return gang_too_large(
        empty,
        list(gang.values()),
        shape,
        request or TopologyRequest(),
        where="in the cluster",
        gpu_resource=GPU,
        mixed=mixed,
    )


def test_a_cpu_master_and_two_8_gpu_workers_are_not_too_large_for_two_8_gpu_nodes() -> None:
    gang = {"j-master-0": cpu_pod(0, 4), "j-worker-0": cpu_pod(8, 8), "j-worker-1": cpu_pod(8, 8)}

    assert mixed_too_large(cpu_pool((8, 64), (8, 64)), gang) is None
    # with no CPU left beside the workers, the master fits nowhere: too large as before
    why = mixed_too_large(cpu_pool((8, 8), (8, 8)), gang)
    assert why is not None
    assert why.startswith("no eligible nodes in the cluster can ever hold all 3 pods of the gang")


@settings(max_examples=300, deadline=None)
@given(
    hs.lists(
        hs.tuples(hs.sampled_from((0, 1, 2, 4, 8)), hs.sampled_from((0, 4, 8, 32))),
        min_size=1,
        max_size=6,
    ),
    hs.lists(
        hs.tuples(hs.sampled_from((0, 1, 2, 8)), hs.sampled_from((1, 2, 4, 8))),
        min_size=1,
        max_size=8,
    ),
    hs.booleans(),
    hs.integers(1, 3),
    hs.sampled_from((None, 0, 1)),
    hs.booleans(),
    hs.data(),
)
def test_a_gang_of_several_shapes_is_too_large_exactly_when_placement_on_empty_nodes_fails(
    rooms: list[tuple[int, int]],
    pods: list[tuple[int, int]],
    one_per_node: bool,
    racks: int,
    level: int | None,
    required: bool,
    data: hs.DataObject,
) -> None:
    empty = cpu_pool(*rooms, racks=racks)
    names = [f"n{i}" for i in range(len(rooms))]
    allowed = data.draw(hs.none() | hs.sets(hs.sampled_from(names)))
    gang = {f"p-{i}": cpu_pod(gpus, cpu) for i, (gpus, cpu) in enumerate(pods)}
    request = TopologyRequest(level=level, required=required)

    why = mixed_too_large(empty, gang, one_per_node=one_per_node, allowed=allowed, request=request)

    shape = shape_of(gang.values(), one_per_node=one_per_node, allowed=allowed)
    mixed = mixed_of(gang, gpu_resource=GPU, one_per_node=one_per_node, allowed=allowed)
    placed = place_topology(empty, tuple(gang), shape, request, mixed)
    assert (why is not None) == isinstance(placed, TopologyWait), why


# ------------------------------------------------------------------ rule 7: nodes out of use

HEALTH = {"key": "nvidia.com/gpu-health", "value": "unhealthy", "effect": "NoExecute"}
POOL = {"pool": "a100"}


def sick(
    name: str, *, ready_status: str = "True", cordoned: bool = False, **fields: Any
) -> NodeView:
    """A node of pool a100 (unless ``labels`` say otherwise) in the given state."""
    raw = ready(node(name, **{"labels": POOL, **fields}), status=ready_status)
    if cordoned:
        raw["spec"]["unschedulable"] = True
    view = node_view(raw)
    assert view is not None
    return view


def clause_of(nodes: list[NodeView], demands: list[PodDemand]) -> str | None:
    wanted: dict[str, int] = {}
    for d in demands:
        for name, amount in d.requests.items():
            wanted[name] = wanted.get(name, 0) + amount
    by_name = {n.name: n for n in nodes}
    found = out_of_use(
        frozenset(d.signature for d in demands),
        nodes,
        wanted=wanted,
        gpu_resource=GPU,
        capacity_of=lambda name: by_name[name].allocatable,
    )
    return None if found is None else found.clause()


IN_POOL = [demand("w-0", 8, nodeSelector=POOL), demand("w-1", 8, nodeSelector=POOL)]
TOLERANT = [
    demand(
        f"w-{i}", 8, nodeSelector=POOL, tolerations=[{"key": HEALTH["key"], "operator": "Exists"}]
    )
    for i in range(2)
]
CPU_ONLY = [demand("c-0", 0, cpu="4", nodeSelector=POOL)]


@pytest.mark.parametrize(
    ("nodes", "demands", "clause"),
    [
        (
            [
                sick("a", taints=[HEALTH]),
                sick("b", taints=[HEALTH]),
                sick("c", ready_status="False"),
                sick("d"),
            ],
            IN_POOL,
            "(24 nvidia.com/gpu more on 3 nodes out of use: 2 tainted nvidia.com/gpu-health, "
            "1 NotReady)",
        ),
        (
            [sick("a", ready_status="Unknown"), sick("b", cordoned=True)],
            IN_POOL,
            "(16 nvidia.com/gpu more on 2 nodes out of use: 1 NotReady, 1 cordoned)",
        ),
        (
            [
                sick(
                    "q",
                    taints=[
                        {"key": "torchgate.io/quarantine", "value": "x", "effect": "NoSchedule"}
                    ],
                )
            ],
            IN_POOL,
            "(8 nvidia.com/gpu more on 1 node out of use: 1 quarantined)",
        ),
        ([sick("a", taints=[HEALTH])], TOLERANT, None),
        ([sick("a", taints=[HEALTH], labels={"pool": "h100"})], IN_POOL, None),
        ([sick("a", ready_status="False", gpus=0)], IN_POOL, None),
        ([sick("a", taints=[{**HEALTH, "effect": "PreferNoSchedule"}])], IN_POOL, None),
        ([sick("a"), sick("b")], IN_POOL, None),
        (
            [sick("a", ready_status="False", gpus=0), sick("b", gpus=0)],
            CPU_ONLY,
            "(64 cpu more on 1 node out of use: 1 NotReady)",
        ),
        (
            [sick("a", taints=[HEALTH]), sick("b", ready_status="False")],
            [*IN_POOL, demand("m-0", 0, cpu="1", nodeSelector={"pool": "cpu"})],
            None,
        ),
    ],
    ids=[
        "two-health-tainted-one-notready",
        "lost-counts-as-notready-and-cordoned",
        "torchgate-quarantine",
        "tolerated-taint-is-in-use",
        "other-pool-is-not-out-of-use",
        "notready-node-without-gpus-is-not-counted",
        "prefer-no-schedule-keeps-nothing-off",
        "healthy-nodes",
        "cpu-job-counts-cpu",
        "a-pod-whose-selector-excludes-them",
    ],
)
def test_the_nodes_out_of_use_for_a_gang_are_those_only_their_state_keeps_it_off(
    nodes: list[NodeView], demands: list[PodDemand], clause: str | None
) -> None:
    assert clause_of(nodes, demands) == clause

"""Capacity accounting and all-or-nothing gang placement.

Why torchgate places gangs itself instead of leaving it to kube-scheduler: kube-scheduler places
one pod at a time, so creating all pods of two large jobs at once lets each grab part of a GPU pool
and hold it while waiting for the rest, forever. The admitter instead asks ``place_gang`` whether
the *whole* gang fits the free capacity it sees, reserves it, and only then are pods created, each
pinned by a required node affinity to its planned node (``pods.pin_to_node``), so kube-scheduler
still runs every other check but cannot scatter the gang. ``free_capacity`` counts pods that are
planned but not yet bound, so the admitter never promises the same GPUs twice.

The eligibility rules mirror kube-scheduler's filters for what a pod template can say:
``nodeSelector``, required node affinity (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
``Lt``; ``matchFields`` on ``metadata.name``), taints with effect ``NoSchedule``/``NoExecute``
against tolerations (``PreferNoSchedule`` is only a preference), cordoned and not-Ready nodes,
every requested resource including the ``pods`` count, and host ports (with ``hostNetwork`` every
replica binds port 23456, so two pods of one gang never share a node). Packing uses as few nodes
as possible: NCCL inside a node is far faster than across nodes, and whole free nodes stay
available to the next large job.

Cost: the admitter calls ``place_gang`` for up to ~1,000 waiting jobs against ~200 nodes per
cycle, so it is O(pods x eligible nodes), exits early when the total free capacity is short, and
computes node eligibility once per distinct (nodeSelector, affinity, tolerations, hosts) signature
(optionally shared across calls of one cycle through ``eligibility_cache``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Literal

from torchgate.pytorchjob import names
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity
from torchgate.pytorchjob.spec import JobSpec, pinned_hosts, pod_requests, pod_spec_of

ZERO: Final = Decimal(0)
PODS: Final = "pods"
BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
TERMINATED_PHASES: Final = frozenset({"Succeeded", "Failed"})
_MEMORY_LIKE = re.compile(r"^(memory|ephemeral-storage|hugepages-.*)$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_BINARY_SUFFIXES: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
)

Resources = Mapping[str, Decimal]


# ------------------------------------------------------------------ constraint model


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (``operator`` empty means ``Equal``)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: empty key with ``Exists`` matches all."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return False


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``NodeSelectorRequirement`` (of ``matchExpressions`` or ``matchFields``)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches_labels(self, labels: Mapping[str, str]) -> bool:
        """Whether node labels satisfy this requirement; a malformed one never matches."""
        operator, values, present = self.operator, self.values, self.key in labels
        if operator == "In":
            return bool(values) and present and labels[self.key] in values
        if operator == "NotIn":
            return bool(values) and (not present or labels[self.key] not in values)
        if operator == "Exists":
            return not values and present
        if operator == "DoesNotExist":
            return not values and not present
        if operator in ("Gt", "Lt"):
            if len(values) != 1 or not present:
                return False
            label, bound = labels[self.key], values[0]
            if not _INTEGER.match(label) or not _INTEGER.match(bound):
                return False
            return int(label) > int(bound) if operator == "Gt" else int(label) < int(bound)
        return False

    def matches_name(self, node_name: str) -> bool:
        """Whether a ``matchFields`` requirement holds; only ``metadata.name`` is a node field."""
        if self.key != "metadata.name" or not self.values:
            return False
        if self.operator == "In":
            return node_name in self.values
        if self.operator == "NotIn":
            return node_name not in self.values
        return False


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One ``nodeSelectorTerm``: its requirements are AND-ed; an empty term matches nothing."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, node: NodeView) -> bool:
        """Whether ``node`` satisfies every requirement of the term."""
        if not self.expressions and not self.fields:
            return False
        return all(r.matches_labels(node.labels) for r in self.expressions) and all(
            r.matches_name(node.name) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class NodeView:
    """What placement needs to know about one Node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = field(default_factory=dict)
    schedulable: bool = True


Signature = tuple[
    tuple[tuple[str, str], ...],
    tuple[SelectorTerm, ...] | None,
    tuple[Toleration, ...],
    tuple[str, ...],
]


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What one pod of a gang asks for and where it may go."""

    pod_name: str
    requests: Resources
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[SelectorTerm, ...] | None = None  # None: no required node affinity
    tolerations: tuple[Toleration, ...] = ()
    pinned_hosts: tuple[str, ...] = ()
    host_ports: frozenset[tuple[str, int]] = frozenset()  # (protocol, port) it binds on the node

    @property
    def signature(self) -> Signature:
        """The constraints that decide node eligibility (pods with equal ones share the answer)."""
        return (self.node_selector, self.affinity_terms, self.tolerations, self.pinned_hosts)


# ------------------------------------------------------------------ parsing raw objects


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def parse_resources(values: object) -> dict[str, Decimal]:
    """A resource map from raw quantities; unparseable entries are skipped."""
    out: dict[str, Decimal] = {}
    for name, quantity in _mapping(values).items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except QuantityError:
            continue
    return out


def node_view(raw: object) -> NodeView | None:
    """A ``NodeView`` from a raw Node, or ``None`` when it has no name."""
    node = _mapping(raw)
    metadata = _mapping(node.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    labels = {k: v for k, v in _mapping(metadata.get("labels")).items() if isinstance(v, str)}
    taints = tuple(
        Taint(_str(t.get("key")), _str(t.get("value")), _str(t.get("effect")))
        for t in _list(spec.get("taints"))
        if isinstance(t, Mapping)
    )
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in _list(status.get("conditions"))
    )
    return NodeView(
        name=name,
        labels=labels,
        taints=taints,
        allocatable=parse_resources(status.get("allocatable")),
        schedulable=ready and spec.get("unschedulable") is not True,
    )


def _requirements(raw: object) -> tuple[Requirement, ...]:
    requirements: list[Requirement] = []
    for item in _list(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            requirements.append(Requirement("", "<malformed>"))
            continue
        values = tuple(v for v in _list(item.get("values")) if isinstance(v, str))
        requirements.append(Requirement(item["key"], _str(item.get("operator")), values))
    return tuple(requirements)


def required_affinity_terms(pod_spec: Mapping[str, Any]) -> tuple[SelectorTerm, ...] | None:
    """The required node-affinity terms of a pod spec, ``None`` when there is no requirement."""
    node_affinity = _mapping(_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return None
    return tuple(
        SelectorTerm(
            _requirements(_mapping(term).get("matchExpressions")),
            _requirements(_mapping(term).get("matchFields")),
        )
        for term in _list(required.get("nodeSelectorTerms"))
    )


def tolerations_of(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """The well-formed tolerations of a pod spec."""
    return tuple(
        Toleration(
            _str(t.get("key")),
            _str(t.get("operator")) or "Equal",
            _str(t.get("value")),
            _str(t.get("effect")),
        )
        for t in _list(pod_spec.get("tolerations"))
        if isinstance(t, Mapping)
    )


def host_ports_of(pod_spec: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    """The ``(protocol, port)`` pairs a pod binds on its node.

    With ``hostNetwork`` every ``containerPort`` is a host port, so two replicas of one job (all
    on port 23456) cannot share a node; kube-scheduler's NodePorts filter would refuse the second.
    """
    host_network = pod_spec.get("hostNetwork") is True
    ports: set[tuple[str, int]] = set()
    for key in ("initContainers", "containers"):
        for container in _list(pod_spec.get(key)):
            for raw_port in _list(_mapping(container).get("ports")):
                port = _mapping(raw_port)
                number = port.get("hostPort")
                if not number and host_network:
                    number = port.get("containerPort")
                if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                    ports.add((_str(port.get("protocol")) or "TCP", number))
    return frozenset(ports)


def demand_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """What a pod takes from a node: its effective requests (zeros dropped) plus one pod slot."""
    requests = {name: amount for name, amount in pod_requests(pod_spec).items() if amount > 0}
    requests[PODS] = requests.get(PODS, ZERO) + 1
    return requests


def pod_demand(pod_name: str, template: object, *, hosts: Sequence[str] = ()) -> PodDemand:
    """The ``PodDemand`` of a pod built from ``template`` (``hosts``: the job's pinned hosts)."""
    pod_spec = pod_spec_of(template)
    selector = _mapping(pod_spec.get("nodeSelector"))
    return PodDemand(
        pod_name=pod_name,
        requests=demand_requests(pod_spec),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        affinity_terms=required_affinity_terms(pod_spec),
        tolerations=tolerations_of(pod_spec),
        pinned_hosts=tuple(hosts),
        host_ports=host_ports_of(pod_spec),
    )


def job_demands(job: JobSpec) -> tuple[PodDemand, ...]:
    """Demands of every pod of a job, in gang order: Master, then Workers by index."""
    hosts = pinned_hosts(job.annotations)
    return tuple(
        pod_demand(
            names.replica_name(job.name, spec.replica_type, index), spec.template, hosts=hosts
        )
        for spec in job.replica_specs
        for index in range(spec.replicas)
    )


# ------------------------------------------------------------------ eligibility


def tolerates_all(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> bool:
    """Whether every ``NoSchedule``/``NoExecute`` taint is tolerated."""
    return all(
        taint.effect not in BLOCKING_EFFECTS or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )


def admits(signature: Signature, node: NodeView) -> bool:
    """Whether a pod with these constraints may run on ``node`` (resources aside)."""
    selector, terms, tolerations, hosts = signature
    if not node.schedulable or (hosts and node.name not in hosts):
        return False
    labels = node.labels
    if any(labels.get(key) != value for key, value in selector):
        return False
    if terms is not None and not any(term.matches(node) for term in terms):
        return False
    return tolerates_all(tolerations, node.taints)


def eligible_nodes(signature: Signature, nodes: Iterable[NodeView]) -> tuple[str, ...]:
    """Names of the nodes that admit ``signature``, sorted."""
    return tuple(sorted(node.name for node in nodes if admits(signature, node)))


# ------------------------------------------------------------------ capacity


def _subtract(free: dict[str, Decimal], requests: Resources) -> None:
    for name, amount in requests.items():
        free[name] = free.get(name, ZERO) - amount


def free_capacity(
    nodes: Iterable[NodeView],
    pods: Iterable[object],
    *,
    extra_reservations: Mapping[str, Resources] | None = None,
) -> dict[str, dict[str, Decimal]]:
    """Free resources per node: allocatable minus what live pods and reservations hold.

    A pod holds capacity until it has terminated (phase ``Succeeded``/``Failed``), including while
    it is being deleted. It counts on its bound node (``spec.nodeName``) or, before binding, on the
    node its ``torchgate.io/planned-node`` annotation names, so a gang created but not yet bound
    is not offered to the next job. ``extra_reservations`` are requests the admitter has reserved
    but whose pods it has not observed yet.
    """
    free = {node.name: dict(node.allocatable) for node in nodes}
    for pod in pods:
        if not isinstance(pod, Mapping):
            continue
        if _mapping(pod.get("status")).get("phase") in TERMINATED_PHASES:
            continue
        spec = _mapping(pod.get("spec"))
        node = spec.get("nodeName")
        if not node:
            annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
            node = annotations.get(names.ANNOTATION_PLANNED_NODE)
        if isinstance(node, str) and node in free:
            _subtract(free[node], demand_requests(spec))
    for node, requests in (extra_reservations or {}).items():
        if node in free:
            _subtract(free[node], requests)
    return free


def reserve(
    free: Mapping[str, Resources], reserved: Mapping[str, Resources]
) -> dict[str, Resources]:
    """``free`` after taking ``reserved`` (a ``Placement.reserved``), for the next job of a cycle.

    Only the nodes that change are copied, so the admitter can place many jobs against one
    ``free_capacity`` snapshot without recomputing it.
    """
    result: dict[str, Resources] = dict(free)
    for node, requests in reserved.items():
        if node in result:
            taken = dict(result[node])
            _subtract(taken, requests)
            result[node] = taken
    return result


# ------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each pod goes.

    ``unplaced`` lists the optional pods (beyond ``min_count``) that did not fit; ``reserved`` is
    what the gang takes per node (the admitter's ``extra_reservations`` until the pods appear).
    """

    nodes: Mapping[str, str]
    unplaced: tuple[str, ...] = ()
    reserved: Mapping[str, Resources] = field(default_factory=dict)


ShortfallKind = Literal["NoEligibleNode", "InsufficientCapacity", "Fragmented"]


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why the gang does not fit now; ``message`` is shown by ``kubectl describe``."""

    kind: ShortfallKind
    message: str


# ------------------------------------------------------------------ messages


def format_quantity(resource: str, amount: Decimal) -> str:
    """A short quantity for messages: ``16``, ``500m``, ``64Gi``."""
    if amount == amount.to_integral_value():
        whole = int(amount)
        if _MEMORY_LIKE.match(resource) and whole:
            for suffix, size in _BINARY_SUFFIXES:
                if whole % size == 0:
                    return f"{whole // size}{suffix}"
        return str(whole)
    millis = amount * 1000
    if millis == millis.to_integral_value():
        return f"{int(millis)}m"
    return str(amount.normalize())


def pool_of(demand: PodDemand) -> str:
    """Where the pod may go, for messages: ``on hosts a,b``, ``in pool k=v``, ``in the cluster``."""
    if demand.pinned_hosts:
        return "on hosts " + ",".join(demand.pinned_hosts)
    if demand.node_selector:
        return "in pool " + ",".join(f"{k}={v}" for k, v in demand.node_selector)
    return "in the cluster"


def _exclusion_reason(demand: PodDemand, nodes: Sequence[NodeView]) -> str:
    """Which constraint leaves no node for ``demand`` (the first one that empties the list)."""
    if not nodes:
        return "the cluster has no nodes"
    remaining = [node for node in nodes if node.schedulable]
    if not remaining:
        return f"all {len(nodes)} nodes are cordoned or not Ready"
    if demand.pinned_hosts:
        remaining = [node for node in remaining if node.name in demand.pinned_hosts]
        if not remaining:
            return "none of the pinned hosts is a schedulable node"
    if demand.node_selector:
        remaining = [
            node
            for node in remaining
            if all(node.labels.get(k) == v for k, v in demand.node_selector)
        ]
        if not remaining:
            labels = ",".join(f"{k}={v}" for k, v in demand.node_selector)
            return f"no schedulable node has the labels {labels}"
    terms = demand.affinity_terms
    if terms is not None:
        remaining = [node for node in remaining if any(t.matches(node) for t in terms)]
        if not remaining:
            return "no schedulable node matches the required node affinity"
    untolerated: list[str] = []
    for node in remaining:
        for taint in node.taints:
            tolerated = any(t.tolerates(taint) for t in demand.tolerations)
            if taint.effect in BLOCKING_EFFECTS and not tolerated and str(taint) not in untolerated:
                untolerated.append(str(taint))
    shown = ", ".join(untolerated[:3]) + (", ..." if len(untolerated) > 3 else "")
    return f"every matching node has a taint the pod does not tolerate ({shown})"


def _no_eligible_node(demand: PodDemand, nodes: Sequence[NodeView]) -> Shortfall:
    return Shortfall(
        "NoEligibleNode",
        f"no eligible node {pool_of(demand)} for {demand.pod_name}: "
        f"{_exclusion_reason(demand, nodes)}",
    )


def resource_order(resources: Iterable[str], gpu_resource: str) -> list[str]:
    """Resources in the order messages and tie-breaks consider them: GPUs first, pods last."""

    def rank(name: str) -> tuple[int, str]:
        if name == gpu_resource:
            return 0, name
        if "/" in name:
            return 1, name
        if name == "cpu":
            return 2, name
        if name == "memory":
            return 3, name
        if name == PODS:
            return 5, name
        return 4, name

    return sorted(set(resources), key=rank)


# ------------------------------------------------------------------ placement


ShapeKey = tuple[Signature, tuple[tuple[str, Decimal], ...]]


@dataclass(frozen=True, slots=True)
class _Candidates:
    """Nodes where one pod shape fits on their free capacity, in both preference orders.

    The free capacity of a node the gang has not used yet does not change during one
    ``place_gang`` call, so these are computed once per shape, not once per pod.
    """

    tightest_first: tuple[str, ...]
    roomiest_first: tuple[str, ...]
    most_free: Mapping[str, Decimal]


@dataclass(slots=True)
class _Gang:
    """Working state of one ``place_gang`` call."""

    free: Mapping[str, Resources]
    eligible: dict[Signature, frozenset[str]]
    ordered_eligible: dict[Signature, tuple[str, ...]]
    gpu_resource: str
    scarce: str
    resources: frozenset[str]
    used: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    assignments: dict[str, str] = field(default_factory=dict)
    shapes: dict[ShapeKey, _Candidates] = field(default_factory=dict)
    ports: dict[str, set[tuple[str, int]]] = field(default_factory=dict)

    def remaining(self, node: str) -> Resources:
        return self.used.get(node) or self.free.get(node) or {}

    def tightness_of(self, item: tuple[str, Resources]) -> tuple[Decimal, Decimal, str]:
        """Sort key, least free first: GPUs, then CPU, then the node name."""
        node, free = item
        return free.get(self.gpu_resource, ZERO), free.get("cpu", ZERO), node

    def room_of(self, item: tuple[str, Resources]) -> tuple[Decimal, str]:
        """Sort key, most free first: the scarcest resource, then the node name."""
        node, free = item
        return -free.get(self.scarce, ZERO), node

    def assign(self, demand: PodDemand, node: str) -> None:
        if node not in self.used:
            self.used[node] = dict(self.free.get(node) or {})
        _subtract(self.used[node], demand.requests)
        self.ports.setdefault(node, set()).update(demand.host_ports)
        self.assignments[demand.pod_name] = node

    def candidates(self, demand: PodDemand) -> _Candidates:
        """The unused-node candidates of ``demand``'s shape (computed once per shape)."""
        key = (demand.signature, tuple(sorted(demand.requests.items())))
        found = self.shapes.get(key)
        if found is None:
            requests, free = demand.requests, self.free
            fitting = [
                (node, node_free)
                for node in self.ordered_eligible[demand.signature]
                if node not in self.used and _fits(node_free := free.get(node) or {}, requests)
            ]
            most_free: dict[str, Decimal] = {}
            for resource in self.resources:
                most_free[resource] = max((f.get(resource, ZERO) for _, f in fitting), default=ZERO)
            tightest = sorted(fitting, key=self.tightness_of)
            roomiest = sorted(fitting, key=self.room_of)
            found = _Candidates(
                tuple(node for node, _ in tightest),
                tuple(node for node, _ in roomiest),
                most_free,
            )
            self.shapes[key] = found
        return found

    def choose(
        self, demand: PodDemand, rest: Resources, rest_signatures: set[Signature]
    ) -> str | None:
        """The node for ``demand``.

        A node this gang already uses where it fits (least remaining first); else the tightest
        unused node that can hold all the gang's remaining pods; else the unused node with the
        most room in the scarcest resource.
        """
        allowed = self.eligible[demand.signature]
        used_fits = [
            n
            for n in self.used
            if n in allowed
            and _fits(self.used[n], demand.requests)
            and not (demand.host_ports and demand.host_ports & self.ports.get(n, set()))
        ]
        if used_fits:
            return min(used_fits, key=lambda node: self.tightness_of((node, self.used[node])))
        candidates = self.candidates(demand)
        if demand.host_ports:  # its gang-mates cannot share its node: no node holds "the rest"
            rest, rest_signatures = demand.requests, {demand.signature}
        if _fits(candidates.most_free, rest):
            for node in candidates.tightest_first:
                if (
                    node not in self.used
                    and _fits(self.free.get(node) or {}, rest)
                    and all(node in self.eligible[s] for s in rest_signatures)
                ):
                    return node
        for node in candidates.roomiest_first:
            if node not in self.used:
                return node
        return None


def _fits(free: Resources, requests: Resources) -> bool:
    return all(free.get(name, ZERO) >= amount for name, amount in requests.items())


def _add(total: dict[str, Decimal], requests: Resources) -> None:
    for name, amount in requests.items():
        total[name] = total.get(name, ZERO) + amount


def _totals(demands: Iterable[PodDemand]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for demand in demands:
        _add(total, demand.requests)
    return total


def _free_total(resource: str, node_free: Iterable[Resources]) -> Decimal:
    total = ZERO
    for free in node_free:
        amount = free.get(resource)
        if amount is not None and amount > 0:
            total += amount
    return total


def place_gang(
    demands: Sequence[PodDemand],
    nodes: Sequence[NodeView],
    free: Mapping[str, Resources],
    *,
    min_count: int,
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE,
    eligibility_cache: MutableMapping[Signature, tuple[str, ...]] | None = None,
) -> Placement | Shortfall:
    """Place the first ``min_count`` demands all-or-nothing, and the rest where they fit.

    Args:
        demands: The gang in order (Master, then Workers by index).
        nodes: Every node of the cluster.
        free: ``free_capacity`` of those nodes.
        min_count: How many leading demands must all be placed (the gang's ``minAvailable``).
        gpu_resource: The resource that counts as GPUs (tie-breaks and message order).
        eligibility_cache: Signature -> eligible node names, shared by calls that see the same
            ``nodes`` (one admitter cycle); filled on demand.

    Returns:
        A ``Placement`` (the required pods all placed, optional ones where they fit) or a
        ``Shortfall`` saying why the required pods do not fit now.
    """
    required_count = max(0, min(min_count, len(demands)))
    required = list(demands[:required_count])
    cache = eligibility_cache if eligibility_cache is not None else {}
    ordered: dict[Signature, tuple[str, ...]] = {}
    for demand in demands:
        signature = demand.signature
        if signature not in ordered:
            if signature not in cache:
                cache[signature] = eligible_nodes(signature, nodes)
            ordered[signature] = cache[signature]
    for demand in required:
        if not ordered[demand.signature]:
            return _no_eligible_node(demand, nodes)
    signatures = {demand.signature for demand in required}
    union_names = (
        ordered[next(iter(signatures))]
        if len(signatures) == 1
        else {node for signature in signatures for node in ordered[signature]}
    )
    union = [free.get(node) or {} for node in union_names]
    demand_total = _totals(required)
    order = resource_order(demand_total, gpu_resource)
    free_total: dict[str, Decimal] = {}
    for resource in order:  # cheap early exit: most waiting jobs stop here
        free_total[resource] = _free_total(resource, union)
        if demand_total[resource] > free_total[resource]:
            return _insufficient(required[0], resource, demand_total, free_total)
    gang = _Gang(
        free=free,
        eligible={s: frozenset(n) for s, n in ordered.items()},
        ordered_eligible=ordered,
        gpu_resource=gpu_resource,
        scarce=_scarcest(order, demand_total, free_total),
        resources=frozenset(r for demand in demands for r in demand.requests),
    )
    # Largest first (first-fit decreasing) so small pods do not take the room a big one needs.
    by_size = sorted(
        range(required_count),
        key=lambda i: (-required[i].requests.get(gang.scarce, ZERO), i),
    )
    failure = _place_required([required[i] for i in by_size], gang)
    if failure is not None:
        return _fragmented(failure, gang, demand_total, free_total, order)
    unplaced = [d.pod_name for d in demands[required_count:] if not _place_one(d, gang)]
    reserved: dict[str, dict[str, Decimal]] = {}
    for demand in demands:
        node = gang.assignments.get(demand.pod_name)
        if node is not None:
            _add(reserved.setdefault(node, {}), demand.requests)
    assignments = gang.assignments
    return Placement(
        nodes={d.pod_name: assignments[d.pod_name] for d in demands if d.pod_name in assignments},
        unplaced=tuple(unplaced),
        reserved=reserved,
    )


def _scarcest(order: Sequence[str], demand: Resources, free: Resources) -> str:
    """The resource the gang needs the largest share of (what "most room" is measured in)."""
    best, best_share = order[0] if order else PODS, Decimal(-1)
    for resource in order:
        available = free.get(resource, ZERO)
        share = demand[resource] / available if available > 0 else Decimal("Infinity")
        if share > best_share:
            best, best_share = resource, share
    return best


def _place_required(demands: Sequence[PodDemand], gang: _Gang) -> PodDemand | None:
    """Place every demand in order; return the first that does not fit."""
    suffix: list[dict[str, Decimal]] = [{} for _ in range(len(demands) + 1)]
    signatures: list[set[Signature]] = [set() for _ in range(len(demands) + 1)]
    for i in range(len(demands) - 1, -1, -1):
        suffix[i] = dict(suffix[i + 1])
        _add(suffix[i], demands[i].requests)
        signatures[i] = signatures[i + 1] | {demands[i].signature}
    for i, demand in enumerate(demands):
        node = gang.choose(demand, suffix[i], signatures[i])
        if node is None:
            return demand
        gang.assign(demand, node)
    return None


def _place_one(demand: PodDemand, gang: _Gang) -> bool:
    node = gang.choose(demand, demand.requests, {demand.signature})
    if node is None:
        return False
    gang.assign(demand, node)
    return True


def _insufficient(
    demand: PodDemand, resource: str, demand_total: Resources, free_total: Resources
) -> Shortfall:
    return Shortfall(
        "InsufficientCapacity",
        f"waiting for {format_quantity(resource, demand_total[resource])} {resource} "
        f"{pool_of(demand)}: {format_quantity(resource, free_total[resource])} free",
    )


def _fragmented(
    demand: PodDemand,
    gang: _Gang,
    demand_total: Resources,
    free_total: Resources,
    order: Sequence[str],
) -> Shortfall:
    allowed = gang.ordered_eligible[demand.signature]
    wanted = [r for r in order if r in demand.requests]
    missing = [
        r
        for r in wanted
        if all(gang.remaining(node).get(r, ZERO) < demand.requests[r] for node in allowed)
    ]
    headline = missing[0] if missing else gang.scarce
    needs = missing[:1] if missing else wanted
    detail = " and ".join(f"{format_quantity(r, demand.requests[r])} {r}" for r in needs)
    return Shortfall(
        "Fragmented",
        f"waiting for {format_quantity(headline, demand_total[headline])} {headline} "
        f"{pool_of(demand)}: {format_quantity(headline, free_total[headline])} free but "
        f"fragmented: no node has {detail} free" + ("" if missing else " at once"),
    )

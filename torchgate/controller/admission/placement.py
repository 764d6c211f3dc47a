"""All-or-nothing gang placement: pack a gang onto the nodes that admit it, or say why not.

Why torchgate places gangs itself instead of leaving it to kube-scheduler: kube-scheduler places
one pod at a time, so creating all pods of two large jobs at once lets each grab part of a GPU pool
and hold it while waiting for the rest, forever. The admitter instead asks ``place_gang`` whether
the *whole* gang fits the free capacity it sees, reserves it, and only then are pods created, each
pinned by a required node affinity to its planned node (``pods.pin_to_node``), so kube-scheduler
still runs every other check but cannot scatter the gang. Which nodes a pod may use at all is
``eligibility``'s business; this module adds what depends on the other pods: resources (every
requested resource, including the ``pods`` count) and host ports (with ``hostNetwork`` every
replica binds port 23456, so two pods of one gang never share a node).

Packing rules, in order:

1. The first ``min_count`` pods (the gang's ``minAvailable``) are placed all-or-nothing; the rest
   where they fit (``unplaced`` names those that did not).
2. A pod with no eligible node: ``NoEligibleNode``, naming the filter that excluded every node.
3. When the eligible nodes' total free amount of some resource is short of the gang's total:
   ``InsufficientCapacity`` (the cheap early exit most waiting jobs stop at).
4. Largest pods first (first-fit decreasing, by the scarcest resource); each goes to a node the
   gang already uses where it fits (least remaining first), else the tightest unused node that can
   hold all the gang's remaining pods, else the unused node with the most room in the scarcest
   resource: as few nodes as possible, because NCCL inside a node is far faster than across
   nodes, and whole free nodes stay available to the next large job.
5. A required pod that does not fit although the totals do: ``Fragmented``.

Cost: the admitter calls ``place_gang`` for up to ~1,000 waiting jobs against ~200 nodes per
cycle, so it is O(pods x eligible nodes), exits early when the total free capacity is short, and
computes node eligibility once per distinct signature (optionally shared across calls of one
cycle through ``eligibility_cache``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, Literal

from torchgate.controller.admission.nodes import (
    PODS,
    ZERO,
    NodeView,
    PodDemand,
    Resources,
    Signature,
    eligible_nodes,
    exclusion_reason,
    pool_of,
)
from torchgate.pytorchjob import names

_MEMORY_LIKE = re.compile(r"^(memory|ephemeral-storage|hugepages-.*)$")
_BINARY_SUFFIXES: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
)


# ------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each pod goes.

    ``unplaced`` lists the optional pods (beyond ``min_count``) that did not fit; ``reserved`` is
    what the gang takes per node (the admitter holds it as a reservation until the pods appear).
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


def _no_eligible_node(demand: PodDemand, nodes: Sequence[NodeView]) -> Shortfall:
    return Shortfall(
        "NoEligibleNode",
        f"no eligible node {pool_of(demand)} for {demand.pod_name}: "
        f"{exclusion_reason(demand, nodes)}",
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


def _subtract(free: dict[str, Decimal], requests: Resources) -> None:
    for name, amount in requests.items():
        free[name] = free.get(name, ZERO) - amount


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

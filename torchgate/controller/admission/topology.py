"""Topology-aware gang placement: pack a gang into the smallest domain of node labels that fits.

Why: a collective's ranks talk to their neighbours (rings, trees), and a step across a rack or
block switch is much slower than one inside it, so a gang spread over three racks trains slower
than the same gang in one (the Arnold paper reports +10.6 % throughput from topology-aware
placement on 9,600 GPUs). The admin lists topology levels as node label keys, coarsest first
(``torchgate.io/block``, ``torchgate.io/rack``, ``kubernetes.io/hostname``); a domain at level ``k``
is one combination of the values of levels ``0..k`` (rack ``r1`` of block ``b1`` is not rack ``r1``
of block ``b2``), and the whole pool is the root above level 0.

One cycle places over the levels of every valid policy, in the order they are first declared
(``topology_levels``; one pool normally has one policy defining them); a job's request names a
level by label key and is mapped into them (``job_topology``).

Capacity is counted in *slots*: how many pods of the gang's shape fit on a node (every requested
resource divided by the pod's request, at most one with host ports), summed up the tree. A gang of
different pod shapes is counted by its largest request per resource, which never overstates the
room (any pod fits a slot of the largest shape).

Rules (each one function):

0. ``place_topology``: a gang that asks for none of the pool's GPUs is offered the nodes without
   GPUs first (``Shape.preferred``, ``gpu_free_nodes``) and goes to a GPU node only when it fits
   nowhere else, so GPUs stay free for the gangs that need them (a CPU job on a GPU node leaves
   its GPUs idle however tightly it packs the node's CPUs).
1. ``slots_of``: a node's slots for a shape; a domain's slots are its nodes' sum.
2. ``fitting_level``: the finest level with a domain whose slots hold the whole gang (a domain
   never has more slots than its parent, so the search descends only into domains that fit).
3. ``best_domain``: among the fitting domains of that level, the one with the least free capacity
   (fewest slots), then the fewest nodes, then the smallest key: the tightest fit, so big domains
   stay whole for big gangs.
4. ``distribute``: inside the chosen domain, the gang goes to the one child that fits it (by
   rule 3), or else over the fewest children: the roomiest children whole, the remainder into the
   tightest child that holds it; recursively down to nodes.
5. ``assign_ranks``: pods in gang order (Master, then Workers by index, i.e. by ``RANK``) fill
   the chosen nodes depth-first, so consecutive ranks share a node, then a rack, then a block.
6. ``place_topology``: a *required* level that no domain fits makes the gang wait with reason
   ``Topology`` (when the pool as a whole has room) or ``Capacity`` (when it has not); a
   *preferred* level, or none, falls back to coarser levels and then to the whole pool, still
   over the fewest domains.
7. ``explain_shortfall``: a ``Capacity`` wait names what is short on the gang's allowed nodes:
   the first resource (its GPUs first, then other extended resources, cpu, memory, the rest,
   ``pods`` last) the whole gang needs more of than those nodes have free together (``waiting for
   16 nvidia.com/gpu in pool pool=a100: 8 free``); when every total suffices, the gang is
   fragmented: with every node holding all the pods it has slots for, the first resource no node
   has enough left of for one more pod (``... 8 free but fragmented: no node has 8
   nvidia.com/gpu free``), or every resource ``at once`` when each is left somewhere.
8. ``place_extras``: pods beyond the gang's ``minAvailable`` (elastic workers) go where they fit
   once the gang is placed, taking their room from the same capacity: a node the gang already
   uses (by name), else any allowed node (by name); with host ports only a node without a pod of
   the gang. One that fits nowhere is left out (the job starts with fewer workers).

Cost: a ``Capacity`` keeps each shape's slots per node and per domain for one admission cycle and
brings them up to date only for the nodes whose capacity changed since that shape was last asked
about (and their ancestors), so a cycle over 100 waiting gangs on 1,000 nodes does integer
arithmetic on the few shapes it sees, not on every node per gang. Explaining a shortfall (rule 7)
walks every allowed node, so a ``Shortfall`` is phrased only when it is read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from torchgate.pytorchjob.pool import GPUS, TopologyRequest
from torchgate.pytorchjob.units import Units, fits, format_amount

PodShape = tuple[tuple[str, int], ...]
UNBOUNDED: Final = 1 << 40
ROOT: Final = 0
SOLE_PREFIX: Final = "/"  # key of a node's own domain at a level it has no label for

WaitKind = Literal["Capacity", "Topology"]


@dataclass(frozen=True, slots=True)
class Shape:
    """What one slot must hold: the largest request per resource (milli-units), sorted.

    ``allowed`` names the nodes the gang's pods may use at all (node selector, affinity, taints:
    ``nodes.eligible_nodes``); ``None`` means every node of the topology. ``preferred`` names
    the allowed nodes tried first (rule 0), ``None`` when there is no such preference.
    """

    pod: PodShape
    one_per_node: bool = False
    allowed: frozenset[str] | None = None
    preferred: frozenset[str] | None = None

    def narrowed(self) -> Shape:
        """The same shape confined to its preferred nodes."""
        return Shape(self.pod, self.one_per_node, self.preferred)


def shape_of(
    requests: Iterable[Units],
    *,
    one_per_node: bool = False,
    allowed: Iterable[str] | None = None,
    preferred: Iterable[str] | None = None,
) -> Shape:
    """The slot shape of a gang: the largest positive request per resource over its pods.

    ``preferred`` (rule 0) is kept only where it narrows the choice: the allowed nodes among it,
    when that is some but not all of them.
    """
    largest: dict[str, int] = {}
    for pod in requests:
        for name, amount in pod.items():
            if amount > 0 and amount > largest.get(name, 0):
                largest[name] = amount
    permitted = None if allowed is None else frozenset(allowed)
    first: frozenset[str] | None = None
    if preferred is not None:
        first = frozenset(preferred)
        if permitted is not None:
            first &= permitted
        if not first or first == permitted:
            first = None
    return Shape(tuple(sorted(largest.items())), one_per_node, permitted, first)


def gpu_free_nodes(
    usage: Units, gpu_resource: str, nodes: Iterable[tuple[str, Units]]
) -> frozenset[str] | None:
    """The nodes (name, allocatable) without GPUs for a gang of quota ``usage`` (rule 0).

    ``None`` for a gang that asks for GPUs: it has no such preference.
    """
    if usage.get(GPUS, 0) > 0:
        return None
    return frozenset(name for name, allocatable in nodes if allocatable.get(gpu_resource, 0) <= 0)


def topology_levels(declared: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """The cycle's topology levels: every policy's, in first-declared order."""
    levels: list[str] = []
    for policy_levels in declared:
        for level in policy_levels:
            if level not in levels:
                levels.append(level)
    return tuple(levels)


def job_topology(level: str | None, required: bool, levels: Sequence[str]) -> TopologyRequest:
    """A job's request (level named by label key) as an index into the cycle's levels."""
    if level is None or level not in levels:
        return TopologyRequest()
    return TopologyRequest(list(levels).index(level), required)


@dataclass(slots=True)
class _Domain:
    key: tuple[str, ...]
    level: int  # -1 for the root
    parent: int
    children: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)  # direct members (no finer label)
    node_count: int = 0


@dataclass(frozen=True, slots=True)
class Topology:
    """The static tree of one node set: domains per level and each node's ancestors."""

    levels: tuple[str, ...]
    node_names: tuple[str, ...]
    domains: tuple[_Domain, ...]
    by_level: tuple[tuple[int, ...], ...]
    ancestors: tuple[tuple[int, ...], ...]  # per node, its domains finest first, root last
    index: Mapping[str, int]  # node name -> position in ``node_names``
    member: tuple[tuple[int, ...], ...]  # per level, per node: its domain there

    def domain_of(self, node_name: str, level: int) -> int | None:
        """The domain holding ``node_name`` at ``level``, ``None`` for an unknown node or level."""
        node = self.index.get(node_name)
        if node is None or not 0 <= level < len(self.levels):
            return None
        found = self.member[level][node]
        return found if found >= 0 else None

    def domain_name(self, domain: int) -> str:
        """``rack=r1`` style text for messages (``the pool`` for the root)."""
        found = self.domains[domain]
        if found.level < 0:
            return "the pool"
        value = found.key[-1]
        if value.startswith(SOLE_PREFIX):
            return f"node {value.removeprefix(SOLE_PREFIX)}"  # a node outside this level's labels
        return f"{self.levels[found.level]}={value}"


def build_topology(
    levels: Sequence[str], nodes: Iterable[tuple[str, Mapping[str, str]]]
) -> Topology:
    """The domain tree of ``nodes`` (name, labels) under ``levels``, coarsest first.

    A node without the label of some level is a domain of its own at that level and every finer
    one (a CPU node outside the racks is still a candidate for a gang it holds whole).
    """
    domains: list[_Domain] = [_Domain((), -1, -1)]
    index: dict[tuple[str, ...], int] = {(): ROOT}
    names: list[str] = []
    ancestors: list[tuple[int, ...]] = []
    for node, labels in sorted(nodes, key=lambda item: item[0]):
        chain = [ROOT]
        key: tuple[str, ...] = ()
        sole = False
        for level, label in enumerate(levels):
            value = labels.get(label)
            if value is None or sole:
                # A node without this level's label is a domain of its own here and below (one
                # node is inside every switch above it); label values never hold "/".
                sole, value = True, SOLE_PREFIX + node
            key = (*key, value)
            found = index.get(key)
            if found is None:
                found = index[key] = len(domains)
                domains.append(_Domain(key, level, chain[-1]))
                domains[chain[-1]].children.append(found)
            chain.append(found)
        node_index = len(names)
        names.append(node)
        domains[chain[-1]].nodes.append(node_index)
        for domain in chain:
            domains[domain].node_count += 1
        ancestors.append(tuple(reversed(chain)))
    by_level = tuple(
        tuple(i for i, d in enumerate(domains) if d.level == level) for level in range(len(levels))
    )
    member = tuple(
        tuple(next((d for d in chain if domains[d].level == level), -1) for chain in ancestors)
        for level in range(len(levels))
    )
    return Topology(
        levels=tuple(levels),
        node_names=tuple(names),
        domains=tuple(domains),
        by_level=by_level,
        ancestors=tuple(ancestors),
        index={name: i for i, name in enumerate(names)},
        member=member,
    )


# ------------------------------------------------------------------ rule 1: slots


def slots_of(free: Units, shape: Shape) -> int:
    """How many pods of ``shape`` fit on a node with ``free`` capacity (rule 1)."""
    slots = UNBOUNDED
    for name, amount in shape.pod:
        have = free.get(name, 0)
        if have < amount:
            return 0
        fits = have // amount
        if fits < slots:
            slots = fits
    return min(slots, 1) if shape.one_per_node else slots


class Capacity:
    """Free capacity per node for one admission cycle, with slot counts cached per shape.

    Changes are logged by node; a shape's cached slots catch up with the log only when that shape
    is asked for, so taking capacity costs nothing for the shapes no later gang asks about.
    """

    def __init__(self, topology: Topology, free: Mapping[str, Units]) -> None:
        """Take a copy of ``free`` (node name -> milli-units); unknown nodes have nothing."""
        self.topology = topology
        self.free: list[dict[str, int]] = [dict(free.get(n) or {}) for n in topology.node_names]
        self._node_slots: dict[Shape, list[int]] = {}
        self._domain_slots: dict[Shape, list[int]] = {}
        self._changed: list[int] = []  # node indexes whose free capacity changed, in order
        self._seen: dict[Shape, int] = {}  # how much of ``_changed`` each shape has caught up on

    def node_slots(self, shape: Shape) -> list[int]:
        """Slots per node for ``shape`` (computed once per cycle, then kept up to date)."""
        found = self._node_slots.get(shape)
        if found is None:
            allowed, names = shape.allowed, self.topology.node_names
            found = self._node_slots[shape] = [
                slots_of(free, shape) if allowed is None or names[i] in allowed else 0
                for i, free in enumerate(self.free)
            ]
            self._seen[shape] = len(self._changed)
        elif self._seen[shape] < len(self._changed):
            self._catch_up(shape, found)
        return found

    def domain_slots(self, shape: Shape) -> list[int]:
        """Slots per domain for ``shape`` (the sum over the domain's nodes)."""
        per_node = self.node_slots(shape)
        found = self._domain_slots.get(shape)
        if found is None:
            totals = [0] * len(self.topology.domains)
            for node, slots in enumerate(per_node):
                if slots:
                    for domain in self.topology.ancestors[node]:
                        totals[domain] += slots
            found = self._domain_slots[shape] = totals
        return found

    def free_for(self, shape: Shape) -> list[dict[str, int]]:
        """The free capacity of each node ``shape`` may use."""
        allowed, names = shape.allowed, self.topology.node_names
        return [free for i, free in enumerate(self.free) if allowed is None or names[i] in allowed]

    def take(self, nodes: Mapping[str, str], requests: Mapping[str, Units]) -> None:
        """Subtract placed pods (pod -> node, pod -> requests)."""
        self._adjust(nodes, requests, -1)

    def give(self, nodes: Mapping[str, str], requests: Mapping[str, Units]) -> None:
        """Add back what pods held (preemption victims, or undoing a trial ``take``)."""
        self._adjust(nodes, requests, 1)

    def _adjust(self, nodes: Mapping[str, str], requests: Mapping[str, Units], sign: int) -> None:
        index = self.topology.index
        for pod, node_name in nodes.items():
            node = index.get(node_name)
            if node is None:
                continue
            free = self.free[node]
            for name, amount in (requests.get(pod) or {}).items():
                free[name] = free.get(name, 0) + sign * amount
            self._changed.append(node)

    def _catch_up(self, shape: Shape, per_node: list[int]) -> None:
        totals = self._domain_slots.get(shape)
        allowed, names, ancestors = shape.allowed, self.topology.node_names, self.topology.ancestors
        for node in set(self._changed[self._seen[shape] :]):
            if allowed is not None and names[node] not in allowed:
                continue
            after = slots_of(self.free[node], shape)
            delta = after - per_node[node]
            if delta:
                per_node[node] = after
                if totals is not None:
                    for domain in ancestors[node]:
                        totals[domain] += delta
        self._seen[shape] = len(self._changed)


# ------------------------------------------------------------------ rules 2-3: the domain


def fitting_level(topology: Topology, slots: Sequence[int], count: int) -> tuple[int, list[int]]:
    """The finest level with a domain holding ``count`` slots, and its fitting domains (rule 2).

    Returns ``(-1, [ROOT])`` when only the pool as a whole fits, ``(-1, [])`` when nothing does.
    """
    if slots[ROOT] < count:
        return -1, []
    level, fitting = -1, [ROOT]
    while True:
        below = [
            child
            for domain in fitting
            for child in topology.domains[domain].children
            if slots[child] >= count
        ]
        if not below:
            return level, fitting
        level, fitting = level + 1, below


def best_domain(topology: Topology, slots: Sequence[int], candidates: Sequence[int]) -> int:
    """The tightest candidate: fewest slots, then fewest nodes, then smallest key (rule 3)."""
    domains = topology.domains
    return min((slots[d], domains[d].node_count, domains[d].key, d) for d in candidates)[-1]


# ------------------------------------------------------------------ rule 4: inside the domain


def distribute(
    topology: Topology,
    node_slots: Sequence[int],
    domain_slots: Sequence[int],
    domain: int,
    count: int,
) -> list[tuple[int, int]]:
    """``(node index, pods)`` pairs for ``count`` pods in ``domain``, depth-first (rule 4)."""
    found = topology.domains[domain]
    units: list[tuple[int, int, int, tuple[str, ...], bool, int]] = []
    for child in found.children:
        if domain_slots[child]:
            d = topology.domains[child]
            units.append((domain_slots[child], d.node_count, 0, d.key, True, child))
    for node in found.nodes:
        if node_slots[node]:
            units.append((node_slots[node], 1, 1, (topology.node_names[node],), False, node))
    out: list[tuple[int, int]] = []
    remaining = count
    roomiest = sorted(units, key=lambda u: (-u[0], u[1], u[2], u[3]))
    taken: set[tuple[bool, int]] = set()
    while remaining > 0:
        holding = [u for u in units if u[0] >= remaining and (u[4], u[5]) not in taken]
        if holding:
            unit = min(holding)  # tightest: slots, nodes, domains before nodes, key
            share = remaining
        else:
            unit = next(u for u in roomiest if (u[4], u[5]) not in taken)
            share = unit[0]
        taken.add((unit[4], unit[5]))
        if unit[4]:
            out.extend(distribute(topology, node_slots, domain_slots, unit[5], share))
        else:
            out.append((unit[5], share))
        remaining -= share
    return out


# ------------------------------------------------------------------ rule 5: ranks


def assign_ranks(
    topology: Topology, pods: Sequence[str], spread: Sequence[tuple[int, int]]
) -> dict[str, str]:
    """Pod name -> node: pods in rank order fill the spread in its depth-first order (rule 5)."""
    nodes = [topology.node_names[node] for node, count in spread for _ in range(count)]
    return dict(zip(pods, nodes, strict=False))


# ------------------------------------------------------------------ rule 6: the whole decision


@dataclass(frozen=True, slots=True)
class TopologyPlacement:
    """Where each pod goes, and the smallest domain that holds the whole gang."""

    nodes: Mapping[str, str]
    domain: str
    level: int  # -1: the gang spans level-0 domains (or no levels are defined)
    preference_met: bool = True


@dataclass(frozen=True, slots=True)
class TopologyWait:
    """Why the gang cannot be placed now."""

    kind: WaitKind
    message: str


def place_topology(
    capacity: Capacity,
    pods: Sequence[str],
    shape: Shape,
    request: TopologyRequest,
) -> TopologyPlacement | TopologyWait:
    """Place the whole gang ``pods`` (rank order) by rules 0 and 2-5, or say why it waits (rule 6).

    Rule 0: a shape with ``preferred`` nodes is placed there when it fits them whole (meeting its
    topology preference too), and over all its allowed nodes otherwise.
    """
    if shape.preferred is not None:
        first = _place(capacity, pods, shape.narrowed(), request)
        if isinstance(first, TopologyPlacement) and first.preference_met:
            return first
    return _place(capacity, pods, shape, request)


def _place(
    capacity: Capacity,
    pods: Sequence[str],
    shape: Shape,
    request: TopologyRequest,
) -> TopologyPlacement | TopologyWait:
    topology = capacity.topology
    count = len(pods)
    node_slots = capacity.node_slots(shape)
    domain_slots = capacity.domain_slots(shape)
    if domain_slots[ROOT] < count:
        return TopologyWait(
            "Capacity",
            f"waiting for room for {count} pod(s): {domain_slots[ROOT]} fit in the pool now",
        )
    level, fitting = fitting_level(topology, domain_slots, count)
    wanted = request.level
    if wanted is not None and wanted >= len(topology.levels):
        wanted = None
    if wanted is not None and request.required and level < wanted:
        largest = max((domain_slots[d] for d in topology.by_level[wanted]), default=0)
        return TopologyWait(
            "Topology",
            f"waiting for one {topology.levels[wanted]} domain with room for {count} pod(s): "
            f"the roomiest has room for {largest}",
        )
    domain = best_domain(topology, domain_slots, fitting)
    spread = distribute(topology, node_slots, domain_slots, domain, count)
    return TopologyPlacement(
        nodes=assign_ranks(topology, pods, spread),
        domain=topology.domain_name(domain),
        level=level,
        preference_met=wanted is None or level >= wanted,
    )


def fits_topology(capacity: Capacity, count: int, shape: Shape, request: TopologyRequest) -> bool:
    """Whether ``place_topology`` would place ``count`` pods (without computing where)."""
    slots = capacity.domain_slots(shape)
    if slots[ROOT] < count:
        return False
    wanted = request.level
    if not request.required or wanted is None or wanted >= len(capacity.topology.levels):
        return True
    return any(slots[domain] >= count for domain in capacity.topology.by_level[wanted])


# ------------------------------------------------------------------ rule 7: what is short


def resource_order(resources: Iterable[str], gpu_resource: str) -> list[str]:
    """Resources in the order a shortfall names them: GPUs first, ``pods`` last (rule 7)."""

    def rank(name: str) -> tuple[int, str]:
        if name == gpu_resource:
            return 0, name
        if "/" in name:
            return 1, name
        if name == "cpu":
            return 2, name
        if name == "memory":
            return 3, name
        if name == "pods":
            return 5, name
        return 4, name

    return sorted(set(resources), key=rank)


def explain_shortfall(
    free: Sequence[Units],
    shape: Shape,
    requests: Iterable[Units],
    *,
    where: str,
    gpu_resource: str,
) -> str:
    """Why pods with ``requests`` (the gang) do not fit nodes with ``free`` capacity (rule 7).

    ``free`` holds the allowed nodes of ``shape``; ``where`` names them for people (``in pool
    pool=a100``, ``on hosts a,b``, ``in the cluster``).
    """
    wanted: dict[str, int] = {}
    for pod in requests:
        for name, amount in pod.items():
            wanted[name] = wanted.get(name, 0) + amount
    order = resource_order(wanted, gpu_resource)
    if not order:
        return f"waiting for room {where}"
    have = {name: sum(max(0, node.get(name, 0)) for node in free) for name in order}
    for name in order:
        if wanted[name] > have[name]:
            return (
                f"waiting for {format_amount(name, wanted[name])} {name} {where}: "
                f"{format_amount(name, have[name])} free"
            )
    slot = dict(shape.pod)
    per_pod = [name for name in order if name in slot]
    left: list[dict[str, int]] = []  # each node's free capacity once it holds all it has slots for
    for node in free:
        slots = slots_of(node, shape)
        if not (shape.one_per_node and slots):  # with host ports a node takes one pod of the gang
            left.append({name: node.get(name, 0) - slots * slot[name] for name in per_pod})
    missing = [name for name in per_pod if all(node[name] < slot[name] for node in left)]
    headline = missing[0] if missing and left else _scarcest(order, wanted, have)
    head = (
        f"waiting for {format_amount(headline, wanted[headline])} {headline} {where}: "
        f"{format_amount(headline, have[headline])} free but fragmented"
    )
    if not left:
        return f"{head}: its pods bind host ports, one per node, and no other node has room"
    needs = missing[:1] if missing else per_pod
    detail = " and ".join(f"{format_amount(name, slot[name])} {name}" for name in needs)
    return f"{head}: no node has {detail} free" + ("" if missing else " at once")


def _scarcest(order: Sequence[str], wanted: Units, have: Units) -> str:
    """The resource the gang needs the largest share of (the first such in ``order``)."""
    best, best_share = order[0], -1.0
    for name in order:
        share = wanted[name] / have[name] if have[name] > 0 else float("inf")
        if share > best_share:
            best, best_share = name, share
    return best


class Shortfall:
    """``explain_shortfall`` of one gang on a cycle's capacity, phrased when first read (rule 7).

    An admission cycle cannot afford to walk every allowed node for each gang that waits, and
    the shell reads a wait's message at most once per status refresh, after the cycle: so the
    amounts it shows are what the cycle left free.
    """

    __slots__ = ("_capacity", "_gpu_resource", "_requests", "_shape", "_text", "_where")

    def __init__(
        self,
        capacity: Capacity,
        shape: Shape,
        requests: Collection[Units],
        *,
        where: str,
        gpu_resource: str,
    ) -> None:
        self._capacity = capacity
        self._shape = shape
        self._requests = requests
        self._where = where
        self._gpu_resource = gpu_resource
        self._text: str | None = None

    def __eq__(self, other: object) -> bool:
        """Two shortfalls are equal when they say the same."""
        if not isinstance(other, Shortfall):
            return NotImplemented
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        if self._text is None:
            self._text = explain_shortfall(
                self._capacity.free_for(self._shape),
                self._shape,
                self._requests,
                where=self._where,
                gpu_resource=self._gpu_resource,
            )
        return self._text


# ------------------------------------------------------------------ rule 8: elastic extras


@dataclass(frozen=True, slots=True)
class OptionalPod:
    """A pod beyond the gang's ``minAvailable`` (an elastic worker), placed only where it fits.

    ``allowed`` lists the nodes it may use at all, by name (``nodes.eligible_nodes``); ``None``
    means every node of the topology.
    """

    name: str
    requests: Units
    allowed: tuple[str, ...] | None = None


def place_extras(
    capacity: Capacity,
    placed: Mapping[str, str],
    extras: Sequence[OptionalPod],
    *,
    one_per_node: bool = False,
) -> dict[str, str]:
    """Pod -> node for the ``extras`` that fit beside the gang ``placed`` (rule 8).

    Each one placed takes its room from ``capacity`` at once, so the next (and every later gang
    of the cycle) sees it gone.
    """
    topology = capacity.topology
    out: dict[str, str] = {}
    for pod in extras:
        gang_nodes = sorted({*placed.values(), *out.values()})
        allowed = topology.node_names if pod.allowed is None else pod.allowed
        permitted = None if pod.allowed is None else frozenset(pod.allowed)
        candidates = allowed if one_per_node else [*gang_nodes, *allowed]
        for node in candidates:
            index = topology.index.get(node)
            if index is None or (permitted is not None and node not in permitted):
                continue
            if one_per_node and node in gang_nodes:
                continue
            if fits(capacity.free[index], pod.requests):
                capacity.take({pod.name: node}, {pod.name: pod.requests})
                out[pod.name] = node
                break
    return out

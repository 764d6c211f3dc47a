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
one pod shape is counted in slots of that shape. A gang of several (a CPU-only Master beside GPU
Workers) is counted and placed by its *lead* pods, those asking the most of its first resource,
and its other pods then go beside them (rule 9); when they fit nowhere there it is counted by
its largest request per resource, which never overstates the room (any pod fits a slot of the
largest shape), so it is never placed worse than by that count alone.

Rules (each one function):

0. ``place_topology``: a gang that asks for none of the pool's GPUs is offered the nodes without
   GPUs first (``Shape.preferred``, ``gpu_free_nodes``) and goes to a GPU node only when it fits
   nowhere else, so GPUs stay free for the gangs that need them (a CPU job on a GPU node leaves
   its GPUs idle however tightly it packs the node's CPUs).
1. ``slots_of``: a node's slots for a shape; a domain's slots are its nodes' sum.
2. ``fitting_level``: the finest level with a domain whose slots hold the whole gang (a domain
   never has more slots than its parent, so it is the finest level whose roomiest domain does).
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
7. ``explain_shortfall`` (``short_of``, else ``fragmentation`` and ``fragmented``): a
   ``Capacity`` wait names what is short on the gang's allowed nodes:
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
9. ``place_mixed``: a gang of several pod shapes (``mixed_of``: its lead pods, those asking the
   most of its first resource, GPUs first as in rule 7, and the others) places its leads by
   rules 0 and 2-6 in slots of their own shape, then each other pod in rank order on the first
   node with room for its own requests once the pods before it are counted: the gang's nodes
   in rank order, then the chosen domain's other nodes, then its parent's, up to the pool (or
   to the domain of a required level); with host ports only a node without a pod of the gang.
   Its domain is the smallest of those that holds every pod. When a required pod fits nowhere
   there, or the leads do not fit, the gang is placed in slots of its largest request per
   resource (rules 2-6 over all its pods), as a gang of one shape: so whatever places the gang
   by that count places it still.

Cost: a ``Capacity`` is kept across admission cycles (the admitter updates the nodes whose free
capacity changed) and keeps, per shape asked about, its slots per node and per domain and, per
level, its domains by slot count (``Slots``), current at all times: a change recounts the nodes
it touches (and moves their ancestors' counts), once, for each shape counted, where it happens
(a pod taken from a node without a slot leaves it without one, so that node is skipped). A
domain of one node takes that node's count; a domain of more moves once per run of changed
nodes under it (a gang's nodes come domain by domain), with no table of summed changes. Rules
2 and 3 then look at the roomiest domain of each level and the first count that holds the gang,
not at every domain, so a placement costs what it changes. A cycle decides on a ``fork`` that
copies nothing per node until it changes one. Explaining a shortfall (rule 7) needs free
totals, which the capacity keeps, and for a fragmented gang what each allowed node has to spare
(``spare_of``), which is counted once per shape and then kept with the shape's slot counts from
fork to fork; a ``Shortfall`` is phrased only when it is read.

One module, though long: the rules and the ``Capacity`` they read are one concern (where a gang's
pods go, and why not), and the capacity's kept counts are correct only together with the rules
that read them; splitting them would put one invariant in two files.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Final, Literal

from torchgate.pytorchjob.outlook import NODE_DOMAIN
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
    # A cycle hashes every waiting gang's shape several times (memo keys, kept slot counts): the
    # hash of the fields above, taken once. Never pickled (``__reduce__``): string hashes differ
    # from process to process.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = (self.pod, self.one_per_node, self.allowed, self.preferred)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Shape], tuple[object, ...]]:
        return Shape, (self.pod, self.one_per_node, self.allowed, self.preferred)

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


@dataclass(frozen=True, slots=True)
class Mixed:
    """A gang of several pod shapes, split for placement (rule 9).

    ``lead`` is the slot shape of its lead pods (those asking the most of its first resource),
    with the gang's allowed and preferred nodes and host ports; ``leads`` and ``others`` are the
    pods of each part, in rank order, with their requests. Two gangs whose pods ask alike in
    the same rank order compare (and hash) equal whatever their pods are called: placement
    answers them alike.
    """

    lead: Shape
    composition: tuple[PodShape, ...]  # every pod's requests, sorted, in rank order
    leads: tuple[tuple[str, Units], ...] = field(compare=False)
    others: tuple[tuple[str, Units], ...] = field(compare=False)


def mixed_of(
    requests: Mapping[str, Units],
    *,
    gpu_resource: str,
    one_per_node: bool = False,
    allowed: Iterable[str] | None = None,
    preferred: Iterable[str] | None = None,
) -> Mixed | None:
    """The gang (pod -> requests, rank order) split into leads and others (rule 9).

    The leads ask the most of the gang's first resource (``resource_order``: its GPUs first);
    ``None`` when every pod asks that much (a gang of one shape, placed by ``shape_of``).
    """
    order = resource_order(summed(requests.values()), gpu_resource)
    if not order:
        return None
    first = order[0]
    most = max(asked.get(first, 0) for asked in requests.values())
    leads = tuple((pod, asked) for pod, asked in requests.items() if asked.get(first, 0) == most)
    if len(leads) == len(requests):
        return None
    lead = shape_of(
        (asked for _, asked in leads),
        one_per_node=one_per_node,
        allowed=allowed,
        preferred=preferred,
    )
    return Mixed(
        lead=lead,
        composition=tuple(tuple(sorted(asked.items())) for asked in requests.values()),
        leads=leads,
        others=tuple((pod, asked) for pod, asked in requests.items() if asked.get(first, 0) < most),
    )


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
    # per node, its domains below the root finest first, split in two: those holding it alone
    # (their count is the node's), then the others (one tuple per distinct chain: the nodes of
    # the same domains share the object)
    alone: tuple[tuple[int, ...], ...]
    shared: tuple[tuple[int, ...], ...]
    index: Mapping[str, int]  # node name -> position in ``node_names``
    member: tuple[tuple[int, ...], ...]  # per level, per node: its domain there
    rank: tuple[int, ...]  # per domain: its place in its level by fewest nodes, then key (rule 3)
    by_rank: tuple[tuple[int, ...], ...]  # per level: its domains in that order
    sole: tuple[int, ...]  # per domain: its only node when it has one node, else -1
    level_of: tuple[int, ...]  # per domain: its level (-1 for the root)

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
            # a node outside this level's labels
            return NODE_DOMAIN + value.removeprefix(SOLE_PREFIX)
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
    by_rank = tuple(
        tuple(sorted(level, key=lambda d: (domains[d].node_count, domains[d].key)))
        for level in by_level
    )
    rank = [0] * len(domains)
    for ranked in by_rank:
        for position, domain in enumerate(ranked):
            rank[domain] = position
    only_node = [-1] * len(domains)
    for position, its_domains in enumerate(ancestors):
        for domain in its_domains:
            if domains[domain].node_count == 1:
                only_node[domain] = position
    alone: list[tuple[int, ...]] = []
    shared: list[tuple[int, ...]] = []
    chains: dict[tuple[int, ...], tuple[int, ...]] = {}  # one object per distinct chain
    for its_domains in ancestors:
        below_root = its_domains[:-1]
        # a prefix: a domain has no fewer nodes than its child
        own = sum(only_node[domain] >= 0 for domain in below_root)
        alone.append(below_root[:own])
        shared.append(chains.setdefault(below_root[own:], below_root[own:]))
    return Topology(
        levels=tuple(levels),
        node_names=tuple(names),
        domains=tuple(domains),
        by_level=by_level,
        ancestors=tuple(ancestors),
        alone=tuple(alone),
        shared=tuple(shared),
        index={name: i for i, name in enumerate(names)},
        member=member,
        rank=tuple(rank),
        by_rank=by_rank,
        sole=tuple(only_node),
        level_of=tuple(domain.level for domain in domains),
    )


# ------------------------------------------------------------------ rule 1: slots


def slots_of(free: Units, shape: Shape, plus: Units | None = None) -> int:
    """How many pods of ``shape`` fit on a node with ``free`` (and ``plus``) capacity (rule 1)."""
    slots = UNBOUNDED
    if plus is None:
        for name, amount in shape.pod:
            fits = free.get(name, 0) // amount
            if fits < slots:
                if fits <= 0:
                    return 0
                slots = fits
    else:
        for name, amount in shape.pod:
            fits = (free.get(name, 0) + plus.get(name, 0)) // amount
            if fits < slots:
                if fits <= 0:
                    return 0
                slots = fits
    return min(slots, 1) if shape.one_per_node else slots


class Slots:
    """One shape's slot counts: per node, per domain, and per level by count (rules 1-3).

    ``masks[level][count]`` has a byte per domain of the level at its ``Topology.rank``, 1 for
    each domain of that count, so the tightest domain holding ``n`` slots is the first 1 of the
    first count ``>= n`` (found in C); ``values[level]`` lists the level's counts in ``masks``,
    ascending. A domain's move sets two bytes in place: a count no domain has any more keeps its
    bytes, all 0, until a read comes to it or the counts are copied, which drop it
    (``roomiest``, ``tightest``, ``copy``), so a move at a level of thousands of domains
    allocates nothing (an int of a bit per domain, built anew per move, was a few per cent of
    a busy cycle).

    Once its fragmentation is asked about (rule 7), it also keeps each node's ``spare_of`` in
    ``spare`` and, per resource of the shape, how many nodes have that resource to spare
    (``spare_counts``; the last entry counts the nodes that count at all), kept up to date with
    the slots.
    """

    __slots__ = ("by_rank", "domains", "masks", "nodes", "spare", "spare_counts", "values")

    def __init__(
        self,
        by_rank: tuple[tuple[int, ...], ...],
        nodes: list[int],
        domains: list[int],
        values: list[list[int]],
        masks: list[dict[int, bytearray]],
    ) -> None:
        self.by_rank = by_rank
        self.nodes = nodes
        self.domains = domains
        self.values = values
        self.masks = masks
        self.spare: list[int] | None = None
        self.spare_counts: list[int] = []

    def roomiest(self, level: int) -> int:
        """The most slots of any domain of ``level`` (0 when none has any)."""
        values = self.values[level]
        while values:
            most = values[-1]
            masks = self.masks[level]
            if 1 in masks[most]:
                return most
            del masks[most]  # no domain has that count any more
            values.pop()
        return 0

    def tightest(self, level: int, count: int) -> int | None:
        """The domain of ``level`` with the fewest slots ``>= count``, then fewest nodes, key."""
        values, masks = self.values[level], self.masks[level]
        at = bisect_left(values, count)
        while at < len(values):
            found = masks[values[at]].find(1)
            if found >= 0:
                return self.by_rank[level][found]
            del masks[values[at]]  # no domain has that count any more
            del values[at]
        return None

    def copy(self) -> Slots:
        """A copy to change on its own (a fork's), without the counts no domain has any more.

        Those are dropped here too: the counts a ``Capacity`` keeps across cycles are moved by
        its updates and copied by its forks, never read, so nothing else would drop them.
        """
        for values, masks in zip(self.values, self.masks, strict=True):
            for count in [count for count, found in masks.items() if 1 not in found]:
                del masks[count]
                values.remove(count)
        copied = Slots(
            self.by_rank,
            list(self.nodes),
            list(self.domains),
            [list(values) for values in self.values],
            [{count: bytearray(found) for count, found in masks.items()} for masks in self.masks],
        )
        copied.take_spare(self)
        return copied

    def take_spare(self, other: Slots) -> None:
        """Copy ``other``'s spare resources per node (rule 7), if it keeps them."""
        if other.spare is not None:
            self.spare, self.spare_counts = list(other.spare), list(other.spare_counts)

    def set_spare(self, node: int, bits: int) -> None:
        """The node now has ``bits`` to spare (``spare_of``)."""
        assert self.spare is not None
        counts, was = self.spare_counts, self.spare[node]
        if was != bits:
            self.spare[node] = bits
            for i in range(len(counts) - 1):
                counts[i] += (bits >> i & 1 if bits >= 0 else 0) - (was >> i & 1 if was >= 0 else 0)
            counts[-1] += (bits >= 0) - (was >= 0)

    def fragmentation(self, shape: Shape) -> tuple[frozenset[str], bool]:
        """``fragmentation`` from the kept spare counts."""
        counts = self.spare_counts
        short = frozenset(
            name for (name, _), count in zip(shape.pod, counts, strict=False) if not count
        )
        return short, counts[-1] > 0

    def move(self, domains: Iterable[int], delta: int, topology: Topology) -> None:
        """Add ``delta`` to the counts of ``domains`` (below the root), each by its level.

        A move sets the domain's two bytes where it happens (a cycle moves thousands of domain
        counts, so none is collected for later): an emptied count is dropped when read.
        """
        per_domain, all_masks = self.domains, self.masks
        level_of, rank = topology.level_of, topology.rank
        for domain in domains:
            before = per_domain[domain]
            after = per_domain[domain] = before + delta
            masks = all_masks[level_of[domain]]
            if before:
                masks[before][rank[domain]] = 0
            if after:
                found = masks.get(after)
                if found is None:
                    found = self.new_count(level_of[domain], after)
                found[rank[domain]] = 1

    def new_count(self, level: int, count: int) -> bytearray:
        """The bytes of a count of ``level`` no domain had (all 0), now kept in order."""
        found = self.masks[level][count] = bytearray(len(self.by_rank[level]))
        insort(self.values[level], count)
        return found


class Capacity:
    """Free capacity per node, with slot counts per shape kept up to date as it changes.

    Invariant: every shape's kept counts (``Slots``) equal counts made afresh from ``free``. A
    change recounts its nodes, once per change and where it happens, for the shapes this
    capacity has counted (``_recount``): taking or giving back pods (``take``, ``give``) and the
    shell's updates (``update``). A placement then reads counts that are already current.

    One exception keeps a moment's loan cheap: while pods are lent back (``lent``, a preemption
    trying where its gang would go with the victims gone), only the shapes asked about during
    the loan are recounted on its nodes, and counted again when it ends; the shapes not asked
    keep their counts of before the loan, true again when it ends, since the loan's nodes get
    back the very capacity they had. Nothing but placement (``slots`` and what reads ``free``)
    may use a capacity during a loan.

    The admitter keeps one ``Capacity`` across cycles and tells it which nodes' free capacity
    changed (``update``); each cycle decides on a ``fork``, a copy whose changes (gangs placed,
    victims given back in a trial) never reach the original. A fork shares the original's
    per-node capacity until it changes a node, and copies a shape's slot counts (flat lists, a
    copy in C) the first time it asks about that shape, then recounts the nodes it changed
    before that, so a cycle costs what it places, not what the pool holds. Slot counts of a
    shape the original has not seen are computed once on the original (from its own capacity,
    which a cycle never changes) and kept for later cycles.
    """

    KEEP_UNUSED_FORKS: Final = 16  # a shape no fork asked about in this many forks is dropped

    __slots__ = (
        "_edited",
        "_edits",
        "_forked_at",
        "_forks",
        "_last",
        "_loan",
        "_memo",
        "_origin",
        "_shared",
        "_slots",
        "_sums",
        "_sums_used",
        "_touched",
        "_used",
        "_version",
        "_was",
        "free",
        "topology",
    )

    def __init__(self, topology: Topology, free: Mapping[str, Units]) -> None:
        """Take a copy of ``free`` (node name -> milli-units); unknown nodes have nothing."""
        self.topology = topology
        self.free: list[dict[str, int]] = [dict(free.get(n) or {}) for n in topology.node_names]
        self._slots: dict[Shape, Slots] = {}  # every shape counted, kept current
        self._touched: set[int] = set()  # a fork's: nodes it changed (a shape first asked later)
        self._loan: _Loan | None = None  # pods lent back for a moment (``lent``)
        self._shared: set[int] | None = None  # after a fork: nodes whose dict is this one's own
        self._origin: Capacity | None = None  # what a fork was taken from
        self._forks = 0
        self._used: dict[Shape, int] = {}  # shape -> the last fork that asked about it
        self._last: tuple[Shape, Slots] | None = None  # the last shape asked about
        self._version = 0  # of the free capacity: bumps with each update and fork
        self._forked_at = -1  # a fork's: its origin's version when it was taken
        # ``have``: free totals per resource over every node (``None``) or a set of allowed
        # nodes as of the last fork, with the nodes changed since then as they were.
        self._sums: dict[frozenset[str] | None, dict[str, int]] = {None: _totals(self.free)}
        self._was: dict[int, dict[str, int]] = {}
        self._sums_used: dict[frozenset[str] | None, int] = {}  # set -> the last fork asking
        self._memo: dict[object, object] = {}  # ``have``, per edit count
        self._edits = 0  # changes to the free capacity so far (never goes back)
        self._edited: dict[int, int] = {}  # node -> ``_edits`` when it last changed (``since``)

    # ------------------------------------------------------------------ the shell's side

    def update(self, free: Mapping[str, Units]) -> None:
        """Set the free capacity of the named nodes (unknown nodes are ignored)."""
        assert self._loan is None, "nothing but placement uses a capacity during a loan"
        index = self.topology.index
        changed: dict[int, None] = {}
        for name, units in free.items():
            node = index.get(name)
            if node is not None and self.free[node] != units:
                self._version += 1
                for allowed, sums in self._sums.items():
                    if allowed is None or name in allowed:
                        _count_into(sums, self.free[node], -1)
                        _count_into(sums, units, 1)
                self.free[node] = dict(units)
                changed[node] = None
                self._edits += 1
                self._edited[node] = self._edits
        if changed:
            if self._origin is not None:
                self._touched.update(changed)
            for shape, slots in self._slots.items():
                self._recount(shape, slots, changed, taken=False)

    def fork(self) -> Capacity:
        """A copy to decide one cycle on; what it changes never reaches this capacity."""
        assert self._loan is None, "nothing but placement uses a capacity during a loan"
        self._forks += 1
        self._version += 1
        self._last = None
        for shape in [
            s for s, at in self._used.items() if self._forks - at > self.KEEP_UNUSED_FORKS
        ]:
            del self._used[shape]
            self._slots.pop(shape, None)
        other = Capacity.__new__(Capacity)
        other.topology = self.topology
        other.free = list(self.free)
        other._slots = {}
        other._touched = set()
        other._loan = None
        other._shared = set()
        other._origin = self
        other._forks = 0
        other._used = {}
        other._last = None
        other._version = 0
        other._forked_at = self._version
        names = self.topology.node_names
        for allowed, sums in self._sums.items():  # fold what changed since the last fork in
            for node, was in self._was.items():
                if allowed is None or names[node] in allowed:
                    _count_into(sums, was, -1)
                    _count_into(sums, self.free[node], 1)
        self._was.clear()
        self._memo.clear()
        for allowed in [
            a for a, at in self._sums_used.items() if self._forks - at > self.KEEP_UNUSED_FORKS
        ]:
            del self._sums_used[allowed]
            self._sums.pop(allowed, None)
        other._sums = {allowed: dict(sums) for allowed, sums in self._sums.items()}
        other._was = {}
        other._sums_used = {}
        other._memo = {}
        other._edits = 0
        other._edited = {}
        self._shared = set()  # its dicts are the fork's too now: copy before writing
        return other

    @property
    def edits(self) -> int:
        """How many changes its free capacity has had so far (it never goes back)."""
        return self._edits

    def changed_since(self, nodes: Iterable[int], edits: int) -> bool:
        """Whether any of ``nodes`` (indexes) changed after its first ``edits`` changes."""
        return max(map(self._edited.get, nodes, repeat(0)), default=0) > edits  # a loop in C

    # ------------------------------------------------------------------ slots

    def slots(self, shape: Shape) -> Slots:
        """``shape``'s slot counts, current (computed once, then kept current)."""
        last = self._last
        if last is not None and last[0] is shape:
            found = last[1]
        else:
            known = self._slots.get(shape)
            if known is None:
                known = self._slots[shape] = self._first_count(shape)
            found = known
            self._last = (shape, found)
        loan = self._loan
        if loan is not None and shape not in loan.asked:
            loan.asked.append(shape)
            self._recount(shape, found, loan.saved, taken=False)
        return found

    def _first_count(self, shape: Shape) -> Slots:
        """A shape's counts when first asked about: the origin's and what this fork changed.

        Counted here when there is no origin, or it changed since the fork (its counts are not
        ours then).
        """
        origin = self._origin
        if origin is None or origin._version != self._forked_at:
            self._used.setdefault(shape, self._forks)
            return self._count(shape)
        origin._used[shape] = origin._forks
        copied = origin.slots(shape).copy()
        if self._touched:
            self._recount(shape, copied, self._touched, taken=False)
        return copied

    def node_slots(self, shape: Shape) -> list[int]:
        """Slots per node for ``shape``."""
        return self.slots(shape).nodes

    def domain_slots(self, shape: Shape) -> list[int]:
        """Slots per domain for ``shape`` (the sum over the domain's nodes)."""
        return self.slots(shape).domains

    def free_for(self, shape: Shape) -> list[dict[str, int]]:
        """The free capacity of each node ``shape`` may use."""
        allowed, names = shape.allowed, self.topology.node_names
        return [free for i, free in enumerate(self.free) if allowed is None or names[i] in allowed]

    def have(self, shape: Shape, resources: Iterable[str]) -> dict[str, int]:
        """What the nodes ``shape`` may use have free in total, per resource (never below 0).

        From the totals kept since the last fork, plus what changed since on the nodes this
        capacity changed; a set of allowed nodes first asked about is counted on its nodes, and
        from then on kept by the capacity forked from (until no fork asks for it a while).
        """
        assert self._loan is None, "nothing but placement uses a capacity during a loan"
        allowed = shape.allowed
        key = ("have", allowed, self._edits)
        found = self._memo.get(key)
        if not isinstance(found, dict):
            sums = self._sums.get(allowed)
            if sums is not None:
                found = dict(sums)
                names = self.topology.node_names
                for node, was in self._was.items():
                    if allowed is None or names[node] in allowed:
                        _count_into(found, was, -1)
                        _count_into(found, self.free[node], 1)
            else:
                found = _totals(self.free_for(shape))
                if self._origin is not None:
                    self._origin._keep_sums(allowed)
            if self._origin is not None:
                self._origin._sums_used[allowed] = self._origin._forks
            self._memo[key] = found
        return {name: found.get(name, 0) for name in resources}

    def _keep_sums(self, allowed: frozenset[str] | None) -> None:
        """Keep totals over ``allowed`` from now on, as of the last fork (``have``)."""
        if allowed not in self._sums:
            index, was = self.topology.index, self._was
            nodes: Iterable[int] = range(len(self.free))
            if allowed is not None:
                nodes = (index[name] for name in allowed if name in index)
            self._sums[allowed] = _totals(was.get(node, self.free[node]) for node in nodes)

    def fragmentation(self, shape: Shape) -> tuple[frozenset[str], bool]:
        """``fragmentation`` of the nodes ``shape`` may use, as they are now.

        Counted once per shape, on the capacity forked from when it has not changed since,
        then kept with the shape's slot counts (``Slots.spare``) from fork to fork.
        """
        assert self._loan is None, "nothing but placement uses a capacity during a loan"
        slots = self.slots(shape)
        if slots.spare is None:
            origin = self._origin
            if origin is not None and origin._version == self._forked_at:
                kept = origin.slots(shape)
                if kept.spare is None:
                    origin._count_spare(shape, kept)
                slots.take_spare(kept)
                self._recount_spare(shape, slots, self._touched)
            else:
                self._count_spare(shape, slots)
        return slots.fragmentation(shape)

    def _count_spare(self, shape: Shape, slots: Slots) -> None:
        allowed, names = shape.allowed, self.topology.node_names
        slots.spare = [
            spare_of(free, shape, slots.nodes[i]) if allowed is None or names[i] in allowed else -1
            for i, free in enumerate(self.free)
        ]
        slots.spare_counts = [0] * (len(shape.pod) + 1)
        for bits in slots.spare:
            if bits >= 0:
                for i in range(len(shape.pod)):
                    slots.spare_counts[i] += bits >> i & 1
                slots.spare_counts[-1] += 1

    def _recount_spare(self, shape: Shape, slots: Slots, nodes: Iterable[int]) -> None:
        allowed, names, free = shape.allowed, self.topology.node_names, self.free
        for node in nodes:
            if allowed is None or names[node] in allowed:
                slots.set_spare(node, spare_of(free[node], shape, slots.nodes[node]))

    def take(self, nodes: Mapping[str, str], requests: Mapping[str, Units]) -> None:
        """Subtract placed pods (pod -> node, pod -> requests; requests are never negative)."""
        self._adjust(nodes, requests, -1)

    def give(self, nodes: Mapping[str, str], requests: Mapping[str, Units]) -> None:
        """Add back what pods held (preemption victims, or undoing a trial ``take``)."""
        self._adjust(nodes, requests, 1)

    @contextmanager
    def lent(self, pods: Sequence[tuple[Mapping[str, str], Mapping[str, Units]]]) -> Iterator[None]:
        """Give ``pods`` (pod -> node, pod -> requests) back for a moment, then take them again.

        Each node of the loan gets a dict of its own with the pods given back, and its very
        dict again after; only the shapes asked about meanwhile are recounted on the loan's
        nodes, then again after, so the moment costs the shapes it asks about, not every
        shape counted. The loan's nodes count as changed at both ends (``changed_since``).
        """
        assert self._loan is None, "one loan at a time"
        index, free = self.topology.index, self.free
        loaned: dict[int, dict[str, int]] = {}
        for nodes, requests in pods:
            for pod, node_name in nodes.items():
                node = index.get(node_name)
                if node is None:
                    continue
                have = loaned.get(node)
                if have is None:
                    have = loaned[node] = dict(free[node])
                for name, amount in (requests.get(pod) or {}).items():
                    have[name] = have.get(name, 0) + amount
        saved = {node: free[node] for node in loaned}
        loan = self._loan = _Loan(saved)
        self._mark(saved)
        for node, have in loaned.items():
            free[node] = have
        try:
            yield
        finally:
            for node, was in saved.items():
                free[node] = was
            self._loan = None
            self._mark(saved)
            for shape in loan.asked:
                known = self._slots.get(shape)
                if known is not None:
                    self._recount(shape, known, saved, taken=True)

    def _mark(self, nodes: Iterable[int]) -> None:
        """``nodes`` changed (``edits``, ``changed_since``)."""
        edits, edited = self._edits, self._edited
        for node in nodes:
            edits += 1
            edited[node] = edits
        self._edits = edits

    def _adjust(self, nodes: Mapping[str, str], requests: Mapping[str, Units], sign: int) -> None:
        assert self._loan is None, "nothing but placement uses a capacity during a loan"
        index, shared, all_free = self.topology.index, self._shared, self.free
        changed: dict[int, None] = {}
        edited, edits = self._edited, self._edits
        for pod, node_name in nodes.items():
            node = index.get(node_name)
            if node is None:
                continue
            free = all_free[node]
            if shared is None:
                self._sums.clear()  # changed in place: ``have`` counts on the nodes
            elif node not in shared:
                self._was[node] = free
                free = all_free[node] = dict(free)
                shared.add(node)
            asked = requests.get(pod)
            if asked:
                if sign < 0:
                    for name, amount in asked.items():
                        free[name] = free.get(name, 0) - amount
                else:
                    for name, amount in asked.items():
                        free[name] = free.get(name, 0) + amount
            changed[node] = None
            edits += 1
            edited[node] = edits
        self._edits = edits
        if changed:
            if self._origin is not None:
                self._touched.update(changed)
            for shape, slots in self._slots.items():
                self._recount(shape, slots, changed, taken=sign < 0)

    def _count(self, shape: Shape) -> Slots:
        topology = self.topology
        allowed, names = shape.allowed, topology.node_names
        nodes = [
            slots_of(free, shape) if allowed is None or names[i] in allowed else 0
            for i, free in enumerate(self.free)
        ]
        domains = [0] * len(topology.domains)
        for node, count in enumerate(nodes):
            if count:
                for domain in topology.ancestors[node]:
                    domains[domain] += count
        values: list[list[int]] = []
        masks: list[dict[int, bytearray]] = []
        rank = topology.rank
        for level in topology.by_level:
            by_count: dict[int, bytearray] = {}
            for domain in level:
                count = domains[domain]
                if count:
                    found = by_count.get(count)
                    if found is None:
                        found = by_count[count] = bytearray(len(level))
                    found[rank[domain]] = 1
            values.append(sorted(by_count))
            masks.append(by_count)
        return Slots(topology.by_rank, nodes, domains, values, masks)

    def _recount(self, shape: Shape, slots: Slots, nodes: Iterable[int], *, taken: bool) -> None:
        """Count ``shape``'s slots again on ``nodes`` (distinct), whose free capacity changed.

        ``taken``: the nodes only lost capacity, so a node without a slot has none still (unless
        its spare resources are kept: they change). Rule 1 is counted inline (``slots_of`` once
        per changed node and shape is the bulk of a busy cycle's placing), and a node with less
        of the shape's first resource than one pod asks has no slot without entering its loop
        (most recounts of a busy cycle: a take fills the nodes it lands on). A domain holding
        the node alone takes the node's count, moved here (``Slots.move``, inline: a call per
        node would cost more than the move); the node's other domains move by the summed change
        of the consecutive nodes under the same ones (a gang's nodes come domain by domain).
        """
        topology = self.topology
        allowed, names = shape.allowed, topology.node_names
        alone, shared = topology.alone, topology.shared
        per_node, per_domain, free = slots.nodes, slots.domains, self.free
        pod, one_per_node, spare = shape.pod, shape.one_per_node, slots.spare
        if not pod:
            return  # no resource asked: every node has every slot, whatever it has free
        first, first_amount = pod[0]
        all_masks, level_of, rank = slots.masks, topology.level_of, topology.rank
        skip_empty = taken and spare is None
        run_domains: tuple[int, ...] = ()  # the shared domains of the last changed node
        run = 0  # their change not yet counted
        pool_delta = 0
        for node in nodes:
            before = per_node[node]
            if skip_empty and not before:
                continue
            if allowed is not None and names[node] not in allowed:
                continue
            have = free[node]
            if have.get(first, 0) < first_amount:
                after = 0
            else:
                after = UNBOUNDED
                for name, amount in pod:
                    fit = have.get(name, 0) // amount
                    if fit < after:
                        after = fit
                        if fit <= 0:
                            after = 0
                            break
                if one_per_node and after:
                    after = 1
            if spare is not None:
                slots.set_spare(node, spare_of(have, shape, after))
            delta = after - before
            if delta:
                per_node[node] = after
                pool_delta += delta
                for domain in alone[node]:
                    per_domain[domain] = after
                    masks = all_masks[level_of[domain]]
                    if before:
                        masks[before][rank[domain]] = 0
                    if after:
                        found = masks.get(after)
                        if found is None:
                            found = slots.new_count(level_of[domain], after)
                        found[rank[domain]] = 1
                above = shared[node]
                if above is run_domains:
                    run += delta
                else:
                    if run:
                        slots.move(run_domains, run, topology)
                    run_domains, run = above, delta
        if run:
            slots.move(run_domains, run, topology)
        if pool_delta:
            per_domain[ROOT] += pool_delta


class _Loan:
    """Pods lent back for a moment (``Capacity.lent``).

    ``saved``: each loan node's own free capacity, put back when the loan ends; ``asked``: the
    shapes recounted on the loan's nodes meanwhile (recounted again when it ends).
    """

    __slots__ = ("asked", "saved")

    def __init__(self, saved: dict[int, dict[str, int]]) -> None:
        self.saved = saved
        self.asked: list[Shape] = []


def _totals(free: Iterable[Units]) -> dict[str, int]:
    """Free capacity summed per resource over ``free`` (each node's never below zero)."""
    totals: dict[str, int] = {}
    for node in free:
        _count_into(totals, node, 1)
    return totals


def _count_into(totals: dict[str, int], free: Units, sign: int) -> None:
    for name, amount in free.items():
        if amount > 0:
            totals[name] = totals.get(name, 0) + sign * amount


# ------------------------------------------------------------------ rules 2-3: the domain


def fitting_level(slots: Slots, levels: int, count: int) -> int:
    """The finest of ``levels`` levels with a domain holding ``count`` slots, else -1 (rule 2).

    A domain never has more slots than its parent, so that is the finest level whose roomiest
    domain holds them (-1: only the pool as a whole, which the caller has checked, does).
    """
    for level in range(levels - 1, -1, -1):
        if slots.roomiest(level) >= count:
            return level
    return -1


def best_domain(slots: Slots, level: int, count: int) -> int:
    """The tightest domain of ``level`` holding ``count`` slots, the pool at level -1 (rule 3).

    Tightest: the fewest slots, then the fewest nodes, then the smallest key.
    """
    if level < 0:
        return ROOT
    found = slots.tightest(level, count)
    assert found is not None, "fitting_level chose a level with room"
    return found


# ------------------------------------------------------------------ rule 4: inside the domain


def distribute(
    topology: Topology,
    node_slots: Sequence[int],
    domain_slots: Sequence[int],
    domain: int,
    count: int,
) -> list[tuple[int, int]]:
    """``(node index, pods)`` pairs for ``count`` pods in ``domain``, depth-first (rule 4).

    The children with room are sorted tightest first (slots, nodes, key), so the tightest child
    holding what remains is the first one not taken from where the slots reach it. A domain has
    either child domains (all of the next level, so ``Topology.rank`` orders them by nodes, then
    key) or, at the finest level, nodes of its own (their index orders them by name); a domain of
    one node puts every pod on it. When every child has the same room, both choices are the
    first child not taken, so the children fill in order without searching.
    """
    sole = topology.sole
    if sole[domain] >= 0:
        return [(sole[domain], count)]
    found = topology.domains[domain]
    units: list[tuple[int, int, int]]  # (slots, order among siblings, child domain or node)
    if found.children:
        rank = topology.rank
        units = [(domain_slots[c], rank[c], c) for c in found.children if domain_slots[c]]
    else:
        units = [(node_slots[n], n, n) for n in found.nodes if node_slots[n]]
    units.sort()
    chosen: list[tuple[int, int]] = []  # (child domain or node, pods)
    remaining = count
    if units[0][0] == units[-1][0]:
        # Every child has the same room (whole-node pods: one slot a node), so the tightest
        # child holding the rest and the roomiest child are both the first one not taken.
        each = units[0][0]
        for _, _, child in units:
            share = each if remaining > each else remaining
            chosen.append((child, share))
            remaining -= share
            if not remaining:
                break
    taken: set[int] = set()  # positions in ``units``
    roomiest: list[int] = []  # positions, roomiest first, once no child holds the rest
    next_roomiest = 0  # ``roomiest`` before it are taken (taken stays taken)
    while remaining > 0:
        at = bisect_left(units, (remaining,))
        while at in taken:
            at += 1
        if at < len(units):
            share = remaining  # the tightest child holding the rest
        else:
            if not roomiest:  # ``units`` ascend by (slots, order): a stable sort by slots alone
                roomiest = sorted(range(len(units)), key=[-u[0] for u in units].__getitem__)
            while roomiest[next_roomiest] in taken:
                next_roomiest += 1
            at = roomiest[next_roomiest]
            share = units[at][0]
        taken.add(at)
        chosen.append((units[at][2], share))
        remaining -= share
    if not found.children:
        return chosen
    out: list[tuple[int, int]] = []
    for child, share in chosen:
        if sole[child] >= 0:
            out.append((sole[child], share))
        else:
            out.extend(distribute(topology, node_slots, domain_slots, child, share))
    return out


# ------------------------------------------------------------------ rule 5: ranks


def assign_ranks(
    topology: Topology, pods: Sequence[str], spread: Sequence[tuple[int, int]]
) -> dict[str, str]:
    """Pod name -> node: pods in rank order fill the spread in its depth-first order (rule 5)."""
    names = topology.node_names
    if len(spread) == len(pods):  # a pod per node (whole-node pods, or one per node)
        return dict(zip(pods, [names[node] for node, _ in spread], strict=True))
    nodes = [names[node] for node, count in spread for _ in range(count)]
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
    mixed: Mixed | None = None,
) -> TopologyPlacement | TopologyWait:
    """Place the whole gang ``pods`` (rank order) by rules 0 and 2-5, or say why it waits (rule 6).

    Rule 0: a shape with ``preferred`` nodes is placed there when it fits them whole (meeting its
    topology preference too), and over all its allowed nodes otherwise. Rule 9: a gang of
    several pod shapes (``mixed``) is placed by its leads first, and by ``shape`` (its largest
    request per resource) when that does not place it.
    """
    if mixed is not None:
        split = place_mixed(capacity, pods, mixed, request)
        if split is not None:
            return split
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
    slots = capacity.slots(shape)
    if slots.domains[ROOT] < count:
        return TopologyWait(
            "Capacity",
            f"waiting for room for {count} pod(s): {slots.domains[ROOT]} fit in the pool now",
        )
    level = fitting_level(slots, len(topology.levels), count)
    wanted = request.level
    if wanted is not None and wanted >= len(topology.levels):
        wanted = None
    if wanted is not None and request.required and level < wanted:
        return TopologyWait(
            "Topology",
            f"waiting for one {topology.levels[wanted]} domain with room for {count} pod(s): "
            f"the roomiest has room for {slots.roomiest(wanted)}",
        )
    domain = best_domain(slots, level, count)
    spread = distribute(topology, slots.nodes, slots.domains, domain, count)
    return TopologyPlacement(
        nodes=assign_ranks(topology, pods, spread),
        domain=topology.domain_name(domain),
        level=level,
        preference_met=wanted is None or level >= wanted,
    )


def place_mixed(
    capacity: Capacity, pods: Sequence[str], mixed: Mixed, request: TopologyRequest
) -> TopologyPlacement | None:
    """Rule 9: the leads by rules 0 and 2-5, the others beside them; ``None`` if one fits nowhere.

    Reads the capacity only (what the gang's pods take is counted aside), so it may run during a
    loan (``Capacity.lent``).
    """
    placed = place_topology(capacity, [pod for pod, _ in mixed.leads], mixed.lead, request)
    if not isinstance(placed, TopologyPlacement):
        return None
    topology = capacity.topology
    index, names, free = topology.index, topology.node_names, capacity.free
    allowed, one_per_node = mixed.lead.allowed, mixed.lead.one_per_node
    nodes = dict(placed.nodes)
    gang_nodes: dict[int, None] = {}  # the gang's nodes in rank order, first taken first
    left: dict[int, dict[str, int]] = {}  # what they have left with the gang's pods counted
    for pod, asked in mixed.leads:
        _take_aside(left, free, index[nodes[pod]], asked)
        gang_nodes.setdefault(index[nodes[pod]], None)
    domain = ROOT if placed.level < 0 else topology.member[placed.level][next(iter(gang_nodes))]
    wanted = request.level
    limit = -1  # the coarsest level the others may spread over: a required one's, else the pool
    if request.required and wanted is not None and wanted < len(topology.levels):
        limit = wanted
    around = [domain]  # the chosen domain and the ancestors others may go to, finest first
    while topology.level_of[around[-1]] > limit:
        around.append(topology.domains[around[-1]].parent)
    reached = 0  # the last domain of ``around`` a pod went to
    for pod, asked in mixed.others:
        in_reach = (n for d in around for n in _nodes_under(topology, d))
        for node in chain(gang_nodes, in_reach):
            if (allowed is not None and names[node] not in allowed) or (
                one_per_node and node in gang_nodes
            ):
                continue
            if fits(left.get(node, free[node]), asked):
                break
        else:
            return None
        _take_aside(left, free, node, asked)
        gang_nodes.setdefault(node, None)
        nodes[pod] = names[node]
        ancestors = topology.ancestors[node]
        reached = max(reached, next(i for i, d in enumerate(around) if d in ancestors))
    top = around[reached]
    level = topology.level_of[top]
    return TopologyPlacement(
        nodes={pod: nodes[pod] for pod in pods},
        domain=topology.domain_name(top),
        level=level,
        preference_met=wanted is None or wanted >= len(topology.levels) or level >= wanted,
    )


def _take_aside(
    left: dict[int, dict[str, int]], free: Sequence[Units], node: int, asked: Units
) -> None:
    """Count ``asked`` as taken from ``node`` in ``left`` (rule 9), the capacity left as it is."""
    have = left.get(node)
    if have is None:
        have = left[node] = dict(free[node])
    for name, amount in asked.items():
        have[name] = have.get(name, 0) - amount


def _nodes_under(topology: Topology, domain: int) -> Iterator[int]:
    """The nodes of ``domain``, its own first, then its children's in order."""
    found = topology.domains[domain]
    yield from found.nodes
    for child in found.children:
        yield from _nodes_under(topology, child)


def fits_topology(capacity: Capacity, count: int, shape: Shape, request: TopologyRequest) -> bool:
    """Whether ``place_topology`` would place ``count`` pods (without computing where)."""
    slots = capacity.slots(shape)
    if slots.domains[ROOT] < count:
        return False
    wanted = request.level
    if not request.required or wanted is None or wanted >= len(capacity.topology.levels):
        return True
    return slots.roomiest(wanted) >= count


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
    wanted = summed(requests)
    order = resource_order(wanted, gpu_resource)
    have = {name: sum(max(0, node.get(name, 0)) for node in free) for name in order}
    return short_of(wanted, order, have, where) or fragmented(
        *fragmentation(free, shape), shape, wanted, order, have, where
    )


def summed(requests: Iterable[Units]) -> dict[str, int]:
    """What the whole gang asks for, per resource."""
    wanted: dict[str, int] = {}
    for pod in requests:
        for name, amount in pod.items():
            wanted[name] = wanted.get(name, 0) + amount
    return wanted


def short_of(wanted: Units, order: Sequence[str], have: Units, where: str) -> str | None:
    """Rule 7's first case: the first resource the gang needs more of than is free, if any."""
    if not order:
        return f"waiting for room {where}"
    for name in order:
        if wanted[name] > have[name]:
            return (
                f"waiting for {format_amount(name, wanted[name])} {name} {where}: "
                f"{format_amount(name, have[name])} free"
            )
    return None


def fragmentation(free: Iterable[Units], shape: Shape) -> tuple[frozenset[str], bool]:
    """What no node has left for one more pod once it holds all it has slots for (rule 7).

    Returns those resources of the shape, and whether any node counts at all (with host ports a
    node that takes a pod of the gang takes no other).
    """
    spared, counted = 0, False
    for node in free:
        bits = spare_of(node, shape, slots_of(node, shape))
        if bits >= 0:
            spared, counted = spared | bits, True
    return frozenset(name for i, (name, _) in enumerate(shape.pod) if not spared >> i & 1), counted


def spare_of(free: Units, shape: Shape, slots: int) -> int:
    """What one node has to spare once it holds the ``slots`` pods it has room for (rule 7).

    Bit ``i`` is set when it has the ``i``-th resource of ``shape.pod`` left for one more pod;
    -1 when the node does not count (with host ports, a node with a slot takes a pod of the
    gang and no other).
    """
    if shape.one_per_node and slots:
        return -1
    bits = 0
    for i, (name, amount) in enumerate(shape.pod):
        if free.get(name, 0) - slots * amount >= amount:
            bits |= 1 << i
    return bits


def fragmented(
    short: frozenset[str],
    counted: bool,
    shape: Shape,
    wanted: Units,
    order: Sequence[str],
    have: Units,
    where: str,
) -> str:
    """Rule 7's second case, every total sufficing: what no node has enough left of."""
    slot = dict(shape.pod)
    per_pod = [name for name in order if name in slot]
    missing = [name for name in per_pod if name in short]
    headline = missing[0] if missing and counted else _scarcest(order, wanted, have)
    head = (
        f"waiting for {format_amount(headline, wanted[headline])} {headline} {where}: "
        f"{format_amount(headline, have[headline])} free but fragmented"
    )
    if not counted:
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
    amounts it shows are what the cycle left free. The free totals come from the capacity
    (``Capacity.have``), and a fragmented gang's spare resources from the counts it keeps per
    shape (``Capacity.fragmentation``).
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
            capacity, shape = self._capacity, self._shape
            wanted = summed(self._requests)
            order = resource_order(wanted, self._gpu_resource)
            have = capacity.have(shape, order)
            self._text = short_of(wanted, order, have, self._where) or fragmented(
                *capacity.fragmentation(shape), shape, wanted, order, have, self._where
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

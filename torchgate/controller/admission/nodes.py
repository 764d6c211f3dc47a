"""Which nodes a pod may run on: kube-scheduler's filters for what a pod template can say.

torchgate places whole gangs itself (``topology``), so it must know, before any pod exists, which
nodes kube-scheduler would accept for each of them; a gang placed on a node the scheduler then
refuses would hold its reservation until the schedule timeout. The rules mirror kube-scheduler's
filters, one function each:

1. ``admits``: a cordoned or not-Ready node takes nothing; a job with pinned hosts only those.
2. ``nodeSelector``: every key with the same value.
3. Required node affinity (``SelectorTerm.matches``): the terms are OR-ed, a term's requirements
   AND-ed, an empty term matches nothing; ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
   ``Lt`` on labels (``Requirement.matches_labels``), ``matchFields`` on ``metadata.name`` only
   (``Requirement.matches_name``); a malformed requirement never matches.
4. ``tolerates_all``: every ``NoSchedule``/``NoExecute`` taint tolerated (``PreferNoSchedule`` is
   only a preference), with Kubernetes' ``ToleratesTaint`` (``Toleration.tolerates``).
5. ``too_large``: a pod that asks for more than any node it may use holds even empty (its
   allocatable and GPU devices, ``ledger.capacity_of``) can never be placed, whatever ends;
   ``no_node_large_enough`` says so, naming the first resource no such node has enough of,
   and the GPU DeviceClasses of the pod's claims counted under it (``PodDemand.device_classes``:
   a DRA pool's nodes list no ``nvidia.com/gpu``, which its GPU claims are counted under).
6. ``gang_too_large``: a gang each of whose pods fits some node but whose required pods cannot
   all be placed on the nodes it may use even when those nodes are empty (3 pods of 8 GPUs on
   two 8-GPU nodes; more pods with host ports than such nodes; a required topology level none
   of whose domains holds it) can never be placed either. The check is exact with respect to
   placement: it counts placement's slots (``topology.slots_of``) on the nodes' allocatable
   (``Pool.empty``) as ``fits_topology`` reads them, and a gang of several pod shapes those
   slots do not hold is placed there as placement places it (``topology.place_mixed``, its
   rule 9), so it calls a gang too large exactly when placement would not place it on empty
   nodes (property tests hold it to that). The message names the first resource the gang asks
   more of in total than those nodes have, else the host ports (one pod per node), else the
   room the nodes have for its pods.

7. ``out_of_use``: the nodes a waiting gang could use but for their state: every one of its
   pods' constraints (nodeSelector, affinity, pinned hosts) matches them, and only the node's
   state keeps the pods off (NotReady or lost, cordoned, torchgate's quarantine taint, another
   ``NoSchedule``/``NoExecute`` taint the pods do not tolerate), counted by cause (``cause_of``,
   in that order), with what they hold of the gang's first resource (``topology.resource_order``:
   its GPUs); nodes holding none of it do not count. ``OutOfUse.clause`` tells a ``Capacity``
   wait what clearing them would bring: ``(24 nvidia.com/gpu more on 3 nodes out of use: 2
   tainted nvidia.com/gpu-health, 1 NotReady)``; what an admin can act on, not what must end.

Beyond that, resources and host ports are not filters here: they depend on what else is on the
node, which is placement's business (``topology``: slots per node, one pod of a gang per node
with host ports). ``PodDemand`` carries both: a pod's requests (plus one ``pods`` slot) and host
ports, and the constraints above as a hashable ``signature``, so pods with equal constraints
share one eligibility answer. ``no_eligible_node`` says which filter left no node for a pod (its
``exclusion_reason``), for the waiting job's condition.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from torchgate.controller.admission.topology import (
    Capacity,
    Mixed,
    Shape,
    place_mixed,
    resource_order,
    slots_of,
    summed,
)
from torchgate.pytorchjob import names
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources, pod_claimed_classes
from torchgate.pytorchjob.digits import parse_integer
from torchgate.pytorchjob.pool import TopologyRequest
from torchgate.pytorchjob.spec import (
    JobSpec,
    as_list,
    as_mapping,
    as_text,
    pinned_hosts,
    pod_spec_of,
)
from torchgate.pytorchjob.taints import (
    BLOCKING_EFFECTS,
    Taint,
    Toleration,
    tolerations_of,
)
from torchgate.pytorchjob.units import Units, format_amount, parse_capacity, pod_units

# ------------------------------------------------------------------ constraint model


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
            label = parse_integer(labels[self.key], signed=True)
            bound = parse_integer(values[0], signed=True)
            if label is None or bound is None:
                return False
            return label > bound if operator == "Gt" else label < bound
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
    allocatable: Units = field(default_factory=dict)  # milli-units, rounded down
    schedulable: bool = True
    ready: str = "True"  # the Ready condition's status: True, False (NotReady), Unknown (lost)
    ready_since: str = ""  # that condition's lastTransitionTime


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
    requests: Units  # ``units.pod_units``: milli-units, rounded up, plus one pod slot
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[SelectorTerm, ...] | None = None  # None: no required node affinity
    tolerations: tuple[Toleration, ...] = ()
    pinned_hosts: tuple[str, ...] = ()
    host_ports: frozenset[tuple[str, int]] = frozenset()  # (protocol, port) it binds on the node
    # Resource key -> the GPU DeviceClasses its claims ask under it (messages name them).
    device_classes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def signature(self) -> Signature:
        """The constraints that decide node eligibility (pods with equal ones share the answer)."""
        return (self.node_selector, self.affinity_terms, self.tolerations, self.pinned_hosts)


# ------------------------------------------------------------------ parsing raw objects


def node_view(raw: object) -> NodeView | None:
    """A ``NodeView`` from a raw Node, or ``None`` when it has no name."""
    node = as_mapping(raw)
    metadata = as_mapping(node.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    spec = as_mapping(node.get("spec"))
    status = as_mapping(node.get("status"))
    labels = {k: v for k, v in as_mapping(metadata.get("labels")).items() if isinstance(v, str)}
    taints = tuple(
        Taint(
            as_text(t.get("key")),
            as_text(t.get("value")),
            as_text(t.get("effect")),
            as_text(t.get("timeAdded")),
        )
        for t in as_list(spec.get("taints"))
        if isinstance(t, Mapping)
    )
    condition = next(
        (
            c
            for c in as_list(status.get("conditions"))
            if isinstance(c, Mapping) and c.get("type") == "Ready"
        ),
        {},
    )
    ready = as_text(condition.get("status")) or "Unknown"
    return NodeView(
        name=name,
        labels=labels,
        taints=taints,
        allocatable=parse_capacity(status.get("allocatable")),
        schedulable=ready == "True" and spec.get("unschedulable") is not True,
        ready=ready,
        ready_since=as_text(condition.get("lastTransitionTime")),
    )


def _requirements(raw: object) -> tuple[Requirement, ...]:
    requirements: list[Requirement] = []
    for item in as_list(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            requirements.append(Requirement("", "<malformed>"))
            continue
        values = tuple(v for v in as_list(item.get("values")) if isinstance(v, str))
        requirements.append(Requirement(item["key"], as_text(item.get("operator")), values))
    return tuple(requirements)


def required_affinity_terms(pod_spec: Mapping[str, Any]) -> tuple[SelectorTerm, ...] | None:
    """The required node-affinity terms of a pod spec, ``None`` when there is no requirement."""
    node_affinity = as_mapping(as_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return None
    return tuple(
        SelectorTerm(
            _requirements(as_mapping(term).get("matchExpressions")),
            _requirements(as_mapping(term).get("matchFields")),
        )
        for term in as_list(required.get("nodeSelectorTerms"))
    )


def host_ports_of(pod_spec: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    """The ``(protocol, port)`` pairs a pod binds on its node.

    With ``hostNetwork`` every ``containerPort`` is a host port, so two replicas of one job (all
    on port 23456) cannot share a node; kube-scheduler's NodePorts filter would refuse the second.
    """
    host_network = pod_spec.get("hostNetwork") is True
    ports: set[tuple[str, int]] = set()
    for key in ("initContainers", "containers"):
        for container in as_list(pod_spec.get(key)):
            for raw_port in as_list(as_mapping(container).get("ports")):
                port = as_mapping(raw_port)
                number = port.get("hostPort")
                if not number and host_network:
                    number = port.get("containerPort")
                if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                    ports.add((as_text(port.get("protocol")) or "TCP", number))
    return frozenset(ports)


def pod_demand(
    pod_name: str,
    template: object,
    *,
    hosts: Sequence[str] = (),
    gpus: GpuSources | None = None,
    claims: ClaimLookup = NO_CLAIMS,
) -> PodDemand:
    """The ``PodDemand`` of a pod built from ``template`` (``hosts``: the job's pinned hosts).

    ``gpus`` and ``claims``: what counts as GPUs and the claims the controller sees, so claimed
    GPUs are demanded like requested ones (``units.pod_units``).
    """
    pod_spec = pod_spec_of(template)
    selector = as_mapping(pod_spec.get("nodeSelector"))
    return PodDemand(
        pod_name=pod_name,
        requests=pod_units(pod_spec, gpus, claims),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        affinity_terms=required_affinity_terms(pod_spec),
        tolerations=tolerations_of(pod_spec),
        pinned_hosts=tuple(hosts),
        host_ports=host_ports_of(pod_spec),
        device_classes=tuple(pod_claimed_classes(pod_spec, gpus, claims).items())
        if gpus is not None
        else (),
    )


def job_demands(
    job: JobSpec, gpus: GpuSources | None = None, claims: ClaimLookup = NO_CLAIMS
) -> tuple[PodDemand, ...]:
    """Demands of every pod of a job, in gang order: Master, then Workers by index."""
    hosts = pinned_hosts(job.annotations)
    return tuple(
        pod_demand(
            names.replica_name(job.name, spec.replica_type, index),
            spec.template,
            hosts=hosts,
            gpus=gpus,
            claims=claims,
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


# ------------------------------------------------------------------ messages


def pool_of(demand: PodDemand) -> str:
    """Where the pod may go, for messages: ``on hosts a,b``, ``in pool k=v``, ``in the cluster``."""
    if demand.pinned_hosts:
        return "on hosts " + ",".join(demand.pinned_hosts)
    if demand.node_selector:
        return "in pool " + ",".join(f"{k}={v}" for k, v in demand.node_selector)
    return "in the cluster"


def no_eligible_node(demand: PodDemand, nodes: Sequence[NodeView]) -> str:
    """Why ``demand`` cannot be placed at all: where it may go and the filter that left nothing."""
    return (
        f"no eligible node {pool_of(demand)} for {demand.pod_name}: "
        f"{exclusion_reason(demand, nodes)}"
    )


def exclusion_reason(demand: PodDemand, nodes: Sequence[NodeView]) -> str:
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


# ------------------------------------------------------------------ rule 5


def too_large(demand: PodDemand, capacities: Iterable[Mapping[str, int]]) -> str | None:
    """What ``demand`` asks more of than every node of ``capacities`` holds empty (rule 5)."""
    largest: dict[str, int] = {}
    for capacity in capacities:
        if all(capacity.get(key, 0) >= amount for key, amount in demand.requests.items()):
            return None
        for key in demand.requests:
            largest[key] = max(largest.get(key, 0), capacity.get(key, 0))
    classes = dict(demand.device_classes)
    for key, amount in sorted(demand.requests.items()):
        if largest.get(key, 0) < amount:
            claimed = (
                f" (claimed devices of DeviceClass {', '.join(classes[key])})"
                if key in classes
                else ""
            )
            return (
                f"it asks {format_amount(key, amount)} {key}{claimed} and the largest node it "
                f"may use has {format_amount(key, largest.get(key, 0))}"
            )
    return "no node it may use holds all it asks even empty"


def no_node_large_enough(demand: PodDemand, capacities: Iterable[Mapping[str, int]]) -> str | None:
    """Why no node may ever take ``demand`` although some admit it, if so (rule 5)."""
    why = too_large(demand, capacities)
    if why is None:
        return None
    return f"no eligible node {pool_of(demand)} can ever hold {demand.pod_name}: {why}"


# ------------------------------------------------------------------ rule 6


def gang_too_large(
    empty: Capacity,
    requests: Sequence[Units],
    shape: Shape,
    request: TopologyRequest,
    *,
    where: str,
    gpu_resource: str,
    mixed: Mixed | None = None,
) -> str | None:
    """Why the gang's pods (``requests``) can never all be placed, even on empty nodes (rule 6).

    ``empty`` holds the nodes' allocatable; ``shape``, ``request`` and ``mixed`` are the gang's,
    as placement reads them. ``None`` when placement would place the gang on those nodes empty:
    their slots (``topology.slots_of``) hold it, and so does one domain of a required level, or
    it has several pod shapes and ``topology.place_mixed`` places it there. Counted here over
    the allowed nodes, not kept by ``empty`` (a gang is read once per node change; ``empty``
    keeps counts only for the shapes placement asks about), and only until some nodes or one
    domain hold the gang: only a gang too large looks at every allowed node.
    """
    why = _too_large_for_slots(
        empty, requests, shape, request, where=where, gpu_resource=gpu_resource
    )
    if why is None or mixed is None:
        return why
    topology = empty.topology
    aside = Capacity(topology, dict(zip(topology.node_names, empty.free, strict=True)))
    pods = [pod for pod, _ in (*mixed.leads, *mixed.others)]
    return None if place_mixed(aside, pods, mixed, request) is not None else why


def _too_large_for_slots(
    empty: Capacity,
    requests: Sequence[Units],
    shape: Shape,
    request: TopologyRequest,
    *,
    where: str,
    gpu_resource: str,
) -> str | None:
    """Rule 6 for placement by ``shape``'s slots alone."""
    count = len(requests)
    topology, allowed, names = empty.topology, shape.allowed, empty.topology.node_names
    level = request.level
    if not request.required or level is None or level >= len(topology.levels):
        level = None
    members = topology.member[level] if level is not None else ()
    room, nodes = 0, 0
    in_domain: dict[int, int] = {}
    allowed_free: list[Units] = []
    for node, free in enumerate(empty.free):
        if allowed is not None and names[node] not in allowed:
            continue
        allowed_free.append(free)
        slots = slots_of(free, shape)
        if not slots:
            continue
        room, nodes = room + slots, nodes + 1
        if level is None:
            if room >= count:  # most gangs fit: stop at the first nodes that hold them
                return None
        elif members[node] >= 0:
            held = in_domain[members[node]] = in_domain.get(members[node], 0) + slots
            if held >= count:
                return None
    roomiest = max(in_domain.values(), default=0)
    if room >= count and level is not None:
        return (
            f"no {topology.levels[level]} domain {where} can ever hold all {count} pods of the "
            f"gang: the roomiest has room for {roomiest} even empty"
        )
    prefix = f"no eligible nodes {where} can ever hold all {count} pods of the gang"
    wanted = summed(requests)
    have = {name: sum(max(0, free.get(name, 0)) for free in allowed_free) for name in wanted}
    for name in resource_order(wanted, gpu_resource):
        if wanted[name] > have[name]:
            return (
                f"{prefix}: it asks {format_amount(name, wanted[name])} {name} and they have "
                f"{format_amount(name, have[name])} even empty"
            )
    if shape.one_per_node:
        return (
            f"{prefix}: its pods have host ports, so each needs a node of its own, and "
            f"{nodes} node(s) it may use can take one"
        )
    return f"{prefix}: even empty they have room for {room} of them"


# ------------------------------------------------------------------ rule 7


@dataclass(frozen=True, slots=True)
class OutOfUse:
    """Nodes a gang could use but for their state (rule 7).

    Attributes:
        resource: The gang's first resource (``topology.resource_order``: its GPUs).
        amount: How much of it they hold, allocatable (milli-units).
        nodes: Their names, sorted.
        causes: ``(cause, count)``, most nodes first: ``tainted <key>``, ``NotReady``,
            ``cordoned``, ``quarantined`` (``cause_of``).
    """

    resource: str
    amount: int
    nodes: tuple[str, ...]
    causes: tuple[tuple[str, int], ...]

    def clause(self) -> str:
        """``(24 nvidia.com/gpu more on 3 nodes out of use: 2 tainted ..., 1 NotReady)``."""
        count = len(self.nodes)
        causes = ", ".join(f"{number} {cause}" for cause, number in self.causes)
        return (
            f"({format_amount(self.resource, self.amount)} {self.resource} more on {count} "
            f"node{'s' if count != 1 else ''} out of use: {causes})"
        )


def cause_of(signatures: Collection[Signature], node: NodeView) -> str | None:
    """Why pods with these constraints cannot use ``node`` when only its state keeps them off.

    ``None`` when the pods may use it, or when their nodeSelector, affinity or pinned hosts
    exclude it whatever its state (rule 7).
    """
    if not signatures or all(admits(signature, node) for signature in signatures):
        return None
    healthy = replace(node, taints=(), schedulable=True, ready="True")
    if not all(admits(signature, healthy) for signature in signatures):
        return None
    if node.ready != "True":
        return "NotReady"
    if not node.schedulable:
        return "cordoned"
    for taint in node.taints:
        if taint.effect not in BLOCKING_EFFECTS:
            continue
        if any(not any(t.tolerates(taint) for t in s[2]) for s in signatures):
            return "quarantined" if taint.key == names.TAINT_QUARANTINE else f"tainted {taint.key}"
    return None  # unreachable: a schedulable node admits matching pods without such a taint


def out_of_use(
    signatures: Collection[Signature],
    nodes: Iterable[NodeView],
    *,
    wanted: Mapping[str, int],
    gpu_resource: str,
    capacity_of: Callable[[str], Mapping[str, int]],
) -> OutOfUse | None:
    """The nodes out of use for a gang whose pods have ``signatures`` and ask ``wanted`` in all.

    ``capacity_of``: what a node holds empty (``ledger.capacity_of``). ``None`` when no such
    node holds any of the gang's first resource (rule 7).
    """
    asked = [name for name in resource_order(wanted, gpu_resource) if wanted[name] > 0]
    resource = next((name for name in asked if name != "pods"), None)
    if resource is None:
        return None
    causes = {node.name: cause for node in nodes if (cause := cause_of(signatures, node))}
    held = {name: capacity_of(name).get(resource, 0) for name in causes}
    holding = sorted(name for name, amount in held.items() if amount > 0)
    if not holding:
        return None
    counts: dict[str, int] = {}
    for name in holding:
        counts[causes[name]] = counts.get(causes[name], 0) + 1
    return OutOfUse(
        resource=resource,
        amount=sum(held[name] for name in holding),
        nodes=tuple(holding),
        causes=tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
    )

"""Gangs as the pure admission core sees them: waiting (``WaitingGang``), admitted (``Admitted``).

Amounts are milli-units (``G`` is one GPU), as the core counts them after the parse boundary.
A pod of ``pod_requests(gpus)`` takes that many GPUs and one pod slot; a node of
``node_free(gpus)`` has that many GPUs and kubelet's default 110 pod slots free. What the node
filters read of a gang's pods is its ``PodDemand``s (``gang_demands``), built from a pod template
by the product's own reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tests.builders.job import container
from torchgate.controller.admission.decide import WaitingGang
from torchgate.controller.admission.nodes import PodDemand, pod_demand
from torchgate.controller.admission.quota import Admitted
from torchgate.controller.admission.topology import shape_of
from torchgate.pytorchjob.names import DEFAULT_GPU_RESOURCE
from torchgate.pytorchjob.pool import GPUS, TopologyRequest

G: Final = 1000  # one GPU (or one pod slot) in milli-units


def pod_requests(gpus: int) -> dict[str, int]:
    """What one pod of ``gpus`` GPUs takes from its node."""
    return {DEFAULT_GPU_RESOURCE: gpus * G, "pods": G}


def node_free(gpus: int = 8) -> dict[str, int]:
    """What an empty node of ``gpus`` GPUs has free."""
    return {DEFAULT_GPU_RESOURCE: gpus * G, "pods": 110 * G}


def demand(name: str, gpus: int = 0, cpu: str = "1", **pod_spec: Any) -> PodDemand:
    """What pod ``name`` asks of a node: its requests, and ``pod_spec``'s selectors and the like."""
    resources: dict[str, Any] = {"cpu": cpu}
    if gpus:
        resources[DEFAULT_GPU_RESOURCE] = gpus
    template = {"spec": {"containers": [container(requests=resources)], **pod_spec}}
    return pod_demand(name, template)


def gang_demands(count: int, gpus: int, **pod_spec: Any) -> list[PodDemand]:
    """``count`` alike pods ``p-0``, ``p-1``... of ``gpus`` GPUs each (``demand``)."""
    return [demand(f"p-{i}", gpus, **pod_spec) for i in range(count)]


def waiting(
    name: str,
    *,
    pods: int,
    gpus: int = 8,
    team: str | None = None,
    priority: int = 0,
    created: str = "2026-01-01T00:00:00Z",
    topology: TopologyRequest | None = None,
    preempts: bool = True,
) -> WaitingGang:
    """A gang of ``pods`` pods of ``gpus`` GPUs each, in namespace ``team`` (or ``ns``)."""
    names = tuple(f"{name}-{i}" for i in range(pods))
    requests = {pod: pod_requests(gpus) for pod in names}
    return WaitingGang(
        key=(team or "ns", name),
        team=team,
        priority=priority,
        created=created,
        pods=names,
        requests=requests,
        usage={GPUS: pods * gpus * G},
        shape=shape_of(requests.values()),
        topology=topology or TopologyRequest(),
        preempts=preempts,
    )


def admitted(
    name: str,
    gpus: int,
    *,
    team: str | None = None,
    namespace: str = "ns",
    priority: int = 0,
    at: float = 0.0,
    nodes: dict[str, str] | None = None,
) -> Admitted:
    """A gang holding ``gpus`` GPUs of quota since ``at``, its pods on ``nodes`` if given."""
    return Admitted(
        key=(namespace, name),
        team=team,
        priority=priority,
        usage={GPUS: gpus * G},
        admitted_at=at,
        nodes=nodes,
    )


def running(
    gang: WaitingGang, nodes: Sequence[str], *, at: float = 0.0
) -> tuple[Admitted, dict[str, dict[str, int]]]:
    """``gang`` admitted onto ``nodes`` (one pod each, in order), and what it takes per node."""
    placement = dict(zip(gang.pods, nodes, strict=True))
    return (
        Admitted(
            key=gang.key,
            team=gang.team,
            priority=gang.priority,
            usage=gang.usage,
            admitted_at=at,
            nodes=placement,
            requests={pod: gang.requests[pod] for pod in placement},
        ),
        placement_requests(gang, placement),
    )


def placement_requests(
    gang: WaitingGang, placement: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """What ``gang``'s pods take from each node of ``placement`` (pod -> node)."""
    used: dict[str, dict[str, int]] = {}
    for pod, node in placement.items():
        for name, amount in gang.requests[pod].items():
            used.setdefault(node, {})[name] = used.setdefault(node, {}).get(name, 0) + amount
    return used

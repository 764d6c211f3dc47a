"""Nodes: the raw Node object, its parsed ``NodeView``, and nodes labelled by topology domain.

``node`` builds a Node as kwok fakes them: GPU capacity in status, Ready, a hostname label.
Topology layouts (``labelled``, ``rack_nodes``) are ``(name, labels)`` pairs, what
``topology.build_topology`` reads; ``[node(name, labels=labels) for name, labels in ...]`` turns
them into Node objects for the admitter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from torchgate.controller.admission.nodes import NodeView, node_view

HOSTNAME: Final = "kubernetes.io/hostname"
# The topology labels of ``torchgate dev``'s fake GPU nodes, coarsest first.
BLOCK: Final = "topology.torchgate.io/block"
RACK: Final = "topology.torchgate.io/rack"

# A layout: domain name -> the layout one level down; at the last level, the hosts' names.
Layout = Mapping[str, "Layout"] | Sequence[str]


def node(
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node object as kwok fakes them (GPU capacity in status)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    capacity.update(extra or {})
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {HOSTNAME: name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if taints:
        out["spec"]["taints"] = taints
    return out


def parsed_node(name: str, **fields: Any) -> NodeView:
    """The admission core's view of ``node(name, **fields)``."""
    view = node_view(node(name, **fields))
    assert view is not None
    return view


def labelled(layout: Layout, levels: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """Hosts of a nested layout, each labelled with its domain at every level and its hostname.

    ``labelled({"b1": {"r1": ["h1", "h2"]}}, (BLOCK, RACK))`` gives
    ``[("h1", {BLOCK: "b1", RACK: "r1", HOSTNAME: "h1"}), ("h2", ...)]``.
    """
    if not levels:
        assert not isinstance(layout, Mapping), "one level per nesting of the layout"
        return [(host, {HOSTNAME: host}) for host in layout]
    assert isinstance(layout, Mapping), "one level per nesting of the layout"
    return [
        (host, {levels[0]: domain, **labels})
        for domain, inner in layout.items()
        for host, labels in labelled(inner, levels[1:])
    ]


def rack_nodes(
    racks: int, hosts: int, *, first: int = 0, separator: str = "h"
) -> list[tuple[str, dict[str, str]]]:
    """``racks`` racks ``r<first>``, ``r<first+1>``... of ``hosts`` hosts each: r0h0, r0h1, ..."""
    return labelled(
        {
            f"r{rack}": [f"r{rack}{separator}{host}" for host in range(hosts)]
            for rack in range(first, first + racks)
        },
        (RACK,),
    )

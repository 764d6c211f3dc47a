"""A small, independent reading of Kubernetes node selection, for tests: does a node satisfy terms?

Written from the API reference, not from torchgate's code: ``nodeSelectorTerms`` are OR-ed, the
requirements of one term (``matchExpressions`` on labels, ``matchFields`` on ``metadata.name``)
AND-ed, and a null or empty term matches no node. No required node affinity matches every node;
an empty list of terms (which the API server refuses) is read the same way, as torchgate does.
Also the hypothesis strategies that generate terms, requirements and nodes for property tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

LABEL_KEYS = ("zone", "pool", "kubernetes.io/hostname")
VALUES = ("a", "b", "c")
NODE_NAMES = ("n1", "n2", "n3")


@dataclass(frozen=True)
class Node:
    """A node: its name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def requirement_holds(requirement: Mapping[str, Any], node: Node, section: str) -> bool:
    """One ``NodeSelectorRequirement`` of ``section`` on ``node``."""
    key = requirement["key"]
    if section == "matchFields":
        value = node.name if key == "metadata.name" else None
    else:
        value = node.labels.get(key)
    values = requirement.get("values") or []
    operator = requirement["operator"]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    raise ValueError(operator)


def term_matches(term: Mapping[str, Any], node: Node) -> bool:
    """An empty term matches nothing; else every requirement of both sections must hold."""
    sections = [(s, term.get(s) or []) for s in ("matchExpressions", "matchFields")]
    if not any(requirements for _, requirements in sections):
        return False
    return all(
        requirement_holds(requirement, node, section)
        for section, requirements in sections
        for requirement in requirements
    )


def terms_match(terms: object, node: Node) -> bool:
    """Whether ``nodeSelectorTerms`` admit ``node`` (no terms: every node)."""
    if not isinstance(terms, list) or not terms:
        return True
    return any(term_matches(term, node) for term in terms)


def affinity_matches(affinity: object, node: Node) -> bool:
    """Whether a pod's ``affinity`` lets it run on ``node`` (required node affinity only)."""
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    if not isinstance(required, Mapping):
        return True
    return terms_match(required.get("nodeSelectorTerms"), node)


# ------------------------------------------------------------------ strategies

values = st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True)


@st.composite
def label_requirements(draw: st.DrawFn, keys: tuple[str, ...] = LABEL_KEYS) -> dict[str, Any]:
    """A ``matchExpressions`` entry over a few keys and values."""
    key = draw(st.sampled_from(keys))
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    if operator in ("In", "NotIn"):
        return {"key": key, "operator": operator, "values": draw(values)}
    return {"key": key, "operator": operator}


@st.composite
def field_requirements(draw: st.DrawFn) -> dict[str, Any]:
    """A ``matchFields`` entry (``metadata.name In/NotIn [...]``)."""
    names = draw(st.lists(st.sampled_from(NODE_NAMES), min_size=1, max_size=2, unique=True))
    return {
        "key": "metadata.name",
        "operator": draw(st.sampled_from(["In", "NotIn"])),
        "values": names,
    }


@st.composite
def terms(draw: st.DrawFn, keys: tuple[str, ...] = LABEL_KEYS) -> dict[str, Any]:
    """A well-formed term; empty ones (``{}``, ``[]`` or ``null`` sections) included."""
    term: dict[str, Any] = {}
    for section, strategy in (
        ("matchExpressions", label_requirements(keys)),
        ("matchFields", field_requirements()),
    ):
        shape = draw(st.sampled_from(["absent", "null", "list"]))
        if shape == "null":
            term[section] = None
        elif shape == "list":
            term[section] = draw(st.lists(strategy, max_size=2))
    return term


def term_lists(keys: tuple[str, ...] = LABEL_KEYS) -> st.SearchStrategy[list[Any] | None]:
    """``nodeSelectorTerms``: none, or up to three terms over label ``keys``."""
    return st.one_of(st.none(), st.lists(terms(keys), max_size=3))


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    """A node with some of the label keys set."""
    labels = draw(st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(VALUES)))
    return Node(draw(st.sampled_from(NODE_NAMES)), labels)

"""Node-requirement merging (``pytorchjob.affinity``): tables and the node-matching property."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.nodeselector import (
    Node,
    affinity_matches,
    field_requirements,
    label_requirements,
    nodes,
    requirement_holds,
    term_lists,
    terms_match,
)
from torchgate.pytorchjob.affinity import (
    MATCH_EXPRESSIONS,
    MATCH_FIELDS,
    REQUIRED_AFFINITY,
    and_into_terms,
    require,
)

R = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1"]}
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
NAME = {"key": "metadata.name", "operator": "In", "values": ["n1"]}


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        (None, [{"matchExpressions": [R]}]),
        ([], [{"matchExpressions": [R]}]),
        ("junk", [{"matchExpressions": [R]}]),
        ([{"matchExpressions": [ZONE]}], [{"matchExpressions": [ZONE, R]}]),
        ([{"matchFields": [NAME]}], [{"matchFields": [NAME], "matchExpressions": [R]}]),
        (
            [{"matchExpressions": None, "matchFields": [NAME]}],
            [{"matchExpressions": [R], "matchFields": [NAME]}],
        ),
        ([{"matchExpressions": [ZONE, R]}], [{"matchExpressions": [ZONE, R]}]),
        ([{}], [{}]),
        ([{"matchExpressions": []}], [{"matchExpressions": []}]),
        (
            [{"matchExpressions": None, "matchFields": []}],
            [{"matchExpressions": None, "matchFields": []}],
        ),
        (
            [{}, {"matchExpressions": [ZONE]}],
            [{}, {"matchExpressions": [ZONE, R]}],
        ),
        (["junk", {"matchExpressions": "x"}], ["junk", {"matchExpressions": "x"}]),
        (
            [{"matchExpressions": [ZONE], "matchFields": {"bad": 1}}],
            [{"matchExpressions": [ZONE], "matchFields": {"bad": 1}}],
        ),
    ],
    ids=[
        "no-terms",
        "empty-list",
        "malformed-list",
        "anded-into-a-term",
        "added-beside-fields",
        "null-section",
        "already-there",
        "empty-term-matches-nothing",
        "empty-expressions-match-nothing",
        "null-and-empty-match-nothing",
        "only-the-non-empty-term",
        "malformed-terms-stay",
        "malformed-section-stays",
    ],
)
def test_and_into_terms(terms: object, expected: list[Any]) -> None:
    before = copy.deepcopy(terms)
    assert and_into_terms(terms, R, MATCH_EXPRESSIONS) == expected
    assert terms == before, "never mutates its input"


def test_require_keeps_everything_but_the_required_terms() -> None:
    affinity = {
        "nodeAffinity": {
            REQUIRED_AFFINITY: {"nodeSelectorTerms": [{"matchExpressions": [ZONE]}, {}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"x": 1},
    }
    before = copy.deepcopy(affinity)
    pinned = require(affinity, NAME, MATCH_FIELDS)
    assert affinity == before
    assert pinned == {
        "nodeAffinity": {
            REQUIRED_AFFINITY: {
                "nodeSelectorTerms": [{"matchExpressions": [ZONE], "matchFields": [NAME]}, {}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"x": 1},
    }


@pytest.mark.parametrize(
    "affinity",
    [None, {}, "junk", {"nodeAffinity": "junk"}, {"nodeAffinity": {REQUIRED_AFFINITY: 3}}],
    ids=["none", "empty", "junk", "junk-node-affinity", "junk-required"],
)
def test_require_creates_the_term_when_there_is_none(affinity: object) -> None:
    assert require(affinity, NAME, MATCH_FIELDS)["nodeAffinity"][REQUIRED_AFFINITY] == {
        "nodeSelectorTerms": [{"matchFields": [NAME]}]
    }


requirements = st.one_of(
    st.tuples(label_requirements(), st.just(MATCH_EXPRESSIONS)),
    st.tuples(field_requirements(), st.just(MATCH_FIELDS)),
)


@settings(max_examples=500, deadline=None)
@given(term_lists(), requirements, st.lists(nodes(), min_size=1, max_size=4))
def test_merged_terms_match_a_node_iff_the_terms_and_the_requirement_do(
    terms: list[Any] | None, requirement: tuple[dict[str, Any], str], sample: list[Node]
) -> None:
    wanted, section = requirement
    merged = and_into_terms(terms, wanted, section)  # type: ignore[arg-type]
    for node in sample:
        expected = terms_match(terms, node) and requirement_holds(wanted, node, section)
        assert terms_match(merged, node) == expected, (terms, wanted, node)
    assert and_into_terms(merged, wanted, section) == merged  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(term_lists(), field_requirements(), nodes())
def test_required_affinity_matches_a_node_iff_the_old_one_and_the_requirement_do(
    terms: list[Any] | None, wanted: dict[str, Any], node: Node
) -> None:
    affinity = (
        None
        if terms is None
        else {"nodeAffinity": {REQUIRED_AFFINITY: {"nodeSelectorTerms": terms}}}
    )
    expected = affinity_matches(affinity, node) and requirement_holds(wanted, node, MATCH_FIELDS)
    assert affinity_matches(require(affinity, wanted, MATCH_FIELDS), node) == expected

"""Ties between PlacementPolicies (``policyties``): each rule by table, then by property.

The property tests draw policies over a few namespace names and check every reported tie and
shadow, namespace by namespace, against what ``select_policy`` does there, including a namespace
no policy lists (what "every namespace but ..." is about).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders.policy import parsed_policy
from torchgate.pytorchjob.policy import PlacementPolicy, select_policy
from torchgate.pytorchjob.policyties import (
    Namespaces,
    Why,
    overlap,
    scope_of,
    shadows,
    tie_warning,
    ties,
    ties_of,
)

EVERY = Namespaces.all()


def p(name: str, *namespaces: str, priority: int = 0) -> PlacementPolicy:
    spec: dict[str, Any] = {"priority": priority}
    if namespaces:
        spec["namespaces"] = list(namespaces)
    return parsed_policy(name, **spec)


def listed(*names: str) -> Namespaces:
    return Namespaces(frozenset(names))


def every_but(*names: str) -> Namespaces:
    return Namespaces(frozenset(names), every=True)


def test_a_policy_listing_no_namespace_selects_every_one() -> None:
    assert scope_of(p("a")) == EVERY
    assert scope_of(p("a", "ml", "cv", "ml")) == listed("ml", "cv")


@pytest.mark.parametrize(
    ("one", "other", "expected"),
    [
        (p("a"), p("b"), (EVERY, Why.IDENTICAL)),
        (p("a", "ml", "cv"), p("b", "cv", "ml"), (listed("ml", "cv"), Why.IDENTICAL)),
        (p("a"), p("b", "ml"), (listed("ml"), Why.SELECTS_ALL)),
        (p("a", "ml"), p("b"), (listed("ml"), Why.SELECTS_ALL)),
        (p("a", "ml", "cv"), p("b", "cv", "nlp"), (listed("cv"), Why.LISTS_INTERSECT)),
        (p("a", "ml"), p("b", "cv"), None),
    ],
    ids=[
        "both-every",
        "same-list",
        "every-and-list",
        "list-and-every",
        "lists-intersect",
        "disjoint-lists",
    ],
)
def test_what_two_policies_share_and_why(
    one: PlacementPolicy, other: PlacementPolicy, expected: tuple[Namespaces, Why] | None
) -> None:
    found = overlap(one, other)
    assert (None if found is None else (found.namespaces, found.why)) == expected


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        ([p("a", "ml"), p("b", "ml")], [("a", "b", listed("ml"))]),
        ([p("a", "ml"), p("b", "ml", priority=1)], []),
        ([p("a", "ml"), p("b", "cv")], []),
        # A policy above both on the shared namespace: the tie decides nothing there.
        ([p("a", "ml"), p("b", "ml"), p("top", "ml", priority=9)], []),
        ([p("a"), p("b"), p("top", "ml", priority=9)], [("a", "b", every_but("ml"))]),
        ([p("a"), p("b"), p("top", priority=9)], []),
        ([p("a", "ml", "cv"), p("b"), p("top", "ml", priority=9)], [("a", "b", listed("cv"))]),
        # Three at once: each pair, once.
        (
            [p("c", "ml"), p("a", "ml"), p("b", "ml")],
            [("a", "b", listed("ml")), ("a", "c", listed("ml")), ("b", "c", listed("ml"))],
        ),
        # A tie below another one decides nothing; the one above does.
        (
            [p("a", "ml"), p("b", "ml"), p("x", "ml", priority=5), p("y", priority=5)],
            [("x", "y", listed("ml"))],
        ),
    ],
    ids=[
        "same-list",
        "other-priority",
        "disjoint",
        "masked-by-higher",
        "partly-masked-every",
        "fully-masked-every",
        "partly-masked-list",
        "three-way",
        "below-another-tie",
    ],
)
def test_which_pairs_tie_and_where(
    policies: list[PlacementPolicy], expected: list[tuple[str, str, Namespaces]]
) -> None:
    assert [(t.first.name, t.second.name, t.namespaces) for t in ties(policies)] == expected


def test_the_shadowed_policy_names_the_one_that_applies_instead() -> None:
    found = shadows([p("c", "ml", "cv"), p("b", "ml"), p("a", "ml"), p("z", "nlp")])

    assert {
        name: [(s.namespaces, s.by.name) for s in shadowed] for name, shadowed in found.items()
    } == {"b": [(listed("ml"), "a")], "c": [(listed("ml"), "a")]}


def test_a_policy_for_every_namespace_is_shadowed_where_a_first_named_one_lists_them() -> None:
    found = shadows([p("all"), p("a-team", "ml")])

    assert [(s.namespaces, s.by.name) for s in found["all"]] == [(listed("ml"), "a-team")]
    assert "a-team" not in found


def test_a_written_policy_replaces_its_stored_self() -> None:
    stored = [p("a", "ml"), p("b", "ml")]

    assert ties_of(p("b", "cv"), stored) == []
    assert [(t.first.name, t.second.name) for t in ties_of(p("c", "ml"), stored)] == [
        ("a", "c"),
        ("b", "c"),
    ]


def test_the_warning_names_the_other_policy_the_namespaces_and_why() -> None:
    (tie,) = ties_of(p("b", "ml", "cv", priority=3), [p("a", priority=3)])

    text = tie_warning(tie, "b")

    assert 'PlacementPolicy "a" at priority 3' in text
    assert "namespaces cv, ml" in text
    assert '("a" selects every namespace)' in text


@pytest.mark.parametrize(
    ("namespaces", "text"),
    [
        (listed("ml"), "namespace ml"),
        (listed("b", "a"), "namespaces a, b"),
        (EVERY, "every namespace"),
        (every_but("x"), "every namespace but x"),
        (listed(*"abcdefg"), "namespaces a, b, c, d, e and 2 more"),
    ],
)
def test_namespaces_in_words(namespaces: Namespaces, text: str) -> None:
    assert namespaces.describe() == text


# ------------------------------------------------------------------------ against select_policy

NAMES = ("ml", "cv", "nlp")
ELSEWHERE = "unlisted"  # a namespace no drawn policy lists
POLICIES = st.lists(
    st.builds(
        lambda name, namespaces, priority: p(name, *namespaces, priority=priority),
        st.sampled_from("abcdef"),
        st.lists(st.sampled_from(NAMES), max_size=3),
        st.integers(0, 2),
    ),
    max_size=6,
    unique_by=lambda policy: policy.name,
)
SETS = st.builds(
    Namespaces,
    st.frozensets(st.sampled_from((*NAMES, ELSEWHERE)), max_size=3),
    st.booleans(),
)


def _top(policies: list[PlacementPolicy], namespace: str) -> list[PlacementPolicy]:
    matching = [policy for policy in policies if policy.matches(namespace)]
    if not matching:
        return []
    best = max(policy.priority for policy in matching)
    return [policy for policy in matching if policy.priority == best]


@given(POLICIES)
def test_two_policies_tie_exactly_where_both_are_at_the_top(
    policies: list[PlacementPolicy],
) -> None:
    found = {(t.first.name, t.second.name): t.namespaces for t in ties(policies)}
    for namespace in (*NAMES, ELSEWHERE):
        top = {policy.name for policy in _top(policies, namespace)}
        for first in policies:
            for second in policies:
                if first.name < second.name:
                    where = found.get((first.name, second.name), Namespaces())
                    assert (namespace in where) == ({first.name, second.name} <= top)


@given(POLICIES)
def test_a_policy_is_shadowed_exactly_where_it_is_at_the_top_and_another_applies(
    policies: list[PlacementPolicy],
) -> None:
    found = shadows(policies)
    for namespace in (*NAMES, ELSEWHERE):
        applied = select_policy(policies, namespace)
        top = _top(policies, namespace)
        for policy in policies:
            by = [s.by.name for s in found.get(policy.name, []) if namespace in s.namespaces]
            shadowed = policy in top and policy.name != applied.name
            assert by == ([applied.name] if shadowed else [])


@given(SETS, SETS, st.sampled_from((*NAMES, ELSEWHERE, "other")))
def test_set_operations_agree_with_membership(
    one: Namespaces, other: Namespaces, namespace: str
) -> None:
    inside, outside = namespace in one, namespace in other
    assert (namespace in (one & other)) == (inside and outside)
    assert (namespace in (one | other)) == (inside or outside)
    assert (namespace in (one - other)) == (inside and not outside)
    assert bool(one & other) == any(
        n in one and n in other for n in (*NAMES, ELSEWHERE, "other", "never-drawn")
    )


@given(POLICIES, st.integers(0, 5))
def test_a_written_policy_has_the_ties_it_has_among_all_once_stored(
    policies: list[PlacementPolicy], pick: int
) -> None:
    if not policies:
        return
    candidate = policies[pick % len(policies)]
    stored = [policy for policy in policies if policy is not candidate]
    among_all = [t for t in ties(policies) if candidate.name in (t.first.name, t.second.name)]
    assert ties_of(candidate, stored) == among_all

"""Ties between PlacementPolicies: where the name, not the admin, picks the policy of a namespace.

``policy.select_policy`` applies the matching policy with the highest ``priority`` and breaks a
tie by name, so the choice never depends on list order. That tie-break is silent: two policies
matching a namespace at the same priority are almost always an admin's mistake, and renaming one
changes which rules a team's jobs get. The webhook warns at ``kubectl apply`` of a policy that
ties (``review``), writes a ``Shadowed`` condition on the losing one (``webhook.policysource``),
and ``torchgate check`` reports the ties among its ``--policy`` files, all from this module.

A policy selects namespaces by name only (``spec.namespaces``; none listed: every namespace), so
what two policies share is decided exactly, with no guess about namespaces that exist: a set of
names, or every namespace but some (``Namespaces``).

Rules (each one function):

1. ``scope_of``: the namespaces a policy matches: its list, or every namespace when it lists none
   (``PlacementPolicy.matches``).
2. ``overlap``: what two policies share and why: ``IDENTICAL`` (both select every namespace, or
   both list the same names), ``SELECTS_ALL`` (one selects every namespace, the other lists some:
   they share the list), ``LISTS_INTERSECT`` (both list names, some in common: those); nothing
   when they share no namespace.
3. ``ties``: two policies tie where they share namespaces at the same priority and no policy of a
   higher priority matches (there neither applies, and the tie decides nothing). Each pair is
   reported once, the policy first by name (the one the tie-break prefers) as ``first``.
4. ``shadows``: a policy is shadowed on the namespaces where it ties and another applies (the
   one ``select_policy`` picks there: of the tied, the first by name), grouped by that one.
5. ``ties_of``: the ties of one policy written (``candidate``) with the stored ones: the
   candidate replaces the stored policy of its name, as the apiserver will store it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from torchgate.pytorchjob.policy import PlacementPolicy

NAMED_AT_MOST: Final = 5
"""How many namespaces a description names before it counts the rest (a warning stays short)."""


@dataclass(frozen=True, slots=True)
class Namespaces:
    """A set of namespaces: ``names`` or, when ``every``, every namespace but ``names``."""

    names: frozenset[str] = frozenset()
    every: bool = False

    @classmethod
    def all(cls) -> Namespaces:
        """Every namespace."""
        return cls(frozenset(), every=True)

    def __contains__(self, namespace: object) -> bool:
        return (namespace in self.names) != self.every

    def __bool__(self) -> bool:
        return self.every or bool(self.names)

    def __and__(self, other: Namespaces) -> Namespaces:
        if self.every and other.every:
            return Namespaces(self.names | other.names, every=True)
        if self.every:
            return Namespaces(other.names - self.names)
        if other.every:
            return Namespaces(self.names - other.names)
        return Namespaces(self.names & other.names)

    def __or__(self, other: Namespaces) -> Namespaces:
        if self.every and other.every:
            return Namespaces(self.names & other.names, every=True)
        if self.every:
            return Namespaces(self.names - other.names, every=True)
        if other.every:
            return Namespaces(other.names - self.names, every=True)
        return Namespaces(self.names | other.names)

    def __sub__(self, other: Namespaces) -> Namespaces:
        return self & Namespaces(other.names, every=not other.every)

    def describe(self) -> str:
        """``namespaces a, b``, ``every namespace`` or ``every namespace but a``."""
        listed = _first_few(self.names)
        if not self.every:
            return f"namespace {listed}" if len(self.names) == 1 else f"namespaces {listed}"
        return f"every namespace but {listed}" if self.names else "every namespace"


def _first_few(names: Iterable[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(ordered[:NAMED_AT_MOST])
    more = len(ordered) - NAMED_AT_MOST
    return f"{shown} and {more} more" if more > 0 else shown


class Why(Enum):
    """Why two policies share namespaces (rule 2)."""

    IDENTICAL = "identical"
    SELECTS_ALL = "selects-all"
    LISTS_INTERSECT = "lists-intersect"


@dataclass(frozen=True, slots=True)
class Overlap:
    """The namespaces two policies share, and why (rule 2)."""

    namespaces: Namespaces
    why: Why


@dataclass(frozen=True, slots=True)
class Tie:
    """Two policies of one ``priority`` that both apply to ``namespaces`` but for the name.

    ``first`` is the one first by name, which ``select_policy`` applies there unless a third
    tied policy comes before both; ``second`` never applies there.
    """

    first: PlacementPolicy
    second: PlacementPolicy
    namespaces: Namespaces
    why: Why

    def other_than(self, name: str) -> PlacementPolicy:
        """The policy of the pair that is not ``name``."""
        return self.second if self.first.name == name else self.first

    def reason(self) -> str:
        """Why the two share these namespaces, in words (what the admin wrote)."""
        first, second = self.first, self.second
        if self.why is Why.IDENTICAL:
            if not first.namespaces:
                return "both select every namespace"
            return "both list the same namespaces"
        if self.why is Why.SELECTS_ALL:
            every = first if not first.namespaces else second
            return f'"{every.name}" selects every namespace'
        return "both list them"


@dataclass(frozen=True, slots=True)
class Shadow:
    """A policy that matches ``namespaces`` at the top priority, where ``by`` applies instead."""

    namespaces: Namespaces
    by: PlacementPolicy

    def message(self) -> str:
        """The ``Shadowed`` condition's words for it."""
        return (
            f'shadowed on {self.namespaces.describe()} by PlacementPolicy "{self.by.name}" of '
            f"the same priority {self.by.priority}, which applies there because its name comes "
            "first; set different priorities"
        )


def scope_of(policy: PlacementPolicy) -> Namespaces:
    """The namespaces ``policy`` matches (rule 1)."""
    return Namespaces(frozenset(policy.namespaces), every=not policy.namespaces)


def overlap(one: PlacementPolicy, other: PlacementPolicy) -> Overlap | None:
    """What ``one`` and ``other`` share and why, ``None`` when nothing (rule 2)."""
    mine, theirs = scope_of(one), scope_of(other)
    shared = mine & theirs
    if not shared:
        return None
    if mine == theirs:
        return Overlap(shared, Why.IDENTICAL)
    if mine.every or theirs.every:
        return Overlap(shared, Why.SELECTS_ALL)
    return Overlap(shared, Why.LISTS_INTERSECT)


def _above(policies: Sequence[PlacementPolicy], priority: int) -> Namespaces:
    """The namespaces some policy of a higher ``priority`` than this matches."""
    taken = Namespaces()
    for policy in policies:
        if policy.priority > priority:
            taken = taken | scope_of(policy)
    return taken


def ties(policies: Iterable[PlacementPolicy]) -> list[Tie]:
    """Every pair of ``policies`` that ties somewhere, in name order (rule 3)."""
    ordered = sorted(policies, key=lambda p: p.name)
    above = {policy.priority: _above(ordered, policy.priority) for policy in ordered}
    found = []
    for index, first in enumerate(ordered):
        for second in ordered[index + 1 :]:
            tie = _tie(first, second, above)
            if tie is not None:
                found.append(tie)
    return found


def _tie(
    first: PlacementPolicy, second: PlacementPolicy, above: Mapping[int, Namespaces]
) -> Tie | None:
    if first.priority != second.priority:
        return None
    shared = overlap(first, second)
    if shared is None:
        return None
    deciding = shared.namespaces - above[first.priority]
    return Tie(first, second, deciding, shared.why) if deciding else None


def shadows(policies: Iterable[PlacementPolicy]) -> dict[str, list[Shadow]]:
    """By policy name, where each shadowed one is shadowed and by which policy (rule 4).

    A policy shadowed nowhere has no entry.
    """
    ordered = sorted(policies, key=lambda p: p.name)
    above = {policy.priority: _above(ordered, policy.priority) for policy in ordered}
    found: dict[str, list[Shadow]] = {}
    for index, applied in enumerate(ordered):
        # Where ``applied`` wins: it matches, nothing above it does, no tied one comes first.
        before = Namespaces()
        for earlier in ordered[:index]:
            if earlier.priority == applied.priority:
                before = before | scope_of(earlier)
        wins = scope_of(applied) - above[applied.priority] - before
        if not wins:
            continue
        for loser in ordered[index + 1 :]:
            if loser.priority != applied.priority:
                continue
            lost = wins & scope_of(loser)
            if lost:
                found.setdefault(loser.name, []).append(Shadow(lost, applied))
    return found


def ties_of(candidate: PlacementPolicy, stored: Iterable[PlacementPolicy]) -> list[Tie]:
    """The ties ``candidate`` would have once stored beside ``stored`` (rule 5)."""
    every = [*(policy for policy in stored if policy.name != candidate.name), candidate]
    above = {candidate.priority: _above(every, candidate.priority)}
    found = []
    for other in sorted(every[:-1], key=lambda p: p.name):
        pair = (other, candidate) if other.name < candidate.name else (candidate, other)
        tie = _tie(*pair, above)
        if tie is not None:
            found.append(tie)
    return found


def tie_warning(tie: Tie, name: str) -> str:
    """What the admin writing policy ``name`` is told about one of its ties."""
    other = tie.other_than(name)
    return (
        f'ties with PlacementPolicy "{other.name}" at priority {other.priority} on '
        f"{tie.namespaces.describe()} ({tie.reason()}): only the names decide which applies; "
        "set different priorities"
    )

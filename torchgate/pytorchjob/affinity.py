"""One node requirement AND-ed into a pod's required node affinity, declared once.

The webhook pins a job's pods to the hosts of the ``torchgate.io/hosts`` annotation (a
``kubernetes.io/hostname In [...]`` label requirement), and the controller pins each admitted pod
to the node the admitter planned (a ``metadata.name In [node]`` field requirement). Both add one
requirement to whatever required node affinity the template already has, and both must do it the
way kube-scheduler reads node affinity, so both call ``require`` / ``and_into_terms``.

Rules (Kubernetes ``NodeSelector`` semantics):

- ``nodeSelectorTerms`` are OR-ed and the requirements of one term AND-ed, so a requirement that
  must always hold is appended to *every* term (``and_into_term``).
- A null or empty term (no ``matchExpressions`` and no ``matchFields``) matches no node. It stays
  as it is: adding the requirement would turn "no node" into "the nodes the requirement names".
- A term that already holds the requirement stays as it is (merging twice changes nothing).
- A malformed term (not an object, or a ``matchExpressions``/``matchFields`` that is not a list)
  stays as it is: the API server refuses it, and we never rewrite what we do not understand.
- No required node affinity, or an empty list of terms (which the API server refuses), means
  "any node": the result is one term holding only the requirement.
- Inputs are never mutated; results share the parts they do not change with the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

REQUIRED_AFFINITY: Final = "requiredDuringSchedulingIgnoredDuringExecution"
MATCH_EXPRESSIONS: Final = "matchExpressions"  # requirements on node labels
MATCH_FIELDS: Final = "matchFields"  # requirements on node fields (only metadata.name exists)

Section = Literal["matchExpressions", "matchFields"]
_SECTIONS: Final = (MATCH_EXPRESSIONS, MATCH_FIELDS)


def is_empty_term(term: Mapping[str, Any]) -> bool:
    """Whether a term has no requirement at all (and so matches no node)."""
    return not any(term.get(section) for section in _SECTIONS)


def _is_malformed(term: Mapping[str, Any]) -> bool:
    return any(
        term.get(section) is not None and not isinstance(term.get(section), list)
        for section in _SECTIONS
    )


def and_into_term(term: object, requirement: Mapping[str, Any], section: Section) -> object:
    """``term`` AND ``requirement`` (appended to ``term[section]``); see the module rules.

    Returns the same object when the term stays as it is (empty, malformed, already holding
    the requirement), else a new term.
    """
    if not isinstance(term, Mapping) or _is_malformed(term) or is_empty_term(term):
        return term
    current = term.get(section) or []
    if requirement in current:
        return term
    return {**term, section: [*current, dict(requirement)]}


def and_into_terms(terms: object, requirement: Mapping[str, Any], section: Section) -> list[Any]:
    """The ``nodeSelectorTerms`` that match a node iff ``terms`` and ``requirement`` both do.

    ``terms`` that is not a non-empty list means no required node affinity: one new term.
    """
    if not isinstance(terms, list) or not terms:
        return [{section: [dict(requirement)]}]
    return [and_into_term(term, requirement, section) for term in terms]


def required_terms(affinity: object) -> object:
    """``affinity.nodeAffinity.requiredDuring...nodeSelectorTerms`` as given (None if absent)."""
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_affinity.get(REQUIRED_AFFINITY) if isinstance(node_affinity, Mapping) else None
    return required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None


def require(affinity: object, requirement: Mapping[str, Any], section: Section) -> dict[str, Any]:
    """A copy of a pod's ``affinity`` whose required node affinity also demands ``requirement``.

    Everything else (pod affinity, preferred node affinity, unknown fields) is kept; a level that
    is not an object is replaced, because the result must demand the requirement.
    """
    copied = dict(affinity) if isinstance(affinity, Mapping) else {}
    node_affinity = copied.get("nodeAffinity")
    node_affinity = dict(node_affinity) if isinstance(node_affinity, Mapping) else {}
    required = node_affinity.get(REQUIRED_AFFINITY)
    required = dict(required) if isinstance(required, Mapping) else {}
    required["nodeSelectorTerms"] = and_into_terms(
        required.get("nodeSelectorTerms"), requirement, section
    )
    node_affinity[REQUIRED_AFFINITY] = required
    copied["nodeAffinity"] = node_affinity
    return copied

"""The value rules the PlacementPolicy and TeamQuota CRDs state are exactly their parsers'.

The CRDs say what they can say simply (an ``enum``, a ``minimum``) so the apiserver refuses such
a value even while the webhook is down (its entry for these kinds is failurePolicy Ignore). The
parsers stay the one source of truth: a CRD must never refuse what its parser accepts, nor accept
less strictly where it says a rule. Each enum is compared with the parser's own constant, every
member must parse and a stranger must not; each minimum must parse and one below it must not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchgate.pytorchjob import names, policy, pool, taints
from torchgate.pytorchjob.fieldpath import ErrorType, FieldError

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crds"
POLICY_CRD = CRDS / "torchgate.io_placementpolicies.yaml"
QUOTA_CRD = CRDS / "torchgate.io_teamquotas.yaml"

Parser = Callable[[object], tuple[object, list[FieldError]]]
PARSERS: dict[Path, tuple[str, Parser]] = {
    POLICY_CRD: (names.POLICY_KIND, policy.parse_policy),
    QUOTA_CRD: (pool.QUOTA_KIND, pool.parse_team_quota),
}

# The parser's accepted values for each enum of the CRD (by spec path, ``[]`` for list items).
PARSER_ENUMS: dict[str, Sequence[str]] = {
    "tolerations[].operator": taints.TOLERATION_OPERATORS,
    "tolerations[].effect": ("", *taints.TAINT_EFFECTS),
    "topology.defaultMode": pool.TOPOLOGY_MODES,
    "jobDefaults.cleanPodPolicy": names.CLEAN_POD_POLICIES,
    "jobDefaults.managedBy": names.MANAGED_BY_VALUES,
}


def spec_nodes(crd: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(spec path, schema node)`` of every node under the CRD's spec (``[]``: list items)."""
    (version,) = yaml.safe_load(crd.read_text(encoding="utf-8"))["spec"]["versions"]
    pending = [("", version["schema"]["openAPIV3Schema"]["properties"]["spec"])]
    while pending:
        path, node = pending.pop()
        yield path, node
        for name, child in node.get("properties", {}).items():
            pending.append((f"{path}.{name}".lstrip("."), child))
        if "items" in node:
            pending.append((f"{path}[]", node["items"]))


def errors_at(crd: Path, path: str, value: object) -> list[FieldError]:
    """The parser's errors at ``spec.<path>`` for an object holding ``value`` there."""
    kind, parse = PARSERS[crd]
    spec: dict[str, Any] = {}
    node = spec
    steps = path.split(".")
    for step in steps[:-1]:
        child: dict[str, Any] = {}
        node[step.removesuffix("[]")] = [child] if step.endswith("[]") else child
        node = child
    node[steps[-1]] = value
    raw = {"apiVersion": "torchgate.io/v1alpha1", "kind": kind, "metadata": {"name": "probe"}}
    _, errors = parse({**raw, "spec": spec})
    field = "spec." + path.replace("[]", "[0]")
    return [error for error in errors if error.field == field]


def not_supported_at(crd: Path, path: str, value: object) -> list[FieldError]:
    """``errors_at``'s NotSupported errors (a toleration ``Equal`` alone also lacks its key)."""
    return [e for e in errors_at(crd, path, value) if e.type is ErrorType.NOT_SUPPORTED]


ENUMS = [
    (crd, path, node["enum"]) for crd in PARSERS for path, node in spec_nodes(crd) if "enum" in node
]
INTEGERS = [
    (crd, path, node.get("minimum"))
    for crd in PARSERS
    for path, node in spec_nodes(crd)
    if node.get("type") == "integer"
]


def test_every_enum_of_the_crds_is_a_parser_constant_and_every_one_is_stated() -> None:
    stated = {path: frozenset(values) for _, path, values in ENUMS}
    assert stated == {path: frozenset(values) for path, values in PARSER_ENUMS.items()}


@pytest.mark.parametrize(("crd", "path", "values"), ENUMS, ids=[e[1] for e in ENUMS])
def test_the_parser_accepts_every_member_of_an_enum_and_refuses_a_stranger(
    crd: Path, path: str, values: list[str]
) -> None:
    refused = {value: not_supported_at(crd, path, value) for value in values}
    assert refused == {v: [] for v in values}
    assert not_supported_at(crd, path, "Sometimes") != []


@pytest.mark.parametrize(("crd", "path", "minimum"), INTEGERS, ids=[i[1] for i in INTEGERS])
def test_an_integers_minimum_is_the_least_value_its_parser_accepts(
    crd: Path, path: str, minimum: int | None
) -> None:
    least = next((n for n in (-1, 0, 1) if errors_at(crd, path, n) == []), None)
    assert least is not None, "the parser accepts none of -1, 0, 1"
    assert minimum == (None if least == -1 else least)
    if minimum is not None:
        assert errors_at(crd, path, 10**6) == []

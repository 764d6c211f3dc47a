"""A template's ``tolerations`` the apiserver refuses in a pod, and a policy's (``taints`` 3-4)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.job import cpu_job, gpu_job, job, with_uid
from tests.builders.policy import parsed_policy, policy
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    INVALID,
    MPOD,
    NOT_SUPPORTED,
    WPOD,
    Pairs,
    check,
    pairs,
)
from torchgate.pytorchjob.fieldpath import ErrorType, FieldPath
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy, parse_policy
from torchgate.pytorchjob.taints import entry_errors
from torchgate.webhook.defaulting import default_job
from torchgate.webhook.validation import validate_create, validate_update

PRIVILEGED = parsed_policy("priv", allowPrivileged=True)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_POLICY = parsed_policy("gpu", tolerations=[GPU_TOLERATION])
TOL = f"{MPOD}.tolerations"


def tolerating(*tolerations: Any) -> dict[str, Any]:
    """A job whose Master tolerates ``tolerations`` (the Worker nothing)."""
    return job().master(pod_spec={"tolerations": list(tolerations)}).workers(1).build()


def with_tolerations(value: Any) -> dict[str, Any]:
    """A job whose Master's ``tolerations`` field is ``value``."""
    return job().master(pod_spec={"tolerations": value}).workers(1).build()


REFUSED: list[tuple[str, dict[str, Any], Pairs]] = [
    ("not-a-list", with_tolerations({"key": "k"}), [(INVALID, TOL)]),
    ("a-string", with_tolerations("nvidia.com/gpu"), [(INVALID, TOL)]),
    ("an-entry-not-an-object", tolerating(GPU_TOLERATION, "k"), [(INVALID, f"{TOL}[1]")]),
    ("a-null-entry-has-no-key-nor-Exists", tolerating(None), [(INVALID, f"{TOL}[0].operator")]),
    (
        "key-not-a-qualified-name",
        tolerating({"key": "a b", "operator": "Exists"}),
        [(INVALID, f"{TOL}[0].key")],
    ),
    (
        "key-empty-without-Exists",
        tolerating({"operator": "Equal"}),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "key-empty-no-operator",
        tolerating({"effect": "NoSchedule"}),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "Exists-with-a-value",
        tolerating({"key": "k", "operator": "Exists", "value": "v"}),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "Equal-with-a-value-not-a-label-value",
        tolerating({"key": "k", "operator": "Equal", "value": "a b"}),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "no-operator-with-a-value-over-63",
        tolerating({"key": "k", "value": "x" * 64}),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "operator-unknown",
        tolerating({"key": "k", "operator": "In"}),
        [(NOT_SUPPORTED, f"{TOL}[0].operator")],
    ),
    (
        "operator-Lt-behind-its-alpha-gate",
        tolerating({"key": "k", "operator": "Lt", "value": "1"}),
        [(NOT_SUPPORTED, f"{TOL}[0].operator")],
    ),
    (
        "effect-unknown",
        tolerating({"key": "k", "operator": "Exists", "effect": "NoEvict"}),
        [(NOT_SUPPORTED, f"{TOL}[0].effect")],
    ),
    (
        "seconds-without-NoExecute",
        tolerating({"key": "k", "operator": "Exists", "tolerationSeconds": 30}),
        [(INVALID, f"{TOL}[0].effect")],
    ),
    (
        "seconds-with-NoSchedule",
        tolerating(
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 0}
        ),
        [(INVALID, f"{TOL}[0].effect")],
    ),
    (
        "fields-not-strings-fail-the-decode",
        tolerating({"key": 5, "operator": True, "value": ["v"], "effect": {"a": 1}}),
        [(INVALID, f"{TOL}[0].{field}") for field in ("key", "operator", "value", "effect")],
    ),
    *(
        (
            f"seconds-{name}",
            tolerating(
                {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": bad}
            ),
            [(INVALID, f"{TOL}[0].tolerationSeconds")],
        )
        for name, bad in (
            ("fractional", 1.5),
            ("a-string", "5"),
            ("true", True),
            ("over-int64", 2**63),
        )
    ),
    (
        "several-errors-of-one-entry",
        tolerating({"operator": "Exists", "value": "v", "effect": "Bogus", "tolerationSeconds": 1}),
        [
            (INVALID, f"{TOL}[0].effect"),
            (INVALID, f"{TOL}[0].operator"),
            (NOT_SUPPORTED, f"{TOL}[0].effect"),
        ],
    ),
]

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("null", with_tolerations(None)),
    ("empty", tolerating()),
    ("the-gpu-taint", tolerating(GPU_TOLERATION)),
    ("Equal-with-a-value", tolerating({"key": "k", "operator": "Equal", "value": "v"})),
    ("no-operator-is-Equal", tolerating({"key": "k", "value": "", "effect": "PreferNoSchedule"})),
    (
        "NoExecute-for-a-while",
        tolerating(
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": -5,
            }
        ),
    ),
    (
        "null-fields-are-zero-values",
        tolerating({"key": "k", "value": None, "tolerationSeconds": None}),
    ),
    ("unknown-and-miscased-fields-are-dropped", tolerating({"key": "k", "Value": "a b", "x": 1})),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(raw, expected, id=name) for name, raw, expected in REFUSED]
    + [pytest.param(raw, [], id=name) for name, raw in ACCEPTED],
)
@pytest.mark.parametrize("active_policy", [DEFAULT_POLICY, PRIVILEGED], ids=["default", "priv"])
def test_a_toleration_the_apiserver_refuses_in_a_pod_is_refused_under_every_policy(
    raw: Any, expected: Pairs, active_policy: PlacementPolicy
) -> None:
    check(raw, active_policy, expected)


def test_a_refused_toleration_is_not_also_judged_as_an_escape() -> None:
    """``Equal`` without a key would tolerate every taint: the pod is refused anyway."""
    raw = tolerating({"operator": "Equal"}, {"operator": "Exists"})

    assert pairs(validate_create(raw, DEFAULT_POLICY)) == [
        (INVALID, f"{TOL}[0].operator"),
        (FORBIDDEN, f"{TOL}[1]"),
    ]


def test_a_toleration_found_valid_before_is_judged_the_same_and_a_lookalike_is_not() -> None:
    """Remembered across reviews: only the same toleration, never one needing privilege."""
    seconds = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}
    named = {"key": "example.com/dedicated", "value": "vision", "effect": "NoSchedule"}
    for _ in range(2):
        assert pairs(validate_create(tolerating(seconds, named), DEFAULT_POLICY)) == []
    tolerates_all = {"operator": "Exists"}
    assert pairs(validate_create(tolerating(tolerates_all), PRIVILEGED)) == []
    assert pairs(validate_create(tolerating(tolerates_all), DEFAULT_POLICY)) == [
        (FORBIDDEN, f"{TOL}[0]")
    ]
    lookalikes = tolerating(
        {**seconds, "tolerationSeconds": True}, {**seconds, "tolerationSeconds": 1.0}
    )

    assert pairs(validate_create(lookalikes, DEFAULT_POLICY)) == [
        (INVALID, f"{TOL}[0].tolerationSeconds"),
        (INVALID, f"{TOL}[1].tolerationSeconds"),
    ]


UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
TIMED = {**UNREACHABLE, "tolerationSeconds": 1}
TIMED_POLICY = parsed_policy("timed", tolerations=[GPU_TOLERATION, TIMED])
NOT_THE_POLICYS: list[tuple[str, dict[str, Any], Pairs]] = [
    *(
        (
            f"{how}-seconds-{name}",
            tolerating(*([GPU_TOLERATION] if how == "the-policys-list" else []), seconds),
            [(INVALID, f"{TOL}[{1 if how == 'the-policys-list' else 0}].tolerationSeconds")],
        )
        for how in ("the-policys-list", "an-entry")
        for name, seconds in (
            ("true", {**TIMED, "tolerationSeconds": True}),  # True == 1 in Python
            ("one-point-zero", {**TIMED, "tolerationSeconds": 1.0}),  # 1.0 == 1 in Python
        )
    ),
    (
        "true-beside-the-policys-own",
        tolerating(TIMED, {**TIMED, "tolerationSeconds": True}, GPU_TOLERATION),
        [(INVALID, f"{TOL}[1].tolerationSeconds")],
    ),
]
THE_POLICYS: list[tuple[str, dict[str, Any]]] = [
    ("the-policys-list", tolerating(GPU_TOLERATION, TIMED)),
    ("an-entry", tolerating(TIMED)),
    ("the-policys-list-twice", tolerating(GPU_TOLERATION, TIMED, TIMED)),
    ("untimed-beside-it", tolerating(UNREACHABLE, TIMED)),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(raw, expected, id=name) for name, raw, expected in NOT_THE_POLICYS]
    + [pytest.param(raw, [], id=name) for name, raw in THE_POLICYS],
)
def test_a_toleration_passes_as_the_policys_own_only_when_equal_as_json(
    raw: dict[str, Any], expected: Pairs
) -> None:
    """``tolerationSeconds: true`` or ``1.0`` is not the policy's ``1``: no pod decodes it."""
    check(raw, TIMED_POLICY, expected)


def test_each_replica_is_judged_at_its_own_template() -> None:
    raw = gpu_job().build()
    raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [
        GPU_TOLERATION,
        {"key": "k", "operator": "Exists", "value": "v"},
    ]

    assert pairs(validate_create(raw, GPU_POLICY)) == [(INVALID, f"{WPOD}.tolerations[1].operator")]


def test_an_update_that_adds_a_refused_toleration_is_refused() -> None:
    admitted = with_uid(cpu_job().build())
    updated = copy.deepcopy(admitted)
    worker = updated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["tolerations"] = [{"key": "k", "tolerationSeconds": 5}]

    verdict = validate_update(admitted, updated, DEFAULT_POLICY)

    assert pairs(verdict) == [(INVALID, f"{WPOD}.tolerations[0].effect")]


# ------------------------------------------------- a policy's tolerations: taken only when valid

POLICY_REFUSED: list[tuple[str, dict[str, Any], Pairs]] = [
    ("key-not-a-qualified-name", {"key": "a b", "operator": "Exists"}, [(INVALID, "key")]),
    ("Equal-without-a-key", {"operator": "Equal"}, [(INVALID, "operator")]),
    (
        "Exists-with-a-value",
        {"key": "k", "operator": "Exists", "value": "v"},
        [(INVALID, "operator")],
    ),
    ("value-not-a-label-value", {"key": "k", "value": "a b"}, [(INVALID, "operator")]),
    (
        "seconds-without-NoExecute",
        {"key": "k", "operator": "Exists", "tolerationSeconds": 5},
        [(INVALID, "effect")],
    ),
    ("operator-empty-as-the-CRD-enum", {"key": "k", "operator": ""}, [(NOT_SUPPORTED, "operator")]),
    ("operator-unknown", {"key": "k", "operator": "Exist"}, [(NOT_SUPPORTED, "operator")]),
    (
        "effect-unknown",
        {"key": "k", "operator": "Exists", "effect": "NoEvict"},
        [(NOT_SUPPORTED, "effect")],
    ),
    ("key-not-a-string", {"key": 5, "operator": "Exists"}, [(INVALID, "key")]),
    ("not-an-object", "k", [(INVALID, "")]),
]


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [pytest.param(toleration, expected, id=name) for name, toleration, expected in POLICY_REFUSED],
)
def test_a_policy_toleration_the_apiserver_would_refuse_in_every_pod_makes_the_policy_invalid(
    toleration: Any, expected: list[tuple[ErrorType, str]]
) -> None:
    parsed, errors = parse_policy(policy("p", tolerations=[GPU_TOLERATION, toleration]))

    assert parsed is None
    assert [(e.type, e.field) for e in errors] == [
        (kind, f"spec.tolerations[1]{'.' if where else ''}{where}") for kind, where in expected
    ]


# ------------------------------------ property: what the mutating webhook adds always passes

# Mostly what a policy may hold (about a third of the lists drawn parse), some of what it may not.
FIELD_VALUES = {
    "key": ["nvidia.com/gpu", "k", "", "torchgate.io/quarantine", "a b", 5],
    "operator": ["Exists", "Equal", "Exists", "", "Lt"],
    "value": ["", "v", None, "a b"],
    "effect": ["NoSchedule", "NoExecute", "PreferNoSchedule", "", "Bogus"],
    "tolerationSeconds": [None, 30, -5, 1.5],
}
MEMBERS = st.fixed_dictionaries(
    {},
    optional={field: st.sampled_from(values) for field, values in FIELD_VALUES.items()},
)


@st.composite
def valid_tolerations(draw: st.DrawFn) -> dict[str, Any]:
    """A toleration Kubernetes takes, written in any of the ways it may be."""
    key = draw(st.sampled_from(["", "nvidia.com/gpu", "example.com/a_b.c", "k" * 63]))
    operator = "Exists" if not key else draw(st.sampled_from(["Exists", "Equal", None]))
    entry: dict[str, Any] = {"key": key} if key or draw(st.booleans()) else {}
    if operator is not None:
        entry["operator"] = operator
    if operator != "Exists":
        entry["value"] = draw(st.sampled_from(["", "v", "A-1.b_c"]))
    effect = draw(st.sampled_from([None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"]))
    if effect is not None:
        entry["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        entry["tolerationSeconds"] = draw(st.integers(-(2**63), 2**63 - 1))
    return entry


ENTRIES = st.lists(
    st.one_of(valid_tolerations(), valid_tolerations(), MEMBERS, st.sampled_from([None, "k"])),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    written=ENTRIES,
    own=st.none() | st.sampled_from([[], [GPU_TOLERATION], [{"key": "k", "operator": "Exists"}]]),
    privileged=st.booleans(),
    gpus=st.booleans(),
)
def test_every_toleration_the_mutating_webhook_adds_passes_validation(
    written: list[Any], own: list[Any] | None, privileged: bool, gpus: bool
) -> None:
    """A parsed policy's tolerations, added to any template, pass as the apiserver's would."""
    parsed, _ = parse_policy(policy("p", tolerations=written, allowPrivileged=privileged))
    raw = (gpu_job() if gpus else cpu_job()).build()
    if own is not None:
        for spec in raw["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["spec"]["tolerations"] = copy.deepcopy(own)
    if parsed is None:
        return
    defaulted = default_job(copy.deepcopy(raw), parsed)
    mutated = jsonpatch.apply_patch(raw, defaulted.patch)

    verdict = validate_create(mutated, parsed)

    assert [e for e in verdict.errors if ".tolerations" in e.field] == []
    for spec in mutated["spec"]["pytorchReplicaSpecs"].values():  # the rule trusts the policy's
        for index, entry in enumerate(spec["template"]["spec"].get("tolerations") or []):
            assert entry_errors(entry, FieldPath.root("tolerations").index(index)) == []

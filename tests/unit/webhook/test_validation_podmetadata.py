"""Template labels and annotations the apiserver refuses in every pod (``podmetadata``)."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.job import cpu_job, job, with_uid
from tests.builders.policy import parsed_policy
from tests.unit.webhook.gometadata import annotations_refusals, labels_refusals
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    INVALID,
    NOT_SUPPORTED,
    SPECS,
    TOO_LONG,
    Pairs,
    check,
    pairs,
)
from torchgate.controller.job.model import current_attempt
from torchgate.controller.job.pods import build_pod, replica_labels
from torchgate.pytorchjob import names
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.pytorchjob.spec import parse_job
from torchgate.webhook.validation import validate_create, validate_update
from torchgate.webhook.validation.facts import read_job
from torchgate.webhook.validation.podmetadata import (
    ANNOTATION_DELETION_COST,
    ANNOTATION_MIRROR_POD,
    ANNOTATION_TOLERATIONS,
    ANNOTATIONS_SIZE_MAX,
)

PRIVILEGED = parsed_policy("priv", allowPrivileged=True)
JOB, _ = parse_job(cpu_job().build())
assert JOB is not None
MMETA = f"{SPECS}[Master].template.metadata"
WMETA = f"{SPECS}[Worker].template.metadata"
MANN = f"{MMETA}.annotations"
MLAB = f"{MMETA}.labels"
TOL = f"{MANN}[{ANNOTATION_TOLERATIONS}]"
COST = f"{MANN}[{ANNOTATION_DELETION_COST}]"
# The largest gang attempt the controller can give a pod: what it reads back from the largest
# counts a job's annotations hold (more digits are not a count: it falls back).
LARGEST_ATTEMPT = max(
    current_attempt({key: "9" * count})
    for key in (names.ANNOTATION_GANG_ATTEMPT, names.ANNOTATION_RESTARTS)
    for count in range(1, 30)
)
# The annotations the controller gives a pod of that attempt on a node of the longest name.
OWN_ANNOTATIONS = build_pod(
    cpu_job().build(),
    JOB,
    "Master",
    0,
    node="n" * names.DNS_SUBDOMAIN_MAX,
    attempt=LARGEST_ATTEMPT,
    gpus=names.DEFAULT_GPU_RESOURCE,
)["metadata"]["annotations"]
OWN = sum(len(key) + len(value) for key, value in OWN_ANNOTATIONS.items())


ABSENT: Any = object()


def with_metadata(*, labels: Any = ABSENT, annotations: Any = ABSENT) -> dict[str, Any]:
    """A job whose Master template has this metadata (the Worker's has none)."""
    raw = job().master().workers(1).build()
    metadata: dict[str, Any] = {}
    if labels is not ABSENT:
        metadata["labels"] = labels
    if annotations is not ABSENT:
        metadata["annotations"] = annotations
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"] = metadata
    return raw


def with_template_metadata(value: Any) -> dict[str, Any]:
    """A job whose Master template's ``metadata`` is ``value`` (the Worker's has none)."""
    raw = job().master().workers(1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"] = value
    return raw


def tolerating(value: str) -> dict[str, Any]:
    return with_metadata(annotations={ANNOTATION_TOLERATIONS: value})


def costing(value: str) -> dict[str, Any]:
    return with_metadata(annotations={ANNOTATION_DELETION_COST: value})


REFUSED: list[tuple[str, dict[str, Any], Pairs]] = [
    *(
        (f"metadata-{name}", with_template_metadata(value), [(INVALID, MMETA)])
        for name, value in (
            ("a-string", "app: x"),
            ("an-empty-string", ""),
            ("a-list", [{"labels": {"a": "b"}}]),
            ("an-empty-list", []),
            ("a-number", 0),
            ("false", False),
        )
    ),
    ("label-key-with-a-space", with_metadata(labels={"a b": "v"}), [(INVALID, f"{MLAB}[a b]")]),
    (
        "label-key-with-two-slashes",
        with_metadata(labels={"a/b/c": "v"}),
        [(INVALID, f"{MLAB}[a/b/c]")],
    ),
    (
        "label-key-with-an-empty-name-two-errors",
        with_metadata(labels={"example.com/": "v"}),
        [(INVALID, f"{MLAB}[example.com/]")] * 2,
    ),
    (
        "label-key-upper-case-prefix",
        with_metadata(labels={"Example.com/a": "v"}),
        [(INVALID, f"{MLAB}[Example.com/a]")],
    ),
    ("label-value-with-a-space", with_metadata(labels={"a": "b c"}), [(INVALID, f"{MLAB}[a]")]),
    ("label-value-64-bytes", with_metadata(labels={"a": "x" * 64}), [(INVALID, f"{MLAB}[a]")]),
    (
        "label-value-non-ascii-two-errors",
        with_metadata(labels={"a": "\u00fc" * 32}),
        [(INVALID, f"{MLAB}[a]")] * 2,
    ),
    (
        "annotation-key-with-a-space",
        with_metadata(annotations={"bad key": "x"}),
        [(INVALID, f"{MANN}[bad key]")],
    ),
    (
        "annotation-key-dotless-i",
        with_metadata(annotations={"\u0131d": "x"}),
        [(INVALID, f"{MANN}[\u0131d]")],
    ),
    (
        "annotations-one-byte-over-256-KiB-with-the-longest-attempt-and-node",
        with_metadata(annotations={"a": "v" * (ANNOTATIONS_SIZE_MAX - OWN)}),
        [(TOO_LONG, MANN)],
    ),
    (
        "the-mirror-pod-annotation",
        with_metadata(annotations={ANNOTATION_MIRROR_POD: ""}),
        [(INVALID, f"{MANN}[{ANNOTATION_MIRROR_POD}]")],
    ),
    (
        "label-and-annotation-values-not-strings",
        with_metadata(labels={"version": 1, "ok": True}, annotations={"a": 1.5, "b": ["x"]}),
        [
            (INVALID, f"{MLAB}[version]"),
            (INVALID, f"{MLAB}[ok]"),
            (INVALID, f"{MANN}[a]"),
            (INVALID, f"{MANN}[b]"),
        ],
    ),
    ("labels-a-list", with_metadata(labels=["a"]), [(INVALID, MLAB)]),
    ("annotations-a-string", with_metadata(annotations="a: b"), [(INVALID, MANN)]),
    (
        "null-values-are-empty-strings-judged-as-such",
        with_metadata(labels={"a b": None}, annotations={ANNOTATION_DELETION_COST: None}),
        [(INVALID, f"{MLAB}[a b]"), (INVALID, COST)],
    ),
    ("tolerations-not-json", tolerating("x"), [(INVALID, TOL)]),
    ("tolerations-an-object", tolerating("{}"), [(INVALID, TOL)]),
    ("tolerations-a-number-in-the-list", tolerating("[1]"), [(INVALID, TOL)]),
    ("tolerations-trailing-data", tolerating('[{"key":"k"}] x'), [(INVALID, TOL)]),
    ("tolerations-NaN", tolerating("NaN"), [(INVALID, TOL)]),
    ("tolerations-fractional-seconds", tolerating('[{"tolerationSeconds":1.5}]'), [(INVALID, TOL)]),
    ("tolerations-string-seconds", tolerating('[{"tolerationSeconds":"5"}]'), [(INVALID, TOL)]),
    (
        "tolerations-seconds-over-int64",
        tolerating('[{"tolerationSeconds":9223372036854775808}]'),
        [(INVALID, TOL)],
    ),
    ("tolerations-numeric-key", tolerating('[{"key":5}]'), [(INVALID, TOL)]),
    ("tolerations-an-empty-one", tolerating("[{}]"), [(INVALID, f"{TOL}[0].operator")]),
    ("tolerations-a-null-one", tolerating("[null]"), [(INVALID, f"{TOL}[0].operator")]),
    (
        "tolerations-key-with-a-space",
        tolerating('[{"key":"a b","operator":"Exists"}]'),
        [(INVALID, f"{TOL}[0].key")],
    ),
    (
        "tolerations-equal-with-a-bad-value",
        tolerating('[{"key":"k","value":"a b"}]'),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "tolerations-exists-with-a-value",
        tolerating('[{"key":"k","operator":"Exists","value":"v"}]'),
        [(INVALID, f"{TOL}[0].operator")],
    ),
    (
        "tolerations-Lt-behind-its-alpha-gate",
        tolerating('[{"key":"k","operator":"Lt","value":"1"}]'),
        [(NOT_SUPPORTED, f"{TOL}[0].operator")],
    ),
    (
        "tolerations-unknown-operator",
        tolerating('[{"key":"k","operator":"In"}]'),
        [(NOT_SUPPORTED, f"{TOL}[0].operator")],
    ),
    (
        "tolerations-unknown-effect",
        tolerating('[{"key":"k","effect":"Bogus"}]'),
        [(NOT_SUPPORTED, f"{TOL}[0].effect")],
    ),
    (
        "tolerations-seconds-without-NoExecute",
        tolerating('[{"key":"k","tolerationSeconds":5}]'),
        [(INVALID, f"{TOL}[0].effect")],
    ),
    (
        "tolerations-field-names-fold-case-and-kelvin",
        tolerating('[{"\\u212aEY":"a b","Operator":"Exists"}]'),
        [(INVALID, f"{TOL}[0].key")],
    ),
    (
        "tolerations-the-last-member-wins",
        tolerating('[{"key":"k","key":"a b","operator":"Exists"}]'),
        [(INVALID, f"{TOL}[0].key")],
    ),
    ("deletion-cost-empty", costing(""), [(INVALID, COST)]),
    ("deletion-cost-leading-zero", costing("007"), [(INVALID, COST)]),
    ("deletion-cost-plus-sign", costing("+1"), [(INVALID, COST)]),
    ("deletion-cost-over-int32", costing("2147483648"), [(INVALID, COST)]),
    ("deletion-cost-fraction", costing("1.5"), [(INVALID, COST)]),
    ("deletion-cost-padded", costing(" 1"), [(INVALID, COST)]),
    ("deletion-cost-a-minus", costing("-"), [(INVALID, COST)]),
]

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("metadata-null", with_template_metadata(None)),
    ("metadata-empty", with_template_metadata({})),
    (
        "labels-valid",
        with_metadata(labels={"app": "x", "team.example.com/name": "", "A_b.c": "a" * 63}),
    ),
    (
        "labels-the-controller-replaces",
        with_metadata(labels={names.LABEL_JOB_NAME: "a b", names.LABEL_JOB_ROLE: "x y"}),
    ),
    ("labels-and-annotations-null", with_metadata(labels=None, annotations=None)),
    (
        "null-values-valid-as-empty-strings",
        with_metadata(labels={"a": None}, annotations={"a": None}),
    ),
    ("annotation-key-upper-case", with_metadata(annotations={"Example.COM/Note": "x"})),
    ("annotation-key-kelvin-sign-lowers-to-k", with_metadata(annotations={"\u212aey": "x"})),
    ("annotation-key-dotted-capital-i-lowers-to-i", with_metadata(annotations={"\u0130d": "x"})),
    (
        "annotations-at-256-KiB-with-the-longest-attempt-and-node",
        with_metadata(annotations={"a": "v" * (ANNOTATIONS_SIZE_MAX - OWN - 1)}),
    ),
    *(
        (
            f"the-controller-replaces-{key}",
            with_metadata(annotations={key: "v" * ANNOTATIONS_SIZE_MAX}),
        )
        for key in OWN_ANNOTATIONS
    ),
    ("tolerations-empty", tolerating("")),
    ("tolerations-null", tolerating("null")),
    ("tolerations-an-empty-list", tolerating("[]")),
    ("tolerations-tolerating-all", tolerating('[{"operator":"Exists"}]')),
    (
        "tolerations-valid",
        tolerating(
            '[{"key":"k","operator":"Equal","value":"v","effect":"NoExecute",'
            '"tolerationSeconds":-5},{"key":"k","unknown":{"a":[1,2.5]}},'
            '{"key":"k","toleration\\u017feconds":null}]'
        ),
    ),
    ("tolerations-a-null-keeps-the-key", tolerating('[{"key":"k","key":null}]')),
    *((f"deletion-cost-{value}", costing(value)) for value in ("0", "-0", "-007", "2147483647")),
    ("deletion-cost-int32-minimum", costing("-2147483648")),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(raw, expected, id=name) for name, raw, expected in REFUSED]
    + [pytest.param(raw, [], id=name) for name, raw in ACCEPTED],
)
@pytest.mark.parametrize("active_policy", [DEFAULT_POLICY, PRIVILEGED], ids=["default", "priv"])
def test_template_metadata_the_apiserver_refuses_in_every_pod_is_refused_under_every_policy(
    raw: Any, expected: Pairs, active_policy: PlacementPolicy
) -> None:
    check(raw, active_policy, expected)


def test_each_replica_is_judged_at_its_own_template() -> None:
    raw = with_metadata(labels={"a": "b c"})
    worker = raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    worker["metadata"] = {"annotations": {ANNOTATION_DELETION_COST: "x"}}

    assert pairs(validate_create(raw, DEFAULT_POLICY)) == [
        (INVALID, f"{MLAB}[a]"),
        (INVALID, f"{WMETA}.annotations[{ANNOTATION_DELETION_COST}]"),
    ]


def test_metadata_not_an_object_leaves_the_pod_spec_judged() -> None:
    raw = with_template_metadata("x")
    master = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["nodeName"] = "n"

    assert pairs(validate_create(raw, PRIVILEGED)) == [
        (INVALID, MMETA),
        (FORBIDDEN, f"{MMETA.removesuffix('metadata')}spec.nodeName"),
    ]


def test_an_update_that_adds_a_refused_annotation_is_refused() -> None:
    admitted = with_uid(cpu_job().build())
    updated = copy.deepcopy(admitted)
    worker = updated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    worker["metadata"] = {"annotations": {ANNOTATION_TOLERATIONS: "x"}}

    verdict = validate_update(admitted, updated, DEFAULT_POLICY)

    assert pairs(verdict) == [(INVALID, f"{WMETA}.annotations[{ANNOTATION_TOLERATIONS}]")]


def test_a_template_without_labels_or_annotations_leaves_the_rules_nothing_to_read() -> None:
    """The usual job: no template metadata fact, so both rules return at once."""
    facts = read_job(cpu_job().build(), DEFAULT_POLICY, old=None, creating=True)

    assert [replica.template_metadata for replica in facts.known_replicas] == [None, None]


def test_the_labels_the_controller_sets_are_those_it_replaces() -> None:
    """``names.POD_LABELS`` is the contract ``template_labels`` skips: every label it sets."""
    spec, errors = parse_job(cpu_job().build())
    assert spec is not None, errors
    set_labels = {
        key
        for replica_type, count in (("Master", 1), ("Worker", 2))
        for index in range(count)
        for key in replica_labels(spec, replica_type, index)
    }

    assert set_labels == names.POD_LABELS


# Keys, values and tolerations drawn for the property: valid and refused ones, and any text.
KEYS = st.sampled_from(
    [
        *("app", "a b", "a/b/c", "/x", "example.com/", "Example.com/x", "x" * 64, "\u212aey"),
        *("\u0130d", "\u0131d", ANNOTATION_MIRROR_POD, ANNOTATION_TOLERATIONS),
        *(ANNOTATION_DELETION_COST, names.LABEL_JOB_NAME, f"{'a' * 254}/x", "a\n"),
    ]
) | st.text(max_size=12)
MEMBER_NAMES = [
    *("key", "KEY", "\u212aey", "operator", "value", "effect", "tolerationSeconds"),
    *("toleration\u017feconds", "unknown"),
]
MEMBER_VALUES = [
    *("k", "", "a b", "x" * 64, None, 5, -1, 1.5, 2**63, True, [1], {"a": None}),
    *("Exists", "Equal", "Lt", "In", "NoExecute", "NoSchedule", "Bogus"),
]
TOLERATION = st.lists(
    st.tuples(st.sampled_from(MEMBER_NAMES), st.sampled_from(MEMBER_VALUES)), max_size=4
).map(lambda members: "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in members) + "}")
TOLERATIONS = st.lists(TOLERATION | st.sampled_from(["null", "1", '"k"']), max_size=3).map(
    lambda elements: "[" + ",".join(elements) + "]"
) | st.sampled_from(["{}", "null", "NaN", "[] x", ""])
VALUES = (
    st.sampled_from(["", "x", "0", "-0", "007", "+1", "-", "2147483648", "-2147483648", "a b"])
    | st.none()  # Go decodes it into ""
    | st.text(max_size=12)
    | TOLERATIONS
)


@settings(max_examples=400, deadline=None)
@given(
    labels=st.dictionaries(KEYS, VALUES, max_size=4),
    annotations=st.dictionaries(KEYS, VALUES, max_size=5),
    tolerations=st.none() | TOLERATIONS,
    padding=st.none() | st.integers(-2, 2),
)
def test_the_template_metadata_refused_is_what_the_apiserver_refuses_in_every_pod(
    labels: dict[str, str | None],
    annotations: dict[str, str | None],
    tolerations: str | None,
    padding: int | None,
) -> None:
    """Against ``gometadata``, the Go checks' copy, on the pod the controller builds."""
    if tolerations is not None:
        annotations[ANNOTATION_TOLERATIONS] = tolerations
    if padding is not None:  # around the size limit
        used = sum(len(k.encode("utf-8", "surrogatepass")) for k in annotations) + OWN
        used += sum(len((v or "").encode("utf-8", "surrogatepass")) for v in annotations.values())
        annotations["example.com/big"] = "v" * max(0, ANNOTATIONS_SIZE_MAX - used - 15 + padding)
    raw = with_metadata(labels=labels, annotations=annotations)

    verdict = validate_create(raw, PRIVILEGED)

    pod_labels = {k: v or "" for k, v in labels.items() if k not in names.POD_LABELS}
    pod_annotations = {**{k: v or "" for k, v in annotations.items()}, **OWN_ANNOTATIONS}
    expected = [
        (kind, f"{SPECS}[Master].template.{path}")
        for kind, path in [*labels_refusals(pod_labels), *annotations_refusals(pod_annotations)]
    ]
    assert Counter(pairs(verdict)) == Counter(expected)

"""Pod-template metadata rules: the labels and annotations the apiserver refuses in every pod.

Why: the controller copies a template's labels and annotations into every pod it creates from
it (``controller.job.pods.build_pod``: its own labels ``names.POD_LABELS`` and gang-attempt
annotation replacing the template's). The CRD stores them unchecked, so a label
or annotation the apiserver refuses on a pod gives a job that is stored, holds its quota and
never gets a pod (``FailedCreate`` for ever). These rules refuse them at admission, under every
policy, with the apiserver's error type; a reading of k8s.io/kubernetes v1.37.2 (v1.36.3 reads
alike; line numbers of ``pkg/apis/core/validation/validation.go`` in brackets) and
k8s.io/apimachinery v0.37.2 (``metav1.ObjectMeta`` checks):

1. ``template_labels``: each label key is a qualified name and each value a label value
   (``metav1validation.ValidateLabels``, Invalid; ``names.label_key_errors``,
   ``names.label_value_errors``). The apiserver reports at ``metadata.labels``; the webhook at
   the label's own path, ``labels[<key>]``.
2. ``template_annotations``:
   a. each key, lower-cased as Go does, is a qualified name (``ValidateAnnotations``, Invalid;
      the apiserver reports at ``metadata.annotations``, the webhook at ``annotations[<key>]``);
   b. keys and values total at most 256 KiB on the pod, the controller's annotations included
      (``ValidateAnnotationsSize``, TooLong at ``annotations``);
   c. ``kubernetes.io/config.mirror`` needs the pod's ``spec.nodeName``, which the controller
      never sets (``ValidatePodSpecificAnnotations`` [:205], Invalid);
   d. ``scheduler.alpha.kubernetes.io/tolerations``, when not empty, is what Go's
      ``encoding/json`` decodes into ``[]core.Toleration`` (Invalid at the annotation, where the
      apiserver reports at ``annotations``) holding valid tolerations (``ValidateTolerations``
      [:4487]: a qualified-name key, an operator ``Exists`` without a value or ``Equal``/empty
      with a label value, ``Exists`` when the key is empty, ``tolerationSeconds`` only with
      ``NoExecute``, a known effect; the comparison operators ``Lt``/``Gt`` are behind the
      alpha gate ``TaintTolerationComparisonOperators``, off by default: NotSupported), at
      ``annotations[<key>][<i>].<field>`` (the apiserver's ``.Child``, written as a key);
   e. ``controller.kubernetes.io/pod-deletion-cost`` is an int32 written without a plus sign
      or leading zeros (``GetDeletionCostFromPodAnnotations``, [:215], Invalid).

The seccomp and AppArmor annotations the same function checks are ``pod.pod_confinement``'s.
A label or annotation value that is not a string would not decode into a pod: the controller's
create reports it. ``template_metadata`` applies both; it returns at once for a template without
labels or annotations (``ReplicaFacts.template_metadata`` is None, the usual job), and passes
over labels all found valid in an earlier review with one set lookup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.fieldpath import ErrorType, FieldError, FieldPath, invalid, not_supported
from torchgate.webhook.validation.facts import (
    NONE,
    OBJECT,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    at,
)

ANNOTATION_TOLERATIONS: Final = "scheduler.alpha.kubernetes.io/tolerations"
ANNOTATION_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
ANNOTATIONS_SIZE_MAX: Final = 256 * 1024  # bytes of keys and values: TotalAnnotationSizeLimitB
# What the controller's own annotations add to a pod at the least: the gang attempt, one digit.
_OWN_ANNOTATIONS_SIZE: Final = len(names.ANNOTATION_GANG_ATTEMPT) + 1
_INT32: Final = range(-(2**31), 2**31)
_INT64: Final = range(-(2**63), 2**63)
_DIGITS: Final = frozenset("0123456789")
_LEADING_DIGITS: Final = frozenset("123456789")
TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_COMPARISON_OPERATORS: Final = ("Lt", "Gt")
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def template_metadata(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Rules 1 and 2: nothing to do without labels and annotations, or labels seen valid."""
    metadata = replica.template_metadata
    if metadata is None:
        return NONE
    labels = metadata.get("labels")
    found = NONE
    if labels:
        try:  # a label value that is not hashable (a list): the rule reports or skips it
            seen = type(labels) is dict and labels.items() <= _VALID_LABELS  # no set built
        except TypeError:
            seen = False
        if not seen:
            found = template_labels(job, replica)
    if "annotations" not in metadata:
        return found
    return [*found, *template_annotations(job, replica)]


def template_labels(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Each label key is a qualified name, each value a label value (rule 1)."""
    metadata = replica.template_metadata
    labels = metadata.get("labels") if metadata is not None else None
    if not labels or not isinstance(labels, OBJECT):
        return NONE
    found: list[Finding] = []
    for key, value in labels.items():
        if not isinstance(value, str) or not isinstance(key, str) or key in names.POD_LABELS:
            continue  # not decodable (the controller's create reports it), or the controller's
        where = at(replica.path, "template", "metadata", "labels").key(key)
        key_errors, value_errors = names.label_key_errors(key), names.label_value_errors(value)
        found.extend(invalid(where, key, message) for message in key_errors)
        found.extend(invalid(where, value, message) for message in value_errors)
        if not key_errors and not value_errors:
            _remember(_VALID_LABELS, (key, value))
    return found


def template_annotations(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Keys, total size, the mirror, tolerations and deletion-cost annotations (rule 2)."""
    metadata = replica.template_metadata
    annotations = metadata.get("annotations") if metadata is not None else None
    if not annotations or not isinstance(annotations, OBJECT):
        return NONE
    path = at(replica.path, "template", "metadata", "annotations")
    found: list[Finding] = []
    size = _OWN_ANNOTATIONS_SIZE
    for key, value in annotations.items():
        if not isinstance(key, str) or not isinstance(value, str):
            continue
        if key == names.ANNOTATION_GANG_ATTEMPT:
            continue  # the controller's value replaces the template's
        size += _utf8_length(key) + _utf8_length(value)
        where = path.key(key)
        if key not in _VALID_ANNOTATION_KEYS:
            key_errors = annotation_key_errors(key)
            found.extend(invalid(where, key, message) for message in key_errors)
            if not key_errors:
                _remember(_VALID_ANNOTATION_KEYS, key)
        if key == ANNOTATION_MIRROR_POD:
            found.append(
                invalid(
                    where,
                    value,
                    "must set spec.nodeName if mirror pod annotation is set; the controller "
                    "never sets it (only the kubelet creates mirror pods): remove the annotation",
                )
            )
        elif key == ANNOTATION_TOLERATIONS and value:
            found.extend(annotation_tolerations(value, where))
        elif key == ANNOTATION_DELETION_COST and not is_deletion_cost(value):
            found.append(invalid(where, value, "must be a 32bit integer"))
    if size > ANNOTATIONS_SIZE_MAX:
        detail = (
            f"may not have more than {ANNOTATIONS_SIZE_MAX} bytes (keys and values of every pod's "
            f"annotations, {names.ANNOTATION_GANG_ATTEMPT} included): these have {size}"
        )
        found.append(FieldError(ErrorType.TOO_LONG, path, detail, ""))
    return found


def annotation_key_errors(key: str) -> list[str]:
    """``ValidateAnnotations``' messages for ``key``: a qualified name once lower-cased.

    Go's ``strings.ToLower`` maps rune by rune: U+0130 (İ) becomes ``i`` (Python's ``lower``
    adds a combining dot), U+212A (Kelvin sign) ``k`` as in Python.
    """
    if key.isascii():
        return names.label_key_errors(key.lower())
    return names.label_key_errors(key.replace("\u0130", "i").lower())


def is_deletion_cost(value: str) -> bool:
    """Whether ``GetDeletionCostFromPodAnnotations`` reads ``value`` (rule 2e)."""
    if value[:1] == "-":
        digits = value[1:]
    elif value == "0" or value[:1] in _LEADING_DIGITS:  # validFirstDigit: no "+", no "007"
        digits = value
    else:
        return False
    if not digits or not _DIGITS.issuperset(digits):  # strconv.ParseInt(value, 10, 32)
        return False
    return int(value) in _INT32


@dataclass(frozen=True, slots=True)
class Toleration:
    """A ``core.Toleration`` as Go's ``encoding/json`` leaves it (absent fields: zero values)."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


def decode_tolerations(text: str) -> list[Toleration] | str:
    """What ``json.Unmarshal`` into ``[]core.Toleration`` gives: the list, or its error.

    Go's rules: ``null`` is no list; an element ``null`` a zero toleration; a field name
    matches case-insensitively (``foldName``: also U+017F for ``s`` and U+212A for ``k``), the
    last occurrence winning, except that ``null`` leaves a string field as it was; unknown fields
    are skipped; a string field takes only a string, ``tolerationSeconds`` only an integer
    literal within int64; any mismatch fails the whole decode.
    """
    try:
        parsed = json.loads(text, object_pairs_hook=_Members, parse_constant=_not_json)
    except (ValueError, RecursionError) as error:
        return str(error) or "invalid JSON"
    if parsed is None:
        return []
    if not isinstance(parsed, list):
        return "cannot unmarshal into []core.Toleration: not a JSON array"
    tolerations: list[Toleration] = []
    for item in parsed:
        if item is None:
            tolerations.append(Toleration())
            continue
        if not isinstance(item, _Members):
            return "cannot unmarshal into core.Toleration: not a JSON object"
        fields: dict[str, Any] = {}
        for name, value in item:
            field = _TOLERATION_FIELDS.get(name.replace("\u017f", "s").lower())
            if field is None:
                continue
            if field == "toleration_seconds":
                if value is not None and (type(value) is not int or value not in _INT64):
                    return f"cannot unmarshal {value!r} into tolerationSeconds (int64)"
                fields[field] = value
            elif value is not None:
                if not isinstance(value, str):
                    return f"cannot unmarshal {value!r} into {name} (string)"
                fields[field] = value
        tolerations.append(Toleration(**fields))
    return tolerations


def annotation_tolerations(value: str, path: FieldPath) -> Findings:
    """``ValidateTolerationsInPodAnnotations`` of the annotation's ``value``, at ``path``."""
    decoded = decode_tolerations(value)
    if isinstance(decoded, str):
        return [invalid(path, value, f"must be a JSON list of tolerations: {decoded}")]
    found: list[Finding] = []
    for index, toleration in enumerate(decoded):
        found.extend(toleration_errors(toleration, path.index(index)))
    return found


def toleration_errors(toleration: Toleration, path: FieldPath) -> Findings:
    """``ValidateTolerations`` of one toleration at ``path`` (comparison operators gated off)."""
    found: list[Finding] = []
    key, operator, value, effect = (
        toleration.key,
        toleration.operator,
        toleration.value,
        toleration.effect,
    )
    if key:
        found.extend(invalid(at(path, "key"), key, m) for m in names.label_key_errors(key))
    if not key and operator != "Exists":
        found.append(
            invalid(
                at(path, "operator"),
                operator,
                'operator must be Exists when `key` is empty, which means "match all values and '
                'all keys"',
            )
        )
    if toleration.toleration_seconds is not None and effect != "NoExecute":
        found.append(
            invalid(
                at(path, "effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            )
        )
    if operator in ("Equal", ""):
        messages = names.label_value_errors(value)
        if messages:
            found.append(invalid(at(path, "operator"), value, ";".join(messages)))
    elif operator == "Exists":
        if value:
            found.append(
                invalid(
                    at(path, "operator"), value, "value must be empty when `operator` is 'Exists'"
                )
            )
    elif operator in _COMPARISON_OPERATORS:
        supported = (*TOLERATION_OPERATORS, *_COMPARISON_OPERATORS)
        found.append(not_supported(at(path, "operator"), operator, supported))
    else:
        found.append(not_supported(at(path, "operator"), operator, TOLERATION_OPERATORS))
    if effect and effect not in TAINT_EFFECTS:
        found.append(not_supported(at(path, "effect"), effect, TAINT_EFFECTS))
    return found


# Labels (key, value) and annotation keys found valid, kept across reviews: jobs mostly carry
# the same few (``app: x`` on every template), and one C-level set lookup per template costs far
# less than the checks' regular expressions. Bounded: a set is emptied when full.
_VALID_LABELS: Final[set[tuple[str, str]]] = set()
_VALID_ANNOTATION_KEYS: Final[set[str]] = set()
_VALID_KEPT: Final = 4096


def _remember(valid: set[Any], item: Any) -> None:
    if len(valid) >= _VALID_KEPT:
        valid.clear()
    valid.add(item)


class _Members(tuple[tuple[str, Any], ...]):
    """A JSON object's members in order, duplicates kept (Go reads each in turn)."""

    __slots__ = ()


def _not_json(constant: str) -> Any:
    raise ValueError(f"invalid character in {constant}: not JSON")


_TOLERATION_FIELDS: Final[Mapping[str, str]] = {
    "key": "key",
    "operator": "operator",
    "value": "value",
    "effect": "effect",
    "tolerationseconds": "toleration_seconds",
}


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))

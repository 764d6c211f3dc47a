"""Pod-template metadata rules: the labels and annotations the apiserver refuses in every pod.

Why: the controller copies a template's labels and annotations into every pod it creates from
it (``controller.job.pods.build_pod``: its own labels ``names.POD_LABELS`` and gang-attempt
annotation replacing the template's). The CRD stores them unchecked, so a label
or annotation the apiserver refuses on a pod gives a job that is stored, holds its quota and
never gets a pod (``FailedCreate`` for ever). These rules refuse them at admission, under every
policy, with the apiserver's error type; a reading of k8s.io/kubernetes v1.37.2 (v1.36.3 reads
alike; line numbers of ``pkg/apis/core/validation/validation.go`` in brackets) and
k8s.io/apimachinery v0.37.2 (``metav1.ObjectMeta`` checks):

0. ``template_metadata``: the template's ``metadata`` is an object or ``null``. Anything else
   is no ``ObjectMeta``: a Go reader of the job (the training-operator when ``managedBy``
   names it, Kueue's PyTorchJob integration) cannot decode the job, and torchgate's controller
   would create the pods without the labels and annotations meant for them; the CRD's schema
   lets it through (``template`` keeps unknown fields, nothing under it has a type). Invalid
   at ``...template.metadata``.
1. ``template_labels``: each label key is a qualified name and each value a label value
   (``metav1validation.ValidateLabels``, Invalid; ``names.label_key_errors``,
   ``names.label_value_errors``). The apiserver reports at ``metadata.labels``; the webhook at
   the label's own path, ``labels[<key>]``.
2. ``template_annotations``:
   a. each key, lower-cased as Go does, is a qualified name (``ValidateAnnotations``, Invalid;
      the apiserver reports at ``metadata.annotations``, the webhook at ``annotations[<key>]``);
   b. keys and values total at most 256 KiB on the pod, the controller's annotations included
      (``names.own_pod_annotations``: the gang attempt and the planned node, counted at their
      longest, ``names.longest_own_pod_annotations``: the largest attempt the controller writes
      and a node name of 253 bytes, as a pod may get either; ``ValidateAnnotationsSize``, TooLong
      at ``annotations``);
   c. ``kubernetes.io/config.mirror`` needs the pod's ``spec.nodeName``, which the controller
      never sets (``ValidatePodSpecificAnnotations`` [:205], Invalid);
   d. ``scheduler.alpha.kubernetes.io/tolerations``, when not empty, is what Go's
      ``encoding/json`` decodes into ``[]core.Toleration`` (Invalid at the annotation, where the
      apiserver reports at ``annotations``) holding valid tolerations (``ValidateTolerations``
      [:4487], ``taints.toleration_errors``, the rule a template's ``tolerations`` follow too),
      at ``annotations[<key>][<i>].<field>`` (the apiserver's ``.Child``, written as a key);
   e. ``controller.kubernetes.io/pod-deletion-cost`` is an int32 written without a plus sign
      or leading zeros (``GetDeletionCostFromPodAnnotations``, [:215], Invalid).

The seccomp and AppArmor annotations the same function checks are ``pod.pod_confinement``'s.
A label or annotation value that is not a string (``version: 1``, ``enabled: true`` unquoted in
YAML) would not decode into a pod (``ObjectMeta``'s ``map[string]string``): the controller
copies it, and every pod create fails with 400, while the CRD's schema lets it through, so each
is Invalid at its own path, ``must be a string``. Labels or annotations that are not a map are
Invalid at ``labels`` or ``annotations``, as rule 0 (the controller would drop them). A ``null``
value decodes into ``""`` and is judged as that. ``template_metadata`` applies rules 1 and 2
after rule 0; it returns at once for a template without labels or annotations
(``ReplicaFacts.template_metadata`` is None, the usual job), and passes over labels all found
valid in an earlier review with one set lookup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.digits import INT32, INT64
from torchgate.pytorchjob.fieldpath import ErrorType, FieldError, FieldPath, invalid
from torchgate.pytorchjob.taints import Toleration, toleration_errors
from torchgate.webhook.validation.facts import (
    NONE,
    OBJECT,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    at,
    remember_valid,
)

ANNOTATION_TOLERATIONS: Final = "scheduler.alpha.kubernetes.io/tolerations"
ANNOTATION_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
ANNOTATIONS_SIZE_MAX: Final = 256 * 1024  # bytes of keys and values: TotalAnnotationSizeLimitB
# The controller's own annotations on a pod at their longest (``build_pod`` calls the same
# function): the largest gang attempt on a node of the longest name, so that a template admitted
# fits every pod, whatever its node and attempt.
OWN_ANNOTATIONS: Final = names.longest_own_pod_annotations()
_OWN_ANNOTATIONS_SIZE: Final = sum(len(key) + len(value) for key, value in OWN_ANNOTATIONS.items())
_NOT_AN_OBJECT: Final = (
    "must be an object (a pod's ObjectMeta: labels, annotations): no PodTemplateSpec decodes it"
)
_NOT_A_MAP: Final = "must map keys to strings: a pod's metadata holds no other value"
_NOT_A_STRING: Final = "must be a string (quote it): a pod's metadata holds no other value"
_DIGITS: Final = frozenset("0123456789")
_LEADING_DIGITS: Final = frozenset("123456789")


def template_metadata(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Rules 0 to 2: nothing to do without labels and annotations, or labels seen valid."""
    metadata = replica.template_metadata
    if metadata is None:
        return NONE
    if not isinstance(metadata, OBJECT):
        path = at(replica.path, "template", "metadata")
        return [invalid(path, metadata, _NOT_AN_OBJECT)]
    labels = metadata.get("labels")
    found = NONE
    if labels is not None:
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
    labels = metadata.get("labels") if isinstance(metadata, OBJECT) else None
    if labels is None:
        return NONE
    path = at(replica.path, "template", "metadata", "labels")
    if not isinstance(labels, OBJECT):
        return [invalid(path, labels, _NOT_A_MAP)]
    found: list[Finding] = []
    for key, value in labels.items():
        if key in names.POD_LABELS:
            continue  # the controller's value replaces the template's
        where = path.key(key)
        if value is None:
            value = ""  # what Go decodes a null into
        elif not isinstance(value, str):
            found.append(invalid(where, value, _NOT_A_STRING))
            continue
        key_errors, value_errors = names.label_key_errors(key), names.label_value_errors(value)
        found.extend(invalid(where, key, message) for message in key_errors)
        found.extend(invalid(where, value, message) for message in value_errors)
        if not key_errors and not value_errors:
            remember_valid(_VALID_LABELS, (key, value), most=_VALID_KEPT)
    return found


def template_annotations(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Keys, total size, the mirror, tolerations and deletion-cost annotations (rule 2)."""
    metadata = replica.template_metadata
    annotations = metadata.get("annotations") if isinstance(metadata, OBJECT) else None
    if annotations is None:
        return NONE
    path = at(replica.path, "template", "metadata", "annotations")
    if not isinstance(annotations, OBJECT):
        return [invalid(path, annotations, _NOT_A_MAP)]
    found: list[Finding] = []
    size = _OWN_ANNOTATIONS_SIZE
    for key, value in annotations.items():
        if key in OWN_ANNOTATIONS:
            continue  # the controller's value replaces the template's
        where = path.key(key)
        if value is None:
            value = ""  # what Go decodes a null into
        elif not isinstance(value, str):
            found.append(invalid(where, value, _NOT_A_STRING))
            continue
        size += _utf8_length(key) + _utf8_length(value)
        if key not in _VALID_ANNOTATION_KEYS:
            key_errors = annotation_key_errors(key)
            found.extend(invalid(where, key, message) for message in key_errors)
            if not key_errors:
                remember_valid(_VALID_ANNOTATION_KEYS, key, most=_VALID_KEPT)
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
            f"annotations, the controller's {', '.join(OWN_ANNOTATIONS)} included, at "
            f"their longest): these have up to {size}"
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
    return int(value) in INT32


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
            tolerations.append(Toleration(operator=""))
            continue
        if not isinstance(item, _Members):
            return "cannot unmarshal into core.Toleration: not a JSON object"
        fields: dict[str, Any] = {}
        for name, value in item:
            field = _TOLERATION_FIELDS.get(name.replace("\u017f", "s").lower())
            if field is None:
                continue
            if field == "seconds":
                if value is not None and (type(value) is not int or value not in INT64):
                    return f"cannot unmarshal {value!r} into tolerationSeconds (int64)"
                fields[field] = value
            elif value is not None:
                if not isinstance(value, str):
                    return f"cannot unmarshal {value!r} into {name} (string)"
                fields[field] = value
        tolerations.append(Toleration(**{"operator": "", **fields}))
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


# Labels (key, value) and annotation keys found valid, kept across reviews: jobs mostly carry
# the same few (``app: x`` on every template), and one C-level set lookup per template costs far
# less than the checks' regular expressions (``facts.remember_valid``).
_VALID_LABELS: Final[set[tuple[str, str]]] = set()
_VALID_ANNOTATION_KEYS: Final[set[str]] = set()
_VALID_KEPT: Final = 4096


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
    "tolerationseconds": "seconds",
}


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))

"""A line-by-line Python copy of the apiserver's checks of a pod's labels and annotations.

k8s.io/apimachinery v0.37.2 ``pkg/api/validate/content/kube.go`` (``IsLabelKey``,
``IsLabelValue``), ``dns.go`` (``IsDNS1123Subdomain``), ``pkg/api/validation/objectmeta.go``
(``ValidateAnnotations``, ``ValidateAnnotationsSize``), ``pkg/apis/meta/v1/validation``
(``ValidateLabels``); k8s.io/kubernetes v1.37.2 ``pkg/apis/core/validation/validation.go``
(``ValidatePodSpecificAnnotations`` without its seccomp and AppArmor parts,
``ValidateTolerationsInPodAnnotations``, ``ValidateTolerations``) and ``pkg/apis/core/helper``
(``GetTolerationsFromPodAnnotations``, ``GetDeletionCostFromPodAnnotations``), with Go's
``encoding/json`` (go1.26) decoding the tolerations. The tests hold ``podmetadata`` to it; the
dry-run e2e holds both to the apiserver. It returns (error type, path in the pod) pairs, with
the webhook's paths: a key's or a tolerations value's error at ``metadata.annotations[<key>]``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from torchgate.pytorchjob.fieldpath import ErrorType

INVALID, NOT_SUPPORTED, TOO_LONG = ErrorType.INVALID, ErrorType.NOT_SUPPORTED, ErrorType.TOO_LONG

LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_KEY_RE = re.compile("^" + LABEL_KEY_FMT + "$")
LABEL_VALUE_RE = re.compile("^(" + LABEL_KEY_FMT + ")?$")
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_RE = re.compile("^" + DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*" + "$")
TOLERATIONS_KEY = "scheduler.alpha.kubernetes.io/tolerations"
DELETION_COST_KEY = "controller.kubernetes.io/pod-deletion-cost"
MIRROR_KEY = "kubernetes.io/config.mirror"


def golen(text: str) -> int:
    """Go's ``len``: UTF-8 bytes (Go reads a lone surrogate as U+FFFD, 3 bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


def match(regexp: re.Pattern[str], text: str) -> bool:
    """Go's ``MatchString`` of a ``^...$`` regexp: ``$`` is the end of text, no newline."""
    return regexp.search(text) is not None and "\n" not in text[-1:]


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if golen(value) > 253:
        errs.append("max")
    if not match(DNS1123_SUBDOMAIN_RE, value):
        errs.append("regex")
    return errs


def is_label_key(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts[0], parts[1]
        if len(prefix) == 0:
            errs.append("prefix empty")
        elif msgs := is_dns1123_subdomain(prefix):
            errs.extend("prefix " + m for m in msgs)
    else:
        return [*errs, "a valid label key"]
    if len(name) == 0:
        errs.append("name empty")
    elif golen(name) > 63:
        errs.append("name max")
    if not match(LABEL_KEY_RE, name):
        errs.append("name regex")
    return errs


def is_label_value(value: str) -> list[str]:
    errs = []
    if golen(value) > 63:
        errs.append("max")
    if not match(LABEL_VALUE_RE, value):
        errs.append("regex")
    return errs


def go_to_lower(text: str) -> str:
    """``strings.ToLower``: ``unicode.ToLower`` rune by rune (simple case mapping)."""
    return "".join("i" if c == "\u0130" else c.lower() for c in text)


def labels_refusals(labels: dict[str, str]) -> list[tuple[ErrorType, str]]:
    """``ValidateLabels``, at each label's path."""
    refused = []
    for k, v in labels.items():
        refused += [(INVALID, f"metadata.labels[{k}]")] * len(is_label_key(k))
        refused += [(INVALID, f"metadata.labels[{k}]")] * len(is_label_value(v))
    return refused


def annotations_refusals(annotations: dict[str, str]) -> list[tuple[ErrorType, str]]:
    """``ValidateAnnotations`` and ``ValidatePodSpecificAnnotations`` (no seccomp, AppArmor)."""
    refused = []
    for k in annotations:
        refused += [(INVALID, annotation(k))] * len(is_label_key(go_to_lower(k)))
    total = 0
    for k, v in annotations.items():
        total += golen(k) + golen(v)
    if total > 256 * (1 << 10):
        refused.append((TOO_LONG, "metadata.annotations"))
    if MIRROR_KEY in annotations:  # len(spec.NodeName) == 0: the controller never sets it
        refused.append((INVALID, annotation(MIRROR_KEY)))
    if annotations.get(TOLERATIONS_KEY, "") != "":
        refused += tolerations_in_annotations(annotations[TOLERATIONS_KEY])
    if DELETION_COST_KEY in annotations and not deletion_cost_ok(annotations[DELETION_COST_KEY]):
        refused.append((INVALID, annotation(DELETION_COST_KEY)))
    return refused


def annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"


def deletion_cost_ok(value: str) -> bool:
    """``validFirstDigit`` then ``strconv.ParseInt(value, 10, 32)``."""
    if len(value) == 0:
        return False
    if not (value[0] == "-" or (value[0] == "0" and value == "0") or "1" <= value[0] <= "9"):
        return False
    s = value
    if s[0] in "+-":
        s = s[1:]
    if s == "" or any(c not in "0123456789" for c in s):
        return False
    return -(2**31) <= int(value) <= 2**31 - 1


class GoDecodeError(Exception):
    pass


class GoObject(list[tuple[str, Any]]):
    """A JSON object's members, in order, repeats kept."""


def json_unmarshal_tolerations(data: str) -> list[dict[str, Any]]:
    """``json.Unmarshal(data, &[]core.Toleration)``; raises ``GoDecodeError``."""

    def no_constants(name: str) -> Any:
        raise GoDecodeError(name)

    try:
        value = json.loads(data, object_pairs_hook=GoObject, parse_constant=no_constants)
    except (ValueError, RecursionError) as error:
        raise GoDecodeError(str(error)) from error
    if value is None:
        return []
    if type(value) is not list:  # a GoObject is an object
        raise GoDecodeError("not an array")
    out = []
    failed = False
    for element in value:
        toleration: dict[str, Any] = {
            "key": "",
            "operator": "",
            "value": "",
            "effect": "",
            "tolerationSeconds": None,
        }
        if element is None:
            out.append(toleration)
            continue
        if not isinstance(element, GoObject):
            raise GoDecodeError("not an object")
        for name, member in element:
            field = fold_field(name)
            if field is None:
                continue
            if field == "tolerationSeconds":
                if member is None:
                    toleration[field] = None
                elif isinstance(member, int) and not isinstance(member, bool):
                    if -(2**63) <= member <= 2**63 - 1:
                        toleration[field] = member
                    else:
                        failed = True
                else:
                    failed = True
            elif member is None:
                pass  # null into a string: no change
            elif isinstance(member, str):
                toleration[field] = member
            else:
                failed = True
        out.append(toleration)
    if failed:
        raise GoDecodeError("type mismatch")
    return out


def fold_field(name: str) -> str | None:
    """The ``core.Toleration`` field a JSON member name sets (``foldName``, go1.26)."""

    def fold(text: str) -> str:
        return "".join({"\u212a": "K", "\u017f": "S"}.get(c, c.upper()) for c in text)

    for field in ("key", "operator", "value", "effect", "tolerationSeconds"):
        if name == field or fold(name) == fold(field):
            return field
    return None


def tolerations_in_annotations(data: str) -> list[tuple[ErrorType, str]]:
    """``ValidateTolerationsInPodAnnotations``, the gate of ``Lt``/``Gt`` off."""
    try:
        tolerations = json_unmarshal_tolerations(data)
    except GoDecodeError:
        return [(INVALID, annotation(TOLERATIONS_KEY))]
    refused = []
    for i, t in enumerate(tolerations):
        at = f"{annotation(TOLERATIONS_KEY)}[{i}]"
        if len(t["key"]) > 0:
            refused += [(INVALID, f"{at}.key")] * len(is_label_key(t["key"]))
        if len(t["key"]) == 0 and t["operator"] != "Exists":
            refused.append((INVALID, f"{at}.operator"))
        if t["tolerationSeconds"] is not None and t["effect"] != "NoExecute":
            refused.append((INVALID, f"{at}.effect"))
        if t["operator"] in ("Equal", ""):
            if is_label_value(t["value"]):
                refused.append((INVALID, f"{at}.operator"))  # the messages joined: one error
        elif t["operator"] == "Exists":
            if len(t["value"]) > 0:
                refused.append((INVALID, f"{at}.operator"))
        else:  # Lt, Gt without AllowTaintTolerationComparisonOperators, or unknown
            refused.append((NOT_SUPPORTED, f"{at}.operator"))
        if len(t["effect"]) > 0 and t["effect"] not in (
            "NoSchedule",
            "PreferNoSchedule",
            "NoExecute",
        ):
            refused.append((NOT_SUPPORTED, f"{at}.effect"))
    return refused

"""The PyTorchJob CRD's schema, applied as the apiserver applies it before the webhook is asked.

``kubectl apply`` validates strictly by default (``--validate=strict``: server-side field
validation), so the apiserver refuses a PyTorchJob that has fields its CRD does not declare
(HTTP 400, ``strict decoding error: unknown field "spec.foo"``) while decoding it, before any
admission webhook runs; and it refuses one whose declared fields have the wrong type (422 Invalid,
``spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: "string": ... must be of type
integer``) after the mutating webhook and before the validating one, whose rules are then never
reached. ``torchgate check`` promises the cluster's verdict offline, so
it applies the same schema at the same steps (``pytorchjob.manifests`` rule 8, ``webhook.check``).

Rules:

1. The schema is the served version of the product's own PyTorchJob CRD
   (``manifests/crds/kubeflow.org_pytorchjobs.yaml``), which every function takes as an argument
   (``crd_version``, from ``served_version`` of the CRD's text). This module reads no file: the
   shell that reads manifests reads the CRD too (``torchgate.kube.manifestfiles``, from the
   product's package data), so a checkout and an installed wheel are judged by the same schema
   and a test can hand in any schema.
2. An unknown field is a key of an object whose schema lists ``properties`` and neither keeps
   unknown fields (``x-kubernetes-preserve-unknown-fields``) nor maps keys
   (``additionalProperties``); ``metadata`` is the apiserver's ``ObjectMeta``, whose fields are
   ``OBJECT_META_FIELDS`` (``clusterName`` is gone since Kubernetes 1.25). Paths are the
   apiserver's: dotted, map keys too, list items in brackets (``unknown_fields``). An unknown
   field is one whatever its value; a known one that is ``null`` is not looked into.
3. A value of the wrong type for its schema (``integer``, ``number``, ``string``, ``boolean``,
   ``object``, ``array``, int-or-string) is ``FieldValueTypeInvalid`` at the apiserver's path,
   its bad value the JSON type found (``type_errors``); nothing below it is looked at. A number
   at an ``integer`` schema is judged by rule 6.
4. The scale subresource's ``specReplicasPath`` (``.spec.pytorchReplicaSpecs.Worker.replicas``),
   when present, holds an int64 (a JSON integer the apiserver decodes as one) from 0 to the
   int32 limit: else ``FieldValueInvalid`` at that path as written, leading dot included (the
   apiextensions ``ValidateScaleSpec``), besides rules 3 and 6's errors (``scale_errors``).
5. An unknown field comes with where it belongs, when it is one level off as manifests often
   have it (``unknown_field_hint``): a ``spec`` field of ``runPolicy`` moved there in
   ``kubeflow.org/v1``, one of ``elasticPolicy`` belongs there; a replica's container field
   (``CONTAINER_FIELDS``), pod field (``POD_FIELDS``) or pod metadata belongs in its
   ``template``. Any other unknown field of an object with declared fields is told the fields
   it has (metadata's are Kubernetes' own, not listed). This is the one declaration of these
   hints: the webhook never sees an unknown field (the apiserver refuses it under
   ``fieldValidation=Strict`` and drops it under ``Warn`` or ``Ignore``, before admission).
6. A number at an ``integer`` schema is judged as kube-openapi judges the apiserver's value
   (``integer_errors``). A job's numbers are read as the webhook is sent them
   (``yamlinput`` rule 4), where an integer beyond int64 prints as an integer; the apiserver
   holds it as the float64 it decoded it to. A float64 is an integer when it is whole, or within
   a relative 1e-9 of it, and within +-(2**53 - 1) (go-openapi's ``IsFloat64AJSONInteger``),
   else ``FieldValueTypeInvalid`` at the field, its bad value ``"float64"``, measured against
   the schema's ``format`` (``must be of type int32``). Any number must also print (Go's
   ``'f'`` format) as an integer of the format's range (``IsValueValidAgainstRange``): else
   ``FieldValueInvalid`` without a path (a nil ``field.Path`` prints ``<nil>``), ``Checked
   value must be of type integer with format int32 in <field>``.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any, Final

import yaml

from torchgate.pytorchjob.digits import INT32, INT64
from torchgate.pytorchjob.fieldpath import ErrorType, FieldError, FieldPath, invalid

SERVER_SET_METADATA: Final = frozenset(
    {
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)
"""The fields of ``metav1.ObjectMeta`` the apiserver sets on an object, never its author."""

OBJECT_META_FIELDS: Final = SERVER_SET_METADATA | {
    "name",
    "generateName",
    "namespace",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
}
"""The fields of ``metav1.ObjectMeta`` the apiserver decodes ``metadata`` into (rule 2)."""

_METADATA: Final = FieldPath.root("metadata")
_SPEC: Final = FieldPath.root("spec")
_REPLICA_SPECS: Final = _SPEC.child("pytorchReplicaSpecs")
_RUN_POLICY: Final = _SPEC.child("runPolicy")
_ELASTIC_POLICY: Final = _SPEC.child("elasticPolicy")

CONTAINER_FIELDS: Final = frozenset(
    {
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "env",
        "envFrom",
        "resources",
        "volumeMounts",
        "ports",
        "securityContext",
        "workingDir",
    }
)
"""Container fields a replica spec is often given instead of its template's containers (rule 5)."""

POD_FIELDS: Final = frozenset(
    {
        "containers",
        "initContainers",
        "volumes",
        "nodeSelector",
        "tolerations",
        "affinity",
        "schedulerName",
        "hostNetwork",
        "serviceAccountName",
        "priorityClassName",
    }
)
"""Pod fields a replica spec is often given instead of its template's spec (rule 5)."""

POD_METADATA_FIELDS: Final = frozenset({"labels", "annotations"})
"""Pod metadata a replica spec is often given instead of its template's metadata (rule 5)."""

NO_PATH: Final = FieldPath.root("<nil>")
"""Where the apiserver says an error is that kube-openapi gave no path (rule 6)."""

_INTEGER_FORMATS: Final = {
    "int32": INT32,
    "uint32": range(2**32),
    "uint64": range(2**64),
    "int64": INT64,
    "": INT64,
}
"""The integers each ``format`` of an ``integer`` schema holds (rule 6; int64 by default)."""
_JSON_INTEGER_LIMIT: Final = 2**53 - 1
_JSON_INTEGER_EPSILON: Final = 1e-9

_JSON_TYPES: Final = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    # YAML timestamps stay strings in kubectl's YAML-to-JSON conversion (PyYAML builds dates).
    "string": lambda v: isinstance(v, str | datetime.date),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def served_version(crd_text: str) -> Mapping[str, Any]:
    """The one served version of the PyTorchJob CRD whose YAML is ``crd_text`` (rule 1)."""
    crd = yaml.safe_load(crd_text)
    (version,) = crd["spec"]["versions"]
    return version  # type: ignore[no-any-return]


def _schema(crd_version: Mapping[str, Any]) -> Mapping[str, Any]:
    return crd_version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def unknown_fields(job: Mapping[str, Any], *, crd_version: Mapping[str, Any]) -> list[FieldPath]:
    """The paths of the fields the CRD does not declare, in document order (rule 2)."""
    return list(_unknown(job, _schema(crd_version), FieldPath()))


def _unknown(value: Any, schema: Mapping[str, Any], path: FieldPath) -> Iterator[FieldPath]:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        entries = schema.get("additionalProperties")
        for key, item in value.items():
            child = path.child(str(key))
            if path == _METADATA:
                item_schema = None
                if key not in OBJECT_META_FIELDS:
                    yield child
            elif properties is not None and key in properties:
                item_schema = properties[key]
            elif isinstance(entries, dict):
                item_schema = entries
            else:
                item_schema = None
                if properties is not None:
                    yield child
            if item_schema is not None and item is not None:
                yield from _unknown(item, item_schema, child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _unknown(item, schema["items"], path.index(index))


def unknown_field_hint(path: FieldPath, *, crd_version: Mapping[str, Any]) -> str | None:
    """Where the unknown field at ``path`` belongs, or the fields its object has (rule 5)."""
    parent, key = FieldPath(path.segments[:-1], path.keyed[:-1]), path.segments[-1]
    if parent == _METADATA or not isinstance(key, str):
        return None
    if parent == _SPEC and key in _declared(_schema_at(_RUN_POLICY, crd_version)):
        return f"moved to {_RUN_POLICY.child(key)} in kubeflow.org/v1"
    if parent == _SPEC and key in _declared(_schema_at(_ELASTIC_POLICY, crd_version)):
        return f"belongs in {_ELASTIC_POLICY.child(key)}"
    if len(parent.segments) == 3 and parent.segments[:2] == _REPLICA_SPECS.segments:
        for fields, place in (
            (CONTAINER_FIELDS, "template.spec.containers[*]"),
            (POD_FIELDS, "template.spec"),
            (POD_METADATA_FIELDS, "template.metadata"),
        ):
            if key in fields:
                return f"belongs in {parent}.{place}"
    declared = _declared(_schema_at(parent, crd_version))
    if not declared:
        return None
    return f"the fields of {str(parent) or 'a PyTorchJob'} are {', '.join(declared)}"


def _declared(schema: Mapping[str, Any] | None) -> list[str]:
    return sorted((schema or {}).get("properties") or {})


def _schema_at(path: FieldPath, crd_version: Mapping[str, Any]) -> Mapping[str, Any] | None:
    schema: Mapping[str, Any] | None = _schema(crd_version)
    for segment in path.segments:
        if schema is None:
            return None
        if isinstance(segment, int):
            schema = schema.get("items") if isinstance(schema.get("items"), dict) else None
            continue
        properties, entries = schema.get("properties") or {}, schema.get("additionalProperties")
        schema = properties.get(segment, entries if isinstance(entries, dict) else None)
    return schema


def type_errors(job: Mapping[str, Any], *, crd_version: Mapping[str, Any]) -> list[FieldError]:
    """Values of the wrong type for the CRD, where the apiserver reports them (rule 3)."""
    return list(_mistyped(job, _schema(crd_version), FieldPath()))


def _mistyped(value: Any, schema: Mapping[str, Any], path: FieldPath) -> Iterator[FieldError]:
    if value is None:
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not _JSON_TYPES["integer"](value) and not isinstance(value, str):
            yield _type_invalid(path, value, "must be of type integer or string")
        return
    expected = schema.get("type")
    if expected == "integer" and _JSON_TYPES["number"](value):
        yield from integer_errors(value, schema, path)
        return
    if expected in _JSON_TYPES and not _JSON_TYPES[expected](value):
        yield _type_invalid(path, value, f"must be of type {expected}")
        return
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        properties, entries = schema.get("properties") or {}, schema.get("additionalProperties")
        for key, item in value.items():
            item_schema = properties.get(key, entries if isinstance(entries, dict) else None)
            if item_schema is not None:
                yield from _mistyped(item, item_schema, path.child(str(key)))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _mistyped(item, schema["items"], path.index(index))


def integer_errors(
    number: int | float, schema: Mapping[str, Any], path: FieldPath
) -> Iterator[FieldError]:
    """kube-openapi's type and range checks of a number at an ``integer`` schema (rule 6)."""
    # An integer beyond int64 is a float64 to the apiserver (and never test a float's
    # membership of a range: Python compares it with each of the range's integers).
    held = number if isinstance(number, int) and number in INT64 else _as_float64(number)
    integer_format = schema.get("format") or ""
    if isinstance(held, float) and not _is_json_integer(held):
        if integer_format:
            detail = f'{path} in body must be of type {integer_format}: "float64"'
            yield FieldError(ErrorType.TYPE_INVALID, path, detail, "float64")
        else:
            yield _type_invalid(path, held, "must be of type integer")
    printed = held if isinstance(held, int) else _printed_integer(held)
    if printed is None or printed not in _INTEGER_FORMATS.get(integer_format, INT64):
        kind = f"with format {integer_format}" if integer_format else "(default format)"
        yield invalid(NO_PATH, "", f"Checked value must be of type integer {kind} in {path}")


def _as_float64(number: float) -> float:
    """The float64 of a number (an integer beyond every float64: infinite, as Go overflows)."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def _printed_integer(number: float) -> int | None:
    """The integer Go's ``'f'`` format prints a float64 as, if it prints one (shortest digits)."""
    return int(Decimal(repr(number))) if math.isfinite(number) and number.is_integer() else None


def _is_json_integer(number: float) -> bool:
    if not math.isfinite(number) or abs(number) > _JSON_INTEGER_LIMIT:
        return False
    magnitude = math.floor(abs(number))
    if abs(number) - magnitude >= 0.5:  # Go's math.Round: halves away from zero
        magnitude += 1
    difference = abs(abs(number) - magnitude)
    return difference == 0 or (magnitude != 0 and difference < _JSON_INTEGER_EPSILON * magnitude)


def _type_invalid(path: FieldPath, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.TYPE_INVALID, path, f"{path} in body {detail}", _json_type(value))


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "object", "array"):
        if _JSON_TYPES[name](value):
            return name
    return "null"


def scale_errors(job: Mapping[str, Any], *, crd_version: Mapping[str, Any]) -> list[FieldError]:
    """The scale subresource's replicas path holds an integer when present (rule 4)."""
    written = crd_version.get("subresources", {}).get("scale", {}).get("specReplicasPath")
    if not written:
        return []
    value: Any = job
    for key in written.lstrip(".").split("."):
        if not isinstance(value, dict) or value.get(key) is None:
            return []
        value = value[key]
    path = FieldPath.root(written)
    if type(value) is not int or value not in INT64:  # a float64 to the apiserver (rule 6)
        return [invalid(path, value, "should be an integer")]
    if value < 0:
        return [invalid(path, value, "should be a non-negative integer")]
    if value not in INT32:
        return [invalid(path, value, f"should be less than or equal to {INT32.stop - 1}")]
    return []

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
   its bad value the JSON type found (``type_errors``); nothing below it is looked at.
4. The scale subresource's ``specReplicasPath`` (``.spec.pytorchReplicaSpecs.Worker.replicas``),
   when present, holds an integer: else ``FieldValueInvalid`` at that path as written, leading
   dot included (the apiextensions ``ValidateScaleSpec``), besides rule 3's error
   (``scale_errors``).
5. An unknown field comes with where it belongs, when it is one level off as manifests often
   have it (``unknown_field_hint``): a ``spec`` field of ``runPolicy`` moved there in
   ``kubeflow.org/v1``, one of ``elasticPolicy`` belongs there; a replica's container field
   (``CONTAINER_FIELDS``), pod field (``POD_FIELDS``) or pod metadata belongs in its
   ``template``. Any other unknown field of an object with declared fields is told the fields
   it has (metadata's are Kubernetes' own, not listed). This is the one declaration of these
   hints: the webhook never sees an unknown field (the apiserver refuses it under
   ``fieldValidation=Strict`` and drops it under ``Warn`` or ``Ignore``, before admission).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any, Final

import yaml

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
    if _JSON_TYPES["integer"](value):
        return []
    return [invalid(FieldPath.root(written), value, "should be an integer")]

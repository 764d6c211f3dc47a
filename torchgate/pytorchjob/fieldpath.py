"""Field paths and field errors shaped like Kubernetes' ``k8s.io/apimachinery/.../field`` package.

Why mirror Kubernetes instead of inventing a format: the apiserver, ``kubectl`` and every
controller print validation failures as ``<path>: <Type text>: <value>: <detail>`` and send them to
clients as ``details.causes[]`` of a ``Status`` with reason ``Invalid``. Users (and their tooling)
already know how to read those, and tests can compare ``(type, path)`` pairs instead of prose.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class ErrorType(enum.Enum):
    """The Kubernetes ``field.ErrorType`` values this project emits (value = the cause type)."""

    REQUIRED = "FieldValueRequired"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    FORBIDDEN = "FieldValueForbidden"
    DUPLICATE = "FieldValueDuplicate"
    TOO_LONG = "FieldValueTooLong"
    NOT_FOUND = "FieldValueNotFound"
    TYPE_INVALID = "FieldValueTypeInvalid"

    @property
    def text(self) -> str:
        """The human text Kubernetes prints for this type (``field.ErrorType.String``)."""
        return _TYPE_TEXT[self]


_TYPE_TEXT = {
    ErrorType.REQUIRED: "Required value",
    ErrorType.INVALID: "Invalid value",
    ErrorType.NOT_SUPPORTED: "Unsupported value",
    ErrorType.FORBIDDEN: "Forbidden",
    ErrorType.DUPLICATE: "Duplicate value",
    ErrorType.TOO_LONG: "Too long",
    ErrorType.NOT_FOUND: "Not found",
    ErrorType.TYPE_INVALID: "Invalid value",
}

# Kubernetes omits the offending value for these types (field.Error.ErrorBody).
_VALUELESS = {ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG}


@dataclass(frozen=True, slots=True)
class FieldPath:
    """An immutable path into an object; renders like ``field.Path.String()``.

    ``FieldPath.root("spec").child("pytorchReplicaSpecs").key("Worker")`` renders as
    ``spec.pytorchReplicaSpecs[Worker]``; map keys and list indexes both print in brackets.
    """

    segments: tuple[str | int, ...] = ()
    # True for segments that are map keys (rendered ``[k]``); parallel to ``segments``.
    keyed: tuple[bool, ...] = ()
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def root(cls, *names: str) -> FieldPath:
        """A path that starts at ``names`` (``root("spec", "runPolicy")``)."""
        return cls(tuple(names), (False,) * len(names))

    def child(self, *names: str) -> FieldPath:
        """Descend into object fields."""
        return FieldPath(self.segments + names, self.keyed + (False,) * len(names))

    def key(self, key: str) -> FieldPath:
        """Descend into a map entry."""
        return FieldPath((*self.segments, key), (*self.keyed, True))

    def index(self, index: int) -> FieldPath:
        """Descend into a list element."""
        return FieldPath((*self.segments, index), (*self.keyed, False))

    def __str__(self) -> str:
        # A path renders once: warnings and errors of every review print the same few paths
        # (defaulting and the rules share their path objects), and rendering is most of the
        # cost of a warning. The text is kept beside the fields; it takes no part in equality.
        text = self._text
        if text is None:
            text = _render(self.segments, self.keyed)
            object.__setattr__(self, "_text", text)
        return text


def _render(segments: tuple[str | int, ...], keyed: tuple[bool, ...]) -> str:
    out: list[str] = []
    for segment, is_key in zip(segments, keyed, strict=True):
        if is_key or isinstance(segment, int):
            out.append(f"[{segment}]")
        elif out:
            out.append(f".{segment}")
        else:
            out.append(segment)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation failure: what kind, where, and why (``field.Error``)."""

    type: ErrorType
    path: FieldPath
    detail: str = ""
    bad_value: Any = None

    @property
    def field(self) -> str:
        """The rendered path, as sent in ``details.causes[].field``."""
        return str(self.path)

    def body(self) -> str:
        """The message without the path, as sent in ``details.causes[].message``."""
        text = self.type.text
        if self.type not in _VALUELESS:
            text = f"{text}: {render_value(self.bad_value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


@dataclass(frozen=True, slots=True)
class FieldWarning:
    """A ``torchgate:`` warning about one field: admitted, but probably not what was meant."""

    path: FieldPath
    text: str
    _rendered: str | None = field(default=None, init=False, repr=False, compare=False)

    def render(self) -> str:
        """The AdmissionReview warning string (``torchgate: <path>: <text>``)."""
        rendered = self._rendered  # kept, like a path's text: warnings are often shared
        if rendered is None:
            rendered = f"torchgate: {self.path}: {self.text}"
            object.__setattr__(self, "_rendered", rendered)
        return rendered


def render_warnings(warnings: Iterable[FieldWarning]) -> tuple[str, ...]:
    """The warning strings an AdmissionReview response (and ``torchgate check``) carries."""
    # A warning rendered before (most are: they are shared) is read, not rendered again.
    return tuple([w._rendered if w._rendered is not None else w.render() for w in warnings])


def render_value(value: Any) -> str:
    """Render a bad value the way Kubernetes does: strings quoted, others as JSON."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def required(path: FieldPath, detail: str) -> FieldError:
    """``field.Required``."""
    return FieldError(ErrorType.REQUIRED, path, detail)


def invalid(path: FieldPath, value: Any, detail: str) -> FieldError:
    """``field.Invalid``."""
    return FieldError(ErrorType.INVALID, path, detail, value)


def not_supported(path: FieldPath, value: Any, supported: Iterable[str]) -> FieldError:
    """``field.NotSupported`` with Kubernetes' "supported values" detail."""
    values = ", ".join(json.dumps(v) for v in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, path, f"supported values: {values}", value)


def forbidden(path: FieldPath, detail: str) -> FieldError:
    """``field.Forbidden``."""
    return FieldError(ErrorType.FORBIDDEN, path, detail)


def duplicate(path: FieldPath, value: Any, detail: str = "") -> FieldError:
    """``field.Duplicate``."""
    return FieldError(ErrorType.DUPLICATE, path, detail, value)


def dedupe(errors: Iterable[FieldError]) -> list[FieldError]:
    """Drop exact repeats while keeping order (``ErrorList.ToAggregate`` does the same)."""
    seen: set[tuple[ErrorType, str, str]] = set()
    out: list[FieldError] = []
    for error in errors:
        marker = (error.type, error.field, error.body())
        if marker not in seen:
            seen.add(marker)
            out.append(error)
    return out


def object_header(raw: Mapping[str, Any], kind: str) -> tuple[str, list[FieldError]]:
    """The ``metadata.name`` of a stored object (``""`` when missing) and the errors of its header.

    The name must be a non-empty string; ``kind``, when present, must be ``kind``.
    """
    errors: list[FieldError] = []
    metadata = raw.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        errors.append(required(FieldPath.root("metadata", "name"), "must be set"))
        name = ""
    if raw.get("kind") not in (None, kind):
        errors.append(not_supported(FieldPath.root("kind"), raw.get("kind"), [kind]))
    return name, errors

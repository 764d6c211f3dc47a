"""Typed API errors: one small hierarchy for every caller of the apiserver (as kopf's errors).

Callers say what they mean with them: ``AlreadyExists`` on a create of a deterministic name is
success, ``NotFound`` on a delete is success, ``Gone`` on a watch means re-list, ``Conflict`` means
re-read and retry, ``ServerError`` means retry with backoff. Pure: the mapping from an HTTP status
and a Status body to a class is a function of its inputs.

Rules:
- 404 -> ``NotFound``; 409 -> ``AlreadyExists`` when the Status reason says so, else ``Conflict``;
  410 -> ``Gone``; 401 -> ``Unauthorized``; 403 -> ``Forbidden``; 400 and 422 -> ``Invalid``;
  anything else (5xx, 429, a transport failure reported as status 0) -> ``ServerError``.
- A 403 whose Status names the cause ``NamespaceTerminating`` -> ``NamespaceTerminating``: the
  apiserver (its NamespaceLifecycle admission) refuses every create in a namespace being deleted,
  which no retry will change.
- A body that is not a JSON Status keeps its first 500 characters as the message.
- A 2xx answer (or a watch line) that is not JSON, a page of a web server or proxy the URL
  reaches instead of an apiserver or the pool service, is ``ServerError`` with its status and
  reason ``NotJSON`` (``not_json``): the caller's one line for a person, never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

MESSAGE_LIMIT = 500
# ``details.causes[].reason`` of the apiserver's 403 on a create in a terminating namespace.
NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"


class ApiError(Exception):
    """A failed API call: HTTP status (0: unreachable), the Status reason, message and body."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        self.body: dict[str, Any] = dict(body or {})


class NotFound(ApiError):
    """HTTP 404."""


class Conflict(ApiError):
    """HTTP 409 for an update with a stale resourceVersion."""


class AlreadyExists(Conflict):
    """HTTP 409 with reason AlreadyExists (a create of a name that exists)."""


class Gone(ApiError):
    """HTTP 410: the watch's resourceVersion is too old; re-list."""


class Unauthorized(ApiError):
    """HTTP 401: the apiserver rejected the credentials."""


class Forbidden(ApiError):
    """HTTP 403: RBAC denies the call."""


class NamespaceTerminating(Forbidden):
    """HTTP 403 on a create in a namespace being deleted (Status cause ``NamespaceTerminating``)."""


class Invalid(ApiError):
    """HTTP 422 (or 400): the object was refused, e.g. by an admission webhook."""


class ServerError(ApiError):
    """HTTP 5xx, 429 or a transport failure (status 0): retry with backoff."""


_BY_STATUS: dict[int, type[ApiError]] = {
    404: NotFound,
    409: Conflict,
    410: Gone,
    401: Unauthorized,
    403: Forbidden,
    400: Invalid,
    422: Invalid,
}


def error_class(status: int, reason: str) -> type[ApiError]:
    """The class for an HTTP status and the Status ``reason``."""
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists
    return _BY_STATUS.get(status, ServerError)


def unreachable(method: str, path: str, cause: BaseException | str) -> ServerError:
    """The error for a call that got no HTTP answer (refused, reset, timed out)."""
    text = cause if isinstance(cause, str) else (str(cause) or type(cause).__name__)
    return ServerError(0, "Unreachable", text, method, path)


def not_json(status: int, content_type: str, data: bytes, method: str, path: str) -> ServerError:
    """The error for an answer ``status`` whose body ``data`` is not JSON (a web page, say).

    It names the body's type and size, not its text: bodies are never quoted (``client``).
    """
    kind = content_type or "no Content-Type"
    message = f"an answer that is not JSON ({kind}, {len(data)} bytes)"
    return ServerError(status, "NotJSON", message, method, path)


def decode_error(status: int, data: bytes, method: str, path: str) -> ApiError:
    """The typed error for an HTTP answer ``status`` with body ``data``."""
    reason, message = "", data.decode("utf-8", "replace")[:MESSAGE_LIMIT]
    body: dict[str, Any] = {}
    try:
        decoded = orjson.loads(data)
    except orjson.JSONDecodeError:
        decoded = None
    if isinstance(decoded, dict):
        body = decoded
        reason = str(decoded.get("reason", ""))
        message = str(decoded.get("message", message))
    return status_error(status, reason, message, method, path, body=body)


def status_error(
    status: int,
    reason: str,
    message: str,
    method: str,
    path: str,
    *,
    body: Mapping[str, Any] | None = None,
) -> ApiError:
    """The typed error for a status, reason and message (a watch's ``ERROR`` event, say)."""
    kind = error_class(status, reason)
    if status == 403 and _has_cause(body, NAMESPACE_TERMINATING_CAUSE):
        kind = NamespaceTerminating
    return kind(status, reason, message, method, path, body=body)


def status_causes(body: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """A Status body's ``details.causes``, each its ``field``, ``reason`` and ``message``.

    Whatever is not a list of objects is no cause: the body may come from a server that is not
    an apiserver.
    """
    details = (body or {}).get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    if not isinstance(causes, list):
        return []
    return [
        {key: str(cause.get(key, "")) for key in ("field", "reason", "message")}
        for cause in causes
        if isinstance(cause, Mapping)
    ]


def status_details(body: Mapping[str, Any] | None) -> tuple[str, str]:
    """A Status body's ``details.kind`` and ``details.name`` (the object refused), "" if absent."""
    details = (body or {}).get("details")
    if not isinstance(details, Mapping):
        return "", ""
    return str(details.get("kind", "")), str(details.get("name", ""))


def _has_cause(body: Mapping[str, Any] | None, cause: str) -> bool:
    """Whether a Status body lists ``cause`` among its ``details.causes[].reason``."""
    return any(found["reason"] == cause for found in status_causes(body))

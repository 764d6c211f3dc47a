"""The access layer's typed errors: which class an HTTP answer becomes, and what it keeps."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchgate.kube.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NamespaceTerminating,
    NotFound,
    ServerError,
    Unauthorized,
    decode_error,
    error_class,
    status_causes,
    status_details,
    unreachable,
)


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (400, "BadRequest", Invalid),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", ServerError),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (0, "Unreachable", ServerError),
    ],
    ids=lambda value: str(value) if not isinstance(value, type) else value.__name__,
)
def test_status_and_reason_choose_the_class(
    status: int, reason: str, expected: type[ApiError]
) -> None:
    assert error_class(status, reason) is expected


def test_already_exists_is_a_conflict() -> None:
    # A caller that retries on Conflict also sees a create of an existing name.
    assert issubclass(AlreadyExists, Conflict)


def test_a_status_body_gives_reason_message_and_causes() -> None:
    body = {
        "kind": "Status",
        "code": 422,
        "reason": "Invalid",
        "message": "admission webhook denied the request",
        "details": {"causes": [{"field": "spec.x", "reason": "FieldValueInvalid"}]},
    }
    error = decode_error(422, json.dumps(body).encode(), "POST", "/apis/x")
    assert isinstance(error, Invalid)
    assert (error.status, error.reason, error.message) == (422, "Invalid", body["message"])
    assert error.body["details"]["causes"][0]["field"] == "spec.x"
    assert (error.method, error.path) == ("POST", "/apis/x")


def test_a_create_in_a_namespace_being_deleted_is_told_from_an_rbac_denial() -> None:
    # As kube-apiserver 1.37 answered a create in a terminating namespace.
    terminating = {
        "kind": "Status",
        "status": "Failure",
        "message": 'pods "p" is forbidden: unable to create new content in namespace ns because '
        "it is being terminated",
        "reason": "Forbidden",
        "details": {
            "name": "p",
            "kind": "pods",
            "causes": [
                {
                    "reason": "NamespaceTerminating",
                    "message": "namespace ns is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        },
        "code": 403,
    }
    denied = {**terminating, "details": {"name": "p", "kind": "pods"}}
    path = "/api/v1/namespaces/ns/pods"
    refused = decode_error(403, json.dumps(terminating).encode(), "POST", path)
    assert isinstance(refused, NamespaceTerminating)
    assert isinstance(refused, Forbidden)
    assert type(decode_error(403, json.dumps(denied).encode(), "POST", path)) is Forbidden


def test_a_body_that_is_not_a_status_is_kept_as_the_message_shortened() -> None:
    error = decode_error(502, b"<html>" + b"x" * 1000, "GET", "/api/v1/pods")
    assert isinstance(error, ServerError)
    assert error.reason == ""
    assert error.message.startswith("<html>")
    assert len(error.message) == 500
    assert error.body == {}


def test_no_answer_is_a_server_error_with_status_zero() -> None:
    error = unreachable("GET", "/readyz", ConnectionRefusedError())
    assert isinstance(error, ServerError)
    assert error.status == 0
    assert error.message == "ConnectionRefusedError"


@given(
    status=st.integers(min_value=0, max_value=599),
    reason=st.text(max_size=20),
    body=st.one_of(st.binary(max_size=200), st.dictionaries(st.text(max_size=10), st.text())),
)
def test_every_answer_becomes_exactly_one_typed_error(
    status: int, reason: str, body: bytes | dict[str, str]
) -> None:
    data = body if isinstance(body, bytes) else json.dumps({**body, "reason": reason}).encode()
    error = decode_error(status, data, "GET", "/p")
    assert isinstance(error, ApiError)
    assert type(error) is error_class(status, error.reason)
    assert error.status == status


@pytest.mark.parametrize(
    ("body", "causes", "details"),
    [
        (None, [], ("", "")),
        ({"details": "a string"}, [], ("", "")),
        ({"details": {"causes": "a string", "kind": "services"}}, [], ("services", "")),
        (
            {"details": {"causes": [{"field": "a", "reason": 1}, 2, {"message": None}]}},
            [
                {"field": "a", "reason": "1", "message": ""},
                {"field": "", "reason": "", "message": "None"},
            ],
            ("", ""),
        ),
    ],
    ids=["none", "details-not-an-object", "causes-not-a-list", "causes-mixed"],
)
def test_a_status_bodys_causes_and_details_are_read_whatever_the_body_holds(
    body: dict[str, object] | None, causes: list[dict[str, str]], details: tuple[str, str]
) -> None:
    assert status_causes(body) == causes
    assert status_details(body) == details

"""How ``torchgate certs`` words the access layer's typed errors: one line, the right class."""

from __future__ import annotations

import pytest

from torchgate.certs import store
from torchgate.kube.errors import ApiError, decode_error, unreachable
from torchgate.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, Resource


def raised(error: ApiError, verb: str, resource: Resource) -> store.CertsError:
    with pytest.raises(store.CertsError) as caught, store._api_errors(verb, resource, "x"):
        raise error
    return caught.value


def answer(status: int, reason: str) -> ApiError:
    body = f'{{"kind":"Status","code":{status},"reason":"{reason}","message":"m"}}'.encode()
    return decode_error(status, body, "GET", "/p")


@pytest.mark.parametrize(
    ("status", "reason", "verb", "expected"),
    [
        (404, "NotFound", "get", store.NotFound),
        (404, "NotFound", "create", store.NotFound),
        (404, "NotFound", "patch", store.Conflict),  # deleted since read: re-read decides
        (409, "Conflict", "patch", store.Conflict),
        (409, "AlreadyExists", "create", store.Conflict),
        (403, "Forbidden", "get", store.Forbidden),
        (401, "Unauthorized", "get", store.CertsError),
        (500, "InternalError", "get", store.CertsError),
    ],
)
def test_each_status_becomes_its_certs_error(
    status: int, reason: str, verb: str, expected: type[store.CertsError]
) -> None:
    error = raised(answer(status, reason), verb, SECRETS)
    assert type(error) is expected
    assert "\n" not in str(error)


def test_forbidden_names_the_verb_and_the_resource_to_grant() -> None:
    error = raised(answer(403, "Forbidden"), "patch", MUTATING_WEBHOOK_CONFIGURATIONS)
    assert '"patch"' in str(error)
    assert "mutatingwebhookconfigurations.admissionregistration.k8s.io" in str(error)


def test_no_answer_says_the_apiserver_is_unreachable() -> None:
    error = raised(unreachable("GET", "/p", ConnectionRefusedError("refused")), "get", SECRETS)
    assert type(error) is store.CertsError
    assert "unreachable" in str(error)

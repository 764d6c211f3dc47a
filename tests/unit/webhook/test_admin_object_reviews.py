"""PlacementPolicies and TeamQuotas written through the validating route: refused as they load.

The route judges them with the parser the webhook's cache and the controller load them with, so
what would be left out once stored (Valid=False, its jobs without a policy) is refused when
written, each error at its field path in an Invalid Status naming the object's own kind.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders.policy import policy
from tests.builders.team import team_quota
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.review import validate

INVALID = ErrorType.INVALID.value
NOT_SUPPORTED = ErrorType.NOT_SUPPORTED.value
REQUIRED = ErrorType.REQUIRED.value


def admin_review(
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    sub_resource: str | None = None,
) -> dict[str, Any]:
    kind = obj["kind"]
    resource = {"PlacementPolicy": "placementpolicies", "TeamQuota": "teamquotas"}[kind]
    request: dict[str, Any] = {
        "uid": "uid-1",
        "kind": {"group": "torchgate.io", "version": "v1alpha1", "kind": kind},
        "resource": {"group": "torchgate.io", "version": "v1alpha1", "resource": resource},
        "name": obj["metadata"]["name"],
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    if sub_resource is not None:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def answer(review: dict[str, Any]) -> dict[str, Any]:
    response: dict[str, Any] = validate(review, lambda _: DEFAULT_POLICY)["response"]
    return response


def causes(response: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["reason"], c["field"]) for c in response["status"]["details"]["causes"]]


BAD = [
    pytest.param(
        policy("p", tolerations=[{"key": "gpu", "operator": "Exist", "effect": "NoSchedule"}]),
        [(NOT_SUPPORTED, "spec.tolerations[0].operator")],
        id="toleration-operator-Exist",
    ),
    pytest.param(
        policy("p", tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoEvict"}]),
        [(NOT_SUPPORTED, "spec.tolerations[0].effect")],
        id="unknown-effect",
    ),
    pytest.param(
        policy("p", sharedMemory={"sizeLimit": "lots"}),
        [(INVALID, "spec.sharedMemory.sizeLimit")],
        id="bad-quantity",
    ),
    pytest.param(
        policy("p", topology={"levels": ["rack name"]}),
        [(INVALID, "spec.topology.levels[0]")],
        id="level-not-a-label-key",
    ),
    pytest.param(
        policy("p", jobDefaults={"cleanPodPolicy": "Sometimes"}, priority="high"),
        [(INVALID, "spec.priority"), (NOT_SUPPORTED, "spec.jobDefaults.cleanPodPolicy")],
        id="every-error-at-once",
    ),
    pytest.param(
        team_quota("vision", ["vision"], nominalGPUs=-8),
        [(INVALID, "spec.nominalGPUs")],
        id="quota-negative-gpus",
    ),
    pytest.param(
        team_quota("vision", ["vision"]),
        [(REQUIRED, "spec.nominalGPUs")],
        id="quota-without-gpus",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), BAD)
def test_an_admin_object_that_would_not_load_is_refused_at_its_fields(
    obj: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    response = answer(admin_review(obj))

    assert response["allowed"] is False
    assert sorted(causes(response)) == sorted(expected)
    status = response["status"]
    assert (status["code"], status["reason"]) == (422, "Invalid")
    details = status["details"]
    assert (details["group"], details["kind"], details["name"]) == (
        "torchgate.io",
        obj["kind"],
        obj["metadata"]["name"],
    )


@pytest.mark.parametrize(("obj", "expected"), BAD)
def test_an_update_to_an_invalid_object_is_refused_and_one_fixing_it_is_allowed(
    obj: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    good = (
        policy("p", nodeSelector={"pool": "a100"})
        if obj["kind"] == "PlacementPolicy"
        else team_quota("vision", ["vision"], nominalGPUs=8)
    )

    broken = answer(admin_review(obj, operation="UPDATE", old=good))
    fixed = answer(admin_review(good, operation="UPDATE", old=obj))

    assert sorted(causes(broken)) == sorted(expected)
    assert fixed == {"uid": "uid-1", "allowed": True}


@pytest.mark.parametrize(
    "obj",
    [
        policy(
            "a100",
            namespaces=["vision"],
            nodeSelector={"pool": "a100"},
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            sharedMemory={"sizeLimit": "16Gi"},
            topology={"levels": ["topology.torchgate.io/rack", "kubernetes.io/hostname"]},
        ),
        team_quota("vision", ["vision"], cohort="h100", nominalGPUs=32, borrowingLimitGPUs=8),
    ],
    ids=["policy", "quota"],
)
def test_a_good_admin_object_is_allowed(obj: dict[str, Any]) -> None:
    assert answer(admin_review(obj)) == {"uid": "uid-1", "allowed": True}


def test_deletes_and_status_writes_are_never_refused() -> None:
    bad = policy("p", tolerations=[{"key": "gpu", "operator": "Exist"}])
    reported = copy.deepcopy(bad)
    reported["status"] = {"conditions": [{"type": "Valid", "status": "False"}]}

    deleted = answer(admin_review(bad, operation="DELETE"))
    status_written = answer(
        admin_review(reported, operation="UPDATE", old=bad, sub_resource="status")
    )

    assert deleted["allowed"] is True
    assert status_written["allowed"] is True

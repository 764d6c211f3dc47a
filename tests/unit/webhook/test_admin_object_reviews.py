"""PlacementPolicies and TeamQuotas written through the validating route: refused as they load.

The route judges them with the parser the webhook's cache and the controller load them with, so
what would be left out once stored (Valid=False, its jobs without a policy) is refused when
written, each error at its field path in an Invalid Status naming the object's own kind. A
TeamQuota newly claiming a namespace another team owns is refused too: stored, it would leave
the later team by name out, with all its namespaces.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders.policy import parsed_policy, policy
from tests.builders.team import team_quota
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.pytorchjob.pool import parse_team_quota
from torchgate.webhook.review import validate
from torchgate.webhook.validation.sharing import resolve_team

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


# ------------------------------------------------------------------ a namespace of another team

DUPLICATE = ErrorType.DUPLICATE.value


def quota_answer(review: dict[str, Any], *stored: dict[str, Any]) -> dict[str, Any]:
    """The answer of a webhook whose TeamQuota cache holds ``stored``."""
    quotas = [parsed for parsed, _ in map(parse_team_quota, stored) if parsed is not None]
    response: dict[str, Any] = validate(
        review, lambda _: DEFAULT_POLICY, lambda namespace: resolve_team(quotas, namespace)
    )["response"]
    return response


ZETA = team_quota("zeta", ["zeta-train", "zeta-eval"], cohort="h100", nominalGPUs=16)
ALPHA = team_quota("alpha", ["alpha"], cohort="h100", nominalGPUs=8)


def test_a_team_quota_claiming_a_namespace_another_team_owns_is_refused() -> None:
    # Stored, alpha (earlier by name) would own zeta-eval and leave zeta out with all its
    # namespaces: zeta's running gangs would lose their quota's protection, its jobs any limit.
    moved = team_quota("alpha", ["alpha", "zeta-eval"], cohort="h100", nominalGPUs=8)
    created = team_quota("omega", ["zeta-train"], nominalGPUs=8)

    update = quota_answer(admin_review(moved, operation="UPDATE", old=ALPHA), ZETA, ALPHA)
    create = quota_answer(admin_review(created), ZETA, ALPHA)

    assert update["allowed"] is False
    assert causes(update) == [(DUPLICATE, "spec.namespaces[1]")]
    assert "zeta" in update["status"]["details"]["causes"][0]["message"]
    assert create["allowed"] is False
    assert causes(create) == [(DUPLICATE, "spec.namespaces[0]")]


def test_a_namespace_moves_between_teams_once_its_team_let_it_go() -> None:
    released = team_quota("zeta", ["zeta-train"], cohort="h100", nominalGPUs=16)
    taken = team_quota("alpha", ["alpha", "zeta-eval"], cohort="h100", nominalGPUs=8)
    clashing = team_quota("alpha", ["alpha", "zeta-eval"], cohort="h100", nominalGPUs=16)

    release = quota_answer(admin_review(released, operation="UPDATE", old=ZETA), ZETA, ALPHA)
    take = quota_answer(admin_review(taken, operation="UPDATE", old=ALPHA), released, ALPHA)
    # a clash stored while the webhook was down does not block other edits of the same team
    edit = quota_answer(admin_review(clashing, operation="UPDATE", old=taken), ZETA, ALPHA)
    same = quota_answer(admin_review(ZETA, operation="UPDATE", old=ZETA), ZETA, ALPHA)

    assert release == {"uid": "uid-1", "allowed": True}
    assert take == {"uid": "uid-1", "allowed": True}
    assert edit == {"uid": "uid-1", "allowed": True}
    assert same == {"uid": "uid-1", "allowed": True}


def test_a_policy_tying_with_a_stored_one_is_allowed_with_a_warning_naming_it() -> None:
    stored = [
        parsed_policy("all-teams", priority=2),
        parsed_policy("vision", namespaces=["cv"], priority=2),
        parsed_policy("other-priority", namespaces=["ml"], priority=7),
    ]
    written = policy("ml-team", namespaces=["ml", "cv"], priority=2)

    response = validate(admin_review(written), lambda _: DEFAULT_POLICY, policies=lambda: stored)[
        "response"
    ]

    assert response["allowed"] is True
    assert "status" not in response
    first, second = response["warnings"]
    assert first.startswith('torchgate: spec.priority: ties with PlacementPolicy "all-teams"')
    assert "on namespace cv (" in first  # ml is taken by the policy of priority 7
    assert '("all-teams" selects every namespace)' in first
    assert second.startswith('torchgate: spec.priority: ties with PlacementPolicy "vision"')
    assert "on namespace cv (both list them)" in second


@pytest.mark.parametrize(
    "written",
    [
        policy("ml-team", namespaces=["ml"], priority=3),  # its stored self: no tie
        policy("ml-team", namespaces=["nlp"], priority=2),
        policy("ml-team", namespaces=["cv"], priority=1),
    ],
    ids=["itself", "other-namespace", "other-priority"],
)
def test_a_policy_tying_with_none_is_allowed_without_warnings(written: dict[str, Any]) -> None:
    stored = [
        parsed_policy("ml-team", namespaces=["ml"], priority=3),
        parsed_policy("vision", namespaces=["cv"], priority=2),
    ]
    old = policy("ml-team", namespaces=["ml"], priority=3)

    response = validate(
        admin_review(written, operation="UPDATE", old=old),
        lambda _: DEFAULT_POLICY,
        policies=lambda: stored,
    )["response"]

    assert response == {"uid": "uid-1", "allowed": True}

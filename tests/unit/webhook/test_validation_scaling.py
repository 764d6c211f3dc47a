"""A review of a job's ``scale`` subresource (``kubectl scale``, an HPA) on the validating route.

The apiserver sends it with an ``autoscaling/v1`` Scale under ``request.kind`` and
``request.object``, ``request.resource`` ``pytorchjobs`` and ``request.subResource`` ``scale``;
the route judges the stored job (read by the server) as it would be after the scale
(``validation.scaling``). Assertions are on the answer: allowed, Status code, (reason, field).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.job import gpu_job
from tests.builders.scale import scale_object, scale_review, stored
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.webhook.review import scale_subject, validate
from torchgate.webhook.validation.scaling import CHANGE_WITH_APPLY

WORKER_REPLICAS = "spec.pytorchReplicaSpecs[Worker].replicas"
FORBIDDEN = ErrorType.FORBIDDEN.value
INVALID = ErrorType.INVALID.value
REQUIRED = ErrorType.REQUIRED.value


def judged(
    review: dict[str, Any], job: Any, policy: PlacementPolicy = DEFAULT_POLICY
) -> dict[str, Any]:
    response: dict[str, Any] = validate(review, lambda _: policy, stored=job)["response"]
    return response


def causes(response: dict[str, Any]) -> set[tuple[str, str]]:
    return {(c["reason"], c["field"]) for c in response["status"]["details"]["causes"]}


def test_the_scale_review_names_the_job_it_scales() -> None:
    assert scale_subject(scale_review(scale_object(3))["request"]) == ("team-a", "job")


@pytest.mark.parametrize(
    "request_",
    [
        {**scale_review(scale_object(3))["request"], "subResource": "status"},
        {**scale_review(scale_object(3))["request"], "subResource": None},
        scale_review(scale_object(3), resource="deployments", group="apps")["request"],
        scale_review(scale_object(3), name="")["request"],
        scale_review(scale_object(3), name=None)["request"],
    ],
    ids=["status", "the-job-itself", "another-resource", "empty-name", "no-name"],
)
def test_no_job_is_read_for_other_reviews(request_: dict[str, Any]) -> None:
    assert scale_subject(request_) is None


def test_a_job_that_is_not_elastic_is_not_scaled_and_apply_or_patch_is_named() -> None:
    response = judged(scale_review(scale_object(3)), stored(workers=1))

    assert response["allowed"] is False
    assert causes(response) == {(FORBIDDEN, WORKER_REPLICAS)}
    (cause,) = response["status"]["details"]["causes"]
    assert cause["message"] == f"Forbidden: {CHANGE_WITH_APPLY}"


def test_a_job_that_is_not_elastic_may_be_scaled_to_the_count_it_has() -> None:
    assert judged(scale_review(scale_object(2)), stored(workers=2))["allowed"] is True


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_an_elastic_job_scales_within_its_bounds(replicas: int) -> None:
    job = stored(workers=2, minReplicas=1, maxReplicas=4)
    assert judged(scale_review(scale_object(replicas)), job)["allowed"] is True


@pytest.mark.parametrize("replicas", [0, 5])
def test_an_elastic_job_does_not_scale_beyond_its_bounds(replicas: int) -> None:
    job = stored(workers=2, minReplicas=1, maxReplicas=4)

    response = judged(scale_review(scale_object(replicas)), job)

    assert response["allowed"] is False
    assert causes(response) == {(INVALID, WORKER_REPLICAS)}


@pytest.mark.parametrize("replicas", [1, 3])
def test_an_elastic_job_without_bounds_keeps_its_worker_count(replicas: int) -> None:
    # Both bounds are the Worker count its running pods' PET_NNODES holds: 2:2 (3:3 with a Master).
    job = stored(workers=2, rdzvBackend="c10d")

    response = judged(scale_review(scale_object(replicas)), job)

    assert response["allowed"] is False
    assert causes(response) == {(INVALID, WORKER_REPLICAS)}


def test_an_elastic_job_without_bounds_may_be_scaled_to_the_count_it_has() -> None:
    assert judged(scale_review(scale_object(2)), stored(workers=2, rdzvBackend="c10d"))["allowed"]


def test_the_scaled_job_meets_every_rule_an_update_meets() -> None:
    # Within the elastic bounds, but past the Worker replica limit (the same rule as apply).
    job = stored(workers=2, minReplicas=1, maxReplicas=200_000)

    response = judged(scale_review(scale_object(150_000)), job)

    assert response["allowed"] is False
    assert causes(response) == {(INVALID, WORKER_REPLICAS)}
    assert "100000" in response["status"]["details"]["causes"][0]["message"]


@pytest.mark.parametrize(
    "scale",
    [
        scale_object("three"),
        scale_object(-1),
        scale_object(True),
        scale_object(2.5),
        scale_object(None),
        {**scale_object(3), "spec": "3"},
        {"kind": "Scale"},
    ],
    ids=["string", "negative", "bool", "fraction", "null", "spec-not-object", "no-spec"],
)
def test_a_malformed_scale_is_refused_on_its_replicas(scale: dict[str, Any]) -> None:
    response = judged(scale_review(scale), stored(workers=1, minReplicas=1, maxReplicas=4))

    assert response["allowed"] is False
    assert causes(response) == {(INVALID, "spec.replicas")}


def test_a_stored_job_without_workers_is_refused_on_its_workers() -> None:
    job = gpu_job("job", namespace="team-a", workers=0).build()

    response = judged(scale_review(scale_object(2)), job)

    assert response["allowed"] is False
    assert causes(response) == {(REQUIRED, "spec.pytorchReplicaSpecs[Worker]")}


@pytest.mark.parametrize(
    ("review", "why"),
    [
        (scale_review(scale_object(3)), "could not read PyTorchJob team-a/job within 2s"),
        (scale_review(scale_object(3)), None),
        (scale_review(scale_object(3), name=None), None),
    ],
    ids=["read-failed", "not-read", "no-name"],
)
def test_a_job_that_could_not_be_read_refuses_the_scale_with_the_reason(
    review: dict[str, Any], why: str | None
) -> None:
    response = judged(review, why)

    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert response["status"]["message"].startswith("cannot judge this scale: ")
    if why is not None:
        assert response["status"]["message"].endswith(why)


@settings(max_examples=200, deadline=None)
@given(
    replicas=st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    job=st.recursive(
        st.none() | st.integers() | st.text(max_size=3),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    ["spec", "pytorchReplicaSpecs", "Worker", "replicas", "elasticPolicy"]
                ),
                inner,
                max_size=3,
            )
        ),
        max_leaves=12,
    ),
)
def test_any_scale_of_any_stored_job_is_an_answer_never_an_exception(
    replicas: Any, job: Any
) -> None:
    stored_job = job if isinstance(job, dict) else {"spec": job}
    response = judged(scale_review(scale_object(replicas)), stored_job)
    assert isinstance(response["allowed"], bool)

"""Malformed input: every section of any JSON type becomes a field error, never an exception."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders.job import container, cpu_job, job
from tests.builders.policy import parsed_policy
from tests.unit.realworld import BROKEN_JOB_SETTINGS, REALWORLD_JOBS, broken_jobs, field_paths
from tests.unit.webhook.validationcases import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    MC0,
    MPOD,
    REQUIRED,
    VOLUME,
    M,
    Pairs,
    case,
    check,
    master_container,
    master_pod,
    setting,
)
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.pytorchjob.progress import ANNOTATION_PROGRESS_DEADLINE
from torchgate.webhook import review
from torchgate.webhook.review import evaluate
from torchgate.webhook.validation import validate_create

# ---------------------------------------------------------------------- malformed input

BIG = "9" * 5000  # digits

MALFORMED = [
    case(
        "metadata-not-an-object",
        cpu_job().edit(setting("metadata", "x")).build(),
        [(INVALID, "metadata")],
    ),
    case(
        "metadata-null",
        cpu_job().edit(setting("metadata", None)).build(),
        [(REQUIRED, "metadata.name")],
    ),
    case(
        "name-not-a-string",
        cpu_job().edit(setting("metadata", "name", 7)).build(),
        [(INVALID, "metadata.name")],
    ),
    case(
        "annotations-list",
        cpu_job().edit(setting("metadata", "annotations", [1])).build(),
        [(INVALID, "metadata.annotations")],
    ),
    case(
        "hosts-annotation-number",
        cpu_job().edit(setting("metadata", "annotations", {"torchgate.io/hosts": 5})).build(),
        [(INVALID, "metadata.annotations[torchgate.io/hosts]")],
    ),
    case("spec-string", cpu_job().edit(setting("spec", "x")).build(), [(INVALID, "spec")]),
    case(
        "containers-string",
        cpu_job().edit(setting(*master_pod("containers"), "x")).build(),
        [(INVALID, f"{MPOD}.containers")],
    ),
    case(
        "container-not-an-object",
        cpu_job().edit(setting(*master_pod("containers"), [container(), 3])).build(),
        [(INVALID, f"{MPOD}.containers[1]")],
    ),
    case(
        "template-string",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Master", "template", "x")).build(),
        [(INVALID, f"{M}.template")],
    ),
    case(
        "pod-spec-number",
        cpu_job()
        .edit(setting("spec", "pytorchReplicaSpecs", "Master", "template", "spec", 1))
        .build(),
        [(INVALID, f"{M}.template.spec")],
    ),
    case(
        "env-string",
        cpu_job().edit(setting(*master_container("env"), "x")).build(),
        [(INVALID, f"{MC0}.env")],
    ),
    case(
        "env-entry-number",
        cpu_job().edit(setting(*master_container("env"), [1])).build(),
        [(INVALID, f"{MC0}.env[0]")],
    ),
    case(
        "env-without-name",
        cpu_job().edit(setting(*master_container("env"), [{"value": "x"}])).build(),
        [(REQUIRED, f"{MC0}.env[0].name")],
    ),
    case(
        "env-value-number",
        cpu_job().edit(setting(*master_container("env"), [{"name": "A", "value": 1}])).build(),
        [(INVALID, f"{MC0}.env[0].value")],
    ),
    case(
        "env-clean-entries-around-bad-ones",
        cpu_job()
        .edit(
            setting(
                *master_container("env"),
                [
                    {"name": "A", "value": "1"},
                    {"name": "A", "value": "2"},
                    {"name": "B", "value": None},
                    {"name": "C", "value": 3},
                    {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "RANK", "value": "0"},
                ],
            )
        )
        .build(),
        [
            (DUPLICATE, f"{MC0}.env[1].name"),
            (INVALID, f"{MC0}.env[3].value"),
            (FORBIDDEN, f"{MC0}.env[5].name"),
        ],
    ),
    case(
        "resources-string",
        cpu_job().edit(setting(*master_container("resources"), "x")).build(),
        [(INVALID, f"{MC0}.resources")],
    ),
    case(
        "limits-list",
        cpu_job().edit(setting(*master_container("resources"), {"limits": [1]})).build(),
        [(INVALID, f"{MC0}.resources.limits")],
    ),
    case(
        "args-string",
        cpu_job().edit(setting(*master_container("args"), "--epochs 1")).build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "args-with-a-number",
        cpu_job().edit(setting(*master_container("args"), ["--epochs", 1])).build(),
        [(INVALID, f"{MC0}.args[1]")],
    ),
    case(
        "command-with-null",
        cpu_job().edit(setting(*master_container("command"), [None])).build(),
        [(INVALID, f"{MC0}.command[0]")],
    ),
    case(
        "image-number",
        cpu_job().edit(setting(*master_container("image"), 3)).build(),
        [(INVALID, f"{MC0}.image")],
    ),
    case(
        "volume-mounts-entry-number",
        cpu_job().edit(setting(*master_container("volumeMounts"), [1])).build(),
        [(INVALID, f"{MC0}.volumeMounts[0]")],
    ),
    case(
        "volume-mounts-string",
        cpu_job().edit(setting(*master_container("volumeMounts"), "x")).build(),
        [(INVALID, f"{MC0}.volumeMounts")],
    ),
    case(
        "volumes-string",
        cpu_job().edit(setting(*master_pod("volumes"), "x")).build(),
        [(INVALID, f"{MPOD}.volumes")],
    ),
    case(
        "volume-entry-number",
        cpu_job().edit(setting(*master_pod("volumes"), [1])).build(),
        [(INVALID, f"{MPOD}.volumes[0]")],
    ),
    case(
        "volume-names",
        cpu_job().edit(setting(*master_pod("volumes"), [{"emptyDir": {}}, VOLUME, VOLUME])).build(),
        [
            (REQUIRED, f"{MPOD}.volumes[0].name"),
            (DUPLICATE, f"{MPOD}.volumes[2].name"),
        ],
    ),
    case(
        "init-containers-object",
        cpu_job().edit(setting(*master_pod("initContainers"), {})).build(),
        [(INVALID, f"{MPOD}.initContainers")],
    ),
    case(
        "node-selector-list",
        cpu_job().edit(setting(*master_pod("nodeSelector"), [])).build(),
        [(INVALID, f"{MPOD}.nodeSelector")],
    ),
    case(
        "run-policy-list",
        cpu_job().edit(setting("spec", "runPolicy", [])).build(),
        [(INVALID, "spec.runPolicy")],
    ),
    case(
        "scheduling-policy-number",
        cpu_job().scheduling().edit(setting("spec", "runPolicy", "schedulingPolicy", 1)).build(),
        [(INVALID, "spec.runPolicy.schedulingPolicy")],
    ),
    case(
        "elastic-policy-string",
        cpu_job().edit(setting("spec", "elasticPolicy", "x")).build(),
        [(INVALID, "spec.elasticPolicy")],
    ),
    case(
        "suspend-string",
        cpu_job().run_policy(suspend="yes").build(),
        [(INVALID, "spec.runPolicy.suspend")],
    ),
    case(  # found by fuzzing: Python converts at most 4300 digits, and the webhook crashed
        "gpu-count-of-5000-digits",
        job().master(gpus="9" * 5000).build(),
        [(FORBIDDEN, "spec.pytorchReplicaSpecs")],
        parsed_policy("small", maxGPUsPerJob=8),
    ),
    case(
        "gpu-count-beyond-the-decimal-exponent",
        job().master(gpus="1e1000000").build(),
        [(FORBIDDEN, "spec.pytorchReplicaSpecs")],
        parsed_policy("small", maxGPUsPerJob=8),
    ),
    case(  # Python turns at most 4300 digits into an int: these crashed the webhook
        "nproc-of-5000-digits",
        cpu_job().nproc(BIG).build(),
        [(INVALID, "spec.nprocPerNode")],
    ),
    case(
        "progress-deadline-of-5000-digits",
        cpu_job().annotate(ANNOTATION_PROGRESS_DEADLINE, BIG).build(),
        [(INVALID, f"metadata.annotations[{ANNOTATION_PROGRESS_DEADLINE}]")],
    ),
    case(
        "nnodes-of-5000-digits",
        job().master(command=["torchrun", f"--nnodes={BIG}", "t.py"]).workers(1).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "gpus-flag-of-5000-digits",
        job().master(args=["--gpus", BIG]).workers(1).build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "rdzv-port-out-of-range",
        job().workers(1).elastic(rdzvPort=70000).build(),
        [(INVALID, "spec.elasticPolicy.rdzvPort")],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), MALFORMED)
def test_malformed_sections_are_errors(
    raw: Any, active_policy: PlacementPolicy, expected: Pairs
) -> None:
    check(raw, active_policy, expected)


@pytest.mark.parametrize("raw", [None, [], "job", 3], ids=["null", "list", "string", "number"])
def test_a_non_object_is_denied(raw: Any) -> None:
    assert not validate_create(raw, DEFAULT_POLICY).allowed


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FULL_JOB = (
    job()
    .master(gpus=1, args=["--backend", "nccl"], env={"A": "1"}, pod_spec={"volumes": [VOLUME]})
    .workers(2, gpus=1, command=["sh", "-c", "torchrun --nnodes=3 t.py"])
    .elastic(minReplicas=1, maxReplicas=3)
    .scheduling(minAvailable=3)
    .hosts("node-a")
    .build()
)


ALL_PATHS = field_paths(FULL_JOB)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_PATHS), JSON)
def test_any_value_anywhere_never_raises(where: tuple[Any, ...], value: Any) -> None:
    raw = copy.deepcopy(FULL_JOB)
    setting(*where, value)(raw)
    verdict = validate_create(raw, DEFAULT_POLICY)
    assert all(str(error) for error in verdict.errors)  # every error renders


def admission_review(job: Any, operation: str, old: Any = None) -> dict[str, Any]:
    request = {
        "uid": "u",
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "namespace": "team-a",
        "operation": operation,
        "object": job,
        **({"oldObject": old} if old is not None else {}),
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@BROKEN_JOB_SETTINGS
@given(broken_jobs(REALWORLD_JOBS))
def test_a_broken_real_world_job_gets_a_verdict_naming_fields(raw: dict[str, Any]) -> None:
    evaluation = evaluate(raw, DEFAULT_POLICY)  # torchgate check: defaulting, then validation
    assert evaluation.allowed is not bool(evaluation.errors)
    assert all(str(error) for error in evaluation.errors)
    policy_for = lambda namespace: DEFAULT_POLICY  # noqa: E731
    mutated = review.mutate(admission_review(raw, "CREATE"), policy_for)
    for answer in (mutated, review.validate(admission_review(raw, "CREATE"), policy_for)):
        response = answer["response"]
        if not response["allowed"]:
            assert response["status"]["code"] == 422
            assert all(cause["field"] for cause in response["status"]["details"]["causes"])

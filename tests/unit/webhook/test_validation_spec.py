"""Job and replica structure (metadata, run and elastic policy, replica specs).

The upstream-parity table (training-operator v1.9's rules) and the rules beyond upstream.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import container, cpu_job, job
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    INVALID,
    MC0,
    MPOD,
    NOT_SUPPORTED,
    REQUIRED,
    SPECS,
    TOO_LONG,
    WPOD,
    M,
    Pairs,
    W,
    case,
    check,
    master_container,
    master_pod,
    removing,
    setting,
    warned,
)
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy

# ---------------------------------------------------------------------- rule 1: upstream parity

PARITY = [
    case("name-not-dns-1035", cpu_job("Bad_Name").build(), [(INVALID, "metadata.name")]),
    case("name-starts-with-digit", cpu_job("1job").build(), [(INVALID, "metadata.name")]),
    case(
        "generate-name-is-enough",
        cpu_job()
        .edit(removing("metadata", "name"))
        .edit(setting("metadata", "generateName", "train-"))
        .build(),
        [],
    ),
    case(
        "generate-name-invalid",
        cpu_job()
        .edit(removing("metadata", "name"))
        .edit(setting("metadata", "generateName", "Train-"))
        .build(),
        [(INVALID, "metadata.name")],
    ),
    case(
        "no-name-at-all",
        cpu_job().edit(removing("metadata", "name")).build(),
        [(REQUIRED, "metadata.name")],
    ),
    case("spec-null", cpu_job().edit(setting("spec", None)).build(), [(REQUIRED, SPECS)]),
    case(
        "replica-specs-missing",
        cpu_job().edit(removing("spec", "pytorchReplicaSpecs")).build(),
        [(REQUIRED, SPECS)],
    ),
    case(
        "replica-specs-empty",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", {})).build(),
        [(REQUIRED, SPECS)],
    ),
    case(
        "replica-specs-not-an-object",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "x")).build(),
        [(REQUIRED, SPECS)],
    ),
    case(
        "lower-case-key-means-mutation-did-not-run",
        job().master().workers(1, key="worker").build(),
        [(NOT_SUPPORTED, f"{SPECS}[worker]")],
    ),
    case(
        "unknown-replica-type",
        job().master().workers(1, key="Chief").build(),
        [(NOT_SUPPORTED, f"{SPECS}[Chief]")],
    ),
    case(
        "worker-null",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Worker", None)).build(),
        [(REQUIRED, f"{WPOD}.containers")],
    ),
    case(
        "worker-not-an-object",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Worker", "x")).build(),
        [(REQUIRED, f"{WPOD}.containers")],
    ),
    case(
        "worker-without-template",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Worker", {"replicas": 1})).build(),
        [(REQUIRED, f"{WPOD}.containers")],
    ),
    case(
        "no-containers",
        cpu_job().edit(setting(*master_pod("containers"), [])).build(),
        [(REQUIRED, f"{MPOD}.containers")],
    ),
    case(
        "container-without-image",
        cpu_job().edit(removing(*master_container("image"))).build(),
        [(REQUIRED, f"{MC0}.image")],
    ),
    case(
        "no-container-named-pytorch",
        job().master(name="trainer").workers(1).build(),
        [(REQUIRED, f"{MPOD}.containers")],
    ),
    case(
        "pytorch-container-need-not-be-first",
        job().master(containers=[container(name="sidecar"), container()]).workers(1).build(),
        [],
    ),
    case(
        "master-replicas-2",
        job().master(replicas=2).workers(1).build(),
        [(FORBIDDEN, f"{M}.replicas")],
    ),
    case(
        "master-replicas-0",
        job().master(replicas=0).workers(1).build(),
        [(FORBIDDEN, f"{M}.replicas")],
    ),
    case("master-replicas-missing-means-1", job().master(replicas=None).workers(1).build(), []),
    case("worker-replicas-0", job().master().workers(0).build(), [(FORBIDDEN, f"{W}.replicas")]),
    case("worker-replicas-missing-means-1", job().master().workers(None).build(), []),
    case("master-only-job", job().master().build(), []),
    case(
        "elastic-needs-a-worker",
        job().master().elastic(minReplicas=1, maxReplicas=2).build(),
        [(REQUIRED, f"{SPECS}[Worker]")],
    ),
    case(
        "elastic-nproc-with-spec-nproc",
        cpu_job().elastic(nProcPerNode=2).nproc("2").build(),
        [(FORBIDDEN, "spec.elasticPolicy.nProcPerNode")],
    ),
    case(
        "managed-by-unknown",
        cpu_job().run_policy(managedBy="someone/else").build(),
        [(NOT_SUPPORTED, "spec.runPolicy.managedBy")],
    ),
    case(
        "managed-by-multikueue",
        cpu_job().run_policy(managedBy="kueue.x-k8s.io/multikueue").build(),
        [],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), PARITY)
def test_upstream_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_deprecated_elastic_nproc_alone_is_a_warning() -> None:
    verdict = check(cpu_job().elastic(nProcPerNode=2).build(), DEFAULT_POLICY, [])
    assert "spec.elasticPolicy.nProcPerNode" in warned(verdict)


# ---------------------------------------------------------------------- rule 2: beyond upstream

NAME_53 = "a" * 53  # "-worker-14" makes 63
STRUCTURE = [
    case("derived-names-fit", job(NAME_53).master().workers(15).build(), []),
    case(
        "derived-worker-name-too-long",
        job(NAME_53 + "a").master().workers(15).build(),
        [(TOO_LONG, "metadata.name")],
    ),
    case(
        "elastic-max-replicas-counts-for-names",
        job(NAME_53).workers(2).elastic(minReplicas=1, maxReplicas=1000).build(),
        [(TOO_LONG, "metadata.name")],
    ),
    case(
        "generate-name-plus-suffix-too-long",
        cpu_job()
        .edit(removing("metadata", "name"))
        .edit(setting("metadata", "generateName", "g" * 50))
        .build(),
        [(TOO_LONG, "metadata.name")],
    ),
    case(
        "restart-policy-unsupported",
        job().master(restart_policy="Sometimes").workers(1).build(),
        [(NOT_SUPPORTED, f"{M}.restartPolicy")],
    ),
    case(
        "restart-policy-exit-code", job().master(restart_policy="ExitCode").workers(1).build(), []
    ),
    case(
        "clean-pod-policy-unsupported",
        cpu_job().run_policy(cleanPodPolicy="Some").build(),
        [(NOT_SUPPORTED, "spec.runPolicy.cleanPodPolicy")],
    ),
    case("nproc-word", cpu_job().nproc("many").build(), [(INVALID, "spec.nprocPerNode")]),
    case("nproc-zero", cpu_job().nproc("0").build(), [(INVALID, "spec.nprocPerNode")]),
    case("nproc-auto", cpu_job().nproc("auto").build(), []),
    case("nproc-digits", cpu_job().nproc("8").build(), []),
    case("nproc-json-integer", cpu_job().edit(setting("spec", "nprocPerNode", 4)).build(), []),
    case(
        "elastic-min-above-max",
        job().workers(2).elastic(minReplicas=3, maxReplicas=2).build(),
        [(INVALID, "spec.elasticPolicy.minReplicas")],
    ),
    case(
        "elastic-bounds-below-one",
        job().workers(2).elastic(minReplicas=0, maxReplicas="x").build(),
        [(INVALID, "spec.elasticPolicy.minReplicas"), (INVALID, "spec.elasticPolicy.maxReplicas")],
    ),
    case(
        "elastic-min-equals-max", job().workers(2).elastic(minReplicas=2, maxReplicas=2).build(), []
    ),
    case(
        "elastic-workers-above-max",
        job().workers(6).elastic(minReplicas=1, maxReplicas=2).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "elastic-workers-below-min",
        job().workers(2).elastic(minReplicas=3, maxReplicas=4).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        # minReplicas copies maxReplicas (the training-operator's default): PET_NNODES=4:4
        "elastic-workers-below-a-max-alone",
        job().workers(2).elastic(maxReplicas=4).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "elastic-workers-at-either-bound",
        job().workers(4).elastic(minReplicas=1, maxReplicas=4).build(),
        [],
    ),
    case("elastic-workers-no-bounds", job().workers(3).elastic(rdzvBackend="c10d").build(), []),
    case(
        # the bounds count Workers with a Master too: 1 + 6 pods for PET_NNODES=2:3
        "elastic-with-master-workers-above-max",
        job().master().workers(6).elastic(minReplicas=1, maxReplicas=2).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "elastic-with-master-workers-within-bounds",
        job().master().workers(2).elastic(minReplicas=1, maxReplicas=2).build(),
        [],
    ),
    case(
        "elastic-with-master-default-bounds",
        job().master().workers(3).elastic(rdzvBackend="c10d").build(),
        [],
    ),
    case(
        "min-available-zero",
        cpu_job().scheduling(minAvailable=0).build(),
        [(INVALID, "spec.runPolicy.schedulingPolicy.minAvailable")],
    ),
    case(
        "min-available-above-total",
        cpu_job().scheduling(minAvailable=4).build(),
        [(INVALID, "spec.runPolicy.schedulingPolicy.minAvailable")],
    ),
    case("min-available-total", cpu_job().scheduling(minAvailable=3).build(), []),
    case(
        "replicas-unfilled-variable",
        job().master().workers("$NUM_NODES").build(),  # type: ignore[arg-type]
        [(INVALID, f"{W}.replicas")],
    ),
    case("replicas-negative", job().master().workers(-1).build(), [(INVALID, f"{W}.replicas")]),
    case(
        "replicas-fraction",
        job().master().workers(1.5).build(),  # type: ignore[arg-type]
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "replicas-boolean",
        job().master().workers(True).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case("replicas-at-the-ceiling", job().master().workers(100_000).build(), []),
    case(
        "replicas-beyond-the-ceiling",
        job().master().workers(100_001).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "replicas-int32-max",  # passes the CRD schema; the controller would plan 2^31 pods
        job().master().workers(2**31 - 1).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "run-policy-integers",
        cpu_job()
        .run_policy(backoffLimit=-1, ttlSecondsAfterFinished="x", activeDeadlineSeconds=1.5)
        .scheduling(scheduleTimeoutSeconds=-5)
        .build(),
        [
            (INVALID, "spec.runPolicy.ttlSecondsAfterFinished"),
            (INVALID, "spec.runPolicy.activeDeadlineSeconds"),
            (INVALID, "spec.runPolicy.backoffLimit"),
            (INVALID, "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"),
        ],
    ),
    case(
        "run-policy-valid-integers",
        cpu_job().run_policy(backoffLimit=0, ttlSecondsAfterFinished=60, suspend=True).build(),
        [],
    ),
    case(
        "kubectl-get-output",
        cpu_job()
        .edit(setting("metadata", "resourceVersion", "15532"))
        .edit(setting("metadata", "uid", "059391e8"))
        .edit(setting("status", {"conditions": []}))
        .build(),
        [
            (FORBIDDEN, "metadata.resourceVersion"),
            (FORBIDDEN, "metadata.uid"),
            (FORBIDDEN, "status"),
        ],
    ),
    case("empty-status-is-fine", cpu_job().edit(setting("status", {})).build(), []),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), STRUCTURE)
def test_structure_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)

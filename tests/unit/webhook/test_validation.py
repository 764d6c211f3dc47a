"""validate_create / validate_update as a whole: a plain job, report order, warnings, updates.

The rule families have their own modules (test_validation_<family>.py, mirroring
webhook/validation/); the shared table vocabulary is in validationcases.py.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.builders.job import cpu_job, gpu_job, job
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    HOSTS,
    INVALID,
    MC0,
    NOT_SUPPORTED,
    SPECS,
    WC0,
    pairs,
    setting,
    torchrun,
    warned,
)
from torchgate.pytorchjob.fieldpath import FieldPath, forbidden
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.validation import in_annotations, reads, validate_create, validate_update
from torchgate.webhook.validation.facts import Findings, JobFacts, read_in_full, read_job


def test_a_plain_job_is_allowed_without_warnings() -> None:
    verdict = validate_create(cpu_job().build(), DEFAULT_POLICY)
    assert (verdict.errors, verdict.warnings, verdict.allowed) == ((), (), True)


# ---------------------------------------------------------------------- ordering and warnings


def test_errors_come_in_a_stable_order() -> None:
    raw = (
        job("Bad_Name")
        .master(args=["--rank=0"], image="Ubuntu")
        .workers(1, key="Worker", args=["--rank=1"])
        .run_policy(cleanPodPolicy="Some")
        .edit(setting("spec", "pytorchReplicaSpecs", "Chief", {}))
        .build()
    )
    raw["spec"]["pytorchReplicaSpecs"] = {
        "Chief": raw["spec"]["pytorchReplicaSpecs"]["Chief"],
        "Worker": raw["spec"]["pytorchReplicaSpecs"]["Worker"],
        "Master": raw["spec"]["pytorchReplicaSpecs"]["Master"],
    }
    assert pairs(validate_create(raw, DEFAULT_POLICY)) == [
        (INVALID, "metadata.name"),
        (NOT_SUPPORTED, "spec.runPolicy.cleanPodPolicy"),
        (INVALID, f"{MC0}.image"),
        (FORBIDDEN, f"{MC0}.args"),
        (FORBIDDEN, f"{WC0}.args"),
        (NOT_SUPPORTED, f"{SPECS}[Chief]"),
    ]


def test_repeated_errors_are_reported_once() -> None:
    raw = job().master(args=["--rank=0", "--rank=0"]).workers(1).build()
    assert pairs(validate_create(raw, DEFAULT_POLICY)) == [(FORBIDDEN, f"{MC0}.args")]


def test_every_warning_names_its_field_path() -> None:
    raw = (
        job()
        .master(gpus=1, args=["--backend", "gloo"])
        .workers(2, gpus=1, command=torchrun("--nnodes=3", "--nproc_per_node=1"))
        .elastic(nProcPerNode=1, minReplicas=2, maxReplicas=2)
        .build()
    )
    verdict = validate_create(raw, DEFAULT_POLICY)
    assert verdict.allowed
    expected_paths = [
        "spec.elasticPolicy.nProcPerNode",
        f"{MC0}.args",
        f"{WC0}.command",
        f"{WC0}.command",
    ]
    assert warned(verdict) == expected_paths
    assert [w.render() for w in verdict.warnings] == [
        f"torchgate: {w.path}: {w.text}" for w in verdict.warnings
    ]


# ---------------------------------------------------------------------- updates


def managed(raw: dict[str, Any], value: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["spec"].setdefault("runPolicy", {})["managedBy"] = value
    return raw


def test_update_changing_managed_by_is_denied() -> None:
    old = managed(cpu_job().build(), "kubeflow.org/training-operator")
    new = managed(old, "kueue.x-k8s.io/multikueue")
    verdict = validate_update(old, new, DEFAULT_POLICY)
    assert pairs(verdict) == [(INVALID, "spec.runPolicy.managedBy")]


def test_update_setting_managed_by_is_denied() -> None:
    old = cpu_job().build()
    new = managed(old, "kueue.x-k8s.io/multikueue")
    assert pairs(validate_update(old, new, DEFAULT_POLICY)) == [
        (INVALID, "spec.runPolicy.managedBy")
    ]


def test_update_keeping_managed_by_is_allowed() -> None:
    old = managed(cpu_job().build(), "kueue.x-k8s.io/multikueue")
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    assert validate_update(old, new, DEFAULT_POLICY).allowed


def test_metadata_only_update_of_an_old_invalid_job_is_allowed() -> None:
    old = job().master(args=["--world-size=16"]).workers(1).build()
    old["metadata"].update(resourceVersion="7", uid="u-1")
    old["status"] = {"conditions": [{"type": "Running"}]}
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "a"}
    new["metadata"]["finalizers"] = ["x/y"]
    verdict = validate_update(old, new, DEFAULT_POLICY)
    assert (verdict.errors, verdict.warnings) == ((), ())


def test_spec_update_runs_the_create_rules_except_create_only() -> None:
    old = job().master(args=["--world-size=16"]).workers(1).build()
    old["metadata"].update(resourceVersion="7", uid="u-1")
    old["status"] = {"conditions": [{"type": "Running"}]}
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    assert pairs(validate_update(old, new, DEFAULT_POLICY)) == [(FORBIDDEN, f"{MC0}.args")]


def test_changing_pinned_hosts_revalidates() -> None:
    old = cpu_job().hosts("node-a").build()
    new = cpu_job().hosts("node-c").build()
    verdict = validate_update(old, new, HOSTS)
    assert pairs(verdict) == [(NOT_SUPPORTED, "metadata.annotations[torchgate.io/hosts]")]


def test_update_from_a_malformed_old_object_validates_the_new_one() -> None:
    new = job().master(args=["--rank=0"]).workers(1).build()
    new["metadata"]["resourceVersion"] = "7"  # normal on UPDATE: not the create-only rule
    assert pairs(validate_update(None, new, DEFAULT_POLICY)) == [(FORBIDDEN, f"{MC0}.args")]  # type: ignore[arg-type]


# ---------------------------------------------------------------------- reading the facts


def test_a_worker_with_the_masters_pod_spec_is_read_like_the_master() -> None:
    raw = gpu_job("shared", workers=3, gpus=4).build()
    master, worker = read_job(raw, DEFAULT_POLICY, old=None, creating=True).known_replicas
    assert worker.like is master
    assert worker.pod_spec is master.pod_spec  # the clean-template skip is an identity test
    assert (worker.pods, worker.gpus, worker.containers) == (3, 4, master.containers)
    own = read_in_full(worker, read_job(raw, DEFAULT_POLICY, old=None, creating=True))
    assert own.like is None
    assert str(own.containers[0].path) == f"{SPECS}[Worker].template.spec.containers[0]"


def test_a_worker_with_its_own_pod_spec_is_read_alone() -> None:
    raw = gpu_job("apart", workers=3, gpus=4).build()
    raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    master, worker = read_job(raw, DEFAULT_POLICY, old=None, creating=True).known_replicas
    assert worker.like is None
    assert worker.pod_spec is not master.pod_spec


# ---------------------------------------------------------------------- composition


def test_an_annotation_rule_runs_only_when_its_annotation_is_present() -> None:
    def refuses(job: JobFacts) -> Findings:
        return [forbidden(FieldPath.root("metadata"), "ran")]

    rules = in_annotations(reads(refuses, "example.com/checked"))

    def found(annotations: object) -> int:
        raw = cpu_job().edit(setting("metadata", "annotations", annotations)).build()
        return len(rules(read_job(raw, DEFAULT_POLICY, old=None, creating=True)))

    assert found({"owner": "alice"}) == 0
    assert found(None) == 0
    assert found({"owner": "alice", "example.com/checked": None}) == 1
    assert found(["example.com/checked"]) == 1  # not an object: every rule runs and reports it

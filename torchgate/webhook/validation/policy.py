"""Spec-level rules: run policy, scheduling policy, elastic policy, ``nprocPerNode``, GPU budget.

Why these live together: they are the job-wide knobs that decide how many pods run, for how long
and who cleans them up, and several are where the admin's PlacementPolicy says no (a
``cleanPodPolicy: None`` that would keep GPUs after the job ends, a job larger than the per-job
GPU budget). Fields the CRD does not declare never reach these rules: the apiserver refuses them
(``fieldValidation=Strict``, kubectl's default) or drops them (``Warn``, ``Ignore``) while
decoding the job, before admission; ``torchgate check`` says where a misplaced one belongs
(``pytorchjob.crdschema`` rule 5).

Updates ratchet (see the package docstring), but ``runPolicy.managedBy`` is immutable on every
update, as upstream: another controller may already own the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from torchgate.pytorchjob import cleanup, gang, names
from torchgate.pytorchjob.fieldpath import (
    FieldError,
    FieldWarning,
    forbidden,
    invalid,
    not_supported,
    required,
)
from torchgate.pytorchjob.spec import as_int
from torchgate.webhook.validation.facts import (
    ELASTIC,
    MANAGED_BY,
    NONE,
    NPROC_PER_NODE,
    OBJECT,
    REPLICA_SPECS,
    RUN_POLICY,
    SCHEDULING,
    SPEC,
    ZERO,
    Finding,
    Findings,
    JobFacts,
    count,
    non_negative_field,
    placeholder_hint,
)

_NPROC_KEYWORDS: Final = ("auto", "cpu", "gpu")
_CLEAN_POD_POLICY: Final = RUN_POLICY.child("cleanPodPolicy")


def spec_shape(job: JobFacts) -> Findings:
    """``spec`` is present and an object."""
    spec = job.spec_raw
    if spec is None:
        return [required(REPLICA_SPECS, "must be required")]
    if not isinstance(spec, OBJECT):
        return [invalid(SPEC, spec, "must be an object")]
    return NONE


def replica_specs_present(job: JobFacts) -> Findings:
    """``spec.pytorchReplicaSpecs`` is a non-empty object."""
    if not job.spec_readable:
        return NONE
    specs = job.spec.get("pytorchReplicaSpecs")
    if not isinstance(specs, OBJECT) or not specs:
        return [required(REPLICA_SPECS, "must be required (an object with Master and Worker)")]
    return NONE


def nproc_per_node(job: JobFacts) -> Findings:
    """``spec.nprocPerNode`` is a keyword or a positive integer equal to the GPUs per pod."""
    raw = job.spec.get("nprocPerNode")  # spec is empty when it is not an object
    if raw is None or raw in _NPROC_KEYWORDS:
        return NONE
    if job.nproc_per_node is None:
        detail = 'must be "auto", "cpu", "gpu" or a positive integer such as "8"'
        return [invalid(NPROC_PER_NODE, raw, detail + placeholder_hint(raw))]
    first = job.first_gpu_replica
    if first is not None and first.gpus != job.nproc_per_node:
        return [
            invalid(
                NPROC_PER_NODE,
                raw,
                f"must equal the {count(first.gpus)} {job.policy.gpu_resource} each "
                f"{first.key} pod requests (one process per GPU)",
            )
        ]
    return NONE


def elastic_policy(job: JobFacts) -> Findings:
    """``spec.elasticPolicy``: a Worker to scale, sane bounds and port."""
    elastic = job.spec.get("elasticPolicy")
    if elastic is None:
        return NONE
    if not isinstance(elastic, OBJECT):
        return [invalid(ELASTIC, elastic, "must be an object")]
    found: list[Finding] = []
    if isinstance(job.spec.get("pytorchReplicaSpecs"), OBJECT) and (
        names.WORKER not in job.replica_specs
    ):
        found.append(
            required(
                REPLICA_SPECS.key(names.WORKER), "must be configured if elastic policy is used"
            )
        )
    found.extend(_elastic_n_proc_per_node(job, elastic))
    found.extend(_elastic_bounds(elastic))
    port = elastic.get("rdzvPort")
    port_number = as_int(port)
    if port is not None and (port_number is None or not 1 <= port_number <= 65535):
        found.append(invalid(ELASTIC.child("rdzvPort"), port, "must be a port number (1-65535)"))
    found.extend(non_negative_field(elastic, "maxRestarts", ELASTIC))
    return found


def _elastic_n_proc_per_node(job: JobFacts, elastic: Mapping[str, Any]) -> list[Finding]:
    if elastic.get("nProcPerNode") is None:
        return []
    path = ELASTIC.child("nProcPerNode")
    found: list[Finding] = []
    if job.spec.get("nprocPerNode") is not None:
        found.append(forbidden(path, "must not be used with spec.nprocPerNode"))
    else:
        found.append(FieldWarning(path, "deprecated, use spec.nprocPerNode instead"))
    found.extend(non_negative_field(elastic, "nProcPerNode", ELASTIC))
    return found


def _elastic_bounds(elastic: Mapping[str, Any]) -> list[Finding]:
    found: list[Finding] = []
    bounds: dict[str, int] = {}
    for key in ("minReplicas", "maxReplicas"):
        raw = elastic.get(key)
        if raw is None:
            continue
        number = as_int(raw)
        if number is None or number < 1:
            found.append(
                invalid(
                    ELASTIC.child(key),
                    raw,
                    "must be an integer of at least 1" + placeholder_hint(raw),
                )
            )
        else:
            bounds[key] = number
    low, high = bounds.get("minReplicas"), bounds.get("maxReplicas")
    if low is not None and high is not None and low > high:
        found.append(
            invalid(
                ELASTIC.child("minReplicas"),
                low,
                f"must not be greater than spec.elasticPolicy.maxReplicas ({high})",
            )
        )
    return found


def run_policy(job: JobFacts) -> Findings:
    """``spec.runPolicy``: known values; cleanPodPolicy None where it may keep pods."""
    run = job.spec.get("runPolicy")
    if run is None:
        return NONE
    if not isinstance(run, OBJECT):
        return [invalid(RUN_POLICY, run, "must be an object")]
    found: list[Finding] = []
    clean = run.get("cleanPodPolicy")
    clean_path = _CLEAN_POD_POLICY
    if clean is not None and clean not in names.CLEAN_POD_POLICIES:
        found.append(not_supported(clean_path, clean, names.CLEAN_POD_POLICIES))
    elif clean == cleanup.KEEP:
        found.extend(_pods_kept_with_accelerators(job))
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        raw = run.get(key)
        if raw is not None and (type(raw) is not int or raw < 0):  # else valid, without a call
            found.extend(non_negative_field(run, key, RUN_POLICY))
    suspend = run.get("suspend")
    if suspend is not None and not isinstance(suspend, bool):
        found.append(invalid(RUN_POLICY.child("suspend"), suspend, "must be true or false"))
    managed_by = run.get("managedBy")
    # "" means "unset" in the training-operator API (it is a *string).
    if managed_by not in (None, "") and managed_by not in names.MANAGED_BY_VALUES:
        found.append(not_supported(MANAGED_BY, managed_by, names.MANAGED_BY_VALUES))
    return found


def _pods_kept_with_accelerators(job: JobFacts) -> Findings:
    """``cleanPodPolicy: None`` only for replicas without accelerators, unless allowed.

    ``pytorchjob.cleanup`` decides which replicas' pods ``None`` may keep; the controller cleans
    up by the same rule, so what is refused here is exactly what it would not keep.
    """
    gpu_resource = job.policy.gpu_resource
    refused = cleanup.replicas_not_kept(
        cleanup.KEEP,
        ((r.key, r.pod_spec) for r in job.known_replicas if r.pods != 0),
        gpus=job.gpus,
        allow_none=job.policy.allow_clean_pod_policy_none,
        claims=job.claims,
    )
    if not refused:
        return NONE
    return [
        forbidden(
            _CLEAN_POD_POLICY,
            f"{' and '.join(refused)} pods still running when the job ends would keep their "
            f"{gpu_resource}; {job.policy_label} allows cleanPodPolicy None only for pods "
            f"without {gpu_resource} (use Running or All)",
        )
    ]


def scheduling_policy(job: JobFacts) -> Findings:
    """``spec.runPolicy.schedulingPolicy``: minAvailable within the gang, a timeout."""
    run = job.spec.get("runPolicy")
    scheduling = run.get("schedulingPolicy") if isinstance(run, OBJECT) else None
    if scheduling is None:
        return NONE
    if not isinstance(scheduling, OBJECT):
        return [invalid(SCHEDULING, scheduling, "must be an object")]
    found: list[Finding] = []
    raw = scheduling.get("minAvailable")
    total = job.total_replicas
    if raw is not None and not (type(raw) is int and total is not None and 1 <= raw <= total):
        number = as_int(raw)  # the usual count passed above, without the calls
        if number is None or not gang.is_min_available(number, total=total):
            upper = f"the job's {total} replicas" if total is not None else "the job's replicas"
            found.append(
                invalid(
                    SCHEDULING.child("minAvailable"),
                    raw,
                    f"must be an integer between 1 and {upper}",
                )
            )
    timeout = scheduling.get("scheduleTimeoutSeconds")
    if timeout is not None and (type(timeout) is not int or timeout < 0):  # else valid
        found.extend(non_negative_field(scheduling, "scheduleTimeoutSeconds", SCHEDULING))
    return found


def gpu_budget(job: JobFacts) -> Findings:
    """The job's GPUs in total stay within the policy's ``maxGPUsPerJob``."""
    limit = job.policy.max_gpus_per_job
    if limit is None or not job.spec_readable:
        return NONE
    total = ZERO
    for replica in job.known_replicas:
        if replica.pods and replica.gpus > ZERO:
            total += replica.gpus * replica.pods
    if total > limit:
        # The message's parts are built only for a refusal: most jobs are within the budget.
        gpu_replicas = [r for r in job.known_replicas if r.gpus > ZERO and r.pods]
        parts = [f"{r.key} {r.pods}x{count(r.gpus)}" for r in gpu_replicas]
        return [
            forbidden(
                REPLICA_SPECS,
                f"the job requests {count(total)} {job.policy.gpu_resource} in total "
                f"({', '.join(parts)}); {job.policy_label} allows at most "
                f"{limit} per job",
            )
        ]
    return NONE


def immutable_fields(job: JobFacts) -> Findings:
    """On update, ``spec.runPolicy.managedBy`` does not change."""
    if job.creating:
        return NONE
    return immutable_field_errors(job.old, job.raw)


def immutable_field_errors(old: object, new: object) -> list[FieldError]:
    """The errors for fields that must not change between ``old`` and ``new``."""
    old_value, new_value = _managed_by(old), _managed_by(new)
    if old_value == new_value:
        return []
    return [invalid(MANAGED_BY, new_value, "field is immutable")]


def _managed_by(job: object) -> object:
    spec = job.get("spec") if isinstance(job, OBJECT) else None
    run = spec.get("runPolicy") if isinstance(spec, OBJECT) else None
    return run.get("managedBy") if isinstance(run, OBJECT) else None

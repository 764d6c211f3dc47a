"""Validation of PyTorchJobs: what the validating webhook refuses, and why.

Why a webhook validates what the CRD schema could: a PyTorchJob that is accepted but cannot run is
worse than one that is refused. The controller creates the gang, the pods hold their GPUs, and the
job fails minutes later (or hangs) for a reason that was visible in the manifest: a stray
``--world-size=16``, ``nccl`` on a CPU-only replica, an env entry pasted under ``volumeMounts``, an
unfilled ``${IMAGE_URI}``. This package finds those problems and reports every one of them with the
Kubernetes field path and error type, in a stable order, so ``kubectl`` users read one complete
list instead of fixing one error per submission.

It keeps the training-operator v1.9 webhook's rules and messages (users and tooling know them),
fixes its defects (the update check compared the new object with itself; a ``null`` replica
crashed it) and adds the rules upstream misses. It never assumes the mutating webhook ran: a
missing ``replicas`` means 1, a missing ``restartPolicy`` OnFailure, a missing ``cleanPodPolicy``
Running. Any JSON value may appear anywhere; malformed input becomes a field error, never an
exception.

How it is built: ``facts.read_job`` reads the job once into frozen facts; every rule is a small
function of those facts (the job's, a replica's, a container's) returning its field errors and
``FieldWarning``s; ``RULES`` below is the one ordered list that composes them, and its order is
the report order: metadata, spec, then Master before Worker (each replica's fields, its pod
template, its containers in index order, then its init containers), then unknown replica types.
The rule families live in ``metadata``, ``policy`` (run, scheduling and elastic policy),
``pod`` (replica spec, pod template and volumes), ``containers``, ``launch`` (command line and
env) and ``sharing`` (topology annotations, the team's quota ceiling).

Updates ratchet: when neither ``spec`` nor the pinned-hosts, progress or topology annotations
changed, only immutable fields are checked, so a job admitted under older rules stays updatable
for labels and finalizers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.fieldpath import (
    FieldError,
    FieldPath,
    FieldWarning,
    dedupe,
    invalid,
    render_warnings,
)
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.pytorchjob.pool import ANNOTATION_TOPOLOGY_PREFERRED, ANNOTATION_TOPOLOGY_REQUIRED
from torchgate.pytorchjob.progress import ANNOTATION_PROGRESS_DEADLINE
from torchgate.webhook.validation import containers, launch, metadata, pod, policy, sharing
from torchgate.webhook.validation.facts import (
    OBJECT,
    ContainerFacts,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    Team,
    read_job,
)
from torchgate.webhook.validation.policy import immutable_field_errors

__all__ = [
    "FieldWarning",
    "Team",
    "Verdict",
    "render_warnings",
    "validate_create",
    "validate_update",
]

JobRule = Callable[[JobFacts], Findings]
ReplicaRule = Callable[[JobFacts, ReplicaFacts], Findings]
ContainerRule = Callable[[JobFacts, ReplicaFacts, ContainerFacts], Findings]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of validation: every field error and every warning, in report order.

    Warnings stay structured (path, text) until the AdmissionReview (or ``torchgate check``)
    renders them with ``render_warnings``.
    """

    errors: tuple[FieldError, ...]
    warnings: tuple[FieldWarning, ...]

    @property
    def allowed(self) -> bool:
        """Whether the object may be admitted (warnings never deny)."""
        return not self.errors


# ------------------------------------------------------------------ composition


def for_each_replica(*rules: ReplicaRule) -> JobRule:
    """Apply ``rules``, in order, to Master then Worker."""

    def each_replica(job: JobFacts) -> Findings:
        found: list[Finding] = []
        for replica in job.known_replicas:
            for rule in rules:
                result = rule(job, replica)
                if result:  # most rules find nothing; skip the extend
                    found.extend(result)
        return found

    return each_replica


def when_template_readable(*rules: ReplicaRule) -> ReplicaRule:
    """Apply ``rules`` only when the replica spec, its template and pod spec are objects."""

    def pod_template(job: JobFacts, replica: ReplicaFacts) -> Findings:
        if replica.spec is None or not replica.template_readable:
            return ()
        found: list[Finding] = []
        for rule in rules:
            result = rule(job, replica)
            if result:
                found.extend(result)
        return found

    return pod_template


def for_each_container(kind: str, *rules: ContainerRule) -> ReplicaRule:
    """Apply ``rules`` to every entry of ``kind``; an entry that is not an object is an error."""

    def each_container(job: JobFacts, replica: ReplicaFacts) -> Findings:
        entries = replica.containers if kind == "containers" else replica.init_containers
        found: list[Finding] = []
        for container in entries:
            if not isinstance(container.raw, OBJECT):
                found.append(invalid(container.path, container.raw, "must be an object"))
                continue
            for rule in rules:
                result = rule(job, replica, container)
                if result:
                    found.extend(result)
        return found

    return each_container


_CONTAINER_RULES: Final[tuple[ContainerRule, ...]] = (
    containers.image,
    containers.argv_shape,
    launch.backend_flags,
    launch.gpu_flags,
    launch.stray_flags,
    launch.nnodes_flags,
    launch.nproc_flags,
    launch.env,
    containers.resources,
    containers.gpu_consistency,
    launch.gpu_peers,
    containers.volume_mounts,
    containers.privileged,
)

# The one ordered list of rules: its order is the order errors and warnings are reported in.
RULES: Final[tuple[JobRule, ...]] = (
    metadata.metadata_is_object,
    metadata.name,
    metadata.pinned_hosts_annotation,
    metadata.progress_deadline_annotation,
    sharing.topology_annotations,
    metadata.create_only_fields,
    policy.spec_shape,
    policy.replica_specs_present,
    policy.nproc_per_node,
    policy.elastic_policy,
    policy.run_policy,
    policy.scheduling_policy,
    policy.gpu_budget,
    sharing.team_quota,
    policy.immutable_fields,
    for_each_replica(
        pod.replica_spec_present,
        pod.replica_fields,
        pod.replica_count,
        pod.restart_policy,
        pod.template_shape,
        when_template_readable(
            pod.pytorch_container,
            pod.node_selector,
            pod.volumes,
            for_each_container("containers", *_CONTAINER_RULES),
            pod.init_containers_list,
            for_each_container("initContainers", *_CONTAINER_RULES),
        ),
    ),
    pod.unknown_replica_types,
)


# ------------------------------------------------------------------ entry points


def validate_create(
    job: Mapping[str, Any], policy: PlacementPolicy, *, team: Team | None = None
) -> Verdict:
    """Validate a PyTorchJob being created under ``policy`` (and ``team``'s quota, if any)."""
    return _verdict(job, policy, old=None, creating=True, team=team)


def validate_update(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    policy: PlacementPolicy,
    *,
    team: Team | None = None,
) -> Verdict:
    """Validate an update from ``old`` to ``new``: immutables always, the rest only on change."""
    if _admission_inputs_unchanged(old, new):
        return Verdict(_deduplicated(immutable_field_errors(old, new)), ())
    return _verdict(new, policy, old=old, creating=False, team=team)


def _verdict(
    job: object,
    active_policy: PlacementPolicy,
    *,
    old: Mapping[str, Any] | None,
    creating: bool,
    team: Team | None,
) -> Verdict:
    if not isinstance(job, OBJECT):
        return Verdict((invalid(FieldPath(), None, "must be a PyTorchJob object"),), ())
    facts = read_job(job, active_policy, old=old, creating=creating, team=team)
    errors: list[FieldError] = []
    warnings: list[FieldWarning] = []
    for rule in RULES:
        for finding in rule(facts):
            if type(finding) is FieldWarning:
                warnings.append(finding)
            else:
                errors.append(finding)  # type: ignore[arg-type]
    return Verdict(_deduplicated(errors), tuple(dict.fromkeys(warnings)))


def _admission_inputs_unchanged(old: object, new: object) -> bool:
    if not isinstance(old, OBJECT) or not isinstance(new, OBJECT):
        return False
    return old.get("spec") == new.get("spec") and _checked_annotations(old) == _checked_annotations(
        new
    )


_CHECKED_ANNOTATIONS: Final = (
    names.ANNOTATION_HOSTS,
    ANNOTATION_PROGRESS_DEADLINE,
    ANNOTATION_TOPOLOGY_REQUIRED,
    ANNOTATION_TOPOLOGY_PREFERRED,
)


def _checked_annotations(job: Mapping[str, Any]) -> tuple[object, ...]:
    """The annotations rules check (hosts, progress, topology): a change to one re-validates."""
    meta = job.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, OBJECT) else None
    if not isinstance(annotations, OBJECT):
        return ()
    return tuple(annotations.get(key) for key in _CHECKED_ANNOTATIONS)


def _deduplicated(errors: list[FieldError]) -> tuple[FieldError, ...]:
    """Drop repeated errors like ``dedupe``, without its cost in the common case.

    ``dedupe`` renders every path and message. Errors that differ in type, path or detail render
    differently unless two distinct paths print alike (a map key "0" beside a list index 0),
    which these rules never produce for one field; so ``dedupe`` runs only on a collision.
    """
    # id(): error types are enum singletons, and Enum.__hash__ is a slow Python-level call.
    keys = {(id(e.type), e.path.segments, e.detail) for e in errors}
    return tuple(errors) if len(keys) == len(errors) else tuple(dedupe(errors))

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
``pod`` (replica spec, pod template and volumes), ``claims`` (DRA claims), ``containers``,
``launch`` (command line and env) and ``sharing`` (topology annotations, the team's quota ceiling).
``scaling`` says who may scale a job through its ``scale`` subresource, and how far
(``validate_scale``: its rules, then the scaled job judged as an UPDATE).

Updates ratchet: when neither ``spec`` nor the pinned-hosts, progress or topology annotations
changed, only immutable fields are checked, so a job admitted under older rules stays updatable
for labels and finalizers. A manifest applied again reaches this route with the templates the
mutating webhook defaulted again (``defaulting``'s UPDATE rules), so an unchanged manifest is an
unchanged ``spec`` here too; a changed template is judged whole, defaults included, as on CREATE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from torchgate.pytorchjob import names
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup
from torchgate.pytorchjob.fieldpath import (
    FieldError,
    FieldPath,
    FieldWarning,
    dedupe,
    invalid,
    render_warnings,
)
from torchgate.pytorchjob.policy import HOST_NAMESPACES, PlacementPolicy
from torchgate.pytorchjob.pool import ANNOTATION_TOPOLOGY_PREFERRED, ANNOTATION_TOPOLOGY_REQUIRED
from torchgate.pytorchjob.progress import ANNOTATION_PROGRESS_DEADLINE
from torchgate.webhook.validation import (
    claims,
    containers,
    launch,
    metadata,
    pod,
    policy,
    scaling,
    sharing,
)
from torchgate.webhook.validation.facts import (
    NONE,
    OBJECT,
    ContainerFacts,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    Team,
    read_in_full,
    read_job,
)
from torchgate.webhook.validation.policy import immutable_field_errors

__all__ = [
    "FieldWarning",
    "Team",
    "Verdict",
    "render_warnings",
    "validate_create",
    "validate_scale",
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

R = TypeVar("R", JobRule, ReplicaRule, ContainerRule)


@dataclass(frozen=True, slots=True)
class Reads(Generic[R]):
    """A rule with the fields of its section it reads: it runs only when one is present.

    A rule whose section is absent costs nothing, not even a call: a rule added for a rarely
    used field (``elasticPolicy``, ``initContainers``) leaves every other job's review as it was.
    A field present with a ``null`` value counts as present; the rule reports or ignores it.
    """

    rule: R
    fields: frozenset[str]


def reads(rule: R, *fields: str) -> Reads[R]:
    """``rule``, run only when its section has one of ``fields``."""
    return Reads(rule, frozenset(fields))


class _Table(Generic[R]):
    """Rules in report order, each run always or only when a field it reads is present.

    The selection is memoised by the section's keys in order (``selected``): sections of a kind
    mostly list the same keys, and a tuple of them is cheaper to build and look up than a set.
    """

    def __init__(self, rules: tuple[R | Reads[R], ...]) -> None:
        self._entries: tuple[tuple[R, frozenset[str] | None], ...] = tuple(
            (entry.rule, entry.fields) if isinstance(entry, Reads) else (entry, None)
            for entry in rules
        )
        self.every: tuple[R, ...] = tuple(rule for rule, _ in self._entries)
        self.fields: frozenset[str] = frozenset().union(
            *(f for _, f in self._entries if f is not None)
        )
        self.selected: dict[tuple[str, ...], tuple[R, ...]] = {}

    def select(self, keys: tuple[str, ...]) -> tuple[R, ...]:
        """The rules that run on a section with ``keys``, in order (memoised in ``selected``)."""
        present = self.fields.intersection(keys)
        selected = tuple(
            rule for rule, fields in self._entries if fields is None or fields & present
        )
        if len(self.selected) >= _SELECTIONS_KEPT:
            self.selected.clear()
        self.selected[keys] = selected
        return selected


_SELECTIONS_KEPT: Final = 1024
# The pod template's section key for its profile annotations (not a pod spec field name).
PROFILE_ANNOTATIONS: Final = "metadata.annotations"
# Pod-spec fields whose rules read the replica's pod count (a claim shared by every pod).
_POD_COUNT_READERS: Final = frozenset({"resourceClaims"})


def in_spec(*rules: JobRule | Reads[JobRule]) -> JobRule:
    """Apply ``rules``, in order, to the job; a ``Reads`` rule when ``spec`` has its field."""
    table = _Table(rules)

    def spec_rules(job: JobFacts) -> Findings:
        found: list[Finding] = []
        keys = tuple(job.spec)
        for rule in table.selected.get(keys) or table.select(keys):
            result = rule(job)
            if result:  # most rules find nothing; skip the extend
                found.extend(result)
        return found

    return spec_rules


def in_annotations(*rules: JobRule | Reads[JobRule]) -> JobRule:
    """Apply ``rules``, in order; a ``Reads`` rule when ``metadata.annotations`` has its key.

    Without annotations (or without a ``metadata`` object) none runs: each finds nothing then.
    When ``annotations`` is not an object, every rule runs: each reports or ignores that itself.
    """
    table = _Table(rules)
    every = table.every

    def annotation_rules(job: JobFacts) -> Findings:
        metadata = job.metadata
        annotations = metadata.get("annotations") if isinstance(metadata, OBJECT) else None
        if annotations is None:
            return NONE
        if isinstance(annotations, OBJECT):
            keys = tuple(annotations)
            selected = table.selected.get(keys)
            if selected is None:
                selected = table.select(keys)
            if not selected:  # the usual job: none of the annotations the rules read
                return NONE
        else:
            selected = every
        found: list[Finding] = []
        for rule in selected:
            result = rule(job)
            if result:
                found.extend(result)
        return found

    return annotation_rules


def for_each_replica(*rules: ReplicaRule) -> JobRule:
    """Apply ``rules``, in order, to Master then Worker."""

    def each_replica(job: JobFacts) -> Findings:
        found: list[Finding] = []
        for replica in job.known_replicas:
            for rule in rules:
                result = rule(job, replica)
                if result:
                    found.extend(result)
        return found

    return each_replica


def when_template_readable(*rules: ReplicaRule | Reads[ReplicaRule]) -> ReplicaRule:
    """Apply ``rules`` only when the replica spec, its template and pod spec are objects.

    A ``Reads`` rule runs when the pod spec has its field; one reading ``PROFILE_ANNOTATIONS``
    when the template has profile annotations (``ReplicaFacts.profile_annotations``).

    Invariant the rules keep: what they find is a function of the pod spec, the job, the policy
    and the template's profile annotations; a replica's type appears only in paths and messages,
    and its pod count is read only by rules of ``resourceClaims``. So a replica without profile
    annotations whose pod spec equals one that already found nothing in this review (Master and
    Worker usually share one template) finds nothing either, and is not walked again; with
    ``resourceClaims`` the rules always run.
    """
    table = _Table(rules)

    def pod_template(job: JobFacts, replica: ReplicaFacts) -> Findings:
        if replica.spec is None or not replica.template_readable:
            return ()
        pod_spec = replica.pod_spec
        clean = job.clean_pod_specs
        count_free = _POD_COUNT_READERS.isdisjoint(pod_spec)
        if (
            clean and count_free and pod_spec in clean and not replica.profile_annotations
        ):  # identity, then ``==`` (C-level, cheap)
            return ()
        replica = read_in_full(replica, job)  # the rules report at this replica's own paths
        found: list[Finding] = []
        keys = tuple(pod_spec)
        if replica.profile_annotations:
            keys = (*keys, PROFILE_ANNOTATIONS)
        for rule in table.selected.get(keys) or table.select(keys):
            result = rule(job, replica)
            if result:
                found.extend(result)
        if not found and count_free:
            clean.append(pod_spec)
        return found

    return pod_template


def for_each_container(kind: str, *rules: ContainerRule | Reads[ContainerRule]) -> ReplicaRule:
    """Apply ``rules`` to every entry of ``kind``; an entry that is not an object is an error.

    A ``Reads`` rule runs on a container that has its field.
    """
    table = _Table(rules)

    def each_container(job: JobFacts, replica: ReplicaFacts) -> Findings:
        entries = replica.containers if kind == "containers" else replica.init_containers
        found: list[Finding] = []
        for container in entries:
            if not isinstance(container.raw, OBJECT):
                found.append(invalid(container.path, container.raw, "must be an object"))
                continue
            keys = (*container.fields, *container.line.said)
            for rule in table.selected.get(keys) or table.select(keys):
                result = rule(job, replica, container)
                if result:
                    found.extend(result)
        return found

    return each_container


# A container's section is its fields and, for the training container, the kinds of flags its
# command line says (``CommandLine.said``): the launch rules read those.
_CONTAINER_RULES: Final[tuple[ContainerRule | Reads[ContainerRule], ...]] = (
    containers.image,  # reports a missing image too
    reads(containers.argv_shape, "command", "args"),
    reads(launch.backend_flags, "backends"),
    reads(launch.gpu_flags, "gpu_flags"),
    reads(launch.stray_flags, "stray"),
    reads(launch.nnodes_flags, "nnodes"),
    reads(launch.nproc_flags, "nproc_per_node"),
    reads(launch.env, "env"),
    reads(containers.resources, "resources"),
    reads(containers.gpu_consistency, "resources"),  # a GPU container requests GPUs there
    launch.gpu_peers,  # fires on a container without GPUs
    reads(containers.volume_mounts, "volumeMounts"),
    reads(containers.node_access, "securityContext", "ports"),
)

# The one ordered list of rules: its order is the order errors and warnings are reported in.
RULES: Final[tuple[JobRule, ...]] = (
    metadata.metadata_is_object,
    metadata.name,
    in_annotations(
        reads(metadata.pinned_hosts_annotation, names.ANNOTATION_HOSTS),
        reads(metadata.progress_deadline_annotation, ANNOTATION_PROGRESS_DEADLINE),
        reads(
            sharing.topology_annotations,
            ANNOTATION_TOPOLOGY_REQUIRED,
            ANNOTATION_TOPOLOGY_PREFERRED,
        ),
    ),
    metadata.create_only_fields,
    in_spec(
        policy.spec_shape,
        policy.replica_specs_present,
        reads(policy.nproc_per_node, "nprocPerNode"),
        reads(policy.elastic_policy, "elasticPolicy"),
        reads(policy.run_policy, "runPolicy"),
        reads(policy.scheduling_policy, "runPolicy"),
        policy.gpu_budget,
        sharing.team_quota,
        policy.immutable_fields,
    ),
    for_each_replica(
        pod.replica_spec_present,
        pod.replica_count,
        pod.elastic_worker_count,
        pod.restart_policy,
        pod.template_shape,
        when_template_readable(
            pod.pytorch_container,  # reports missing containers too
            reads(pod.node_selector, "nodeSelector"),
            reads(pod.volumes, "volumes"),
            reads(pod.host_namespaces, *HOST_NAMESPACES),
            reads(pod.tolerations, "tolerations"),
            reads(pod.node_name, "nodeName"),
            reads(pod.pod_confinement, "securityContext", PROFILE_ANNOTATIONS),
            claims.container_claim_names,  # a container may name a claim the pod lacks
            reads(claims.claim_sources, "resourceClaims"),
            reads(claims.shared_claim, "resourceClaims"),
            reads(claims.countable_gpus, "resourceClaims"),  # only a claim's count is unknown
            reads(claims.gpus_asked_once, "resourceClaims"),
            for_each_container("containers", *_CONTAINER_RULES),
            reads(pod.init_containers_list, "initContainers"),
            reads(for_each_container("initContainers", *_CONTAINER_RULES), "initContainers"),
        ),
    ),
    pod.unknown_replica_types,
)


# ------------------------------------------------------------------ entry points


def validate_create(
    job: Mapping[str, Any],
    policy: PlacementPolicy,
    *,
    team: Team | None = None,
    uid_from_server: bool = False,
    claims: ClaimLookup = NO_CLAIMS,
) -> Verdict:
    """Validate a PyTorchJob being created under ``policy`` (and ``team``'s quota, if any).

    ``uid_from_server``: the apiserver set ``metadata.uid`` before asking (the validating
    route), so a uid is not the user's and is not reported. ``claims``: the ResourceClaims,
    templates and DeviceClasses the webhook sees in the namespace.
    """
    return _verdict(
        job,
        policy,
        old=None,
        creating=True,
        team=team,
        uid_from_server=uid_from_server,
        claims=claims,
    )


def validate_update(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    policy: PlacementPolicy,
    *,
    team: Team | None = None,
    claims: ClaimLookup = NO_CLAIMS,
) -> Verdict:
    """Validate an update from ``old`` to ``new``: immutables always, the rest only on change."""
    if _admission_inputs_unchanged(old, new):
        return Verdict(_deduplicated(immutable_field_errors(old, new)), ())
    return _verdict(new, policy, old=old, creating=False, team=team, claims=claims)


def validate_scale(
    job: Mapping[str, Any],
    replicas: object,
    policy: PlacementPolicy,
    *,
    team: Team | None = None,
    claims: ClaimLookup = NO_CLAIMS,
) -> Verdict:
    """Validate scaling the stored ``job``'s Workers to ``replicas`` (its ``scale`` subresource).

    ``scaling``'s rules first (who may scale, how far), then the scaled job as an UPDATE from
    ``job``.
    """
    after = scaling.scaled_job(job, replicas)
    if isinstance(after, list):
        return Verdict(tuple(after), ())
    return validate_update(job, after, policy, team=team, claims=claims)


def _verdict(
    job: object,
    active_policy: PlacementPolicy,
    *,
    old: Mapping[str, Any] | None,
    creating: bool,
    team: Team | None,
    claims: ClaimLookup,
    uid_from_server: bool = False,
) -> Verdict:
    if not isinstance(job, OBJECT):
        return Verdict((invalid(FieldPath(), None, "must be a PyTorchJob object"),), ())
    facts = read_job(
        job,
        active_policy,
        old=old,
        creating=creating,
        team=team,
        uid_from_server=uid_from_server,
        claims=claims,
    )
    errors: list[FieldError] = []
    warnings: list[FieldWarning] = []
    for rule in RULES:
        for finding in rule(facts):
            if type(finding) is FieldWarning:
                warnings.append(finding)
            else:
                errors.append(finding)  # type: ignore[arg-type]
    if not errors and not warnings:
        return _NOTHING_FOUND
    return Verdict(_deduplicated(errors), tuple(dict.fromkeys(warnings)))


# The usual verdict, shared: building a frozen dataclass costs a slow ``object.__setattr__`` per
# field.
_NOTHING_FOUND: Final = Verdict((), ())


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
    if not errors:
        return ()
    # id(): error types are enum singletons, and Enum.__hash__ is a slow Python-level call.
    keys = {(id(e.type), e.path.segments, e.detail) for e in errors}
    return tuple(errors) if len(keys) == len(errors) else tuple(dedupe(errors))

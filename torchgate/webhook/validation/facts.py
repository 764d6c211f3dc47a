"""What the validation rules know about a job: read once from the raw object, then read-only.

Why a separate reading step: several rules need the same derived facts (how many pods each
replica runs, how many GPUs each pod requests, which container is ``pytorch``, the job name the
controller will derive pod names from, the ``--nnodes`` the controller will pass). Reading them
once keeps every rule a small function of ``(job, replica, container)`` facts and keeps the rules
consistent with one another. Reading never fails: a malformed section reads as "unknown" (None,
empty) and the rule for that section reports it.

This module also holds the vocabulary every rule shares: field paths, ``FieldWarning``, and the
small text helpers that keep messages alike.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob import gang, names
from torchgate.pytorchjob.devices import (
    NO_CLAIMS,
    ClaimLookup,
    GpuSources,
    replica_gpus,
)
from torchgate.pytorchjob.fieldpath import (
    ErrorType,
    FieldError,
    FieldPath,
    FieldWarning,
    invalid,
)
from torchgate.pytorchjob.policy import PROFILE_ANNOTATION_PREFIXES, PlacementPolicy
from torchgate.pytorchjob.pool import TeamQuota, quota_ceilings
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity
from torchgate.pytorchjob.spec import as_int, pytorch_container_index
from torchgate.webhook.arguments import CommandLine, scan_command_line
from torchgate.webhook.imageref import unfilled_placeholder

# isinstance() tries the exact JSON type first; the ABC check is several times slower.
OBJECT: Final = (dict, Mapping)
# Compared with a Decimal, a Decimal is cheaper than an int (no conversion per comparison).
ZERO: Final = Decimal(0)

METADATA: Final = FieldPath.root("metadata")
NAME: Final = METADATA.child("name")
ANNOTATIONS: Final = METADATA.child("annotations")
HOSTS_ANNOTATION: Final = ANNOTATIONS.key(names.ANNOTATION_HOSTS)
STATUS: Final = FieldPath.root("status")
SPEC: Final = FieldPath.root("spec")
REPLICA_SPECS: Final = SPEC.child("pytorchReplicaSpecs")
NPROC_PER_NODE: Final = SPEC.child("nprocPerNode")
ELASTIC: Final = SPEC.child("elasticPolicy")
RUN_POLICY: Final = SPEC.child("runPolicy")
MANAGED_BY: Final = RUN_POLICY.child("managedBy")
SCHEDULING: Final = RUN_POLICY.child("schedulingPolicy")

# The apiserver appends 5 random characters to generateName, truncated to leave room for them.
GENERATED_SUFFIX: Final = "x" * 5
GENERATE_NAME_MAX: Final = names.DNS_LABEL_MAX - len(GENERATED_SUFFIX)
_NOTHING_SAID: Final = CommandLine()


Finding = FieldError | FieldWarning
Findings = Sequence[Finding]
NONE: Final[Findings] = ()


# ------------------------------------------------------------------ facts


class ContainerFacts:
    """One entry of a replica's ``containers`` or ``initContainers``.

    The facts classes are slotted classes whose attributes are ``Final`` (mypy refuses any write
    after ``__init__``): a slot read is specialised by the interpreter (about 30 instructions,
    against about 170 for a NamedTuple field), and a review reads them over a hundred times; a
    frozen dataclass would pay ``object.__setattr__`` per field to build.
    """

    __slots__ = (
        "argv_ok",
        "fields",
        "is_gpu_container",
        "is_training",
        "kind",
        "line",
        "path",
        "raw",
    )

    def __init__(
        self,
        path: FieldPath,
        kind: str,
        raw: object,
        fields: Mapping[str, Any],
        is_training: bool,
        is_gpu_container: bool,
        line: CommandLine,
        argv_ok: bool,
    ) -> None:
        self.path: Final = path  # ...template.spec.containers[i]
        self.kind: Final = kind  # "containers" or "initContainers"
        self.raw: Final = raw
        self.fields: Final = fields  # ``raw`` when it is an object, else empty
        # The ``pytorch`` container (or the first, as training-operator does).
        self.is_training: Final = is_training
        # The first container of the replica that requests GPUs.
        self.is_gpu_container: Final = is_gpu_container
        # What the command line says (flags, launcher); read for the training container only.
        self.line: Final = line
        self.argv_ok: Final = argv_ok  # ``command`` and ``args`` are each absent or string lists


class ReplicaFacts:
    """One entry of ``spec.pytorchReplicaSpecs`` (read-only slots, like ``ContainerFacts``)."""

    __slots__ = (
        "containers",
        "gpu_container",
        "gpus",
        "gpus_known",
        "host_paths",
        "init_containers",
        "key",
        "like",
        "path",
        "pod_path",
        "pod_spec",
        "pods",
        "profile_annotations",
        "spec",
        "template_metadata",
        "template_readable",
        "training_container",
        "volumes",
    )

    def __init__(
        self,
        key: str,
        path: FieldPath,
        pod_path: FieldPath,
        spec: Mapping[str, Any] | None,
        pods: int | None,
        template_readable: bool,
        pod_spec: Mapping[str, Any],
        gpus: Decimal,
        gpus_known: bool,
        gpu_container: int | None,
        training_container: int | None,
        volumes: frozenset[str] | None,
        host_paths: tuple[tuple[int, object], ...] | None,
        containers: tuple[ContainerFacts, ...],
        init_containers: tuple[ContainerFacts, ...],
        profile_annotations: tuple[tuple[str, object], ...],
        template_metadata: object,
        like: ReplicaFacts | None,
    ) -> None:
        self.key: Final = key
        self.path: Final = path
        self.pod_path: Final = pod_path  # ...[T].template.spec
        self.spec: Final = spec  # None when the entry is not an object
        # Pods it runs; None when ``replicas`` is not a non-negative integer (counts unknown).
        self.pods: Final = pods
        # Whether template and template.spec are objects (or absent), so pod rules can run.
        self.template_readable: Final = template_readable
        # For a replica read ``like`` an earlier one, that one's object (an equal value).
        self.pod_spec: Final = pod_spec
        self.gpus: Final = gpus  # GPUs each pod of this replica holds (``devices.pod_gpus``)
        # False: a claimed GPU count only allocation knows (counted as 0 in ``gpus``).
        self.gpus_known: Final = gpus_known
        self.gpu_container: Final = gpu_container
        self.training_container: Final = training_container
        # Declared volume names; None when ``volumes`` is unreadable.
        self.volumes: Final = volumes
        # (index, hostPath) of each hostPath volume when every volume is an object with a unique
        # name (then only these need a look); None when the volume rule must walk the list.
        self.host_paths: Final = host_paths
        self.containers: Final = containers
        self.init_containers: Final = init_containers
        # The template's annotations that set (or once set) a seccomp or AppArmor profile,
        # ``policy.PROFILE_ANNOTATION_PREFIXES``, as (key, value): usually none.
        self.profile_annotations: Final = profile_annotations
        # The template's ``metadata`` when it has labels or annotations (which the controller
        # copies into every pod) or is not an object (null is none), else None: usually None.
        self.template_metadata: Final = template_metadata
        # The earlier replica whose pod spec equals this one's: then every fact read from the
        # pod spec is that one's, its container paths too, and ``read_in_full`` reads this
        # replica alone before a rule reports at one of its paths (``when_template_readable``).
        self.like: Final = like

    def read_like(
        self,
        key: str,
        path: FieldPath,
        pod_path: FieldPath,
        spec: Mapping[str, Any] | None,
        pods: int | None,
        template_readable: bool,
        profile_annotations: tuple[tuple[str, object], ...],
        template_metadata: object,
    ) -> ReplicaFacts:
        """Another replica whose pod spec equals this one's: its pod-spec facts are these."""
        return ReplicaFacts(
            key,
            path,
            pod_path,
            spec,
            pods,
            template_readable,
            self.pod_spec,
            self.gpus,
            self.gpus_known,
            self.gpu_container,
            self.training_container,
            self.volumes,
            self.host_paths,
            self.containers,
            self.init_containers,
            profile_annotations,  # the template's own: not part of the pod spec
            template_metadata,
            self.like or self,
        )


@dataclass(frozen=True, slots=True)
class Team:
    """The TeamQuota owning the job's namespace, and every team of its cohort (itself included).

    Its ceilings (``pool.quota_ceilings``) are summed over the cohort once, when the team is
    built (the webhook caches a team per namespace), not on every review.
    """

    quota: TeamQuota
    cohort: tuple[TeamQuota, ...]
    ceilings: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ceilings", quota_ceilings(self.quota, self.cohort))


class JobFacts:
    """The job as the rules see it (read-only slots, like ``ContainerFacts``)."""

    __slots__ = (
        "claims",
        "clean_pod_specs",
        "creating",
        "elastic",
        "elastic_workers",
        "expected_nnodes",
        "first_gpu_replica",
        "gpu_sources",
        "job_name",
        "known_replicas",
        "metadata",
        "nproc_per_node",
        "old",
        "policy",
        "raw",
        "replica_specs",
        "replicas",
        "spec",
        "spec_raw",
        "spec_readable",
        "team",
        "total_replicas",
        "uid_from_server",
    )

    def __init__(
        self,
        raw: Mapping[str, Any],
        policy: PlacementPolicy,
        old: Mapping[str, Any] | None,
        creating: bool,
        metadata: object,
        spec_raw: object,
        spec: Mapping[str, Any],
        replica_specs: Mapping[str, Any],
        replicas: tuple[ReplicaFacts, ...],
        known_replicas: tuple[ReplicaFacts, ...],
        total_replicas: int | None,
        first_gpu_replica: ReplicaFacts | None,
        nproc_per_node: int | None,
        elastic: Mapping[str, Any] | None,
        elastic_workers: tuple[int, int] | None,
        expected_nnodes: tuple[int, int] | None,
        job_name: str | None,
        clean_pod_specs: list[Mapping[str, Any]],
        team: Team | None,
        spec_readable: bool,
        uid_from_server: bool,
        gpu_sources: GpuSources | None,
        claims: ClaimLookup,
    ) -> None:
        self.raw: Final = raw
        self.policy: Final = policy
        self.old: Final = old
        self.creating: Final = creating
        self.metadata: Final = metadata
        self.spec_raw: Final = spec_raw
        self.spec: Final = spec  # ``spec_raw`` when it is an object, else empty
        self.replica_specs: Final = replica_specs
        self.replicas: Final = replicas  # in the order submitted
        self.known_replicas: Final = known_replicas  # Master then Worker
        self.total_replicas: Final = total_replicas
        self.first_gpu_replica: Final = first_gpu_replica
        self.nproc_per_node: Final = nproc_per_node
        self.elastic: Final = elastic
        # The elastic bounds as Worker counts (``gang.elastic_bounds``), None when not elastic or
        # a bound is not a positive integer; ``expected_nnodes`` is PET_NNODES (``gang.nnodes``).
        self.elastic_workers: Final = elastic_workers
        self.expected_nnodes: Final = expected_nnodes
        self.job_name: Final = job_name
        # Pod specs of this review whose pod-template rules found nothing, filled as the rules
        # run (``when_template_readable``): a later replica with an equal pod spec finds nothing
        # either.
        self.clean_pod_specs: Final = clean_pod_specs
        self.team: Final = team  # None: no TeamQuota owns the namespace (no quota applies)
        # Whether ``spec`` is an object (spec-level rules run only then).
        self.spec_readable: Final = spec_readable
        # The apiserver set ``metadata.uid`` before the validating webhook runs: not the user's.
        self.uid_from_server: Final = uid_from_server
        self.gpu_sources: Final = gpu_sources  # what counts as GPUs (``policy.gpus``)
        self.claims: Final = claims  # the ResourceClaims and templates the webhook sees

    @property
    def gpus(self) -> GpuSources:
        """What counts as GPUs for this job (``policy.gpus`` with the DeviceClasses seen)."""
        return self.gpu_sources or self.policy.gpus(self.claims)

    @property
    def policy_label(self) -> str:
        """How messages name the active PlacementPolicy."""
        return f"PlacementPolicy {quote(self.policy.name)}"

    @property
    def master_pod_name(self) -> str:
        """The pod (and Service) name MASTER_ADDR will hold."""
        has_master = any(r.key == names.MASTER for r in self.known_replicas)
        replica_type, index = names.master_replica(has_master)
        return names.replica_name(self.job_name or "<job>", replica_type, index)


def read_job(
    job: Mapping[str, Any],
    policy: PlacementPolicy,
    *,
    old: Mapping[str, Any] | None,
    creating: bool,
    team: Team | None = None,
    uid_from_server: bool = False,
    claims: ClaimLookup = NO_CLAIMS,
) -> JobFacts:
    """Read the facts of ``job`` (an object) once, for every rule."""
    sources = policy.gpus(claims)
    spec_raw = job.get("spec")
    spec: Mapping[str, Any] = spec_raw if isinstance(spec_raw, OBJECT) else {}
    specs = spec.get("pytorchReplicaSpecs")
    replica_specs: Mapping[str, Any] = specs if isinstance(specs, OBJECT) else {}
    replicas = _read_replicas(replica_specs, sources, claims)
    if tuple(replica_specs) == names.REPLICA_TYPES:  # the usual job: already Master, Worker
        known = replicas
    else:
        known = tuple(
            [
                replica
                for replica_type in names.REPLICA_TYPES
                for replica in replicas
                if replica.key == replica_type
            ]
        )
    counts = [replica.pods for replica in known]
    # ``None in counts`` rules out a None: mypy does not narrow a list by it.
    total = None if None in counts else gang.total_replicas(counts)  # type: ignore[arg-type]
    elastic = spec.get("elasticPolicy")
    elastic_policy = elastic if elastic is not None and isinstance(elastic, OBJECT) else None
    # Absent sections (the usual job is not elastic and sets no nprocPerNode) cost no call.
    elastic_workers = None if elastic_policy is None else _elastic_workers(elastic_policy, known)
    nproc = spec.get("nprocPerNode")
    metadata = job.get("metadata")
    first_gpu_replica = None
    for replica in known:
        if replica.gpus > ZERO:
            first_gpu_replica = replica
            break
    return JobFacts(
        job,  # raw
        policy,
        old,
        creating,
        metadata,
        spec_raw,
        spec,
        replica_specs,
        replicas,
        known,  # known_replicas
        total,  # total_replicas
        first_gpu_replica,
        None if nproc is None else gang.integer_nproc(nproc),  # nproc_per_node
        elastic_policy,  # elastic
        elastic_workers,
        _expected_nnodes(elastic_policy, elastic_workers, known, total),
        _effective_job_name(metadata),  # job_name
        [],  # clean_pod_specs
        team,
        spec is spec_raw,  # spec_readable
        uid_from_server,
        sources,  # gpu_sources
        claims,
    )


# A replica's paths and its containers' are the same in every review: built once per replica
# type and container index (a path costs more to build than to look up), they also keep their
# rendered text from one review to the next.
@functools.lru_cache(maxsize=256)
def _replica_paths(key: str) -> tuple[FieldPath, FieldPath]:
    path = REPLICA_SPECS.key(key)
    return path, at(path, "template", "spec")


@functools.lru_cache(maxsize=1024)
def _container_path(key: str, kind: str, index: int) -> FieldPath:
    return at(_replica_paths(key)[1], kind, index)


def _read_replicas(
    replica_specs: Mapping[str, Any], sources: GpuSources, claims: ClaimLookup
) -> tuple[ReplicaFacts, ...]:
    """Every replica's facts; a pod spec equal to an earlier replica's is not read again.

    Master and Worker mostly share one template: the Worker's pod facts are the Master's
    (``ReplicaFacts.like``), at the cost of one C-level ``==`` of the two pod specs.
    """
    read: list[ReplicaFacts] = []
    for key, raw in replica_specs.items():
        replica = _read_replica(str(key), raw, sources, claims, read)
        read.append(replica)
    return tuple(read)


def read_in_full(replica: ReplicaFacts, job: JobFacts) -> ReplicaFacts:
    """``replica`` with its own pod facts (paths included), when it was read ``like`` another."""
    if replica.like is None:
        return replica
    return _read_replica(replica.key, replica.spec, job.gpus, job.claims, ())


def _read_replica(
    key: str,
    raw: object,
    sources: GpuSources,
    claims: ClaimLookup,
    earlier: Sequence[ReplicaFacts],
) -> ReplicaFacts:
    path, pod_path = _replica_paths(key)
    spec = raw if isinstance(raw, OBJECT) else None
    count: int | None = 1
    readable = True
    pod_spec: Mapping[str, Any] = {}
    profile_annotations: tuple[tuple[str, object], ...] = ()
    template_metadata: object = None
    if spec is not None:
        replicas = spec.get("replicas")
        count = 1 if replicas is None else non_negative_int(replicas)
        template = spec.get("template")
        if isinstance(template, OBJECT):
            found = template.get("spec")
            readable = found is None or isinstance(found, OBJECT)
            if readable and found is not None:
                pod_spec = found
            metadata = template.get("metadata")
            if metadata is not None:
                if not isinstance(metadata, OBJECT):
                    template_metadata = metadata  # ``podmetadata`` refuses it
                elif "annotations" in metadata:
                    profile_annotations = _profile_annotations(metadata["annotations"])
                    template_metadata = metadata
                elif "labels" in metadata:
                    template_metadata = metadata
        else:
            readable = template is None
    if pod_spec:
        for other in earlier:
            if other.pod_spec == pod_spec:  # C-level, far cheaper than reading it again
                return other.read_like(
                    key,
                    path,
                    pod_path,
                    spec,
                    count,
                    readable,
                    profile_annotations,
                    template_metadata,
                )
    gpus, gpu_container = replica_gpus(pod_spec, sources, claims)
    training = pytorch_container_index(pod_spec)
    containers = pod_spec.get("containers")
    volumes, host_paths = _read_volumes(pod_spec.get("volumes"))
    init = pod_spec.get("initContainers")
    return ReplicaFacts(
        key,
        path,
        pod_path,
        spec,
        count,
        readable,
        pod_spec,
        gpus or ZERO,
        gpus is not None,  # gpus_known
        gpu_container,
        training,
        volumes,
        host_paths,
        _read_containers(key, "containers", containers, training, gpu_container),
        () if init is None else _read_containers(key, "initContainers", init, None, None),
        profile_annotations,
        template_metadata,
        None,  # like
    )


def _profile_annotations(annotations: object) -> tuple[tuple[str, object], ...]:
    if not isinstance(annotations, OBJECT):
        return ()  # the controller's pod create reports it
    return tuple(
        (key, value)
        for key, value in annotations.items()
        if isinstance(key, str) and key.startswith(PROFILE_ANNOTATION_PREFIXES)
    )


def _read_containers(
    replica: str,
    kind: str,
    entries: object,
    training: int | None,
    gpu_container: int | None,
) -> tuple[ContainerFacts, ...]:
    if not isinstance(entries, list):
        return ()
    out: list[ContainerFacts] = []
    for index, raw in enumerate(entries):
        fields: Mapping[str, Any] = raw if isinstance(raw, OBJECT) else {}
        command, args = fields.get("command"), fields.get("args")
        argv_ok = (command is None or (type(command) is list and all_strings(command))) and (
            args is None or (type(args) is list and all_strings(args))
        )
        line = _NOTHING_SAID
        if index == training:
            if argv_ok:  # read once: what was checked above is what the line is made of
                command, args = tuple(command or ()), tuple(args or ())
            else:
                command, args = _string_items(command), _string_items(args)
            if command or args:
                line = scan(command, args)
        out.append(
            ContainerFacts(
                _container_path(replica, kind, index),
                kind,
                raw,
                fields,
                index == training,
                index == gpu_container,
                line,
                argv_ok,
            )
        )
    return tuple(out)


def _string_items(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    if all_strings(raw):
        return tuple(raw)
    return tuple(item for item in raw if isinstance(item, str))


def all_strings(items: list[Any]) -> bool:
    """Whether every item is a JSON string (the usual case for argv lists).

    ``str.join`` checks the items in C: half the cost of a Python loop over an argv's few items
    (``all(map(...))`` costs more than the loop). It refuses anything but ``str`` and its
    subclasses, and a JSON value is never a subclass.
    """
    try:
        "".join(items)
    except TypeError:
        return False
    return True


def _read_volumes(
    volumes: object,
) -> tuple[frozenset[str] | None, tuple[tuple[int, object], ...] | None]:
    """The declared volume names and, when the list is well formed, its hostPath volumes."""
    if volumes is None:
        return frozenset(), ()
    if not isinstance(volumes, list):
        return None, None
    declared = set()
    host_paths: list[tuple[int, object]] | None = []
    for index, volume in enumerate(volumes):
        if isinstance(volume, OBJECT):
            name = volume.get("name")
            if isinstance(name, str) and name and name not in declared:
                declared.add(name)
                host_path = volume.get("hostPath")
                if host_path is not None and host_paths is not None:
                    host_paths.append((index, host_path))
                continue
            if isinstance(name, str) and name:
                declared.add(name)
        host_paths = None  # not an object, no name or a repeated one: the rule reports it
    return frozenset(declared), None if host_paths is None else tuple(host_paths)


def _elastic_workers(
    elastic: Mapping[str, Any], known: Sequence[ReplicaFacts]
) -> tuple[int, int] | None:
    """The elastic bounds as Worker counts (``gang.elastic_bounds``); None if not known."""
    low_raw, high_raw = elastic.get("minReplicas"), elastic.get("maxReplicas")
    low, high = as_int(low_raw), as_int(high_raw)
    if (low_raw is not None and (low is None or low < 1)) or (
        high_raw is not None and (high is None or high < 1)
    ):
        return None
    workers = next((r.pods or 0 for r in known if r.key == names.WORKER), 0)
    bounds = gang.elastic_bounds(low, high, workers=workers)
    return bounds if bounds[0] else None


def _expected_nnodes(
    elastic: Mapping[str, Any] | None,
    elastic_workers: tuple[int, int] | None,
    known: Sequence[ReplicaFacts],
    total: int | None,
) -> tuple[int, int] | None:
    """What the controller passes to torchrun as PET_NNODES, as (min, max); None if unknown."""
    if elastic is None:
        return gang.nnodes(total=total, elastic=None) if total else None
    masters = next((r.pods for r in known if r.key == names.MASTER), 0)
    if elastic_workers is None or masters is None:
        return None
    return gang.nnodes(total=total or 0, elastic=elastic_workers, masters=masters)


def _effective_job_name(metadata: object) -> str | None:
    if not isinstance(metadata, OBJECT):
        return None
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = metadata.get("generateName")
    if isinstance(prefix, str) and prefix:
        return prefix[:GENERATE_NAME_MAX] + GENERATED_SUFFIX
    return None


# ------------------------------------------------------------------ shared helpers


def remember_valid(kept: set[Any], item: Any, *, most: int) -> None:
    """Add ``item`` to ``kept``, a set of items rules found valid, kept across reviews.

    Rules keep what they found valid (a label, an annotation key, a toleration) because jobs
    mostly carry the same few, and one C-level set lookup costs far less than checking again.
    Bounded: the set is emptied when it holds ``most``.
    """
    if len(kept) >= most:
        kept.clear()
    kept.add(item)


def non_negative_int(value: object) -> int | None:
    """A non-negative JSON integer, else None."""
    if type(value) is int:  # the usual case, without the call
        return value if value >= 0 else None
    number = as_int(value)
    return number if number is not None and number >= 0 else None


def placeholder_hint(value: object) -> str:
    """A message suffix naming an unfilled template placeholder in ``value``, if any."""
    if isinstance(value, str):
        placeholder = unfilled_placeholder(value)
        if placeholder is not None:
            return f"; {placeholder} looks like an unfilled template placeholder"
    return ""


def quantity(value: object) -> Decimal | None:
    """``parse_quantity``, None when invalid; memoised for strings and ints (templates repeat)."""
    if isinstance(value, str) or type(value) is int:
        return _memoised_quantity(value)
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


# Quantities (exact strings and ints: ``True`` would find ``1``) known to be valid and not
# negative, with their amount: a rule's hot loop checks one with a single dict lookup.
MEMO_TYPES: Final = frozenset({str, int})
USABLE_QUANTITIES: dict[object, Decimal] = {}
_USABLE_KEPT: Final = 4096


def remember_usable(value: object, amount: Decimal) -> None:
    """Remember that ``value`` (an exact str or int) is a usable quantity of ``amount``."""
    if type(value) in MEMO_TYPES and len(USABLE_QUANTITIES) < _USABLE_KEPT:
        USABLE_QUANTITIES[value] = amount


@functools.lru_cache(maxsize=512, typed=True)
def _memoised_quantity(value: str | int) -> Decimal | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


@functools.lru_cache(maxsize=1024)
def scan(command: tuple[str, ...], args: tuple[str, ...]) -> CommandLine:
    """``scan_command_line``, memoised: a job's replicas (and successive jobs) repeat one."""
    return scan_command_line(command, args)


def count(amount: Decimal) -> str:
    """A quantity as a count (``4``, not ``4.0``)."""
    return str(int(amount)) if amount == amount.to_integral_value() else str(amount)


def quote(text: str) -> str:
    """Double-quote ``text`` the way Kubernetes messages do."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def at(path: FieldPath, *parts: str | int) -> FieldPath:
    """``path`` extended by field names and list indexes, built in one step."""
    return FieldPath(path.segments + parts, path.keyed + (False,) * len(parts))


def not_found(path: FieldPath, value: object, detail: str) -> FieldError:
    """``field.NotFound``."""
    return FieldError(ErrorType.NOT_FOUND, path, detail, value)


def non_negative_field(section: Mapping[str, Any], key: str, path: FieldPath) -> list[Finding]:
    """An ``Invalid`` error when ``section[key]`` is set and not a non-negative integer."""
    raw = section.get(key)
    if raw is None or (type(raw) is int and raw >= 0):  # the usual cases, without a call
        return []
    if non_negative_int(raw) is None:
        detail = "must be a non-negative integer" + placeholder_hint(raw)
        return [invalid(path.child(key), raw, detail)]
    return []

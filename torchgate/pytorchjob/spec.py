"""A typed, read-only view of a PyTorchJob, built from the raw object without trusting it.

The webhook validates raw dictionaries (it must report every problem with its exact path), but the
controller needs a small, typed answer to "what should exist?": replica counts, restart policy,
run policy, elastic settings. ``parse_job`` gives that view with the same in-memory defaults the
training-operator applies (replicas 1, restartPolicy OnFailure) so a job that bypassed the webhook
still runs, and returns field errors instead of raising when a section is missing or malformed.

Pod-template helpers (which container is ``pytorch``, what a container requests) live here too,
because the webhook, the controller's placement and the env contract must agree on them; the
counting (total replicas, elastic bounds, gang size) is ``gang``'s, which the webhook uses too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob import gang, names
from torchgate.pytorchjob.fieldpath import (
    ErrorType,
    FieldError,
    FieldPath,
    invalid,
    not_supported,
    required,
)
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity

# isinstance() tries the exact JSON type first; the ABC check alone is several times slower.
_OBJECT: Final = (dict, Mapping)

SPEC = FieldPath.root("spec")
NAME = FieldPath.root("metadata").child("name")
REPLICA_SPECS = SPEC.child("pytorchReplicaSpecs")
RUN_POLICY = SPEC.child("runPolicy")


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """One entry of ``spec.pytorchReplicaSpecs`` after in-memory defaulting."""

    replica_type: names.ReplicaType
    replicas: int
    restart_policy: str
    template: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ElasticPolicy:
    """``spec.elasticPolicy`` (torchrun rendezvous settings)."""

    min_replicas: int | None = None
    max_replicas: int | None = None
    rdzv_backend: str | None = None
    rdzv_host: str | None = None
    rdzv_port: int | None = None
    rdzv_id: str | None = None
    rdzv_conf: tuple[tuple[str, str], ...] = ()
    standalone: bool | None = None
    n_proc_per_node: int | None = None
    max_restarts: int | None = None


@dataclass(frozen=True, slots=True)
class RunPolicy:
    """``spec.runPolicy`` with torchgate's defaults (``cleanPodPolicy: Running``)."""

    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    suspend: bool = False
    managed_by: str | None = None
    min_available: int | None = None
    schedule_timeout_seconds: int | None = None
    priority_class: str | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What the controller needs to know about a PyTorchJob."""

    namespace: str
    name: str
    uid: str
    replica_specs: tuple[ReplicaSpec, ...]
    run_policy: RunPolicy
    elastic: ElasticPolicy | None
    nproc_per_node: str | None
    annotations: Mapping[str, str]

    def replica(self, replica_type: str) -> ReplicaSpec | None:
        """The spec of ``replica_type``, if the job has one."""
        for spec in self.replica_specs:
            if spec.replica_type == replica_type:
                return spec
        return None

    @property
    def has_master(self) -> bool:
        """Whether the job has a Master replica (else worker 0 is the rendezvous master)."""
        return self.replica(names.MASTER) is not None

    def count(self, replica_type: str) -> int:
        """Replicas of ``replica_type`` (0 when the job has none)."""
        spec = self.replica(replica_type)
        return spec.replicas if spec is not None else 0

    @property
    def total_replicas(self) -> int:
        """Pods in the whole job."""
        return gang.total_replicas(spec.replicas for spec in self.replica_specs)

    @property
    def elastic_bounds(self) -> gang.Bounds | None:
        """``(minReplicas, maxReplicas)`` of an elastic job (``gang.elastic_bounds``), else None."""
        if self.elastic is None:
            return None
        return gang.elastic_bounds(
            self.elastic.min_replicas, self.elastic.max_replicas, workers=self.count(names.WORKER)
        )

    @property
    def min_available(self) -> int:
        """Pods that must be placed together before any is created (``gang.min_available``)."""
        return gang.min_available(
            self.run_policy.min_available,
            total=self.total_replicas,
            default=gang.default_gang_size(
                masters=self.count(names.MASTER),
                workers=self.count(names.WORKER),
                elastic=self.elastic_bounds,
            ),
        )


def canonical_replica_type(key: object) -> names.ReplicaType | None:
    """``Master``/``Worker`` for any capitalisation of them, else ``None``."""
    if isinstance(key, str):
        for replica_type in names.REPLICA_TYPES:
            if key.lower() == replica_type.lower():
                return replica_type
    return None


def as_int(value: object) -> int | None:
    """An integer from JSON (rejects booleans and non-integral numbers), else ``None``."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (raw objects may hold anything)."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    """``value`` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def as_text(value: object) -> str:
    """``value`` when it is a string, else an empty one."""
    return value if isinstance(value, str) else ""


def is_suspended(raw: object) -> bool:
    """Whether the raw job's ``spec.runPolicy.suspend`` is true (``RunPolicy.suspend``).

    A suspended job has no pods and is not queued for admission until it is resumed.
    """
    spec = as_mapping(as_mapping(raw).get("spec"))
    return _suspend_of(spec.get("runPolicy"))


def managed_by(raw: object) -> str | None:
    """The raw job's ``spec.runPolicy.managedBy`` (``RunPolicy.managed_by``), ``None`` when unset.

    The controller runs a job only when it names ``names.CONTROLLER_NAME`` (or, by flag, names
    nobody): ``reconciler.is_ours``.
    """
    spec = as_mapping(as_mapping(raw).get("spec"))
    return _manager_of(spec.get("runPolicy"))


def _suspend_of(run_policy: object) -> bool:
    return as_mapping(run_policy).get("suspend") is True


def _manager_of(run_policy: object) -> str | None:
    manager = as_mapping(run_policy).get("managedBy")
    return manager if isinstance(manager, str) and manager else None


def parse_job(raw: object) -> tuple[JobSpec | None, list[FieldError]]:
    """Build a ``JobSpec`` from a raw object; return ``(None, errors)`` when it cannot run."""
    errors: list[FieldError] = []
    if not isinstance(raw, _OBJECT):
        return None, [invalid(FieldPath(), type(raw).__name__, "must be an object")]
    metadata = raw.get("metadata")
    metadata = metadata if isinstance(metadata, _OBJECT) else {}
    spec = raw.get("spec")
    if not isinstance(spec, _OBJECT):
        return None, [required(SPEC, "must be an object")]
    replica_specs = _parse_replica_specs(spec.get("pytorchReplicaSpecs"), errors)
    run_policy = _parse_run_policy(spec.get("runPolicy"), errors)
    elastic = _parse_elastic(spec.get("elasticPolicy"), errors)
    nproc = spec.get("nprocPerNode")
    if nproc is not None and not isinstance(nproc, str):
        nproc = str(nproc) if as_int(nproc) is not None else None
    annotations = metadata.get("annotations")
    name = str(metadata.get("name") or "")
    if name and not errors:  # none yet at admission of a generateName: the webhook checks that
        errors.extend(_name_errors(name, replica_specs, elastic))
    if errors:
        return None, errors
    return (
        JobSpec(
            namespace=str(metadata.get("namespace") or "default"),
            name=name,
            uid=str(metadata.get("uid") or ""),
            replica_specs=replica_specs,
            run_policy=run_policy,
            elastic=elastic,
            nproc_per_node=nproc,
            annotations=annotations if isinstance(annotations, _OBJECT) else {},
        ),
        [],
    )


def _name_errors(
    name: str, replica_specs: Sequence[ReplicaSpec], elastic: ElasticPolicy | None
) -> list[FieldError]:
    # The apiserver stores a PyTorchJob under any DNS-1123 subdomain ("train.v2", 253
    # characters); its Services must be DNS-1035 labels, so such a job can never start.
    problems = names.dns1035_errors(name)
    if problems:
        return [invalid(NAME, name, ", ".join(problems))]
    highest: list[tuple[str, int]] = [
        (r.replica_type, max(r.replicas - 1, 0)) for r in replica_specs
    ]
    if elastic is not None:
        workers = next((r.replicas for r in replica_specs if r.replica_type == names.WORKER), 0)
        grown = gang.elastic_bounds(elastic.min_replicas, elastic.max_replicas, workers=workers)[1]
        highest.append((names.WORKER, max(grown - 1, 0)))
    too_long = derived_name_error(name, highest)
    return [] if too_long is None else [too_long]


def derived_name_error(
    job_name: str,
    highest_indexes: Iterable[tuple[str, int]],
    *,
    generated_suffix: int | None = None,
) -> FieldError | None:
    """``metadata.name`` too long when a pod or Service name derived from it passes 63 characters.

    ``highest_indexes``: per replica type, the highest index it may have (elastic growth
    included). ``generated_suffix``: for a ``generateName``, how many characters the apiserver
    adds to it (the advice then names the prefix's limit).
    """
    most, longest_slot = 0, ("", 0)
    for replica_type, index in highest_indexes:
        length = names.replica_name_length(job_name, replica_type, index)
        if length > most:
            most, longest_slot = length, (replica_type, index)
    if most <= names.DNS_LABEL_MAX:
        return None
    longest = names.replica_name(job_name, *longest_slot)
    room = names.DNS_LABEL_MAX - (len(longest) - len(job_name))
    if generated_suffix is not None:
        limit = f"keep generateName at most {room - generated_suffix} characters"
    else:
        limit = f"keep the job name at most {room} characters"
    detail = (  # the name is a DNS-1035 label: nothing in it needs escaping
        f'the derived pod and Service name "{longest}" has {len(longest)} characters '
        f"(at most {names.DNS_LABEL_MAX}); {limit}"
    )
    return FieldError(ErrorType.TOO_LONG, NAME, detail, job_name)


def _parse_replica_specs(value: object, errors: list[FieldError]) -> tuple[ReplicaSpec, ...]:
    if not isinstance(value, _OBJECT) or not value:
        errors.append(required(REPLICA_SPECS, "must be required"))
        return ()
    found: dict[names.ReplicaType, ReplicaSpec] = {}
    for key, entry in value.items():
        path = REPLICA_SPECS.key(str(key))
        replica_type = canonical_replica_type(key)
        if replica_type is None:
            errors.append(not_supported(path, key, names.REPLICA_TYPES))
            continue
        if not isinstance(entry, _OBJECT):
            errors.append(required(path, "must be an object"))
            continue
        replicas = entry.get("replicas", 1)
        count = as_int(replicas)
        if count is None or count < 0:
            errors.append(invalid(path.child("replicas"), replicas, "must be an integer >= 0"))
            continue
        if count > gang.MAX_REPLICAS:
            detail = f"must be less than or equal to {gang.MAX_REPLICAS}"
            errors.append(invalid(path.child("replicas"), replicas, detail))
            continue
        restart = entry.get("restartPolicy") or names.DEFAULT_RESTART_POLICY
        if restart not in names.RESTART_POLICIES:
            errors.append(
                not_supported(path.child("restartPolicy"), restart, names.RESTART_POLICIES)
            )
            continue
        template = entry.get("template")
        pod_spec = template.get("spec") if isinstance(template, _OBJECT) else None
        containers = pod_spec.get("containers") if isinstance(pod_spec, _OBJECT) else None
        if not isinstance(containers, Sequence) or not containers:
            errors.append(
                required(path.child("template", "spec", "containers"), "must be specified")
            )
            continue
        assert isinstance(template, _OBJECT)
        found[replica_type] = ReplicaSpec(replica_type, count, str(restart), template)
    return tuple(found[t] for t in names.REPLICA_TYPES if t in found)


def _optional_int(
    section: Mapping[str, Any], key: str, path: FieldPath, errors: list[FieldError]
) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    number = as_int(value)
    if number is None:
        errors.append(invalid(path.child(key), value, "must be an integer"))
    return number


def _parse_run_policy(value: object, errors: list[FieldError]) -> RunPolicy:
    if value is None:
        return RunPolicy()
    if not isinstance(value, _OBJECT):
        errors.append(invalid(RUN_POLICY, value, "must be an object"))
        return RunPolicy()
    clean = value.get("cleanPodPolicy") or "Running"
    if clean not in names.CLEAN_POD_POLICIES:
        errors.append(
            not_supported(RUN_POLICY.child("cleanPodPolicy"), clean, names.CLEAN_POD_POLICIES)
        )
    scheduling = value.get("schedulingPolicy")
    scheduling_path = RUN_POLICY.child("schedulingPolicy")
    if scheduling is not None and not isinstance(scheduling, _OBJECT):
        errors.append(invalid(scheduling_path, scheduling, "must be an object"))
    scheduling = scheduling if isinstance(scheduling, _OBJECT) else {}
    priority_class = scheduling.get("priorityClass")
    return RunPolicy(
        clean_pod_policy=str(clean),
        ttl_seconds_after_finished=_optional_int(
            value, "ttlSecondsAfterFinished", RUN_POLICY, errors
        ),
        active_deadline_seconds=_optional_int(value, "activeDeadlineSeconds", RUN_POLICY, errors),
        backoff_limit=_optional_int(value, "backoffLimit", RUN_POLICY, errors),
        suspend=_suspend_of(value),
        managed_by=_manager_of(value),
        min_available=_optional_int(scheduling, "minAvailable", scheduling_path, errors),
        schedule_timeout_seconds=_optional_int(
            scheduling, "scheduleTimeoutSeconds", scheduling_path, errors
        ),
        priority_class=priority_class if isinstance(priority_class, str) else None,
    )


def _parse_elastic(value: object, errors: list[FieldError]) -> ElasticPolicy | None:
    if value is None:
        return None
    path = SPEC.child("elasticPolicy")
    if not isinstance(value, _OBJECT):
        errors.append(invalid(path, value, "must be an object"))
        return None
    conf = value.get("rdzvConf")
    pairs: list[tuple[str, str]] = []
    if isinstance(conf, Sequence) and not isinstance(conf, str):
        for item in conf:
            if isinstance(item, _OBJECT) and isinstance(item.get("key"), str):
                pairs.append((item["key"], str(item.get("value", ""))))

    def text(key: str) -> str | None:
        item = value.get(key)
        return item if isinstance(item, str) and item else None

    standalone = value.get("standalone")
    return ElasticPolicy(
        min_replicas=_optional_int(value, "minReplicas", path, errors),
        max_replicas=_optional_int(value, "maxReplicas", path, errors),
        rdzv_backend=text("rdzvBackend"),
        rdzv_host=text("rdzvHost"),
        rdzv_port=_optional_int(value, "rdzvPort", path, errors),
        rdzv_id=text("rdzvId"),
        rdzv_conf=tuple(pairs),
        standalone=standalone if isinstance(standalone, bool) else None,
        n_proc_per_node=_optional_int(value, "nProcPerNode", path, errors),
        max_restarts=_optional_int(value, "maxRestarts", path, errors),
    )


# ------------------------------------------------------------------ pod template helpers


def pod_spec_of(template: object) -> Mapping[str, Any]:
    """``template.spec`` as a mapping (empty when missing or malformed)."""
    if isinstance(template, _OBJECT):
        spec = template.get("spec")
        if isinstance(spec, _OBJECT):
            return spec
    return {}


def containers_of(pod_spec: Mapping[str, Any], key: str = "containers") -> list[Mapping[str, Any]]:
    """The well-formed entries of ``containers`` (or ``initContainers``)."""
    containers = pod_spec.get(key)
    if not isinstance(containers, list):
        return []
    return [c for c in containers if isinstance(c, _OBJECT)]


def pytorch_container_index(pod_spec: Mapping[str, Any]) -> int | None:
    """Index of the training container in ``containers``: the one torchgate calls ``pytorch``.

    The one answer to "which container is ``pytorch``", for the webhook (defaulted port and
    ``/dev/shm``, env and launch-argument rules) and the controller (env, Service ports, exit
    code). As the training-operator's ``getDefaultContainerIndex``: the first container named
    ``pytorch``, else the first container (``None`` when there is none or it is not an object).
    The webhook still refuses a job whose containers have no ``pytorch``; the fallback lets its
    report check the container that would have been meant, and lets a job that bypassed the
    webhook run with the env contract.
    """
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return None
    for index, container in enumerate(containers):
        if isinstance(container, _OBJECT) and container.get("name") == names.CONTAINER_NAME:
            return index
    return 0 if isinstance(containers[0], _OBJECT) else None


def pytorch_container_name(pod_spec: Mapping[str, Any]) -> str | None:
    """The name of the training container (``pytorch_container_index``), to find its status."""
    index = pytorch_container_index(pod_spec)
    if index is None:
        return None
    name = pod_spec["containers"][index].get("name")
    return name if isinstance(name, str) else None


def container_requests(
    container: Mapping[str, Any], *, only: str | None = None
) -> dict[str, Decimal]:
    """What a container asks the scheduler for: ``requests``, falling back to ``limits``.

    Kubernetes defaults a missing request to its limit, so a container with only
    ``limits: {nvidia.com/gpu: 1}`` requests one GPU. Unparseable quantities are skipped (the
    webhook reports them; the controller must not crash on them). ``only`` limits the answer to
    one resource (the webhook asks about GPUs on every review and parses nothing else).
    """
    resources = container.get("resources")
    if not isinstance(resources, _OBJECT):
        return {}
    if only is not None:  # one lookup per section, not a walk of every resource
        for section in ("requests", "limits"):  # the first usable amount wins
            values = resources.get(section)
            if isinstance(values, _OBJECT):
                value = values.get(only)
                if type(value) is int:  # the usual GPU count, without the parsing calls
                    return {only: Decimal(value)}
                amount = None if value is None else _quantity_or_none(value)  # null: none
                if amount is not None:
                    return {only: amount}
        return {}
    out: dict[str, Decimal] = {}
    for section in ("limits", "requests"):  # requests win where both are given
        values = resources.get(section)
        if not isinstance(values, _OBJECT):
            continue
        for name, quantity in values.items():
            try:
                out[str(name)] = parse_quantity(quantity)
            except QuantityError:
                continue
    return out


_ZERO: Final = Decimal(0)


def _quantity_or_none(value: object) -> Decimal | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def pod_requests(pod_spec: Mapping[str, Any], *, only: str | None = None) -> dict[str, Decimal]:
    """Effective pod request: sum of containers, at least each init container, plus overhead.

    ``only`` limits the answer to one resource, as for ``container_requests``.
    """
    total: dict[str, Decimal] = {}
    containers = pod_spec.get("containers")
    if isinstance(containers, list):
        for container in containers:
            if isinstance(container, _OBJECT):
                for name, amount in container_requests(container, only=only).items():
                    total[name] = total.get(name, _ZERO) + amount
    if "initContainers" in pod_spec:
        for init in containers_of(pod_spec, "initContainers"):
            for name, amount in container_requests(init, only=only).items():
                if init.get("restartPolicy") == "Always":  # sidecar: runs beside the containers
                    total[name] = total.get(name, _ZERO) + amount
                elif amount > total.get(name, _ZERO):
                    total[name] = amount
    overhead = pod_spec.get("overhead")
    if overhead is not None and isinstance(overhead, _OBJECT):  # None: no ABC check
        for name, quantity in overhead.items():
            if only is not None and name != only:
                continue
            try:
                total[str(name)] = total.get(str(name), _ZERO) + parse_quantity(quantity)
            except QuantityError:
                continue
    return total


def pinned_hosts(annotations: object) -> list[str]:
    """Hosts from the ``torchgate.io/hosts`` annotation, in order, without blanks or repeats."""
    if not isinstance(annotations, _OBJECT):
        return []
    value = annotations.get(names.ANNOTATION_HOSTS)
    if not isinstance(value, str):
        return []
    hosts: list[str] = []
    for part in value.split(","):
        host = part.strip()
        if host and host not in hosts:
            hosts.append(host)
    return hosts

"""Validation of PyTorchJobs: what the validating webhook refuses, and why.

Why a webhook validates what the CRD schema could: a PyTorchJob that is accepted but cannot run is
worse than one that is refused. The controller creates the gang, the pods hold their GPUs, and the
job fails minutes later (or hangs) for a reason that was visible in the manifest: a stray
``--world-size=16``, ``nccl`` on a CPU-only replica, an env entry pasted under ``volumeMounts``, an
unfilled ``${IMAGE_URI}``. This module finds those problems and reports every one of them with the
Kubernetes field path and error type, in a stable order (metadata, spec, then Master before Worker,
containers in index order), so ``kubectl`` users read one complete list instead of fixing one error
per submission.

It keeps the training-operator v1.9 webhook's rules and messages (users and tooling know them),
fixes its defects (the update check compared the new object with itself; a ``null`` replica
crashed it) and adds the rules upstream misses. It never assumes the mutating webhook ran: a
missing ``replicas`` means 1, a missing ``restartPolicy`` OnFailure, a missing ``cleanPodPolicy``
Running. Any JSON value may appear anywhere; malformed input becomes a field error, never an
exception.

Updates ratchet: when neither ``spec`` nor the pinned-hosts annotation changed, only immutable
fields are checked, so a job admitted under older rules stays updatable for labels and finalizers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob import contract, names
from torchgate.pytorchjob.fieldpath import (
    ErrorType,
    FieldError,
    FieldPath,
    dedupe,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
)
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity
from torchgate.pytorchjob.spec import (
    as_int,
    canonical_replica_type,
    container_requests,
    pinned_hosts,
)
from torchgate.webhook.arguments import (
    STRAY_FLAGS,
    CommandLine,
    FlagUse,
    parse_nnodes,
    scan_command_line,
)
from torchgate.webhook.imageref import (
    image_reference_problem,
    is_lone_placeholder,
    unfilled_placeholder,
)

# isinstance() tries the exact JSON type first; the ABC check is several times slower.
_OBJECT: Final = (dict, Mapping)

_METADATA = FieldPath.root("metadata")
_NAME = _METADATA.child("name")
_ANNOTATIONS = _METADATA.child("annotations")
_HOSTS_ANNOTATION = _ANNOTATIONS.key(names.ANNOTATION_HOSTS)
_STATUS = FieldPath.root("status")
_SPEC = FieldPath.root("spec")
_REPLICA_SPECS = _SPEC.child("pytorchReplicaSpecs")
_NPROC_PER_NODE = _SPEC.child("nprocPerNode")
_ELASTIC = _SPEC.child("elasticPolicy")
_RUN_POLICY = _SPEC.child("runPolicy")
_MANAGED_BY = _RUN_POLICY.child("managedBy")
_SCHEDULING = _RUN_POLICY.child("schedulingPolicy")

# The apiserver appends 5 random characters to generateName, truncated to leave room for them.
_GENERATED_SUFFIX: Final = "x" * 5
_GENERATE_NAME_MAX: Final = names.DNS_LABEL_MAX - len(_GENERATED_SUFFIX)
_HOST_NAME_MAX: Final = 253

_NPROC_KEYWORDS: Final = ("auto", "cpu", "gpu")
_TORCHRUN_NPROC_KEYWORDS: Final = frozenset({"auto", "cpu", "gpu", "xpu"})
_NO_GPU_VALUES: Final = frozenset({"", "void", "none"})
_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"

_SPEC_FIELDS: Final = frozenset(
    {"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"}
)
_REPLICA_FIELDS: Final = frozenset({"replicas", "restartPolicy", "template"})
_RUN_POLICY_FIELDS: Final = frozenset(
    {
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
        "suspend",
        "managedBy",
    }
)
_ELASTIC_FIELDS: Final = frozenset(
    {
        "minReplicas",
        "maxReplicas",
        "rdzvBackend",
        "rdzvHost",
        "rdzvPort",
        "rdzvId",
        "rdzvConf",
        "standalone",
        "nProcPerNode",
        "maxRestarts",
        "metrics",
    }
)
_SCHEDULING_FIELDS: Final = frozenset(
    {"minAvailable", "queue", "minResources", "priorityClass", "scheduleTimeoutSeconds"}
)
_CONTAINER_FIELDS: Final = frozenset(
    {
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "env",
        "envFrom",
        "resources",
        "volumeMounts",
        "ports",
        "securityContext",
        "workingDir",
    }
)
_POD_FIELDS: Final = frozenset(
    {
        "containers",
        "initContainers",
        "volumes",
        "nodeSelector",
        "tolerations",
        "affinity",
        "schedulerName",
        "hostNetwork",
        "serviceAccountName",
        "priorityClassName",
    }
)


def _unknown_spec_field_hint(key: str) -> str:
    if key in _RUN_POLICY_FIELDS:
        return f"moved to spec.runPolicy.{key} in kubeflow.org/v1"
    if key in _ELASTIC_FIELDS:
        return f"belongs in spec.elasticPolicy.{key}"
    return "supported fields: elasticPolicy, nprocPerNode, pytorchReplicaSpecs, runPolicy"


def _unknown_replica_field_hint(key: str) -> str:
    if key in _CONTAINER_FIELDS:
        return "belongs in template.spec.containers[*]"
    if key in _POD_FIELDS:
        return "belongs in template.spec"
    if key in ("labels", "annotations"):
        return "belongs in template.metadata"
    return "supported fields: replicas, restartPolicy, template"


# Where each reserved injected variable's value comes from (and what to set instead, if anything).
_INJECTED_ENV: Final = {name: contract.SOURCES[name] for name in contract.RESERVED}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of validation: every field error and every ``torchgate:`` warning."""

    errors: tuple[FieldError, ...]
    warnings: tuple[str, ...]

    @property
    def allowed(self) -> bool:
        """Whether the object may be admitted (warnings never deny)."""
        return not self.errors


def validate_create(job: Mapping[str, Any], policy: PlacementPolicy) -> Verdict:
    """Validate a PyTorchJob being created under ``policy``."""
    return _JobValidator(job, policy, old=None, creating=True).verdict()


def validate_update(
    old: Mapping[str, Any], new: Mapping[str, Any], policy: PlacementPolicy
) -> Verdict:
    """Validate an update from ``old`` to ``new``: immutables always, the rest only on change."""
    if _admission_inputs_unchanged(old, new):
        return Verdict(_deduplicated(_immutable_field_errors(old, new)), ())
    return _JobValidator(new, policy, old=old, creating=False).verdict()


# ------------------------------------------------------------------ update helpers


def _admission_inputs_unchanged(old: object, new: object) -> bool:
    if not isinstance(old, _OBJECT) or not isinstance(new, _OBJECT):
        return False
    return old.get("spec") == new.get("spec") and _hosts_annotation(old) == _hosts_annotation(new)


def _hosts_annotation(job: Mapping[str, Any]) -> object:
    metadata = job.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, _OBJECT) else None
    return annotations.get(names.ANNOTATION_HOSTS) if isinstance(annotations, _OBJECT) else None


def _managed_by(job: object) -> object:
    spec = job.get("spec") if isinstance(job, _OBJECT) else None
    run_policy = spec.get("runPolicy") if isinstance(spec, _OBJECT) else None
    return run_policy.get("managedBy") if isinstance(run_policy, _OBJECT) else None


def _immutable_field_errors(old: object, new: object) -> list[FieldError]:
    old_value, new_value = _managed_by(old), _managed_by(new)
    if old_value == new_value:
        return []
    return [invalid(_MANAGED_BY, new_value, "field is immutable")]


# ------------------------------------------------------------------ small pure helpers


def _non_negative_int(value: object) -> int | None:
    number = as_int(value)
    return number if number is not None and number >= 0 else None


def _positive_int_text(value: object) -> int | None:
    """A positive integer given as a JSON integer or a string of digits, else None."""
    if isinstance(value, str):
        return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else None
    number = as_int(value)
    return number if number is not None and number > 0 else None


def _placeholder_hint(value: object) -> str:
    if isinstance(value, str):
        placeholder = unfilled_placeholder(value)
        if placeholder is not None:
            return f"; {placeholder} looks like an unfilled template placeholder"
    return ""


def _is_host_name(host: str) -> bool:
    """A DNS-1123 subdomain (the shape of node names)."""
    return len(host) <= _HOST_NAME_MAX and all(
        names.is_dns1123_label(part) for part in host.split(".")
    )


def _quantity_detail(value: object) -> str:
    if value is None:
        return (
            "must be a quantity such as 1, 500m or 4Gi (YAML reads a key with nothing after "
            "the colon as null)"
        )
    return "must be a quantity such as 1, 500m or 4Gi" + _placeholder_hint(value)


def _quantity(value: object) -> Decimal | None:
    """``parse_quantity``, None when invalid; memoised for strings (templates repeat them)."""
    if isinstance(value, str):
        return _quantity_text(value)
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


@functools.lru_cache(maxsize=1024)
def _scan(command: tuple[str, ...], args: tuple[str, ...]) -> CommandLine:
    """``scan_command_line``, memoised: a job's replicas (and successive jobs) repeat one."""
    return scan_command_line(command, args)


@functools.lru_cache(maxsize=512)
def _quantity_text(value: str) -> Decimal | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _count(amount: Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else str(amount)


def _expanded_at_runtime(use: FlagUse) -> bool:
    """Whether a flag value is a variable something expands before the program sees it."""
    value = use.value or ""
    return "$(" in value or (use.in_shell and "$" in value)


def _quote(text: str) -> str:
    """Double-quote ``text`` the way Kubernetes messages do."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _deduplicated(errors: list[FieldError]) -> tuple[FieldError, ...]:
    """Drop repeated errors like ``dedupe``, without its cost in the common case.

    ``dedupe`` renders every path and message. Errors that differ in type, path or detail render
    differently unless two distinct paths print alike (a map key "0" beside a list index 0),
    which this module never produces for one field; so ``dedupe`` runs only on a collision.
    """
    # id(): error types are enum singletons, and Enum.__hash__ is a slow Python-level call.
    keys = {(id(e.type), e.path.segments, e.detail) for e in errors}
    return tuple(errors) if len(keys) == len(errors) else tuple(dedupe(errors))


def _at(path: FieldPath, *parts: str | int) -> FieldPath:
    """``path`` extended by field names and list indexes, built in one step."""
    return FieldPath(path.segments + parts, path.keyed + (False,) * len(parts))


def _not_found(path: FieldPath, value: object, detail: str) -> FieldError:
    return FieldError(ErrorType.NOT_FOUND, path, detail, value)


# ------------------------------------------------------------------ replicas, read once


@dataclass(slots=True)
class _Replica:
    """What several rules need to know about one ``pytorchReplicaSpecs`` entry."""

    key: str
    path: FieldPath
    pod_path: FieldPath  # ...[T].template.spec
    spec: Mapping[str, Any] | None
    # None when ``replicas`` is not a non-negative integer (then counts are unknown).
    count: int | None = 1
    pod_spec: Mapping[str, Any] = field(default_factory=dict)
    gpus: Decimal = Decimal(0)
    gpu_container: int | None = None
    training_container: int | None = None


def _read_replica(key: str, raw: object, gpu_resource: str) -> _Replica:
    path = _REPLICA_SPECS.key(key)
    replica = _Replica(
        key, path, _at(path, "template", "spec"), raw if isinstance(raw, _OBJECT) else None
    )
    if replica.spec is None:
        return replica
    replicas = replica.spec.get("replicas")
    replica.count = 1 if replicas is None else _non_negative_int(replicas)
    template = replica.spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, _OBJECT) else None
    if not isinstance(pod_spec, _OBJECT):
        return replica
    replica.pod_spec = pod_spec
    containers = pod_spec.get("containers")
    if not isinstance(containers, list):
        return replica
    for index, container in enumerate(containers):
        if not isinstance(container, _OBJECT):
            continue
        if replica.training_container is None and container.get("name") == names.CONTAINER_NAME:
            replica.training_container = index
        gpus = container_requests(container, only=gpu_resource).get(gpu_resource, Decimal(0))
        if gpus > 0:
            replica.gpus += gpus
            if replica.gpu_container is None:
                replica.gpu_container = index
    if replica.training_container is None and containers and isinstance(containers[0], _OBJECT):
        # Like the training-operator's defaulter: without a "pytorch" container, the first one.
        replica.training_container = 0
    return replica


# ------------------------------------------------------------------ the validator


class _JobValidator:
    """One validation run: reads the job once, then emits errors section by section, in order."""

    def __init__(
        self,
        job: Mapping[str, Any],
        policy: PlacementPolicy,
        *,
        old: Mapping[str, Any] | None,
        creating: bool,
    ) -> None:
        self.job: Mapping[str, Any] = job if isinstance(job, _OBJECT) else {}
        self.is_object = isinstance(job, _OBJECT)
        self.policy = policy
        self.old = old
        self.creating = creating
        self.errors: list[FieldError] = []
        self.warnings: list[str] = []
        self.host_path_refusals: dict[str, str | None] = {}
        spec = self.job.get("spec")
        self.spec: Mapping[str, Any] = spec if isinstance(spec, _OBJECT) else {}
        specs = self.spec.get("pytorchReplicaSpecs")
        self.replica_specs: Mapping[str, Any] = specs if isinstance(specs, _OBJECT) else {}
        self.replicas = [
            _read_replica(str(key), raw, policy.gpu_resource)
            for key, raw in self.replica_specs.items()
        ]
        self.known_replicas = [
            replica
            for replica_type in names.REPLICA_TYPES
            for replica in self.replicas
            if replica.key == replica_type
        ]
        counts = [replica.count for replica in self.known_replicas]
        self.total_replicas: int | None = (
            sum(c for c in counts if c is not None) if None not in counts else None
        )
        self.first_gpu_replica = next((r for r in self.known_replicas if r.gpus > 0), None)
        self.nproc_per_node = _positive_int_text(self.spec.get("nprocPerNode"))
        elastic = self.spec.get("elasticPolicy")
        self.elastic: Mapping[str, Any] | None = elastic if isinstance(elastic, _OBJECT) else None
        self.expected_nnodes = self._expected_nnodes()
        self.job_name = self._effective_job_name()

    # ---------------------------------------------------------------- entry point and output

    def verdict(self) -> Verdict:
        if not self.is_object:
            self.errors.append(invalid(FieldPath(), None, "must be a PyTorchJob object"))
        else:
            self._check_metadata()
            if self.creating:
                self._check_create_only_fields()
            self._check_spec()
            for replica in self.known_replicas:
                self._check_replica(replica)
            for replica in self.replicas:
                if replica.key not in names.REPLICA_TYPES:
                    self._report_unknown_replica_type(replica)
        return Verdict(_deduplicated(self.errors), tuple(dict.fromkeys(self.warnings)))

    @property
    def policy_label(self) -> str:
        return f"PlacementPolicy {_quote(self.policy.name)}"

    def warn(self, path: FieldPath, text: str) -> None:
        self.warnings.append(f"torchgate: {path}: {text}")

    # ---------------------------------------------------------------- derived facts

    def _expected_nnodes(self) -> tuple[int, int] | None:
        """What the controller passes to torchrun as PET_NNODES, as (min, max); None if unknown."""
        if self.elastic is None:
            total = self.total_replicas
            return (total, total) if total else None
        low_raw, high_raw = self.elastic.get("minReplicas"), self.elastic.get("maxReplicas")
        low, high = as_int(low_raw), as_int(high_raw)
        if (low_raw is not None and (low is None or low < 1)) or (
            high_raw is not None and (high is None or high < 1)
        ):
            return None
        if low is None and high is None:
            worker = next((r for r in self.known_replicas if r.key == names.WORKER), None)
            if worker is None or not worker.count:
                return None
            return worker.count, worker.count
        if low is None or high is None:
            both = high if low is None else low
            assert both is not None
            return both, both
        return low, high

    def _effective_job_name(self) -> str | None:
        metadata = self.job.get("metadata")
        if not isinstance(metadata, _OBJECT):
            return None
        name = metadata.get("name")
        if isinstance(name, str) and name:
            return name
        prefix = metadata.get("generateName")
        if isinstance(prefix, str) and prefix:
            return prefix[:_GENERATE_NAME_MAX] + _GENERATED_SUFFIX
        return None

    @property
    def master_pod_name(self) -> str:
        has_master = any(r.key == names.MASTER for r in self.known_replicas)
        replica_type, index = names.master_replica(has_master)
        return names.replica_name(self.job_name or "<job>", replica_type, index)

    # ---------------------------------------------------------------- metadata

    def _check_metadata(self) -> None:
        metadata = self.job.get("metadata")
        if metadata is not None and not isinstance(metadata, _OBJECT):
            self.errors.append(invalid(_METADATA, metadata, "must be an object"))
            return
        metadata = metadata or {}
        self._check_name(metadata)
        self._check_pinned_hosts(metadata.get("annotations"))

    def _check_name(self, metadata: Mapping[str, Any]) -> None:
        name, prefix = metadata.get("name"), metadata.get("generateName")
        if name is not None and name != "" and not isinstance(name, str):
            self.errors.append(invalid(_NAME, name, "must be a string"))
            return
        if not name and not (isinstance(prefix, str) and prefix):
            self.errors.append(required(_NAME, "name or generateName is required"))
            return
        job_name = self.job_name
        assert job_name is not None
        problems = names.dns1035_errors(job_name)
        if problems:
            shown = name if name else prefix
            detail = ", ".join(problems)
            if not name:
                detail = f"generateName plus 5 random characters must be a valid name: {detail}"
            self.errors.append(invalid(_NAME, shown, detail))
            return
        self._check_derived_name_length(job_name, generated=not name)

    def _check_derived_name_length(self, job_name: str, *, generated: bool) -> None:
        longest = ""
        for replica in self.known_replicas:
            highest = (replica.count or 1) - 1
            if replica.key == names.WORKER and self.expected_nnodes and self.elastic is not None:
                highest = max(highest, self.expected_nnodes[1] - 1)
            derived = names.replica_name(job_name, replica.key, max(highest, 0))
            if len(derived) > len(longest):
                longest = derived
        if len(longest) <= names.DNS_LABEL_MAX:
            return
        room = names.DNS_LABEL_MAX - (len(longest) - len(job_name))
        if generated:
            limit = f"keep generateName at most {room - len(_GENERATED_SUFFIX)} characters"
        else:
            limit = f"keep the job name at most {room} characters"
        detail = (
            f"the derived pod and Service name {_quote(longest)} has {len(longest)} characters "
            f"(at most {names.DNS_LABEL_MAX}); {limit}"
        )
        self.errors.append(FieldError(ErrorType.TOO_LONG, _NAME, detail, job_name))

    def _check_pinned_hosts(self, annotations: object) -> None:
        if annotations is None:
            return
        if not isinstance(annotations, _OBJECT):
            self.errors.append(invalid(_ANNOTATIONS, annotations, "must map keys to strings"))
            return
        raw = annotations.get(names.ANNOTATION_HOSTS)
        if raw is None:
            return
        if not isinstance(raw, str):
            self.errors.append(
                invalid(_HOSTS_ANNOTATION, raw, "must be a comma-separated list of node names")
            )
            return
        allowed = self.policy.allowed_hosts
        for host in pinned_hosts(annotations):
            if not _is_host_name(host):
                self.errors.append(
                    invalid(
                        _HOSTS_ANNOTATION,
                        host,
                        "must be node names (lower-case DNS-1123 subdomains) separated by commas",
                    )
                )
            elif allowed and host not in allowed:
                self.errors.append(not_supported(_HOSTS_ANNOTATION, host, allowed))

    def _check_create_only_fields(self) -> None:
        metadata = self.job.get("metadata")
        if isinstance(metadata, _OBJECT):
            for key in ("resourceVersion", "uid"):
                if metadata.get(key) not in (None, ""):
                    self.errors.append(
                        forbidden(
                            _METADATA.child(key),
                            "must not be set when creating (this looks like `kubectl get -o "
                            "yaml` output: drop resourceVersion, uid and status)",
                        )
                    )
        if self.job.get("status") not in (None, {}):
            self.errors.append(
                forbidden(_STATUS, "must not be set when creating; the controller reports status")
            )

    # ---------------------------------------------------------------- spec level

    def _check_spec(self) -> None:
        spec = self.job.get("spec")
        if spec is None:
            self.errors.append(required(_REPLICA_SPECS, "must be required"))
        elif not isinstance(spec, _OBJECT):
            self.errors.append(invalid(_SPEC, spec, "must be an object"))
        else:
            self._report_unknown_fields(spec, _SPEC, _SPEC_FIELDS, _unknown_spec_field_hint)
            specs = spec.get("pytorchReplicaSpecs")
            if not isinstance(specs, _OBJECT) or not specs:
                self.errors.append(
                    required(_REPLICA_SPECS, "must be required (an object with Master and Worker)")
                )
            self._check_nproc_per_node(spec.get("nprocPerNode"))
            self._check_elastic_policy(spec)
            self._check_run_policy(spec.get("runPolicy"))
            self._check_gpu_budget()
        if not self.creating:
            self.errors.extend(_immutable_field_errors(self.old, self.job))

    def _report_unknown_fields(
        self,
        section: Mapping[str, Any],
        path: FieldPath,
        known: frozenset[str],
        hint: Callable[[str], str] | None = None,
    ) -> None:
        for key in section:
            if key not in known:
                text = hint(str(key)) if hint else "supported fields: " + ", ".join(sorted(known))
                self.errors.append(
                    forbidden(path.child(str(key)), f'unknown field "{key}": {text}')
                )

    def _check_nproc_per_node(self, raw: object) -> None:
        if raw is None:
            return
        if raw in _NPROC_KEYWORDS:
            return
        if self.nproc_per_node is None:
            self.errors.append(
                invalid(
                    _NPROC_PER_NODE,
                    raw,
                    'must be "auto", "cpu", "gpu" or a positive integer such as "8"'
                    + _placeholder_hint(raw),
                )
            )
            return
        first = self.first_gpu_replica
        if first is not None and first.gpus != self.nproc_per_node:
            self.errors.append(
                invalid(
                    _NPROC_PER_NODE,
                    raw,
                    f"must equal the {_count(first.gpus)} {self.policy.gpu_resource} each "
                    f"{first.key} pod requests (one process per GPU)",
                )
            )

    def _check_elastic_policy(self, spec: Mapping[str, Any]) -> None:
        elastic = spec.get("elasticPolicy")
        if elastic is None:
            return
        if not isinstance(elastic, _OBJECT):
            self.errors.append(invalid(_ELASTIC, elastic, "must be an object"))
            return
        self._report_unknown_fields(elastic, _ELASTIC, _ELASTIC_FIELDS)
        if isinstance(self.spec.get("pytorchReplicaSpecs"), _OBJECT) and (
            names.WORKER not in self.replica_specs
        ):
            self.errors.append(
                required(
                    _REPLICA_SPECS.key(names.WORKER), "must be configured if elastic policy is used"
                )
            )
        n_proc = elastic.get("nProcPerNode")
        n_proc_path = _ELASTIC.child("nProcPerNode")
        if n_proc is not None:
            if spec.get("nprocPerNode") is not None:
                self.errors.append(
                    forbidden(n_proc_path, "must not be used with spec.nprocPerNode")
                )
            else:
                self.warn(n_proc_path, "deprecated, use spec.nprocPerNode instead")
            self._check_non_negative(elastic, "nProcPerNode", _ELASTIC)
        bounds: dict[str, int] = {}
        for key in ("minReplicas", "maxReplicas"):
            raw = elastic.get(key)
            if raw is None:
                continue
            number = as_int(raw)
            if number is None or number < 1:
                self.errors.append(
                    invalid(
                        _ELASTIC.child(key),
                        raw,
                        "must be an integer of at least 1" + _placeholder_hint(raw),
                    )
                )
            else:
                bounds[key] = number
        low, high = bounds.get("minReplicas"), bounds.get("maxReplicas")
        if low is not None and high is not None and low > high:
            self.errors.append(
                invalid(
                    _ELASTIC.child("minReplicas"),
                    low,
                    f"must not be greater than spec.elasticPolicy.maxReplicas ({high})",
                )
            )
        port = elastic.get("rdzvPort")
        port_number = as_int(port)
        if port is not None and (port_number is None or not 1 <= port_number <= 65535):
            self.errors.append(
                invalid(_ELASTIC.child("rdzvPort"), port, "must be a port number (1-65535)")
            )
        self._check_non_negative(elastic, "maxRestarts", _ELASTIC)

    def _check_non_negative(self, section: Mapping[str, Any], key: str, path: FieldPath) -> None:
        raw = section.get(key)
        if raw is not None and _non_negative_int(raw) is None:
            self.errors.append(
                invalid(
                    path.child(key), raw, "must be a non-negative integer" + _placeholder_hint(raw)
                )
            )

    def _check_run_policy(self, run_policy: object) -> None:
        if run_policy is None:
            return
        if not isinstance(run_policy, _OBJECT):
            self.errors.append(invalid(_RUN_POLICY, run_policy, "must be an object"))
            return
        self._report_unknown_fields(run_policy, _RUN_POLICY, _RUN_POLICY_FIELDS)
        clean = run_policy.get("cleanPodPolicy")
        clean_path = _RUN_POLICY.child("cleanPodPolicy")
        if clean is not None and clean not in names.CLEAN_POD_POLICIES:
            self.errors.append(not_supported(clean_path, clean, names.CLEAN_POD_POLICIES))
        elif clean == "None" and not self.policy.allow_clean_pod_policy_none:
            self.errors.append(
                forbidden(
                    clean_path,
                    "pods would keep their GPUs after the job ends; "
                    f"{self.policy_label} does not allow cleanPodPolicy None (use Running or All)",
                )
            )
        for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
            self._check_non_negative(run_policy, key, _RUN_POLICY)
        suspend = run_policy.get("suspend")
        if suspend is not None and not isinstance(suspend, bool):
            self.errors.append(
                invalid(_RUN_POLICY.child("suspend"), suspend, "must be true or false")
            )
        managed_by = run_policy.get("managedBy")
        # "" means "unset" in the training-operator API (it is a *string).
        if managed_by not in (None, "") and managed_by not in names.MANAGED_BY_VALUES:
            self.errors.append(not_supported(_MANAGED_BY, managed_by, names.MANAGED_BY_VALUES))
        self._check_scheduling_policy(run_policy.get("schedulingPolicy"))

    def _check_scheduling_policy(self, scheduling: object) -> None:
        if scheduling is None:
            return
        if not isinstance(scheduling, _OBJECT):
            self.errors.append(invalid(_SCHEDULING, scheduling, "must be an object"))
            return
        self._report_unknown_fields(scheduling, _SCHEDULING, _SCHEDULING_FIELDS)
        raw = scheduling.get("minAvailable")
        if raw is not None:
            number = as_int(raw)
            total = self.total_replicas
            if number is None or number < 1 or (total is not None and number > total):
                upper = f"the job's {total} replicas" if total is not None else "the job's replicas"
                self.errors.append(
                    invalid(
                        _SCHEDULING.child("minAvailable"),
                        raw,
                        f"must be an integer between 1 and {upper}",
                    )
                )
        self._check_non_negative(scheduling, "scheduleTimeoutSeconds", _SCHEDULING)

    def _check_gpu_budget(self) -> None:
        limit = self.policy.max_gpus_per_job
        if limit is None:
            return
        parts: list[str] = []
        total = Decimal(0)
        for replica in self.known_replicas:
            if replica.gpus > 0 and replica.count:
                total += replica.gpus * replica.count
                parts.append(f"{replica.key} {replica.count}x{_count(replica.gpus)}")
        if total > limit:
            self.errors.append(
                forbidden(
                    _REPLICA_SPECS,
                    f"the job requests {_count(total)} {self.policy.gpu_resource} in total "
                    f"({', '.join(parts)}); {self.policy_label} allows at most "
                    f"{limit} per job",
                )
            )

    # ---------------------------------------------------------------- replicas

    def _report_unknown_replica_type(self, replica: _Replica) -> None:
        detail = 'supported values: "Master", "Worker"'
        canonical = canonical_replica_type(replica.key)
        if canonical is not None:
            detail += (
                f" (the mutating webhook renames {_quote(replica.key)} to {_quote(canonical)}; "
                "seeing it here means that webhook did not run)"
            )
        self.errors.append(FieldError(ErrorType.NOT_SUPPORTED, replica.path, detail, replica.key))

    def _check_replica(self, replica: _Replica) -> None:
        spec = replica.spec
        if spec is None:
            self.errors.append(required(_at(replica.pod_path, "containers"), "must be specified"))
            return
        self._report_unknown_fields(
            spec, replica.path, _REPLICA_FIELDS, _unknown_replica_field_hint
        )
        self._check_replica_count(replica, spec.get("replicas"))
        restart = spec.get("restartPolicy")
        if restart is not None and restart not in names.RESTART_POLICIES:
            self.errors.append(
                not_supported(_at(replica.path, "restartPolicy"), restart, names.RESTART_POLICIES)
            )
        template = spec.get("template")
        if template is not None and not isinstance(template, _OBJECT):
            self.errors.append(
                invalid(_at(replica.path, "template"), template, "must be an object")
            )
            return
        pod_spec = template.get("spec") if isinstance(template, _OBJECT) else None
        if pod_spec is not None and not isinstance(pod_spec, _OBJECT):
            self.errors.append(
                invalid(_at(replica.path, "template", "spec"), pod_spec, "must be an object")
            )
            return
        self._check_containers_list(replica)
        self._check_node_selector(replica)
        volumes = self._check_volumes(replica)
        for kind in ("containers", "initContainers"):
            entries = replica.pod_spec.get(kind)
            if kind == "initContainers" and entries is not None and not isinstance(entries, list):
                self.errors.append(
                    invalid(_at(replica.pod_path, kind), entries, "must be a list of containers")
                )
            if isinstance(entries, list):
                for index, container in enumerate(entries):
                    self._check_container(replica, kind, index, container, volumes)

    def _check_containers_list(self, replica: _Replica) -> None:
        containers = replica.pod_spec.get("containers")
        if isinstance(containers, list) and containers:
            index = replica.training_container
            if index is not None and containers[index].get("name") == names.CONTAINER_NAME:
                return
        path = _at(replica.pod_path, "containers")
        if containers is None or containers == []:
            self.errors.append(required(path, "must be specified"))
        elif not isinstance(containers, list):
            self.errors.append(invalid(path, containers, "must be a list of containers"))
        else:
            self.errors.append(required(path, "must have at least one container with name pytorch"))

    def _check_replica_count(self, replica: _Replica, raw: object) -> None:
        if raw is None:
            return
        path = _at(replica.path, "replicas")
        if replica.count is None:
            self.errors.append(
                invalid(path, raw, "must be a non-negative integer" + _placeholder_hint(raw))
            )
        elif replica.key == names.MASTER and replica.count != 1:
            self.errors.append(forbidden(path, "must be 1"))
        elif replica.key == names.WORKER and replica.count < 1:
            self.errors.append(forbidden(path, "must be at least 1"))

    def _check_node_selector(self, replica: _Replica) -> None:
        selector = replica.pod_spec.get("nodeSelector")
        if selector is None:
            return
        path = _at(replica.pod_path, "nodeSelector")
        if not isinstance(selector, _OBJECT):
            self.errors.append(invalid(path, selector, "must map label keys to values"))
            return
        for key, wanted in self.policy.node_selector.items():
            asked = selector.get(key)
            if asked is not None and asked != wanted:
                self.errors.append(
                    invalid(
                        path.key(key),
                        asked,
                        f"{self.policy_label} places jobs on nodes labelled "
                        f"{key}={wanted}; this replica asks for a different pool",
                    )
                )

    def _check_volumes(self, replica: _Replica) -> set[str] | None:
        """Check ``template.spec.volumes``; return the declared names (None when unreadable)."""
        volumes = replica.pod_spec.get("volumes")
        if volumes is None:
            return set()
        path = replica.pod_path
        if not isinstance(volumes, list):
            self.errors.append(invalid(_at(path, "volumes"), volumes, "must be a list of volumes"))
            return None
        declared: set[str] = set()
        for index, volume in enumerate(volumes):
            if not isinstance(volume, _OBJECT):
                self.errors.append(
                    invalid(_at(path, "volumes", index), volume, "must be an object")
                )
                continue
            name = volume.get("name")
            if not isinstance(name, str) or not name:
                self.errors.append(
                    required(_at(path, "volumes", index, "name"), "must be specified")
                )
            elif name in declared:
                self.errors.append(duplicate(_at(path, "volumes", index, "name"), name))
            else:
                declared.add(name)
            host_path = volume.get("hostPath")
            if host_path is not None:
                self._check_host_path(path, index, host_path)
        return declared

    def _check_host_path(self, pod_path: FieldPath, index: int, host_path: object) -> None:
        location = host_path.get("path") if isinstance(host_path, _OBJECT) else None
        if not isinstance(location, str) or not location:
            self.errors.append(
                required(
                    _at(pod_path, "volumes", index, "hostPath", "path"),
                    "must be an absolute path on the node",
                )
            )
            return
        if location not in self.host_path_refusals:
            self.host_path_refusals[location] = self._host_path_refusal(location)
        refusal = self.host_path_refusals[location]
        if refusal is not None:
            self.errors.append(forbidden(_at(pod_path, "volumes", index, "hostPath"), refusal))

    def _host_path_refusal(self, location: str) -> str | None:
        """Why the policy refuses a hostPath volume at ``location``; None when it allows it."""
        if self.policy.allows_host_path(location):
            return None
        allowed = ", ".join(self.policy.allowed_host_paths) or "none"
        if location.rstrip("/") == "/dev/shm":
            instead = "use an emptyDir with medium: Memory for /dev/shm"
        else:
            instead = "use a persistentVolumeClaim, or ask the cluster admin to allow the path"
        return (
            f"hostPath {_quote(location)} is not allowed by {self.policy_label} "
            f"(allowedHostPaths: {allowed}); {instead}"
        )

    # ---------------------------------------------------------------- containers

    def _check_container(
        self,
        replica: _Replica,
        kind: str,
        index: int,
        container: object,
        volumes: set[str] | None,
    ) -> None:
        path = _at(replica.pod_path, kind, index)
        if not isinstance(container, _OBJECT):
            self.errors.append(invalid(path, container, "must be an object"))
            return
        self._check_image(path, container.get("image"))
        command = self._strings(container, "command", path)
        args = self._strings(container, "args", path)
        is_training = kind == "containers" and index == replica.training_container
        if is_training and (command or args):
            self._check_command_line(replica, path, _scan(tuple(command), tuple(args)))
        self._check_env(replica, path, container.get("env"), is_training=is_training)
        self._check_resources(path, container.get("resources"))
        if kind == "containers" and index == replica.gpu_container:
            self._check_gpu_consistency(replica, path)
        self._check_volume_mounts(path, container.get("volumeMounts"), volumes)
        security = container.get("securityContext")
        if (
            isinstance(security, _OBJECT)
            and security.get("privileged") is True
            and not self.policy.allow_privileged
        ):
            self.errors.append(
                forbidden(
                    _at(path, "securityContext", "privileged"),
                    f"privileged containers are not allowed by {self.policy_label}; "
                    "add only the capabilities you need (for example "
                    "IPC_LOCK for RDMA)",
                )
            )

    def _check_image(self, path: FieldPath, image: object) -> None:
        if isinstance(image, str) and image and image_reference_problem(image) is None:
            return
        image_path = _at(path, "image")
        if image is None or image == "":
            self.errors.append(required(image_path, "must be required"))
        elif not isinstance(image, str):
            self.errors.append(invalid(image_path, image, "must be a string"))
        elif is_lone_placeholder(image):
            self.warn(
                image_path,
                f"{_quote(image)} is a placeholder, not an image: pods will fail with "
                "InvalidImageName until it is replaced",
            )
        else:
            problem = image_reference_problem(image)
            if problem is not None:
                self.errors.append(invalid(image_path, image, problem))

    def _strings(self, container: Mapping[str, Any], key: str, path: FieldPath) -> list[str]:
        raw = container.get(key)
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.errors.append(invalid(_at(path, key), raw, "must be a list of strings"))
            return []
        for item in raw:
            if not isinstance(item, str):
                break
        else:
            return raw
        for index, item in enumerate(raw):
            if not isinstance(item, str):
                self.errors.append(
                    invalid(_at(path, key, index), item, "must be a string (quote it)")
                )
        return [item for item in raw if isinstance(item, str)]

    def _check_command_line(self, replica: _Replica, path: FieldPath, line: CommandLine) -> None:
        gpu = self.policy.gpu_resource
        for use in line.backends:
            backend = (use.value or "").lower()
            if backend == "nccl" and replica.gpus == 0:
                self.errors.append(
                    invalid(
                        _at(path, use.field),
                        use.written,
                        f"nccl needs GPUs but this replica requests no {gpu}; use gloo for "
                        "CPU-only replicas or request GPUs",
                    )
                )
            elif backend == "gloo" and replica.gpus > 0:
                self.warn(
                    _at(path, use.field),
                    f"{use.written} on a replica that requests {_count(replica.gpus)} {gpu} per "
                    "pod: gloo is much slower than nccl on GPUs",
                )
        for use in line.stray:
            variable = STRAY_FLAGS[use.flag]
            self.errors.append(
                forbidden(
                    _at(path, use.field),
                    f"{variable} is injected by the torchgate controller "
                    f"{self._injected_source(variable)}; remove {use.written}",
                )
            )
        for use in line.nnodes:
            self._check_nnodes(path, use)
        for use in line.nproc_per_node:
            self._check_nproc_flag(replica, path, use)

    def _injected_source(self, variable: str) -> str:
        source = _INJECTED_ENV.get(variable, "")
        if variable.endswith("MASTER_ADDR"):
            source = f"{source} ({self.master_pod_name})"
        return source

    def _check_nnodes(self, path: FieldPath, use: FlagUse) -> None:
        if use.value is None or _expanded_at_runtime(use):
            return
        where = _at(path, use.field)
        parsed = parse_nnodes(use.value)
        if parsed is None:
            self.errors.append(
                invalid(where, use.written, self._unparseable_flag(use, "N or MIN:MAX"))
            )
            return
        expected = self.expected_nnodes
        if expected is None:
            return
        shown = f"{expected[0]}" if self.elastic is None else f"{expected[0]}:{expected[1]}"
        source = (
            "from spec.elasticPolicy minReplicas:maxReplicas"
            if self.elastic is not None
            else "from the replica counts"
        )
        if parsed == expected:
            self.warn(
                where,
                f"{use.written} repeats PET_NNODES={shown}, which the torchgate controller "
                f"sets {source}; it can be removed",
            )
        else:
            self.errors.append(
                invalid(
                    where,
                    use.written,
                    f"contradicts the job: the torchgate controller sets PET_NNODES={shown} "
                    f"{source} and the flag would override it; remove {use.written}",
                )
            )

    def _check_nproc_flag(self, replica: _Replica, path: FieldPath, use: FlagUse) -> None:
        value = use.value
        if value is None or _expanded_at_runtime(use):
            return
        where = _at(path, use.field)
        processes = _positive_int_text(value)
        if processes is None:
            if value not in _TORCHRUN_NPROC_KEYWORDS:
                self.errors.append(
                    invalid(
                        where,
                        use.written,
                        self._unparseable_flag(use, "auto, cpu, gpu, xpu or an integer"),
                    )
                )
            return
        gpu = self.policy.gpu_resource
        if replica.gpus > 0 and processes != replica.gpus:
            self.errors.append(
                invalid(
                    where,
                    use.written,
                    f"starts {processes} processes per pod but each pod of this replica "
                    f"requests {_count(replica.gpus)} {gpu} (one process per GPU)",
                )
            )
        elif self.nproc_per_node is not None and processes != self.nproc_per_node:
            self.errors.append(
                invalid(
                    where,
                    use.written,
                    f"differs from spec.nprocPerNode ({self.nproc_per_node}), which the "
                    "torchgate controller passes to torchrun as PET_NPROC_PER_NODE",
                )
            )
        elif replica.gpus > 0:
            self.warn(
                where,
                f"{use.written} repeats the {_count(replica.gpus)} {gpu} each pod requests, "
                "which torchrun already starts one process per; it can be removed",
            )
        elif self.nproc_per_node is not None:
            self.warn(
                where,
                f"{use.written} repeats spec.nprocPerNode, which the torchgate controller passes "
                "to torchrun as PET_NPROC_PER_NODE; it can be removed",
            )

    @staticmethod
    def _unparseable_flag(use: FlagUse, expected: str) -> str:
        detail = f"torchrun expects {expected}"
        if "$" in (use.value or ""):
            detail += (
                f"; {use.value} is passed literally: Kubernetes expands only $(VAR) references "
                "to the container's env in command and args, and no shell runs here"
            )
        return detail

    def _check_env(
        self, replica: _Replica, path: FieldPath, env: object, *, is_training: bool
    ) -> None:
        if env is None:
            return
        if not isinstance(env, list):
            self.errors.append(
                invalid(_at(path, "env"), env, "must be a list of {name, value} entries")
            )
            return
        seen: dict[str, int] = {}
        for index, entry in enumerate(env):
            if not isinstance(entry, _OBJECT):
                self.errors.append(
                    invalid(_at(path, "env", index), entry, "must be an object with a name")
                )
                continue
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                self.errors.append(required(_at(path, "env", index, "name"), "must be specified"))
                continue
            if name in seen:
                self.errors.append(
                    duplicate(
                        _at(path, "env", index, "name"), name, f"already set by env[{seen[name]}]"
                    )
                )
            else:
                seen[name] = index
            value = entry.get("value")
            if value is not None and not isinstance(value, str):
                self.errors.append(
                    invalid(_at(path, "env", index, "value"), value, "must be a string (quote it)")
                )
            if is_training and name in _INJECTED_ENV:
                self.errors.append(
                    forbidden(
                        _at(path, "env", index, "name"),
                        f"{name} is injected by the torchgate controller "
                        f"{self._injected_source(name)}; remove it from env",
                    )
                )
            if name == _VISIBLE_DEVICES and replica.gpus == 0:
                self._check_visible_devices(_at(path, "env", index), value)

    def _check_visible_devices(self, path: FieldPath, value: object) -> None:
        if not isinstance(value, str) or value.strip().lower() in _NO_GPU_VALUES:
            return
        exposed = "every GPU" if value.strip().lower() == "all" else f"GPUs {value}"
        self.errors.append(
            forbidden(
                path,
                f"{_VISIBLE_DEVICES}={value} in a pod that requests no "
                f"{self.policy.gpu_resource} exposes {exposed} of the node behind the scheduler's "
                f"back; request {self.policy.gpu_resource} in resources.limits instead",
            )
        )

    def _check_resources(self, path: FieldPath, resources: object) -> None:
        if resources is None:
            return
        if not isinstance(resources, _OBJECT):
            self.errors.append(
                invalid(
                    _at(path, "resources"), resources, "must be an object with limits and requests"
                )
            )
            return
        gpu = self.policy.gpu_resource
        gpu_amounts: dict[str, Decimal] = {}
        for section in ("limits", "requests"):
            values = resources.get(section)
            if values is None:
                continue
            if not isinstance(values, _OBJECT):
                self.errors.append(
                    invalid(
                        _at(path, "resources", section),
                        values,
                        "must map resource names to quantities",
                    )
                )
                continue
            for name, quantity in values.items():
                amount = _quantity(quantity)
                if amount is None:
                    self.errors.append(
                        invalid(
                            _at(path, "resources", section).key(str(name)),
                            quantity,
                            _quantity_detail(quantity),
                        )
                    )
                    continue
                if amount < 0:
                    self.errors.append(
                        invalid(
                            _at(path, "resources", section).key(str(name)),
                            quantity,
                            "must be greater than or equal to 0",
                        )
                    )
                elif name == gpu:
                    gpu_amounts[section] = amount
        if gpu_amounts:
            self._check_gpu_quantities(path, resources, gpu_amounts)

    def _check_gpu_quantities(
        self, path: FieldPath, resources: Mapping[str, Any], amounts: Mapping[str, Decimal]
    ) -> None:
        gpu = self.policy.gpu_resource
        for section, amount in amounts.items():
            if amount != amount.to_integral_value():
                self.errors.append(
                    invalid(
                        _at(path, "resources", section).key(gpu),
                        resources[section][gpu],
                        "GPUs are whole devices: must be a whole number",
                    )
                )
                return
        limit, request = amounts.get("limits"), amounts.get("requests")
        if limit is not None and request is not None and limit != request:
            self.errors.append(
                invalid(
                    _at(path, "resources", "requests").key(gpu),
                    resources["requests"][gpu],
                    f"must equal limits[{gpu}] ({_count(limit)}): GPUs cannot be overcommitted",
                )
            )

    def _check_gpu_consistency(self, replica: _Replica, path: FieldPath) -> None:
        first = self.first_gpu_replica
        if first is None or first is replica or first.gpus == replica.gpus:
            return
        gpu = self.policy.gpu_resource
        self.errors.append(
            invalid(
                _at(path, "resources"),
                _count(replica.gpus),
                f"each {replica.key} pod requests {_count(replica.gpus)} {gpu} but each "
                f"{first.key} pod requests {_count(first.gpus)}; every GPU replica must request "
                "the same count per pod (torchrun starts the same number of processes per node)",
            )
        )

    def _check_volume_mounts(
        self, path: FieldPath, mounts: object, volumes: set[str] | None
    ) -> None:
        if mounts is None:
            return
        if not isinstance(mounts, list):
            self.errors.append(
                invalid(_at(path, "volumeMounts"), mounts, "must be a list of volume mounts")
            )
            return
        for index, mount in enumerate(mounts):
            if not isinstance(mount, _OBJECT):
                self.errors.append(
                    invalid(
                        _at(path, "volumeMounts", index),
                        mount,
                        "must be an object with name and mountPath",
                    )
                )
                continue
            target, name = mount.get("mountPath"), mount.get("name")
            target_ok = isinstance(target, str) and bool(target)
            name_ok = isinstance(name, str) and bool(name)
            if target_ok and name_ok and (volumes is None or name in volumes):
                continue
            hint = (
                "; this looks like an env entry: move it under env"
                if "value" in mount or "valueFrom" in mount
                else ""
            )
            if not target_ok:
                self.errors.append(
                    required(
                        _at(path, "volumeMounts", index, "mountPath"), "must be specified" + hint
                    )
                )
            if not name_ok:
                self.errors.append(
                    required(_at(path, "volumeMounts", index, "name"), "must be specified" + hint)
                )
            elif volumes is not None and name not in volumes:
                self.errors.append(
                    _not_found(
                        _at(path, "volumeMounts", index, "name"),
                        name,
                        f"no volume named {_quote(str(name))} in template.spec.volumes{hint}",
                    )
                )

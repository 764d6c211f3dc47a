"""PlacementPolicy (``torchgate.io/v1alpha1``): what cluster admins decide for every job.

A policy says where jobs of some namespaces go (``nodeSelector``, ``tolerations``,
``allowedHosts``), what they may use (``maxGPUsPerJob``, ``allowedHostPaths``, ``allowPrivileged``,
``allowCleanPodPolicyNone``), which resources and DeviceClasses (``gpuDeviceClasses``) count as
GPUs and which resources as RDMA devices, which run-policy defaults the webhook persists, (parsed
by ``pool.parse_pool_settings``) what preemption may not touch and which node labels are topology
levels, and when a node where the policy's gangs keep failing for reasons outside the job is
quarantined (``spec.quarantine``: the faults of a job count with its own policy's thresholds, so
one pool's admins decide for their nodes), and the progress deadline of its jobs
(``spec.progressDeadlineSeconds``, see ``progress``). Exactly one policy applies to a job: the
matching one with the highest ``priority`` (ties broken by name, so the choice never depends on
list order), or the built-in default when none matches.

What ``allowPrivileged`` allows: everything that gives a pod's code power over its node rather
than its own pod, since the tenant who writes the template gets it in pods the controller creates
(the tenant may not create pods itself): a ``privileged`` container, the node's network, PID or
IPC namespace (``HOST_NAMESPACES``: every process of the node, other tenants' included, visible
and signalable; their traffic and the node's loopback services reachable), a port of the node
(``hostPort``), and the capabilities that make a container privileged in all but name
(``NODE_CAPABILITIES``, named as the container runtimes read them: any case, with or without
``CAP_``). Capabilities scoped to the pod
(``IPC_LOCK``, which the webhook adds for RDMA, ``SYS_PTRACE``, ``NET_ADMIN``) stay allowed.
It also allows what takes a pod out of the admin's control of the pool or of the kernel's
confinement: a toleration of every taint, of torchgate's quarantine or of a cordon
(``taints.escapes``: the pods would be placed on nodes kept out of use, and left on sick ones),
and a seccomp or AppArmor profile of type ``Unconfined``
(``CONFINEMENT_PROFILES``, or the legacy AppArmor annotation ``APPARMOR_ANNOTATION_PREFIX``, which
the apiserver still copies into the field: what the Pod Security Standards' baseline level
forbids). A
template's ``nodeName`` is refused under every policy: it skips kube-scheduler and torchgate's
placement alike (quotas, quarantine, the gang's planned nodes); pinned hosts are the
``torchgate.io/hosts`` annotation.

Parsing never raises: a malformed policy yields field errors (reported by whoever loaded it) and is
left out, so one bad object cannot take admission down. A toleration the apiserver would refuse in
a pod (``taints.entry_errors``) makes a policy malformed: the mutating webhook copies the policy's
tolerations into every template, and the validating webhook passes them without a second look.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.devices import ClaimLookup, GpuSources, gpu_sources, plain_sources
from torchgate.pytorchjob.fieldpath import (
    FieldError,
    FieldPath,
    invalid,
    not_supported,
    object_header,
)
from torchgate.pytorchjob.pool import (
    PreemptionSettings,
    TopologySettings,
    non_negative_count,
    parse_pool_settings,
)
from torchgate.pytorchjob.progress import parse_deadline
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity
from torchgate.pytorchjob.spec import as_int
from torchgate.pytorchjob.taints import (
    TOLERATION_OPERATORS,
    entry_errors,
    escapes,
    toleration_of,
)

_SPEC = FieldPath.root("spec")


@dataclass(frozen=True, slots=True)
class JobDefaults:
    """Run-policy values the mutating webhook persists when the job leaves them unset."""

    clean_pod_policy: str = "Running"
    backoff_limit: int | None = 3
    ttl_seconds_after_finished: int | None = None
    managed_by: str | None = None
    schedule_timeout_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class QuarantineSettings:
    """When a node where gangs keep failing for reasons outside the job is set aside.

    ``faults`` infrastructure faults on one node within ``window_seconds`` quarantine it for
    ``cooldown_seconds`` (``faults: 0`` never quarantines); a pod bound to a node that has not
    started its containers after ``stuck_pod_seconds`` is such a fault (``PodStuck``). The gangs
    one outage of the node took down are one fault (``controller.quarantine.rules`` rule 6).
    """

    faults: int = 3
    window_seconds: int = 1800
    cooldown_seconds: int = 3600
    stuck_pod_seconds: int = 600


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    """One admin policy, parsed and defaulted."""

    name: str = "built-in-default"
    namespaces: tuple[str, ...] = ()
    priority: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_gpus_per_job: int | None = None
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE
    # DeviceClasses whose devices are GPUs (Dynamic Resource Allocation); unset: claims count none
    gpu_device_classes: tuple[str, ...] = ()
    rdma_resources: tuple[str, ...] = ("rdma/hca",)
    shared_memory_size_limit: str | None = None
    allowed_host_paths: tuple[str, ...] = ()
    allow_privileged: bool = False
    allow_clean_pod_policy_none: bool = False
    job_defaults: JobDefaults = field(default_factory=JobDefaults)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    quarantine: QuarantineSettings = field(default_factory=QuarantineSettings)
    progress_deadline_seconds: int | None = None
    # Derived: no toleration of the policy has a ``tolerationSeconds``, so Python's ``==`` of a
    # template's entries with ``tolerations`` is JSON's (``wrote``).
    untimed_tolerations: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        untimed = all(t.get("tolerationSeconds") is None for t in self.tolerations)
        object.__setattr__(self, "untimed_tolerations", untimed)

    def matches(self, namespace: str) -> bool:
        """Whether this policy applies to jobs in ``namespace`` (no list = every namespace)."""
        return not self.namespaces or namespace in self.namespaces

    def gpus(self, seen: ClaimLookup | None = None) -> GpuSources:
        """What counts as GPUs under this policy (``devices.gpu_sources``).

        ``seen``: what the caller sees of DRA (its DeviceClasses' ``extendedResourceName``); read
        only when the policy lists ``gpuDeviceClasses``.
        """
        if not self.gpu_device_classes:  # the usual policy: no lookup, no new object
            return plain_sources(self.gpu_resource)
        if seen is None:
            return gpu_sources(self.gpu_resource, self.gpu_device_classes)
        return gpu_sources(self.gpu_resource, self.gpu_device_classes, seen.class_resources)

    def escaped_taint(self, toleration: Mapping[str, Any]) -> str | None:
        """What ``toleration`` in a template escapes that this policy does not allow, if anything.

        ``taints.escapes``'s answer, unless the policy allows privilege or wrote the toleration
        itself (its ``tolerations``, which the mutating webhook copies into every template).
        """
        if self.allow_privileged or self.wrote(toleration):
            return None
        return escapes(toleration_of(toleration))

    def wrote(self, toleration: object) -> bool:
        """Whether a template's ``toleration`` is one of this policy's own, as JSON compares them.

        Python's ``==`` takes ``True`` and ``1.0`` for ``1``, JSON and the apiserver's decode
        into a pod's int64 ``tolerationSeconds`` do not (``taints.entry_errors`` refuses both).
        A policy's tolerations hold strings (which equal only strings) and an int
        ``tolerationSeconds`` (the CRD's schema and ``_parse_tolerations``), so an equal entry
        is the policy's own when its ``tolerationSeconds`` is absent or an int too.
        """
        if toleration not in self.tolerations:
            return False
        if self.untimed_tolerations or not isinstance(toleration, Mapping):
            return True
        seconds = toleration.get("tolerationSeconds")
        return seconds is None or type(seconds) is int

    def allows_host_path(self, path: str) -> bool:
        """Whether a hostPath volume at ``path`` is under one of the allowed prefixes."""
        return _under_a_prefix(self.allowed_host_paths, path)


# Every review asks about the same few paths of the same policy: decide each pair once.
@functools.lru_cache(maxsize=1024)
def _under_a_prefix(prefixes: tuple[str, ...], path: str) -> bool:
    normalised = "/" + path.strip("/")
    for prefix in prefixes:
        root = "/" + prefix.strip("/")
        if root == "/" or normalised == root or normalised.startswith(root + "/"):
            return True
    return False


DEFAULT_POLICY = PlacementPolicy()

HOST_NAMESPACES: Final = ("hostNetwork", "hostPID", "hostIPC")
"""Pod-spec fields that share one of the node's namespaces (only with ``allowPrivileged``)."""
NODE_CAPABILITIES: Final = frozenset(
    {
        "ALL",
        "SYS_ADMIN",  # mount, setns into the node's namespaces (with hostPID), most of root
        "SYS_MODULE",  # load a kernel module
        "SYS_RAWIO",  # raw device and port I/O
        "SYS_BOOT",  # reboot the node
        "SYS_TIME",  # set the node's clock
        "DAC_READ_SEARCH",  # open_by_handle_at: read any file of the node's filesystem
        "BPF",  # load BPF programs into the node's kernel
    }
)
"""Capabilities that act on the node, not the pod (only with ``allowPrivileged``)."""
CONFINEMENT_PROFILES: Final = ("seccompProfile", "appArmorProfile")
"""``securityContext`` fields (pod and container) whose ``type`` may not be ``UNCONFINED``."""
UNCONFINED: Final = "Unconfined"
"""The profile type that lifts the confinement (only with ``allowPrivileged``)."""
LOCALHOST: Final = "Localhost"
"""The profile type naming a profile installed on the node (its ``localhostProfile``)."""
RUNTIME_DEFAULT: Final = "RuntimeDefault"
PROFILE_TYPES: Final = (LOCALHOST, RUNTIME_DEFAULT, UNCONFINED)
"""The ``type`` values the apiserver accepts in either profile, in the order it lists them."""
APPARMOR_ANNOTATION_PREFIX: Final = "container.apparmor.security.beta.kubernetes.io/"
"""A pod's legacy AppArmor annotation, ``<prefix><container>: <profile>``: still honoured."""
APPARMOR_ANNOTATION_UNCONFINED: Final = "unconfined"
"""The legacy annotation's value for ``UNCONFINED`` (exactly this: the apiserver compares it)."""
ANNOTATION_RUNTIME_DEFAULT: Final = "runtime/default"
"""The legacy annotations' value for ``RuntimeDefault`` (AppArmor's and seccomp's)."""
ANNOTATION_LOCALHOST_PREFIX: Final = "localhost/"
"""The legacy annotations' value for ``Localhost``: ``localhost/<localhostProfile>``."""
SECCOMP_ANNOTATION_DOCKER_DEFAULT: Final = "docker/default"
"""The seccomp annotations' older spelling of ``RuntimeDefault`` (still accepted)."""
SECCOMP_POD_ANNOTATION: Final = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION_PREFIX: Final = "container.seccomp.security.alpha.kubernetes.io/"
"""The legacy seccomp annotations (the pod's, ``<prefix><container>``): ignored since 1.27."""
PROFILE_ANNOTATION_PREFIXES: Final = (
    APPARMOR_ANNOTATION_PREFIX,
    SECCOMP_POD_ANNOTATION,
    SECCOMP_CONTAINER_ANNOTATION_PREFIX,
)
"""What a pod template annotation key that sets (or once set) a profile starts with."""


def capability_name(entry: object) -> str | None:
    """A ``capabilities.add`` entry as the container runtime reads it, ``None`` if not a string.

    Runtimes upper-case the name and prefix ``CAP_`` (CRI-O only when it is missing), so
    ``sys_admin`` and ``cap_sys_admin`` are read as ``SYS_ADMIN``: either adds it on some node.
    """
    if not isinstance(entry, str):
        return None
    return entry.upper().removeprefix("CAP_")


def select_policy(policies: Iterable[PlacementPolicy], namespace: str) -> PlacementPolicy:
    """The policy for a job in ``namespace``: highest priority match, then name; else default."""
    best: PlacementPolicy | None = None
    for policy in policies:
        if not policy.matches(namespace):
            continue
        if best is None or (-policy.priority, policy.name) < (-best.priority, best.name):
            best = policy
    return best or DEFAULT_POLICY


def parse_policy(raw: object) -> tuple[PlacementPolicy | None, list[FieldError]]:
    """Parse a PlacementPolicy object (as stored by the apiserver or read from a file)."""
    if not isinstance(raw, Mapping):
        return None, [invalid(FieldPath(), type(raw).__name__, "must be an object")]
    name, errors = object_header(raw, names.POLICY_KIND)
    spec = raw.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return None, [*errors, invalid(_SPEC, spec, "must be an object")]

    def strings(key: str) -> tuple[str, ...]:
        value = spec.get(key)
        if value is None:
            return ()
        if isinstance(value, Sequence) and not isinstance(value, str):
            good = [item for item in value if isinstance(item, str) and item]
            if len(good) == len(value):
                return tuple(good)
        errors.append(invalid(_SPEC.child(key), value, "must be a list of non-empty strings"))
        return ()

    def boolean(key: str) -> bool:
        value = spec.get(key, False)
        if not isinstance(value, bool):
            errors.append(invalid(_SPEC.child(key), value, "must be true or false"))
            return False
        return value

    node_selector = _parse_node_selector(spec.get("nodeSelector"), errors)
    tolerations = _parse_tolerations(spec.get("tolerations"), errors)
    priority = spec.get("priority", 0)
    if as_int(priority) is None:
        errors.append(invalid(_SPEC.child("priority"), priority, "must be an integer"))
        priority = 0
    gpu_resource = spec.get("gpuResource", names.DEFAULT_GPU_RESOURCE)
    if not isinstance(gpu_resource, str) or not gpu_resource:
        errors.append(invalid(_SPEC.child("gpuResource"), gpu_resource, "must be a resource name"))
        gpu_resource = names.DEFAULT_GPU_RESOURCE
    rdma = strings("rdmaResources") if "rdmaResources" in spec else ("rdma/hca",)
    size_limit = _parse_shared_memory(spec.get("sharedMemory"), errors)
    allowed_paths = strings("allowedHostPaths")
    for index, prefix in enumerate(allowed_paths):
        if not prefix.startswith("/"):
            errors.append(
                invalid(_SPEC.child("allowedHostPaths").index(index), prefix, "must be absolute")
            )
    sharing, sharing_errors = parse_pool_settings(raw)  # spec.preemption, spec.topology
    errors.extend(sharing_errors)
    policy = PlacementPolicy(
        name=name,
        namespaces=strings("namespaces"),
        priority=int(priority),
        node_selector=node_selector,
        tolerations=tolerations,
        allowed_hosts=strings("allowedHosts"),
        max_gpus_per_job=_non_negative_int(spec, "maxGPUsPerJob", _SPEC, errors),
        gpu_resource=gpu_resource,
        gpu_device_classes=strings("gpuDeviceClasses"),
        rdma_resources=rdma,
        shared_memory_size_limit=size_limit,
        allowed_host_paths=allowed_paths,
        allow_privileged=boolean("allowPrivileged"),
        allow_clean_pod_policy_none=boolean("allowCleanPodPolicyNone"),
        job_defaults=_parse_job_defaults(spec.get("jobDefaults"), errors),
        preemption=sharing.preemption,
        topology=sharing.topology,
        quarantine=_parse_quarantine(spec.get("quarantine"), errors),
        progress_deadline_seconds=_parse_progress_deadline(spec, errors),
    )
    return (None, errors) if errors else (policy, [])


def _parse_node_selector(value: object, errors: list[FieldError]) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return dict(value)
    errors.append(invalid(_SPEC.child("nodeSelector"), value, "must map label keys to strings"))
    return {}


def _parse_tolerations(value: object, errors: list[FieldError]) -> tuple[Mapping[str, Any], ...]:
    """The policy's tolerations, each one the apiserver takes in a pod (``taints.entry_errors``).

    The mutating webhook copies them into every template: one the apiserver refused would keep
    every job of the policy from getting a pod. An explicit empty ``operator``, which Kubernetes
    reads as ``Equal``, is refused as the CRD's enum refuses it.
    """
    path = _SPEC.child("tolerations")
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        errors.append(invalid(path, value, "must be a list of tolerations"))
        return ()
    out: list[Mapping[str, Any]] = []
    for index, item in enumerate(value):
        item_path = path.index(index)
        found = entry_errors(item, item_path)
        if isinstance(item, Mapping) and item.get("operator") == "":
            found.append(not_supported(item_path.child("operator"), "", TOLERATION_OPERATORS))
        if found:
            errors.extend(found)
        else:
            out.append(dict(item))
    return tuple(out)


def _parse_shared_memory(value: object, errors: list[FieldError]) -> str | None:
    path = _SPEC.child("sharedMemory")
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.append(invalid(path, value, "must be an object"))
        return None
    size = value.get("sizeLimit")
    if size is None:
        return None
    try:
        if parse_quantity(size) <= Decimal(0):
            raise QuantityError("not positive")
    except QuantityError:
        errors.append(invalid(path.child("sizeLimit"), size, "must be a positive quantity"))
        return None
    return str(size)


def _non_negative_int(
    section: Mapping[str, Any], key: str, path: FieldPath, errors: list[FieldError]
) -> int | None:
    value = section.get(key)
    return None if value is None else non_negative_count(value, path.child(key), errors)


def _parse_job_defaults(value: object, errors: list[FieldError]) -> JobDefaults:
    path = _SPEC.child("jobDefaults")
    if value is None:
        return JobDefaults()
    if not isinstance(value, Mapping):
        errors.append(invalid(path, value, "must be an object"))
        return JobDefaults()
    base = JobDefaults()
    clean = value.get("cleanPodPolicy", base.clean_pod_policy)
    if clean not in names.CLEAN_POD_POLICIES:
        errors.append(not_supported(path.child("cleanPodPolicy"), clean, names.CLEAN_POD_POLICIES))
        clean = base.clean_pod_policy
    managed_by = value.get("managedBy")
    if managed_by is not None and managed_by not in names.MANAGED_BY_VALUES:
        errors.append(not_supported(path.child("managedBy"), managed_by, names.MANAGED_BY_VALUES))
        managed_by = None
    return JobDefaults(
        clean_pod_policy=str(clean),
        backoff_limit=_non_negative_int(value, "backoffLimit", path, errors)
        if "backoffLimit" in value
        else base.backoff_limit,
        ttl_seconds_after_finished=_non_negative_int(
            value, "ttlSecondsAfterFinished", path, errors
        ),
        managed_by=managed_by,
        schedule_timeout_seconds=_non_negative_int(value, "scheduleTimeoutSeconds", path, errors),
    )


def _parse_quarantine(value: object, errors: list[FieldError]) -> QuarantineSettings:
    """``spec.quarantine``: non-negative ``faults``, positive seconds; absent fields default."""
    path = _SPEC.child("quarantine")
    base = QuarantineSettings()
    if value is None:
        return base
    if not isinstance(value, Mapping):
        errors.append(invalid(path, value, "must be an object"))
        return base
    faults = _non_negative_int(value, "faults", path, errors)

    def positive(key: str, default: int) -> int:
        raw = value.get(key)
        if raw is None:
            return default
        number = as_int(raw)
        if number is None or number <= 0:
            errors.append(invalid(path.child(key), raw, "must be a positive integer"))
            return default
        return number

    return QuarantineSettings(
        faults=base.faults if faults is None else faults,
        window_seconds=positive("windowSeconds", base.window_seconds),
        cooldown_seconds=positive("cooldownSeconds", base.cooldown_seconds),
        stuck_pod_seconds=positive("stuckPodSeconds", base.stuck_pod_seconds),
    )


def _parse_progress_deadline(spec: Mapping[str, Any], errors: list[FieldError]) -> int | None:
    """``spec.progressDeadlineSeconds``: a positive integer, the hang deadline of its jobs."""
    value = spec.get("progressDeadlineSeconds")
    if value is None:
        return None
    seconds = parse_deadline(value) if not isinstance(value, str) else None
    if seconds is None:
        path = _SPEC.child("progressDeadlineSeconds")
        errors.append(invalid(path, value, "must be a positive integer"))
    return seconds

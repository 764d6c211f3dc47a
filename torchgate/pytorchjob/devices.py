"""How many GPUs a pod holds: the one count behind every GPU rule of the webhook and the controller.

Why one declaration: "nccl only with GPUs", the ``/dev/shm`` default, ``maxGPUsPerJob``, the
``nprocPerNode`` rules, a TeamQuota's GPUs and ``PET_NPROC_PER_NODE`` for ``nprocPerNode: auto``
must all see the same number, or a job is admitted on one count and placed or charged on another.

A pod gets GPUs two ways:

- as an extended resource in its containers' ``resources`` (the device-plugin model: the
  policy's ``gpuResource``, ``nvidia.com/gpu``; Kubernetes 1.37 may also serve such a request
  through Dynamic Resource Allocation, KEP-5004, which does not change what the pod asks for);
- through Dynamic Resource Allocation: ``spec.resourceClaims`` names ResourceClaims or
  ResourceClaimTemplates (``resource.k8s.io/v1``) whose device requests ask for a DeviceClass
  the PlacementPolicy lists in ``gpuDeviceClasses``, or a DeviceClass whose
  ``extendedResourceName`` is the policy's ``gpuResource``. The extended resources such GPU
  classes name (``extendedResourceName``) count as GPUs too.

Invariants:

- A policy without ``gpuDeviceClasses`` counts no claim (``GpuSources.counts_claims`` is false):
  until the controller reads GPU capacity from ResourceSlices, a job counted with claimed GPUs
  would be admitted by the webhook and then wait forever for node GPUs no node lists.
- Counting never raises: a malformed claim entry or device request counts as no GPU (the
  webhook reports it, kube-apiserver refuses it in the pod); a GPU request whose number is only
  known at allocation (``allocationMode: All``, ``firstAvailable``) counts as ``None`` (unknown),
  which the webhook refuses with the request's path.
- A claim (or template) the caller cannot see counts as no GPU; the webhook reports it.

Rules (each one function):

1. ``gpu_sources``: the DeviceClasses and extended resources that count as GPUs under a policy.
2. ``request_gpus``: a device request (``spec.devices.requests[i]``) of a GPU class counts its
   ``exactly.count`` (default 1) in mode ``ExactCount`` (the default mode); mode ``All`` and
   ``firstAvailable`` with a GPU class count as unknown; any other request counts 0.
3. ``claim_gpus``: a ResourceClaimSpec counts the sum of its requests (only the named request
   when a container names one); unknown when any counted request is unknown.
4. ``container_gpus``: a container counts its GPU extended-resource requests (``requests``,
   falling back to ``limits``) plus the GPUs of the claims it names in ``resources.claims``.
5. ``pod_gpus``: a pod counts the GPU extended resources its ``containers`` request (what the
   training processes use: init containers and overhead are left out, as before claims existed)
   plus the GPUs of every pod-level claim (a claim's devices are allocated to the pod whether or
   not a container names it). What a pod takes from its node and quota is ``units.pod_units``:
   kube-scheduler's effective request, whose claimed part is this module's count too.
   ``pod_claimed_classes`` names the GPU DeviceClasses that count makes, for messages.
6. ``unseen_sources``: the ResourceClaims and templates a job's pod templates name that a
   lookup which has listed (``complete``) does not see. A cache may not have seen an object the
   apiserver already has (``kubectl apply -f dir/`` creates the template and the job together),
   so the webhook reads these live before it refuses one (``ConfirmedClaims`` answers with what
   that read found).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Protocol

from torchgate.pytorchjob.spec import container_requests, pod_spec_of

_OBJECT: Final = (dict, Mapping)
_ZERO: Final = Decimal(0)

RESOURCE_CLAIM: Final = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE: Final = "ResourceClaimTemplate"
EXACT_COUNT: Final = "ExactCount"


@dataclass(frozen=True, slots=True)
class GpuSources:
    """What counts as a GPU: extended resources, and DeviceClasses a claim may ask for."""

    resource: str  # the policy's ``gpuResource``
    extended: frozenset[str] = frozenset()  # other names GPU classes serve (KEP-5004)
    # GPU DeviceClass -> the resource name its devices are counted under: its
    # ``extendedResourceName`` when it has one, else ``resource`` (capacity uses the same key).
    class_keys: Mapping[str, str] = field(default_factory=dict)

    @property
    def device_classes(self) -> frozenset[str]:
        """The DeviceClasses whose devices are GPUs."""
        return frozenset(self.class_keys)

    @property
    def resources(self) -> frozenset[str]:
        """Every extended-resource name that counts as GPUs."""
        return self.extended | {self.resource}

    @property
    def counts_claims(self) -> bool:
        """Whether any claim can count GPUs (the policy lists ``gpuDeviceClasses``)."""
        return bool(self.class_keys)


class ClaimLookup(Protocol):
    """What a caller sees of Dynamic Resource Allocation in one namespace."""

    @property
    def complete(self) -> bool:
        """Whether an object ``spec`` does not see does not exist (the cache has listed)."""

    @property
    def class_resources(self) -> Mapping[str, str | None]:
        """Every DeviceClass seen, with its ``extendedResourceName`` (None when unset)."""

    def spec(self, kind: str, name: str) -> Mapping[str, Any] | None:
        """``spec`` of a ResourceClaim, ``spec.spec`` of a ResourceClaimTemplate; None if unseen."""


@dataclass(frozen=True, slots=True)
class SeenClaims:
    """A lookup over objects already read: ``{(kind, name): claim spec}``."""

    specs: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    class_resources: Mapping[str, str | None] = field(default_factory=dict)
    complete: bool = True

    def spec(self, kind: str, name: str) -> Mapping[str, Any] | None:
        """The spec of ``kind``/``name``, if seen."""
        return self.specs.get((kind, name))


# A caller that watches no claims: it sees none, and cannot say that one does not exist.
NO_CLAIMS: Final = SeenClaims(complete=False)


@dataclass(frozen=True, slots=True)
class ConfirmedClaims:
    """A cache's lookup with the objects it missed but a live read found (rule 6).

    ``found``: claim specs by ``(kind, name)`` read from the apiserver; ``complete`` is false
    when a live read could not answer (then an object neither sees is "not seen", not missing).
    """

    seen: ClaimLookup
    found: Mapping[tuple[str, str], Mapping[str, Any]]
    complete: bool

    @property
    def class_resources(self) -> Mapping[str, str | None]:
        """The cache's DeviceClasses."""
        return self.seen.class_resources

    def spec(self, kind: str, name: str) -> Mapping[str, Any] | None:
        """What the live read found, else what the cache holds."""
        found = self.found.get((kind, name))
        return found if found is not None else self.seen.spec(kind, name)


def claim_spec_of(kind: str, raw: object) -> Mapping[str, Any] | None:
    """The ResourceClaimSpec inside a ResourceClaim (``spec``) or a template (``spec.spec``)."""
    spec = raw.get("spec") if isinstance(raw, _OBJECT) else None
    if kind == RESOURCE_CLAIM_TEMPLATE:
        spec = spec.get("spec") if isinstance(spec, _OBJECT) else None
    return spec if isinstance(spec, _OBJECT) else None


# ------------------------------------------------------------------ rule 1: what is a GPU


def gpu_sources(
    gpu_resource: str,
    gpu_device_classes: Iterable[str] = (),
    class_resources: Mapping[str, str | None] | None = None,
) -> GpuSources:
    """The GPU resources and classes under a policy (rule 1).

    ``class_resources`` maps the DeviceClasses the caller sees to their ``extendedResourceName``.
    Without ``gpu_device_classes`` no class counts (module invariant).
    """
    listed = frozenset(gpu_device_classes)
    if not listed:
        return plain_sources(gpu_resource)
    known = class_resources or {}
    classes = listed | {name for name, resource in known.items() if resource == gpu_resource}
    keys = {c: known.get(c) or gpu_resource for c in sorted(classes)}
    extended = frozenset(keys.values()) - {gpu_resource}
    return GpuSources(gpu_resource, extended, keys)


@functools.lru_cache(maxsize=64)
def plain_sources(gpu_resource: str) -> GpuSources:
    """``gpu_sources`` of a policy without ``gpuDeviceClasses``: built once per resource name."""
    return GpuSources(gpu_resource)


# ------------------------------------------------------------------ rules 2-3: claims


def request_gpus(request: object, sources: GpuSources) -> int | None:
    """GPUs one device request asks for: a count, 0, or None when only allocation knows (rule 2)."""
    if not isinstance(request, _OBJECT):
        return 0
    alternatives = request.get("firstAvailable")
    if isinstance(alternatives, Sequence) and not isinstance(alternatives, str):
        if any(
            isinstance(sub, _OBJECT) and sub.get("deviceClassName") in sources.device_classes
            for sub in alternatives
        ):
            return None
        return 0
    exactly = request.get("exactly")
    if not isinstance(exactly, _OBJECT) or exactly.get("deviceClassName") not in (
        sources.device_classes
    ):
        return 0
    mode = exactly.get("allocationMode") or EXACT_COUNT
    if mode != EXACT_COUNT:
        return None
    count = exactly.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return 0
    return count


def device_requests(spec: Mapping[str, Any]) -> list[Any]:
    """``spec.devices.requests`` of a ResourceClaimSpec (empty when malformed)."""
    devices = spec.get("devices")
    requests = devices.get("requests") if isinstance(devices, _OBJECT) else None
    return requests if isinstance(requests, list) else []


def claim_gpus(
    spec: Mapping[str, Any] | None, sources: GpuSources, request: str | None = None
) -> int | None:
    """GPUs a ResourceClaimSpec asks for (only ``request`` when given); None if unknown (rule 3)."""
    by_key = claim_gpus_by_key(spec, sources, request)
    return None if by_key is None else sum(by_key.values())


def claim_gpus_by_key(
    spec: Mapping[str, Any] | None, sources: GpuSources, request: str | None = None
) -> dict[str, int] | None:
    """``claim_gpus`` per resource key of the GPU classes asked (``GpuSources.class_keys``)."""
    out: dict[str, int] = {}
    if spec is None or not sources.counts_claims:
        return out
    for entry in device_requests(spec):
        if request is not None and (not isinstance(entry, _OBJECT) or entry.get("name") != request):
            continue
        count = request_gpus(entry, sources)
        if count is None:
            return None
        if count:
            key = sources.class_keys[entry["exactly"]["deviceClassName"]]
            out[key] = out.get(key, 0) + count
    return out


# ------------------------------------------------------------------ rules 4-5: containers and pods


def pod_claims(pod_spec: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """``spec.resourceClaims`` by name: ``(kind, object name)`` of each well-formed entry."""
    entries = pod_spec.get("resourceClaims")
    out: dict[str, tuple[str, str]] = {}
    if not isinstance(entries, list):
        return out
    for entry in entries:
        if not isinstance(entry, _OBJECT) or not isinstance(entry.get("name"), str):
            continue
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if isinstance(claim, str) and claim:
            out[entry["name"]] = (RESOURCE_CLAIM, claim)
        elif isinstance(template, str) and template:
            out[entry["name"]] = (RESOURCE_CLAIM_TEMPLATE, template)
    return out


def container_claims(container: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``resources.claims`` of a container: ``(claim name, request or None)`` per entry."""
    resources = container.get("resources")
    claims = resources.get("claims") if isinstance(resources, _OBJECT) else None
    if not isinstance(claims, list):
        return []
    out: list[tuple[str, str | None]] = []
    for entry in claims:
        if isinstance(entry, _OBJECT) and isinstance(entry.get("name"), str):
            request = entry.get("request")
            out.append((entry["name"], request if isinstance(request, str) and request else None))
    return out


def _extended_gpus(container: Mapping[str, Any], sources: GpuSources) -> Decimal:
    if not sources.extended:  # the usual policy: one lookup (an integer count parses nothing)
        return container_requests(container, only=sources.resource).get(sources.resource, _ZERO)
    total = Decimal(0)
    for resource in sorted(sources.resources):  # usually one: parse nothing else
        total += container_requests(container, only=resource).get(resource, Decimal(0))
    return total


def _claimed_gpus(
    wanted: Iterable[tuple[str, str | None]],
    pod_spec: Mapping[str, Any],
    sources: GpuSources,
    claims: ClaimLookup,
) -> Decimal | None:
    by_key = _claimed_by_key(wanted, pod_spec, sources, claims)
    return None if by_key is None else Decimal(sum(by_key.values()))


def _claimed_by_key(
    wanted: Iterable[tuple[str, str | None]],
    pod_spec: Mapping[str, Any],
    sources: GpuSources,
    claims: ClaimLookup,
) -> dict[str, int] | None:
    out: dict[str, int] = {}
    if not sources.counts_claims:
        return out
    declared = pod_claims(pod_spec)
    for name, request in wanted:
        target = declared.get(name)
        if target is None:
            continue
        counts = claim_gpus_by_key(claims.spec(*target), sources, request)
        if counts is None:
            return None
        for key, count in counts.items():
            out[key] = out.get(key, 0) + count
    return out


def container_gpus(
    container: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    sources: GpuSources,
    claims: ClaimLookup = NO_CLAIMS,
) -> Decimal | None:
    """GPUs one container uses: extended resources plus the claims it names (rule 4)."""
    extended = _extended_gpus(container, sources)
    claimed = _claimed_gpus(container_claims(container), pod_spec, sources, claims)
    return None if claimed is None else extended + claimed


def pod_claimed_gpus(
    pod_spec: Mapping[str, Any], sources: GpuSources, claims: ClaimLookup = NO_CLAIMS
) -> Decimal | None:
    """The GPUs of every pod-level claim (rule 5's second part); None if unknown."""
    wanted = ((name, None) for name in pod_claims(pod_spec))
    return _claimed_gpus(wanted, pod_spec, sources, claims)


def pod_claimed_by_key(
    pod_spec: Mapping[str, Any], sources: GpuSources, claims: ClaimLookup = NO_CLAIMS
) -> dict[str, int]:
    """The GPUs of every pod-level claim per resource key (unknown counts: none)."""
    wanted = ((name, None) for name in pod_claims(pod_spec))
    return _claimed_by_key(wanted, pod_spec, sources, claims) or {}


def pod_claimed_classes(
    pod_spec: Mapping[str, Any], sources: GpuSources, claims: ClaimLookup = NO_CLAIMS
) -> dict[str, tuple[str, ...]]:
    """The GPU DeviceClasses a pod's claims ask for, per resource key they count under (rule 5).

    What a pod's claimed count is made of, for messages: a DRA pool has no ``nvidia.com/gpu``
    on its nodes, so "asks 16 nvidia.com/gpu" alone does not tell its admin which devices.
    """
    found: dict[str, set[str]] = {}
    if not sources.counts_claims:
        return {}
    for target in pod_claims(pod_spec).values():
        spec = claims.spec(*target)
        for entry in device_requests(spec) if spec is not None else ():
            exactly = entry.get("exactly") if isinstance(entry, _OBJECT) else None
            name = exactly.get("deviceClassName") if isinstance(exactly, _OBJECT) else None
            if isinstance(name, str) and name in sources.class_keys:
                found.setdefault(sources.class_keys[name], set()).add(name)
    return {key: tuple(sorted(names)) for key, names in sorted(found.items())}


def pod_gpus(
    pod_spec: Mapping[str, Any], sources: GpuSources, claims: ClaimLookup = NO_CLAIMS
) -> Decimal | None:
    """GPUs a pod holds: its effective extended request plus every pod-level claim (rule 5)."""
    claimed = pod_claimed_gpus(pod_spec, sources, claims) if sources.counts_claims else _ZERO
    if claimed is None:
        return None
    containers = pod_spec.get("containers")
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, _OBJECT):
            claimed += _extended_gpus(container, sources)
    return claimed


def replica_gpus(
    pod_spec: Mapping[str, Any], sources: GpuSources, claims: ClaimLookup = NO_CLAIMS
) -> tuple[Decimal | None, int | None]:
    """``pod_gpus`` and the index of the first container with GPUs (``container_gpus`` not 0).

    One walk of the containers when no claim can count (the usual policy): the webhook reads
    this for every replica of every review.
    """
    containers = pod_spec.get("containers")
    entries = containers if isinstance(containers, list) else ()
    first: int | None = None
    if not sources.counts_claims:  # then no class names an extended resource either
        resource = sources.resource
        total = _ZERO
        for index, container in enumerate(entries):
            if isinstance(container, _OBJECT):
                amount = container_requests(container, only=resource).get(resource, _ZERO)
                if amount != _ZERO:  # a Decimal: no int converted per comparison
                    total += amount
                    if first is None:
                        first = index
        return total, first
    for index, container in enumerate(entries):
        if not isinstance(container, _OBJECT):
            continue
        if container_gpus(container, pod_spec, sources, claims) != 0:  # unknown (None) too
            first = index
            break
    return pod_gpus(pod_spec, sources, claims), first


# ------------------------------------------------------------------ rule 6: not seen yet


def unseen_sources(job: object, claims: ClaimLookup) -> list[tuple[str, str]]:
    """The claim sources a job's pod templates name that a listed ``claims`` does not see (rule 6).

    ``(kind, name)`` once each, in order; none before the lookup has listed.
    """
    if not claims.complete:
        return []
    spec = job.get("spec") if isinstance(job, _OBJECT) else None
    replicas = spec.get("pytorchReplicaSpecs") if isinstance(spec, _OBJECT) else None
    out: list[tuple[str, str]] = []
    for replica in replicas.values() if isinstance(replicas, _OBJECT) else ():
        template = replica.get("template") if isinstance(replica, _OBJECT) else None
        for source in pod_claims(pod_spec_of(template)).values():
            if source not in out and claims.spec(*source) is None:
                out.append(source)
    return out

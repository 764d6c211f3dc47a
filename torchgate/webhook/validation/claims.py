"""Rules for a replica's Dynamic Resource Allocation claims (``resource.k8s.io/v1``).

Why the webhook checks claims that kube-apiserver checks again in each pod: the pods are created
by the controller after admission, so a claim mistake found there fails the gang after it was
admitted and counted (a pod that cannot be created, or a gang that can never be placed). Each
rule names the field of the job that causes it.

Every rule counts GPUs with ``devices`` (the count the controller uses too), so a GPU is the same
thing here as in quota, placement and ``PET_NPROC_PER_NODE``.

Rules (each one function):

1. ``container_claim_names``: a container's ``resources.claims[i].name`` names a pod-level claim
   (``spec.resourceClaims[j].name``).
2. ``claim_sources``: a pod-level claim names a ResourceClaimTemplate or ResourceClaim that exists
   in the job's namespace; when the webhook has not listed them yet (or does not watch them), a
   warning says it could not check. The lookup it is given has already read live what the
   listed caches miss (``devices.unseen_sources``), so a miss here is a true absence.
3. ``shared_claim``: a ResourceClaim (not a template) in a replica of more than one pod would be
   shared by all its pods and force them onto one node; only a template gives each pod its own.
4. ``countable_gpus``: a claimed GPU count must be known before allocation (``exactly.count``):
   ``allocationMode: All`` or ``firstAvailable`` on a GPU DeviceClass is refused, because quota,
   ``maxGPUsPerJob`` and the gang's placement need the number.
5. ``gpus_asked_once``: a pod asks for GPUs as an extended resource or through claims, not both
   (two allocations of one kind of device: the count of either alone is wrong).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from torchgate.pytorchjob.devices import (
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    claim_gpus,
    pod_claimed_gpus,
    pod_claims,
)
from torchgate.pytorchjob.fieldpath import FieldWarning, forbidden, invalid
from torchgate.pytorchjob.spec import pod_requests
from torchgate.webhook.validation.facts import (
    NONE,
    OBJECT,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    at,
    count,
    not_found,
    quote,
)

_SOURCE_FIELD = {
    RESOURCE_CLAIM: "resourceClaimName",
    RESOURCE_CLAIM_TEMPLATE: "resourceClaimTemplateName",
}


def _claim_entries(replica: ReplicaFacts) -> list[tuple[int, Mapping[str, Any]]]:
    entries = replica.pod_spec.get("resourceClaims")
    if not isinstance(entries, list):
        return []
    return [(i, entry) for i, entry in enumerate(entries) if isinstance(entry, OBJECT)]


def _source(entry: Mapping[str, Any]) -> tuple[str, str] | None:
    for kind, key in _SOURCE_FIELD.items():
        name = entry.get(key)
        if isinstance(name, str) and name:
            return kind, name
    return None


def _namespace(job: JobFacts) -> str:
    metadata = job.metadata if isinstance(job.metadata, OBJECT) else {}
    namespace = metadata.get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


# ------------------------------------------------------------------ rule 1


def container_claim_names(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Every ``resources.claims[i].name`` names an entry of ``spec.resourceClaims`` (rule 1)."""
    found: list[Finding] = []
    declared: set[object] | None = None  # read at the first container that names claims
    for container in (*replica.containers, *replica.init_containers):
        resources = container.fields.get("resources")
        claims = resources.get("claims") if isinstance(resources, OBJECT) else None
        if not isinstance(claims, list):
            continue
        if declared is None:
            declared = {
                entry["name"]
                for _, entry in _claim_entries(replica)
                if isinstance(entry.get("name"), str)
            }
        for index, claim in enumerate(claims):
            name = claim.get("name") if isinstance(claim, OBJECT) else None
            if name not in declared:
                found.append(
                    not_found(
                        at(container.path, "resources", "claims", index, "name"),
                        name,
                        "must name an entry of the pod template's spec.resourceClaims",
                    )
                )
    return found


# ------------------------------------------------------------------ rule 2


def claim_sources(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """The ResourceClaims and templates the pod template names exist (rule 2)."""
    found: list[Finding] = []
    namespace = _namespace(job)
    for index, entry in _claim_entries(replica):
        source = _source(entry)
        if source is None or job.claims.spec(*source) is not None:
            continue
        kind, name = source
        path = at(replica.pod_path, "resourceClaims", index, _SOURCE_FIELD[kind])
        if job.claims.complete:
            found.append(not_found(path, name, f"no {kind} {quote(name)} in namespace {namespace}"))
        else:
            found.append(
                FieldWarning(
                    path,
                    f"the webhook cannot see {kind} {quote(name)} in namespace {namespace} yet; "
                    "its GPUs are not counted, and the pods wait until it exists",
                )
            )
    return found


# ------------------------------------------------------------------ rule 3


def shared_claim(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """A ResourceClaim is not shared by the pods of a multi-pod replica (rule 3)."""
    if replica.pods is None or replica.pods <= 1:
        return NONE
    found: list[Finding] = []
    for index, entry in _claim_entries(replica):
        source = _source(entry)
        if source is None or source[0] != RESOURCE_CLAIM:
            continue
        found.append(
            forbidden(
                at(replica.pod_path, "resourceClaims", index, "resourceClaimName"),
                f"ResourceClaim {quote(source[1])} would be shared by all {replica.pods} "
                f"{replica.key} pods and force them onto one node; use "
                "resourceClaimTemplateName so each pod gets its own claim",
            )
        )
    return found


# ------------------------------------------------------------------ rule 4


def countable_gpus(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Claimed GPUs are an exact count (rule 4)."""
    if replica.gpus_known:
        return NONE
    found: list[Finding] = []
    declared = pod_claims(replica.pod_spec)
    for index, entry in _claim_entries(replica):
        name = entry.get("name")
        target = declared.get(name) if isinstance(name, str) else None
        if target is None or claim_gpus(job.claims.spec(*target), job.gpus) is not None:
            continue
        kind, source = target
        found.append(
            invalid(
                at(replica.pod_path, "resourceClaims", index, _SOURCE_FIELD[kind]),
                source,
                f"{kind} {quote(source)} asks a GPU DeviceClass for allocationMode All or "
                "firstAvailable: torchgate counts GPUs before allocation (quota, maxGPUsPerJob, "
                "placement) and needs exactly.count",
            )
        )
    return found


# ------------------------------------------------------------------ rule 5


def gpus_asked_once(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """GPUs as an extended resource or as claims, not both (rule 5)."""
    sources = job.gpus
    claimed = pod_claimed_gpus(replica.pod_spec, sources, job.claims)
    if not claimed:
        return NONE
    extended = {
        name: amount
        for name in sorted(sources.resources)
        if (amount := pod_requests(replica.pod_spec, only=name).get(name, Decimal(0))) > 0
    }
    if not extended:
        return NONE
    asked = ", ".join(f"{count(amount)} {name}" for name, amount in extended.items())
    return [
        forbidden(
            at(replica.pod_path, "resourceClaims"),
            f"each {replica.key} pod claims {count(claimed)} GPUs and also requests {asked}: "
            "ask for GPUs one way (resources or resourceClaims), not both",
        )
    ]

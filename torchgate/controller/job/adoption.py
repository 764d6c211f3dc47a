"""Which of a job's orphaned pods and Services it adopts, as Kubernetes' own controllers do.

Why: a job's pods and Services carry its labels and a controlling ownerReference. When the job
is deleted with ``kubectl delete --cascade=orphan`` (the garbage collector strips the references
and leaves the objects) and created again under its name (a new uid), or when a human strips a
reference, its labelled objects are orphans: labels that match, no controller. Treated as
another owner's, they held the new job's names for ever (``PodNameConflict``). The ReplicaSet
and Job controllers, and the training-operator through its ``ControllerRefManager``, claim
such orphans instead: they patch their own controlling reference in and treat them as theirs.
torchgate does the same, decided here, purely, and carried out by the reconciler's shell.

The rules (``plan`` applies them before any other, to a job neither being deleted nor managed
by another controller):

1. ``orphans``: a pod or Service is adopted when it has no controlling ownerReference at all,
   carries the job's selector labels (``names.job_selector``: the labels the controller's caches
   select and index by), and is not being deleted (Kubernetes' ``ClaimObject`` skips those too).
2. An object controlled by anything else (another job's uid, a Deployment) is never adopted,
   and neither is one without the job's labels (a user's own): either holds the name it has
   (``PodNameConflict``, ``gang.plan_admission``), as before.
3. ``as_adopted``: from the plan that adopts them on, the orphans are the job's: the rest of the
   plan sees them with the job's controlling reference (a Service adopted is not made again; a
   pod adopted is a member, or a straggler deleted, by the usual rules).
4. ``adoption_patch``: the shell adopts with a strategic merge patch that adds the reference and
   carries the object's uid (the ``ControllerRefManager``'s precondition): an object deleted and
   made again under its name meanwhile is refused (409), and one another controller adopted
   meanwhile too (the apiserver allows one controlling reference; 422). A refused adoption
   stops the plan's apply; the job is planned again from what the caches then hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from torchgate.controller.job.model import (
    AdoptedKind,
    Adoption,
    Observed,
    holds_service_name,
    metadata_of,
    name_of,
)
from torchgate.controller.job.pods import owner_reference
from torchgate.pytorchjob import names
from torchgate.pytorchjob.spec import as_mapping


def _has_controller(obj: Mapping[str, Any]) -> bool:
    references = metadata_of(obj).get("ownerReferences")
    if not isinstance(references, list):
        return False
    return any(isinstance(ref, Mapping) and ref.get("controller") is True for ref in references)


def is_orphan_of(obj: Mapping[str, Any], job_name: str) -> bool:
    """Rule 1: no controller, the job's selector labels, not being deleted, a uid to patch by."""
    metadata = metadata_of(obj)
    labels = as_mapping(metadata.get("labels"))
    uid = metadata.get("uid")
    return (
        isinstance(uid, str)
        and bool(uid)
        and bool(name_of(obj))
        and not metadata.get("deletionTimestamp")
        and not _has_controller(obj)
        and all(labels.get(key) == value for key, value in names.job_selector(job_name).items())
    )


def orphans(observed: Observed) -> tuple[Adoption, ...]:
    """Rules 1 and 2: the job's orphaned pods, then Services, each once, by name."""
    job_name = observed.job.name
    services = (
        *observed.services,
        *(h for h in observed.name_holders if isinstance(h, Mapping) and holds_service_name(h)),
    )
    pods = (
        *observed.pods,
        *(h for h in observed.name_holders if isinstance(h, Mapping) and not holds_service_name(h)),
    )
    found: dict[tuple[AdoptedKind, str], Adoption] = {}
    kinds: tuple[tuple[AdoptedKind, Iterable[object]], ...] = (("Pod", pods), ("Service", services))
    for kind, objects in kinds:
        for obj in objects:
            if isinstance(obj, Mapping) and is_orphan_of(obj, job_name):
                uid = str(metadata_of(obj).get("uid"))
                found.setdefault((kind, name_of(obj)), Adoption(kind, name_of(obj), uid))
    return tuple(found.values())


def _with_reference(obj: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, Any]:
    metadata = dict(metadata_of(obj))
    existing = metadata.get("ownerReferences")
    kept = [r for r in existing if isinstance(r, Mapping)] if isinstance(existing, list) else []
    metadata["ownerReferences"] = [*kept, dict(reference)]
    return {**obj, "metadata": metadata}


def as_adopted(observed: Observed, adoptions: Sequence[Adoption]) -> Observed:
    """Rule 3: what the rest of the plan sees once the orphans are the job's.

    Each adopted object carries the job's controlling reference; a Service adopted from the
    name holders (read by a GET before the label-selected cache had it) is one of the job's.
    """
    if not adoptions:
        return observed
    reference = owner_reference(observed.job_raw, observed.job)
    adopted = {(a.kind, a.name) for a in adoptions}

    def kind_of(obj: Mapping[str, Any], default: AdoptedKind) -> AdoptedKind:
        return "Service" if holds_service_name(obj) else default

    def view(objects: Iterable[object], kind: AdoptedKind) -> list[Mapping[str, Any]]:
        return [
            _with_reference(obj, reference)
            if (kind_of(obj, kind), name_of(obj)) in adopted
            else obj
            for obj in objects
            if isinstance(obj, Mapping)
        ]

    holders = [h for h in observed.name_holders if isinstance(h, Mapping)]
    held_services = [h for h in holders if holds_service_name(h)]
    adopted_holders = [h for h in held_services if ("Service", name_of(h)) in adopted]
    cached = {name_of(s) for s in observed.services if isinstance(s, Mapping)}
    return replace(
        observed,
        pods=view(observed.pods, "Pod"),
        services=[
            *view(observed.services, "Service"),
            *view((h for h in adopted_holders if name_of(h) not in cached), "Service"),
        ],
        name_holders=[h for h in holders if (kind_of(h, "Pod"), name_of(h)) not in adopted],
    )


def adoption_patch(adoption: Adoption, reference: Mapping[str, Any]) -> dict[str, Any]:
    """Rule 4: the strategic merge patch that adopts (the object's uid as its precondition)."""
    return {"metadata": {"ownerReferences": [dict(reference)], "uid": adoption.uid}}

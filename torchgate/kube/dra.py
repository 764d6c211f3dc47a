"""What torchgate sees of Dynamic Resource Allocation: ResourceClaims, templates, DeviceClasses.

Why one view for both components: the webhook and the controller count a pod's GPUs with
``pytorchjob.devices`` from the same three caches, so they answer with the same number. Each
component builds the ``Informer``s itself (``DraCaches.of``), so the RBAC scan sees who lists what.

The view never blocks: before the caches have listed, a claim or template that is not seen is
"not seen yet" (``complete`` is false) rather than "does not exist".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchgate.kube.informer import Informer
from torchgate.pytorchjob.devices import (
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    ClaimLookup,
    claim_spec_of,
)


@dataclass(frozen=True, slots=True)
class DraCaches:
    """The three informers (each listed and watched cluster-wide)."""

    claims: Informer
    templates: Informer
    classes: Informer

    def view(self, namespace: str) -> ClaimLookup:
        """What the caches hold for a job in ``namespace``."""
        return _NamespaceView(self, namespace)

    @property
    def synced(self) -> bool:
        """Whether all three have listed once."""
        return all(i.synced.is_set() for i in (self.claims, self.templates, self.classes))

    def class_resources(self) -> dict[str, str | None]:
        """Every DeviceClass with its ``spec.extendedResourceName`` (None when unset)."""
        out: dict[str, str | None] = {}
        for raw in self.classes.values():
            name = (raw.get("metadata") or {}).get("name")
            spec = raw.get("spec")
            resource = spec.get("extendedResourceName") if isinstance(spec, Mapping) else None
            if isinstance(name, str):
                out[name] = resource if isinstance(resource, str) and resource else None
        return out


class _NamespaceView:
    __slots__ = ("_caches", "_classes", "_namespace")

    def __init__(self, caches: DraCaches, namespace: str) -> None:
        self._caches = caches
        self._namespace = namespace
        self._classes: dict[str, str | None] | None = None

    @property
    def complete(self) -> bool:
        return self._caches.synced

    @property
    def class_resources(self) -> Mapping[str, str | None]:
        if self._classes is None:
            self._classes = self._caches.class_resources()
        return self._classes

    def spec(self, kind: str, name: str) -> Mapping[str, Any] | None:
        informer = self._caches.templates if kind == RESOURCE_CLAIM_TEMPLATE else None
        if kind == RESOURCE_CLAIM:
            informer = self._caches.claims
        if informer is None:
            return None
        return claim_spec_of(kind, informer.get(self._namespace, name))

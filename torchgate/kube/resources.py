"""Where each kind torchgate touches lives in the REST API (group, version, plural, scope).

Pure. Every call names its resource through one of these constants (``PODS.path(ns, name)``), so
the RBAC test can read from the code which permissions each component needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def served_in(self, discovery: object) -> bool:
        """Whether an APIResourceList (``GET discovery_path()``) lists this resource."""
        found = discovery.get("resources") if isinstance(discovery, Mapping) else None
        return isinstance(found, list) and any(
            isinstance(entry, Mapping) and entry.get("name") == self.plural for entry in found
        )

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The URL path of a collection (``name`` None) or of one object."""
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base

    def discovery_path(self) -> str:
        """The path whose APIResourceList says which resources the group version serves."""
        return "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"


PODS: Final = Resource("", "v1", "pods")
SERVICES: Final = Resource("", "v1", "services")
EVENTS: Final = Resource("", "v1", "events")
SECRETS: Final = Resource("", "v1", "secrets")
NODES: Final = Resource("", "v1", "nodes", namespaced=False)
PYTORCHJOBS: Final = Resource("kubeflow.org", "v1", "pytorchjobs")
PLACEMENT_POLICIES: Final = Resource(
    "torchgate.io", "v1alpha1", "placementpolicies", namespaced=False
)
TEAM_QUOTAS: Final = Resource("torchgate.io", "v1alpha1", "teamquotas", namespaced=False)
PRIORITY_CLASSES: Final = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
# Kubernetes' gang objects (GenericWorkload; beta in 1.37): see controller/job/gangobjects.py.
WORKLOADS: Final = Resource("scheduling.k8s.io", "v1beta1", "workloads")
POD_GROUPS: Final = Resource("scheduling.k8s.io", "v1beta1", "podgroups")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases")
DEPLOYMENTS: Final = Resource("apps", "v1", "deployments")
MUTATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", namespaced=False
)
VALIDATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)
# Dynamic Resource Allocation (resource.k8s.io/v1, GA since Kubernetes 1.34)
RESOURCE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "resourceclaims")
RESOURCE_CLAIM_TEMPLATES: Final = Resource("resource.k8s.io", "v1", "resourceclaimtemplates")
DEVICE_CLASSES: Final = Resource("resource.k8s.io", "v1", "deviceclasses", namespaced=False)
RESOURCE_SLICES: Final = Resource("resource.k8s.io", "v1", "resourceslices", namespaced=False)
# resource.k8s.io/v1 from Kubernetes 1.37 (before: v1beta2 behind DRADeviceTaintRules)
DEVICE_TAINT_RULES: Final = Resource("resource.k8s.io", "v1", "devicetaintrules", namespaced=False)
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False
)

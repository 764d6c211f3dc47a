"""Dynamic Resource Allocation objects (``resource.k8s.io/v1``) and pods that claim them."""

from __future__ import annotations

from typing import Any

from torchgate.pytorchjob.devices import (
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    SeenClaims,
    claim_spec_of,
)

GPU_CLASS = "gpu.nvidia.com"
DRIVER = GPU_CLASS  # the kwok pool's driver, and the DeviceClass named like it


def device_request(
    name: str = "gpus",
    *,
    device_class: str = GPU_CLASS,
    count: int | None = None,
    mode: str | None = None,
) -> dict[str, Any]:
    """One ``spec.devices.requests[i]`` asking ``device_class`` for ``count`` devices."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if mode is not None:
        exactly["allocationMode"] = mode
    if count is not None:
        exactly["count"] = count
    return {"name": name, "exactly": exactly}


def claim_template(
    name: str, *requests: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    """A ResourceClaimTemplate whose claims ask for ``requests``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": RESOURCE_CLAIM_TEMPLATE,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def resource_claim(
    name: str, *requests: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    """A ResourceClaim asking for ``requests``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": RESOURCE_CLAIM,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
    }


def device_class(name: str = GPU_CLASS, extended_resource: str | None = None) -> dict[str, Any]:
    """A DeviceClass (optionally serving an extended resource, KEP-5004)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": "true"}}]}
    if extended_resource is not None:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def seen(*objects: dict[str, Any], complete: bool = True) -> SeenClaims:
    """A claim lookup that sees ``objects`` (claims, templates and DeviceClasses)."""
    specs = {}
    classes: dict[str, str | None] = {}
    for raw in objects:
        kind, name = raw["kind"], raw["metadata"]["name"]
        if kind == "DeviceClass":
            classes[name] = raw["spec"].get("extendedResourceName")
            continue
        spec = claim_spec_of(kind, raw)
        assert spec is not None
        specs[kind, name] = spec
    return SeenClaims(specs, classes, complete)


def claiming_pod(*claims: tuple[str, str, str]) -> dict[str, Any]:
    """Pod template fields: ``spec.resourceClaims`` from ``(name, kind, object)`` triples.

    Merge into a replica's ``pod_spec``; the containers name them with ``claim_refs``.
    """
    entries = []
    for name, kind, target in claims:
        key = (
            "resourceClaimTemplateName" if kind == RESOURCE_CLAIM_TEMPLATE else "resourceClaimName"
        )
        entries.append({"name": name, key: target})
    return {"resourceClaims": entries}


def claim_refs(*names: str) -> dict[str, Any]:
    """A container's ``resources`` that use the pod-level claims ``names``."""
    return {"claims": [{"name": name} for name in names]}


def resource_slice(
    node: str | None,
    devices: int,
    *,
    pool: str | None = None,
    generation: int = 1,
    taints: dict[int, list[dict[str, Any]]] | None = None,
    driver: str = DRIVER,
) -> dict[str, Any]:
    entries = []
    for index in range(devices):
        device: dict[str, Any] = {"name": f"gpu-{index}"}
        if taints and index in taints:
            device["taints"] = taints[index]
        entries.append(device)
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": pool or node or "shared",
            "generation": generation,
            "resourceSliceCount": 1,
        },
        "devices": entries,
    }
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": f"{node}-{generation}"}, "spec": spec}


def allocated_claim(pool: str, *devices: int, owner: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"claim-{pool}", "namespace": "default"}
    if owner is not None:
        metadata["ownerReferences"] = [{"kind": "Pod", "name": owner, "apiVersion": "v1"}]
    results = [
        {"request": "gpus", "driver": DRIVER, "pool": pool, "device": f"gpu-{d}"} for d in devices
    ]
    return {"metadata": metadata, "status": {"allocation": {"devices": {"results": results}}}}


def device_taint_rule(name: str, effect: str = "NoSchedule", **selector: str) -> dict[str, Any]:
    """A DeviceTaintRule (``resource.k8s.io/v1``) tainting the devices ``selector`` picks.

    ``selector``: ``driver``, ``pool``, ``device`` (all must match; none: every device).
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": dict(selector),
            "taint": {"key": "example.com/xid", "effect": effect},
        },
    }

"""GPU capacity from ResourceSlices: devices per node, minus allocated claims and tainted devices.

Why the controller reads ResourceSlices: a node whose GPUs are published by a DRA driver (or
served as a KEP-5004 extended resource) lists none in its allocatable, so planning a gang from
allocatable alone would wait forever ("0 free") or pin claimed pods to nodes without devices.
torchgate plans *nodes*, never devices: it counts how many GPU devices each node has free, and
kube-scheduler allocates which ones.

Invariants:

- Only devices of GPU DeviceClasses count, each under its classes' resource keys
  (``GpuSources.class_keys``: a class's ``extendedResourceName``, else the policy's GPU
  resource), in milli-units like every other amount (``units``). A device two GPU classes
  select counts under both keys: torchgate cannot know which kind of request will take it.
- A device counts once: a driver's pool is read from its newest generation only, and a device
  allocated to a claim is not free, unless the ledger already counts it through the pod that
  owns the claim (``counted``: the pod's units hold the device's resource key: a torchgate pod's
  claimed GPUs, a KEP-5004 extended-resource request).

Rules (each one function):

1. ``class_drivers``: the drivers a DeviceClass selects: the drivers its CEL selectors compare
   ``device.driver`` with (``device.driver == "gpu.nvidia.com"``); a class with no such selector
   selects the driver named like the class.
2. ``node_devices``: the devices of each node: those of slices with ``spec.nodeName`` in the
   newest generation of their pool (slices shared by several nodes, ``nodeSelector`` or
   ``allNodes``, are left out: torchgate cannot tell on which node their devices are used).
3. ``unavailable``: a device with a taint of effect ``NoSchedule`` or ``NoExecute`` is not free
   (KEP-5055; ``None`` and unknown effects are informational), whether its driver publishes the
   taint in the slice or an admin's DeviceTaintRule (``resource.k8s.io/v1``, Kubernetes 1.37)
   selects the device (``rule_selectors``: all of the rule's ``driver``, ``pool`` and
   ``device`` that are set match; an empty selector selects every device, a rule without one
   none). ``kubectl create devicetaintrule`` is how an admin takes a failing GPU out of use:
   kube-scheduler allocates no new claim on it, so a gang planned onto its node would keep a
   pod Pending there while the rest of the gang holds its GPUs.
4. ``allocated``: the devices in ``status.allocation.devices.results`` of every claim, except
   those the owning pod's units already count.
5. ``free_devices``: per node, per resource key, the GPU devices that are neither unavailable nor
   allocated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from torchgate.pytorchjob.spec import as_list, as_mapping
from torchgate.pytorchjob.units import MILLI

Device = tuple[str, str, str]  # (driver, pool, device name)
PodKey = tuple[str, str]

_BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_DRIVER_SELECTOR: Final = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")


# ------------------------------------------------------------------ rule 1


def class_drivers(device_class: Mapping[str, Any]) -> frozenset[str]:
    """The drivers a DeviceClass selects (rule 1)."""
    found: set[str] = set()
    for selector in as_list(as_mapping(device_class.get("spec")).get("selectors")):
        expression = as_mapping(as_mapping(selector).get("cel")).get("expression")
        if isinstance(expression, str):
            found.update(_DRIVER_SELECTOR.findall(expression))
    if found:
        return frozenset(found)
    name = as_mapping(device_class.get("metadata")).get("name")
    return frozenset({name}) if isinstance(name, str) else frozenset()


def driver_keys(
    device_classes: Iterable[Mapping[str, Any]], class_keys: Mapping[str, str]
) -> dict[str, frozenset[str]]:
    """Driver -> resource keys, for the GPU classes (``class_keys``) among ``device_classes``.

    Two GPU classes may select one driver's devices under two keys (a class for claims, one
    serving ``example.com/gpu``): its devices count under each, as either may take them.
    """
    out: dict[str, set[str]] = {}
    for raw in device_classes:
        name = as_mapping(raw.get("metadata")).get("name")
        key = class_keys.get(name) if isinstance(name, str) else None
        if key is not None:
            for driver in class_drivers(raw):
                out.setdefault(driver, set()).add(key)
    return {driver: frozenset(keys) for driver, keys in out.items()}


# ------------------------------------------------------------------ rules 2-3


def node_devices(
    slices: Iterable[Mapping[str, Any]],
) -> dict[str, list[tuple[Device, Mapping[str, Any]]]]:
    """Node -> its devices (with their raw entry), from the newest generation of each pool."""
    newest: dict[tuple[str, str], int] = {}
    readable: list[tuple[str, str, int, str, list[Any]]] = []
    for raw in slices:
        spec = as_mapping(raw.get("spec"))
        pool = as_mapping(spec.get("pool"))
        driver, pool_name, node = spec.get("driver"), pool.get("name"), spec.get("nodeName")
        generation = pool.get("generation", 0)
        if not (isinstance(driver, str) and isinstance(pool_name, str)):
            continue
        if not isinstance(generation, int) or isinstance(generation, bool):
            continue
        newest[driver, pool_name] = max(newest.get((driver, pool_name), generation), generation)
        if isinstance(node, str) and node:
            readable.append((driver, pool_name, generation, node, as_list(spec.get("devices"))))
    out: dict[str, list[tuple[Device, Mapping[str, Any]]]] = {}
    for driver, pool_name, generation, node, devices in readable:
        if generation != newest[driver, pool_name]:
            continue
        for device in devices:
            name = as_mapping(device).get("name")
            if isinstance(name, str):
                out.setdefault(node, []).append(((driver, pool_name, name), device))
    return out


Selector = tuple[str | None, str | None, str | None]  # (driver, pool, device); None: any


def rule_selectors(taint_rules: Iterable[Mapping[str, Any]]) -> list[Selector]:
    """The device selectors of the DeviceTaintRules whose taint keeps new claims off (rule 3)."""
    out: list[Selector] = []
    for rule in taint_rules:
        spec = as_mapping(rule.get("spec"))
        selector = spec.get("deviceSelector")
        if as_mapping(spec.get("taint")).get("effect") not in _BLOCKING_EFFECTS:
            continue
        if not isinstance(selector, Mapping):  # without a selector no device is selected
            continue
        out.append(
            (_set(selector.get("driver")), _set(selector.get("pool")), _set(selector.get("device")))
        )
    return out


def _set(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def unavailable(device: Device, raw: Mapping[str, Any], selectors: Sequence[Selector] = ()) -> bool:
    """Whether a taint of the slice or of a DeviceTaintRule keeps new claims off (rule 3)."""
    if any(
        as_mapping(taint).get("effect") in _BLOCKING_EFFECTS for taint in as_list(raw.get("taints"))
    ):
        return True
    return any(
        all(wanted is None or wanted == have for wanted, have in zip(selector, device, strict=True))
        for selector in selectors
    )


# ------------------------------------------------------------------ rules 4-5


def allocated(
    claims: Iterable[Mapping[str, Any]],
    keys: Mapping[str, frozenset[str]],
    counted: Callable[[PodKey], Mapping[str, int] | None],
) -> set[Device]:
    """Devices allocated to claims, but those the owning pod's units count (rule 4)."""
    out: set[Device] = set()
    for claim in claims:
        metadata = as_mapping(claim.get("metadata"))
        namespace = str(metadata.get("namespace") or "")
        owners = [
            counted((namespace, str(ref.get("name"))))
            for ref in map(as_mapping, as_list(metadata.get("ownerReferences")))
            if ref.get("kind") == "Pod"
        ]
        allocation = as_mapping(as_mapping(claim.get("status")).get("allocation"))
        for result in as_list(as_mapping(allocation.get("devices")).get("results")):
            result = as_mapping(result)
            driver, pool, device = result.get("driver"), result.get("pool"), result.get("device")
            if not (isinstance(driver, str) and isinstance(pool, str) and isinstance(device, str)):
                continue
            driver_keys = keys.get(driver, frozenset())
            if any(units and any(units.get(k) for k in driver_keys) for units in owners):
                continue
            out.add((driver, pool, device))
    return out


def free_devices(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    keys: Mapping[str, frozenset[str]],
    counted: Callable[[PodKey], Mapping[str, int] | None] = lambda _: None,
    taint_rules: Iterable[Mapping[str, Any]] = (),
) -> dict[str, dict[str, int]]:
    """Node -> resource key -> free GPU devices in milli-units (rule 5); ``keys``: driver -> keys.

    ``counted``: what the ledger counts for a live pod (its units), None for a pod it does not
    hold; ``taint_rules``: the cluster's DeviceTaintRules (rule 3).
    """
    if not keys:
        return {}
    taken = allocated(claims, keys, counted)
    selectors = rule_selectors(taint_rules)
    out: dict[str, dict[str, int]] = {}
    for node, devices in node_devices(slices).items():
        for device, raw in devices:
            device_keys = keys.get(device[0])
            if not device_keys or device in taken or unavailable(device, raw, selectors):
                continue
            free = out.setdefault(node, {})
            for key in device_keys:
                free[key] = free.get(key, 0) + MILLI
    return out

"""Container rules: image, ``command``/``args`` shape, resources and GPUs, volume mounts, privilege.

Privilege is the policy's ``allowPrivileged``: a ``privileged`` container, one adding a
capability that acts on the node rather than the pod (``policy.NODE_CAPABILITIES``), or one
taking a port of the node (``hostPort``: the node's traffic to that port goes to the pod, ahead
of a node service on it where the CNI's portmap forwards it), or one with an ``Unconfined``
seccomp or AppArmor profile (``pod.profile_fields``, shared with the pod level), is refused
without it. A profile the apiserver refuses in every pod (no ``type``, an unknown one, a
``localhostProfile`` missing or set where it does not belong, or one it refuses) is refused
under every policy, by the same function.

Why GPUs get most of the attention: a gang holds every GPU it was given while any pod is
waiting, so a replica whose GPU request cannot be met as written (a fraction, requests unequal to
limits, replicas asking for different counts while torchrun starts the same number of processes
on every node) wastes the whole gang's GPUs. Images are checked with the kubelet's grammar for
the same reason: a pod with an unparsable or placeholder image sits in ``InvalidImageName``
holding its GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob.fieldpath import FieldPath, forbidden, invalid, required
from torchgate.pytorchjob.policy import CONFINEMENT_PROFILES, NODE_CAPABILITIES, capability_name
from torchgate.webhook.imageref import image_reference_problem, is_lone_placeholder
from torchgate.webhook.validation.facts import (
    MEMO_TYPES,
    NONE,
    OBJECT,
    USABLE_QUANTITIES,
    ContainerFacts,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    all_strings,
    at,
    count,
    not_found,
    placeholder_hint,
    quantity,
    quote,
    remember_usable,
)
from torchgate.webhook.validation.pod import profile_fields


def image(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """``image`` is a reference the kubelet can pull, not a placeholder.

    A lone ``<...>`` placeholder (a template's ``<训练镜像>``, "training image") gets its own
    message: the user was told to replace it and did not, so the message says what to put there.
    """
    value = container.fields.get("image")
    if isinstance(value, str) and value and image_reference_problem(value) is None:
        return NONE
    path = at(container.path, "image")
    if value is None or value == "":
        return [required(path, "must be required")]
    if not isinstance(value, str):
        return [invalid(path, value, "must be a string")]
    if is_lone_placeholder(value):
        return [
            invalid(
                path,
                value,
                f"{quote(value)} is a placeholder, not an image: replace it with your training "
                "image (pods would sit in InvalidImageName holding their GPUs)",
            )
        ]
    problem = image_reference_problem(value)
    return [invalid(path, value, problem)] if problem is not None else NONE


def argv_shape(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """``command`` and ``args`` are lists of strings (YAML turns ``8`` and ``true`` into others)."""
    if container.argv_ok:  # the usual case, read with the facts
        return NONE
    found: list[Finding] = []
    for key in ("command", "args"):
        raw = container.fields.get(key)
        if raw is None:
            continue
        if not isinstance(raw, list):
            found.append(invalid(at(container.path, key), raw, "must be a list of strings"))
            continue
        if all_strings(raw):
            continue  # the usual case
        found.extend(
            invalid(at(container.path, key, index), item, "must be a string (quote it)")
            for index, item in enumerate(raw)
            if not isinstance(item, str)
        )
    return found


def resources(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """``resources``: valid, non-negative quantities; GPUs whole and not overcommitted."""
    raw = container.fields.get("resources")
    if raw is None:
        return NONE
    path = container.path  # paths below are built only for errors: most resources have none
    if not isinstance(raw, OBJECT):
        return [invalid(at(path, "resources"), raw, "must be an object with limits and requests")]
    gpu = job.policy.gpu_resource
    found: list[Finding] = []
    gpu_amounts: dict[str, Decimal] = {}
    for section in ("limits", "requests"):
        values = raw.get(section)
        if values is None:
            continue
        if not isinstance(values, OBJECT):
            found.append(
                invalid(
                    at(path, "resources", section), values, "must map resource names to quantities"
                )
            )
            continue
        for name, value in values.items():
            # The usual quantity was seen before, valid and not negative: one dict lookup.
            amount = USABLE_QUANTITIES.get(value) if type(value) in MEMO_TYPES else None
            if amount is None:
                amount = quantity(value)
                if amount is None:
                    found.append(
                        invalid(
                            at(path, "resources", section).key(str(name)),
                            value,
                            _quantity_detail(value),
                        )
                    )
                    continue
                if amount < 0:
                    found.append(
                        invalid(
                            at(path, "resources", section).key(str(name)),
                            value,
                            "must be greater than or equal to 0",
                        )
                    )
                    continue
                remember_usable(value, amount)
            if name == gpu:
                gpu_amounts[section] = amount
    if gpu_amounts and not _whole_and_equal(raw, gpu):
        found.extend(_gpu_quantities(path, gpu, raw, gpu_amounts))
    return found


def _whole_and_equal(raw: Mapping[str, Any], gpu: str) -> bool:
    """Whether the GPU counts are JSON integers, equal where both are given (the usual case)."""
    limits, requests = raw.get("limits"), raw.get("requests")
    limit = limits.get(gpu) if isinstance(limits, OBJECT) else None
    request = requests.get(gpu) if isinstance(requests, OBJECT) else None
    if limit is None:
        return type(request) is int
    if request is None:
        return type(limit) is int
    return type(limit) is int and limit == request and type(request) is int


def _quantity_detail(value: object) -> str:
    if value is None:
        return (
            "must be a quantity such as 1, 500m or 4Gi (YAML reads a key with nothing after "
            "the colon as null)"
        )
    return "must be a quantity such as 1, 500m or 4Gi" + placeholder_hint(value)


def _gpu_quantities(
    container_path: FieldPath, gpu: str, raw: Mapping[str, Any], amounts: Mapping[str, Decimal]
) -> Findings:
    for section, amount in amounts.items():
        if amount != amount.to_integral_value():
            return [
                invalid(
                    at(container_path, "resources", section).key(gpu),
                    raw[section][gpu],
                    "GPUs are whole devices: must be a whole number",
                )
            ]
    limit, request = amounts.get("limits"), amounts.get("requests")
    if limit is not None and request is not None and limit != request:
        return [
            invalid(
                at(container_path, "resources", "requests").key(gpu),
                raw["requests"][gpu],
                f"must equal limits[{gpu}] ({count(limit)}): GPUs cannot be overcommitted",
            )
        ]
    return NONE


def gpu_consistency(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """Every GPU replica requests the same GPUs per pod (torchrun's processes per node)."""
    if container.kind != "containers" or not container.is_gpu_container:
        return NONE
    first = job.first_gpu_replica
    if first is None or first is replica or first.gpus == replica.gpus:
        return NONE
    gpu = job.policy.gpu_resource
    return [
        invalid(
            at(container.path, "resources"),
            count(replica.gpus),
            f"each {replica.key} pod requests {count(replica.gpus)} {gpu} but each "
            f"{first.key} pod requests {count(first.gpus)}; every GPU replica must request "
            "the same count per pod (torchrun starts the same number of processes per node)",
        )
    ]


def volume_mounts(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """Every ``volumeMounts`` entry names a declared volume and a mount path."""
    mounts = container.fields.get("volumeMounts")
    if mounts is None:
        return NONE
    path = container.path
    if not isinstance(mounts, list):
        return [invalid(at(path, "volumeMounts"), mounts, "must be a list of volume mounts")]
    declared = replica.volumes
    # The usual list passes in one loop: objects naming a declared volume and a mount path.
    # Anything else is looked at mount by mount below. A JSON value without ``get`` is not an
    # object.
    try:
        for mount in mounts:
            target, name = mount.get("mountPath"), mount.get("name")
            if (
                target
                and name
                and type(target) is str
                and type(name) is str
                and (declared is None or name in declared)
            ):
                continue
            break
        else:
            return NONE
    except AttributeError:
        pass
    found: list[Finding] = []
    for index, mount in enumerate(mounts):
        if not isinstance(mount, OBJECT):
            found.append(
                invalid(
                    at(path, "volumeMounts", index),
                    mount,
                    "must be an object with name and mountPath",
                )
            )
            continue
        target, name = mount.get("mountPath"), mount.get("name")
        target_ok = isinstance(target, str) and bool(target)
        name_ok = isinstance(name, str) and bool(name)
        if target_ok and name_ok and (declared is None or name in declared):
            continue
        hint = (
            "; this looks like an env entry: move it under env"
            if "value" in mount or "valueFrom" in mount
            else ""
        )
        if not target_ok:
            found.append(
                required(at(path, "volumeMounts", index, "mountPath"), "must be specified" + hint)
            )
        if not name_ok:
            found.append(
                required(at(path, "volumeMounts", index, "name"), "must be specified" + hint)
            )
        elif declared is not None and name not in declared:
            found.append(
                not_found(
                    at(path, "volumeMounts", index, "name"),
                    name,
                    f"no volume named {quote(str(name))} in template.spec.volumes{hint}",
                )
            )
    return found


def node_access(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """What gives a container power over its node, only where the policy allows privilege.

    A ``privileged`` container, a capability that acts on the node (``SYS_ADMIN``, ``ALL``, ...),
    an ``Unconfined`` seccomp or AppArmor profile and a ``ports[k].hostPort`` (the node's traffic
    to that port goes to the pod); a profile the apiserver refuses, under every policy. One rule,
    one pass over ``securityContext`` and ``ports``: it runs on most containers (the defaulting
    adds ``IPC_LOCK`` and the rendezvous port), so the usual lists pass in one plain loop and are
    walked by index only when an entry is refused.
    """
    fields = container.fields
    security = fields.get("securityContext")
    if job.policy.allow_privileged:  # only the apiserver's refusals of the profiles
        if isinstance(security, OBJECT) and not _CONFINEMENT_KEYS.isdisjoint(security):
            return profile_fields(job, security, container.path)
        return NONE
    found: list[Finding] = []
    if isinstance(security, OBJECT):
        if security.get("privileged") is True:
            found.append(
                forbidden(
                    at(container.path, "securityContext", "privileged"),
                    f"privileged containers are not allowed by {job.policy_label}; "
                    "add only the capabilities you need (for example "
                    "IPC_LOCK for RDMA)",
                )
            )
        capabilities = security.get("capabilities")
        added = capabilities.get("add") if isinstance(capabilities, OBJECT) else None
        if isinstance(added, list):
            for entry in added:
                if capability_name(entry) in NODE_CAPABILITIES:
                    found.extend(_node_capabilities(job, container.path, added))
                    break
        if not _CONFINEMENT_KEYS.isdisjoint(security):  # C-level: usually none
            found.extend(profile_fields(job, security, container.path))
    ports = fields.get("ports")
    if isinstance(ports, list):
        for port in ports:
            if isinstance(port, OBJECT) and port.get("hostPort") not in (None, 0):
                found.extend(_host_ports(job, container.path, ports))
                break
    return found or NONE


_CONFINEMENT_KEYS: Final = frozenset(CONFINEMENT_PROFILES)


def _node_capabilities(job: JobFacts, path: FieldPath, added: list[Any]) -> list[Finding]:
    return [
        forbidden(
            at(path, "securityContext", "capabilities", "add", index),
            f"capability {quote(entry)} is not allowed by {job.policy_label} "
            "(allowPrivileged: false): it acts on the node, not the pod; add "
            "only what the training needs (for example IPC_LOCK for RDMA)",
        )
        for index, entry in enumerate(added)
        if capability_name(entry) in NODE_CAPABILITIES
    ]


def _host_ports(job: JobFacts, path: FieldPath, ports: list[Any]) -> list[Finding]:
    return [
        forbidden(
            at(path, "ports", index, "hostPort"),
            f"hostPort {port['hostPort']} is not allowed by {job.policy_label} "
            "(allowPrivileged: false): the node's traffic to that port would go to "
            "this pod; the job's pods reach each other on their own ports, others "
            "through a Service",
        )
        for index, port in enumerate(ports)
        if isinstance(port, OBJECT) and port.get("hostPort") not in (None, 0)
    ]

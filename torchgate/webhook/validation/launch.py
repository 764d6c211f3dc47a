"""Launch rules: the training container's command line and env against what the controller injects.

Why: the controller sets the rendezvous (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``, torchrun's
``PET_*``) from the job, and anything on the command line or in ``env`` that says otherwise
silently wins over it, or fights it. A stale ``--world-size=16`` hangs the gang; ``--backend
nccl`` on a replica without GPUs fails at the first collective; ``NVIDIA_VISIBLE_DEVICES=all`` in
a pod that requests no GPU uses devices behind the scheduler's back. Only the training container
(``pytorch``, else the first) is read for flags and reserved env names: sidecars are not ranks.
"""

from __future__ import annotations

from typing import Final

from torchgate.pytorchjob import contract, gang
from torchgate.pytorchjob.fieldpath import (
    FieldPath,
    FieldWarning,
    duplicate,
    forbidden,
    invalid,
    required,
)
from torchgate.webhook.arguments import (
    STRAY_FLAGS,
    FlagUse,
    expanded_at_runtime,
    gpu_requests,
    parse_nnodes,
)
from torchgate.webhook.validation.facts import (
    NONE,
    OBJECT,
    ZERO,
    ContainerFacts,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    at,
    count,
)

_TORCHRUN_NPROC_KEYWORDS: Final = frozenset({"auto", "cpu", "gpu", "xpu"})
_NO_GPU_VALUES: Final = frozenset({"", "void", "none"})
_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"

# Where each reserved injected variable's value comes from (and what to set instead, if anything).
_INJECTED_ENV: Final = {name: contract.SOURCES[name] for name in contract.RESERVED}
# Names an env entry's checks look at more closely (``env``): every other name, set once to a
# string, passes them all.
_SPECIAL_ENV: Final = frozenset({*_INJECTED_ENV, _VISIBLE_DEVICES})


def _injected_source(job: JobFacts, variable: str) -> str:
    source = _INJECTED_ENV.get(variable, "")
    if variable.endswith("MASTER_ADDR"):
        source = f"{source} ({job.master_pod_name})"
    return source


def backend_flags(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """``--backend nccl`` needs GPUs; ``gloo`` on GPUs is only slow (a warning)."""
    if not container.line.backends:
        return NONE
    gpu = job.policy.gpu_resource
    found: list[Finding] = []
    for use in container.line.backends:
        backend = (use.value or "").lower()
        if backend == "nccl" and replica.gpus == ZERO:
            found.append(
                invalid(
                    at(container.path, use.field),
                    use.written,
                    f"nccl needs GPUs but this replica requests no {gpu}; use gloo for "
                    "CPU-only replicas or request GPUs",
                )
            )
        elif backend == "gloo" and replica.gpus > ZERO:
            found.append(
                FieldWarning(
                    at(container.path, use.field),
                    f"{use.written} on a replica that requests {count(replica.gpus)} {gpu} per "
                    "pod: gloo is much slower than nccl on GPUs",
                )
            )
    return found


def gpu_flags(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """Framework flags that ask for GPUs (``--gpus 2``, ``--accelerator gpu``) need GPUs."""
    if replica.gpus > ZERO or not container.line.gpu_flags:
        return NONE
    gpu = job.policy.gpu_resource
    return [
        invalid(
            at(container.path, use.field),
            use.written,
            f"asks the framework for GPUs but this replica requests no {gpu}; request {gpu} "
            "in resources.limits or ask for CPU",
        )
        for use in gpu_requests(container.line)
    ]


def gpu_peers(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """A replica without GPUs beside GPU replicas is a rank without its peers' device.

    Typically a Master whose ``resources`` were forgotten. With nccl (stated, or no backend
    stated: torch picks nccl on GPUs) it cannot join the process group, so it is refused at its
    resources; with gloo stated it runs, on CPU and at the slowest rank's pace, so it is a
    warning. A replica whose own command line says nccl is already refused at that argument.
    """
    first = job.first_gpu_replica
    if first is None or replica.gpus > ZERO or not container.is_training:
        return NONE
    own = _stated_backends(container)
    if "nccl" in own:
        return NONE
    gpu = job.policy.gpu_resource
    where = at(container.path, "resources")
    peers = f"each {first.key} pod requests {count(first.gpus)} {gpu}"
    backends = own or {b for r in job.known_replicas for b in _replica_backends(r)}
    if "gloo" in backends and "nccl" not in backends:
        return [
            FieldWarning(
                where,
                f"this {replica.key} pod requests no {gpu} while {peers}: with gloo it joins "
                "the process group on CPU, and every collective waits for it",
            )
        ]
    stated = "nccl" if "nccl" in backends else "no backend is stated, so torch picks nccl"
    return [
        invalid(
            where,
            "0",
            f"this {replica.key} pod requests no {gpu} while {peers}; it is a rank of the same "
            f"process group without their device ({stated}): request {count(first.gpus)} "
            f"{gpu} here too, or state --backend gloo",
        )
    ]


def _replica_backends(replica: ReplicaFacts) -> set[str]:
    return {b for c in replica.containers if c.is_training for b in _stated_backends(c)}


def _stated_backends(container: ContainerFacts) -> set[str]:
    return {(use.value or "").lower() for use in container.line.backends if use.value}


def stray_flags(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """No flag that overrides a variable the controller injects (``--world-size``, ``--rank``)."""
    if not container.line.stray:
        return NONE
    found: list[Finding] = []
    for use in container.line.stray:
        variable = STRAY_FLAGS[use.flag]
        found.append(
            forbidden(
                at(container.path, use.field),
                f"{variable} is injected by the torchgate controller "
                f"{_injected_source(job, variable)}; remove {use.written}",
            )
        )
    return found


def nnodes_flags(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """The launcher's ``--nnodes`` agrees with the PET_NNODES the controller sets (else refused)."""
    if not container.line.nnodes:
        return NONE
    found: list[Finding] = []
    for use in container.line.nnodes:
        if use.value is None or expanded_at_runtime(use):
            continue
        where = at(container.path, use.field)
        parsed = parse_nnodes(use.value)
        if parsed is None:
            found.append(invalid(where, use.written, _unparseable_flag(use, "N or MIN:MAX")))
            continue
        expected = job.expected_nnodes
        if expected is None:
            continue
        shown = gang.format_nnodes(expected, elastic=job.elastic is not None)
        source = "from the replica counts"
        if job.elastic is not None:
            source = "from spec.elasticPolicy minReplicas:maxReplicas"
            if job.elastic_workers is not None and expected[0] > job.elastic_workers[0]:
                source += " (Workers) plus the Master"
        if parsed == expected:
            found.append(
                FieldWarning(
                    where,
                    f"{use.written} repeats PET_NNODES={shown}, which the torchgate controller "
                    f"sets {source}; it can be removed",
                )
            )
        else:
            found.append(
                invalid(
                    where,
                    use.written,
                    f"contradicts the job: the torchgate controller sets PET_NNODES={shown} "
                    f"{source} and the flag would override it; remove {use.written}",
                )
            )
    return found


def nproc_flags(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """``--nproc-per-node`` agrees with the GPUs per pod and ``spec.nprocPerNode``."""
    if not container.line.nproc_per_node:
        return NONE
    found: list[Finding] = []
    for use in container.line.nproc_per_node:
        finding = _nproc_flag(job, replica, at(container.path, use.field), use)
        if finding is not None:
            found.append(finding)
    return found


def _nproc_flag(
    job: JobFacts, replica: ReplicaFacts, where: FieldPath, use: FlagUse
) -> Finding | None:
    value = use.value
    if value is None or expanded_at_runtime(use):
        return None
    processes = gang.integer_nproc(value)
    if processes is None:
        if value in _TORCHRUN_NPROC_KEYWORDS:
            return None
        return invalid(
            where, use.written, _unparseable_flag(use, "auto, cpu, gpu, xpu or an integer")
        )
    gpu = job.policy.gpu_resource
    if replica.gpus > ZERO and processes != replica.gpus:
        return invalid(
            where,
            use.written,
            f"starts {processes} processes per pod but each pod of this replica "
            f"requests {count(replica.gpus)} {gpu} (one process per GPU)",
        )
    if job.nproc_per_node is not None and processes != job.nproc_per_node:
        return invalid(
            where,
            use.written,
            f"differs from spec.nprocPerNode ({job.nproc_per_node}), which the "
            "torchgate controller passes to torchrun as PET_NPROC_PER_NODE",
        )
    if replica.gpus > ZERO:
        return FieldWarning(
            where,
            f"{use.written} repeats the {count(replica.gpus)} {gpu} each pod requests, "
            "which torchrun already starts one process per; it can be removed",
        )
    if job.nproc_per_node is not None:
        return FieldWarning(
            where,
            f"{use.written} repeats spec.nprocPerNode, which the torchgate controller passes "
            "to torchrun as PET_NPROC_PER_NODE; it can be removed",
        )
    return None


def _unparseable_flag(use: FlagUse, expected: str) -> str:
    detail = f"torchrun expects {expected}"
    if "$" in (use.value or ""):
        detail += (
            f"; {use.value} is passed literally: Kubernetes expands only $(VAR) references "
            "to the container's env in command and args, and no shell runs here"
        )
    return detail


def env(job: JobFacts, replica: ReplicaFacts, container: ContainerFacts) -> Findings:
    """``env``: named, unique, string values; no reserved name in the training container."""
    entries = container.fields.get("env")
    if entries is None:
        return NONE
    if not isinstance(entries, list):
        where = at(container.path, "env")
        return [invalid(where, entries, "must be a list of {name, value} entries")]
    # The usual list passes in one loop: objects with a string name and a string (or absent)
    # value, then the names as a set: each seen once (as many as entries), none reserved or
    # NVIDIA_VISIBLE_DEVICES. Anything else is looked at entry by entry below. A JSON value
    # without ``get`` is not an object.
    named: set[str] = set()
    try:
        for entry in entries:
            name = entry.get("name")
            if type(name) is str and name and type(entry.get("value", "")) is str:
                named.add(name)
                continue
            break
        else:
            if len(named) == len(entries) and named.isdisjoint(_SPECIAL_ENV):
                return NONE
    except AttributeError:
        pass
    path = container.path  # paths below are built only for errors: most entries have none
    training = container.is_training
    found: list[Finding] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, OBJECT):
            found.append(invalid(at(path, "env", index), entry, "must be an object with a name"))
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            found.append(required(at(path, "env", index, "name"), "must be specified"))
            continue
        if name in seen:
            found.append(
                duplicate(at(path, "env", index, "name"), name, f"already set by env[{seen[name]}]")
            )
        else:
            seen[name] = index
        value = entry.get("value")
        if value is not None and not isinstance(value, str):
            found.append(
                invalid(at(path, "env", index, "value"), value, "must be a string (quote it)")
            )
        if training and name in _INJECTED_ENV:
            found.append(
                forbidden(
                    at(path, "env", index, "name"),
                    f"{name} is injected by the torchgate controller "
                    f"{_injected_source(job, name)}; remove it from env",
                )
            )
        if name == _VISIBLE_DEVICES and replica.gpus == ZERO:
            found.extend(_visible_devices(job, at(path, "env", index), value))
    return found


def _visible_devices(job: JobFacts, path: FieldPath, value: object) -> Findings:
    if not isinstance(value, str) or value.strip().lower() in _NO_GPU_VALUES:
        return NONE
    gpu = job.policy.gpu_resource
    exposed = "every GPU" if value.strip().lower() == "all" else f"GPUs {value}"
    return [
        forbidden(
            path,
            f"{_VISIBLE_DEVICES}={value} in a pod that requests no {gpu} exposes {exposed} of "
            f"the node behind the scheduler's back; request {gpu} in resources.limits instead",
        )
    ]

"""The env contract between torchgate and training images (rank, world size, rendezvous).

Images written for the Kubeflow training-operator read ``MASTER_ADDR``/``MASTER_PORT``/
``WORLD_SIZE``/``RANK`` (plain ``python train.py`` with ``init_process_group("env://")``,
Lightning's ``KubeflowEnvironment``) or rely on torchrun reading ``PET_<FLAG>`` as the default of
each flag, so ``torchrun train.py`` needs no arguments. We keep those names and values where they
are sound and fix the known defects:

- ``RANK`` and ``PET_NODE_RANK`` are the pod (node) rank: the Master is 0 and Worker ``i`` is
  ``i + 1``. Worker-only jobs get the full contract too, with worker 0 as the rendezvous master
  (the training-operator sets nothing there).
- ``WORLD_SIZE`` counts processes: total replicas times ``nprocPerNode`` when that is an integer,
  else one process per pod (as the training-operator does). This arithmetic, ``PET_NNODES`` and
  the elastic bounds are ``pytorchjob.gang``'s, which the webhook's checks use too.
- ``PET_NNODES`` counts every pod as a torchrun node, the Master too: an elastic job with a
  Master gets ``1 + minReplicas:1 + maxReplicas`` (the bounds count Workers,
  ``pytorchjob.gang``), where the training-operator passes the bare bounds, one node short.
- ``PET_NPROC_PER_NODE`` defaults to the pod's GPU count, else ``"1"``: torchrun's ``auto`` on a CPU
  pod starts one process per host core, not per pod CPU.
- ``PET_STANDALONE`` is ``"1"``, never ``""`` (torchrun parses it with ``bool(int(...))``).
- Our variables replace same-named user entries instead of being appended next to them (with two
  ``RANK`` entries, which one wins is up to the kubelet), and are injected into the ``pytorch``
  container only, never into sidecars.
- Each gang attempt gets its own rendezvous port and elastic run id (``contract.rendezvous_port``,
  ``contract.rendezvous_id``), so a rank left over from an earlier attempt cannot join it; the
  first attempt gets exactly what the job declares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from torchgate.pytorchjob import contract, gang, names
from torchgate.pytorchjob.spec import (
    JobSpec,
    as_int,
    containers_of,
    pod_spec_of,
    pytorch_container_index,
)

EnvVar = dict[str, str]

DEFAULT_RDZV_BACKEND: Final = "c10d"


def rendezvous_replica(job: JobSpec) -> tuple[names.ReplicaType, int]:
    """The replica every other rank connects to: Master 0, or Worker 0 in worker-only jobs."""
    master = job.replica(names.MASTER)
    return names.master_replica(master is not None and master.replicas > 0)


def rendezvous_host(job: JobSpec) -> str:
    """Name of the rendezvous master pod (and of its headless Service)."""
    return names.replica_name(job.name, *rendezvous_replica(job))


def named_port(template: object, port_name: str = names.PORT_NAME) -> int | None:
    """``containerPort`` of the port ``port_name`` of the template's ``pytorch`` container."""
    for port in container_ports(template):
        if port.get("name") == port_name:
            return valid_port(port.get("containerPort"))
    return None


def container_ports(template: object) -> list[Mapping[str, Any]]:
    """The well-formed ``ports`` entries of the template's ``pytorch`` container."""
    pod_spec = pod_spec_of(template)
    index = pytorch_container_index(pod_spec)
    if index is None:
        return []
    ports = pod_spec["containers"][index].get("ports")
    if not isinstance(ports, list):
        return []
    return [port for port in ports if isinstance(port, Mapping)]


def other_ports(template: object) -> frozenset[int]:
    """Ports the pod declares besides ``pytorchjob-port``: no attempt's rendezvous may take them.

    Every container counts (init containers too: a sidecar runs beside the training), since the
    containers of a pod share one network namespace.
    """
    pod_spec = pod_spec_of(template)
    taken: set[int] = set()
    for key in ("initContainers", "containers"):
        for container in containers_of(pod_spec, key):
            ports = container.get("ports")
            for port in ports if isinstance(ports, list) else []:
                if isinstance(port, Mapping) and port.get("name") != names.PORT_NAME:
                    number = valid_port(port.get("containerPort"))
                    if number is not None:
                        taken.add(number)
    return frozenset(taken)


def attempt_port(template: object, declared: int | None, attempt: int) -> int:
    """The port gang attempt ``attempt`` uses in place of ``declared`` (default 23456)."""
    port = declared if declared is not None else names.DEFAULT_PORT
    return contract.rendezvous_port(port, attempt, taken=other_ports(template))


def valid_port(value: object) -> int | None:
    """A TCP/UDP port number from JSON, or ``None`` when it is not one."""
    number = as_int(value)
    return number if number is not None and 0 < number < 65536 else None


def master_port(job: JobSpec, attempt: int = 1) -> int:
    """The rendezvous master's port in gang attempt ``attempt``.

    The ``pytorchjob-port`` of its replica (default 23456) in the first attempt, then the
    attempt's own (``contract.rendezvous_port``).
    """
    replica = job.replica(rendezvous_replica(job)[0])
    template = replica.template if replica is not None else None
    return attempt_port(template, named_port(template), attempt)


def node_rank(job: JobSpec, replica_type: str, index: int) -> int:
    """Pod rank: replicas of the types before this one (Master before Worker), plus the index."""
    offset = 0
    for spec in job.replica_specs:
        if spec.replica_type == replica_type:
            break
        offset += spec.replicas
    return offset + index


def nproc_per_node(job: JobSpec, gpus_per_pod: int) -> str:
    """``PET_NPROC_PER_NODE``: as given, else the deprecated elastic field, else GPUs or 1."""
    if job.nproc_per_node is not None:
        return job.nproc_per_node
    if job.elastic is not None and job.elastic.n_proc_per_node is not None:
        return str(job.elastic.n_proc_per_node)
    return str(gpus_per_pod) if gpus_per_pod > 0 else "1"


def rdzv_endpoint(job: JobSpec, attempt: int = 1) -> str:
    """``<rdzvHost or <job>-worker-0>:<rdzvPort or Worker's pytorchjob-port or 23456>``.

    When the endpoint is the job's own worker 0 (no ``rdzvHost``), its port is the attempt's
    (``contract.rendezvous_port``); an endpoint elsewhere keeps its port, and the attempt's run
    id (``PET_RDZV_ID``) fences it instead.
    """
    elastic = job.elastic
    host = elastic.rdzv_host if elastic is not None else None
    port = elastic.rdzv_port if elastic is not None else None
    workers = job.replica(names.WORKER)
    template = workers.template if workers is not None else None
    if port is None:
        port = named_port(template)
    if host is not None:
        return f"{host}:{port if port is not None else names.DEFAULT_PORT}"
    host = names.replica_name(job.name, names.WORKER, 0)
    return f"{host}:{attempt_port(template, port, attempt)}"


def rank_env(
    job: JobSpec, replica_type: str, index: int, *, gpus_per_pod: int, attempt: int = 1
) -> list[EnvVar]:
    """The variables torchgate injects into the ``pytorch`` container of one replica pod.

    Args:
        job: The parsed job.
        replica_type: ``Master`` or ``Worker``.
        index: The replica index within its type.
        gpus_per_pod: GPUs the ``pytorch`` container requests (the ``PET_NPROC_PER_NODE`` default).
        attempt: The gang attempt the pod belongs to (its rendezvous port and run id).

    Returns:
        ``[{"name": ..., "value": ...}]`` in a fixed order.
    """
    rank = str(node_rank(job, replica_type, index))
    total = job.total_replicas
    master_addr = rendezvous_host(job)
    port = str(master_port(job, attempt))
    env: list[tuple[str, str]] = [
        (contract.PYTHONUNBUFFERED, "1"),
        (contract.MASTER_ADDR, master_addr),
        (contract.PET_MASTER_ADDR, master_addr),
        (contract.MASTER_PORT, port),
        (contract.PET_MASTER_PORT, port),
        (contract.WORLD_SIZE, str(gang.world_size(total=total, nproc_per_node=job.nproc_per_node))),
        (contract.RANK, rank),
    ]
    if job.elastic is None:
        env.append((contract.PET_NODE_RANK, rank))
    bounds = job.elastic_bounds
    nnodes = gang.format_nnodes(
        gang.nnodes(total=total, elastic=bounds, masters=job.count(names.MASTER)),
        elastic=bounds is not None,
    )
    env.append((contract.PET_NNODES, nnodes))
    env.append((contract.PET_NPROC_PER_NODE, nproc_per_node(job, gpus_per_pod)))
    if job.elastic is not None:
        env.extend(_elastic_env(job, attempt))
    return [{"name": name, "value": value} for name, value in env]


def _elastic_env(job: JobSpec, attempt: int) -> list[tuple[str, str]]:
    elastic = job.elastic
    assert elastic is not None
    env = [
        (contract.PET_RDZV_BACKEND, elastic.rdzv_backend or DEFAULT_RDZV_BACKEND),
        (contract.PET_RDZV_ENDPOINT, rdzv_endpoint(job, attempt)),
    ]
    rdzv_id = elastic.rdzv_id or job.uid or job.name
    if rdzv_id:
        env.append((contract.PET_RDZV_ID, contract.rendezvous_id(rdzv_id, attempt)))
    if elastic.rdzv_conf:
        env.append((contract.PET_RDZV_CONF, ",".join(f"{k}={v}" for k, v in elastic.rdzv_conf)))
    if elastic.max_restarts is not None:
        env.append((contract.PET_MAX_RESTARTS, str(elastic.max_restarts)))
    if elastic.standalone:
        env.append((contract.PET_STANDALONE, "1"))
    return env


def merge_env(user_env: object, ours: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The container's new ``env``: ours replace same-named user entries, the rest are kept.

    Except defaults (``contract.DEFAULTS``): a user's own entry of that name is kept as it is.
    A user entry whose name we set is replaced by ours at the position of its first occurrence
    (later duplicates are dropped); the user's other entries keep their order. Our variables the
    user did not set go *before* the user's entries, because Kubernetes expands ``$(VAR)`` in an
    env value only for variables defined earlier in the list, so ``ADDR=$(MASTER_ADDR):$(PORT)``
    written by the user keeps working.
    """
    user = user_env if isinstance(user_env, list) else []
    user_names = {
        e.get("name") for e in user if isinstance(e, Mapping) and isinstance(e.get("name"), str)
    }
    # A default (contract.DEFAULTS, e.g. PYTHONUNBUFFERED) the user set is theirs to keep.
    ours = [e for e in ours if not (e["name"] in contract.DEFAULTS and e["name"] in user_names)]
    by_name = {str(entry["name"]): entry for entry in ours}
    replaced: set[str] = set()
    kept: list[Any] = []
    for entry in user:
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name in by_name:
            if name not in replaced:
                kept.append(dict(by_name[name]))
                replaced.add(name)
            continue
        kept.append(entry)
    added = [dict(entry) for entry in ours if str(entry["name"]) not in replaced]
    return added + kept

"""Replica Pods and rendezvous Services, built from a PyTorchJob's replica templates.

Pods keep the training-operator's surface (names ``<job>-<master|worker>-<i>``, the
``training.kubeflow.org/*`` labels, a controlling ownerReference so deleting the job
garbage-collects them, the env contract of ``envvars``) and differ where torchgate's gang
semantics need it:

- ``restartPolicy: Never`` always. A distributed job cannot take one restarted rank back into a
  running collective, so restarts happen at gang level (the planner deletes every pod and the
  admitter places the gang again); a kubelet restarting one container in place would only leave
  the other ranks hanging until their NCCL timeout.
- A pod placed by the admitter carries a *required* node affinity to its planned node (AND-ed into
  every existing ``nodeSelectorTerm``, since terms are OR-ed and the requirements of one term
  AND-ed), plus the ``torchgate.io/planned-node`` annotation, so capacity reserved for the gang
  is what the gang gets while kube-scheduler still checks everything else (volumes, ports, ...).
  The pin is ``matchFields`` on ``metadata.name``, as the DaemonSet controller pins its pods: it
  names the node the admitter planned on (the ``kubernetes.io/hostname`` label need not equal the
  node's name), and kube-scheduler then evaluates that one node instead of the whole pool.
- A template's ``nodeName`` is dropped: torchgate places the pods (the webhook refuses it under
  every policy; a job that got past it must not skip kube-scheduler, the quarantine taint and
  the gang's planned nodes). Pinned hosts are the ``torchgate.io/hosts`` annotation.
- With a progress deadline (``pytorchjob.progress``), the rendezvous replica's ``pytorch``
  container gets ``TORCHGATE_PROGRESS_FILE`` and an exec liveness probe on that file's age, so
  the kubelet ends a hung Master and the controller restarts the gang as a hang.
- ``torchgate.io/gang-attempt`` records which gang attempt created the pod, so a pod left over
  from an earlier attempt is recognisable and never mistaken for a member of the current gang.
  The ``pytorchjob-port`` it declares is the attempt's rendezvous port (``envvars``'s
  ``MASTER_PORT``), so a NetworkPolicy that names the port follows it from attempt to attempt.

Services: the training-operator creates a headless Service per pod; nothing resolves workers by
name, so torchgate creates one only for the rendezvous master (what ``MASTER_ADDR`` names), plus
``<job>-worker-0`` for elastic jobs that have a Master and no ``rdzvHost``, because the torchrun
rendezvous endpoint defaults to ``<job>-worker-0`` (without a Master, worker 0 *is* the rendezvous
master and has its Service already). They are headless with ``publishNotReadyAddresses`` so the
name resolves as soon as the pod has an IP, before any readiness probe passes: workers start
connecting to the master while it is still starting up.

Templates are never mutated: the builders copy each dict they change and reuse the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from torchgate.controller.job.envvars import (
    attempt_port,
    container_ports,
    merge_env,
    rank_env,
    rendezvous_replica,
    valid_port,
)
from torchgate.pytorchjob import names, progress
from torchgate.pytorchjob.affinity import MATCH_FIELDS, require
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources, container_gpus
from torchgate.pytorchjob.spec import JobSpec, pod_spec_of, pytorch_container_index

NODE_NAME_FIELD: Final = "metadata.name"  # the one node field a nodeSelectorTerm can match
POD_RESTART_POLICY: Final = "Never"


def owner_reference(job_raw: Mapping[str, Any], job: JobSpec) -> dict[str, Any]:
    """The controlling ownerReference that makes the job's deletion remove its children."""
    api_version = job_raw.get("apiVersion")
    if not isinstance(api_version, str) or not api_version.startswith(names.GROUP + "/"):
        api_version = names.API_VERSION
    return {
        "apiVersion": api_version,
        "kind": names.KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def selector_labels(job: JobSpec, replica_type: str, index: int) -> dict[str, str]:
    """Labels that select exactly one replica pod."""
    return {
        **names.job_selector(job.name),
        names.LABEL_REPLICA_TYPE: replica_type.lower(),
        names.LABEL_REPLICA_INDEX: str(index),
    }


def replica_labels(job: JobSpec, replica_type: str, index: int) -> dict[str, str]:
    """Our labels for a replica pod or Service: the selector plus ``job-role`` on the master."""
    labels = selector_labels(job, replica_type, index)
    if (replica_type, index) == rendezvous_replica(job):
        labels[names.LABEL_JOB_ROLE] = "master"
    return labels


def _template_metadata(template: Mapping[str, Any], key: str) -> dict[str, Any]:
    metadata = template.get("metadata")
    value = metadata.get(key) if isinstance(metadata, Mapping) else None
    return dict(value) if isinstance(value, Mapping) else {}


def build_pod(
    job_raw: Mapping[str, Any],
    job: JobSpec,
    replica_type: str,
    index: int,
    *,
    node: str | None,
    attempt: int,
    gpus: GpuSources | str,
    claims: ClaimLookup = NO_CLAIMS,
    progress_deadline: int | None = None,
) -> dict[str, Any]:
    """The Pod manifest of one replica.

    Args:
        job_raw: The job as read from the API (its ``apiVersion`` goes into the ownerReference).
        job: The parsed job.
        replica_type: ``Master`` or ``Worker``.
        index: The replica index within its type.
        node: The node the admitter reserved for this pod, or ``None`` for no pinning.
        attempt: The gang attempt this pod belongs to.
        gpus: What counts as GPUs (``devices``; a name: that extended resource only): the
            training container's GPUs are the default ``PET_NPROC_PER_NODE``.
        claims: The ResourceClaims and templates the controller sees in the job's namespace.
        progress_deadline: The job's progress deadline in seconds (``pytorchjob.progress``): the
            rendezvous replica's ``pytorch`` container gets the progress file and its probe.

    Raises:
        ValueError: The job has no ``replica_type`` replica (a caller bug, not bad input).
    """
    replica = job.replica(replica_type)
    if replica is None:
        raise ValueError(f"job {job.name!r} has no {replica_type} replica")
    template = replica.template
    labels = _template_metadata(template, "labels")
    labels.pop(names.LABEL_JOB_ROLE, None)  # ours: only the rendezvous master carries it
    labels.update(replica_labels(job, replica_type, index))
    annotations = _template_metadata(template, "annotations")
    annotations.update(names.own_pod_annotations(attempt=attempt, node=node))
    spec = dict(pod_spec_of(template))
    spec["restartPolicy"] = POD_RESTART_POLICY
    spec.pop("nodeName", None)
    sources = GpuSources(gpus) if isinstance(gpus, str) else gpus
    _inject_env(spec, job, replica_type, index, sources, claims, attempt)
    if progress_deadline is not None and (replica_type, index) == rendezvous_replica(job):
        _watch_progress(spec, progress_deadline)
    if node is not None:
        spec["affinity"] = pin_to_node(spec.get("affinity"), node)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.replica_name(job.name, replica_type, index),
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job_raw, job)],
        },
        "spec": spec,
    }


def _inject_env(
    spec: dict[str, Any],
    job: JobSpec,
    replica_type: str,
    index: int,
    gpus: GpuSources,
    claims: ClaimLookup,
    attempt: int,
) -> None:
    position = pytorch_container_index(spec)
    if position is None:
        return
    containers = list(spec["containers"])
    container = dict(containers[position])
    count = container_gpus(container, spec, gpus, claims) or 0
    ours = rank_env(job, replica_type, index, gpus_per_pod=int(count), attempt=attempt)
    container["env"] = merge_env(container.get("env"), ours)
    if isinstance(container.get("ports"), list):
        container["ports"] = _attempt_ports(container["ports"], spec, attempt)
    containers[position] = container
    spec["containers"] = containers


def _watch_progress(spec: dict[str, Any], deadline: int) -> None:
    """Give the training container the progress file's path and the probe that checks it.

    A liveness probe of the user's own is kept (no hang detection for that container), and so
    is a path the user gave the variable (the probe reads the variable).
    """
    position = pytorch_container_index(spec)
    if position is None:
        return
    containers = list(spec["containers"])
    container = dict(containers[position])
    if container.get("livenessProbe") is not None:
        return
    given = container.get("env")
    env: list[Any] = given if isinstance(given, list) else []
    if not any(isinstance(e, Mapping) and e.get("name") == progress.PROGRESS_FILE_ENV for e in env):
        path = {"name": progress.PROGRESS_FILE_ENV, "value": progress.PROGRESS_FILE}
        container["env"] = [path, *env]
    container["livenessProbe"] = progress.liveness_probe(deadline)
    containers[position] = container
    spec["containers"] = containers


def _attempt_ports(ports: list[Any], spec: Mapping[str, Any], attempt: int) -> list[Any]:
    """The container's ``ports`` with ``pytorchjob-port`` moved to the attempt's port.

    A ``hostPort`` equal to the declared port (``hostNetwork``) moves with it.
    """
    moved: list[Any] = []
    for port in ports:
        declared = valid_port(port.get("containerPort")) if isinstance(port, Mapping) else None
        if not isinstance(port, Mapping) or port.get("name") != names.PORT_NAME or not declared:
            moved.append(port)
            continue
        number = attempt_port({"spec": spec}, declared, attempt)
        entry = {**port, "containerPort": number}
        if valid_port(port.get("hostPort")) == declared:
            entry["hostPort"] = number
        moved.append(entry)
    return moved


def pin_to_node(affinity: object, node: str) -> dict[str, Any]:
    """A copy of ``affinity`` whose required node affinity also demands the node named ``node``.

    The requirement is ``matchFields``: ``metadata.name In [node]``, merged by
    ``pytorchjob.affinity.require`` (the webhook pins hosts with the same function): AND-ed into
    every ``nodeSelectorTerm``, a term with no requirements stays matching no node, and without
    required terms one term is created.
    """
    pin = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    return require(affinity, pin, MATCH_FIELDS)


def service_replicas(job: JobSpec) -> list[tuple[names.ReplicaType, int]]:
    """The replicas that get a headless Service (see the module docstring for why only these)."""
    master = rendezvous_replica(job)
    wanted = [master]
    elastic = job.elastic
    workers = job.replica(names.WORKER)
    if (
        elastic is not None
        and elastic.rdzv_host is None
        and master[0] == names.MASTER
        and workers is not None
        and workers.replicas > 0
    ):
        wanted.append((names.WORKER, 0))
    return wanted


def service_names(job: JobSpec) -> dict[str, tuple[names.ReplicaType, int]]:
    """Service name -> the replica it resolves to (``service_replicas``), rendezvous first."""
    return {
        names.replica_name(job.name, replica_type, index): (replica_type, index)
        for replica_type, index in service_replicas(job)
    }


def service_ports(template: object) -> list[dict[str, Any]]:
    """Ports for the named ports of the ``pytorch`` container (``pytorchjob-port`` at least)."""
    ports: list[dict[str, Any]] = []
    seen_names: set[str] = set()
    seen_numbers: set[tuple[int, str]] = set()
    for port in container_ports(template):
        name = port.get("name")
        number = valid_port(port.get("containerPort"))
        protocol = port.get("protocol")
        protocol = protocol if isinstance(protocol, str) and protocol else "TCP"
        if not isinstance(name, str) or not name or number is None:
            continue
        if name in seen_names or (number, protocol) in seen_numbers:
            continue
        seen_names.add(name)
        seen_numbers.add((number, protocol))
        ports.append({"name": name, "port": number, "targetPort": number, "protocol": protocol})
    if names.PORT_NAME not in seen_names and (names.DEFAULT_PORT, "TCP") not in seen_numbers:
        ports.append(
            {
                "name": names.PORT_NAME,
                "port": names.DEFAULT_PORT,
                "targetPort": names.DEFAULT_PORT,
                "protocol": "TCP",
            }
        )
    return ports


def build_service(
    job_raw: Mapping[str, Any], job: JobSpec, replica_type: str, index: int
) -> dict[str, Any]:
    """The headless Service named like the replica pod, selecting exactly that pod.

    Raises:
        ValueError: The job has no ``replica_type`` replica (a caller bug, not bad input).
    """
    replica = job.replica(replica_type)
    if replica is None:
        raise ValueError(f"job {job.name!r} has no {replica_type} replica")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.replica_name(job.name, replica_type, index),
            "namespace": job.namespace,
            "labels": replica_labels(job, replica_type, index),
            "ownerReferences": [owner_reference(job_raw, job)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(job, replica_type, index),
            "ports": service_ports(replica.template),
        },
    }

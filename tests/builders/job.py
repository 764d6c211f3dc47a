"""PyTorchJobs: the raw object ``kubectl`` sends, its containers, and the parsed ``JobSpec``.

``job("demo").master(gpus=1).workers(3, gpus=1).build()`` returns a plain dict shaped exactly like
what ``kubectl`` sends, so tests exercise the same raw objects the webhook and controller see.
Every builder method returns ``self``; ``build()`` returns a fresh deep copy each call. The
controller reads jobs the apiserver stored, which carry a ``metadata.uid`` (``with_uid``), and its
pure core takes them parsed (``parsed_job``, through the product's own parser).
"""

from __future__ import annotations

import copy
from typing import Any, Final, Self

from torchgate.pytorchjob.spec import JobSpec, parse_job

UID: Final = "0b0e1d2c-uid"


def container(
    *,
    name: str = "pytorch",
    image: str = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
    gpus: int | str | None = None,
    gpu_resource: str = "nvidia.com/gpu",
    args: list[str] | None = None,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A container dict; ``gpus`` goes into ``limits`` as users usually write it."""
    out: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        out["command"] = list(command)
    if args is not None:
        out["args"] = list(args)
    if env:
        out["env"] = [{"name": k, "value": v} for k, v in env.items()]
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    if gpus is not None:
        resources.setdefault("limits", {})[gpu_resource] = gpus
    if resources:
        out["resources"] = resources
    return out


class JobBuilder:
    """Builds a ``kubeflow.org/v1`` PyTorchJob."""

    def __init__(self, name: str, namespace: str | None = "default") -> None:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        self._job: dict[str, Any] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": metadata,
            "spec": {"pytorchReplicaSpecs": {}},
        }

    def replica(
        self,
        key: str,
        replicas: int | None = 1,
        *,
        restart_policy: str | None = "OnFailure",
        containers: list[dict[str, Any]] | None = None,
        pod_spec: dict[str, Any] | None = None,
        **container_args: Any,
    ) -> Self:
        """Add a replica with one ``pytorch`` container (or the given containers)."""
        entry: dict[str, Any] = {}
        if replicas is not None:
            entry["replicas"] = replicas
        if restart_policy is not None:
            entry["restartPolicy"] = restart_policy
        pod = {**(pod_spec or {}), "containers": containers or [container(**container_args)]}
        entry["template"] = {"spec": pod}
        self._job["spec"]["pytorchReplicaSpecs"][key] = entry
        return self

    def master(self, *, key: str = "Master", replicas: int | None = 1, **replica: Any) -> Self:
        """Add a Master replica (``replica``'s options)."""
        return self.replica(key, replicas, **replica)

    def workers(self, replicas: int | None = 1, *, key: str = "Worker", **replica: Any) -> Self:
        """Add a Worker replica (``replica``'s options)."""
        return self.replica(key, replicas, **replica)

    def nproc(self, value: str) -> Self:
        """Set ``spec.nprocPerNode``."""
        self._job["spec"]["nprocPerNode"] = value
        return self

    def elastic(self, **fields: Any) -> Self:
        """Set ``spec.elasticPolicy`` (fields as in the API, e.g. ``minReplicas=1``)."""
        self._job["spec"]["elasticPolicy"] = dict(fields)
        return self

    def run_policy(self, **fields: Any) -> Self:
        """Merge fields into ``spec.runPolicy`` (e.g. ``cleanPodPolicy="All"``)."""
        self._job["spec"].setdefault("runPolicy", {}).update(fields)
        return self

    def scheduling(self, **fields: Any) -> Self:
        """Merge fields into ``spec.runPolicy.schedulingPolicy``."""
        policy = self._job["spec"].setdefault("runPolicy", {})
        policy.setdefault("schedulingPolicy", {}).update(fields)
        return self

    def annotate(self, key: str, value: str) -> Self:
        """Add a job annotation."""
        self._job["metadata"].setdefault("annotations", {})[key] = value
        return self

    def hosts(self, *hosts: str) -> Self:
        """Pin the job to hosts with the ``torchgate.io/hosts`` annotation."""
        return self.annotate("torchgate.io/hosts", ",".join(hosts))

    def edit(self, fn: Any) -> Self:
        """Apply ``fn(job_dict)`` for anything the other methods do not cover."""
        fn(self._job)
        return self

    def build(self) -> dict[str, Any]:
        """A deep copy of the job built so far."""
        return copy.deepcopy(self._job)


def job(name: str = "demo", namespace: str | None = "default") -> JobBuilder:
    """Start a PyTorchJob builder."""
    return JobBuilder(name, namespace)


def gpu_job(
    name: str = "demo", *, namespace: str | None = "default", workers: int = 1, gpus: int = 1
) -> JobBuilder:
    """Master + ``workers`` Workers (no Worker replica for 0), ``gpus`` GPUs each, nccl."""
    built = job(name, namespace).master(gpus=gpus, args=["--backend", "nccl"])
    if workers:
        built.workers(workers, gpus=gpus, args=["--backend", "nccl"])
    return built


def cpu_job(name: str = "demo", workers: int = 2) -> JobBuilder:
    """Master + ``workers`` Workers without GPUs: the smallest valid distributed job."""
    return job(name).master().workers(workers)


def with_uid(raw: dict[str, Any], uid: str = UID) -> dict[str, Any]:
    """A copy of the job with a ``metadata.uid``, as the apiserver stores it."""
    raw = copy.deepcopy(raw)
    raw["metadata"]["uid"] = uid
    return raw


def parsed_job(raw: dict[str, Any]) -> JobSpec:
    """The parsed job (``parse_job``, which must accept it)."""
    spec, errors = parse_job(raw)
    assert spec is not None, errors
    assert not errors
    return spec

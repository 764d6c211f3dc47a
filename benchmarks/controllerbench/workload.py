"""What the benchmark submits: gangs of 1 Master + 7 Workers, and the plain script's pods. Pure.

Rules:
- Every job asks for 8 GPUs (1 per pod) on nodes labelled ``pool=bench``; its Master ends by
  itself ``run_seconds`` after it starts (kwok's ``torchgate.io/fake-run-seconds`` stage).
- The plain script's pods are built by torchgate's own ``build_pod``, a gang pinned per node as
  the controller pins them, without owner references (no job owns them).
"""

from __future__ import annotations

from typing import Any, Final

from poolbench.manifests import POOL as POOL  # the pool both cluster benchmarks label
from poolbench.manifests import pytorchjob

from torchgate.controller.job.pods import build_pod
from torchgate.pytorchjob.spec import parse_job
from torchgate_dev.controlplane import kwok

# The users' job submissions, the same in every phase; the pods' concurrency is --write-concurrency.
SUBMIT_CONCURRENCY: Final = 32
GANG_PODS: Final = 8


def gang(name: str, namespace: str, run_seconds: int) -> dict[str, Any]:
    """1 Master + 7 Workers, 1 GPU each; the Master ends by itself (kwok) after run_seconds."""
    return pytorchjob(name, namespace, GANG_PODS, run_seconds, gpus_per_pod=1)


def gang_pod_names(job: str) -> list[str]:
    """The pods the controller creates for a gang, Master first."""
    return [f"{job}-master-0"] + [f"{job}-worker-{i}" for i in range(GANG_PODS - 1)]


def plain_pods(namespace: str, gangs: int) -> list[dict[str, Any]]:
    """The first wave's pods as the plain script creates them: gang ``i`` pinned to node ``i``."""
    pods = []
    for index in range(gangs):
        raw = gang(f"plain-{index:04d}", namespace, 3600)
        raw["metadata"]["uid"] = f"00000000-0000-0000-0000-{index:012d}"
        spec, _ = parse_job(raw)
        assert spec is not None
        for replica in spec.replica_specs:
            for i in range(replica.replicas):
                pod = build_pod(
                    raw,
                    spec,
                    replica.replica_type,
                    i,
                    node=node_name(index),  # pinned like the controller's: a gang per node
                    attempt=1,
                    gpus="nvidia.com/gpu",
                )
                pod["metadata"].pop("ownerReferences", None)
                pods.append(pod)
    return pods


def node_name(index: int) -> str:
    """The pool's node ``index``: the plain script pins gang ``index`` to it."""
    return f"n{index:03d}"


def pool_nodes(count: int) -> list[dict[str, Any]]:
    """``count`` kwok nodes of 8 GPUs, labelled into the benchmark's pool."""
    return [kwok.gpu_node(node_name(i), gpus=8, labels={"pool": POOL}) for i in range(count)]

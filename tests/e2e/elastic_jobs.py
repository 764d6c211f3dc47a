"""Jobs pinned to a kwok pool, created and scaled with kubectl: the elastic tests' kit.

Why one module: the elastic scaling tests (``test_elastic_scale_e2e`` on the session's cluster,
``test_elastic_quota_e2e`` on a control plane of its own) drive a running gang the way a user
does, ``kubectl create`` and ``kubectl scale`` through the webhook, and read the same facts back:
which pods run and which gang attempt the job is in (a scale must never restart the gang).
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import get_job, live_pods
from torchgate.pytorchjob import names


def in_pool(built: dict[str, Any], pool: str) -> dict[str, Any]:
    """``built`` with every replica's pods held to the nodes labelled ``pool=<pool>``."""
    for replica in built["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {"pool": pool}
    return built


def create(cluster: Cluster, built: dict[str, Any]) -> None:
    """``kubectl create`` the job, which must succeed."""
    result = cluster.kubectl("create", "-f", "-", input=json.dumps(built), check=False)
    assert result.returncode == 0, result.stderr


def scale(cluster: Cluster, namespace: str, name: str, replicas: int) -> None:
    """``kubectl scale pytorchjob/<name> --replicas=<replicas>``, which must succeed."""
    scaled = cluster.kubectl(
        "scale", "-n", namespace, f"pytorchjob/{name}", f"--replicas={replicas}"
    )
    assert scaled.returncode == 0, scaled.stderr


def running_pods(cluster: Cluster, namespace: str, name: str, count: int) -> list[str] | None:
    """The names of the job's ``count`` live pods once all are Running, else None."""
    pods = live_pods(cluster, namespace, name)
    ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
    return sorted(p["metadata"]["name"] for p in pods) if ok else None


def attempt(cluster: Cluster, namespace: str, name: str) -> str | None:
    """The job's gang attempt (its annotation), None before the first."""
    found = get_job(cluster, namespace, name)
    assert found is not None
    annotations: dict[str, str] = found["metadata"].get("annotations", {})
    return annotations.get(names.ANNOTATION_GANG_ATTEMPT)

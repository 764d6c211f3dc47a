"""An elastic job with a Master on the real node: every pod is one node of torchrun's rendezvous.

The training-operator's reading (``PET_NNODES=minReplicas:maxReplicas`` on every pod, the Master
too) leaves one pod of a Master + *W* Workers job out of torchrun's c10d rendezvous: with the
default bounds ``W:W`` the rendezvous completes with the first *W* pods to join and parks the
last one in its redundancy list. torchgate's bounds count Workers and ``PET_NNODES`` adds the
Master (``pytorchjob.gang``). Here the job is applied as users write it (``rdzvBackend: c10d``,
no bounds, a command of plain ``torchrun``), admitted through the webhook with its gang, and run
by the controller's pods on a real kubelet: every pod, the Master too, must be a rank of one
world of 3, with the env the pods got.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.controller_process import get_job, job_pods
from tests.e2e.test_real_node import ALL_REDUCE, RealNodeCluster, demo_job, sh
from torchgate_dev.cluster import DevCluster, UpOptions
from torchgate_dev.controlplane.cluster import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNodeCluster]:
    root = tmp_path_factory.mktemp("real-node-elastic")
    dev = DevCluster(root, report=lambda line: None)
    options = UpOptions(pools=(), sample_policy=False, real_node=True, seed_images=False)
    try:
        dev.up(options)
        dev.build_images()
        plane = ControlPlane.from_state(root)
        node = plane.node_name
        assert node is not None
        yield RealNodeCluster(plane, node)
    finally:
        dev.down(keep_logs=False)


def pytorch_env(pod: dict[str, Any]) -> dict[str, str]:
    """The ``pytorch`` container's env as the pod got it."""
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_every_pod_of_an_elastic_job_with_a_master_joins_one_torchrun_rendezvous(
    real: RealNodeCluster,
) -> None:
    namespace = real.new_namespace("elmaster")
    script = ALL_REDUCE.replace("'", "'\\''")
    command = sh(f"printf '%s' '{script}' > /tmp/all_reduce.py && exec torchrun /tmp/all_reduce.py")
    built = demo_job("elm", namespace, master=command, worker=command, workers=2)
    built["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d"}  # the bounds default to the Workers
    real.apply(built)

    stored = get_job(real, namespace, "elm")
    assert stored is not None
    assert stored["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 3  # the gang
    real.wait_job(namespace, "elm", "Succeeded", timeout=300)

    # The job succeeds with its Master; the Workers report Succeeded a moment later.
    def all_succeeded() -> dict[str, dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in job_pods(real, namespace, "elm")}
        ended = all(pod["status"]["phase"] == "Succeeded" for pod in pods.values())
        return pods if ended else None

    pods = real.wait_for(all_succeeded, timeout=60, what="every pod Succeeded")
    assert set(pods) == {"elm-master-0", "elm-worker-0", "elm-worker-1"}
    for pod in pods.values():
        env = pytorch_env(pod)
        assert (env["PET_NNODES"], env["PET_RDZV_BACKEND"]) == ("3:3", "c10d")
    lines = {
        name: [line for line in real.logs(namespace, name).splitlines() if line.startswith("rank ")]
        for name in pods
    }
    assert all(len(printed) == 1 for printed in lines.values()), lines
    ranks = sorted(int(printed[0].split()[1]) for printed in lines.values())
    assert ranks == [0, 1, 2], lines
    assert {printed[0].split(" world ")[1] for printed in lines.values()} == {"3 sum 6"}, lines

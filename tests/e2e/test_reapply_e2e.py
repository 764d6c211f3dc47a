"""``kubectl apply`` of the same manifest again leaves the job the webhook stored.

kubectl's client-side apply of a custom resource sends a three-way JSON merge patch
(``pytorchjob.applying``), which replaces ``containers`` and ``volumes`` whole with the manifest's
lists: without the port, the ``/dev/shm`` volume and mount the mutating webhook persisted at
CREATE. The webhook defaults a template the update changed as on CREATE (``defaulting``'s UPDATE
rule 2), so on the real apiserver and kubectl the second apply is ``configured`` (a patch was
sent) and the stored job does not change: same spec, same ``resourceVersion``. A Worker count
raised by applying again moves the gang size the webhook defaulted along (rule 3). Server-side
apply strips the same fields (the applier owns the lists it applied, and the webhook's additions
inside them were made under its name), and gets them back the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT, Cluster
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook  # the module-scoped fixture

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

SEEDS = REPO_ROOT.parent / "shared" / "seeds" / "manifests"
SEED_000 = SEEDS / "000-pytorch-dist-mnist-nccl.yaml"
SEED_003 = SEEDS / "003-torchrun-cpu.yaml"
WORKER = "    Worker:\n      replicas: 1\n"


CLIENT_SIDE: tuple[str, ...] = ()
SERVER_SIDE = ("--server-side",)


def apply(cluster: Cluster, namespace: str, path: Path, mode: tuple[str, ...] = CLIENT_SIDE) -> str:
    """``kubectl apply -f`` as a user runs it (``mode``: its extra flags); what kubectl printed."""
    result = cluster.kubectl("apply", *mode, "-n", namespace, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
    return str(result.stdout).strip()


def stored_job(cluster: Cluster, name: str, namespace: str) -> dict[str, Any]:
    job = cluster.get("pytorchjob", name, namespace)
    assert job is not None
    return job


def seed_000_filled() -> str:
    return SEED_000.read_text(encoding="utf-8").replace("<训练镜像>", "pytorch-demo")


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (seed_000_filled(), "pytorch-dist-mnist-nccl"),
        (SEED_003.read_text(encoding="utf-8"), "torchrun-cpu"),
    ],
    ids=["gpu-seed-000", "cpu-seed-003"],
)
@pytest.mark.parametrize("mode", [CLIENT_SIDE, SERVER_SIDE], ids=["client-side", "server-side"])
def test_applying_the_same_manifest_again_leaves_the_stored_job_as_it_was(
    cluster: Cluster,
    webhook: LocalWebhook,
    tmp_path: Path,
    text: str,
    name: str,
    mode: tuple[str, ...],
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    namespace = cluster.new_namespace("reapply")

    first_printed = apply(cluster, namespace, path, mode)
    first = stored_job(cluster, name, namespace)
    again_printed = apply(cluster, namespace, path, mode)
    again = stored_job(cluster, name, namespace)

    created, configured = ("serverside-applied",) * 2 if mode else ("created", "configured")
    assert first_printed == f"pytorchjob.kubeflow.org/{name} {created}"
    assert again_printed == f"pytorchjob.kubeflow.org/{name} {configured}"
    pytorch = first["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert [port["name"] for port in pytorch["ports"]] == ["pytorchjob-port"]
    assert again["spec"] == first["spec"]
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_more_workers_applied_again_keep_the_defaults_and_move_the_gang_size(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path
) -> None:
    text = seed_000_filled()
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    namespace = cluster.new_namespace("reapply")
    apply(cluster, namespace, path)
    first = stored_job(cluster, "pytorch-dist-mnist-nccl", namespace)
    path.write_text(text.replace(WORKER, WORKER.replace("1", "3")), encoding="utf-8")

    apply(cluster, namespace, path)

    spec = stored_job(cluster, "pytorch-dist-mnist-nccl", namespace)["spec"]
    first_worker = first["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert spec["pytorchReplicaSpecs"]["Worker"] == {**first_worker, "replicas": 3}
    assert spec["runPolicy"]["schedulingPolicy"]["minAvailable"] == 4
    assert first["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2

"""``kubectl scale pytorchjob`` goes through the validating webhook, on the real apiserver.

The PyTorchJob CRD serves a ``scale`` subresource (Worker replicas) for elastic jobs and their
HPA. Its writes reach admission as an ``autoscaling/v1`` Scale under ``pytorchjobs/scale``, not as
the job, so a configuration listing only ``pytorchjobs`` never sees them: a non-elastic job kept
its defaulted gang size at the old count while its Workers changed, and no rule (quota ceiling,
replica limit) was asked. The validating webhook registers ``pytorchjobs/scale``, reads the job
and judges it as it would be after the scale (``validation.scaling``): a non-elastic job is
refused and told to change its Workers with apply or patch (the mutating webhook then moves the
gang size along); an elastic job scales within its ``elasticPolicy`` bounds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders.job import gpu_job, job
from tests.e2e.conftest import Cluster
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook  # the module-scoped fixture
from torchgate.webhook.validation.scaling import CHANGE_WITH_APPLY

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

WORKER_REPLICAS = "spec.pytorchReplicaSpecs[Worker].replicas"


def created(cluster: Cluster, job: dict[str, Any]) -> dict[str, Any]:
    """``job`` created through both webhooks; the stored job."""
    result = cluster.kubectl("create", "-f", "-", input=json.dumps(job), check=False)
    assert result.returncode == 0, result.stderr
    stored = cluster.get("pytorchjob", job["metadata"]["name"], job["metadata"]["namespace"])
    assert stored is not None
    return stored


def scale(cluster: Cluster, namespace: str, name: str, replicas: int) -> Any:
    """``kubectl scale pytorchjob/NAME --replicas=N``, as a user runs it."""
    return cluster.kubectl(
        "scale", "-n", namespace, f"pytorchjob/{name}", f"--replicas={replicas}", check=False
    )


def workers(stored: dict[str, Any]) -> int:
    return int(stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])


def gang_size(stored: dict[str, Any]) -> int:
    return int(stored["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"])


def test_scaling_a_job_that_is_not_elastic_is_refused_and_apply_or_patch_is_named(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("scale")
    stored = created(cluster, gpu_job("fixed", namespace=namespace, workers=1).build())
    assert (workers(stored), gang_size(stored)) == (1, 2)

    refused = scale(cluster, namespace, "fixed", 3)

    assert refused.returncode != 0
    # The apiserver renders the webhook's cause as "<field>: Forbidden: <detail>".
    assert f"{WORKER_REPLICAS}: Forbidden: {CHANGE_WITH_APPLY}" in refused.stderr
    after = cluster.get("pytorchjob", "fixed", namespace)
    assert after is not None
    assert (workers(after), gang_size(after)) == (1, 2)
    assert after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_the_patch_the_refusal_names_moves_the_gang_size_along(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("scale")
    created(cluster, gpu_job("patched", namespace=namespace, workers=1).build())
    patch = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}

    result = cluster.kubectl(
        "patch", "-n", namespace, "pytorchjob/patched", "--type=merge", "-p", json.dumps(patch),
        check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    after = cluster.get("pytorchjob", "patched", namespace)
    assert after is not None
    assert (workers(after), gang_size(after)) == (3, 4)


def elastic_job(namespace: str) -> dict[str, Any]:
    built = gpu_job("elastic", namespace=namespace, workers=2)
    return built.elastic(minReplicas=1, maxReplicas=4).build()


def test_an_elastic_job_scales_within_its_bounds_and_not_beyond(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("scale")
    stored = created(cluster, elastic_job(namespace))
    gang = gang_size(stored)

    accepted = scale(cluster, namespace, "elastic", 4)
    beyond = scale(cluster, namespace, "elastic", 5)

    assert accepted.returncode == 0, accepted.stderr
    assert beyond.returncode != 0
    assert f"{WORKER_REPLICAS}: Invalid value: 5: " in beyond.stderr
    after = cluster.get("pytorchjob", "elastic", namespace)
    assert after is not None
    assert (workers(after), gang_size(after)) == (4, gang)


def test_an_elastic_job_whose_workers_its_rendezvous_cannot_take_is_refused_on_create(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("scale")
    built = job("beyond", namespace).workers(6, gpus=1).elastic(minReplicas=1, maxReplicas=2)

    refused = cluster.kubectl("create", "-f", "-", input=json.dumps(built.build()), check=False)

    assert refused.returncode != 0
    assert f"{WORKER_REPLICAS}: Invalid value: 6: " in refused.stderr
    assert cluster.get("pytorchjob", "beyond", namespace) is None

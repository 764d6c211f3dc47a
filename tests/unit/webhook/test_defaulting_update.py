"""Defaulting on UPDATE: ``kubectl apply`` of a manifest again keeps what the webhook persisted.

Each update here is the one ``kubectl apply`` sends for a job it created: the manifest applied
first is the last applied configuration, the stored job is what CREATE's defaulting made of it,
and the new object is the stored job with kubectl's three-way JSON merge patch applied
(``pytorchjob.applying``), which replaces lists (``containers``, ``volumes``) whole.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from tests.builders.job import container, gpu_job, job
from tests.builders.policy import parsed_policy
from torchgate.pytorchjob.applying import merge_patch, three_way_patch
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.webhook.defaulting import SHM_PATH, Defaulted, default_job
from torchgate.webhook.review import evaluate

MASTER = ("spec", "pytorchReplicaSpecs", "Master")
WORKER = ("spec", "pytorchReplicaSpecs", "Worker")
POD = ("template", "spec")
GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
PLACED = parsed_policy(
    "admin",
    nodeSelector={"pool": "a100"},
    tolerations=[GPU_TOLERATION],
    sharedMemory={"sizeLimit": "16Gi"},
)


def at(obj: Any, *path: str | int) -> Any:
    for token in path:
        obj = obj[token]
    return obj


def created(manifest: dict[str, Any], policy: PlacementPolicy) -> dict[str, Any]:
    """The job CREATE stores for ``manifest``."""
    result = default_job(manifest, policy)
    assert result.errors == []
    stored: dict[str, Any] = copy.deepcopy(result.object)
    return stored


def applied_again(
    first: dict[str, Any], stored: dict[str, Any], manifest: dict[str, Any]
) -> dict[str, Any]:
    """What reaches the webhook when ``manifest`` is applied over the job ``first`` created."""
    patched: dict[str, Any] = merge_patch(stored, three_way_patch(first, manifest, stored))
    return patched


def updated(
    new: dict[str, Any], stored: dict[str, Any], policy: PlacementPolicy = DEFAULT_POLICY
) -> Defaulted:
    before = copy.deepcopy(new)
    result = default_job(new, policy, old=stored)
    assert new == before, "defaulting must never mutate its input"
    assert jsonpatch.apply_patch(new, result.patch) == result.object, "patch must give the object"
    return result


def rdma_job() -> dict[str, Any]:
    rdma = container(gpus=8, limits={"rdma/hca": 1}, args=["--backend", "nccl"])
    return job().master(containers=[rdma]).workers(3, containers=[copy.deepcopy(rdma)]).build()


def job_with_own_volume() -> dict[str, Any]:
    mounted = container(gpus=1)
    mounted["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod_spec = {"volumes": [{"name": "data", "emptyDir": {}}]}
    return job().master(containers=[mounted], pod_spec=pod_spec).build()


@pytest.mark.parametrize(
    ("manifest", "policy"),
    [
        (job().master().workers(2).build(), DEFAULT_POLICY),
        (gpu_job(workers=3).build(), DEFAULT_POLICY),
        (gpu_job(workers=3).build(), PLACED),
        (rdma_job(), PLACED),
        (gpu_job(workers=1).hosts("h1", "h2").build(), PLACED),
        (job_with_own_volume(), PLACED),
        (job().master().workers(4).elastic(minReplicas=2, maxReplicas=4).build(), PLACED),
    ],
    ids=["cpu", "gpu", "gpu-placed", "rdma", "pinned-hosts", "own-volume", "elastic"],
)
def test_the_same_manifest_applied_again_gives_back_the_stored_job(
    manifest: dict[str, Any], policy: PlacementPolicy
) -> None:
    stored = created(manifest, policy)
    new = applied_again(manifest, stored, manifest)
    assert new != stored, "the merge patch strips what the webhook added inside lists"

    result = updated(new, stored, policy)

    assert result.errors == []
    assert result.object == stored
    evaluation = evaluate(new, policy, old=stored)
    assert (evaluation.allowed, evaluation.errors, evaluation.object) == (True, (), stored)


def test_kubectl_replace_with_the_original_manifest_gives_back_the_stored_templates() -> None:
    # The run policy comes back too, but for minAvailable (``_RESTORED_ON_UPDATE``): without it
    # the gang is every replica, as with it.
    manifest = gpu_job(workers=2).build()
    stored = created(manifest, PLACED)

    result = updated(copy.deepcopy(manifest), stored, PLACED)

    replica_specs = result.object["spec"]["pytorchReplicaSpecs"]
    assert replica_specs == stored["spec"]["pytorchReplicaSpecs"]


def test_an_edited_image_gets_its_template_defaulted_as_on_create() -> None:
    manifest = gpu_job(workers=2).build()
    stored = created(manifest, PLACED)
    edited = copy.deepcopy(manifest)
    at(edited, *WORKER, *POD, "containers", 0)["image"] = "registry.example/train:v2"

    result = updated(applied_again(manifest, stored, edited), stored, PLACED)

    assert result.object == created(edited, PLACED)
    pod = at(result.object, *WORKER, *POD)
    assert pod["containers"][0]["image"] == "registry.example/train:v2"
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "torchgate-dshm", "mountPath": SHM_PATH}
    ]
    assert [p["name"] for p in pod["containers"][0]["ports"]] == ["pytorchjob-port"]
    assert pod["tolerations"] == [GPU_TOLERATION]


def test_a_template_the_update_left_alone_is_not_defaulted_under_a_new_policy() -> None:
    stored = created(gpu_job(workers=2).build(), DEFAULT_POLICY)
    new = copy.deepcopy(stored)
    new["spec"]["runPolicy"]["cleanPodPolicy"] = "All"

    result = updated(new, stored, PLACED)

    assert result.patch == []
    assert at(result.object, *MASTER, *POD) == at(stored, *MASTER, *POD)


def drop_env(manifest: dict[str, Any]) -> None:
    del at(manifest, *WORKER, *POD, "containers", 0)["env"]


def drop_own_toleration(manifest: dict[str, Any]) -> None:
    del at(manifest, *WORKER, *POD)["tolerations"]


def drop_own_volume(manifest: dict[str, Any]) -> None:
    pod = at(manifest, *WORKER, *POD)
    del pod["volumes"]
    del pod["containers"][0]["volumeMounts"]


OWN_TOLERATION = {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}


def with_own_fields() -> dict[str, Any]:
    manifest = gpu_job(workers=2).build()
    pod = at(manifest, *WORKER, *POD)
    pod["containers"][0]["env"] = [{"name": "EPOCHS", "value": "3"}]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["volumes"] = [{"name": "data", "emptyDir": {}}]
    pod["tolerations"] = [OWN_TOLERATION]
    return manifest


@pytest.mark.parametrize(
    ("remove", "value"),
    [
        (drop_env, {"name": "EPOCHS", "value": "3"}),
        (drop_own_toleration, OWN_TOLERATION),
        (drop_own_volume, {"name": "data", "emptyDir": {}}),
    ],
    ids=["env", "own-toleration", "own-volume"],
)
def test_a_field_the_user_removed_stays_removed(
    remove: Callable[[dict[str, Any]], None], value: dict[str, Any]
) -> None:
    manifest = with_own_fields()
    stored = created(manifest, PLACED)
    removed = copy.deepcopy(manifest)
    remove(removed)

    result = updated(applied_again(manifest, stored, removed), stored, PLACED)

    assert result.object == created(removed, PLACED)
    pod = at(result.object, *WORKER, *POD)
    lists = [pod["containers"][0].get("env", []), pod["tolerations"], pod["volumes"]]
    assert not any(value in entries for entries in lists)


def with_workers(manifest: dict[str, Any], count: int) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    at(changed, *WORKER)["replicas"] = count
    return changed


def with_elastic_minimum(manifest: dict[str, Any], minimum: int) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    changed["spec"]["elasticPolicy"]["minReplicas"] = minimum
    return changed


@pytest.mark.parametrize(
    ("manifest", "change", "expected"),
    [
        (job().master().workers(1).build(), lambda m: with_workers(m, 3), 4),
        (job().master().workers(3).build(), lambda m: with_workers(m, 1), 2),
        (
            job().master().workers(4).elastic(minReplicas=2, maxReplicas=4).build(),
            lambda m: with_elastic_minimum(m, 3),
            4,
        ),
        (job().master().workers(3).scheduling(minAvailable=2).build(), lambda m: m, 2),
        (
            job().master().workers(3).scheduling(minAvailable=2).build(),
            lambda m: with_workers(m, 5),
            2,
        ),
        (job().master().workers(3).build(), lambda m: with_workers(m, 3), 4),
    ],
    ids=[
        "more-workers",
        "fewer-workers",
        "elastic-minimum-raised",
        "users-own-unchanged",
        "users-own-with-more-workers",
        "same-workers",
    ],
)
def test_a_default_gang_size_follows_the_replicas_and_the_users_own_stays(
    manifest: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any]], expected: int
) -> None:
    stored = created(manifest, DEFAULT_POLICY)

    result = updated(applied_again(manifest, stored, change(manifest)), stored)

    assert result.errors == []
    assert at(result.object, "spec", "runPolicy", "schedulingPolicy", "minAvailable") == expected
    evaluation = evaluate(
        applied_again(manifest, stored, change(manifest)), DEFAULT_POLICY, old=stored
    )
    assert evaluation.errors == ()


def test_a_gang_size_the_update_sets_is_the_users() -> None:
    manifest = job().master().workers(1).build()
    stored = created(manifest, DEFAULT_POLICY)
    changed = with_workers(manifest, 3)
    changed["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 3}}

    result = updated(applied_again(manifest, stored, changed), stored)

    assert at(result.object, "spec", "runPolicy", "schedulingPolicy", "minAvailable") == 3


def without_replica_defaults(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with neither ``replicas`` nor ``restartPolicy`` written on any replica."""
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
        replica.pop("replicas", None)
        replica.pop("restartPolicy", None)
    return manifest


def test_a_replica_the_update_adds_gets_the_replica_defaults_as_on_create() -> None:
    first = without_replica_defaults(job().master().build())
    stored = created(first, DEFAULT_POLICY)
    manifest = without_replica_defaults(job().master().workers(1).build())

    result = updated(applied_again(first, stored, manifest), stored)

    assert result.errors == []
    assert at(result.object, *WORKER) == at(created(manifest, DEFAULT_POLICY), *WORKER)


def test_kubectl_replace_with_a_manifest_without_replica_defaults_gives_back_the_stored_specs() -> (
    None
):
    manifest = without_replica_defaults(job().master().workers(2).build())
    stored = created(manifest, DEFAULT_POLICY)

    result = updated(copy.deepcopy(manifest), stored)

    assert result.object["spec"]["pytorchReplicaSpecs"] == stored["spec"]["pytorchReplicaSpecs"]

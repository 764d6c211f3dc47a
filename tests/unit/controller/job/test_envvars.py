"""The env contract: exact env lists per job shape, and merging with the user's env."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import UID, gpu_job, job, parsed_job, with_uid
from torchgate.controller.job.envvars import merge_env, rank_env


def env(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": n, "value": v} for n, v in pairs]


def master_workers() -> dict[str, Any]:
    return with_uid(gpu_job("demo", workers=2, gpus=2).build())


def test_master_and_two_workers_master_env() -> None:
    spec = parsed_job(master_workers())
    assert rank_env(spec, "Master", 0, gpus_per_pod=2) == env(
        [
            ("PYTHONUNBUFFERED", "1"),
            ("MASTER_ADDR", "demo-master-0"),
            ("PET_MASTER_ADDR", "demo-master-0"),
            ("MASTER_PORT", "23456"),
            ("PET_MASTER_PORT", "23456"),
            ("WORLD_SIZE", "3"),
            ("RANK", "0"),
            ("PET_NODE_RANK", "0"),
            ("PET_NNODES", "3"),
            ("PET_NPROC_PER_NODE", "2"),
        ]
    )


def test_master_and_two_workers_worker_ranks_follow_the_master() -> None:
    spec = parsed_job(master_workers())
    worker1 = dict((e["name"], e["value"]) for e in rank_env(spec, "Worker", 1, gpus_per_pod=2))
    assert worker1["RANK"] == "2"
    assert worker1["PET_NODE_RANK"] == "2"
    assert worker1["MASTER_ADDR"] == "demo-master-0"


def test_worker_only_job_uses_worker_zero_as_master() -> None:
    spec = parsed_job(with_uid(job("solo").workers(3).build()))
    assert rank_env(spec, "Worker", 2, gpus_per_pod=0) == env(
        [
            ("PYTHONUNBUFFERED", "1"),
            ("MASTER_ADDR", "solo-worker-0"),
            ("PET_MASTER_ADDR", "solo-worker-0"),
            ("MASTER_PORT", "23456"),
            ("PET_MASTER_PORT", "23456"),
            ("WORLD_SIZE", "3"),
            ("RANK", "2"),
            ("PET_NODE_RANK", "2"),
            ("PET_NNODES", "3"),
            ("PET_NPROC_PER_NODE", "1"),
        ]
    )


def test_master_port_comes_from_the_masters_named_port() -> None:
    raw = with_uid(gpu_job("demo", workers=1).build())
    master = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["ports"] = [{"name": "pytorchjob-port", "containerPort": 29500}]
    values = {e["name"]: e["value"] for e in rank_env(parsed_job(raw), "Worker", 0, gpus_per_pod=1)}
    assert (values["MASTER_PORT"], values["PET_MASTER_PORT"]) == ("29500", "29500")


def test_elastic_with_master() -> None:
    raw = with_uid(
        gpu_job("el", workers=2, gpus=1)
        .elastic(
            minReplicas=1,
            maxReplicas=3,
            maxRestarts=10,
            standalone=True,
            rdzvConf=[{"key": "timeout", "value": "90"}, {"key": "x", "value": "y"}],
        )
        .build()
    )
    assert rank_env(parsed_job(raw), "Worker", 0, gpus_per_pod=1) == env(
        [
            ("PYTHONUNBUFFERED", "1"),
            ("MASTER_ADDR", "el-master-0"),
            ("PET_MASTER_ADDR", "el-master-0"),
            ("MASTER_PORT", "23456"),
            ("PET_MASTER_PORT", "23456"),
            ("WORLD_SIZE", "3"),
            ("RANK", "1"),
            ("PET_NNODES", "2:4"),  # the Master is a torchrun node too: 1 + 1..3 Workers
            ("PET_NPROC_PER_NODE", "1"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", "el-worker-0:23456"),
            ("PET_RDZV_ID", UID),
            ("PET_RDZV_CONF", "timeout=90,x=y"),
            ("PET_MAX_RESTARTS", "10"),
            ("PET_STANDALONE", "1"),
        ]
    )


def test_elastic_worker_only_defaults() -> None:
    raw = with_uid(job("el").workers(2, gpus=4).elastic().build())
    assert rank_env(parsed_job(raw), "Worker", 1, gpus_per_pod=4) == env(
        [
            ("PYTHONUNBUFFERED", "1"),
            ("MASTER_ADDR", "el-worker-0"),
            ("PET_MASTER_ADDR", "el-worker-0"),
            ("MASTER_PORT", "23456"),
            ("PET_MASTER_PORT", "23456"),
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
            ("PET_NNODES", "2:2"),
            ("PET_NPROC_PER_NODE", "4"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", "el-worker-0:23456"),
            ("PET_RDZV_ID", UID),
        ]
    )


def test_elastic_rendezvous_settings_are_honoured() -> None:
    raw = with_uid(
        job("el")
        .workers(2)
        .elastic(
            rdzvBackend="etcd-v2",
            rdzvHost="etcd.svc",
            rdzvPort=2379,
            rdzvId="run-7",
            maxReplicas=4,
            nProcPerNode=3,
        )
        .build()
    )
    values = {e["name"]: e["value"] for e in rank_env(parsed_job(raw), "Worker", 0, gpus_per_pod=0)}
    assert values["PET_RDZV_BACKEND"] == "etcd-v2"
    assert values["PET_RDZV_ENDPOINT"] == "etcd.svc:2379"
    assert values["PET_RDZV_ID"] == "run-7"
    assert values["PET_NNODES"] == "4:4"  # an unset bound copies the other (training-operator)
    assert values["PET_NPROC_PER_NODE"] == "3"  # the deprecated elastic field
    assert "PET_STANDALONE" not in values


def test_elastic_endpoint_port_defaults_to_the_workers_named_port() -> None:
    raw = with_uid(gpu_job("el", workers=2).elastic().build())
    worker = raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["ports"] = [{"name": "pytorchjob-port", "containerPort": 30000}]
    values = {e["name"]: e["value"] for e in rank_env(parsed_job(raw), "Master", 0, gpus_per_pod=1)}
    assert values["PET_RDZV_ENDPOINT"] == "el-worker-0:30000"
    assert values["MASTER_PORT"] == "23456"


@pytest.mark.parametrize(
    ("nproc", "gpus", "world_size", "pet_nproc"),
    [
        ("4", 2, "12", "4"),
        ("auto", 2, "3", "auto"),
        ("gpu", 0, "3", "gpu"),
        (None, 2, "3", "2"),
        (None, 0, "3", "1"),
    ],
    ids=["integer", "auto-as-given", "gpu-as-given", "unset-gpus", "unset-cpu-never-auto"],
)
def test_nproc_per_node(nproc: str | None, gpus: int, world_size: str, pet_nproc: str) -> None:
    builder = gpu_job("demo", workers=2, gpus=gpus)
    if nproc is not None:
        builder = builder.nproc(nproc)
    values = {
        e["name"]: e["value"]
        for e in rank_env(parsed_job(with_uid(builder.build())), "Worker", 0, gpus_per_pod=gpus)
    }
    assert values["WORLD_SIZE"] == world_size
    assert values["PET_NPROC_PER_NODE"] == pet_nproc


def test_merge_env_replaces_same_named_entries_in_place_without_duplicates() -> None:
    user = [
        {"name": "FOO", "value": "bar"},
        {"name": "RANK", "value": "99"},
        {"name": "CACHE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "RANK", "value": "98"},
        {"name": "WORLD_SIZE", "value": "1"},
    ]
    ours = env([("PYTHONUNBUFFERED", "1"), ("WORLD_SIZE", "3"), ("RANK", "2")])
    assert merge_env(user, ours) == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "FOO", "value": "bar"},
        {"name": "RANK", "value": "2"},
        {"name": "CACHE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "WORLD_SIZE", "value": "3"},
    ]


def test_merge_env_puts_new_variables_before_user_references_to_them() -> None:
    user = [{"name": "ADDR", "value": "$(MASTER_ADDR):$(MASTER_PORT)"}]
    ours = env([("MASTER_ADDR", "demo-master-0"), ("MASTER_PORT", "23456")])
    merged = merge_env(user, ours)
    assert [e["name"] for e in merged] == ["MASTER_ADDR", "MASTER_PORT", "ADDR"]


@pytest.mark.parametrize(
    "user",
    [None, "RANK=1", [None, 3, {"value": "no name"}], [{"name": ["RANK"]}, {"name": {"a": 1}}]],
    ids=["none", "string", "junk", "names-not-strings"],  # the last found by fuzzing: unhashable
)
def test_merge_env_never_crashes_on_malformed_user_env(user: object) -> None:
    ours = env([("RANK", "0")])
    merged = merge_env(user, ours)
    assert merged[0] == {"name": "RANK", "value": "0"}
    assert merged[1:] == (user if isinstance(user, list) else [])


def test_merge_env_does_not_mutate_its_inputs() -> None:
    user = [{"name": "RANK", "value": "9"}]
    ours = env([("RANK", "0")])
    merged = merge_env(user, ours)
    merged[0]["value"] = "changed"
    assert user == [{"name": "RANK", "value": "9"}]
    assert ours == env([("RANK", "0")])


# ------------------------------------------------------------------ fencing gang attempts


def values_of(raw: dict[str, Any], replica: str, index: int, attempt: int) -> dict[str, str]:
    entries = rank_env(parsed_job(raw), replica, index, gpus_per_pod=0, attempt=attempt)
    return {e["name"]: e["value"] for e in entries}


@pytest.mark.parametrize(("attempt", "port"), [(1, "23456"), (2, "23457"), (17, "23456")])
def test_each_attempt_gets_its_own_master_port(attempt: int, port: str) -> None:
    values = values_of(master_workers(), "Worker", 1, attempt)
    assert (values["MASTER_PORT"], values["PET_MASTER_PORT"]) == (port, port)


def test_an_attempt_never_takes_a_port_the_master_pod_declares_for_something_else() -> None:
    raw = master_workers()
    master = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["ports"] = [
        {"name": "pytorchjob-port", "containerPort": 23456},
        {"name": "metrics", "containerPort": 23457},
    ]
    master["initContainers"] = [{"name": "proxy", "ports": [{"containerPort": 23458}]}]
    assert values_of(raw, "Worker", 0, 2)["MASTER_PORT"] == "23459"


def test_an_elastic_rendezvous_on_the_jobs_own_worker_moves_port_and_run_id() -> None:
    raw = with_uid(gpu_job("el", workers=2).elastic(rdzvId="run-7").build())
    values = values_of(raw, "Worker", 0, 3)
    assert values["PET_RDZV_ENDPOINT"] == "el-worker-0:23458"
    assert values["PET_RDZV_ID"] == "run-7-3"
    assert values_of(raw, "Worker", 0, 1)["PET_RDZV_ID"] == "run-7"


def test_an_elastic_rendezvous_elsewhere_keeps_its_port_and_is_fenced_by_the_run_id() -> None:
    raw = with_uid(job("el").workers(2).elastic(rdzvHost="etcd.svc", rdzvPort=2379).build())
    values = values_of(raw, "Worker", 0, 2)
    assert values["PET_RDZV_ENDPOINT"] == "etcd.svc:2379"
    assert values["PET_RDZV_ID"] == f"{UID}-2"

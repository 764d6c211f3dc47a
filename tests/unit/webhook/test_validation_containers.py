"""Container rules on GPUs: requests, limits, peers without GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import container, job
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    GPU,
    INVALID,
    MC0,
    MPOD,
    WC0,
    Pairs,
    case,
    check,
    warned,
)
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy

# ---------------------------------------------------------------------- rule 5: GPUs

GPUS = [
    case(
        "replicas-disagree-on-gpus",
        job().master(gpus=1).workers(2, gpus=2).build(),
        [(INVALID, f"{WC0}.resources")],
    ),
    # Issue 15 gap (a): a Master without GPUs beside GPU Workers, backend not stated (was allowed).
    case(
        "cpu-master-gpu-workers",
        job().master().workers(2, gpus=2).build(),
        [(INVALID, f"{MC0}.resources")],
    ),
    case(
        "nproc-differs-from-gpus-per-pod",
        job().master(gpus=1).workers(1, gpus=1).nproc("2").build(),
        [(INVALID, "spec.nprocPerNode")],
    ),
    case(
        "nproc-equals-gpus-per-pod", job().master(gpus=2).workers(1, gpus=2).nproc("2").build(), []
    ),
    case(
        "visible-devices-all-without-gpu",
        job().master(env={"NVIDIA_VISIBLE_DEVICES": "all"}).workers(1).build(),
        [(FORBIDDEN, f"{MC0}.env[0]")],
    ),
    case(
        "visible-devices-ids-without-gpu",
        job().master(env={"NVIDIA_VISIBLE_DEVICES": "0,1"}).workers(1).build(),
        [(FORBIDDEN, f"{MC0}.env[0]")],
    ),
    case(
        "visible-devices-in-init-container",
        job()
        .master(
            pod_spec={
                "initContainers": [container(name="i", env={"NVIDIA_VISIBLE_DEVICES": "all"})]
            }
        )
        .workers(1)
        .build(),
        [(FORBIDDEN, f"{MPOD}.initContainers[0].env[0]")],
    ),
    case(
        "visible-devices-harmless-values",
        job()
        .master(
            containers=[
                container(env={"NVIDIA_VISIBLE_DEVICES": "void"}),
                container(name="b", env={"NVIDIA_VISIBLE_DEVICES": "none"}),
                container(name="c", env={"NVIDIA_VISIBLE_DEVICES": ""}),
            ]
        )
        .workers(1)
        .build(),
        [],
    ),
    case(
        "visible-devices-with-gpu",
        job().master(gpus=1, env={"NVIDIA_VISIBLE_DEVICES": "all"}).workers(1, gpus=1).build(),
        [],
    ),
    case(
        "gpu-request-differs-from-limit",
        job().master(requests={GPU: 1}, limits={GPU: 2}).build(),
        [(INVALID, f"{MC0}.resources.requests[{GPU}]")],
    ),
    case(
        "gpu-request-fraction",
        job().master(requests={GPU: "500m"}).build(),
        [(INVALID, f"{MC0}.resources.requests[{GPU}]")],
    ),
    case(
        "gpu-limit-fraction",
        job().master(limits={GPU: 1.5}).build(),
        [(INVALID, f"{MC0}.resources.limits[{GPU}]")],
    ),
    case(
        "gpu-request-equals-limit",
        job().master(requests={GPU: "2"}, limits={GPU: 2}).workers(1, gpus=2).build(),
        [],
    ),
]


# Issue 15 gap (a): a replica without GPUs beside GPU replicas (a Master whose resources were
# forgotten) is a rank without its peers' device: refused with nccl or no stated backend.
GPU_PEERS = [
    case(
        "cpu-worker-beside-gpu-master",
        job().master(gpus=1).workers(2).build(),
        [(INVALID, f"{WC0}.resources")],
    ),
    case(
        "cpu-master-nccl-stated-by-its-peers",
        job().master().workers(2, gpus=1, args=["--backend", "nccl"]).build(),
        [(INVALID, f"{MC0}.resources")],
    ),
    case(
        "cpu-master-stating-nccl-is-refused-at-the-argument-only",
        job()
        .master(args=["--backend", "nccl"])
        .workers(2, gpus=1, args=["--backend", "nccl"])
        .build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "gloo-stated-is-a-warning",
        job()
        .master(args=["--backend", "gloo"])
        .workers(2, gpus=1, args=["--backend", "gloo"])
        .build(),
        [],
    ),
    case("cpu-only-job", job().master().workers(2).build(), []),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), GPU_PEERS)
def test_gpu_peer_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_a_cpu_replica_beside_gpus_with_gloo_is_warned_at_its_resources() -> None:
    raw = job().master(args=["--backend=gloo"]).workers(1, gpus=1).build()
    verdict = check(raw, DEFAULT_POLICY, [])
    assert f"{MC0}.resources" in warned(verdict)


@pytest.mark.parametrize(("raw", "active_policy", "expected"), GPUS)
def test_gpu_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_master_and_worker_with_one_faulty_template_each_report_it() -> None:
    # One template for both replicas: its finding is reported at each of them.
    faulty = [container(image="registry.example.com/train:${TAG}", gpus=1)]
    raw = job().master(containers=faulty).workers(3, containers=faulty).build()
    check(raw, DEFAULT_POLICY, [(INVALID, f"{MC0}.image"), (INVALID, f"{WC0}.image")])

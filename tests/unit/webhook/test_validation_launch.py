"""Launch rules: backend vs hardware, stray launcher arguments, GPU framework flags."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import container, job
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    INVALID,
    MC0,
    WC0,
    Pairs,
    case,
    check,
    torchrun,
    warned,
)
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy

# ---------------------------------------------------------------------- rule 3: backend vs hardware

BACKENDS = [
    case(
        "nccl-without-gpu",
        job().master(args=["--backend", "nccl"]).workers(1).build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "nccl-equals-in-command",
        job().master(command=["python", "t.py", "--backend=nccl"]).workers(1).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "dist-backend-underscore",
        job().master(args=["--dist_backend", "NCCL"]).workers(1).build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "nccl-in-shell-string",
        job().master(command=["sh", "-c", "python t.py --backend nccl"]).workers(1).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "nccl-in-shell-script-args",
        job()
        .master(command=["sh", "-c"], args=["python t.py --dist-backend=nccl"])
        .workers(1)
        .build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "bad-quoting-never-crashes",
        job().master(command=["sh", "-c", "python 't.py --backend nccl"]).workers(1).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "nccl-with-gpu",
        job().master(gpus=1, args=["--backend", "nccl"]).workers(1, gpus=1).build(),
        [],
    ),
    case(
        "gpu-from-another-container-of-the-pod",
        job()
        .master(containers=[container(args=["--backend", "nccl"]), container(name="x", gpus=1)])
        .workers(1, gpus=1)
        .build(),
        [],
    ),
    case(
        "only-the-pytorch-container-is-scanned",
        job()
        .master(containers=[container(), container(name="helper", args=["--backend", "nccl"])])
        .workers(1)
        .build(),
        [],
    ),
    case(
        "policy-gpu-resource-counts",
        job().master(gpus=1, args=["--backend", "nccl"]).workers(1).build(),
        [(INVALID, f"{MC0}.args")],
        PlacementPolicy(gpu_resource="nvidia.com/a100"),
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), BACKENDS)
def test_backend_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_gloo_on_gpus_is_a_warning() -> None:
    verdict = check(
        job().master(gpus=1, args=["--backend", "gloo"]).workers(1).build(), DEFAULT_POLICY, []
    )
    assert f"{MC0}.args" in warned(verdict)


# ---------------------------------------------------------------------- rule 4: stray arguments


STRAY = [
    case(
        "world-size",
        job().master(args=["--world-size=16"]).workers(1, args=["--world-size=16"]).build(),
        [(FORBIDDEN, f"{MC0}.args"), (FORBIDDEN, f"{WC0}.args")],
    ),
    case(
        "every-rendezvous-flag",
        job()
        .master(
            command=["python", "t.py", "--rank", "0", "--master_addr=x"],
            args=[
                "--master-port",
                "1",
                "--node_rank=0",
                "--rdzv_endpoint=h:1",
                "--world_size",
                "2",
            ],
        )
        .workers(1)
        .build(),
        [
            (FORBIDDEN, f"{MC0}.command"),
            (FORBIDDEN, f"{MC0}.command"),
            (FORBIDDEN, f"{MC0}.args"),
            (FORBIDDEN, f"{MC0}.args"),
            (FORBIDDEN, f"{MC0}.args"),
            (FORBIDDEN, f"{MC0}.args"),
        ],
    ),
    case(
        "exact-match-only",
        job()
        .master(args=["--rank-zero-only", "--local-rank=0", "--local_rank", "1"])
        .workers(1)
        .build(),
        [],
    ),
    case(
        "nnodes-contradicts-total",
        job().master(command=torchrun("--nnodes=2")).workers(2).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "nnodes-contradicts-elastic-range",
        job()
        .workers(2, command=torchrun("--nnodes=2"))
        .elastic(minReplicas=1, maxReplicas=4)
        .build(),
        [(INVALID, f"{WC0}.command")],
    ),
    case(
        "nnodes-in-a-script-flag-is-not-torchrun",
        job().master(command=["python", "train.py", "--nnodes=5"]).workers(2).build(),
        [],
    ),
    case(
        "nnodes-literal-variable",
        job().master(command=torchrun("--nnodes=$NUM_NODES")).workers(2).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "nnodes-variable-expanded-by-the-shell",
        job().master(command=["sh", "-c", "torchrun --nnodes=$NUM_NODES t.py"]).workers(2).build(),
        [],
    ),
    case(
        "nnodes-variable-expanded-by-kubelet",
        job().master(command=torchrun("--nnodes=$(NUM_NODES)")).workers(2).build(),
        [],
    ),
    case(
        "nproc-differs-from-gpus",
        job().master(gpus=4, command=torchrun("--nproc_per_node=8")).workers(1, gpus=4).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "nproc-differs-from-spec",
        job().master(command=torchrun("--nproc-per-node=4")).workers(1).nproc("2").build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "nproc-on-cpu-without-spec",
        job().master(command=torchrun("--nproc_per_node=4")).workers(1).build(),
        [],
    ),
    case(
        "nproc-auto",
        job().master(gpus=2, command=torchrun("--nproc_per_node=auto")).workers(1, gpus=2).build(),
        [],
    ),
    case(
        "reserved-env-names",
        job()
        .master(env={"MASTER_ADDR": "x", "PET_NNODES": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"})
        .workers(1)
        .build(),
        [
            (FORBIDDEN, f"{MC0}.env[0].name"),
            (FORBIDDEN, f"{MC0}.env[1].name"),
            (FORBIDDEN, f"{MC0}.env[3].name"),
        ],
    ),
    case(
        "reserved-env-in-a-sidecar-is-fine",
        job()
        .master(containers=[container(), container(name="side", env={"RANK": "0"})])
        .workers(1)
        .build(),
        [],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), STRAY)
def test_stray_argument_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


@pytest.mark.parametrize(
    ("raw", "warned_at"),
    [
        pytest.param(
            job().master(command=torchrun("--nnodes=3")).workers(2).build(),
            f"{MC0}.command",
            id="nnodes-equals-total",
        ),
        pytest.param(
            job()
            .workers(2, command=torchrun("--nnodes=1:4"))
            .elastic(minReplicas=1, maxReplicas=4)
            .build(),
            f"{WC0}.command",
            id="nnodes-equals-elastic-range",
        ),
        pytest.param(
            job()
            .workers(2, command=torchrun("--nnodes", "2"))
            .elastic(minReplicas=2, maxReplicas=2)
            .build(),
            f"{WC0}.command",
            id="bare-n-equals-fixed-elastic-range",
        ),
        pytest.param(
            job().master(gpus=4, command=torchrun("--nproc_per_node=4")).workers(1, gpus=4).build(),
            f"{MC0}.command",
            id="nproc-equals-gpus",
        ),
        pytest.param(
            job().master(command=torchrun("--nproc_per_node=2")).workers(1).nproc("2").build(),
            f"{MC0}.command",
            id="nproc-equals-spec",
        ),
    ],
)
def test_redundant_launcher_flags_are_warnings(raw: Any, warned_at: str) -> None:
    verdict = check(raw, DEFAULT_POLICY, [])
    assert warned_at in warned(verdict)


# Issue 15 gap (b): framework flags asking for GPUs in a replica that requests none.
GPU_FLAGS = [
    case(
        "lightning-gpus-on-cpu",
        job().master(args=["--gpus", "2"]).workers(1, args=["--gpus", "2"]).build(),
        [(INVALID, f"{MC0}.args"), (INVALID, f"{WC0}.args")],
    ),
    case(
        "accelerator-gpu-on-cpu",
        job().master(command=["python", "fit.py", "--accelerator=gpu"]).workers(1).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "device-cuda-in-a-shell-script",
        job().master(command=["sh", "-c", "python t.py --device cuda"]).workers(1).build(),
        [(INVALID, f"{MC0}.command")],
    ),
    case(
        "gpus-on-gpu-replicas",
        job().master(gpus=2, args=["--gpus", "2"]).workers(1, gpus=2, args=["--gpus=2"]).build(),
        [],
    ),
    case(
        "cpu-accelerator-devices",
        job().master(args=["--accelerator", "cpu", "--devices", "4"]).workers(1).build(),
        [],
    ),
    case(
        "only-the-pytorch-container-is-scanned",
        job()
        .master(containers=[container(), container(name="helper", args=["--gpus", "1"])])
        .workers(1)
        .build(),
        [],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), GPU_FLAGS)
def test_gpu_flag_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)

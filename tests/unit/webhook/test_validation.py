"""validate_create / validate_update: every rule, as (error type, field path) pairs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import container, job, policy
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy, parse_policy
from torchgate.webhook.validation import Verdict, validate_create, validate_update

REQUIRED = ErrorType.REQUIRED
INVALID = ErrorType.INVALID
NOT_SUPPORTED = ErrorType.NOT_SUPPORTED
FORBIDDEN = ErrorType.FORBIDDEN
DUPLICATE = ErrorType.DUPLICATE
TOO_LONG = ErrorType.TOO_LONG
NOT_FOUND = ErrorType.NOT_FOUND

SPECS = "spec.pytorchReplicaSpecs"
M = f"{SPECS}[Master]"
W = f"{SPECS}[Worker]"
MPOD = f"{M}.template.spec"
WPOD = f"{W}.template.spec"
MC0 = f"{MPOD}.containers[0]"
WC0 = f"{WPOD}.containers[0]"
GPU = "nvidia.com/gpu"

Pairs = list[tuple[ErrorType, str]]
Edit = Callable[[dict[str, Any]], None]


def pairs(verdict: Verdict) -> Pairs:
    return [(error.type, error.field) for error in verdict.errors]


def warned(verdict: Verdict) -> list[str]:
    """The field paths of the verdict's warnings, in order."""
    return [str(warning.path) for warning in verdict.warnings]


def setting(*path_and_value: Any) -> Edit:
    """An edit that sets the value at a path of keys/indexes (creating no parents)."""
    *path, value = path_and_value

    def edit(raw: dict[str, Any]) -> None:
        node: Any = raw
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def removing(*path: Any) -> Edit:
    def edit(raw: dict[str, Any]) -> None:
        node: Any = raw
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


def cpu_job(name: str = "demo", workers: int = 2) -> Any:
    return job(name).master().workers(workers)


def master_pod(*path: Any) -> tuple[Any, ...]:
    return ("spec", "pytorchReplicaSpecs", "Master", "template", "spec", *path)


def master_container(*path: Any) -> tuple[Any, ...]:
    return master_pod("containers", 0, *path)


def case(
    case_id: str,
    raw: dict[str, Any],
    expected: Pairs,
    active_policy: PlacementPolicy = DEFAULT_POLICY,
) -> Any:
    return pytest.param(raw, active_policy, expected, id=case_id)


def check(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> Verdict:
    verdict = validate_create(raw, active_policy)
    assert pairs(verdict) == expected
    assert verdict.allowed is (expected == [])
    return verdict


def test_a_plain_job_is_allowed_without_warnings() -> None:
    verdict = validate_create(cpu_job().build(), DEFAULT_POLICY)
    assert (verdict.errors, verdict.warnings, verdict.allowed) == ((), (), True)


# ---------------------------------------------------------------------- rule 1: upstream parity

PARITY = [
    case("name-not-dns-1035", cpu_job("Bad_Name").build(), [(INVALID, "metadata.name")]),
    case("name-starts-with-digit", cpu_job("1job").build(), [(INVALID, "metadata.name")]),
    case(
        "generate-name-is-enough",
        cpu_job()
        .edit(removing("metadata", "name"))
        .edit(setting("metadata", "generateName", "train-"))
        .build(),
        [],
    ),
    case(
        "generate-name-invalid",
        cpu_job()
        .edit(removing("metadata", "name"))
        .edit(setting("metadata", "generateName", "Train-"))
        .build(),
        [(INVALID, "metadata.name")],
    ),
    case(
        "no-name-at-all",
        cpu_job().edit(removing("metadata", "name")).build(),
        [(REQUIRED, "metadata.name")],
    ),
    case("spec-null", cpu_job().edit(setting("spec", None)).build(), [(REQUIRED, SPECS)]),
    case(
        "replica-specs-missing",
        cpu_job().edit(removing("spec", "pytorchReplicaSpecs")).build(),
        [(REQUIRED, SPECS)],
    ),
    case(
        "replica-specs-empty",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", {})).build(),
        [(REQUIRED, SPECS)],
    ),
    case(
        "replica-specs-not-an-object",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "x")).build(),
        [(REQUIRED, SPECS)],
    ),
    case(
        "lower-case-key-means-mutation-did-not-run",
        job().master().workers(1, key="worker").build(),
        [(NOT_SUPPORTED, f"{SPECS}[worker]")],
    ),
    case(
        "unknown-replica-type",
        job().master().workers(1, key="Chief").build(),
        [(NOT_SUPPORTED, f"{SPECS}[Chief]")],
    ),
    case(
        "worker-null",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Worker", None)).build(),
        [(REQUIRED, f"{WPOD}.containers")],
    ),
    case(
        "worker-not-an-object",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Worker", "x")).build(),
        [(REQUIRED, f"{WPOD}.containers")],
    ),
    case(
        "worker-without-template",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Worker", {"replicas": 1})).build(),
        [(REQUIRED, f"{WPOD}.containers")],
    ),
    case(
        "no-containers",
        cpu_job().edit(setting(*master_pod("containers"), [])).build(),
        [(REQUIRED, f"{MPOD}.containers")],
    ),
    case(
        "container-without-image",
        cpu_job().edit(removing(*master_container("image"))).build(),
        [(REQUIRED, f"{MC0}.image")],
    ),
    case(
        "no-container-named-pytorch",
        job().master(name="trainer").workers(1).build(),
        [(REQUIRED, f"{MPOD}.containers")],
    ),
    case(
        "pytorch-container-need-not-be-first",
        job().master(containers=[container(name="sidecar"), container()]).workers(1).build(),
        [],
    ),
    case(
        "master-replicas-2",
        job().master(replicas=2).workers(1).build(),
        [(FORBIDDEN, f"{M}.replicas")],
    ),
    case(
        "master-replicas-0",
        job().master(replicas=0).workers(1).build(),
        [(FORBIDDEN, f"{M}.replicas")],
    ),
    case("master-replicas-missing-means-1", job().master(replicas=None).workers(1).build(), []),
    case("worker-replicas-0", job().master().workers(0).build(), [(FORBIDDEN, f"{W}.replicas")]),
    case("worker-replicas-missing-means-1", job().master().workers(None).build(), []),
    case("master-only-job", job().master().build(), []),
    case(
        "elastic-needs-a-worker",
        job().master().elastic(minReplicas=1, maxReplicas=2).build(),
        [(REQUIRED, f"{SPECS}[Worker]")],
    ),
    case(
        "elastic-nproc-with-spec-nproc",
        cpu_job().elastic(nProcPerNode=2).nproc("2").build(),
        [(FORBIDDEN, "spec.elasticPolicy.nProcPerNode")],
    ),
    case(
        "managed-by-unknown",
        cpu_job().run_policy(managedBy="someone/else").build(),
        [(NOT_SUPPORTED, "spec.runPolicy.managedBy")],
    ),
    case(
        "managed-by-multikueue",
        cpu_job().run_policy(managedBy="kueue.x-k8s.io/multikueue").build(),
        [],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), PARITY)
def test_upstream_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_deprecated_elastic_nproc_alone_is_a_warning() -> None:
    verdict = check(cpu_job().elastic(nProcPerNode=2).build(), DEFAULT_POLICY, [])
    assert "spec.elasticPolicy.nProcPerNode" in warned(verdict)


# ---------------------------------------------------------------------- rule 2: beyond upstream

NAME_53 = "a" * 53  # "-worker-14" makes 63
STRUCTURE = [
    case("derived-names-fit", job(NAME_53).master().workers(15).build(), []),
    case(
        "derived-worker-name-too-long",
        job(NAME_53 + "a").master().workers(15).build(),
        [(TOO_LONG, "metadata.name")],
    ),
    case(
        "elastic-max-replicas-counts-for-names",
        job(NAME_53).workers(2).elastic(minReplicas=1, maxReplicas=1000).build(),
        [(TOO_LONG, "metadata.name")],
    ),
    case(
        "generate-name-plus-suffix-too-long",
        cpu_job()
        .edit(removing("metadata", "name"))
        .edit(setting("metadata", "generateName", "g" * 50))
        .build(),
        [(TOO_LONG, "metadata.name")],
    ),
    case(
        "restart-policy-unsupported",
        job().master(restart_policy="Sometimes").workers(1).build(),
        [(NOT_SUPPORTED, f"{M}.restartPolicy")],
    ),
    case(
        "restart-policy-exit-code", job().master(restart_policy="ExitCode").workers(1).build(), []
    ),
    case(
        "clean-pod-policy-unsupported",
        cpu_job().run_policy(cleanPodPolicy="Some").build(),
        [(NOT_SUPPORTED, "spec.runPolicy.cleanPodPolicy")],
    ),
    case("nproc-word", cpu_job().nproc("many").build(), [(INVALID, "spec.nprocPerNode")]),
    case("nproc-zero", cpu_job().nproc("0").build(), [(INVALID, "spec.nprocPerNode")]),
    case("nproc-auto", cpu_job().nproc("auto").build(), []),
    case("nproc-digits", cpu_job().nproc("8").build(), []),
    case("nproc-json-integer", cpu_job().edit(setting("spec", "nprocPerNode", 4)).build(), []),
    case(
        "elastic-min-above-max",
        job().workers(2).elastic(minReplicas=3, maxReplicas=2).build(),
        [(INVALID, "spec.elasticPolicy.minReplicas")],
    ),
    case(
        "elastic-bounds-below-one",
        job().workers(2).elastic(minReplicas=0, maxReplicas="x").build(),
        [(INVALID, "spec.elasticPolicy.minReplicas"), (INVALID, "spec.elasticPolicy.maxReplicas")],
    ),
    case(
        "elastic-min-equals-max", job().workers(2).elastic(minReplicas=2, maxReplicas=2).build(), []
    ),
    case(
        "min-available-zero",
        cpu_job().scheduling(minAvailable=0).build(),
        [(INVALID, "spec.runPolicy.schedulingPolicy.minAvailable")],
    ),
    case(
        "min-available-above-total",
        cpu_job().scheduling(minAvailable=4).build(),
        [(INVALID, "spec.runPolicy.schedulingPolicy.minAvailable")],
    ),
    case("min-available-total", cpu_job().scheduling(minAvailable=3).build(), []),
    case(
        "replicas-unfilled-variable",
        job().master().workers("$NUM_NODES").build(),  # type: ignore[arg-type]
        [(INVALID, f"{W}.replicas")],
    ),
    case("replicas-negative", job().master().workers(-1).build(), [(INVALID, f"{W}.replicas")]),
    case(
        "replicas-fraction",
        job().master().workers(1.5).build(),  # type: ignore[arg-type]
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "replicas-boolean",
        job().master().workers(True).build(),
        [(INVALID, f"{W}.replicas")],
    ),
    case(
        "run-policy-integers",
        cpu_job()
        .run_policy(backoffLimit=-1, ttlSecondsAfterFinished="x", activeDeadlineSeconds=1.5)
        .scheduling(scheduleTimeoutSeconds=-5)
        .build(),
        [
            (INVALID, "spec.runPolicy.ttlSecondsAfterFinished"),
            (INVALID, "spec.runPolicy.activeDeadlineSeconds"),
            (INVALID, "spec.runPolicy.backoffLimit"),
            (INVALID, "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"),
        ],
    ),
    case(
        "run-policy-valid-integers",
        cpu_job().run_policy(backoffLimit=0, ttlSecondsAfterFinished=60, suspend=True).build(),
        [],
    ),
    case(
        "kubectl-get-output",
        cpu_job()
        .edit(setting("metadata", "resourceVersion", "15532"))
        .edit(setting("metadata", "uid", "059391e8"))
        .edit(setting("status", {"conditions": []}))
        .build(),
        [
            (FORBIDDEN, "metadata.resourceVersion"),
            (FORBIDDEN, "metadata.uid"),
            (FORBIDDEN, "status"),
        ],
    ),
    case("empty-status-is-fine", cpu_job().edit(setting("status", {})).build(), []),
    case(
        "spec-clean-pod-policy-moved",
        cpu_job().edit(setting("spec", "cleanPodPolicy", "All")).build(),
        [(FORBIDDEN, "spec.cleanPodPolicy")],
    ),
    case(
        "spec-unknown-field",
        cpu_job().edit(setting("spec", "foo", "bar")).build(),
        [(FORBIDDEN, "spec.foo")],
    ),
    case(
        "replica-image-pull-policy",
        cpu_job()
        .edit(setting("spec", "pytorchReplicaSpecs", "Master", "imagePullPolicy", "Always"))
        .build(),
        [(FORBIDDEN, f"{M}.imagePullPolicy")],
    ),
    case(
        "run-policy-unknown-field",
        cpu_job().run_policy(ttl=5).build(),
        [(FORBIDDEN, "spec.runPolicy.ttl")],
    ),
    case(
        "elastic-unknown-field",
        job().workers(2).elastic(minReplica=1).build(),
        [(FORBIDDEN, "spec.elasticPolicy.minReplica")],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), STRUCTURE)
def test_structure_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


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


def torchrun(*options: str) -> list[str]:
    return ["torchrun", *options, "train.py"]


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


@pytest.mark.parametrize(("raw", "active_policy", "expected"), GPUS)
def test_gpu_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


# ---------------------------------------------------------------------- rule 6: pod template sanity

VOLUME = {"name": "data", "emptyDir": {}}

TEMPLATES = [
    case(
        "mount-without-path",
        job()
        .master(pod_spec={"volumes": [VOLUME]})
        .workers(1)
        .edit(setting(*master_container("volumeMounts"), [{"name": "data"}]))
        .build(),
        [(REQUIRED, f"{MC0}.volumeMounts[0].mountPath")],
    ),
    case(
        "mount-of-undeclared-volume",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("volumeMounts"), [{"name": "data", "mountPath": "/d"}]))
        .build(),
        [(NOT_FOUND, f"{MC0}.volumeMounts[0].name")],
    ),
    case(
        "env-entry-under-volume-mounts",
        job()
        .master(pod_spec={"volumes": [VOLUME]})
        .workers(1)
        .edit(
            setting(
                *master_container("volumeMounts"),
                [
                    {"name": "data", "mountPath": "/d"},
                    {"name": "NCCL_DEBUG", "value": "INFO"},
                ],
            )
        )
        .build(),
        [
            (REQUIRED, f"{MC0}.volumeMounts[1].mountPath"),
            (NOT_FOUND, f"{MC0}.volumeMounts[1].name"),
        ],
    ),
    case(
        "init-container-mount",
        job()
        .master(
            pod_spec={
                "initContainers": [
                    {
                        "name": "i",
                        "image": "busybox",
                        "volumeMounts": [{"name": "gone", "mountPath": "/g"}],
                    }
                ]
            }
        )
        .workers(1)
        .build(),
        [(NOT_FOUND, f"{MPOD}.initContainers[0].volumeMounts[0].name")],
    ),
    case(
        "duplicate-env-name",
        job()
        .master()
        .workers(1)
        .edit(
            setting(
                *master_container("env"), [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
            )
        )
        .build(),
        [(DUPLICATE, f"{MC0}.env[1].name")],
    ),
    case(
        "bad-quantities",
        job()
        .master(limits={"cpu": "lots", GPU: None, "memory": "-1Gi"}, requests={"cpu": "$CPU"})
        .workers(1)
        .build(),
        [
            (INVALID, f"{MC0}.resources.limits[cpu]"),
            (INVALID, f"{MC0}.resources.limits[{GPU}]"),
            (INVALID, f"{MC0}.resources.limits[memory]"),
            (INVALID, f"{MC0}.resources.requests[cpu]"),
        ],
    ),
    case(
        "placeholder-inside-image",
        job().master(image="gcr.io/<your_project>/mnist:latest").workers(1).build(),
        [(INVALID, f"{MC0}.image")],
    ),
    case(
        "envsubst-image",
        job().master().workers(1, image="${REGISTRY}${IMAGE}:latest").build(),
        [(INVALID, f"{WC0}.image")],
    ),
    case(
        "upper-case-image",
        job().master(image="Ubuntu").workers(1).build(),
        [(INVALID, f"{MC0}.image")],
    ),
    case(
        "init-container-image",
        job()
        .master(pod_spec={"initContainers": [{"name": "i", "image": "${INIT}"}]})
        .workers(1)
        .build(),
        [(INVALID, f"{MPOD}.initContainers[0].image")],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), TEMPLATES)
def test_template_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_a_lone_angle_placeholder_image_is_refused_at_the_image() -> None:
    raw = job().master(image="<训练镜像>").workers(1).build()
    check(raw, DEFAULT_POLICY, [(INVALID, f"{MC0}.image")])


# ---------------------------------------------------------------------- rule 7: policy


def parsed(name: str, **spec: Any) -> PlacementPolicy:
    result, errors = parse_policy(policy(name, **spec))
    assert result is not None, errors
    return result


DATA_PATHS = parsed("data", allowedHostPaths=["/dev/shm", "/data"])
PRIVILEGED = parsed("priv", allowPrivileged=True)
HOSTS = parsed("hosts", allowedHosts=["node-a", "node-b"])
BUDGET = parsed("budget", maxGPUsPerJob=8)
KEEP_PODS = parsed("keep", allowCleanPodPolicyNone=True)
POOL = parsed("pool", nodeSelector={"pool": "gpu"})


def host_path_job(*paths: str) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "hostPath": {"path": p}} for i, p in enumerate(paths)]
    return job().master(pod_spec={"volumes": volumes}).workers(1).build()


POLICY = [
    case(
        "host-path-refused-by-default",
        host_path_job("/dev/shm", "/data/x"),
        [(FORBIDDEN, f"{MPOD}.volumes[0].hostPath"), (FORBIDDEN, f"{MPOD}.volumes[1].hostPath")],
    ),
    case(
        "host-path-allowed-by-prefix",
        host_path_job("/dev/shm", "/data/x"),
        [],
        DATA_PATHS,
    ),
    case(
        "host-path-outside-prefix",
        host_path_job("/database"),
        [(FORBIDDEN, f"{MPOD}.volumes[0].hostPath")],
        DATA_PATHS,
    ),
    case(
        "host-path-without-path",
        job().master(pod_spec={"volumes": [{"name": "v", "hostPath": {}}]}).workers(1).build(),
        [(REQUIRED, f"{MPOD}.volumes[0].hostPath.path")],
    ),
    case(
        "privileged-refused",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("securityContext"), {"privileged": True}))
        .build(),
        [(FORBIDDEN, f"{MC0}.securityContext.privileged")],
    ),
    case(
        "privileged-init-container-refused",
        job()
        .master(
            pod_spec={
                "initContainers": [
                    {"name": "i", "image": "busybox", "securityContext": {"privileged": True}}
                ]
            }
        )
        .workers(1)
        .build(),
        [(FORBIDDEN, f"{MPOD}.initContainers[0].securityContext.privileged")],
    ),
    case(
        "privileged-allowed",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("securityContext"), {"privileged": True}))
        .build(),
        [],
        PRIVILEGED,
    ),
    case(
        "pinned-host-not-allowed",
        cpu_job().hosts("node-a", "node-c").build(),
        [(NOT_SUPPORTED, "metadata.annotations[torchgate.io/hosts]")],
        HOSTS,
    ),
    case("pinned-hosts-allowed", cpu_job().hosts("node-a", "node-b").build(), [], HOSTS),
    case("pinned-hosts-without-a-list", cpu_job().hosts("any-node").build(), []),
    case(
        "pinned-host-malformed",
        cpu_job().hosts("Node_A").build(),
        [(INVALID, "metadata.annotations[torchgate.io/hosts]")],
    ),
    case(
        "gpu-budget-exceeded",
        job().master(gpus=4).workers(2, gpus=4).build(),
        [(FORBIDDEN, SPECS)],
        BUDGET,
    ),
    case("gpu-budget-met", job().master(gpus=4).workers(1, gpus=4).build(), [], BUDGET),
    case(
        "clean-pod-policy-none-refused",
        cpu_job().run_policy(cleanPodPolicy="None").build(),
        [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")],
    ),
    case(
        "clean-pod-policy-none-allowed",
        cpu_job().run_policy(cleanPodPolicy="None").build(),
        [],
        KEEP_PODS,
    ),
    case(
        "node-selector-conflicts-with-policy",
        job().master(pod_spec={"nodeSelector": {"pool": "cpu", "zone": "a"}}).workers(1).build(),
        [(INVALID, f"{MPOD}.nodeSelector[pool]")],
        POOL,
    ),
    case(
        "node-selector-agrees-with-policy",
        job().master(pod_spec={"nodeSelector": {"pool": "gpu"}}).workers(1).build(),
        [],
        POOL,
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), POLICY)
def test_policy_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


# ---------------------------------------------------------------------- malformed input

MALFORMED = [
    case(
        "metadata-not-an-object",
        cpu_job().edit(setting("metadata", "x")).build(),
        [(INVALID, "metadata")],
    ),
    case(
        "metadata-null",
        cpu_job().edit(setting("metadata", None)).build(),
        [(REQUIRED, "metadata.name")],
    ),
    case(
        "name-not-a-string",
        cpu_job().edit(setting("metadata", "name", 7)).build(),
        [(INVALID, "metadata.name")],
    ),
    case(
        "annotations-list",
        cpu_job().edit(setting("metadata", "annotations", [1])).build(),
        [(INVALID, "metadata.annotations")],
    ),
    case(
        "hosts-annotation-number",
        cpu_job().edit(setting("metadata", "annotations", {"torchgate.io/hosts": 5})).build(),
        [(INVALID, "metadata.annotations[torchgate.io/hosts]")],
    ),
    case("spec-string", cpu_job().edit(setting("spec", "x")).build(), [(INVALID, "spec")]),
    case(
        "containers-string",
        cpu_job().edit(setting(*master_pod("containers"), "x")).build(),
        [(INVALID, f"{MPOD}.containers")],
    ),
    case(
        "container-not-an-object",
        cpu_job().edit(setting(*master_pod("containers"), [container(), 3])).build(),
        [(INVALID, f"{MPOD}.containers[1]")],
    ),
    case(
        "template-string",
        cpu_job().edit(setting("spec", "pytorchReplicaSpecs", "Master", "template", "x")).build(),
        [(INVALID, f"{M}.template")],
    ),
    case(
        "pod-spec-number",
        cpu_job()
        .edit(setting("spec", "pytorchReplicaSpecs", "Master", "template", "spec", 1))
        .build(),
        [(INVALID, f"{M}.template.spec")],
    ),
    case(
        "env-string",
        cpu_job().edit(setting(*master_container("env"), "x")).build(),
        [(INVALID, f"{MC0}.env")],
    ),
    case(
        "env-entry-number",
        cpu_job().edit(setting(*master_container("env"), [1])).build(),
        [(INVALID, f"{MC0}.env[0]")],
    ),
    case(
        "env-without-name",
        cpu_job().edit(setting(*master_container("env"), [{"value": "x"}])).build(),
        [(REQUIRED, f"{MC0}.env[0].name")],
    ),
    case(
        "env-value-number",
        cpu_job().edit(setting(*master_container("env"), [{"name": "A", "value": 1}])).build(),
        [(INVALID, f"{MC0}.env[0].value")],
    ),
    case(
        "resources-string",
        cpu_job().edit(setting(*master_container("resources"), "x")).build(),
        [(INVALID, f"{MC0}.resources")],
    ),
    case(
        "limits-list",
        cpu_job().edit(setting(*master_container("resources"), {"limits": [1]})).build(),
        [(INVALID, f"{MC0}.resources.limits")],
    ),
    case(
        "args-string",
        cpu_job().edit(setting(*master_container("args"), "--epochs 1")).build(),
        [(INVALID, f"{MC0}.args")],
    ),
    case(
        "args-with-a-number",
        cpu_job().edit(setting(*master_container("args"), ["--epochs", 1])).build(),
        [(INVALID, f"{MC0}.args[1]")],
    ),
    case(
        "command-with-null",
        cpu_job().edit(setting(*master_container("command"), [None])).build(),
        [(INVALID, f"{MC0}.command[0]")],
    ),
    case(
        "image-number",
        cpu_job().edit(setting(*master_container("image"), 3)).build(),
        [(INVALID, f"{MC0}.image")],
    ),
    case(
        "volume-mounts-entry-number",
        cpu_job().edit(setting(*master_container("volumeMounts"), [1])).build(),
        [(INVALID, f"{MC0}.volumeMounts[0]")],
    ),
    case(
        "volume-mounts-string",
        cpu_job().edit(setting(*master_container("volumeMounts"), "x")).build(),
        [(INVALID, f"{MC0}.volumeMounts")],
    ),
    case(
        "volumes-string",
        cpu_job().edit(setting(*master_pod("volumes"), "x")).build(),
        [(INVALID, f"{MPOD}.volumes")],
    ),
    case(
        "volume-entry-number",
        cpu_job().edit(setting(*master_pod("volumes"), [1])).build(),
        [(INVALID, f"{MPOD}.volumes[0]")],
    ),
    case(
        "volume-names",
        cpu_job().edit(setting(*master_pod("volumes"), [{"emptyDir": {}}, VOLUME, VOLUME])).build(),
        [
            (REQUIRED, f"{MPOD}.volumes[0].name"),
            (DUPLICATE, f"{MPOD}.volumes[2].name"),
        ],
    ),
    case(
        "init-containers-object",
        cpu_job().edit(setting(*master_pod("initContainers"), {})).build(),
        [(INVALID, f"{MPOD}.initContainers")],
    ),
    case(
        "node-selector-list",
        cpu_job().edit(setting(*master_pod("nodeSelector"), [])).build(),
        [(INVALID, f"{MPOD}.nodeSelector")],
    ),
    case(
        "run-policy-list",
        cpu_job().edit(setting("spec", "runPolicy", [])).build(),
        [(INVALID, "spec.runPolicy")],
    ),
    case(
        "scheduling-policy-number",
        cpu_job().scheduling().edit(setting("spec", "runPolicy", "schedulingPolicy", 1)).build(),
        [(INVALID, "spec.runPolicy.schedulingPolicy")],
    ),
    case(
        "elastic-policy-string",
        cpu_job().edit(setting("spec", "elasticPolicy", "x")).build(),
        [(INVALID, "spec.elasticPolicy")],
    ),
    case(
        "suspend-string",
        cpu_job().run_policy(suspend="yes").build(),
        [(INVALID, "spec.runPolicy.suspend")],
    ),
    case(
        "rdzv-port-out-of-range",
        job().workers(1).elastic(rdzvPort=70000).build(),
        [(INVALID, "spec.elasticPolicy.rdzvPort")],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), MALFORMED)
def test_malformed_sections_are_errors(
    raw: Any, active_policy: PlacementPolicy, expected: Pairs
) -> None:
    check(raw, active_policy, expected)


@pytest.mark.parametrize("raw", [None, [], "job", 3], ids=["null", "list", "string", "number"])
def test_a_non_object_is_denied(raw: Any) -> None:
    assert not validate_create(raw, DEFAULT_POLICY).allowed


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FULL_JOB = (
    job()
    .master(gpus=1, args=["--backend", "nccl"], env={"A": "1"}, pod_spec={"volumes": [VOLUME]})
    .workers(2, gpus=1, command=["sh", "-c", "torchrun --nnodes=3 t.py"])
    .elastic(minReplicas=1, maxReplicas=3)
    .scheduling(minAvailable=3)
    .hosts("node-a")
    .build()
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(_paths(value, (*prefix, index)))
    return out


ALL_PATHS = _paths(FULL_JOB)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_PATHS), JSON)
def test_any_value_anywhere_never_raises(where: tuple[Any, ...], value: Any) -> None:
    raw = copy.deepcopy(FULL_JOB)
    setting(*where, value)(raw)
    verdict = validate_create(raw, DEFAULT_POLICY)
    assert all(str(error) for error in verdict.errors)  # every error renders


# ---------------------------------------------------------------------- ordering and warnings


def test_errors_come_in_a_stable_order() -> None:
    raw = (
        job("Bad_Name")
        .master(args=["--rank=0"], image="Ubuntu")
        .workers(1, key="Worker", args=["--rank=1"])
        .run_policy(cleanPodPolicy="Some")
        .edit(setting("spec", "pytorchReplicaSpecs", "Chief", {}))
        .build()
    )
    raw["spec"]["pytorchReplicaSpecs"] = {
        "Chief": raw["spec"]["pytorchReplicaSpecs"]["Chief"],
        "Worker": raw["spec"]["pytorchReplicaSpecs"]["Worker"],
        "Master": raw["spec"]["pytorchReplicaSpecs"]["Master"],
    }
    assert pairs(validate_create(raw, DEFAULT_POLICY)) == [
        (INVALID, "metadata.name"),
        (NOT_SUPPORTED, "spec.runPolicy.cleanPodPolicy"),
        (INVALID, f"{MC0}.image"),
        (FORBIDDEN, f"{MC0}.args"),
        (FORBIDDEN, f"{WC0}.args"),
        (NOT_SUPPORTED, f"{SPECS}[Chief]"),
    ]


def test_repeated_errors_are_reported_once() -> None:
    raw = job().master(args=["--rank=0", "--rank=0"]).workers(1).build()
    assert pairs(validate_create(raw, DEFAULT_POLICY)) == [(FORBIDDEN, f"{MC0}.args")]


def test_every_warning_names_its_field_path() -> None:
    raw = (
        job()
        .master(gpus=1, args=["--backend", "gloo"])
        .workers(2, gpus=1, command=torchrun("--nnodes=3", "--nproc_per_node=1"))
        .elastic(nProcPerNode=1, minReplicas=3, maxReplicas=3)
        .build()
    )
    verdict = validate_create(raw, DEFAULT_POLICY)
    assert verdict.allowed
    expected_paths = [
        "spec.elasticPolicy.nProcPerNode",
        f"{MC0}.args",
        f"{WC0}.command",
        f"{WC0}.command",
    ]
    assert warned(verdict) == expected_paths
    assert [w.render() for w in verdict.warnings] == [
        f"torchgate: {w.path}: {w.text}" for w in verdict.warnings
    ]


# ---------------------------------------------------------------------- updates


def managed(raw: dict[str, Any], value: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["spec"].setdefault("runPolicy", {})["managedBy"] = value
    return raw


def test_update_changing_managed_by_is_denied() -> None:
    old = managed(cpu_job().build(), "kubeflow.org/training-operator")
    new = managed(old, "kueue.x-k8s.io/multikueue")
    verdict = validate_update(old, new, DEFAULT_POLICY)
    assert pairs(verdict) == [(INVALID, "spec.runPolicy.managedBy")]


def test_update_setting_managed_by_is_denied() -> None:
    old = cpu_job().build()
    new = managed(old, "kueue.x-k8s.io/multikueue")
    assert pairs(validate_update(old, new, DEFAULT_POLICY)) == [
        (INVALID, "spec.runPolicy.managedBy")
    ]


def test_update_keeping_managed_by_is_allowed() -> None:
    old = managed(cpu_job().build(), "kueue.x-k8s.io/multikueue")
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    assert validate_update(old, new, DEFAULT_POLICY).allowed


def test_metadata_only_update_of_an_old_invalid_job_is_allowed() -> None:
    old = job().master(args=["--world-size=16"]).workers(1).build()
    old["metadata"].update(resourceVersion="7", uid="u-1")
    old["status"] = {"conditions": [{"type": "Running"}]}
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "a"}
    new["metadata"]["finalizers"] = ["x/y"]
    verdict = validate_update(old, new, DEFAULT_POLICY)
    assert (verdict.errors, verdict.warnings) == ((), ())


def test_spec_update_runs_the_create_rules_except_create_only() -> None:
    old = job().master(args=["--world-size=16"]).workers(1).build()
    old["metadata"].update(resourceVersion="7", uid="u-1")
    old["status"] = {"conditions": [{"type": "Running"}]}
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    assert pairs(validate_update(old, new, DEFAULT_POLICY)) == [(FORBIDDEN, f"{MC0}.args")]


def test_changing_pinned_hosts_revalidates() -> None:
    old = cpu_job().hosts("node-a").build()
    new = cpu_job().hosts("node-c").build()
    verdict = validate_update(old, new, HOSTS)
    assert pairs(verdict) == [(NOT_SUPPORTED, "metadata.annotations[torchgate.io/hosts]")]


def test_update_from_a_malformed_old_object_validates_the_new_one() -> None:
    new = job().master(args=["--rank=0"]).workers(1).build()
    new["metadata"]["resourceVersion"] = "7"  # normal on UPDATE: not the create-only rule
    assert pairs(validate_update(None, new, DEFAULT_POLICY)) == [(FORBIDDEN, f"{MC0}.args")]  # type: ignore[arg-type]

"""The verdict, with its reason, for every seed and real-world PyTorchJob manifest.

The manifests live in the ``shared`` folder beside the repository (CI clones it there). They are
validated raw, as the user wrote them: in a cluster the mutating webhook runs first, but it only
normalises keys and adds defaults, never fixing an error, so the reasons below hold there too.
Fields the CRD does not declare are not among them: the apiserver refuses them (kubectl's strict
field validation) or drops them before the webhook is asked, and ``torchgate check`` says so.
Where torchgate disagrees with ``realworld/SOURCES.md`` the case id says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.validation import validate_create

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
FIXTURE_GLOBS = ("seeds/manifests/*.yaml", "realworld/*.yaml")

REQUIRED = ErrorType.REQUIRED
INVALID = ErrorType.INVALID
FORBIDDEN = ErrorType.FORBIDDEN
NOT_FOUND = ErrorType.NOT_FOUND

M = "spec.pytorchReplicaSpecs[Master]"
W = "spec.pytorchReplicaSpecs[Worker]"
MPOD = f"{M}.template.spec"
WPOD = f"{W}.template.spec"
MC0 = f"{MPOD}.containers[0]"
WC0 = f"{WPOD}.containers[0]"
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Expected:
    """The verdict on a manifest; ``reasons`` must all be among its errors."""

    allowed: bool
    reasons: tuple[tuple[ErrorType, str], ...] = ()
    warnings: tuple[str, ...] = ()  # field paths some warning must name
    exact: bool = False  # the reasons are the complete error list


def allowed(*warnings: str) -> Expected:
    return Expected(True, warnings=warnings)


def denied(*reasons: tuple[ErrorType, str], warnings: tuple[str, ...] = ()) -> Expected:
    return Expected(False, reasons, warnings)


def host_paths(pod: str, *indexes: int) -> tuple[tuple[ErrorType, str], ...]:
    return tuple((FORBIDDEN, f"{pod}.volumes[{i}].hostPath") for i in indexes)


SEED_002 = Expected(
    False,
    (
        (REQUIRED, f"{MPOD}.containers"),  # containers are named cuda1: none is "pytorch"
        *host_paths(MPOD, 0, 1, 2, 3, 4),
        (FORBIDDEN, f"{MC0}.args"),  # --world-size=16
        (FORBIDDEN, f"{MC0}.env[2]"),  # NVIDIA_VISIBLE_DEVICES=all without a GPU request
        (REQUIRED, f"{WPOD}.containers"),
        *host_paths(WPOD, 0, 1, 2, 3, 4),
        (FORBIDDEN, f"{WC0}.args"),
        (FORBIDDEN, f"{WC0}.env[2]"),
        (REQUIRED, f"{WC0}.volumeMounts[5].mountPath"),  # NCCL_DEBUG pasted under volumeMounts
        (NOT_FOUND, f"{WC0}.volumeMounts[5].name"),
        (REQUIRED, f"{WC0}.volumeMounts[6].mountPath"),  # LD_PRELOAD likewise
        (NOT_FOUND, f"{WC0}.volumeMounts[6].name"),
    ),
    exact=True,
)

EXPECTED: dict[str, Expected] = {
    # --- seeds
    # <训练镜像> is a placeholder the user was told to replace (issue 15: refused, was a warning)
    "seeds/manifests/000-pytorch-dist-mnist-nccl.yaml": Expected(
        False, ((INVALID, f"{MC0}.image"), (INVALID, f"{WC0}.image")), exact=True
    ),
    "seeds/manifests/002-resnet50-nccl-rdma-16.yaml": SEED_002,
    "seeds/manifests/003-torchrun-cpu.yaml": allowed(),
    "seeds/manifests/004-pytorch-simple.yaml": allowed(),
    # --- real world: fine as published
    "realworld/001-to-simple.yaml": allowed(),
    "realworld/002-to-cpu-demo-torchrun.yaml": allowed(),
    "realworld/003-to-deepspeed-demo.yaml": allowed(),
    "realworld/004-to-elastic-echo.yaml": allowed(),
    "realworld/005-to-elastic-imagenet-hpa.yaml": allowed(),
    "realworld/006-to-mnist-gloo.yaml": allowed(f"{MC0}.args", f"{WC0}.args"),  # gloo on GPUs
    "realworld/007-to-mnist-nccl.yaml": allowed(),
    "realworld/008-to-mnist-mpi.yaml": allowed(),  # mpi backend: a runtime question, not ours
    "realworld/009-to-smoke-sendrecv.yaml": allowed(),
    "realworld/012-kueue-sample-pytorchjob.yaml": allowed(),
    "realworld/013-kai-nccl-queue-label.yaml": allowed(),
    "realworld/016-awsdoeks-mnist-affinity.yaml": allowed(),
    "realworld/017-awsdoeks-elastic-etcd-cpu.yaml": allowed(),
    "realworld/024-kfmanifests-e2e-istio-label-cpu.yaml": allowed(),
    "realworld/026-itwinai-torchrun-cpu-nproc.yaml": allowed(),
    "realworld/027-sutaakar-sdk-generated-kueue-suspend-false.yaml": allowed(),
    "realworld/040-rahul-4space-indent-master-only.yaml": allowed(),
    "realworld/042-kai-early-runai-queue-gloo-gpu.yaml": allowed(f"{MC0}.args", f"{WC0}.args"),
    "realworld/044-mlbatch-kueue-cpu-100m.yaml": allowed(),
    # imagePullPolicy beside replicas, a field the CRD does not declare: the apiserver refuses
    # it (kubectl's strict validation) or drops it (Warn, Ignore) before the webhook is asked,
    # and torchgate check refuses the file (tests/unit/webhook/test_check.py).
    "realworld/010-po-bert-istio.yaml": allowed(),
    # --- real world: broken at admission
    "realworld/020-adt-nsight-fsdp-efa-null-gpu.yaml": denied(
        (INVALID, f"{WC0}.resources.limits[{GPU}]"),  # "nvidia.com/gpu:" is null
        (INVALID, f"{WC0}.resources.requests[{GPU}]"),
        (INVALID, f"{WC0}.command"),  # --nnodes=2 against elastic 1:96
        *host_paths(WPOD, 0),  # hostPath /dev/shm
    ),
    "realworld/021-adt-llama3-fsdp-envsubst.yaml": denied(
        (INVALID, f"{W}.replicas"),  # "$NUM_NODES"
        (INVALID, f"{WC0}.resources.requests[{GPU}]"),  # "$GPU_PER_NODE"
        (INVALID, f"{WC0}.resources.requests[vpc.amazonaws.com/efa]"),
        (INVALID, f"{WC0}.image"),  # ${IMAGE_URI}
        *host_paths(WPOD, 0, 1),
    ),
    "realworld/022-adt-neuronx-llama3-template.yaml": denied(
        (INVALID, f"{WC0}.resources.requests[aws.amazon.com/neuron]"),  # ${NEURON_PER_NODE}
        (INVALID, f"{WC0}.resources.requests[vpc.amazonaws.com/efa]"),
        (INVALID, f"{WC0}.image"),
        *host_paths(WPOD, 0, 2, 3),
    ),
    "realworld/023-adt-ddp-cpu-etcd-template.yaml": denied(
        (INVALID, f"{W}.replicas"), (INVALID, f"{WC0}.image"), *host_paths(WPOD, 0, 1)
    ),
    "realworld/025-kfwebsite-status-output-cleanpodpolicy.yaml": denied(
        (FORBIDDEN, "metadata.resourceVersion"),
        (FORBIDDEN, "metadata.uid"),
        (FORBIDDEN, "status"),
    ),
    "realworld/037-to-kubebuilder-scaffold-sample.yaml": denied(
        (REQUIRED, "spec.pytorchReplicaSpecs")
    ),
    # --- real world: unfilled image placeholders (InvalidImageName at runtime upstream)
    "realworld/011-po-mnist-gloo-istio-placeholder.yaml": denied(
        (INVALID, f"{MC0}.image"), (INVALID, f"{WC0}.image"), warnings=(f"{MC0}.args",)
    ),
    "realworld/018-awsdoeks-mnist-nccl-envsubst.yaml": denied(
        (INVALID, f"{MC0}.image"), (INVALID, f"{WC0}.image")
    ),
    # --- real world: runnable upstream, denied by torchgate
    "realworld/019-adt-hyperpod-kueue-elastic-multidoc.yaml": denied(
        (INVALID, f"{WC0}.command"),  # torchrun --nnodes=3 overrides PET_NNODES=1:36
        warnings=(f"{WC0}.command",),  # --nproc_per_node=1 repeats the GPU count
    ),
}

CASE_IDS = {
    "seeds/manifests/000-pytorch-dist-mnist-nccl.yaml": "seed-000-denied-placeholder-image",
    "seeds/manifests/002-resnet50-nccl-rdma-16.yaml": "seed-002-denied-stray-args-env-mounts-gpu",
    "realworld/010-po-bert-istio.yaml": "010-allowed-its-unknown-replica-field-never-reaches-it",
    "realworld/011-po-mnist-gloo-istio-placeholder.yaml": "011-denied-image-placeholder",
    "realworld/018-awsdoeks-mnist-nccl-envsubst.yaml": "018-denied-image-placeholder",
    "realworld/019-adt-hyperpod-kueue-elastic-multidoc.yaml": (
        "019-denied-not-upstream-nnodes-contradicts-elastic-range"
    ),
    "realworld/020-adt-nsight-fsdp-efa-null-gpu.yaml": (
        "020-denied-null-gpu-plus-not-upstream-nnodes-and-default-policy-hostpath"
    ),
    "realworld/021-adt-llama3-fsdp-envsubst.yaml": "021-denied-envsubst-replicas-quantities",
    "realworld/022-adt-neuronx-llama3-template.yaml": "022-denied-envsubst-quantities",
    "realworld/023-adt-ddp-cpu-etcd-template.yaml": "023-denied-envsubst-replicas",
    "realworld/025-kfwebsite-status-output-cleanpodpolicy.yaml": "025-denied-get-output",
    "realworld/037-to-kubebuilder-scaffold-sample.yaml": "037-denied-no-replica-specs",
}


def pytorch_jobs(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as stream:
        return [
            doc
            for doc in yaml.safe_load_all(stream)
            if isinstance(doc, dict) and doc.get("kind") == "PyTorchJob"
        ]


def case_id(name: str) -> str:
    return CASE_IDS.get(name) or Path(name).stem.split("-")[0] + (
        "-allowed" if EXPECTED[name].allowed else "-denied"
    )


@pytest.mark.parametrize(
    ("name", "expected"), [pytest.param(n, e, id=case_id(n)) for n, e in EXPECTED.items()]
)
def test_fixture_verdict(name: str, expected: Expected) -> None:
    jobs = pytorch_jobs(SHARED / name)
    assert jobs, f"{name} holds no PyTorchJob"
    for raw in jobs:
        verdict = validate_create(raw, DEFAULT_POLICY)
        found = [(error.type, error.field) for error in verdict.errors]
        assert verdict.allowed is expected.allowed, found
        if expected.exact:
            assert found == list(expected.reasons)
        else:
            assert [reason for reason in expected.reasons if reason not in found] == []
        for path in expected.warnings:
            assert path in [str(w.path) for w in verdict.warnings], verdict.warnings


def test_every_fixture_has_an_expected_verdict() -> None:
    present = {
        path.relative_to(SHARED).as_posix()
        for pattern in FIXTURE_GLOBS
        for path in SHARED.glob(pattern)
        if pytorch_jobs(path)
    }
    assert present == set(EXPECTED)

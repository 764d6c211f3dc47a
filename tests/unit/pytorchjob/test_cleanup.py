"""``pytorchjob.cleanup``: which pods ``cleanPodPolicy: None`` keeps when a job ends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.claims import (
    GPU_CLASS,
    claim_refs,
    claim_template,
    claiming_pod,
    device_request,
    seen,
)
from tests.builders.job import container
from torchgate.pytorchjob import cleanup
from torchgate.pytorchjob.devices import RESOURCE_CLAIM_TEMPLATE
from torchgate.pytorchjob.policy import PlacementPolicy

GPU = "nvidia.com/gpu"


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"containers": list(containers), **spec}


@pytest.mark.parametrize(
    ("pod_spec", "holds"),
    [
        (pod(container()), False),
        (pod(container(gpus=1)), True),
        (pod(container(gpus="0")), False),
        (pod(container(requests={GPU: "2"}, limits={GPU: "2"})), True),
        (pod(container(gpus=1, gpu_resource="amd.com/gpu")), False),
        (pod(container(), container(name="sidecar", gpus=1)), True),
        (pod(container(), initContainers=[container(name="warm-up", gpus=1)]), True),
        (pod(container(), overhead={GPU: "1"}), True),
        (pod(container(gpus="lots")), False),
        ({}, False),
    ],
    ids=[
        "no-resources",
        "limit",
        "zero",
        "request-and-limit",
        "another-resource",
        "sidecar",
        "init-container",
        "overhead",
        "unparseable",
        "no-containers",
    ],
)
def test_a_pod_holds_accelerators_when_the_scheduler_reserves_some_for_it(
    pod_spec: dict[str, Any], holds: bool
) -> None:
    assert cleanup.holds_accelerators(pod_spec, gpus=GPU) is holds


@pytest.mark.parametrize(
    ("declared", "gpus", "allow_none", "effective"),
    [
        ("None", 0, False, "None"),
        ("None", 1, False, "Running"),
        ("None", 1, True, "None"),
        ("Running", 1, False, "Running"),
        ("All", 0, False, "All"),
        ("All", 1, True, "All"),
    ],
    ids=[
        "none-without-gpus-is-kept",
        "none-with-gpus-acts-as-running",
        "none-with-gpus-allowed",
        "running-as-written",
        "all-as-written",
        "all-as-written-when-none-is-allowed",
    ],
)
def test_none_acts_as_running_only_for_pods_with_accelerators_the_policy_does_not_let_keep(
    declared: str, gpus: int, allow_none: bool, effective: str
) -> None:
    pod_spec = pod(container(gpus=gpus or None))
    assert (
        cleanup.clean_pod_policy_for(declared, pod_spec, gpus=GPU, allow_none=allow_none)
        == effective
    )


def test_the_replicas_not_kept_are_those_with_accelerators_in_the_order_given() -> None:
    specs = [
        ("Worker", pod(container(gpus=1))),
        ("Master", pod(container())),
        ("Extra", pod(container(gpus=2))),
    ]
    assert cleanup.replicas_not_kept("None", specs, gpus=GPU, allow_none=False) == (
        "Worker",
        "Extra",
    )
    assert cleanup.replicas_not_kept("None", specs, gpus=GPU, allow_none=True) == ()
    assert cleanup.replicas_not_kept("Running", specs, gpus=GPU, allow_none=False) == ()


def test_a_pod_claiming_gpus_holds_accelerators_when_the_policy_counts_claims() -> None:
    claims = seen(claim_template("eight", device_request(count=8)))
    pod_spec = {
        **claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "eight")),
        "containers": [{"name": "pytorch", "resources": claim_refs("gpus")}],
    }
    dra = PlacementPolicy(gpu_device_classes=(GPU_CLASS,)).gpus(claims)
    assert cleanup.holds_accelerators(pod_spec, gpus=dra, claims=claims)
    assert not cleanup.holds_accelerators(pod_spec, gpus=GPU, claims=claims)

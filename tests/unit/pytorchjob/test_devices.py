"""``pytorchjob.devices``: the one GPU count (extended resources and DRA claims)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.builders.claims import (
    GPU_CLASS,
    claim_refs,
    claim_template,
    claiming_pod,
    device_class,
    device_request,
    resource_claim,
    seen,
)
from tests.builders.job import container
from tests.builders.policy import parsed_policy, policy
from torchgate.pytorchjob.devices import (
    NO_CLAIMS,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    ConfirmedClaims,
    GpuSources,
    SeenClaims,
    claim_gpus,
    container_gpus,
    gpu_sources,
    pod_gpus,
    replica_gpus,
    request_gpus,
    unseen_sources,
)
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import parse_policy
from torchgate.pytorchjob.units import pod_units

GPU = "nvidia.com/gpu"
DRA = GpuSources(GPU, class_keys={GPU_CLASS: GPU})


def _pod(template: str = "eight", *, refs: bool = True, **extra: Any) -> dict[str, Any]:
    pytorch = container()
    if refs:
        pytorch["resources"] = claim_refs("gpus")
    return {
        **claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, template)),
        "containers": [pytorch],
        **extra,
    }


EIGHT = seen(claim_template("eight", device_request(count=8)))


def test_without_gpu_device_classes_no_claim_counts() -> None:
    sources = gpu_sources(GPU, (), {GPU_CLASS: GPU})
    assert not sources.counts_claims
    assert pod_gpus(_pod(), sources, EIGHT) == 0
    assert parsed_policy().gpus(EIGHT) == GpuSources(GPU)


def test_a_device_class_serving_the_gpu_resource_counts_once_classes_are_listed() -> None:
    sources = gpu_sources(GPU, ("other.example.com",), {"served": GPU, "x": "example.com/gpu"})
    assert sources.device_classes == {"other.example.com", "served"}
    assert sources.resources == {GPU}


def test_extended_resources_of_gpu_classes_count_as_gpus() -> None:
    sources = gpu_sources(GPU, (GPU_CLASS,), {GPU_CLASS: "example.com/gpu"})
    assert sources.resources == {GPU, "example.com/gpu"}
    pod = {"containers": [container(gpus=8, gpu_resource="example.com/gpu")]}
    assert pod_gpus(pod, sources) == 8


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (device_request(count=8), 8),
        (device_request(), 1),  # ExactCount with no count: one device
        (device_request(count=4, mode="ExactCount"), 4),
        (device_request(mode="All"), None),
        (device_request(count=8, device_class="nic.example.com"), 0),
        ({"name": "x", "firstAvailable": [{"name": "a", "deviceClassName": GPU_CLASS}]}, None),
        ({"name": "x", "firstAvailable": [{"name": "a", "deviceClassName": "nic"}]}, 0),
        ("not a request", 0),
    ],
)
def test_a_device_request_counts_its_exact_gpus(request_: Any, expected: int | None) -> None:
    assert request_gpus(request_, DRA) == expected


def test_a_claim_counts_all_its_requests_or_the_named_one() -> None:
    spec = {"devices": {"requests": [device_request("a", count=2), device_request("b", count=4)]}}
    assert claim_gpus(spec, DRA) == 6
    assert claim_gpus(spec, DRA, "b") == 4
    unknown = {"devices": {"requests": [device_request("a", count=2), device_request(mode="All")]}}
    assert claim_gpus(unknown, DRA) is None


def test_a_pod_counts_its_claims_whether_or_not_a_container_names_them() -> None:
    assert pod_gpus(_pod(), DRA, EIGHT) == 8
    assert pod_gpus(_pod(refs=False), DRA, EIGHT) == 8


def test_a_container_counts_the_claims_it_names() -> None:
    pod = _pod()
    assert container_gpus(pod["containers"][0], pod, DRA, EIGHT) == 8
    unnamed = _pod(refs=False)
    assert container_gpus(unnamed["containers"][0], unnamed, DRA, EIGHT) == 0


def test_a_shared_claim_counts_like_a_template() -> None:
    pod = {
        **claiming_pod(("gpus", RESOURCE_CLAIM, "shared")),
        "containers": [{**container(), "resources": claim_refs("gpus")}],
    }
    assert pod_gpus(pod, DRA, seen(resource_claim("shared", device_request(count=2)))) == 2


def test_an_unseen_template_counts_nothing() -> None:
    assert pod_gpus(_pod("missing"), DRA, EIGHT) == 0
    assert pod_gpus(_pod(), DRA, NO_CLAIMS) == 0


def test_extended_and_claimed_gpus_add_up() -> None:
    pod = _pod()
    pod["containers"][0]["resources"]["limits"] = {GPU: 2}
    assert pod_gpus(pod, DRA, EIGHT) == Decimal(10)


@pytest.mark.parametrize(
    ("sources", "claims"),
    [(GpuSources(GPU), NO_CLAIMS), (DRA, EIGHT), (DRA, NO_CLAIMS)],
    ids=["plain", "claims-seen", "claims-unseen"],
)
def test_replica_gpus_is_pod_gpus_and_the_first_container_with_gpus(
    sources: GpuSources, claims: SeenClaims
) -> None:
    sidecar = container(name="sidecar")
    extended = container(name="ext", gpus=2)
    pod = _pod()
    pod["containers"] = [sidecar, "not an object", extended, *pod["containers"]]
    first = next(
        index
        for index, entry in enumerate(pod["containers"])
        if isinstance(entry, dict) and container_gpus(entry, pod, sources, claims) != 0
    )
    assert replica_gpus(pod, sources, claims) == (pod_gpus(pod, sources, claims), first)
    assert replica_gpus({"containers": [sidecar]}, sources, claims) == (0, None)


def test_replica_gpus_of_an_unknown_claimed_count_is_unknown() -> None:
    pod = _pod("all")
    all_devices = seen(claim_template("all", device_request(mode="All")))
    assert replica_gpus(pod, DRA, all_devices) == (None, 0)


def test_pod_units_weigh_claimed_gpus_under_the_gpu_resource() -> None:
    assert pod_units(_pod(), DRA, EIGHT)[GPU] == 8000
    assert GPU not in pod_units(_pod(), GpuSources(GPU), EIGHT)


def test_device_classes_seen_map_to_their_extended_resource() -> None:
    lookup = seen(device_class(GPU_CLASS, "example.com/gpu"), device_class("nic.example.com"))
    assert lookup.class_resources == {GPU_CLASS: "example.com/gpu", "nic.example.com": None}


def test_the_policy_lists_gpu_device_classes() -> None:
    listed = parsed_policy(gpuDeviceClasses=[GPU_CLASS])
    assert listed.gpus(EIGHT) == DRA
    _, errors = parse_policy(policy(gpuDeviceClasses=GPU_CLASS))
    assert [(e.type, e.field) for e in errors] == [(ErrorType.INVALID, "spec.gpuDeviceClasses")]


def _job_claiming(*claims: tuple[str, str, str]) -> dict[str, Any]:
    pod = {"template": {"spec": claiming_pod(*claims)}}
    return {"spec": {"pytorchReplicaSpecs": {"Master": pod, "Worker": pod}}}


def test_sources_a_listed_lookup_misses_are_named_once_in_order() -> None:
    raw = _job_claiming(
        ("a", RESOURCE_CLAIM_TEMPLATE, "missing"),
        ("b", RESOURCE_CLAIM_TEMPLATE, "eight"),
        ("c", RESOURCE_CLAIM, "gone"),
    )
    assert unseen_sources(raw, EIGHT) == [
        (RESOURCE_CLAIM_TEMPLATE, "missing"),
        (RESOURCE_CLAIM, "gone"),
    ]
    assert unseen_sources(raw, SeenClaims(complete=False)) == []  # not listed: none is missing


def test_confirmed_claims_answer_with_what_the_live_read_found() -> None:
    found = {(RESOURCE_CLAIM_TEMPLATE, "late"): {"devices": {"requests": []}}}
    confirmed = ConfirmedClaims(EIGHT, found, complete=True)
    assert confirmed.spec(RESOURCE_CLAIM_TEMPLATE, "late") == {"devices": {"requests": []}}
    assert confirmed.spec(RESOURCE_CLAIM_TEMPLATE, "eight") == EIGHT.spec(
        RESOURCE_CLAIM_TEMPLATE, "eight"
    )
    assert confirmed.spec(RESOURCE_CLAIM_TEMPLATE, "nowhere") is None

"""The admitter plans claimed GPUs on DRA nodes: capacity from ResourceSlices (``slices``).

A node publishing 8 GPUs in a ResourceSlice lists none in its allocatable; a gang whose pods each
claim 8 GPUs is placed there, waits when it does not fit, and stays off a tainted device's node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.builders.claims import (
    DRIVER,
    GPU_CLASS,
    allocated_claim,
    claim_refs,
    claim_template,
    claiming_pod,
    device_request,
    resource_slice,
    seen,
)
from tests.builders.job import container, job, parsed_job, with_uid
from tests.builders.node import node
from tests.builders.pod import pod
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.forecasting import job_outlook
from torchgate.controller.admission.nodes import job_demands
from torchgate.controller.admission.slices import free_devices
from torchgate.controller.admission.waiting import GangRequest
from torchgate.pytorchjob import names
from torchgate.pytorchjob.devices import RESOURCE_CLAIM_TEMPLATE, ClaimLookup, GpuSources
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.pytorchjob.pool import gang_usage

GPU = "nvidia.com/gpu"
ALONE = "#1 of 1 in the pool, nothing ahead: "  # the place a lone waiting job is told
POLICY = PlacementPolicy(name="dra", gpu_device_classes=(GPU_CLASS,))
CLAIMS = seen(claim_template("eight", device_request(count=8)))
SOURCES = POLICY.gpus(CLAIMS)
KEYS = {DRIVER: frozenset({GPU})}


def dra_job(name: str, workers: int) -> dict[str, Any]:
    pytorch = container(args=["--backend", "nccl"])
    pytorch["resources"] = claim_refs("gpus")
    pod_spec = claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "eight"))
    return job(name).workers(workers, containers=[pytorch], pod_spec=pod_spec).build()


def admitter_with(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]] = (),  # type: ignore[assignment]
    claims_for: Callable[[str], ClaimLookup] = lambda namespace: CLAIMS,
) -> Admitter:
    admitter = Admitter(
        on_admit_job=lambda key: None,
        on_reason=lambda key: None,
        claims_for=claims_for,
        device_capacity=lambda counted: free_devices(
            slices, claims, {DRIVER: frozenset({GPU})}, counted
        ),
    )
    for name in ("dra-0", "dra-1"):
        admitter.on_node("ADDED", node(name, gpus=0), None)
    return admitter


def gang_request(raw: dict[str, Any], sources: GpuSources, claims: ClaimLookup) -> GangRequest:
    spec = parsed_job(with_uid(raw, uid=f"uid-{raw['metadata']['name']}"))
    return GangRequest(
        uid=spec.uid,
        demands=job_demands(spec, sources, claims),
        min_count=spec.min_available,
        usage=gang_usage(spec, sources, claims),
        priority=0,
        created="2026-01-01T00:00:00Z",
        gpus=sources,
    )


def ask(admitter: Admitter, raw: dict[str, Any]) -> tuple[str, str]:
    key = (raw["metadata"]["namespace"], raw["metadata"]["name"])
    admitter.request(key, gang_request(raw, SOURCES, CLAIMS))
    return key


def test_a_claiming_gang_is_placed_on_the_nodes_whose_slices_have_the_gpus() -> None:
    admitter = admitter_with([resource_slice("dra-0", 8), resource_slice("dra-1", 8)])
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == [key]
    assert sorted((admitter.reservation_for(key, "uid-a") or {}).values()) == ["dra-0", "dra-1"]


def test_a_gang_that_does_not_fit_waits_for_gpus() -> None:
    admitter = admitter_with([resource_slice("dra-0", 8), resource_slice("dra-1", 8)])
    admitter.on_pod("ADDED", pod("holder", node="dra-1", gpus=4), None)  # 16 when empty
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []
    assert admitter.wait_reason(key) == f"{ALONE}waiting for 16 {GPU} in the cluster: 12 free"


def test_without_slices_a_claiming_gang_waits() -> None:
    admitter = admitter_with([])
    key = ask(admitter, dra_job("a", 1))
    assert admitter.cycle() == []
    assert admitter.wait_kind(key) == "Capacity"


def test_allocated_devices_are_not_offered_again() -> None:
    taken = [allocated_claim("dra-0", 0, 1, 2, 3)]
    admitter = admitter_with([resource_slice("dra-0", 8), resource_slice("dra-1", 8)], taken)
    key = ask(admitter, dra_job("a", 1))
    assert admitter.cycle() == [key]
    assert list((admitter.reservation_for(key, "uid-a") or {}).values()) == ["dra-1"]


def test_a_tainted_device_keeps_the_gang_off_its_node() -> None:
    tainted = resource_slice("dra-0", 8, taints={3: [{"key": "xid", "effect": "NoSchedule"}]})
    admitter = admitter_with([tainted, resource_slice("dra-1", 8)])
    first = ask(admitter, dra_job("a", 1))
    assert admitter.cycle() == [first]
    assert list((admitter.reservation_for(first, "uid-a") or {}).values()) == ["dra-1"]
    second = ask(admitter, dra_job("b", 1))
    assert admitter.cycle() == []
    assert admitter.wait_kind(second) == "Capacity"


def running_pod(name: str, node_name: str) -> dict[str, Any]:
    """A torchgate pod of job ``a`` on ``node_name`` claiming eight GPUs through the template."""
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {names.LABEL_OPERATOR_NAME: names.OPERATOR_NAME, names.LABEL_JOB_NAME: "a"},
        },
        "spec": {
            "nodeName": node_name,
            **claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "eight")),
            "containers": [{"name": "pytorch", "resources": claim_refs("gpus")}],
        },
        "status": {"phase": "Running"},
    }


def test_a_running_pods_claimed_gpus_count_once() -> None:
    claims = [allocated_claim("dra-0", *range(8), owner="a-worker-0")]
    admitter = admitter_with([resource_slice("dra-0", 16)], claims)
    admitter.note(("default", "a"), priority=0, gpus=SOURCES)
    admitter.on_pod("ADDED", running_pod("a-worker-0", "dra-0"), None)
    admitter.cycle()
    assert admitter.ledger.free()["dra-0"][GPU] == 8000
    (gang,) = admitter.ledger.holding({}, 0.0)
    assert gang.usage["gpus"] == 8000


# The capacity view is kept across cycles: a change of slices, claims or device taints must reach
# the next cycle as a change of the nodes whose free devices it changed.


def test_a_slice_change_is_seen_by_the_next_cycle() -> None:
    slices = [resource_slice("dra-0", 8), resource_slice("dra-1", 4)]
    admitter = admitter_with(slices)
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []  # 12 free: the view is built and kept
    slices[1] = resource_slice("dra-1", 8, generation=2)
    assert admitter.cycle() == [key]


def test_a_claim_change_is_seen_by_the_next_cycle() -> None:
    claims = [allocated_claim("dra-1", *range(8))]
    admitter = admitter_with([resource_slice("dra-0", 8), resource_slice("dra-1", 8)], claims)
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []
    claims.clear()  # the claim is deallocated
    assert admitter.cycle() == [key]
    assert sorted((admitter.reservation_for(key, "uid-a") or {}).values()) == ["dra-0", "dra-1"]


def test_a_new_device_taint_is_seen_by_the_next_cycle() -> None:
    slices = [resource_slice("dra-0", 8), resource_slice("dra-1", 8)]
    admitter = admitter_with(slices)
    large = ask(admitter, dra_job("large", 3))
    assert admitter.cycle() == []  # 24 GPUs of 16: the view is built and kept
    admitter.on_node("ADDED", node("full", gpus=8), None)  # the cluster holds 16 when empty
    admitter.on_pod("ADDED", pod("holder", node="full", gpus=8), None)
    slices[1] = resource_slice("dra-1", 8, taints={0: [{"key": "xid", "effect": "NoExecute"}]})
    admitter.cancel(large)
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []
    assert admitter.wait_reason(key) == f"{ALONE}waiting for 16 {GPU} in the cluster: 15 free"


def test_a_lifted_device_taint_is_seen_by_the_next_cycle() -> None:
    taint = {0: [{"key": "xid", "effect": "NoSchedule"}]}
    slices = [resource_slice("dra-0", 8), resource_slice("dra-1", 8, taints=taint)]
    admitter = admitter_with(slices)
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []
    slices[1] = resource_slice("dra-1", 8)
    assert admitter.cycle() == [key]


def test_claims_seen_after_a_running_pod_count_its_gpus_from_then_on() -> None:
    seen_now = [seen(complete=False)]  # the claim caches have not listed when the pod is seen
    claims = [allocated_claim("dra-0", *range(8), owner="a-worker-0")]
    admitter = admitter_with(
        [resource_slice("dra-0", 16)], claims, claims_for=lambda namespace: seen_now[0]
    )
    admitter.note(("default", "a"), priority=0, gpus=SOURCES)
    admitter.on_pod("ADDED", running_pod("a-worker-0", "dra-0"), None)
    admitter.cycle()
    (gang,) = admitter.ledger.holding({}, 0.0)
    assert gang.usage.get("gpus", 0) == 0
    seen_now[0] = CLAIMS
    admitter.on_claims("ADDED", claim_template("eight", device_request(count=8)), None)
    admitter.cycle()
    (gang,) = admitter.ledger.holding({}, 0.0)
    assert gang.usage["gpus"] == 8000
    assert admitter.ledger.free()["dra-0"][GPU] == 8000


def test_a_waiting_gang_asking_anew_after_its_template_changed_is_decided_on_the_new_count() -> (
    None
):
    admitter = admitter_with([resource_slice("dra-0", 8), resource_slice("dra-1", 8)])
    admitter.on_pod("ADDED", pod("holder", node="dra-1", gpus=4), None)  # 16 when empty
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []  # 16 GPUs of 12: its facts are kept
    four = seen(claim_template("eight", device_request(count=4)))  # the template now asks 4
    # its reconcile (requeued by the template's change) asks anew
    admitter.request(key, gang_request(dra_job("a", 2), POLICY.gpus(four), four))
    assert admitter.cycle() == [key]


def test_a_gang_too_large_while_a_device_is_tainted_is_placeable_once_the_taint_is_lifted() -> None:
    tainted = {0: [{"key": "xid", "effect": "NoExecute"}]}
    slices = [resource_slice("dra-0", 8), resource_slice("dra-1", 8, taints=tainted)]
    admitter = admitter_with(slices)
    admitter.on_pod("ADDED", pod("holder", node="dra-0", gpus=1), None)  # it waits either way
    key = ask(admitter, dra_job("a", 2))
    assert admitter.cycle() == []
    assert job_outlook(admitter.snapshot()[0], key).placeable is False, "15 GPUs even empty"
    slices[1] = resource_slice("dra-1", 8)  # dra-1 still has free devices: same devices_version
    assert admitter.cycle() == []
    assert job_outlook(admitter.snapshot()[0], key).placeable is True, "16 GPUs when empty"


def test_a_pod_claiming_more_gpus_than_any_node_has_waits_naming_its_device_class() -> None:
    claims = seen(claim_template("sixteen", device_request(count=16)))
    admitter = admitter_with(
        [resource_slice("dra-0", 8), resource_slice("dra-1", 8)], claims_for=lambda _: claims
    )
    pytorch = container(args=["--backend", "nccl"])
    pytorch["resources"] = claim_refs("gpus")
    pod_spec = claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "sixteen"))
    raw = job("huge").workers(1, containers=[pytorch], pod_spec=pod_spec).build()
    key = (raw["metadata"]["namespace"], raw["metadata"]["name"])
    admitter.request(key, gang_request(raw, POLICY.gpus(claims), claims))
    assert admitter.cycle() == []
    assert admitter.wait_reason(key) == ALONE + (
        f"no eligible node in the cluster can ever hold huge-worker-0: it asks 16 {GPU} "
        f"(claimed devices of DeviceClass {GPU_CLASS}) and the largest node it may use has 8"
    )

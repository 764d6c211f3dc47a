"""DRA claim rules (``validation.claims``) and GPU rules that count claimed GPUs.

Every GPU rule counts with ``pytorchjob.devices``: a Worker whose pods each claim 8 GPUs through
a ResourceClaimTemplate is 8 GPUs per pod for nccl, ``/dev/shm``, ``maxGPUsPerJob``,
``nprocPerNode`` and quota, exactly as if it requested ``nvidia.com/gpu: 8``.
"""

from __future__ import annotations

from typing import Any

import yaml

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
from tests.builders.job import container, job
from tests.builders.policy import parsed_policy
from tests.builders.team import parsed_team
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    INVALID,
    NOT_FOUND,
    WPOD,
    pairs,
    warned,
)
from torchgate.pytorchjob.devices import RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, SeenClaims
from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy
from torchgate.webhook.defaulting import default_job
from torchgate.webhook.validation import Team, Verdict, validate_create
from torchgate_dev import packagedata
from torchgate_dev.controlplane import kwok

DRA = parsed_policy("dra", gpuDeviceClasses=[GPU_CLASS])
NCCL = ["--backend", "nccl"]
EIGHT = seen(claim_template("eight", device_request(count=8)), device_class())
WC0 = f"{WPOD}.containers[0]"


def claiming_job(
    workers: int = 2,
    *,
    claim: tuple[str, str] = (RESOURCE_CLAIM_TEMPLATE, "eight"),
    refs: tuple[str, ...] = ("gpus",),
    args: list[str] | None = None,
    limits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Workers whose pods each claim GPUs through ``claim`` (named ``gpus`` in the pod)."""
    pytorch = container(args=args or NCCL, limits=limits)
    pytorch.setdefault("resources", {}).update(claim_refs(*refs))
    return (
        job("dra")
        .workers(workers, containers=[pytorch], pod_spec=claiming_pod(("gpus", *claim)))
        .build()
    )


def verdict(
    raw: dict[str, Any],
    policy: PlacementPolicy = DRA,
    claims: SeenClaims = EIGHT,
    team: Team | None = None,
) -> Verdict:
    return validate_create(raw, policy, claims=claims, team=team)


def test_a_job_claiming_gpus_through_a_template_is_admitted_with_nccl() -> None:
    result = verdict(claiming_job())
    assert pairs(result) == []
    assert warned(result) == []


def test_without_gpu_device_classes_claimed_gpus_do_not_count_and_nccl_is_refused() -> None:
    result = verdict(claiming_job(workers=1), parsed_policy("plain"))
    assert pairs(result) == [(INVALID, f"{WC0}.args")]


def test_max_gpus_per_job_counts_claimed_gpus() -> None:
    policy = parsed_policy("cap", gpuDeviceClasses=[GPU_CLASS], maxGPUsPerJob=15)
    assert pairs(verdict(claiming_job(2), policy)) == [(FORBIDDEN, "spec.pytorchReplicaSpecs")]
    fits = parsed_policy("cap", gpuDeviceClasses=[GPU_CLASS], maxGPUsPerJob=16)
    assert pairs(verdict(claiming_job(2), fits)) == []


def test_team_quota_counts_claimed_gpus() -> None:
    raw = claiming_job(2)
    raw["metadata"]["namespace"] = "team-ns"
    small = parsed_team("t", 15, 0, namespaces=["team-ns"])
    enough = parsed_team("t", 16, 0, namespaces=["team-ns"])
    assert pairs(verdict(raw, team=Team(small, (small,)))) == [
        (FORBIDDEN, "spec.pytorchReplicaSpecs")
    ]
    assert pairs(verdict(raw, team=Team(enough, (enough,)))) == []


def test_nproc_per_node_must_equal_the_claimed_gpus() -> None:
    raw = claiming_job(1)
    raw["spec"]["nprocPerNode"] = "4"
    assert (INVALID, "spec.nprocPerNode") in pairs(verdict(raw))
    raw["spec"]["nprocPerNode"] = "8"
    assert pairs(verdict(raw)) == []


def test_claimed_gpus_get_dev_shm() -> None:
    defaulted = default_job(claiming_job(1), DRA, claims=EIGHT)
    pod = defaulted.object["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert any(m.get("mountPath") == "/dev/shm" for m in pod["containers"][0]["volumeMounts"])
    plain = default_job(claiming_job(1), parsed_policy("plain"), claims=EIGHT)
    pod = plain.object["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "volumeMounts" not in pod["containers"][0]


def test_a_container_claim_naming_no_pod_claim_is_not_found() -> None:
    result = verdict(claiming_job(1, refs=("gpus", "typo")))
    assert (NOT_FOUND, f"{WC0}.resources.claims[1].name") in pairs(result)


def test_a_template_that_does_not_exist_is_not_found() -> None:
    raw = claiming_job(1, claim=(RESOURCE_CLAIM_TEMPLATE, "missing"), args=["--backend", "gloo"])
    field = f"{WPOD}.resourceClaims[0].resourceClaimTemplateName"
    assert pairs(verdict(raw)) == [(NOT_FOUND, field)]


def test_a_template_the_webhook_cannot_see_yet_is_a_warning() -> None:
    raw = claiming_job(1, claim=(RESOURCE_CLAIM_TEMPLATE, "missing"), args=["--backend", "gloo"])
    result = verdict(raw, claims=SeenClaims(complete=False))
    assert pairs(result) == []
    assert warned(result) == [f"{WPOD}.resourceClaims[0].resourceClaimTemplateName"]


def test_one_resource_claim_shared_by_the_pods_of_a_replica_is_forbidden() -> None:
    claims = seen(resource_claim("shared", device_request(count=8)))
    raw = claiming_job(2, claim=(RESOURCE_CLAIM, "shared"))
    field = f"{WPOD}.resourceClaims[0].resourceClaimName"
    assert pairs(verdict(raw, claims=claims)) == [(FORBIDDEN, field)]
    assert pairs(verdict(claiming_job(1, claim=(RESOURCE_CLAIM, "shared")), claims=claims)) == []


def test_a_gpu_asked_both_as_extended_resource_and_claim_is_forbidden() -> None:
    raw = claiming_job(1, limits={"nvidia.com/gpu": 8})
    assert (FORBIDDEN, f"{WPOD}.resourceClaims") in pairs(verdict(raw))


def test_a_gpu_count_only_allocation_knows_is_invalid() -> None:
    claims = seen(claim_template("all", device_request(mode="All")))
    raw = claiming_job(1, claim=(RESOURCE_CLAIM_TEMPLATE, "all"), args=["--backend", "gloo"])
    field = f"{WPOD}.resourceClaims[0].resourceClaimTemplateName"
    assert (INVALID, field) in pairs(verdict(raw, claims=claims))


def test_a_device_class_serving_the_gpu_resource_counts_without_being_listed() -> None:
    served = seen(
        claim_template("eight", device_request(count=8, device_class="served")),
        device_class("served", "nvidia.com/gpu"),
    )
    policy = parsed_policy("other", gpuDeviceClasses=["other.example.com"], maxGPUsPerJob=8)
    assert pairs(verdict(claiming_job(2), policy, served)) == [
        (FORBIDDEN, "spec.pytorchReplicaSpecs")
    ]


def test_the_dev_dra_policy_counts_the_dev_clusters_gpu_classes() -> None:
    documents = yaml.safe_load_all(packagedata.SAMPLE_POLICY.read_text(encoding="utf-8"))
    (raw,) = [d for d in documents if d["metadata"]["name"] == "dev-dra"]
    parsed, errors = parse_policy(raw)
    assert parsed is not None, errors
    assert parsed.gpu_device_classes == (kwok.DRA_CLASS, kwok.DRA_EXTENDED_CLASS)
    assert pairs(verdict(claiming_job(2), parsed, EIGHT)) == []


def test_a_claim_shared_by_a_worker_is_forbidden_when_the_master_has_the_same_template() -> None:
    # The Master's one pod may hold the claim; the Worker's two pods of the same template may not.
    claims = seen(resource_claim("shared", device_request(count=8)))
    pytorch = container(args=NCCL)
    pytorch.setdefault("resources", {}).update(claim_refs("gpus"))
    template = {
        "containers": [pytorch],
        "pod_spec": claiming_pod(("gpus", RESOURCE_CLAIM, "shared")),
    }
    raw = job("dra").master(**template).workers(2, **template).build()
    specs = raw["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"] == specs["Worker"]["template"]
    field = f"{WPOD}.resourceClaims[0].resourceClaimName"
    assert pairs(verdict(raw, claims=claims)) == [(FORBIDDEN, field)]

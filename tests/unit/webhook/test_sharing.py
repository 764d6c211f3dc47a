"""Pool-sharing admission rules: topology annotations and jobs their team can never hold.

Assertions are ``(error type, field path)`` pairs: the refusal names the field to fix. The rules
run through ``validate_create``/``validate_update`` (what the validating route calls), the
AdmissionReview layer with a team lookup, the webhook's cache of TeamQuotas and ``torchgate
check`` with TeamQuota documents beside the policy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.job import container, job
from tests.builders.policy import parsed_policy, policy
from tests.builders.team import parsed_team, team_quota
from torchgate.cli import main
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy, parse_policy
from torchgate.pytorchjob.pool import gang_usage, quota_ceiling
from torchgate.pytorchjob.spec import parse_job
from torchgate.webhook.policysource import (
    ClusterPolicies,
    ClusterQuotas,
    FilePolicies,
    PolicyCache,
)
from torchgate.webhook.review import validate
from torchgate.webhook.validation import Team, validate_create, validate_update
from torchgate.webhook.validation.sharing import resolve_team

REQUIRED = "torchgate.io/topology-required"
PREFERRED = "torchgate.io/topology-preferred"
LEVELS = ["topology.torchgate.io/block", "topology.torchgate.io/rack", "kubernetes.io/hostname"]
REPLICA_SPECS = "spec.pytorchReplicaSpecs"
TOPOLOGY_POLICY = parsed_policy("topo", topology={"levels": LEVELS})


def pairs(errors: Any) -> list[tuple[str, str]]:
    return [(error.type.value, error.field) for error in errors]


# Two teams of one cohort: vision 16 + borrow 8 (ceiling 24); speech 16, no limit (ceiling 32).
VISION = parsed_team("vision", 16, 8, namespaces=["team-vision"], cohort="dev")
SPEECH = parsed_team("speech", 16, namespaces=["team-speech"], cohort="dev")
LONE = parsed_team(
    "lone", 4, 0, namespaces=["team-lone"], resources=[{"name": "cpu", "nominal": "10"}]
)
QUOTAS = (VISION, SPEECH, LONE)


def team(namespace: str) -> Team:
    found = resolve_team(QUOTAS, namespace)
    assert found is not None
    return found


# ------------------------------------------------------------------ topology annotations


@pytest.mark.parametrize(
    ("annotations", "active", "expected"),
    [
        ({REQUIRED: LEVELS[1]}, TOPOLOGY_POLICY, []),
        ({PREFERRED: LEVELS[2]}, TOPOLOGY_POLICY, []),
        (
            {},
            parsed_policy(
                "topo",
                topology={"levels": LEVELS, "defaultLevel": LEVELS[1], "defaultMode": "Required"},
            ),
            [],
        ),
        (
            {REQUIRED: "topology.torchgate.io/row"},
            TOPOLOGY_POLICY,
            [(ErrorType.NOT_SUPPORTED.value, f"metadata.annotations[{REQUIRED}]")],
        ),
        (
            {PREFERRED: "rack"},
            TOPOLOGY_POLICY,
            [(ErrorType.NOT_SUPPORTED.value, f"metadata.annotations[{PREFERRED}]")],
        ),
        (
            {REQUIRED: LEVELS[0], PREFERRED: LEVELS[1]},
            TOPOLOGY_POLICY,
            [(ErrorType.FORBIDDEN.value, f"metadata.annotations[{PREFERRED}]")],
        ),
        (
            {REQUIRED: LEVELS[0]},
            DEFAULT_POLICY,
            [(ErrorType.FORBIDDEN.value, f"metadata.annotations[{REQUIRED}]")],
        ),
    ],
    ids=[
        "required-known",
        "preferred-known",
        "policy-default",
        "unknown-level",
        "short-name-not-a-level",
        "both-annotations",
        "policy-without-levels",
    ],
)
def test_topology_annotations(
    annotations: dict[str, str], active: PlacementPolicy, expected: list[tuple[str, str]]
) -> None:
    builder = job("demo", "default").master(gpus=1).workers(1, gpus=1)
    for key, value in annotations.items():
        builder.annotate(key, value)
    assert pairs(validate_create(builder.build(), active).errors) == expected


def test_a_topology_annotation_added_on_update_is_checked() -> None:
    old = job("demo").master(gpus=1).build()
    new = job("demo").master(gpus=1).annotate(REQUIRED, "row").build()
    verdict = validate_update(old, new, TOPOLOGY_POLICY)
    assert pairs(verdict.errors) == [
        (ErrorType.NOT_SUPPORTED.value, f"metadata.annotations[{REQUIRED}]")
    ]


# ------------------------------------------------------------------ team quota ceiling


@pytest.mark.parametrize(
    ("namespace", "builder", "expected"),
    [
        ("team-vision", job("j", "team-vision").master(gpus=8).workers(2, gpus=8), []),
        (
            "team-vision",
            job("j", "team-vision").master(gpus=8).workers(3, gpus=8),
            [(ErrorType.FORBIDDEN.value, REPLICA_SPECS)],
        ),
        ("team-speech", job("j", "team-speech").master(gpus=8).workers(3, gpus=8), []),
        (
            "team-speech",
            job("j", "team-speech").master(gpus=8).workers(4, gpus=8),
            [(ErrorType.FORBIDDEN.value, REPLICA_SPECS)],
        ),
        ("elsewhere", job("j", "elsewhere").master(gpus=8).workers(99, gpus=8), []),
        (
            "team-vision",
            job("j", "team-vision")
            .master(gpus=8)
            .workers(7, gpus=8)
            .elastic(minReplicas=2, maxReplicas=7),
            [],
        ),
        (
            "team-vision",
            job("j", "team-vision").master(gpus=8).workers(7, gpus=8).scheduling(minAvailable=3),
            [],
        ),
        (
            "team-vision",
            job("j", "team-vision").master(gpus=8).workers(7, gpus=8).scheduling(minAvailable=4),
            [(ErrorType.FORBIDDEN.value, REPLICA_SPECS)],
        ),
        (
            "team-lone",
            job("j", "team-lone").master(gpus=2, requests={"cpu": "6"}).workers(1, gpus=2),
            [],
        ),
        (
            "team-lone",
            job("j", "team-lone")
            .master(gpus=2, requests={"cpu": "6"})
            .workers(1, gpus=2, requests={"cpu": "4500m"}),
            [(ErrorType.FORBIDDEN.value, REPLICA_SPECS)],
        ),
    ],
    ids=[
        "within-nominal-plus-borrowing",
        "beyond-borrowing-limit",
        "unlimited-borrowing-up-to-cohort",
        "beyond-the-cohort",
        "namespace-without-team",
        "elastic-gang-is-the-minimum",
        "min-available-within",
        "min-available-beyond",
        "cpu-within",
        "cpu-beyond",
    ],
)
def test_a_job_its_team_can_never_hold_is_refused(
    namespace: str, builder: Any, expected: list[tuple[str, str]]
) -> None:
    owner = resolve_team(QUOTAS, namespace)
    verdict = validate_create(builder.build(), DEFAULT_POLICY, team=owner)
    assert pairs(verdict.errors) == expected


def test_a_job_named_by_generate_name_its_team_can_never_hold_is_refused() -> None:
    """At admission such a job has no name yet: reading its spec must not fail on that."""
    raw = job("j", "team-vision").master(gpus=8).workers(3, gpus=8).build()
    del raw["metadata"]["name"]
    raw["metadata"]["generateName"] = "train-"
    verdict = validate_create(raw, DEFAULT_POLICY, team=resolve_team(QUOTAS, "team-vision"))
    assert pairs(verdict.errors) == [(ErrorType.FORBIDDEN.value, REPLICA_SPECS)]


def test_the_refusal_counts_the_policys_gpu_resource() -> None:
    amd, errors = parse_policy(policy("amd", gpuResource="amd.com/gpu"))
    assert errors == []
    assert amd is not None
    nvidia_only = job("j", "team-lone").master(gpus=8).build()
    amd_job = job("j", "team-lone").master(gpus=8, gpu_resource="amd.com/gpu").build()
    assert validate_create(nvidia_only, amd, team=team("team-lone")).errors == ()
    assert pairs(validate_create(amd_job, amd, team=team("team-lone")).errors) == [
        (ErrorType.FORBIDDEN.value, REPLICA_SPECS)
    ]


@settings(max_examples=60, deadline=None)
@given(
    masters=st.integers(0, 1),
    workers=st.integers(0, 6),
    gpus=st.integers(0, 8),
    min_available=st.none() | st.integers(1, 7),
)
def test_refused_exactly_when_the_gang_exceeds_the_ceiling(
    masters: int, workers: int, gpus: int, min_available: int | None
) -> None:
    builder = job("j", "team-vision")
    if masters:
        builder.master(gpus=gpus)
    if workers:
        builder.workers(workers, gpus=gpus)
    if min_available is not None:
        builder.scheduling(minAvailable=min_available)
    raw = builder.build()
    total = masters + workers
    gang = min_available if min_available is not None and min_available <= total else total
    ceiling = quota_ceiling(VISION, QUOTAS, "gpus")
    assert ceiling == 24_000
    refused = (ErrorType.FORBIDDEN.value, REPLICA_SPECS) in pairs(
        validate_create(raw, DEFAULT_POLICY, team=team("team-vision")).errors
    )
    assert refused == (gang * gpus * 1000 > ceiling)
    if total:
        spec, _ = parse_job(raw)
        assert spec is not None
        assert gang_usage(spec, GpuSources("nvidia.com/gpu")).get("gpus", 0) == gang * gpus * 1000


def test_an_unchanged_spec_is_not_refused_again_on_update() -> None:
    # Ratchet: a quota lowered after admission does not block label or finalizer updates.
    old = job("j", "team-vision").master(gpus=8).workers(3, gpus=8).build()
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"] = {"owner": "me"}
    assert validate_update(old, new, DEFAULT_POLICY, team=team("team-vision")).errors == ()


# ------------------------------------------------------------------ which team


def test_resolve_team_leaves_out_a_team_that_claims_an_owned_namespace() -> None:
    intruder = parsed_team("zeta", 64, namespaces=["team-vision", "team-zeta"], cohort="dev")
    found = resolve_team([*QUOTAS, intruder], "team-vision")
    assert found is not None
    assert found.quota.name == "vision"
    assert [q.name for q in found.cohort] == ["speech", "vision"]
    assert resolve_team([*QUOTAS, intruder], "team-zeta") is None


# ------------------------------------------------------------------ through the webhook's layers


def review(job_object: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
            "operation": operation,
            "namespace": job_object["metadata"]["namespace"],
            "object": job_object,
        },
    }


def test_the_cache_serves_teams_from_quota_objects_and_follows_changes() -> None:
    cache = PolicyCache()
    cache.replace_quotas(
        [
            team_quota("vision", ["team-vision"], cohort="dev", nominalGPUs=16),
            team_quota("broken", ["team-broken"], nominalGPUs=-1),
        ],
        "test",
    )
    assert cache.team_for("team-broken") is None
    assert pairs(cache.invalid_quotas["broken"]) == [(ErrorType.INVALID.value, "spec.nominalGPUs")]
    big = job("j", "team-vision").master(gpus=8).workers(2, gpus=8).build()
    answer = validate(review(big), cache.policy_for, cache.team_for)
    causes = answer["response"]["status"]["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        (ErrorType.FORBIDDEN.value, REPLICA_SPECS)
    ]
    cache.put_quota(team_quota("speech", ["team-speech"], cohort="dev", nominalGPUs=16), "test")
    assert validate(review(big), cache.policy_for, cache.team_for)["response"]["allowed"]
    cache.remove_quota("speech")
    assert not validate(review(big), cache.policy_for, cache.team_for)["response"]["allowed"]
    cache.remove_quota("vision")
    assert cache.team_for("team-vision") is None


def test_policy_files_carry_team_quotas(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    documents = [
        policy("topo", topology={"levels": LEVELS}),
        team_quota("vision", ["team-vision"], nominalGPUs=8, borrowingLimitGPUs=0),
    ]
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    cache = PolicyCache()
    FilePolicies(cache, [path]).load()
    assert cache.names == ["topo"]
    owner = cache.team_for("team-vision")
    assert owner is not None
    assert owner.quota.name == "vision"


def test_check_refuses_with_team_quotas_beside_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        yaml.safe_dump_all(
            [
                policy("topo", topology={"levels": LEVELS}),
                team_quota("vision", ["team-vision"], nominalGPUs=8, borrowingLimitGPUs=0),
            ]
        ),
        encoding="utf-8",
    )
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            job("big", "team-vision")
            .master(containers=[container(gpus=8)])
            .workers(1, gpus=8)
            .annotate(REQUIRED, "row")
            .build()
        ),
        encoding="utf-8",
    )
    code = main(["check", "--policy", str(pool), "-o", "json", str(manifest)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (result,) = report["results"]
    found = {(e["type"], e["field"]) for e in result["errors"]}
    assert found == {
        (ErrorType.NOT_SUPPORTED.value, f"metadata.annotations[{REQUIRED}]"),
        (ErrorType.FORBIDDEN.value, REPLICA_SPECS),
    }


def test_check_reports_an_invalid_team_quota_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump(team_quota("bad", [], nominalGPUs=1)), encoding="utf-8")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job("j").master().build()), encoding="utf-8")
    assert main(["check", "--policy", str(pool), str(manifest)]) == 2
    assert "invalid TeamQuota" in capsys.readouterr().err


class TwoKindApi:
    """Lists PlacementPolicies and TeamQuotas by path; watches stay idle; writes recorded."""

    def __init__(self, policies: list[dict[str, Any]], quotas: list[dict[str, Any]]) -> None:
        self.items = {"placementpolicies": policies, "teamquotas": quotas}
        self.quota_list_gate = asyncio.Event()
        self.writes: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> Any:
        if method != "GET":
            self.writes.append(path)
            return {}
        plural = path.rsplit("/", 1)[-1]
        if plural == "teamquotas":
            await self.quota_list_gate.wait()
        return {"metadata": {"resourceVersion": "1"}, "items": self.items[plural]}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(3600)
        yield {}


async def test_the_cluster_source_is_ready_only_with_its_team_quotas() -> None:
    api = TwoKindApi(
        [policy("topo", topology={"levels": LEVELS})],
        [team_quota("vision", ["team-vision"], nominalGPUs=8, borrowingLimitGPUs=0)],
    )
    cache = PolicyCache()
    tasks = [
        asyncio.create_task(ClusterQuotas(cache, api).run()),
        asyncio.create_task(ClusterPolicies(cache, api).run()),
    ]
    try:
        await asyncio.sleep(0.1)
        assert cache.names == ["topo"]
        assert not cache.synced.is_set()  # the TeamQuotas are not listed yet
        api.quota_list_gate.set()
        await asyncio.wait_for(cache.synced.wait(), timeout=5)
        owner = cache.team_for("team-vision")
        assert owner is not None
        assert owner.quota.name == "vision"
        assert not any("teamquotas" in path for path in api.writes)  # read only
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

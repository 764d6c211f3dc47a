"""TeamQuota parsing, the policy's preemption and topology sections, and topology annotations."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.team import parsed_team, team_quota
from torchgate.pytorchjob.devices import GpuSources
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.pool import (
    ANNOTATION_TOPOLOGY_PREFERRED,
    ANNOTATION_TOPOLOGY_REQUIRED,
    GPUS,
    Limit,
    PreemptionSettings,
    TeamQuota,
    TopologyRequest,
    TopologySettings,
    claimed_elsewhere,
    never_admissible,
    parse_pool_settings,
    parse_team_quota,
    quota_ceiling,
    quota_ceilings,
    quota_usage,
    resolve_teams,
    topology_request,
)

INVALID = ErrorType.INVALID.value
REQUIRED = ErrorType.REQUIRED.value
NOT_SUPPORTED = ErrorType.NOT_SUPPORTED.value
DUPLICATE = ErrorType.DUPLICATE.value
FORBIDDEN = ErrorType.FORBIDDEN.value
LEVELS = ("torchgate.io/block", "torchgate.io/rack", "kubernetes.io/hostname")
TEAM_A = {"namespaces": ["team-a"], "nominalGPUs": 8}  # team "a", valid as it stands
QUOTA_A = team_quota("a", **TEAM_A)


def pairs(errors: list[Any]) -> list[tuple[str, str]]:
    return [(error.type.value, error.field) for error in errors]


# ------------------------------------------------------------------ TeamQuota


def test_a_full_team_quota_parses_to_milli_units() -> None:
    parsed, errors = parse_team_quota(
        team_quota(
            "a",
            **TEAM_A,
            cohort="h100",
            borrowingLimitGPUs=4,
            resources=[{"name": "cpu", "nominal": "500m", "borrowingLimit": 2}],
        )
    )
    assert errors == []
    assert parsed == TeamQuota(
        name="a",
        namespaces=("team-a",),
        limits={GPUS: Limit(8000, 4000), "cpu": Limit(500, 2000)},
        cohort="h100",
    )


def test_defaults_cohort_default_and_no_borrowing_limit() -> None:
    parsed, _ = parse_team_quota(QUOTA_A)
    assert parsed is not None
    assert parsed.cohort == "default"
    assert parsed.limits == {GPUS: Limit(8000, None)}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"namespaces": None}, [(REQUIRED, "spec.namespaces")]),
        ({"namespaces": []}, [(INVALID, "spec.namespaces")]),
        ({"namespaces": ["a", 3]}, [(INVALID, "spec.namespaces")]),
        ({"nominalGPUs": None}, [(REQUIRED, "spec.nominalGPUs")]),
        ({"nominalGPUs": -1}, [(INVALID, "spec.nominalGPUs")]),
        ({"nominalGPUs": "8"}, [(INVALID, "spec.nominalGPUs")]),
        ({"borrowingLimitGPUs": -2}, [(INVALID, "spec.borrowingLimitGPUs")]),
        ({"cohort": "Not_A_Label"}, [(INVALID, "spec.cohort")]),
        ({"resources": {"cpu": 1}}, [(INVALID, "spec.resources")]),
        ({"resources": [{"nominal": 1}]}, [(REQUIRED, "spec.resources[0].name")]),
        ({"resources": [{"name": "cpu"}]}, [(REQUIRED, "spec.resources[0].nominal")]),
        (
            {"resources": [{"name": "cpu", "nominal": "lots"}]},
            [(INVALID, "spec.resources[0].nominal")],
        ),
        (
            {"resources": [{"name": "cpu", "nominal": 1, "borrowingLimit": "-1"}]},
            [(INVALID, "spec.resources[0].borrowingLimit")],
        ),
        (
            {"resources": [{"name": "cpu", "nominal": 1}, {"name": "cpu", "nominal": 2}]},
            [(DUPLICATE, "spec.resources[1].name")],
        ),
        ({"resources": [{"name": "gpus", "nominal": 1}]}, [(DUPLICATE, "spec.resources[0].name")]),
    ],
    ids=lambda value: str(value)[:60],
)
def test_a_malformed_team_quota_is_left_out_with_field_errors(
    spec: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    parsed, errors = parse_team_quota(team_quota("a", **{**TEAM_A, **spec}))
    assert parsed is None
    assert pairs(errors) == expected


@pytest.mark.parametrize(
    ("metadata", "deleting"),
    [({}, False), ({"deletionTimestamp": "2026-01-03T00:00:00Z"}, True)],
    ids=["kept", "being-deleted"],
)
def test_a_team_quota_being_deleted_stays_valid_and_says_so(
    metadata: dict[str, Any], deleting: bool
) -> None:
    raw = team_quota("vision", ["ns"], nominalGPUs=8)
    raw["metadata"].update(metadata)
    parsed, errors = parse_team_quota(raw)
    assert errors == []
    assert parsed is not None
    assert parsed.deleting is deleting


def test_a_team_quota_without_spec_or_name_is_refused() -> None:
    parsed, errors = parse_team_quota({"kind": "TeamQuota", "metadata": {}})
    assert parsed is None
    assert pairs(errors) == [(REQUIRED, "metadata.name"), (INVALID, "spec")]
    assert pairs(parse_team_quota([])[1]) == [(INVALID, "")]
    assert pairs(parse_team_quota({**QUOTA_A, "kind": "Other"})[1]) == [(NOT_SUPPORTED, "kind")]


def test_a_namespace_owned_by_two_teams_is_reported_on_the_later_team() -> None:
    a = parsed_team("a", 0, namespaces=["x", "y"])
    b = parsed_team("b", 0, namespaces=["z", "y"])
    teams = resolve_teams([b, a])
    assert {name: pairs(found) for name, found in teams.errors.items()} == {
        "b": [(DUPLICATE, "spec.namespaces[1]")]
    }
    assert teams.owner_of("y") == a
    assert teams.owner_of("w") is None
    assert teams.owner_of("z") is None, "a team left out owns none of its namespaces"
    assert dict(teams.valid) == {"a": a}


def test_a_team_quota_written_may_not_claim_a_namespace_another_team_owns() -> None:
    owners = {"x": "a", "y": "a", "z": "b"}.get
    written = parsed_team("b", 0, namespaces=["z", "y", "w"])

    assert pairs(claimed_elsewhere(written, owners)) == [(DUPLICATE, "spec.namespaces[1]")]
    assert claimed_elsewhere(written, owners, before=["y"]) == [], "listed before: not judged"
    assert claimed_elsewhere(parsed_team("a", 0, namespaces=["x", "y"]), owners) == []


# ------------------------------------------------------------------ policy sections


def test_policy_sections_parse() -> None:
    settings, errors = parse_pool_settings(
        {
            "spec": {
                "preemption": {"minimumRunSeconds": 600, "neverPreemptPriority": 1000000},
                "topology": {
                    "levels": list(LEVELS),
                    "defaultLevel": LEVELS[1],
                    "defaultMode": "Required",
                },
            }
        }
    )
    assert errors == []
    assert settings.preemption == PreemptionSettings(600, 1000000)
    assert settings.topology == TopologySettings(LEVELS, LEVELS[1], "Required")


def test_a_policy_without_the_sections_gets_defaults() -> None:
    settings, errors = parse_pool_settings({"spec": {"priority": 3}})
    assert errors == []
    assert settings.preemption == PreemptionSettings()
    assert settings.topology == TopologySettings()
    assert parse_pool_settings("nonsense") == (settings, [])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"preemption": []}, [(INVALID, "spec.preemption")]),
        (
            {"preemption": {"minimumRunSeconds": -1}},
            [(INVALID, "spec.preemption.minimumRunSeconds")],
        ),
        (
            {"preemption": {"neverPreemptPriority": "high"}},
            [(INVALID, "spec.preemption.neverPreemptPriority")],
        ),
        ({"topology": "rack"}, [(INVALID, "spec.topology")]),
        ({"topology": {"levels": "rack"}}, [(INVALID, "spec.topology.levels")]),
        ({"topology": {"levels": ["rack", "rack"]}}, [(DUPLICATE, "spec.topology.levels[1]")]),
        ({"topology": {"levels": ["a b"]}}, [(INVALID, "spec.topology.levels[0]")]),
        (
            {"topology": {"levels": ["rack"], "defaultLevel": "block"}},
            [(NOT_SUPPORTED, "spec.topology.defaultLevel")],
        ),
        (
            {"topology": {"levels": ["rack"], "defaultMode": "Sometimes"}},
            [(NOT_SUPPORTED, "spec.topology.defaultMode")],
        ),
    ],
    ids=lambda value: str(value)[:60],
)
def test_malformed_policy_sections_report_field_paths(
    spec: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert pairs(parse_pool_settings({"spec": spec})[1]) == expected


@pytest.mark.parametrize(
    ("priority", "run_seconds", "protected"),
    [(0, 599, True), (0, 600, False), (1000000, 10**6, True), (999999, 10**6, False)],
)
def test_protection_by_run_time_and_priority(
    priority: int, run_seconds: float, protected: bool
) -> None:
    settings = PreemptionSettings(minimum_run_seconds=600, never_preempt_priority=1000000)
    assert settings.protects(priority=priority, run_seconds=run_seconds) is protected


# ------------------------------------------------------------------ topology annotations

SETTINGS = TopologySettings(LEVELS)


@pytest.mark.parametrize(
    ("annotations", "settings", "expected"),
    [
        ({}, SETTINGS, TopologyRequest()),
        ({ANNOTATION_TOPOLOGY_REQUIRED: LEVELS[1]}, SETTINGS, TopologyRequest(1, True)),
        ({ANNOTATION_TOPOLOGY_PREFERRED: LEVELS[0]}, SETTINGS, TopologyRequest(0, False)),
        ({}, TopologySettings(LEVELS, LEVELS[2], "Required"), TopologyRequest(2, True)),
        ({}, TopologySettings(LEVELS, LEVELS[1]), TopologyRequest(1, False)),
        (
            {ANNOTATION_TOPOLOGY_PREFERRED: LEVELS[0]},
            TopologySettings(LEVELS, LEVELS[2], "Required"),
            TopologyRequest(0, False),
        ),
    ],
    ids=[
        "none",
        "required",
        "preferred",
        "default-required",
        "default-preferred",
        "annotation-wins",
    ],
)
def test_topology_request_from_annotations_or_policy_default(
    annotations: dict[str, str], settings: TopologySettings, expected: TopologyRequest
) -> None:
    assert topology_request(annotations, settings) == (expected, [])


@pytest.mark.parametrize(
    ("annotations", "settings", "expected"),
    [
        (
            {ANNOTATION_TOPOLOGY_REQUIRED: "zone"},
            SETTINGS,
            [(NOT_SUPPORTED, "metadata.annotations[torchgate.io/topology-required]")],
        ),
        (
            {ANNOTATION_TOPOLOGY_PREFERRED: LEVELS[0]},
            TopologySettings(),
            [(FORBIDDEN, "metadata.annotations[torchgate.io/topology-preferred]")],
        ),
        (
            {ANNOTATION_TOPOLOGY_REQUIRED: LEVELS[0], ANNOTATION_TOPOLOGY_PREFERRED: LEVELS[1]},
            SETTINGS,
            [(FORBIDDEN, "metadata.annotations[torchgate.io/topology-preferred]")],
        ),
    ],
    ids=["unknown-level", "no-levels", "both"],
)
def test_bad_topology_annotations_are_refused_at_their_key(
    annotations: dict[str, str], settings: TopologySettings, expected: list[tuple[str, str]]
) -> None:
    request, errors = topology_request(annotations, settings)
    assert request == TopologyRequest()
    assert pairs(errors) == expected


# ------------------------------------------------------------------ ceilings


def test_ceiling_is_nominal_plus_borrowing_within_the_cohort() -> None:
    a = parsed_team("a", 8, 4)
    b = parsed_team("b", 16)
    c = parsed_team("c", 2, cohort="other")
    unlimited = parsed_team("u", 8)
    cohort = [a, b, c, unlimited]
    assert quota_ceiling(a, cohort, GPUS) == 12000
    assert quota_ceiling(unlimited, cohort, GPUS) == 32000  # a + b + itself
    assert quota_ceiling(c, cohort, GPUS) == 2000
    assert quota_ceiling(a, cohort, "cpu") is None
    assert never_admissible(a, cohort, {GPUS: 12000}) is None
    refused = never_admissible(a, cohort, {GPUS: 13000})
    assert refused is not None
    assert refused[0] == GPUS


def test_kept_ceilings_are_the_ceilings_of_every_resource_with_a_quota() -> None:
    a = TeamQuota("a", ("a",), {GPUS: Limit(8000, 4000), "cpu": Limit(64000)})
    b = TeamQuota("b", ("b",), {GPUS: Limit(16000)})
    cohort = [a, b]
    ceilings = quota_ceilings(a, cohort)
    assert ceilings == {GPUS: 12000, "cpu": 64000}
    assert ceilings == {r: quota_ceiling(a, cohort, r) for r in a.limits}
    for usage in ({GPUS: 12000}, {GPUS: 13000}, {"cpu": 65000, GPUS: 1000}, {"memory": 1}):
        assert never_admissible(a, cohort, usage, ceilings=ceilings) == never_admissible(
            a, cohort, usage
        )
    assert never_admissible(a, cohort, {GPUS: 13000}, ceilings=ceilings) is not None


def test_quota_usage_counts_the_policy_gpu_resource_as_gpus() -> None:
    requests = [{"amd.com/gpu": 2000, "cpu": 1000}, {"amd.com/gpu": 2000}]
    assert quota_usage(requests, GpuSources("amd.com/gpu")) == {GPUS: 4000, "cpu": 1000}


# ------------------------------------------------------------------ robustness

json_values = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.floats(allow_nan=False) | hs.text(max_size=8),
    lambda inner: (
        hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
QUOTA_KEYS = ("namespaces", "cohort", "nominalGPUs", "borrowingLimitGPUs", "resources")
POLICY_KEYS = ("preemption", "topology")


@settings(max_examples=300, deadline=None)
@given(
    hs.dictionaries(hs.sampled_from(QUOTA_KEYS), json_values),
    hs.dictionaries(
        hs.sampled_from(POLICY_KEYS),
        json_values
        | hs.fixed_dictionaries(
            {
                "levels": json_values,
                "defaultLevel": json_values,
                "minimumRunSeconds": json_values,
            }
        ),
    ),
    hs.dictionaries(
        hs.sampled_from((ANNOTATION_TOPOLOGY_REQUIRED, ANNOTATION_TOPOLOGY_PREFERRED)), hs.text()
    ),
)
def test_parsing_never_raises_and_returns_a_model_or_errors(
    quota_spec: dict[str, Any], policy_spec: dict[str, Any], annotations: dict[str, str]
) -> None:
    parsed, errors = parse_team_quota({"metadata": {"name": "t"}, "spec": quota_spec})
    assert (parsed is None) == bool(errors)
    settings_, policy_errors = parse_pool_settings({"spec": policy_spec})
    assert all(str(error.path).startswith("spec.") for error in policy_errors)
    request, annotation_errors = topology_request(annotations, settings_.topology)
    if annotation_errors:
        assert request == TopologyRequest()
    elif request.level is not None:
        assert 0 <= request.level < len(settings_.topology.levels)

"""``stopping``: what the pre-delete hook scales, whose pods it waits for, when it is done."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchgate.controller.stopping import (
    Observed,
    Verdict,
    held_finalizers,
    judge,
    pod_selector,
    replicas_to_stop,
    summary,
)
from torchgate.pytorchjob.pool import QUOTA_FINALIZER

SELECTOR = {
    "matchLabels": {
        "app.kubernetes.io/name": "torchgate",
        "app.kubernetes.io/component": "controller",
    }
}


def deployment(replicas: object = 2, **metadata: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": SELECTOR}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": "torchgate-controller", **metadata}, "spec": spec}


def quota(name: str, *finalizers: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "finalizers": list(finalizers)}}


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (deployment(2), 2),
        (deployment(None), 1),  # spec.replicas unset: Kubernetes' default
        (deployment(0), None),
        (deployment(2, deletionTimestamp="2026-01-01T00:00:00Z"), None),
        (None, None),
        (deployment("2"), None),
        (deployment(True), None),
    ],
    ids=["asks-2", "unset-is-1", "already-0", "being-deleted", "gone", "not-a-number", "bool"],
)
def test_rule1_only_a_deployment_asking_for_replicas_is_scaled(
    found: dict[str, Any] | None, expected: int | None
) -> None:
    assert replicas_to_stop(found) == expected


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (deployment(), "app.kubernetes.io/component=controller,app.kubernetes.io/name=torchgate"),
        (None, None),
        ({"spec": {"selector": {"matchLabels": {}}}}, None),
        ({"spec": {"selector": {**SELECTOR, "matchExpressions": [{"key": "x"}]}}}, None),
        ({"spec": {}}, None),
    ],
    ids=["match-labels", "gone", "empty", "expressions", "no-selector"],
)
def test_rule2_the_pods_are_told_by_the_deployments_match_labels(
    found: dict[str, Any] | None, expected: str | None
) -> None:
    assert pod_selector(found) == expected


def test_rule3_held_lists_the_teamquotas_carrying_the_finalizer_sorted() -> None:
    quotas = [
        quota("vision", QUOTA_FINALIZER),
        quota("idle"),
        quota("audio", "other.io/x", QUOTA_FINALIZER),
        {"metadata": {"name": "odd", "finalizers": "not-a-list"}},
        {},
    ]
    assert held_finalizers(quotas) == ("audio", "vision")


@pytest.mark.parametrize(
    ("observed", "elapsed", "verdict"),
    [
        (Observed(pods_left=0, held=()), 1, Verdict.DONE),
        (Observed(pods_left=0, held=("vision",)), 1, Verdict.DONE),  # what is left stays left
        (Observed(pods_left=1, held=()), 1, Verdict.WAIT),  # the leader may still write
        (Observed(pods_left=1, held=("vision",)), 1, Verdict.WAIT),
        (Observed(pods_left=1, held=("vision",)), 60, Verdict.GAVE_UP),
        (Observed(pods_left=None, held=()), 1, Verdict.DONE),
        (Observed(pods_left=None, held=("vision",)), 1, Verdict.WAIT),
        (Observed(pods_left=None, held=("vision",)), 61, Verdict.GAVE_UP),
    ],
    ids=[
        "stopped",
        "stopped-some-held",
        "pods-left",
        "pods-left-held",
        "timed-out",
        "no-selector-none-held",
        "no-selector-held",
        "no-selector-timed-out",
    ],
)
def test_rule4_done_once_the_pods_are_gone_given_up_at_the_timeout(
    observed: Observed, elapsed: float, verdict: Verdict
) -> None:
    assert judge(observed, elapsed=elapsed, timeout=60) is verdict


@given(
    pods_left=st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
    held=st.lists(st.sampled_from(["a", "b", "c"]), unique=True).map(lambda h: tuple(sorted(h))),
    elapsed=st.floats(min_value=0, max_value=1000),
    timeout=st.floats(min_value=0, max_value=1000),
)
def test_rule4_the_wait_always_ends_by_the_timeout(
    pods_left: int | None, held: tuple[str, ...], elapsed: float, timeout: float
) -> None:
    verdict = judge(Observed(pods_left=pods_left, held=held), elapsed=elapsed, timeout=timeout)
    if elapsed >= timeout:
        assert verdict is not Verdict.WAIT
    if pods_left == 0:
        assert verdict is Verdict.DONE


def test_rule5_the_summary_names_what_is_left_and_how_to_clear_it() -> None:
    held = summary(Observed(pods_left=0, held=("audio", "vision")), Verdict.DONE, elapsed=4.2)
    assert "audio, vision" in held
    assert "kubectl patch teamquota NAME" in held
    clean = summary(Observed(pods_left=0, held=()), Verdict.DONE, elapsed=4.2)
    assert "no TeamQuota carries" in clean
    late = summary(Observed(pods_left=2, held=("vision",)), Verdict.GAVE_UP, elapsed=60)
    assert "gave up" in late
    assert "2 pod(s) left" in late

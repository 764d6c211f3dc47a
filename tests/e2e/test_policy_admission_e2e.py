"""An admin's PlacementPolicy or TeamQuota that would not load is refused at ``kubectl apply``.

``torchgate webhook`` (a subprocess watching the cluster) is registered as ``torchgate dev``
registers it, so the apiserver sends it every CREATE and UPDATE of ``torchgate.io``
PlacementPolicies and TeamQuotas (``validate.policies.torchgate.io``, ``failurePolicy:
Ignore``). A policy with a typo (a toleration ``operator: Exist``, which the CRD schema's enum
refuses too; an ``Exists`` toleration with a value, which only the webhook refuses) or a quota
whose cohort is not a DNS label (a rule of the parser, not of the CRD schema) is refused with the
field path, as kubectl prints it and as the (reason, field) causes the apiserver passes on; a good
one is stored. With the webhook down, the admin is never locked out: a policy the CRD schema
cannot refuse (an ``Exists`` toleration with a value) is stored (left out and reported,
``Valid=False``, once the webhook is back; a webhook restarted after that finds its status right
and writes nothing), and it can still be fixed and deleted.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.builders.policy import policy
from tests.builders.team import team_quota
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import times_told
from tests.e2e.test_webhook_e2e import apply, causes, condition
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook  # the module-scoped fixture
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.reasons import INVALID_PLACEMENT_POLICY

pytestmark = pytest.mark.e2e

NOT_SUPPORTED = ErrorType.NOT_SUPPORTED.value
INVALID = ErrorType.INVALID.value
ADMIN = "/apis/torchgate.io/v1alpha1"
TYPO = [{"key": "nvidia.com/gpu", "operator": "Exist", "effect": "NoSchedule"}]
# Invalid by the parser's rule alone (Exists takes no value; Kubernetes reports it at the
# operator): the apiserver stores it unchecked.
STORABLE_TYPO = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "value": "true", "effect": "NoSchedule"}
]
FIXED = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def delete(cluster: Cluster, kind: str, *names: str) -> None:
    cluster.kubectl("delete", kind, *names, "--ignore-not-found", check=False)


def test_a_bad_policy_or_quota_is_refused_at_its_field_and_a_good_one_is_stored(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    suffix = secrets.token_hex(3)
    bad = policy(f"e2e-typo-{suffix}", nodeSelector={"pool": "a100"}, tolerations=TYPO)
    good = policy(f"e2e-good-{suffix}", nodeSelector={"pool": "a100"}, tolerations=FIXED)
    # A rule of the parser the CRD schema cannot state: only the webhook refuses it.
    webhook_only = policy(
        f"e2e-value-{suffix}", nodeSelector={"pool": "a100"}, tolerations=STORABLE_TYPO
    )
    # A cohort that is not a DNS label: the parser's rule, which the CRD schema does not check.
    quota = team_quota(
        f"e2e-quota-{suffix}", [f"e2e-quota-{suffix}"], cohort="H100 pool", nominalGPUs=8
    )
    try:
        refused = apply(cluster, bad)
        status, body = cluster.api_request("POST", f"{ADMIN}/placementpolicies", bad)
        value_status, value_body = cluster.api_request(
            "POST", f"{ADMIN}/placementpolicies", webhook_only
        )
        quota_status, quota_body = cluster.api_request("POST", f"{ADMIN}/teamquotas", quota)
        stored = apply(cluster, good)

        assert refused.returncode != 0
        assert "spec.tolerations[0].operator" in refused.stderr
        assert (status, causes(body)) == (422, {(NOT_SUPPORTED, "spec.tolerations[0].operator")})
        assert (value_status, causes(value_body)) == (
            422,
            {(INVALID, "spec.tolerations[0].operator")},
        )
        assert (quota_status, causes(quota_body)) == (422, {(INVALID, "spec.cohort")})
        assert cluster.get("placementpolicy", bad["metadata"]["name"]) is None
        assert cluster.get("placementpolicy", webhook_only["metadata"]["name"]) is None
        assert cluster.get("teamquota", quota["metadata"]["name"]) is None
        assert stored.returncode == 0, stored.stderr
        assert cluster.get("placementpolicy", good["metadata"]["name"]) is not None
    finally:
        names = (bad, good, webhook_only)
        delete(cluster, "placementpolicy", *(p["metadata"]["name"] for p in names))
        delete(cluster, "teamquota", quota["metadata"]["name"])


def test_with_the_webhook_down_a_bad_policy_is_stored_reported_and_can_be_fixed_or_deleted(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    name = f"e2e-down-{secrets.token_hex(3)}"
    bad = policy(name, nodeSelector={"pool": "a100"}, tolerations=STORABLE_TYPO)
    sentinel = f"{name}-after"
    after_restart = policy(sentinel, nodeSelector={"pool": "a100"}, tolerations=FIXED)
    try:
        webhook.stop()
        try:
            written = apply(cluster, bad)
        finally:
            webhook.start()

        assert written.returncode == 0, written.stderr  # failurePolicy Ignore: never locked out
        reported = cluster.wait_for(
            lambda: condition(cluster.get("placementpolicy", name), "Valid") or None,
            timeout=15,
            what="a Valid condition on the stored bad policy",
        )
        assert (reported["status"], reported["reason"]) == ("False", "InvalidSpec")
        cluster.wait_for(
            lambda: times_told(cluster, name, INVALID_PLACEMENT_POLICY) == 1,
            timeout=15,
            what="its Warning Event",
        )

        # A restarted webhook finds the stored status already right: it records no second Event
        # (and the status stands: a rewrite as it was would leave the resourceVersion too). A
        # good policy applied after the restart is reported after the listed ones: once it is,
        # they were looked at.
        version = (cluster.get("placementpolicy", name) or {})["metadata"]["resourceVersion"]
        webhook.restart()
        assert apply(cluster, after_restart).returncode == 0
        cluster.wait_for(
            lambda: condition(cluster.get("placementpolicy", sentinel), "Valid") or None,
            timeout=15,
            what="the Valid condition of a policy applied after the restart",
        )
        unwritten = cluster.get("placementpolicy", name) or {}
        assert unwritten["metadata"]["resourceVersion"] == version, "its status was rewritten"
        assert times_told(cluster, name, INVALID_PLACEMENT_POLICY) == 1

        relabelled = cluster.kubectl(
            "label", "placementpolicy", name, "owner=ml-platform", check=False
        )
        fixed = apply(cluster, policy(name, nodeSelector={"pool": "a100"}, tolerations=FIXED))
        assert relabelled.returncode != 0  # still invalid: refused, with the field
        assert "spec.tolerations[0].operator" in relabelled.stderr
        assert fixed.returncode == 0, fixed.stderr

        webhook.stop()
        try:
            apply(cluster, bad)  # invalid again, stored while the webhook is down
        finally:
            webhook.start()
        deleted = cluster.kubectl("delete", "placementpolicy", name, check=False)

        assert deleted.returncode == 0, deleted.stderr
        assert cluster.get("placementpolicy", name) is None
    finally:
        delete(cluster, "placementpolicy", name, sentinel)


def test_a_policy_tying_with_another_is_applied_with_a_warning_and_the_loser_is_shadowed(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    suffix = secrets.token_hex(3)
    # A priority no other test's policy has, so only these two can tie.
    priority = 1000 + secrets.randbelow(100_000)
    shared, own = f"e2e-tie-{suffix}", f"e2e-own-{suffix}"
    first_name, second_name = f"e2e-tie-a-{suffix}", f"e2e-tie-b-{suffix}"
    first = policy(first_name, namespaces=[shared], priority=priority)
    second = policy(second_name, namespaces=[shared, own], priority=priority)
    lowered = policy(first_name, namespaces=[shared], priority=priority - 1)

    def shadowed(name: str) -> dict[str, Any]:
        return condition(cluster.get("placementpolicy", name), "Shadowed")

    try:
        alone = apply(cluster, first)
        tying = apply(cluster, second)

        assert alone.returncode == 0, alone.stderr
        assert "ties with" not in alone.stderr
        assert tying.returncode == 0, tying.stderr  # legal: a warning, not a refusal
        assert (
            f'Warning: torchgate: spec.priority: ties with PlacementPolicy "{first_name}" at '
            f"priority {priority} on namespace {shared} (both list them)"
        ) in tying.stderr
        told = cluster.wait_for(
            lambda: (
                shadowed(second_name) if shadowed(second_name).get("status") == "True" else None
            ),
            timeout=15,
            what="the Shadowed condition on the policy losing the tie",
        )
        assert told["reason"] == "TiedAtSamePriority"
        assert (
            f'shadowed on namespace {shared} by PlacementPolicy "{first_name}"' in told["message"]
        )
        assert shadowed(first_name)["status"] == "False"

        # The tie is gone when the other policy changes: the loser's condition clears.
        assert apply(cluster, lowered).returncode == 0
        cleared = cluster.wait_for(
            lambda: (
                shadowed(second_name) if shadowed(second_name).get("status") == "False" else None
            ),
            timeout=15,
            what="the Shadowed condition cleared",
        )
        assert cleared["reason"] == "NoTie"
    finally:
        delete(cluster, "placementpolicy", first_name, second_name)

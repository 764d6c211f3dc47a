"""Pool sharing, the admin's side, on a real apiserver: the CRDs and the webhook's refusals.

The TeamQuota CRD and the PlacementPolicy's new sections must be served as the docs show them:
``kubectl get teamquotas`` prints one row per team with its cohort, quota, usage and borrowing,
and the apiserver keeps ``spec.preemption``/``spec.topology`` (a structural schema prunes fields
it does not know). Then ``torchgate webhook`` (a subprocess watching the cluster, registered with
``failurePolicy: Fail``) refuses a job its team can never hold and a topology annotation naming
no level, with the apiserver passing on the (reason, field) causes; a TeamQuota created or
changed in the cluster takes effect without a restart; a TeamQuota claiming a namespace another
team owns is refused, and a namespace moves once its team let it go.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders.job import gpu_job
from tests.builders.policy import policy
from tests.builders.team import team_quota
from tests.e2e.conftest import Cluster
from tests.e2e.test_webhook_e2e import causes, jobs_path
from tests.e2e.webhook_process import LocalWebhook
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate_dev.apiserver import wait_for_admission
from torchgate_dev.state import DevError

pytestmark = pytest.mark.e2e

DUPLICATE = ErrorType.DUPLICATE.value
FORBIDDEN = ErrorType.FORBIDDEN.value
NOT_SUPPORTED = ErrorType.NOT_SUPPORTED.value
REQUIRED_ANNOTATION = "torchgate.io/topology-required"
LEVELS = ["topology.torchgate.io/block", "topology.torchgate.io/rack", "kubernetes.io/hostname"]


def dry_run(cluster: Cluster, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    namespace = obj["metadata"]["namespace"]
    return cluster.api_request("POST", jobs_path(namespace) + "?dryRun=All", obj)


# ----------------------------------------------------------------------------- the CRDs


def test_kubectl_get_teamquotas_prints_quota_usage_and_borrowing(cluster: Cluster) -> None:
    suffix = secrets.token_hex(3)
    vision, speech = f"e2e-vision-{suffix}", f"e2e-speech-{suffix}"
    try:
        cluster.apply(
            [
                team_quota(vision, [f"{vision}-ns"], cohort="h100", nominalGPUs=32,
                           borrowingLimitGPUs=16),
                team_quota(speech, [f"{speech}-ns"], cohort="h100", nominalGPUs=32),
            ]
        )  # fmt: skip
        # What the controller writes (admission/poolsource.py), written here by hand.
        cluster.kubectl(
            "patch", "teamquota", vision, "--subresource=status", "--type=merge", "-p",
            '{"status": {"usedGPUs": 40, "borrowedGPUs": 8, "overQuotaGPUs": 0, "admittedJobs": 5, '
            '"waitingJobs": 2}}',
        )  # fmt: skip
        table = cluster.kubectl("get", "teamquotas", vision, speech).stdout.splitlines()
        short = cluster.kubectl("get", "tq", vision, "-o", "name").stdout.strip()
    finally:
        cluster.kubectl("delete", "teamquota", vision, speech, "--ignore-not-found", check=False)

    header, *rows = [line.split() for line in table]
    assert header == [
        "NAME", "COHORT", "NOMINAL", "BORROW-LIMIT", "USED", "BORROWED", "OVER-QUOTA", "WAITING",
        "AGE",
    ]  # fmt: skip
    by_name = {row[0]: row for row in rows}
    assert by_name[vision][1:8] == ["h100", "32", "16", "40", "8", "0", "2"]
    # No borrowing limit and no status yet: kubectl leaves those cells empty.
    assert by_name[speech][1:3] == ["h100", "32"]
    assert len(by_name[speech]) == 4  # name, cohort, nominal, age
    assert short == f"teamquota.torchgate.io/{vision}"


def test_the_apiserver_keeps_the_policy_sections_and_refuses_a_negative_quota(
    cluster: Cluster,
) -> None:
    name = f"e2e-sections-{secrets.token_hex(3)}"
    sections = {
        "preemption": {"minimumRunSeconds": 600, "neverPreemptPriority": 1000000},
        "topology": {"levels": LEVELS, "defaultLevel": LEVELS[1], "defaultMode": "Required"},
    }
    try:
        cluster.apply(policy(name, namespaces=["nowhere"], **sections))
        stored = cluster.get("placementpolicy", name)
    finally:
        cluster.kubectl("delete", "placementpolicy", name, "--ignore-not-found", check=False)
    assert stored is not None
    assert {key: stored["spec"][key] for key in sections} == sections

    negative = team_quota(f"e2e-negative-{secrets.token_hex(3)}", ["x"], nominalGPUs=-1)
    status, body = cluster.api_request(
        "POST", "/apis/torchgate.io/v1alpha1/teamquotas?dryRun=All", negative
    )
    assert status == 422, body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.nominalGPUs"]
    # A null the parser reads as "absent" is pruned by the apiserver, not refused.
    unlimited = team_quota(
        f"e2e-null-{secrets.token_hex(3)}", ["x"], nominalGPUs=1, borrowingLimitGPUs=None
    )
    status, body = cluster.api_request(
        "POST", "/apis/torchgate.io/v1alpha1/teamquotas?dryRun=All", unlimited
    )
    assert status == 201, body
    assert "borrowingLimitGPUs" not in body["spec"]


# ----------------------------------------------------------------------------- the webhook


@pytest.fixture(scope="module")
def webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWebhook]:
    """``torchgate webhook`` watching this cluster, registered with ``failurePolicy: Fail``."""
    if cluster.plane.attached:
        pytest.skip("the webhook runs on this machine's loopback; an attached cluster cannot")
    server = LocalWebhook(cluster, tmp_path_factory.mktemp("teamquota-webhook"))
    ca_bundle = server.make_certificates()
    server.start()
    try:
        server.register(ca_bundle)
        try:
            wait_for_admission(cluster.api_request, timeout=30)
        except DevError as error:
            pytest.fail(str(error), pytrace=False)
        yield server
    finally:
        server.unregister()
        server.stop()


def test_the_webhook_refuses_what_a_team_can_never_hold_and_unknown_topology_levels(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("quota")
    suffix = secrets.token_hex(3)
    team, lender, topo = f"e2e-team-{suffix}", f"e2e-lender-{suffix}", f"e2e-topo-{suffix}"
    cohort = f"c-{suffix}"
    try:
        cluster.apply(
            [
                # Priority: chosen over any catch-all policy another test may have left.
                policy(topo, namespaces=[namespace], priority=1000, topology={"levels": LEVELS}),
                team_quota(team, [namespace], cohort=cohort, nominalGPUs=8,
                           borrowingLimitGPUs=16),
            ]
        )  # fmt: skip
        # 1 Master + 1 Worker of 8 GPUs: 16 > 8 nominal, and nobody in the cohort lends.
        too_big = gpu_job("too-big", namespace=namespace, workers=1, gpus=8).build()

        def refused() -> dict[str, Any] | None:
            status, body = dry_run(cluster, too_big)
            return body if status == 422 else None

        body = cluster.wait_for(refused, timeout=15, what="the webhook to know the TeamQuota")
        assert causes(body) == {(FORBIDDEN, "spec.pytorchReplicaSpecs")}
        fits = gpu_job("fits", namespace=namespace, workers=0, gpus=8).build()
        assert dry_run(cluster, fits)[0] == 201

        # A lender joins the cohort: the same job can now borrow, without a webhook restart.
        began = time.monotonic()
        cluster.apply(team_quota(lender, [f"{lender}-ns"], cohort=cohort, nominalGPUs=8))
        cluster.wait_for(
            lambda: dry_run(cluster, too_big)[0] == 201, timeout=15, what="the lender seen"
        )
        assert time.monotonic() - began < 15

        unknown = gpu_job("unknown-level", namespace=namespace, workers=0, gpus=8).build()
        unknown["metadata"]["annotations"] = {REQUIRED_ANNOTATION: "topology.torchgate.io/row"}
        status, body = dry_run(cluster, unknown)
        assert status == 422, body
        assert causes(body) == {(NOT_SUPPORTED, f"metadata.annotations[{REQUIRED_ANNOTATION}]")}
        rack = gpu_job("rack", namespace=namespace, workers=0, gpus=8).build()
        rack["metadata"]["annotations"] = {REQUIRED_ANNOTATION: LEVELS[1]}
        assert dry_run(cluster, rack)[0] == 201
    finally:
        cluster.kubectl("delete", "teamquota", team, lender, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "placementpolicy", topo, "--ignore-not-found", check=False)
        cluster.clean_up_test()


def test_the_webhook_refuses_a_team_quota_claiming_a_namespace_another_team_owns(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    suffix = secrets.token_hex(3)
    # alpha is earlier by name: stored, its claim would leave zeta out with all its namespaces.
    alpha, zeta = f"e2e-alpha-{suffix}", f"e2e-zeta-{suffix}"
    train, evaluate = f"zeta-train-{suffix}", f"zeta-eval-{suffix}"

    def put(name: str, namespaces: list[str], *, dry: bool) -> tuple[int, dict[str, Any]]:
        stored = cluster.get("teamquota", name)
        assert stored is not None
        stored["spec"]["namespaces"] = namespaces
        path = f"/apis/torchgate.io/v1alpha1/teamquotas/{name}" + ("?dryRun=All" if dry else "")
        return cluster.api_request("PUT", path, stored)

    try:
        cluster.apply(
            [
                team_quota(zeta, [train, evaluate], cohort=suffix, nominalGPUs=16),
                team_quota(alpha, [f"alpha-{suffix}"], cohort=suffix, nominalGPUs=8),
            ]
        )
        claim = [f"alpha-{suffix}", evaluate]

        body = cluster.wait_for(
            lambda: (answer := put(alpha, claim, dry=True))[0] == 422 and answer[1],
            timeout=15,
            what="the webhook to know zeta's namespaces",
        )

        assert causes(body) == {(DUPLICATE, "spec.namespaces[1]")}
        assert zeta in body["details"]["causes"][0]["message"]
        assert put(alpha, claim, dry=False)[0] == 422
        assert cluster.get("teamquota", alpha)["spec"]["namespaces"] == [f"alpha-{suffix}"]  # type: ignore[index]

        # The move, in two writes: zeta lets the namespace go, then alpha takes it.
        assert put(zeta, [train], dry=False)[0] == 200
        cluster.wait_for(
            lambda: put(alpha, claim, dry=True)[0] == 200, timeout=15, what="zeta's release seen"
        )
        assert put(alpha, claim, dry=False)[0] == 200
    finally:
        cluster.kubectl("delete", "teamquota", alpha, zeta, "--ignore-not-found", check=False)

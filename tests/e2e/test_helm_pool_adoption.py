"""The upgrade that adopts the install's TeamQuotas never silently drops what the values say.

On a first install that brings torchgate's CRDs, the ``teamQuotas`` are post-install hooks, and
the first ``helm upgrade`` adopts them into the release. Helm 3 patches an adopted custom
resource with the merge patch of its new manifest against itself, which is empty: before, an
admin who raised a quota (or removed one) in that upgrade saw it succeed while the live quota
stayed as installed, and stayed so through later upgrades until the entry changed again. Now
that upgrade fails, naming the quota and what to do, and changes nothing; the upgrade that
keeps them as installed adopts them, and the next one raises one (in place) and deletes the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.installation import IMAGE, cluster_without_torchgate, run_chart_with_values

pytestmark = [pytest.mark.e2e, pytest.mark.real_node, pytest.mark.timeout(900)]

RAISED = "vision"
DROPPED = "speech"


@pytest.fixture(scope="module")
def fresh_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A cluster with the PyTorchJob CRD and no trace of torchgate."""
    workdir = tmp_path_factory.mktemp("helm-adoption")
    leftovers = [("teamquota", RAISED), ("teamquota", DROPPED)]
    with cluster_without_torchgate(request, workdir, leftovers=leftovers) as cluster:
        yield cluster


def values(quotas: dict[str, int]) -> dict[str, Any]:
    """The admin's values: one TeamQuota of ``nominalGPUs`` per name."""
    return {
        "image": {"repository": IMAGE, "tag": "0.1.0"},
        "teamQuotas": [
            {"name": name, "spec": {"namespaces": [f"team-{name}"], "nominalGPUs": gpus}}
            for name, gpus in quotas.items()
        ],
    }


def helm(cluster: Cluster, tmp_path: Path, verb: str, quotas: dict[str, int]) -> tuple[int, str]:
    path = tmp_path / "values.yaml"
    result = run_chart_with_values(cluster, verb, values(quotas), path, check=False)
    return result.returncode, result.stderr


def nominal_gpus(cluster: Cluster) -> dict[str, int]:
    live = {name: cluster.get("teamquota", name) for name in (RAISED, DROPPED)}
    return {name: quota["spec"]["nominalGPUs"] for name, quota in live.items() if quota}


def test_the_adopting_upgrade_refuses_a_change_it_would_lose_and_the_next_makes_it(
    fresh_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = fresh_cluster
    assert cluster.get("crd", "teamquotas.torchgate.io") is None, "a cluster without torchgate"
    returncode, stderr = helm(cluster, tmp_path, "install", {RAISED: 8, DROPPED: 4})
    assert returncode == 0, stderr
    installed = cluster.get("teamquota", RAISED)
    assert installed is not None
    assert nominal_gpus(cluster) == {RAISED: 8, DROPPED: 4}

    returncode, stderr = helm(cluster, tmp_path, "upgrade", {RAISED: 16, DROPPED: 4})
    assert returncode != 0, "the first upgrade raised a quota it does not change"
    assert f'TeamQuota "{RAISED}" (teamQuotas)' in stderr, stderr
    assert nominal_gpus(cluster) == {RAISED: 8, DROPPED: 4}

    returncode, stderr = helm(cluster, tmp_path, "upgrade", {RAISED: 8})
    assert returncode != 0, "the first upgrade removed a quota it does not delete"
    assert f'TeamQuota "{DROPPED}" (teamQuotas)' in stderr, stderr
    assert nominal_gpus(cluster) == {RAISED: 8, DROPPED: 4}

    returncode, stderr = helm(cluster, tmp_path, "upgrade", {RAISED: 8, DROPPED: 4})
    assert returncode == 0, stderr
    returncode, stderr = helm(cluster, tmp_path, "upgrade", {RAISED: 16})
    assert returncode == 0, stderr
    cluster.wait_for(
        lambda: nominal_gpus(cluster) == {RAISED: 16},
        timeout=60,
        what="the quota raised and the other deleted",
    )
    raised = cluster.get("teamquota", RAISED)
    assert raised is not None
    assert raised["metadata"]["uid"] == installed["metadata"]["uid"], "updated, not replaced"

"""What the cluster makes of a number written in a manifest, and ``torchgate check`` agreeing.

kubectl converts YAML to JSON with go-yaml (``1.0`` and ``1e3`` are floats to it) and Go's
``encoding/json``, the apiserver decodes numbers as int64 when the literal is one and float64
otherwise, validates them against the CRD's schema, and stores (and sends to webhooks) what Go
encodes again. Each case of ``tests/clusternumbers.py`` is applied here as ``kubectl apply
--dry-run=server`` applies it, with the webhook registered, and the table's recorded verdict is
checked against the cluster's: admitted with the value stored at the field, or refused with the
recorded ``(reason, field)`` causes (from the same JSON sent as a strict dry-run creation, whose
Status carries them). ``torchgate check`` must give the same verdict, store the same value and
refuse at the same fields.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.clusternumbers import NUMBER_CASES, NumberCase, value_at
from tests.e2e.conftest import Cluster
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook
from torchgate.pytorchjob import names

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

STRICT_DRY_RUN = "?dryRun=All&fieldValidation=Strict"


def sent_by_kubectl(cluster: Cluster, path: Path, namespace: str) -> dict[str, Any]:
    """The JSON kubectl sends for the manifest (its YAML converted as kubectl converts it)."""
    printed = cluster.kubectl("create", "--dry-run=client", "-o", "json", "-n", namespace,
                              "-f", str(path))  # fmt: skip
    return json.loads(printed.stdout)  # type: ignore[no-any-return]


def cluster_outcome(
    cluster: Cluster, case: NumberCase, path: Path, namespace: str
) -> tuple[Any, frozenset[tuple[str, str]]]:
    """(the value stored at the case's field, the refusal's causes) as the cluster decides."""
    body = sent_by_kubectl(cluster, path, namespace)
    status, answer = cluster.api_request(
        "POST", f"/apis/{names.API_VERSION}/namespaces/{namespace}/pytorchjobs{STRICT_DRY_RUN}",
        body,
    )  # fmt: skip
    applied = cluster.kubectl(
        "apply", "--dry-run=server", "-o", "json", "-n", namespace, "-f", str(path), check=False
    )
    if status in (200, 201):
        assert applied.returncode == 0, applied.stderr
        stored = value_at(json.loads(applied.stdout), case.field)
        assert value_at(answer, case.field) == stored
        return stored, frozenset()
    assert applied.returncode == 1
    causes = frozenset(
        (cause.get("reason", ""), cause.get("field", ""))
        for cause in answer.get("details", {}).get("causes", [])
    )
    assert causes, f"HTTP {status} without causes: {answer}"
    for _, field in causes:
        assert field in applied.stderr
    return None, causes


def check_outcome(
    case: NumberCase, path: Path, namespace: str
) -> tuple[Any, frozenset[tuple[str, str]]]:
    """(the value check stores at the case's field, the causes of its refusal)."""
    result = subprocess.run(
        [sys.executable, "-m", "torchgate", "check", "-o", "json", "-n", namespace, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    (item,) = json.loads(result.stdout)["results"]
    if item["allowed"]:
        return value_at(item["object"], case.field), frozenset()
    return None, frozenset((error["type"], error["field"]) for error in item["errors"])


@pytest.mark.parametrize("case", NUMBER_CASES, ids=lambda case: case.name)
def test_check_reads_a_number_as_the_cluster_stores_it(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path, case: NumberCase
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(case.manifest(), encoding="utf-8")
    namespace = cluster.new_namespace("number")

    from_cluster = cluster_outcome(cluster, case, path, namespace)
    from_check = check_outcome(case, path, namespace)

    assert from_cluster == (case.stored, case.causes)
    assert type(from_cluster[0]) is type(case.stored)
    assert from_check == from_cluster
    assert type(from_check[0]) is type(case.stored)

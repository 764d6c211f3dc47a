"""``torchgate check`` reads numbers as the cluster stores them, and gives the cluster's verdict.

The verdicts are those ``tests/e2e/test_check_numbers_e2e.py`` recorded from a real apiserver
with the webhook registered (``tests/clusternumbers.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders.team import team_quota
from tests.clusternumbers import NUMBER_CASES, SEED_003, NumberCase, value_at
from torchgate.cli import main
from torchgate.kube.manifestfiles import crd_version
from torchgate.pytorchjob.manifests import read_manifests
from torchgate.webhook.check import check_documents


def check_outcome(case: NumberCase) -> tuple[Any, frozenset[tuple[str, str]]]:
    """(the value check stores at the case's field, the causes of its refusal)."""
    documents = read_manifests("job.yaml", case.manifest(), crd_version=crd_version())
    (result,) = check_documents(documents, [], "default")
    evaluation = result.evaluation
    if evaluation.allowed:
        return value_at(evaluation.object, case.field), frozenset()
    return None, frozenset((error.type.value, error.field) for error in evaluation.errors)


@pytest.mark.parametrize("case", NUMBER_CASES, ids=lambda case: case.name)
def test_check_gives_the_verdict_the_cluster_gave(case: NumberCase) -> None:
    stored, causes = check_outcome(case)

    assert (stored, causes) == (case.stored, case.causes)
    assert type(stored) is type(case.stored)


@pytest.mark.parametrize("gpus", ["8.0", "8e0", "0o10"])
def test_a_team_quota_of_gpus_written_otherwise_is_read_as_the_cluster_stores_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gpus: str
) -> None:
    # kubectl apply stores 8 of each (go-yaml reads 8e0 and 0o10 as numbers, which PyYAML reads
    # as strings; Go writes a whole float64 as an integer), so the quota is valid, on a cluster
    # and to check's --policy.
    quota = team_quota("team-a", ["team-a"], nominalGPUs=8)
    text = yaml.safe_dump(quota).replace("nominalGPUs: 8", f"nominalGPUs: {gpus}")
    assert f"nominalGPUs: {gpus}" in text
    policy_file = tmp_path / "quota.yaml"
    policy_file.write_text(text, encoding="utf-8")

    code = main(["check", "--policy", str(policy_file), "-n", "team-a", str(SEED_003)])

    _, err = capsys.readouterr()
    assert (code, err) == (0, "")

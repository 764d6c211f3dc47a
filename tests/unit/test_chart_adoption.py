"""The upgrade that adopts the install's pool objects refuses what it would silently lose.

Helm 3 adopts the ``teamQuotas`` and ``placementPolicies`` a first install created as
post-install hooks in the next upgrade, patching them with the merge patch of their new manifest
against itself: nothing. ``torchgate.adoptionLoss`` (rules in _helpers.tpl) fails that upgrade
when an entry differs from its live object or is gone; here it is rendered on a copy of the
chart with a made-up live object and release record (``helm template`` has no cluster to look
them up in); tests/e2e/test_helm_pool_adoption.py runs it against a real one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.helmtool import CHART, run_helm

RELEASE = "torchgate"
INSTALLED = {"namespaces": ["team-vision"], "nominalGPUs": 8}
PROBE = """\
{{- include "torchgate.adoptionLoss" (dict "root" $ "kind" "TeamQuota" "key" "teamQuotas"
  "entries" .Values.teamQuotas "object" (.Files.Get "probe/object.json" | fromJson)
  "record" (.Files.Get "probe/record.json" | fromJson)) }}
"""


def live_quota(*, hook: bool = True, release: str = RELEASE, installed_in: str = "1") -> Any:
    annotations = {
        "meta.helm.sh/release-name": release,
        "meta.helm.sh/release-namespace": "pool-admin",
        "torchgate.io/installed-in-revision": installed_in,
    }
    if hook:
        annotations["helm.sh/hook"] = "post-install"
    return {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": "vision", "annotations": annotations},
        "spec": INSTALLED,
    }


def record(status: str) -> Any:
    return {"metadata": {"name": f"sh.helm.release.v1.{RELEASE}.v1", "labels": {"status": status}}}


def render_adoption(
    tmp_path: Path, entries: list[Any], live: Any, release_record: Any
) -> tuple[int, str]:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-adoption-probe.yaml").write_text(PROBE, encoding="utf-8")
    (chart / "probe").mkdir()
    (chart / "probe" / "object.json").write_text(json.dumps(live), encoding="utf-8")
    (chart / "probe" / "record.json").write_text(json.dumps(release_record), encoding="utf-8")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"teamQuotas": entries}), encoding="utf-8")
    result = run_helm(
        "template", RELEASE, str(chart), "--namespace=pool-admin", "--is-upgrade",
        f"--values={values}", check=False,
    )  # fmt: skip
    return result.returncode, result.stderr


RAISED = [{"name": "vision", "spec": {**INSTALLED, "nominalGPUs": 16}}]


def test_a_changed_entry_fails_the_adopting_upgrade_naming_it_and_both_specs(
    tmp_path: Path,
) -> None:
    returncode, stderr = render_adoption(tmp_path, RAISED, live_quota(), record("deployed"))
    assert returncode != 0
    assert 'TeamQuota "vision" (teamQuotas)' in stderr, stderr
    assert '"nominalGPUs":8' in stderr, stderr
    assert '"nominalGPUs":16' in stderr, stderr


def test_a_removed_entry_fails_the_adopting_upgrade_naming_it(tmp_path: Path) -> None:
    returncode, stderr = render_adoption(tmp_path, [], live_quota(), record("deployed"))
    assert returncode != 0
    assert 'TeamQuota "vision" (teamQuotas)' in stderr, stderr
    assert "without its entry" in stderr, stderr


def test_an_entry_as_installed_is_adopted(tmp_path: Path) -> None:
    entries = [{"name": "vision", "spec": INSTALLED}]
    returncode, stderr = render_adoption(tmp_path, entries, live_quota(), record("deployed"))
    assert returncode == 0, stderr


@pytest.mark.parametrize(
    ("live", "release_record"),
    [
        (live_quota(), record("superseded")),
        (live_quota(hook=False), record("deployed")),
        (live_quota(release="another"), record("deployed")),
        (live_quota(installed_in="3"), {}),
    ],
    ids=["adopted-already", "not-a-hook", "another-release", "no-record-later-upgrade"],
)
def test_a_change_to_an_object_this_upgrade_does_not_adopt_is_left_to_helm(
    tmp_path: Path, live: Any, release_record: Any
) -> None:
    returncode, stderr = render_adoption(tmp_path, RAISED, live, release_record)
    assert returncode == 0, stderr


def test_without_a_record_the_revision_after_the_install_is_the_adopting_one(
    tmp_path: Path,
) -> None:
    # `helm template` renders revision 1: an install of revision 0 is the one before it.
    returncode, stderr = render_adoption(tmp_path, RAISED, live_quota(installed_in="0"), {})
    assert returncode != 0
    assert 'TeamQuota "vision" (teamQuotas)' in stderr, stderr


def test_the_install_hook_records_its_revision(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"teamQuotas": [{"name": "vision", "spec": INSTALLED}]}))
    result = run_helm("template", RELEASE, str(CHART), f"--values={values}")
    quota = ms.find(ms.parse_documents(result.stdout), "TeamQuota", "vision")
    assert quota["metadata"]["annotations"]["torchgate.io/installed-in-revision"] == "1"

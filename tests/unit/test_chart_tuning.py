"""The chart's ``controller.tuning`` values are the controller's tuning flags, nothing else.

One declaration per contract: the controller's argparse defaults and its bounds
(``FLAG_BOUNDS``) are the source; values.yaml must carry the same defaults and
values.schema.json the same bounds, so an admin tunes the controller without forking the chart
and a value the controller would refuse at start (a crash loop after the install "succeeded")
is refused by ``helm install``/``helm template`` instead, naming the value.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.helmtool import CHART, run_helm
from torchgate.cli import build_parser
from torchgate.controller.command import FLAG_BOUNDS, manager_settings


def tuning_values() -> dict[str, Any]:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    tuning: dict[str, Any] = values["controller"]["tuning"]
    return tuning


def pacing_values() -> dict[str, Any]:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    pacing: dict[str, Any] = values["controller"]["admissionPacing"]
    return pacing


def pacing_schema() -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    node: dict[str, Any] = schema["properties"]["controller"]["properties"]["admissionPacing"]
    return node


def tuning_schema() -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    node: dict[str, Any] = schema["properties"]["controller"]["properties"]["tuning"]
    return node


def flag_destination(value_name: str) -> str:
    """``nodeLostSeconds`` -> ``node_lost_seconds`` (the chart passes ``--node-lost-seconds``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", value_name).lower()


def controller_args(objects: list[ms.Obj]) -> Any:
    deployment = ms.find(objects, "Deployment", "torchgate-controller")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return build_parser("controller").parse_args(container["args"])


def test_every_bounded_controller_flag_is_a_tuning_or_pacing_value() -> None:
    chart = {flag_destination(name) for name in (*tuning_values(), *pacing_values())}
    assert chart == set(FLAG_BOUNDS)


@pytest.mark.parametrize("name", sorted(pacing_values()))
def test_a_pacing_values_default_and_bounds_are_the_controllers(name: str) -> None:
    defaults = build_parser("controller").parse_args(["controller"])
    node = pacing_schema()["properties"][name]
    bounds = FLAG_BOUNDS[flag_destination(name)]
    assert pacing_values()[name] == getattr(defaults, flag_destination(name))
    assert node["type"] == "number"  # seconds with fractions
    assert (node["minimum"], node.get("maximum")) == (bounds.minimum, bounds.maximum)


@pytest.mark.parametrize("name", sorted(tuning_values()))
def test_a_tuning_values_default_is_the_controllers_default(name: str) -> None:
    defaults = build_parser("controller").parse_args(["controller"])
    assert tuning_values()[name] == getattr(defaults, flag_destination(name))


@pytest.mark.parametrize("name", sorted(tuning_values()))
def test_a_tuning_values_schema_has_the_controllers_bounds(name: str) -> None:
    node = tuning_schema()["properties"][name]
    bounds = FLAG_BOUNDS[flag_destination(name)]
    assert node["type"] == "integer"
    assert (node["minimum"], node.get("maximum")) == (bounds.minimum, bounds.maximum)
    assert name in tuning_schema()["required"]


def test_the_default_rendering_runs_the_controller_with_its_defaults() -> None:
    args = controller_args(ms.chart())
    defaults = build_parser("controller").parse_args(["controller"])
    settings = manager_settings(args)
    # The chart names the controller's own Deployment (fixed by the chart, not a tuning value).
    assert settings.deployment == (args.leader_election_namespace, "torchgate-controller")
    assert dataclasses.replace(settings, deployment=None) == manager_settings(defaults)


def test_tuning_values_reach_the_controllers_settings(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    # Written in a values file, a whole number is a float to helm: it must still render as one.
    values.write_text(
        "controller: {tuning: {nodeLostSeconds: 120, workers: 64, starvationSeconds: 1800000}}\n",
        encoding="utf-8",
    )
    settings = manager_settings(
        controller_args(
            ms.chart([f"--values={values}", "--set=controller.tuning.failureWindowSeconds=20"])
        )
    )
    assert settings.options.node_lost_seconds == 120
    assert settings.workers == 64
    assert settings.starvation_seconds == 1_800_000
    assert settings.options.failure_window_seconds == 20


@pytest.mark.parametrize(
    ("setting", "refused_at"),
    [
        ("controller.tuning.nodeLostSeconds=-1", "/controller/tuning/nodeLostSeconds"),
        ("controller.tuning.nodeLostSeconds=3601", "/controller/tuning/nodeLostSeconds"),
        ("controller.tuning.nodeLostSeconds=30s", "/controller/tuning/nodeLostSeconds"),
        ("controller.tuning.starvationSeconds=2.5", "/controller/tuning/starvationSeconds"),
        ("controller.tuning.workers=0", "/controller/tuning/workers"),
        ("controller.tuning.resyncSeconds=0", "/controller/tuning/resyncSeconds"),
        ("controller.tuning.nodeLostSecs=60", "/controller/tuning"),
    ],
    ids=["negative", "above-maximum", "with-unit", "fraction", "no-workers", "no-resync", "typo"],
)
def test_a_tuning_value_the_controller_would_refuse_is_refused_by_helm(
    setting: str, refused_at: str
) -> None:
    result = run_helm("template", "torchgate", str(CHART), f"--set={setting}", check=False)
    assert result.returncode != 0
    assert f"at '{refused_at}'" in result.stderr

"""The chart says where torchgate's own pods run: ``<component>.nodeSelector`` and ``.tolerations``.

In a GPU pool whose nodes die every few hours, an admin keeps the webhook and the controller on
system nodes; without these values the chart had to be forked (an e2e run even saw an upgraded
controller land on a GPU node). Unset, nothing is added (the kustomize base has neither);
a toleration the apiserver would refuse is refused by ``helm install`` first.
``<component>.priorityClassName`` keeps them from being preempted first: with failurePolicy Fail
an evicted webhook blocks every PyTorchJob create.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.helmtool import CHART, run_helm

COMPONENTS = ("webhook", "controller")
SYSTEM_NODES = {"node-role.kubernetes.io/system": "true"}
CRITICAL_ADDONS = [{"key": "CriticalAddonsOnly", "operator": "Exists", "effect": "NoSchedule"}]


def pod_spec(objects: list[ms.Obj], component: str) -> dict[str, Any]:
    deployment = ms.find(objects, "Deployment", f"torchgate-{component}")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_components_node_selector_and_tolerations_reach_its_pods_only(
    component: str, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    settings = {"nodeSelector": SYSTEM_NODES, "tolerations": CRITICAL_ADDONS}
    values.write_text(yaml.safe_dump({component: settings}), encoding="utf-8")
    objects = ms.chart([f"--values={values}"])
    spec = pod_spec(objects, component)
    assert (spec["nodeSelector"], spec["tolerations"]) == (SYSTEM_NODES, CRITICAL_ADDONS)
    (other,) = set(COMPONENTS) - {component}
    assert not {"nodeSelector", "tolerations"} & set(pod_spec(objects, other))


def test_by_default_the_pods_may_run_on_any_untainted_node() -> None:
    objects = ms.chart()
    for component in COMPONENTS:
        assert not {"nodeSelector", "tolerations"} & set(pod_spec(objects, component))


@pytest.mark.parametrize(
    ("setting", "refused_at"),
    [
        ("controller.tolerations[0].operator=Exist", "/controller/tolerations/0/operator"),
        ("webhook.tolerations[0].effect=NoScheduling", "/webhook/tolerations/0/effect"),
        ("webhook.tolerations[0].kee=gpu", "/webhook/tolerations/0"),
        ("controller.nodeSelector=system", "/controller/nodeSelector"),
    ],
    ids=["operator", "effect", "misspelt-field", "not-a-map"],
)
def test_a_toleration_or_selector_the_apiserver_would_refuse_is_refused_by_helm(
    setting: str, refused_at: str
) -> None:
    result = run_helm("template", "torchgate", str(CHART), f"--set={setting}", check=False)
    assert result.returncode != 0
    assert f"at '{refused_at}'" in result.stderr


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_components_priority_class_reaches_its_pods_only(component: str) -> None:
    objects = ms.chart([f"--set={component}.priorityClassName=system-cluster-critical"])
    assert pod_spec(objects, component)["priorityClassName"] == "system-cluster-critical"
    (other,) = set(COMPONENTS) - {component}
    assert "priorityClassName" not in pod_spec(objects, other)


def test_by_default_the_pods_get_the_clusters_default_priority() -> None:
    objects = ms.chart()
    for component in COMPONENTS:
        assert "priorityClassName" not in pod_spec(objects, component)


@pytest.mark.parametrize(
    "name", ["System-Critical", "critical_pods", "-critical"], ids=["upper", "underscore", "dash"]
)
def test_a_priority_class_name_the_apiserver_would_refuse_is_refused_by_helm(name: str) -> None:
    setting = f"webhook.priorityClassName={name}"
    result = run_helm("template", "torchgate", str(CHART), f"--set={setting}", check=False)
    assert result.returncode != 0
    assert "at '/webhook/priorityClassName'" in result.stderr

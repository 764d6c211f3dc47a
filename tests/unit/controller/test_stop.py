"""``torchgate controller stop`` against a small in-memory cluster: scale, wait, always exit 0.

The fake plays the controller's part as the real one does it: once its Deployment asks for no
replica, its pods go after ``shutdown_polls`` looks, and the leader takes the finalizer off every
TeamQuota before the last pod goes (unless ``leader_can_write`` is false, as when its RBAC was
already deleted).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import pytest

from torchgate.cli import main
from torchgate.controller.command import add_arguments
from torchgate.controller.stop import stop_controller
from torchgate.controller.stopping import Verdict
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.resources import DEPLOYMENTS, PODS, TEAM_QUOTAS
from torchgate.pytorchjob.pool import QUOTA_FINALIZER

NAMESPACE = "torchgate-system"
NAME = "torchgate-controller"
LABELS = {"app.kubernetes.io/name": "torchgate", "app.kubernetes.io/component": "controller"}


class Cluster:
    """The controller's Deployment, its pods and the TeamQuotas, as the API shows them."""

    def __init__(
        self,
        *,
        replicas: int | None = 2,
        quotas: Mapping[str, bool] | None = None,
        shutdown_polls: int = 2,
        leader_can_write: bool = True,
        forbidden_scale: bool = False,
    ) -> None:
        self.replicas = replicas
        self.pods = 0 if replicas is None else replicas
        self.held = {name for name, held in (quotas or {}).items() if held}
        self.quotas = sorted(quotas or {})
        self.shutdown_polls = shutdown_polls
        self.leader_can_write = leader_can_write
        self.forbidden_scale = forbidden_scale
        self.pod_queries: list[Mapping[str, str]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if (method, path) == ("GET", DEPLOYMENTS.path(NAMESPACE, NAME)):
            if self.replicas is None:
                raise NotFound(404, "NotFound", "gone", method, path)
            return {"metadata": {"name": NAME}, "spec": self._spec()}
        if (method, path) == ("PATCH", DEPLOYMENTS.path(NAMESPACE, NAME, "scale")):
            if self.forbidden_scale:
                raise ApiError(403, "Forbidden", "no", method, path)
            self.replicas = body["spec"]["replicas"]
            return body
        if (method, path) == ("GET", PODS.path(NAMESPACE)):
            self.pod_queries.append(dict(query or {}))
            self._shut_down()
            return {"items": [{"metadata": {"name": f"p{i}"}} for i in range(self.pods)]}
        if (method, path) == ("GET", TEAM_QUOTAS.path()):
            items = []
            for name in self.quotas:
                finalizers = [QUOTA_FINALIZER] if name in self.held else []
                items.append({"metadata": {"name": name, "finalizers": finalizers}})
            return {"items": items}
        raise AssertionError(f"unexpected {method} {path}")

    def _spec(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "selector": {"matchLabels": LABELS}}

    def _shut_down(self) -> None:
        if self.replicas != 0 or self.pods == 0:
            return
        self.shutdown_polls -= 1
        if self.shutdown_polls > 0:
            return
        if self.leader_can_write:
            self.held.clear()  # the stopping leader sees no successor coming
        self.pods = 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0  # each look costs a second
        return self.now


async def stop(cluster: Cluster, *, wait_seconds: float = 60) -> tuple[Verdict, list[str]]:
    said: list[str] = []
    verdict = await stop_controller(
        cluster,
        namespace=NAMESPACE,
        name=NAME,
        wait_seconds=wait_seconds,
        poll=0,
        clock=Clock(),
        say=said.append,
    )
    return verdict, said


async def test_it_scales_to_zero_and_waits_for_the_leader_to_release_the_finalizers() -> None:
    cluster = Cluster(quotas={"vision": True, "idle": False}, shutdown_polls=3)

    verdict, _ = await stop(cluster)

    assert verdict is Verdict.DONE
    assert cluster.replicas == 0
    assert cluster.pods == 0
    assert cluster.held == set()
    selector = "app.kubernetes.io/component=controller,app.kubernetes.io/name=torchgate"
    assert cluster.pod_queries[0] == {"labelSelector": selector}
    assert len(cluster.pod_queries) == 3  # it waited for the pods, not just for the finalizers


async def test_a_leader_that_cannot_write_leaves_the_finalizers_and_the_stop_says_which() -> None:
    cluster = Cluster(quotas={"vision": True}, leader_can_write=False)

    verdict, said = await stop(cluster)

    assert verdict is Verdict.DONE
    assert cluster.held == {"vision"}
    assert "vision" in said[-1]


async def test_it_gives_up_at_the_timeout_when_the_pods_never_go() -> None:
    cluster = Cluster(quotas={"vision": True}, shutdown_polls=10_000)

    verdict, _ = await stop(cluster, wait_seconds=5)

    assert verdict is Verdict.GAVE_UP
    assert cluster.replicas == 0


async def test_without_the_deployment_it_only_waits_for_the_finalizers() -> None:
    assert (await stop(Cluster(replicas=None, quotas={"idle": False})))[0] is Verdict.DONE
    verdict, _ = await stop(Cluster(replicas=None, quotas={"vision": True}), wait_seconds=5)
    assert verdict is Verdict.GAVE_UP


async def test_a_refused_scale_waits_for_nothing_and_says_what_is_left() -> None:
    cluster = Cluster(quotas={"vision": True}, forbidden_scale=True)

    verdict, said = await stop(cluster)

    assert verdict is Verdict.GAVE_UP
    assert cluster.replicas == 2
    assert len(cluster.pod_queries) == 1  # one look, not a minute of them
    assert "vision" in said[-1]


def test_the_stop_action_parses_its_own_flags_beside_the_controllers() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    args = parser.parse_args(
        ["--kubeconfig", "/k", "stop", "--deployment=d", "--namespace=ns", "--timeout=5"]
    )

    assert (args.action, args.stop_deployment, args.stop_namespace) == ("stop", "d", "ns")
    assert (args.stop_timeout, args.kubeconfig) == (5, "/k")
    assert parser.parse_args([]).action is None  # the controller itself


def test_an_unreachable_cluster_does_not_fail_the_uninstall() -> None:
    assert main(["controller", "stop", "--kubeconfig", "/nonexistent", "--timeout=1"]) == 0


def test_a_negative_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "stop", "--kubeconfig", "/nonexistent", "--timeout=-1"]) == 2
    assert "--timeout" in capsys.readouterr().err

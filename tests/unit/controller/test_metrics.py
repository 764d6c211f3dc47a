"""The controller's pool gauges: what Prometheus reads per team and reason at scrape time."""

from __future__ import annotations

from torchgate.controller.admission.waiting import Demand
from torchgate.controller.metrics import ControllerMetrics, TeamShare


def test_waiting_demand_and_team_shares_are_gauges_per_team_and_reason() -> None:
    metrics = ControllerMetrics(
        waiting=lambda: [Demand("vision", "WaitingForQuota", 2, 12000, 90.0)],
        teams=lambda: [TeamShare("vision", 8, 16, 8)],
    )
    labels = {"team": "vision", "reason": "WaitingForQuota"}

    def value(name: str, **only: str) -> float | None:
        return metrics.registry.get_sample_value(name, only or labels)

    assert value("torchgate_controller_waiting_jobs") == 2
    assert value("torchgate_controller_waiting_gpus") == 12
    assert value("torchgate_controller_longest_wait_seconds") == 90
    assert value("torchgate_controller_team_quota_gpus", team="vision") == 8
    assert value("torchgate_controller_team_used_gpus", team="vision") == 16
    assert value("torchgate_controller_team_borrowed_gpus", team="vision") == 8

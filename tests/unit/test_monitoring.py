"""The dashboard and alert rules read metrics the code declares, and every install carries them.

Against a real Prometheus: tests/e2e/test_monitoring_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tests import manifestset as ms
from tests import monitoring as mon


def every_query() -> Iterator[mon.Query]:
    yield from mon.dashboard_queries()
    yield from mon.alert_queries()


@pytest.mark.parametrize("query", list(every_query()), ids=lambda q: q.source)
def test_every_query_reads_metrics_the_controller_or_the_webhook_declares(
    query: mon.Query,
) -> None:
    missing = query.metric_names() - mon.declared()
    assert not missing, f"{query.source} reads undeclared metrics {sorted(missing)}"


def test_the_dashboard_covers_occupancy_waits_releases_restarts_and_the_webhook() -> None:
    read = set().union(*(q.metric_names() for q in mon.dashboard_queries()))
    assert {
        "torchgate_controller_team_used_gpus",  # occupancy by team
        "torchgate_controller_team_quota_gpus",
        "torchgate_controller_waiting_jobs",  # waits by reason
        "torchgate_controller_waiting_gpus",  # waiting demand by team
        "torchgate_controller_longest_wait_seconds",
        "torchgate_controller_release_seconds_bucket",  # release latency
        "torchgate_controller_gang_restarts_total",  # restarts by cause
        "torchgate_webhook_review_seconds_bucket",  # webhook latency
        "torchgate_webhook_reviews_total",  # refusals
    } <= read
    panels = [p for p in mon.dashboard()["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert len({p["id"] for p in mon.dashboard()["panels"]}) == len(mon.dashboard()["panels"])


def test_the_prometheus_rule_carries_the_rule_files_groups_in_every_rendering_with_it() -> None:
    groups = mon.rule_groups()
    renderings = [
        ms.kustomize("overlays/monitoring"),
        ms.chart(ms.CHART_VALUES["overlays/monitoring"]),
    ]
    for objects in renderings:
        (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
        assert rule["spec"]["groups"] == groups
        maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
        dashboard = maps["torchgate-grafana-dashboard"]
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dashboard["data"]["torchgate-dashboard.json"] == mon.DASHBOARD.read_text()
        rule_file = yaml.safe_load(maps["torchgate-alert-rules"]["data"]["torchgate.rules.yaml"])
        assert rule_file["groups"] == groups


def test_the_default_chart_renders_no_monitoring_objects() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in ms.chart(())}
    assert ("PrometheusRule", "torchgate") not in kinds
    assert ("ConfigMap", "torchgate-grafana-dashboard") not in kinds

"""torchgate's dashboard queries and alert rules, read from manifests/monitoring for the tests.

One place that knows where the queries are (the dashboard's panel targets, the rule file's alert
expressions) and which metrics each reads, so the unit tests check them against the metrics the
code declares and the e2e test against a real Prometheus.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from torchgate.controller.metrics import ControllerMetrics
from torchgate.webhook.server import Metrics as WebhookMetrics

REPO_ROOT = Path(__file__).resolve().parents[1]
MONITORING = REPO_ROOT / "manifests" / "monitoring"
DASHBOARD = MONITORING / "torchgate-dashboard.json"
RULES = MONITORING / "torchgate.rules.yaml"


def declared() -> set[str]:
    """Every sample name the controller and the webhook can expose."""
    names: set[str] = set()
    for registry in (ControllerMetrics().registry, WebhookMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
            names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
    return names


# Grafana's variables in the queries, and what the tests put in their place.
GRAFANA_VARIABLES = {"$__rate_interval": "1m"}
_SELECTOR = re.compile(r"\b(torchgate_[a-z0-9_]+)(\{[^}]*\})?")


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL expression and where it comes from (a panel title or an alert name)."""

    source: str
    expr: str

    def selectors(self) -> list[str]:
        """The torchgate series selectors it reads (``name{matchers}``), in order, once each."""
        found = [name + (matchers or "") for name, matchers in _SELECTOR.findall(self.expr)]
        return list(dict.fromkeys(found))

    def metric_names(self) -> set[str]:
        """The metric names it reads."""
        return {name for name, _ in _SELECTOR.findall(self.expr)}


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard, parsed."""
    return dict(json.loads(DASHBOARD.read_text(encoding="utf-8")))


def dashboard_queries() -> list[Query]:
    """Every panel target, Grafana's variables replaced (``GRAFANA_VARIABLES``)."""
    queries = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append(Query(f"{panel['title']} [{target['refId']}]", expr))
    return queries


def rule_groups() -> list[dict[str, Any]]:
    """The rule file's groups."""
    return list(yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"])


def alert_queries() -> list[Query]:
    """Every alert's expression."""
    return [
        Query(rule["alert"], str(rule["expr"]))
        for group in rule_groups()
        for rule in group["rules"]
        if "alert" in rule
    ]

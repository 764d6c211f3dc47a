"""Every flag of ``torchgate controller`` and ``torchgate webhook`` is a chart value or fixed by it.

An admin who installs only with the chart can set what docs/operations.md documents only if the
chart passes it: ``--arrival-settle-seconds``, ``--wave-hold-seconds``, ``--no-gang-objects`` and
``--log-format json`` could not be set at all. Each flag is therefore either in
:data:`SET_FROM_VALUES` (a value that reaches it, checked by rendering and parsing the args with
the real parser) or in :data:`FIXED_BY_CHART` (with why the chart decides it); a flag added to a
command and to neither fails :func:`test_every_flag_is_set_from_values_or_fixed_by_the_chart`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.helmtool import CHART
from torchgate.cli import build_parser
from torchgate.controller import command as controller_command
from torchgate.webhook import command as webhook_command

CONTROLLER_FIXED = {
    "kubeconfig": "in-cluster ServiceAccount",
    "namespace": "the chart's RBAC and webhooks are cluster-wide: all namespaces",
    "leader_elect": "always on: two replicas",
    "leader_election_namespace": "the pod's namespace",
    "leader_election_id": "the Lease the chart's Role grants",
    "deployment": "the controller's own Deployment, which the chart's Role lets it get",
    "pool_service_port": "the Service torchgate-controller's target port",
    "pool_service_bind_address": "all addresses of the pod",
    "tls_cert_file": "the mounted serving certificate",
    "tls_private_key_file": "the mounted serving certificate",
    "pod_name": "the pod's own name (downward API)",
    "metrics_bind_address": "all addresses of the pod",
    "metrics_port": "the probes' and the NetworkPolicy's port",
    "action": "none: the controller itself; the pre-delete hook Job runs `stop` with its flags "
    "fixed (the controller's Deployment and namespace, 60 s: tests/unit/test_chart_uninstall.py)",
}
WEBHOOK_FIXED = {
    "bind": "all addresses of the pod",
    "port": "the Service torchgate-webhook's target port",
    "tls_cert_file": "the certificate the certs init container or cert-manager writes",
    "tls_private_key_file": "the certificate the certs init container or cert-manager writes",
    "policy": "policies come from the cluster (placementPolicies), not files",
    "kubeconfig": "in-cluster ServiceAccount",
    "reload_interval": "certificate reload: the default",
    "max_body_bytes": "the default, controller-runtime's 7 MiB",
    "shutdown_delay_seconds": "matched to the pod's endpoint removal",
    "controller_url": "the Service torchgate-controller",
    "controller_ca_file": "the mounted CA",
    "forecast_timeout_seconds": "the default: a forecast never slows a review",
    "read_timeout_seconds": "the default: the apiserver sends its request at once",
    "idle_timeout_seconds": "the default: longer than the apiserver keeps an idle connection",
}
FIXED_BY_CHART = {"controller": CONTROLLER_FIXED, "webhook": WEBHOOK_FIXED}


def numeric_flag_values() -> dict[str, tuple[dict[str, Any], Any]]:
    """controller.tuning and controller.admissionPacing: each set to other than its default."""
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    found = {}
    for group in ("tuning", "admissionPacing"):
        for name, default in values["controller"][group].items():
            value = changed(default)
            found[destination(name)] = ({"controller": {group: {name: value}}}, value)
    return found


def destination(value_name: str) -> str:
    """``nodeLostSeconds`` -> ``node_lost_seconds``."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in value_name)


def changed(default: Any) -> Any:
    """A value the controller accepts that is not ``default`` (fractions stay fractions)."""
    return default + 1 if isinstance(default, int) else default + 0.5


# flag destination -> (a values snippet, what the flag then parses to)
SET_FROM_VALUES: dict[str, dict[str, tuple[dict[str, Any], Any]]] = {
    "controller": {
        **numeric_flag_values(),
        "manage_unowned": ({"controller": {"manageUnowned": True}}, True),
        "gang_objects": ({"controller": {"gangObjects": False}}, False),
        "log_level": ({"logging": {"level": "DEBUG"}}, "DEBUG"),
        "log_format": ({"logging": {"format": "json"}}, "json"),
    },
    "webhook": {
        "max_connections": ({"webhook": {"maxConnections": 100}}, 100),
        "log_level": ({"logging": {"level": "WARNING"}}, "WARNING"),
        "log_format": ({"logging": {"format": "json"}}, "json"),
    },
}
COMMAND_MODULES = {"controller": controller_command, "webhook": webhook_command}


def flag_destinations(component: str) -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    COMMAND_MODULES[component].add_arguments(parser)
    return {action.dest for action in parser._actions}


@pytest.mark.parametrize("component", sorted(COMMAND_MODULES))
def test_every_flag_is_set_from_values_or_fixed_by_the_chart(component: str) -> None:
    reachable, fixed = set(SET_FROM_VALUES[component]), set(FIXED_BY_CHART[component])
    assert not reachable & fixed
    assert flag_destinations(component) == reachable | fixed, (
        "a flag the chart neither passes from a value nor fixes: add a value (values.yaml, "
        "values.schema.json, the Deployment's args, docs/operations.md Helm values)"
    )


def merged(snippets: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for snippet in snippets:
        for key, value in snippet.items():
            both = isinstance(value, dict) and key in out
            out[key] = merged([out[key], value]) if both else value
    return out


def parsed_args(component: str, tmp_path: Path) -> argparse.Namespace:
    values = merged([snippet for snippet, _ in SET_FROM_VALUES[component].values()])
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values), encoding="utf-8")
    objects = ms.chart([f"--values={path}"])
    deployment = ms.find(objects, "Deployment", f"torchgate-{component}")
    container = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == component
    )
    return build_parser(component).parse_args(container["args"])


@pytest.mark.parametrize("component", sorted(COMMAND_MODULES))
def test_each_value_reaches_its_flag(component: str, tmp_path: Path) -> None:
    args = parsed_args(component, tmp_path)
    defaults = build_parser(component).parse_args([component, *required_flags(component)])
    for flag, (_, expected) in SET_FROM_VALUES[component].items():
        assert getattr(args, flag) == expected, flag
        assert getattr(defaults, flag) != expected, f"{flag}: the test value is the default"


def required_flags(component: str) -> list[str]:
    """What the command needs to parse at all (its defaults are compared, not these)."""
    if component == "webhook":
        return ["--tls-cert-file=c", "--tls-private-key-file=k"]
    return []

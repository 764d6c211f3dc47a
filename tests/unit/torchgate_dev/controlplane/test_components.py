"""Configuration files for each component (torchgate_dev.controlplane.components)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from torchgate_dev.controlplane.components import configuration_files
from torchgate_dev.controlplane.kubeconfig import read_kubeconfig
from torchgate_dev.controlplane.layout import Layout


@pytest.mark.parametrize("audit", [False, True], ids=["no-audit", "audit"])
def test_configuration_files_give_each_component_its_file(tmp_path: Path, audit: bool) -> None:
    layout = Layout(tmp_path)

    files = configuration_files(
        layout,
        server="https://127.0.0.1:6443",
        admin_token="admin-token",
        node_tokens=["node-token,system:node:n,system:node:n"],
        audit=audit,
        stages="kind: Stage\n",
    )

    expected = {layout.tokens, layout.kubeconfig, layout.scheduler_config, layout.kwok_config}
    assert set(files) == expected | ({layout.audit_policy} if audit else set())
    assert files[layout.tokens].splitlines() == [
        'admin-token,torchgate-admin,torchgate-admin,"system:masters"',
        "node-token,system:node:n,system:node:n",
    ]
    target = read_kubeconfig(yaml.safe_load(files[layout.kubeconfig]), base_dir=tmp_path)
    assert (target.server, target.token, target.ca_file) == (
        "https://127.0.0.1:6443",
        "admin-token",
        layout.ca_cert,
    )
    scheduler = yaml.safe_load(files[layout.scheduler_config])
    assert scheduler["clientConnection"]["kubeconfig"] == str(layout.kubeconfig)
    kinds = [doc["kind"] for doc in yaml.safe_load_all(files[layout.kwok_config])]
    assert kinds == ["Stage", "KwokConfiguration"]

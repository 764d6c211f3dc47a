"""Kubeconfigs: the admin one written, any one read back, attaching to a cluster by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from torchgate_dev.controlplane.cluster import ControlPlane, ControlPlaneError
from torchgate_dev.controlplane.kubeconfig import admin_kubeconfig, read_kubeconfig

# ----------------------------------------------------------------------------- kubeconfig, PKI


def test_admin_kubeconfig_reads_back_as_its_server_ca_and_token(tmp_path: Path) -> None:
    config = admin_kubeconfig("https://127.0.0.1:6443", tmp_path / "ca.crt", "s3cret")

    target = read_kubeconfig(yaml.safe_load(yaml.safe_dump(config)), base_dir=Path("/elsewhere"))

    assert target.server == "https://127.0.0.1:6443"
    assert target.ca_file == tmp_path / "ca.crt"
    assert target.token == "s3cret"
    assert target.ca_data is None


def test_kubeconfig_with_inline_ca_and_relative_paths(tmp_path: Path) -> None:
    raw = {
        "current-context": "kind",
        "contexts": [{"name": "kind", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://x:1", "certificate-authority-data": "UEVN"},
            }
        ],
        "users": [{"name": "u", "user": {"client-certificate": "u.crt"}}],
    }

    target = read_kubeconfig(raw, base_dir=tmp_path)

    assert target.ca_data == b"PEM"
    assert target.token is None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"contexts": []},
        {"current-context": "x", "contexts": [{"name": "y", "context": {}}]},
        {
            "current-context": "x",
            "contexts": [{"name": "x", "context": {"cluster": "c"}}],
            "clusters": [{"name": "c", "cluster": {"server": "http://plain:80"}}],
        },
    ],
    ids=["empty", "no-current-context", "unknown-context", "not-https"],
)
def test_unusable_kubeconfig_is_a_control_plane_error(raw: Any) -> None:
    with pytest.raises(ControlPlaneError, match="kubeconfig"):
        read_kubeconfig(raw, base_dir=Path("."))


def test_attach_reports_an_unreadable_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="cannot read kubeconfig"):
        ControlPlane.attach(tmp_path / "missing")


def test_attached_plane_writes_inline_ca_and_removes_its_scratch_dir(tmp_path: Path) -> None:
    config = admin_kubeconfig("https://127.0.0.1:6443", Path("unused"), "t")
    del config["clusters"][0]["cluster"]["certificate-authority"]
    config["clusters"][0]["cluster"]["certificate-authority-data"] = "UEVN"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))

    plane = ControlPlane.attach(path)
    ca_file = plane.ca_file

    assert plane.attached
    assert ca_file is not None
    assert ca_file.read_bytes() == b"PEM"
    plane.stop()
    assert not plane.workdir.exists()

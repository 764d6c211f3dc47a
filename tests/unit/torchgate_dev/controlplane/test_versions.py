"""Which Kubernetes version runs (torchgate_dev.controlplane.versions) and its build (build.sh)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from torchgate_dev import packagedata
from torchgate_dev.controlplane import versions
from torchgate_dev.controlplane.versions import (
    VERSION_ENV,
    SupportedVersions,
    UnsupportedVersion,
    normalise,
    parse_versions_env,
    wrapper_module,
)

TWO = SupportedVersions(("1.37.2", "1.36.3"))
CONTROLPLANE_DATA = packagedata.CONTROLPLANE_BUILD_SCRIPT.parent


# ----------------------------------------------------------------------------- rule 1: declaration


def test_the_declaration_lists_versions_default_first_without_their_v() -> None:
    text = (
        '# comment\nKUBERNETES_VERSIONS="v1.37.2 v1.36.3"  # newest first\nETCD_VERSION=v3.6.16\n'
    )

    declared = parse_versions_env(text)

    assert declared.versions == ("1.37.2", "1.36.3")
    assert declared.default == "1.37.2"


@pytest.mark.parametrize(
    "text",
    [
        "ETCD_VERSION=v3.6.16\n",
        'KUBERNETES_VERSIONS=""\n',
        'KUBERNETES_VERSIONS="v1.37"\n',
        'KUBERNETES_VERSIONS="v1.37.2 v1.37.1"\n',
    ],
    ids=["missing", "empty", "no-patch", "one-minor-twice"],
)
def test_a_broken_declaration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"KUBERNETES_VERSIONS|not a Kubernetes version"):
        parse_versions_env(text)


def test_the_packaged_declaration_supports_1_36_and_1_37_and_defaults_to_1_37_2() -> None:
    declared = versions.supported()

    assert declared.default == "1.37.2"
    assert set(declared.versions) == {"1.37.2", "1.36.3"}


def test_every_supported_version_has_a_wrapper_module_pinning_exactly_it() -> None:
    """The agreement between versions.env and the k8s-*/go.mod that build.sh builds from."""
    declared = versions.supported()

    modules = {path.parent.name for path in CONTROLPLANE_DATA.glob("k8s-*/go.mod")}

    assert modules == {wrapper_module(version) for version in declared.versions}
    for version in declared.versions:
        go_mod = (CONTROLPLANE_DATA / wrapper_module(version) / "go.mod").read_text()
        required = re.findall(r"^\s+k8s\.io/kubernetes (\S+)", go_mod, flags=re.MULTILINE)
        staging = set(re.findall(r"^replace k8s\.io/\S+ => k8s\.io/\S+ (\S+)$", go_mod, re.M))
        assert required == [f"v{version}"]
        assert staging == {f"v0.{version.partition('.')[2]}"}


# ----------------------------------------------------------------------------- rule 2: spelling


@pytest.mark.parametrize("text", ["1.36.3", "v1.36.3", " v1.36.3\n"])
def test_a_version_is_written_with_or_without_v(text: str) -> None:
    assert normalise(text) == "1.36.3"


@pytest.mark.parametrize("text", ["1.36", "latest", "v1.36.3-rc.0", ""])
def test_anything_else_is_not_a_version(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        normalise(text)


def test_the_wrapper_module_is_named_after_the_minor() -> None:
    assert wrapper_module("v1.37.2") == "k8s-1.37"


# ----------------------------------------------------------------------------- rule 3: choice


@pytest.mark.parametrize(
    ("requested", "environ", "chosen"),
    [
        (None, {}, "1.37.2"),
        (None, {VERSION_ENV: ""}, "1.37.2"),
        (None, {VERSION_ENV: "1.36.3"}, "1.36.3"),
        ("v1.36.3", {}, "1.36.3"),
        ("1.37.2", {VERSION_ENV: "1.36.3"}, "1.37.2"),
    ],
    ids=["default", "empty-env", "env", "argument", "argument-over-env"],
)
def test_the_argument_wins_over_the_environment_over_the_default(
    requested: str | None, environ: dict[str, str], chosen: str
) -> None:
    assert TWO.select(requested, environ=environ) == chosen


@pytest.mark.parametrize("requested", ["1.35.4", "1.37.1", "1.38.0", "next"])
def test_an_unsupported_version_is_refused_naming_the_supported_ones(requested: str) -> None:
    with pytest.raises(UnsupportedVersion) as refused:
        TWO.select(requested)

    assert str(refused.value) == (
        f"Kubernetes {requested!r} is not supported; supported: 1.37.2 (default), 1.36.3"
    )


def test_a_refused_version_from_the_environment_says_where_it_came_from() -> None:
    with pytest.raises(UnsupportedVersion, match=rf"'1\.30\.0' \(from \${VERSION_ENV}\)"):
        TWO.select(environ={VERSION_ENV: "1.30.0"})


# ----------------------------------------------------------------------------- build.sh


def run_build(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(script.parent)},
    )


@pytest.mark.parametrize(
    "args", [["1.35.0"], ["latest"], ["1.37.2", "1.36.3"]], ids=["old", "word", "two"]
)
def test_build_script_refuses_other_versions_naming_the_supported_ones(args: list[str]) -> None:
    result = run_build(packagedata.CONTROLPLANE_BUILD_SCRIPT, *args)

    assert result.returncode == 2
    assert "1.37.2, 1.36.3" in result.stderr
    assert result.stdout == ""


def test_build_script_refuses_a_wrapper_module_that_pins_another_version(tmp_path: Path) -> None:
    copy = tmp_path / "controlplane"
    shutil.copytree(CONTROLPLANE_DATA, copy)
    declaration = copy / "versions.env"
    declaration.write_text(declaration.read_text().replace("v1.36.3", "v1.36.4"))

    result = run_build(copy / "build.sh", "1.36.4")

    assert result.returncode == 1
    assert "k8s-1.36/go.mod pins k8s.io/kubernetes v1.36.3 (want v1.36.4)" in result.stderr

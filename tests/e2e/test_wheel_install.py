"""The built wheels, installed in fresh virtualenvs outside the checkout, are a working torchgate.

What a user gets from ``pip install torchgate`` (the product) and from adding ``torchgate-dev``:
both wheels are built (``pip wheel --no-deps . ./dev``) from a copy of the checkout's files that
git does not ignore (so nothing generated, and no stale ``build/`` folder, can slip in), installed
with their dependencies from the package index into virtualenvs under the test's temp dir (one
with the product alone, one with both), and run from a working directory outside the checkout
with nothing of the checkout on ``PYTHONPATH``. Checked:

- the product wheel puts only ``torchgate`` at the top of site-packages (RECORD, top_level.txt,
  the folder) and carries no dev tooling: no ``dev``, ``controlplane`` or ``node`` module, no
  package data but the PyTorchJob CRD ``check`` validates against, no Go files or build scripts;
- ``torchgate check`` admits one seed manifest and refuses another, field by field, with only the
  product installed, where ``torchgate dev`` is one line saying how to get it;
- the dev wheel puts only ``torchgate_dev`` beside it, with its data files as real files;
- ``torchgate dev up --no-real-node --no-seed-images`` starts a cluster that has the CRDs and the
  dev PlacementPolicy, all read from the installed package data, with the control-plane
  binaries found by the installed build script in the cache the session's binaries live in
  (unchanged afterwards: nothing is rebuilt); ``torchgate dev down`` removes it again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CRD_NAMES, REPO_ROOT
from torchgate.kube import manifestfiles
from torchgate_dev.controlplane import versions
from torchgate_dev.controlplane.binaries import BIN_DIR_ENV, Binaries

# What the product wheel must not carry: the dev tooling's modules and its data.
DEV_MODULES = ("torchgate/dev/", "torchgate/controlplane/", "torchgate/node/", "torchgate_dev/")
DEV_FILES = ("torchgate/devcluster.py", "torchgate/resources.py")
DEV_DATA_SUFFIXES = (".go", "go.mod", "go.sum", ".sh", ".env", ".yaml")
# The product's one data file: the PyTorchJob CRD that ``torchgate check`` validates against.
PRODUCT_DATA = (f"torchgate/pytorchjob/data/{manifestfiles.CRD_FILE}",)

# The first test to use the installation also pays for building and installing it.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SEEDS = REPO_ROOT.parent / "shared" / "seeds" / "manifests"
ADMITTED_SEED = SEEDS / "003-torchrun-cpu.yaml"
REFUSED_SEED = SEEDS / "002-resnet50-nccl-rdma-16.yaml"
SAMPLE_POLICY_NAMES = ["dev-a100", "dev-dra"]  # dev/torchgate_dev/data/dev-placementpolicy.yaml
INSTALL_TIMEOUT_SECONDS = 600
PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet")
DEV_UP_TIMEOUT_SECONDS = 480


@dataclass(frozen=True, slots=True)
class Installation:
    """A virtualenv holding the installed wheel, and where to run it from."""

    venv: Path
    workdir: Path
    env: dict[str, str]

    @property
    def site_packages(self) -> Path:
        """The virtualenv's site-packages (same interpreter version as this process)."""
        return Path(sysconfig.get_path("purelib", vars={"base": str(self.venv)}))

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a program of the virtualenv (``torchgate``, ``python``) from outside the checkout."""
        return subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def copy_source_tree(destination: Path) -> None:
    """Copy what git tracks or would track (not ignored) from the checkout; links stay links."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree, not yet committed
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stderr}"
    return result


def installation_env(venv: Path) -> dict[str, str]:
    """This process's environment without anything pointing into the checkout or its venv."""
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "KUBECONFIG", BIN_DIR_ENV}
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    checkout_venv = Path(sys.prefix)
    path = [
        entry
        for entry in env.get("PATH", os.defpath).split(os.pathsep)
        if entry and not Path(entry).is_relative_to(checkout_venv)
    ]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def make_venv(venv: Path, workdir: Path) -> Installation:
    checked(
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    )
    return Installation(venv=venv, workdir=workdir, env=installation_env(venv))


@dataclass(frozen=True, slots=True)
class Wheels:
    """The two wheels, built from a copy of the checkout that is gone again."""

    product: Path
    dev: Path
    root: Path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    root = tmp_path_factory.mktemp("wheel-install")
    assert not root.resolve().is_relative_to(REPO_ROOT.resolve())
    source, built = root / "source", root / "wheels"
    copy_source_tree(source)
    checked(
        subprocess.run(
            [*PIP_WHEEL, "-w", str(built), ".", "./dev"],
            cwd=source,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
            check=False,
        )
    )
    (product,) = built.glob("torchgate-*.whl")
    (dev,) = built.glob("torchgate_dev-*.whl")
    shutil.rmtree(source)  # nothing of the source tree stays reachable
    return Wheels(product=product, dev=dev, root=root)


@pytest.fixture(scope="module")
def installation(wheels: Wheels) -> Installation:
    """The product alone."""
    workdir = wheels.root / "work"
    workdir.mkdir()
    installed = make_venv(wheels.root / "venv", workdir)
    # Dependencies come from the package index (through pip's cache).
    checked(
        installed.run(
            "pip", "install", "--quiet", str(wheels.product), timeout=INSTALL_TIMEOUT_SECONDS
        )
    )
    return installed


@pytest.fixture(scope="module")
def dev_installation(wheels: Wheels) -> Installation:
    """The product and torchgate-dev."""
    workdir = wheels.root / "dev-work"
    workdir.mkdir()
    installed = make_venv(wheels.root / "dev-venv", workdir)
    checked(
        installed.run(
            *("pip", "install", "--quiet", str(wheels.product), str(wheels.dev)),
            timeout=INSTALL_TIMEOUT_SECONDS,
        )
    )
    return installed


def recorded_files(installation: Installation, distribution: str) -> tuple[Path, list[str]]:
    """A distribution's dist-info folder and the paths its RECORD lists."""
    (dist_info,) = installation.site_packages.glob(f"{distribution}-*.dist-info")
    recorded = [line.split(",")[0] for line in (dist_info / "RECORD").read_text().splitlines()]
    return dist_info, recorded


def test_the_wheel_installs_only_torchgate_at_the_top_of_site_packages(
    installation: Installation,
) -> None:
    dist_info, recorded = recorded_files(installation, "torchgate")
    in_site_packages = {name.split("/")[0] for name in recorded if not name.startswith("../")}

    assert in_site_packages == {"torchgate", dist_info.name}
    assert (dist_info / "top_level.txt").read_text().split() == ["torchgate"]
    for generic in ("webhook", "controller", "certs", "pytorchjob"):
        assert not (installation.site_packages / generic).exists()
        assert f"torchgate/{generic}/__init__.py" in recorded
    # No dev tooling: its modules, its data, Go files and build scripts are all elsewhere.
    assert [name for name in recorded if name.startswith(DEV_MODULES)] == []
    assert [name for name in recorded if name in DEV_FILES] == []
    data = [name for name in recorded if name.endswith(DEV_DATA_SUFFIXES)]
    assert sorted(data) == sorted(PRODUCT_DATA)
    assert [name for name in recorded if name.startswith("torchgate/data/")] == []
    assert not (installation.site_packages / "torchgate_dev").exists()
    # The installed package is what runs, not the checkout (which is not on any path here).
    located = checked(
        installation.run(
            "python", "-c", "import torchgate.webhook; print(torchgate.webhook.__file__)"
        )
    ).stdout.split()
    for path in map(Path, located):
        assert path.is_relative_to(installation.site_packages), path
        assert path.exists(), path
        assert not path.is_symlink(), path


def test_without_torchgate_dev_the_dev_command_says_how_to_get_it(
    installation: Installation,
) -> None:
    dev = installation.run("torchgate", "dev", "up", "--no-real-node")
    usage = installation.run("torchgate", "--help")

    assert dev.returncode == 2
    assert dev.stdout == ""
    (line,) = dev.stderr.splitlines()
    assert "torchgate-dev" in line
    assert usage.returncode == 0, usage.stderr
    assert " dev " not in usage.stdout
    assert " check " in usage.stdout


def test_the_dev_wheel_installs_torchgate_dev_with_its_data_beside_torchgate(
    dev_installation: Installation,
) -> None:
    dist_info, recorded = recorded_files(dev_installation, "torchgate_dev")
    in_site_packages = {name.split("/")[0] for name in recorded if not name.startswith("../")}
    (entry_points,) = [
        line for line in (dist_info / "entry_points.txt").read_text().splitlines() if "=" in line
    ]

    assert in_site_packages == {"torchgate_dev", dist_info.name}
    assert entry_points.replace(" ", "") == "dev=torchgate_dev.command"
    for version in versions.supported().versions:
        module = versions.wrapper_module(version)
        assert f"torchgate_dev/data/controlplane/{module}/go.mod" in recorded
    assert "torchgate_dev/data/node/coredns/main.go" in recorded
    located = checked(
        dev_installation.run(
            "python",
            "-c",
            "import torchgate_dev.packagedata as r; "
            "print(r.CRD_DIR); print(r.SAMPLE_POLICY); print(r.CONTROLPLANE_BUILD_SCRIPT); "
            "print(r.NODE_BUILD_SCRIPT); print(r.PAUSE_SOURCE)",
        )
    ).stdout.split()
    assert len(located) == 5
    for path in map(Path, located):
        assert path.is_relative_to(dev_installation.site_packages), path
        assert path.exists(), path
        assert not path.is_symlink(), path


def test_torchgate_check_runs_from_the_installed_wheel(installation: Installation) -> None:
    admitted = installation.run("torchgate", "check", "-o", "json", str(ADMITTED_SEED))
    refused = installation.run("torchgate", "check", "-o", "json", str(REFUSED_SEED))

    assert admitted.returncode == 0, admitted.stderr
    assert [r["allowed"] for r in json.loads(admitted.stdout)["results"]] == [True]
    assert refused.returncode == 1, refused.stderr
    (result,) = json.loads(refused.stdout)["results"]
    assert result["allowed"] is False
    assert {
        "type": "FieldValueRequired",
        "field": "spec.pytorchReplicaSpecs[Master].template.spec.containers",
    } in [{"type": e["type"], "field": e["field"]} for e in result["errors"]]


@pytest.fixture
def dev_dir(dev_installation: Installation, tmp_path: Path) -> Iterator[Path]:
    root = (tmp_path / "dev").resolve()
    yield root
    dev_installation.run(
        "torchgate", "dev", "down", "--dir", str(root)
    )  # safety net; no-op if down


def file_times(binaries: Binaries) -> dict[str, int]:
    return {
        path.name: path.stat().st_mtime_ns
        for path in binaries.kube_apiserver.parent.iterdir()
        if path.is_file()
    }


def test_torchgate_dev_up_and_down_run_from_the_installed_wheel(
    dev_installation: Installation, dev_dir: Path, control_plane_binaries: Binaries
) -> None:
    env = dict(dev_installation.env)
    binaries_dir = control_plane_binaries.kube_apiserver.parent
    if binaries_dir.parent.name == "bin":
        # The installed build script finds the session's binaries in their cache.
        env["TORCHGATE_CACHE_DIR"] = str(binaries_dir.parent.parent)
    else:  # they come from a folder named by TORCHGATE_CONTROLPLANE_BIN, not from a build
        env[BIN_DIR_ENV] = str(binaries_dir)
    times_before = file_times(control_plane_binaries)
    dev = replace(dev_installation, env=env)

    up = dev.run(
        *("torchgate", "dev", "up", "--dir", str(dev_dir), "--no-real-node", "--no-seed-images"),
        timeout=DEV_UP_TIMEOUT_SECONDS,
    )

    assert up.returncode == 0, up.stderr
    assert file_times(control_plane_binaries) == times_before, "cached binaries were rebuilt"

    def get(*args: str) -> Any:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={dev_dir / 'kubeconfig'}", "get", *args, "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    crds = {item["metadata"]["name"] for item in get("crd")["items"]}
    assert crds >= set(CRD_NAMES)
    policies = get("placementpolicies.torchgate.io")["items"]
    assert sorted(p["metadata"]["name"] for p in policies) == SAMPLE_POLICY_NAMES
    assert policies[0]["spec"]["nodeSelector"] == {"pool": "a100"}

    down = dev.run("torchgate", "dev", "down", "--dir", str(dev_dir))

    assert down.returncode == 0, down.stderr
    assert not dev_dir.exists()

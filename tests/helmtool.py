"""Find (or build) helm for the tests that lint and render the chart, and run it hermetically.

helm is built from its Go module by ``tools/helm/build.sh`` (cached, about a second when warm),
like the control-plane binaries. ``TORCHGATE_HELM`` names a helm binary to use instead (any v3).
When neither works, tests skip locally without Go and fail on CI (``CI=true``) or when Go is
present but the build broke, the policy of the control-plane binaries.

Every helm run gets its own empty config/cache/data homes, so nothing is read from or written to
the user's helm setup (repositories, plugins, registry logins).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "tools" / "helm" / "build.sh"
CHART = REPO_ROOT / "manifests" / "chart" / "torchgate"
HELM_ENV = "TORCHGATE_HELM"
# Build timeout: a cold build downloads ~250 modules and compiles for about 9 minutes on 2 cores.
BUILD_TIMEOUT_SECONDS = 1800


class HelmUnavailable(Exception):
    """helm is neither given nor buildable here."""

    def __init__(self, message: str, *, go_missing: bool = False) -> None:
        super().__init__(message)
        self.go_missing = go_missing


@functools.cache
def _find_or_build() -> Path | HelmUnavailable:
    given = os.environ.get(HELM_ENV)
    if given:
        path = Path(given)
        if not os.access(path, os.X_OK):
            return HelmUnavailable(f"{HELM_ENV}={given} is not an executable")
        return path
    if shutil.which("go") is None:
        return HelmUnavailable(
            f"no Go toolchain to build helm ({BUILD_SCRIPT}); set {HELM_ENV}", go_missing=True
        )
    # Progress goes straight to stderr, so a cold build shows what it is doing.
    try:
        result = subprocess.run(
            [str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return HelmUnavailable(f"{BUILD_SCRIPT} took longer than {BUILD_TIMEOUT_SECONDS}s")
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        return HelmUnavailable(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
    return Path(lines[-1])


def prebuild() -> None:
    """Find or build helm now (the result, or why not, is kept for :func:`helm_binary`)."""
    _find_or_build()


def helm_binary() -> Path:
    """The helm executable, or skip/fail the calling test (see the module docstring)."""
    found = _find_or_build()
    if isinstance(found, Path):
        return found
    if found.go_missing and os.environ.get("CI", "").lower() != "true":
        pytest.skip(f"helm unavailable: {found}")
    pytest.fail(f"helm unavailable: {found}", pytrace=False)


def run_helm(
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run helm with private config/cache/data homes; text in and out.

    Raises:
        AssertionError: It exited non-zero and ``check`` is true (stderr in the message).
    """
    with tempfile.TemporaryDirectory(prefix="torchgate-helm-") as home:
        environment = {
            **os.environ,
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_DATA_HOME": f"{home}/data",
            **(env or {}),
        }
        result = subprocess.run(
            [str(helm_binary()), *args],
            capture_output=True,
            text=True,
            env=environment,
            timeout=timeout,
            check=False,
        )
    if check and result.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args)} exited with {result.returncode}:\n{result.stderr}"
        )
    return result


def helm_template(values: Sequence[str] = (), *, release: str = "torchgate") -> str:
    """``helm template`` of the chart; ``values`` are extra arguments (``--set``, ``-f``)."""
    return run_helm("template", release, str(CHART), *values).stdout

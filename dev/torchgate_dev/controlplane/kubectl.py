"""Running ``kubectl`` against one cluster: which executable, which kubeconfig, which cache."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from torchgate_dev.controlplane.errors import ControlPlaneError, KubectlError
from torchgate_dev.controlplane.supervision import child_environment

KUBECTL_ENV: Final = "TORCHGATE_KUBECTL"


def executable(override: str | None = None) -> str:
    """``override``, else ``$TORCHGATE_KUBECTL``, else ``kubectl``, resolved on PATH.

    Raises:
        ControlPlaneError: It is not found.
    """
    candidate = override or os.environ.get(KUBECTL_ENV) or "kubectl"
    found = shutil.which(candidate)
    if found is None:
        raise ControlPlaneError(
            f"kubectl not found ({candidate!r}); put it on PATH or set {KUBECTL_ENV}"
        )
    return found


def run_kubectl(
    args: Sequence[str],
    *,
    kubeconfig: Path,
    cache_dir: Path,
    override: str | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run kubectl with ``args``; text in and out.

    Raises:
        KubectlError: It exited non-zero and ``check`` is true.
        ControlPlaneError: kubectl is missing or timed out.
    """
    argv = [
        executable(override),
        f"--kubeconfig={kubeconfig}",
        # Discovery cache per cluster: random ports would litter ~/.kube/cache otherwise.
        f"--cache-dir={cache_dir}",
        *args,
    ]
    try:
        result = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_environment(),
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise ControlPlaneError(f"kubectl {' '.join(args)} timed out after {timeout}s") from error
    if check and result.returncode != 0:
        raise KubectlError(result.returncode, ["kubectl", *args], result.stdout, result.stderr)
    return result

"""Find or build the control-plane binaries (kube-apiserver, KCM, scheduler, etcd, kwok, kubelet).

The build itself is a script, ``torchgate_dev/data/controlplane/build.sh``, because CI and people
call it directly. It builds one supported Kubernetes version, its argument (which one is chosen by
:mod:`~torchgate_dev.controlplane.versions`), is idempotent and keyed on the pinned versions, so
each version is built once and running it again costs about a second. The wheel carries the
script and its Go module files as package data, so an installed torchgate-dev finds them through
:mod:`torchgate_dev.packagedata` as a checkout does. This module only runs it, streams its
progress, and turns its answer (the binary folder, printed last on stdout) into typed paths. A
missing Go toolchain, an unsupported version and a failed build are ordinary outcomes, reported
as :class:`BinariesUnavailable` with a message meant for a person, never as a traceback.

Run ``python -m torchgate_dev.controlplane.binaries [VERSION]`` to build (or find) them from a
shell; it prints the binary folder.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self, TextIO

from torchgate_dev import packagedata
from torchgate_dev.controlplane import versions

BIN_DIR_ENV = "TORCHGATE_CONTROLPLANE_BIN"
"""Use the binaries in this folder as they are; never run the build."""

BUILD_SCRIPT: Final = packagedata.CONTROLPLANE_BUILD_SCRIPT
NODE_BUILD_SCRIPT: Final = packagedata.NODE_BUILD_SCRIPT
"""Builds the real node's own binaries (CoreDNS); kubelet comes with the control plane's."""

_EXECUTABLES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "kwok",
    "kubelet",
    "kube-proxy",
)
_TAIL_LINES = 20


class BinariesUnavailable(Exception):
    """The binaries are neither cached nor buildable here; the message says why."""

    def __init__(self, message: str, *, go_missing: bool = False) -> None:
        super().__init__(message)
        self.go_missing = go_missing


@dataclass(frozen=True, slots=True)
class Binaries:
    """Paths of the control-plane executables and of kwok's upstream Stage YAMLs."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kubelet: Path
    kube_proxy: Path
    stages_dir: Path

    @classmethod
    def in_directory(cls, directory: Path) -> Self:
        """The binaries in a folder laid out by ``build.sh``; every file must be there."""
        missing = [
            name
            for name in _EXECUTABLES
            if not os.access(directory / name, os.X_OK) or not (directory / name).is_file()
        ]
        if not (directory / "stages").is_dir():
            missing.append("stages/")
        if missing:
            raise BinariesUnavailable(
                f"control-plane folder {directory} lacks {', '.join(missing)}; "
                f"run {BUILD_SCRIPT} (or unset {BIN_DIR_ENV})"
            )
        return cls(
            kube_apiserver=directory / "kube-apiserver",
            kube_controller_manager=directory / "kube-controller-manager",
            kube_scheduler=directory / "kube-scheduler",
            etcd=directory / "etcd",
            kwok=directory / "kwok",
            kubelet=directory / "kubelet",
            kube_proxy=directory / "kube-proxy",
            stages_dir=directory / "stages",
        )


def ensure_binaries(
    *,
    version: str | None = None,
    progress: TextIO | None = None,
    script: Path = BUILD_SCRIPT,
    environ: Mapping[str, str] | None = None,
) -> Binaries:
    """The binaries from ``$TORCHGATE_CONTROLPLANE_BIN``, or else from a (cached) build.

    Args:
        version: The Kubernetes version to build; default ``$TORCHGATE_KUBERNETES_VERSION``,
            else the default supported one. Ignored with ``$TORCHGATE_CONTROLPLANE_BIN``, whose
            binaries are taken as they are.
        progress: Where the build's progress lines go; ``None`` lets the build write straight
            to this process's standard error.
        script: The build script.
        environ: Environment for the lookup and the build (default: ``os.environ``).

    Raises:
        BinariesUnavailable: The version is not supported, Go is missing, the build failed, or
            the folder is incomplete.
    """
    env = dict(os.environ if environ is None else environ)
    if env.get(BIN_DIR_ENV):
        return Binaries.in_directory(Path(env[BIN_DIR_ENV]))
    try:
        chosen = versions.supported().select(version, environ=env)
    except versions.UnsupportedVersion as error:
        raise BinariesUnavailable(str(error)) from None
    return build_binaries(version=chosen, script=script, progress=progress, environ=env)


def build_binaries(
    *,
    version: str | None = None,
    script: Path = BUILD_SCRIPT,
    progress: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> Binaries:
    """Run the build script for one Kubernetes version (quick when cached); what it built.

    ``version`` None leaves the choice to the script: the default supported version.

    Raises:
        BinariesUnavailable: Go is missing, the script is missing, or the build failed.
    """
    arguments = () if version is None else (version,)
    folder = run_build_script(script, *arguments, progress=progress, environ=environ)
    return Binaries.in_directory(folder)


def ensure_coredns(
    *, progress: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The real node's CoreDNS executable, built from its Go module on first use (cached).

    Raises:
        BinariesUnavailable: Go is missing or the build failed.
    """
    folder = run_build_script(NODE_BUILD_SCRIPT, progress=progress, environ=environ)
    coredns = folder / "coredns"
    if not os.access(coredns, os.X_OK):
        raise BinariesUnavailable(f"{NODE_BUILD_SCRIPT.name} succeeded but {coredns} is missing")
    return coredns


def run_build_script(
    script: Path,
    *arguments: str,
    progress: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Run a build script that prints its output folder last on stdout; return that folder.

    Raises:
        BinariesUnavailable: Go is missing, the script is missing, or the build failed.
    """
    env = dict(os.environ if environ is None else environ)
    if shutil.which("go", path=env.get("PATH", os.defpath)) is None:
        raise BinariesUnavailable(
            "Go is not installed (no 'go' on PATH); the local control plane is built from Go "
            "modules and needs Go >= 1.26. Install Go, or point TORCHGATE_E2E_KUBECONFIG at a "
            "running cluster.",
            go_missing=True,
        )
    if not script.is_file():
        raise BinariesUnavailable(
            f"build script {script} not found (this torchgate was built without its data files)"
        )
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as stdout:
        returncode, tail = _run_streaming(["bash", str(script), *arguments], stdout, progress, env)
        stdout.seek(0)
        lines = stdout.read().splitlines()
    if returncode != 0:
        details = "".join(f"\n  {line}" for line in tail)
        raise BinariesUnavailable(
            f"building failed ({script.name} exited with {returncode})"
            + (f"; last output:{details}" if details else "; see its output above")
        )
    if not lines or not lines[-1].strip():
        raise BinariesUnavailable(f"{script.name} succeeded but printed no binary folder")
    return Path(lines[-1].strip())


def _run_streaming(
    argv: Sequence[str], stdout: TextIO, progress: TextIO | None, env: Mapping[str, str]
) -> tuple[int, list[str]]:
    """Run ``argv``; forward its stderr to ``progress`` (or inherit it); keep the last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    stderr = None if progress is None else subprocess.PIPE
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=dict(env), text=True
    ) as process:
        if process.stderr is not None and progress is not None:
            for line in process.stderr:
                progress.write(line)
                progress.flush()
                tail.append(line.rstrip("\n"))
    return process.returncode, list(tail)


def main(argv: Sequence[str] | None = None) -> int:
    """Build or find the binaries of ``[VERSION]``; print their folder.

    Exit 1 with a message when impossible, 2 for more than one argument.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) > 1:
        print("usage: python -m torchgate_dev.controlplane.binaries [VERSION]", file=sys.stderr)
        return 2
    try:
        binaries = ensure_binaries(version=arguments[0] if arguments else None)
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(binaries.kube_apiserver.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

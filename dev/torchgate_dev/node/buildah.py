"""Debian's buildah, run so that it touches nothing outside the node cache.

Why buildah: it builds a Dockerfile, multi-stage and with ``RUN --mount``, without a daemon,
and Debian packages it. Why this wrapper: out of the box buildah keeps images in
``/var/lib/containers``, reads the system's ``registries.conf``, ``storage.conf`` and signature
policy, writes a lock into ``/etc/cni`` and, for a ``RUN`` on its default private network,
creates a ``cni-podman0`` bridge on 10.88.0.0/16, the local real node's pod subnet. So every
call here:

- names its storage (``--root``, ``--runroot``, ``overlay``) and ``TMPDIR`` under the node cache,
  and its own ``storage.conf``, ``registries.conf`` and policy, written per call (the registry's
  port changes between runs) and removed afterwards; ``BUILDAH_*``, ``CONTAINERS_*`` and
  ``STORAGE_*`` variables from the caller are dropped, as they would override them;
- uses ``--isolation=oci``: runc gives each ``RUN`` its own mount namespace with a private
  ``/dev`` tmpfs (``chroot`` isolation bind-mounts the host's devtmpfs, read-only, instead);
- never uses buildah's private network: builds run with ``--network=host`` (the Dockerfile's
  ``pip wheel`` reaches PyPI), containers started to look inside an image with
  ``--network=none``, and ``--cni-config-dir`` points into the cache.

``registries.conf`` maps ``registry.torchgate.local`` to the loopback registry (plain HTTP), so
image names stay the ones containerd uses while pulls go to ``127.0.0.1:<port>``. Nothing here
deletes a folder: buildah removes its own containers and mounts, and :func:`mounts_below`
lets callers check that none is left.

One file does land outside the cache: containers/image's blob-info cache,
``/var/lib/containers/cache/blob-info-cache-v1.boltdb`` (which registry holds which digest, a few
hundred KiB), whose folder buildah 1.28 does not let a caller choose (podman sets it; buildah
has neither an option nor an environment variable for it, and a root process gets the system
folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

STORAGE_DRIVER: Final = "overlay"
_POLICY: Final = '{"default": [{"type": "insecureAcceptAnything"}]}\n'
"""Accept every image: they all come from our own loopback registry."""
_DROPPED_ENV: Final = ("BUILDAH_", "CONTAINERS_", "STORAGE_", "REGISTRY_AUTH_FILE")


class BuildahError(RuntimeError):
    """buildah is missing or failed; the message shows the end of its output."""


@dataclass(frozen=True, slots=True)
class BuildahPaths:
    """buildah's folders under ``base`` (the node cache's ``buildah`` folder)."""

    base: Path

    @property
    def root(self) -> Path:
        """Image and container storage (``--root``)."""
        return self.base / "storage"

    @property
    def runroot(self) -> Path:
        """Run-time state: locks, mount bookkeeping (``--runroot``)."""
        return self.base / "run"

    @property
    def tmp(self) -> Path:
        """Buildah's ``TMPDIR``: blobs in flight during pulls, commits and pushes."""
        return self.base / "tmp"

    @property
    def cni(self) -> Path:
        """``--cni-config-dir``: buildah's network set-up keeps its lock file here."""
        return self.base / "cni"

    @property
    def log(self) -> Path:
        """The last build's full output."""
        return self.base / "build.log"


# --------------------------------------------------------------------------- pure parts


def registries_conf(*, alias: str, location: str) -> str:
    """``registries.conf`` sending ``alias/...`` to the plain-HTTP registry at ``location``.

    Names keep saying ``alias`` (build arguments, the base image annotation); only where they
    are fetched from changes. Unqualified names are not searched anywhere.
    """
    return (
        "unqualified-search-registries = []\n\n"
        "[[registry]]\n"
        f"prefix = {json.dumps(alias)}\n"
        f"location = {json.dumps(location)}\n"
        "insecure = true\n"
    )


def storage_conf(paths: BuildahPaths, *, driver: str = STORAGE_DRIVER) -> str:
    """``storage.conf``: ours alone, so no system setting (mount program, options) applies."""
    return (
        "[storage]\n"
        f"driver = {json.dumps(driver)}\n"
        f"graphroot = {json.dumps(str(paths.root))}\n"
        f"runroot = {json.dumps(str(paths.runroot))}\n"
    )


def storage_args(paths: BuildahPaths, *, driver: str = STORAGE_DRIVER) -> list[str]:
    """The global options of every call: our storage."""
    return ["--root", str(paths.root), "--runroot", str(paths.runroot), "--storage-driver", driver]


def bud_argv(
    buildah: str,
    paths: BuildahPaths,
    *,
    context: Path,
    tag: str,
    build_args: Mapping[str, str],
    policy: Path,
) -> list[str]:
    """``buildah bud`` of the ``Dockerfile`` at the root of ``context``, tagged ``tag``."""
    return [
        buildah,
        *storage_args(paths),
        "bud",
        "--isolation=oci",
        "--network=host",
        f"--cni-config-dir={paths.cni}",
        "--pull=true",
        "--format=oci",
        f"--signature-policy={policy}",
        *(f"--build-arg={name}={value}" for name, value in sorted(build_args.items())),
        f"--file={context / 'Dockerfile'}",
        f"--tag={tag}",
        str(context),
    ]


def push_argv(
    buildah: str, paths: BuildahPaths, *, image: str, destination: str, policy: Path
) -> list[str]:
    """``buildah push`` to a plain-HTTP registry, OCI manifest.

    Layers the registry has are reused as they are (the base image's uncompressed ones); new
    layers are gzip-compressed: containers/image compresses for every registry push, and
    ``--disable-compression`` does not change that.
    """
    return [
        buildah,
        *storage_args(paths),
        "push",
        "--tls-verify=false",
        "--format=oci",
        f"--signature-policy={policy}",
        image,
        f"docker://{destination}",
    ]


# --------------------------------------------------------------------------- running buildah


def find_buildah() -> str:
    """The buildah executable; raises BuildahError when it (or runc, or root) is missing."""
    found = shutil.which("buildah")
    if found is None:
        raise BuildahError("buildah not found: apt-get install buildah")
    if shutil.which("runc") is None:
        raise BuildahError("runc not found (buildah's oci isolation): apt-get install runc")
    if os.geteuid() != 0:
        raise BuildahError("buildah runs rootful here: run as root")
    return found


def buildah_version(buildah: str) -> str:
    """``buildah --version``'s line."""
    done = subprocess.run([buildah, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or f"unknown (exit {done.returncode})"


def mounts_below(path: Path) -> list[str]:
    """Mount points at or below ``path`` (from ``/proc/self/mountinfo``)."""
    prefix = f"{path.resolve()}/"
    lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    targets = [line.split()[4].replace("\\040", " ") for line in lines if line.strip()]
    return [target for target in targets if f"{target}/".startswith(prefix)]


@dataclass(frozen=True, slots=True)
class Session:
    """One call's configuration files and environment (see the module docstring)."""

    buildah: str
    paths: BuildahPaths
    registries: Path
    storage: Path
    policy: Path

    @property
    def global_args(self) -> list[str]:
        """``buildah`` and its storage options: the start of every command line."""
        return [self.buildah, *storage_args(self.paths)]

    @property
    def env(self) -> dict[str, str]:
        """The environment of every call: our configuration, nothing inherited that overrides."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV)}
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.registries)
        env["CONTAINERS_STORAGE_CONF"] = str(self.storage)
        env["TMPDIR"] = str(self.paths.tmp)
        return env

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run a command line with this session's environment, output captured."""
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=False)


@contextlib.contextmanager
def session(paths: BuildahPaths, *, alias: str, registry: str) -> Iterator[Session]:
    """A :class:`Session` whose ``registries.conf`` maps ``alias`` to ``registry``."""
    buildah = find_buildah()
    for folder in (paths.root, paths.runroot, paths.tmp, paths.cni):
        folder.mkdir(parents=True, exist_ok=True)
    call = f"call-{os.getpid()}"
    current = Session(
        buildah,
        paths,
        registries=paths.base / f"{call}-registries.conf",
        storage=paths.base / f"{call}-storage.conf",
        policy=paths.base / f"{call}-policy.json",
    )
    try:
        current.registries.write_text(registries_conf(alias=alias, location=registry))
        current.storage.write_text(storage_conf(paths))
        current.policy.write_text(_POLICY)
        yield current
    finally:
        for path in (current.registries, current.storage, current.policy):
            path.unlink(missing_ok=True)


def stream(
    current: Session,
    argv: Sequence[str],
    *,
    what: str,
    report: Callable[[str], None],
    show: Callable[[str], bool],
    cwd: Path | None = None,
) -> None:
    """Run a long buildah command, its output to the log and the lines ``show`` picks reported.

    Raises:
        BuildahError: it failed; the message has the end of its output.
    """
    log = current.paths.log
    lines: list[str] = []
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"---- {' '.join(argv)}\n")
        out.flush()
        with subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=current.env,
            text=True,
            errors="replace",
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                lines.append(line.rstrip("\n"))
                if show(line):
                    report(f"  {line.rstrip()[:110]}")
    if process.returncode != 0:
        tail = "\n".join(lines[-25:])
        raise BuildahError(f"{what} failed (exit {process.returncode}); log {log}:\n{tail}")


def run_in_image(current: Session, image: str, argv: Sequence[str]) -> str:
    """Run a command in a throwaway container of ``image`` (pulled anew); its output.

    The image's user, working directory and environment apply; there is no network. The
    container is removed afterwards, and the image too unless it was stored before.

    Raises:
        BuildahError: the image could not be pulled, or the command failed.
    """
    listed = current.run([*current.global_args, "images", "--quiet", image])
    was_stored = listed.returncode == 0 and bool(listed.stdout.strip())
    created = current.run(
        [
            *current.global_args,
            "from",
            "--pull=always",
            "--quiet",
            f"--cni-config-dir={current.paths.cni}",
            f"--signature-policy={current.policy}",
            image,
        ]
    )
    if created.returncode != 0:
        raise BuildahError(f"buildah from {image} failed:\n{created.stdout}{created.stderr}")
    container = created.stdout.strip().splitlines()[-1]
    run = [*current.global_args, "run", "--isolation=oci", "--network=none"]
    run.append(f"--cni-config-dir={current.paths.cni}")
    try:
        done = current.run([*run, container, "--", *argv])
    finally:
        current.run([*current.global_args, "rm", container])
        if not was_stored:
            current.run([*current.global_args, "rmi", image])
    if done.returncode != 0:
        raise BuildahError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr

"""Build torchgate's own image from the repository's ``Dockerfile``, unchanged, and push it.

Why: to run torchgate inside the local cluster, its real node must pull torchgate's image, and
that image should be the one users get from ``docker build .`` (README, "Install on a
cluster"), not a hand-assembled look-alike: the Dockerfile's two stages, its wheel-only runtime
and its ``pip uninstall`` are what the manifests rely on. The build machines have no Docker
engine and cannot pull ``python:3.11-slim-bookworm``, so:

- **Debian's buildah builds the Dockerfile as written** (rootful, storage under the node cache,
  ``--isolation oci``: runc gives each ``RUN`` a private ``/dev`` tmpfs, where ``chroot``
  isolation would bind-mount the host's ``/dev``). buildah 1.28 supports the runtime stage's
  ``RUN --mount=type=bind,from=builder``. ``--network host``: the builder's ``pip wheel``
  downloads the dependencies from PyPI, and buildah's private network would need CNI.
- **A local stand-in for the base image**, ``registry.torchgate.local/python:3.11-slim-bookworm``,
  made with :func:`torchgate.node.images.ensure_images` on the *same* debootstrap layer as the
  seed images (``images.BASE_LAYER``: one blob in the registry for all of them). On top: what
  the official image offers that the Dockerfile uses. ``pip``/``setuptools``/``wheel`` pinned as
  in the official 3.11 images (pip 24.0 is CPython 3.11's ensurepip; wheel 0.45.1 is the last
  release without a dependency); Debian's ``EXTERNALLY-MANAGED`` whited out (the official
  image's Python is not the distribution's, so ``pip install`` as root is allowed there); a
  ``python`` command (a two-line ``sh`` wrapper: ``images.Files`` holds regular files only).
  The official image's CA store works on the open internet; here TLS to PyPI goes through an
  egress proxy whose CA only this machine's bundle has (Debian's ``ca-certificates`` in the
  container fails with "self-signed certificate in certificate chain"), so the stand-in carries
  this machine's bundle and, like this machine, an ``/etc/pip.conf`` naming it (pip 24.0 uses
  its own certifi otherwise).
- **pip's RECORD files are corrected** in the top layer: ``images.Wheels`` installs with
  ``pip install --target``, whose RECORD names console scripts ``../../bin/pip`` (relative to a
  temporary ``lib/python``), which from ``dist-packages`` is not ``/usr/local/bin``. The
  Dockerfile's ``pip uninstall --yes pip setuptools wheel`` would then leave a broken
  ``/usr/local/bin/pip3.11`` behind in the product image.
- **Cached on its inputs**: the tag is a digest of the Dockerfile, ``.dockerignore``, every file
  of the build context that ``.dockerignore`` lets through (Docker's pattern rules), the build
  argument, the base image's manifest digest and buildah's version. When the registry already
  holds that tag nothing is built: seconds instead of a build. Not in the key: the versions of
  the dependencies, which the Dockerfile resolves from PyPI at build time (it pins none).

Run ``python -m torchgate.node.productimage [--registry HOST:PORT]``; without ``--registry`` it
starts a registry on the cache's registry storage for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from torchgate.node import images, oci
from torchgate.node.config import REGISTRY_ALIAS
from torchgate.node.registry import Registry, RegistryClient

PRODUCT_FORMAT: Final = 1
"""Bump when the way the product image is built changes (flags, base): every tag changes."""

PYTHON_REFERENCE: Final = f"{REGISTRY_ALIAS}/python:3.11-slim-bookworm"
PRODUCT_REPOSITORY: Final = "torchgate"
PRODUCT_NAME: Final = f"{REGISTRY_ALIAS}/{PRODUCT_REPOSITORY}"
DEV_TAG: Final = "dev"
REPO_ROOT: Final = Path(__file__).resolve().parents[2]
HOST_CA_BUNDLE: Final = Path("/etc/ssl/certs/ca-certificates.crt")
STORAGE_DRIVER: Final = "overlay"

PYTHON_TOOLS: Final = ("pip==24.0", "setuptools==65.5.1", "wheel==0.45.1")
PIP_LAYER: Final = images.LayerSpec("python-pip", images.Wheels(PYTHON_TOOLS))
_DIST_PACKAGES: Final = images.SITE_PACKAGES
_PYTHON_WRAPPER: Final = b'#!/bin/sh\nexec /usr/bin/python3 "$@"\n'
_PIP_CONF: Final = b"[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"
_STEP_LINE: Final = re.compile(r"^(\[\d+/\d+\] )?(STEP \d+/\d+: |COMMIT)")
_LOCAL_NAME: Final = "localhost/torchgate-build"


class ProductImageError(images.ImageBuildError):
    """buildah or the registry failed; the message shows the end of the tool's output."""


@dataclass(frozen=True, slots=True)
class ProductImage:
    """The pushed product image: reference by input tag, manifest digest, bytes of its blobs."""

    reference: str
    digest: str
    size_bytes: int
    seconds: float
    built: bool = True
    """False when the registry already had the tag and nothing was built."""


# --------------------------------------------------------------------------- the base image


def relocated_record(record: bytes) -> bytes | None:
    """A RECORD written by ``pip install --target`` with console scripts where the image has them.

    ``--target`` installs into a temporary ``<home>/lib/python`` and records scripts as
    ``../../bin/<name>``; in the image the package sits in ``usr/local/lib/python3.11/
    dist-packages`` and its scripts in ``usr/local/bin``: ``../../../bin/<name>``. Returns None
    when no line needs it.
    """
    lines = record.split(b"\n")
    fixed = [b"../" + line if line.startswith(b"../../bin/") else line for line in lines]
    return None if fixed == lines else b"\n".join(fixed)


def python_image(*, ca_bundle: bytes | None, records: Mapping[str, bytes]) -> images.ImageSpec:
    """The stand-in for ``python:3.11-slim-bookworm`` (see the module docstring).

    Args:
        ca_bundle: the CA bundle pip and Python's ``ssl`` should trust, or None for none.
        records: image path -> corrected RECORD file of the pip layer's distributions.
    """
    files: list[tuple[str, bytes, int]] = [
        # A whiteout: the lower layer's file is absent from the image.
        ("usr/lib/python3.11/.wh.EXTERNALLY-MANAGED", b"", 0o644),
        ("usr/local/bin/python", _PYTHON_WRAPPER, 0o755),
        *((path, record, 0o644) for path, record in sorted(records.items())),
    ]
    if ca_bundle is not None:
        files += [
            ("etc/ssl/certs/ca-certificates.crt", ca_bundle, 0o644),
            ("usr/lib/ssl/cert.pem", ca_bundle, 0o644),  # OpenSSL's default file (ssl module)
            ("etc/pip.conf", _PIP_CONF, 0o644),
        ]
    return images.ImageSpec(
        PYTHON_REFERENCE,
        (
            images.BASE_LAYER,
            PIP_LAYER,
            images.LayerSpec("python-image", images.Files(tuple(files))),
        ),
        oci.RunConfig(env=(oci.DEFAULT_PATH, "LANG=C.UTF-8"), cmd=("python3",)),
    )


def _pip_layer_records(layer: Path) -> dict[str, bytes]:
    """Corrected RECORD files of the distributions in the pip layer's tar."""
    records: dict[str, bytes] = {}
    with tarfile.open(layer) as tar:
        for member in tar:
            parts = member.name.rsplit("/", 2)
            if not (member.isfile() and member.name.endswith(".dist-info/RECORD")):
                continue
            if len(parts) != 3 or parts[0] != _DIST_PACKAGES:
                continue
            contents = tar.extractfile(member)
            if contents is not None:
                fixed = relocated_record(contents.read())
                if fixed is not None:
                    records[member.name] = fixed
    return records


def ensure_python_image(
    *, registry: str, cache: Path, report: Callable[[str], None]
) -> images.ImageOutcome:
    """Build (or reuse) the stand-in Python base image and push it unless the registry has it."""
    pip_layer = images.ensure_layer(PIP_LAYER, cache=cache, report=report)
    ca_bundle = HOST_CA_BUNDLE.read_bytes() if HOST_CA_BUNDLE.is_file() else None
    spec = python_image(ca_bundle=ca_bundle, records=_pip_layer_records(pip_layer.path))
    outcomes: list[images.ImageOutcome] = []
    images.ensure_images(
        [spec], registry=registry, cache=cache, report=report, on_outcome=outcomes.append
    )
    (outcome,) = outcomes
    return outcome


# --------------------------------------------------------------------------- .dockerignore


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    """One ``.dockerignore`` line: its cleaned pattern, regex, and whether it is an exception."""

    pattern: str
    regex: re.Pattern[str]
    exception: bool


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's translation of a pattern (moby/patternmatcher): ``**`` crosses ``/``."""
    out, index = "^", 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*" and pattern[index : index + 1] == "*":
            index += 1
            if pattern[index : index + 1] == "/":
                index += 1
            out += ".*" if index == len(pattern) else "(.*/)?"
        elif char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "\\" and index < len(pattern):
            out += re.escape(pattern[index])
            index += 1
        elif char in ".+()|{}$^":
            out += "\\" + char
        else:
            out += char  # letters, "/", and "[...]" classes pass through
    return re.compile(out + "$")


def parse_dockerignore(text: str) -> tuple[IgnoreRule, ...]:
    """The rules of a ``.dockerignore``: comments and blank lines dropped, paths cleaned."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        if exception:
            line = line[1:].strip()
        pattern = os.path.normpath(line).lstrip("/") or "."
        rules.append(IgnoreRule(pattern, _pattern_regex(pattern), exception))
    return tuple(rules)


def is_ignored(path: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether the build context leaves out ``path`` (relative, ``/``-separated).

    As Docker: a rule matches a path or any of its parent folders; the last matching rule wins.
    """
    parts = path.split("/")
    candidates = ["/".join(parts[: depth + 1]) for depth in range(len(parts))]
    ignored = False
    for rule in rules:
        if any(rule.regex.match(candidate) for candidate in candidates):
            ignored = not rule.exception
    return ignored


def _may_hold_exceptions(folder: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether an ignored folder must still be walked: an exception rule reaches inside it."""
    prefix = f"{folder}/"
    return any(rule.exception and f"{rule.pattern}/".startswith(prefix) for rule in rules)


def context_digests(root: Path, rules: Sequence[IgnoreRule]) -> dict[str, str]:
    """Path -> digest of its contents and mode, for every file of the build context."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        dirs[:] = sorted(
            name
            for name in dirs
            if not is_ignored(prefix + name, rules) or _may_hold_exceptions(prefix + name, rules)
        )
        for name in sorted(files):
            path = prefix + name
            if is_ignored(path, rules):
                continue
            full = Path(folder) / name
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                data = b"symlink:" + os.readlink(full).encode()
            elif stat.S_ISREG(info.st_mode):
                data = full.read_bytes()
            else:
                continue
            found[path] = f"{oci.sha256_digest(data)}:{info.st_mode & 0o777:o}"
    return found


def inputs_key(
    *,
    dockerfile: bytes,
    dockerignore: bytes,
    files: Mapping[str, str],
    base_digest: str,
    build_args: Mapping[str, str],
    builder: str,
) -> str:
    """A short digest of everything the build reads: the product image's tag."""
    fingerprint = {
        "format": PRODUCT_FORMAT,
        "dockerfile": oci.sha256_digest(dockerfile),
        "dockerignore": oci.sha256_digest(dockerignore),
        "context": dict(files),
        "base": base_digest,
        "args": dict(build_args),
        "builder": builder,
    }
    return oci.sha256_digest(oci.canonical_json(fingerprint))[7:31]


# --------------------------------------------------------------------------- buildah


@dataclass(frozen=True, slots=True)
class BuildahPaths:
    """buildah's storage and scratch folders under the node cache."""

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
    def log(self) -> Path:
        """The last build's full output."""
        return self.base / "build.log"


def registries_conf(*, alias: str, location: str) -> str:
    """``registries.conf`` sending ``alias/...`` to the plain-HTTP registry at ``location``.

    Image names keep saying ``alias`` (the build argument, the base image annotation); only
    where they are fetched from changes. Nothing is searched for unqualified names.
    """
    return (
        "unqualified-search-registries = []\n\n"
        "[[registry]]\n"
        f"prefix = {json.dumps(alias)}\n"
        f"location = {json.dumps(location)}\n"
        "insecure = true\n"
    )


def storage_conf(paths: BuildahPaths, *, driver: str) -> str:
    """``storage.conf`` for buildah: ours only, so no system setting leaks into the build."""
    return (
        "[storage]\n"
        f"driver = {json.dumps(driver)}\n"
        f"graphroot = {json.dumps(str(paths.root))}\n"
        f"runroot = {json.dumps(str(paths.runroot))}\n"
    )


_POLICY: Final = '{"default": [{"type": "insecureAcceptAnything"}]}\n'
"""Accept any image: every image comes from our own loopback registry."""


def storage_args(paths: BuildahPaths, *, driver: str = STORAGE_DRIVER) -> list[str]:
    """The global options of every buildah call: our storage."""
    return ["--root", str(paths.root), "--runroot", str(paths.runroot), "--storage-driver", driver]


def bud_argv(
    buildah: str,
    paths: BuildahPaths,
    *,
    context: Path,
    local_name: str,
    build_args: Mapping[str, str],
    policy: Path,
) -> list[str]:
    """The ``buildah bud`` command line for the Dockerfile at the root of ``context``."""
    return [
        buildah,
        *storage_args(paths),
        "bud",
        "--isolation=oci",
        "--network=host",
        "--pull=true",
        "--format=oci",
        f"--signature-policy={policy}",
        *(f"--build-arg={name}={value}" for name, value in sorted(build_args.items())),
        f"--file={context / 'Dockerfile'}",
        f"--tag={local_name}",
        str(context),
    ]


def push_argv(
    buildah: str, paths: BuildahPaths, *, local_name: str, destination: str, policy: Path
) -> list[str]:
    """The ``buildah push`` command line to a plain-HTTP registry (new layers gzip-compressed)."""
    return [
        buildah,
        *storage_args(paths),
        "push",
        "--tls-verify=false",
        "--format=oci",
        f"--signature-policy={policy}",
        local_name,
        f"docker://{destination}",
    ]


def _buildah() -> str:
    found = shutil.which("buildah")
    if found is None:
        raise ProductImageError("buildah not found: apt-get install buildah")
    if shutil.which("runc") is None:
        raise ProductImageError("runc not found (buildah's oci isolation): apt-get install runc")
    if os.geteuid() != 0:
        raise ProductImageError("the product image is built with rootful buildah: run as root")
    return found


def _buildah_version(buildah: str) -> str:
    done = subprocess.run([buildah, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or f"unknown (exit {done.returncode})"


def _mounts_below(path: Path) -> list[str]:
    prefix = f"{path.resolve()}/"
    lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    targets = [line.split()[4].replace("\\040", " ") for line in lines if line.strip()]
    return [target for target in targets if f"{target}/".startswith(prefix)]


class _Session:
    """Per-call buildah configuration files (the registry's port differs between calls)."""

    def __init__(self, paths: BuildahPaths, registry: str) -> None:
        self.paths = paths
        for folder in (paths.root, paths.runroot, paths.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        stem = f"call-{os.getpid()}"
        self.registries = paths.base / f"{stem}-registries.conf"
        self.storage = paths.base / f"{stem}-storage.conf"
        self.policy = paths.base / f"{stem}-policy.json"
        self.registries.write_text(registries_conf(alias=REGISTRY_ALIAS, location=registry))
        self.storage.write_text(storage_conf(paths, driver=STORAGE_DRIVER))
        self.policy.write_text(_POLICY)

    @property
    def env(self) -> dict[str, str]:
        """The environment of every buildah call: our configuration, no inherited overrides."""
        drop = ("BUILDAH_", "CONTAINERS_", "STORAGE_", "REGISTRY_AUTH_FILE")
        env = {key: value for key, value in os.environ.items() if not key.startswith(drop)}
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.registries)
        env["CONTAINERS_STORAGE_CONF"] = str(self.storage)
        env["TMPDIR"] = str(self.paths.tmp)
        return env

    def close(self) -> None:
        for path in (self.registries, self.storage, self.policy):
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def _session(paths: BuildahPaths, registry: str) -> Iterator[_Session]:
    session = _Session(paths, registry)
    try:
        yield session
    finally:
        session.close()


def _stream(
    argv: Sequence[str],
    *,
    what: str,
    env: Mapping[str, str],
    log: Path,
    report: Callable[[str], None],
    cwd: Path | None = None,
) -> None:
    """Run a buildah command: all output to ``log``, its step lines to ``report``."""
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
            env=dict(env),
            text=True,
            errors="replace",
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                lines.append(line.rstrip("\n"))
                if _STEP_LINE.match(line):
                    report(f"  {line.rstrip()[:110]}")
        returncode = process.returncode
    if returncode != 0:
        tail = "\n".join(lines[-25:])
        raise ProductImageError(f"{what} failed (exit {returncode}); log {log}:\n{tail}")


def _quiet(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, env=dict(env), check=False)


# --------------------------------------------------------------------------- registry reads

_DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"


def fetch_manifest(registry: str, repository: str, reference: str) -> bytes:
    """The manifest stored under a tag or digest (OCI or Docker v2), as the registry sends it."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{reference}",
        headers={"Accept": f"{oci.MANIFEST_MEDIA_TYPE}, {_DOCKER_MANIFEST}"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=60) as response:
        body: bytes = response.read()
    return body


def manifest_size(manifest: bytes) -> int:
    """Bytes of an image's blobs (config and layers, as stored) named by its manifest."""
    document = json.loads(manifest)
    return int(document["config"]["size"]) + sum(int(x["size"]) for x in document["layers"])


def merged_paths(layers: Iterable[Iterable[str]]) -> set[str]:
    """The paths an image's file system shows, from its layers' tar member names, bottom-up.

    Applies OCI whiteouts: ``dir/.wh.name`` deletes ``dir/name`` and what is below it from the
    layers underneath; ``dir/.wh..wh..opq`` hides everything the lower layers had in ``dir``.
    """
    visible: set[str] = set()
    for names in layers:
        cleaned = [name.removeprefix("./").rstrip("/") for name in names]
        added: set[str] = set()
        for name in cleaned:
            folder, _, base = name.rpartition("/")
            prefix = f"{folder}/" if folder else ""
            if base == ".wh..wh..opq":
                visible = {p for p in visible if not p.startswith(prefix) or p == folder}
            elif base.startswith(".wh."):
                gone = prefix + base.removeprefix(".wh.")
                visible = {p for p in visible if p != gone and not p.startswith(f"{gone}/")}
            elif name:
                added.add(name)
        visible |= added
    return visible


# --------------------------------------------------------------------------- build and push


def build_product_image(
    *,
    registry: str,
    cache: Path,
    report: Callable[[str], None],
    context: Path = REPO_ROOT,
) -> ProductImage:
    """Build the Dockerfile at ``context`` with buildah unless the registry has its input tag.

    Args:
        registry: ``HOST:PORT`` of the plain-HTTP loopback registry.
        cache: the node cache folder (see :func:`torchgate.node.images.node_cache`).
        report: receives one progress line at a time.
        context: the build context, with ``Dockerfile`` and ``.dockerignore`` at its root.

    Returns:
        ``registry.torchgate.local/torchgate:<inputs key>`` (also tagged ``dev``) and its
        manifest digest.
    """
    started = time.monotonic()
    buildah = _buildah()
    client = RegistryClient(registry)
    if not client.ping():
        raise ProductImageError(f"no registry answers at http://{registry}/v2/")
    base = ensure_python_image(registry=registry, cache=cache, report=report)
    report(f"base {base.reference}: {base.digest[:19]}, {base.size / 1e6:.1f} MB")
    dockerignore = (context / ".dockerignore").read_bytes()
    build_args = {"PYTHON_IMAGE": PYTHON_REFERENCE}
    files = context_digests(context, parse_dockerignore(dockerignore.decode()))
    tag = inputs_key(
        dockerfile=(context / "Dockerfile").read_bytes(),
        dockerignore=dockerignore,
        files=files,
        base_digest=base.digest,
        build_args=build_args,
        builder=_buildah_version(buildah),
    )
    reference = f"{PRODUCT_NAME}:{tag}"
    digest = client.manifest_digest(PRODUCT_REPOSITORY, tag)
    built = digest is None
    if digest is not None:
        report(f"{reference}: in the registry ({digest[:19]}), build skipped")
    else:
        report(f"{reference}: building ({len(files)} files in the context)")
        digest = _build_and_push(
            buildah,
            BuildahPaths(cache / "buildah"),
            context=context,
            registry=registry,
            tag=tag,
            build_args=build_args,
            report=report,
        )
    manifest = fetch_manifest(registry, PRODUCT_REPOSITORY, digest)
    if client.manifest_digest(PRODUCT_REPOSITORY, DEV_TAG) != digest:
        media_type = str(json.loads(manifest).get("mediaType") or oci.MANIFEST_MEDIA_TYPE)
        client.put_manifest(PRODUCT_REPOSITORY, DEV_TAG, manifest, media_type)
        report(f"{PRODUCT_NAME}:{DEV_TAG} -> {digest[:19]}")
    seconds = time.monotonic() - started
    size = manifest_size(manifest)
    report(f"{reference}: {digest[:19]}, {size / 1e6:.1f} MB, {seconds:.1f}s")
    return ProductImage(reference, digest, size, seconds, built)


def _build_and_push(
    buildah: str,
    paths: BuildahPaths,
    *,
    context: Path,
    registry: str,
    tag: str,
    build_args: Mapping[str, str],
    report: Callable[[str], None],
) -> str:
    """``buildah bud``, push to the registry under ``tag``, drop the local copy; the digest."""
    local_name = f"{_LOCAL_NAME}:{tag}"
    with _session(paths, registry) as session:
        paths.log.write_text("", encoding="utf-8")
        started = time.monotonic()
        _stream(
            bud_argv(
                buildah,
                paths,
                context=context,
                local_name=local_name,
                build_args=build_args,
                policy=session.policy,
            ),
            what="buildah bud",
            env=session.env,
            log=paths.log,
            report=report,
            cwd=context,
        )
        report(f"buildah bud: done in {time.monotonic() - started:.1f}s (log {paths.log})")
        started = time.monotonic()
        destination = f"{registry}/{PRODUCT_REPOSITORY}:{tag}"
        argv = push_argv(
            buildah, paths, local_name=local_name, destination=destination, policy=session.policy
        )
        _stream(argv, what="buildah push", env=session.env, log=paths.log, report=report)
        report(f"buildah push: done in {time.monotonic() - started:.1f}s")
        # The registry keeps the image; buildah's storage keeps only base images, and older
        # ones (no name left) are pruned.
        _quiet([buildah, *storage_args(paths), "rmi", local_name], session.env)
        _quiet([buildah, *storage_args(paths), "rmi", "--prune"], session.env)
    leftover = _mounts_below(paths.base)
    if leftover:
        report(f"warning: still mounted below {paths.base}: {', '.join(leftover)}")
    digest = RegistryClient(registry).manifest_digest(PRODUCT_REPOSITORY, tag)
    if digest is None:
        raise ProductImageError(f"the registry has no {PRODUCT_REPOSITORY}:{tag} after the push")
    return digest


def run_in_image(
    reference: str, argv: Sequence[str], *, registry: str, cache: Path, user: str | None = None
) -> str:
    """Run a command in a container of a pushed image (``buildah from`` + ``run``); its output.

    The image's user, working directory and environment apply; the container has no network
    and is removed afterwards.
    """
    buildah = _buildah()
    paths = BuildahPaths(cache / "buildah")
    with _session(paths, registry) as session:
        base = [buildah, *storage_args(paths)]
        created = _quiet(
            [
                *base,
                "from",
                "--pull=always",
                "--quiet",
                f"--signature-policy={session.policy}",
                reference,
            ],
            session.env,
        )
        if created.returncode != 0:
            raise ProductImageError(f"buildah from {reference} failed:\n{created.stdout}")
        container = created.stdout.strip().splitlines()[-1]
        try:
            run = [*base, "run", "--isolation=oci", "--network=none"]
            if user is not None:
                run.append(f"--user={user}")
            done = _quiet([*run, container, "--", *argv], session.env)
        finally:
            _quiet([*base, "rm", container], session.env)
            _quiet([*base, "rmi", reference], session.env)
    if done.returncode != 0:
        raise ProductImageError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout + done.stderr


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """Build and push the product image (and its base); print the reference and digest."""
    parser = argparse.ArgumentParser(
        prog="python -m torchgate.node.productimage", description=__doc__
    )
    parser.add_argument("--registry", help="HOST:PORT of a running registry (default: start one)")
    parser.add_argument("--cache", type=Path, default=None, help="node cache folder")
    args = parser.parse_args(argv)
    cache: Path = args.cache or images.node_cache()
    started = time.monotonic()

    def report(line: str) -> None:
        print(f"[product {time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    try:
        with contextlib.ExitStack() as stack:
            registry = args.registry
            if not registry:
                started_registry = Registry(cache / "registry", cache / "registry-run")
                registry = stack.enter_context(started_registry).host
                report(f"registry started on {registry} (storage {started_registry.storage})")
            image = build_product_image(registry=registry, cache=cache, report=report)
    except (images.ImageBuildError, OSError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    state = "built and pushed" if image.built else "up to date"
    print(f"{image.reference}  {image.digest}  {image.size_bytes / 1e6:.1f} MB  {state}")
    print(f"{PRODUCT_NAME}:{DEV_TAG}  {image.digest}")
    print(f"done in {image.seconds:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build the local node's images without a Docker engine, cache them on their inputs, push them.

Why: the seed PyTorchJobs name ``pytorch-demo`` and ``docker.io/kubeflowkatib/pytorch-mnist``, and
the kubelet needs a sandbox (``pause``) image, but the build machines reach neither Docker Hub nor
registry.k8s.io, and have no Docker engine. They do reach Debian's mirror, PyPI and the Go module
proxy, so each image is assembled from those: a Debian root file system made by ``debootstrap``,
wheels installed by the host's pip into a layer folder, our own files, a static Go binary. The
layer tars, config and manifest are made by :mod:`torchgate_dev.node.oci` and pushed to the loopback
registry (:mod:`torchgate_dev.node.registry`), which containerd uses as its mirror.

Caching: every layer is keyed on its inputs (debootstrap arguments, pinned wheel list, file
contents, Go sources and toolchain, and ``LAYER_FORMAT``); its tar and digest are kept under the
cache folder, so a run whose inputs did not change builds nothing, and when the registry already
holds the manifest it pushes nothing either: seconds instead of the first build's minutes.

What each image is made of is declared in :mod:`torchgate_dev.node.imagespecs` (pure); this module
builds, caches and pushes.

Run ``python -m torchgate_dev.node.images [--registry HOST:PORT]`` to build and push everything.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from torchgate_dev.node import oci
from torchgate_dev.node.imagespecs import BASE_LAYER as BASE_LAYER
from torchgate_dev.node.imagespecs import (
    FIXED_EPOCH,
    PIP_PLATFORMS,
    PYTHON_VERSION,
    SEEDS_DIR,
    Debootstrap,
    GoProgram,
    LayerSource,
)
from torchgate_dev.node.imagespecs import SITE_PACKAGES as SITE_PACKAGES
from torchgate_dev.node.imagespecs import Files as Files
from torchgate_dev.node.imagespecs import ImageSpec as ImageSpec
from torchgate_dev.node.imagespecs import LayerSpec as LayerSpec
from torchgate_dev.node.imagespecs import Wheels as Wheels
from torchgate_dev.node.imagespecs import pause_image as pause_image
from torchgate_dev.node.imagespecs import seed_images as seed_images
from torchgate_dev.node.registry import PushOutcome, Registry, RegistryClient, push_image

LAYER_FORMAT: Final = 1
"""Bump when the way a layer is made changes: every cached layer is then rebuilt."""

_PIP_ENV_DROPPED: Final = ("PIP_REQUIRE_VIRTUALENV", "PIP_USER", "PIP_TARGET", "PIP_PREFIX")


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and shows the end of its output."""


@dataclass(frozen=True, slots=True)
class BuiltLayer:
    """A layer tar in the cache and its descriptor."""

    name: str
    key: str
    descriptor: oci.Descriptor
    path: Path


ImageOutcome = PushOutcome
"""What :func:`ensure_images` did for one image (see :class:`PushOutcome`)."""


# --------------------------------------------------------------------------- cache keys


def cache_root() -> Path:
    """``$TORCHGATE_CACHE_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/torchgate`` (as build.sh)."""
    explicit = os.environ.get("TORCHGATE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchgate"


def node_cache() -> Path:
    """The node's cache folder: root file systems, wheels, layers, registry storage."""
    return cache_root() / "node"


def _go_env() -> dict[str, str]:
    static = {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOWORK": "off", "GOOS": "linux"}
    return {**os.environ, **static, "GOARCH": "amd64", "GOFLAGS": "-mod=readonly -buildvcs=false"}


@functools.cache
def _go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise ImageBuildError("'go' is not on PATH; the pause image is built from Go sources")
    done = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, env=_go_env(), check=True
    )
    return done.stdout.strip()


def _fingerprint(source: LayerSource) -> dict[str, object]:
    match source:
        case Debootstrap():
            return {"debootstrap": [source.suite, source.variant, list(source.include)]}
        case Wheels():
            return {
                "wheels": list(source.requirements),
                "platforms": list(PIP_PLATFORMS),
                "python": PYTHON_VERSION,
            }
        case Files():
            return {"files": [[p, oci.sha256_digest(c), m] for p, c, m in sorted(source.files)]}
        case GoProgram():
            sources = sorted(
                p for p in source.source.rglob("*") if p.is_file() and p.suffix in (".go", ".mod")
            )
            digests = {
                str(p.relative_to(source.source)): oci.sha256_digest(p.read_bytes())
                for p in sources
            }
            return {"go": digests, "path": source.path, "toolchain": _go_version()}


def layer_key(source: LayerSource) -> str:
    """A short digest of everything a layer is made from (the mirror URL is not part of it)."""
    fingerprint = {"format": LAYER_FORMAT, **_fingerprint(source)}
    return oci.sha256_digest(oci.canonical_json(fingerprint))[7:31]


# --------------------------------------------------------------------------- building


def _run(
    argv: Sequence[str],
    *,
    what: str,
    log: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
) -> None:
    """Run a build tool with its output in ``log``; raise ImageBuildError with its tail."""
    with open(log, "ab") as out:
        out.write(f"---- {' '.join(argv)}\n".encode())
        out.flush()
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if env is None else dict(env),
            check=False,
        )
    if done.returncode not in ok:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise ImageBuildError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))


def _mounts_below(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first."""
    prefix = f"{path.resolve()}/"
    lines = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    targets = [line.split()[1].replace("\\040", " ") for line in lines if line.strip()]
    return sorted((t for t in targets if f"{t}/".startswith(prefix)), reverse=True)


def _remove_tree(path: Path) -> None:
    """Delete a build folder, never through a mount point inside it.

    A failed debootstrap can leave ``/proc`` or ``/sys`` mounted in its target, and deleting
    through a (bind) mount deletes the host's files. Such mounts are detached first; if one
    remains, the folder is kept and ImageBuildError raised.
    """
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    for target in _mounts_below(path):
        subprocess.run(["umount", "--lazy", target], check=False, capture_output=True)
    remaining = _mounts_below(path)
    if remaining:
        raise ImageBuildError(f"not deleting {path}: still mounted there: {', '.join(remaining)}")
    shutil.rmtree(path, ignore_errors=True)


def _remove_stale(folder: Path, pattern: str) -> None:
    """Remove ``<name>.tmp-<pid>`` leftovers of builds whose process is gone."""
    for leftover in folder.glob(pattern):
        pid = leftover.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_tree(leftover)


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file())


def _ensure_rootfs(
    source: Debootstrap, cache: Path, report: Callable[[str], None]
) -> tuple[Path, int]:
    """The cached root file system and its mtime clamp (when debootstrap started)."""
    key = layer_key(source)
    final, meta = cache / f"rootfs-{key}", cache / f"rootfs-{key}.json"
    if final.is_dir() and meta.is_file():
        return final, int(json.loads(meta.read_text())["epoch"])
    _remove_tree(final)
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root (it creates device nodes and chroots)")
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError("debootstrap not found: apt-get install debootstrap")
    _remove_stale(cache, f".rootfs-{key}.tmp-*")
    work = cache / f".rootfs-{key}.tmp-{os.getpid()}"
    include = ",".join(source.include)
    argv = [debootstrap, f"--variant={source.variant}", f"--include={include}", source.suite]
    report(f"debootstrap {source.suite} ({source.variant} + {include}): started")
    started = time.time()
    try:
        _run([*argv, str(work), source.mirror], what="debootstrap", log=cache / f"rootfs-{key}.log")
        downloaded = _dir_bytes(work / "var/cache/apt/archives")
        work.rename(final)
    except BaseException:
        _remove_tree(work)
        raise
    seconds = time.time() - started
    meta.write_text(json.dumps({"epoch": int(started), "seconds": seconds, "bytes": downloaded}))
    report(f"debootstrap finished in {seconds:.0f}s, {downloaded / 1e6:.1f} MB of packages")
    return final, int(started)


def _tree_entries(
    root: Path, *, keep: Callable[[str, bool], bool] | None, as_root: bool
) -> list[oci.LayerEntry]:
    """Layer entries for everything below ``root`` (not following symbolic links).

    Sockets, fifos and device nodes are left out (a base layer has none outside ``/dev``).
    """
    entries: list[oci.LayerEntry] = []
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as items:
            for item in items:
                path = f"{prefix}{item.name}"
                info = item.stat(follow_symlinks=False)
                is_dir = stat.S_ISDIR(info.st_mode)
                if keep is not None and not keep(path, is_dir):
                    continue
                owner = (0, 0) if as_root else (info.st_uid, info.st_gid)
                common = (info.st_mode, *owner, int(info.st_mtime))
                if is_dir:
                    entries.append(oci.LayerEntry(path, "directory", *common))
                    pending.append((Path(item.path), f"{path}/"))
                elif stat.S_ISLNK(info.st_mode):
                    link = os.readlink(item.path)
                    entries.append(oci.LayerEntry(path, "symlink", *common, linkname=link))
                elif stat.S_ISREG(info.st_mode):
                    inode = (info.st_dev, info.st_ino) if info.st_nlink > 1 else None
                    opener = _opener(item.path)
                    entries.append(
                        oci.LayerEntry(
                            path, "file", *common, info.st_size, inode=inode, open=opener
                        )
                    )
    return entries


def _opener(path: str | Path) -> Callable[[], BinaryIO]:
    return lambda: open(path, "rb")


def _python311() -> str | None:
    """An interpreter whose ``.pyc`` files bookworm's Python 3.11 accepts (same magic number)."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    return sys.executable if running == PYTHON_VERSION else shutil.which(f"python{PYTHON_VERSION}")


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PIP_ENV_DROPPED}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _wheels_tree(
    source: Wheels, staging: Path, cache: Path, log: Path, report: Callable[[str], None]
) -> None:
    """Download (into the cache) and install pinned wheels under ``staging``."""
    unpinned = [r for r in source.requirements if "==" not in r]
    if unpinned:
        raise ImageBuildError(f"every wheel must be pinned (name==version): {unpinned}")
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    common = [
        "--no-deps",
        "--only-binary=:all:",
        f"--python-version={PYTHON_VERSION}",
        "--implementation=cp",
        *(f"--platform={platform}" for platform in PIP_PLATFORMS),
    ]
    before, started = _dir_bytes(wheels), time.monotonic()
    _run(
        [*pip, "download", "--quiet", *common, f"--dest={wheels}", *source.requirements],
        what="pip download",
        log=log,
        env=_pip_env(),
    )
    downloaded = _dir_bytes(wheels) - before
    report(
        f"  {len(source.requirements)} wheels ready in {time.monotonic() - started:.0f}s, "
        f"{downloaded / 1e6:.1f} MB downloaded"
    )
    target = staging / SITE_PACKAGES
    started = time.monotonic()
    install = ["install", "--quiet", "--no-compile", "--no-index", "--root-user-action=ignore"]
    install += [f"--find-links={wheels}", f"--target={target}", *common, *source.requirements]
    _run([*pip, *install], what="pip install", log=log, env=_pip_env())
    _finish_python_tree(staging, target, log)
    report(f"  installed and compiled in {time.monotonic() - started:.0f}s")


def _finish_python_tree(staging: Path, target: Path, log: Path) -> None:
    """Make a ``pip install --target`` tree fit the image: scripts, host paths, bytecode.

    Console scripts move to ``/usr/local/bin`` with the image's interpreter in their ``#!``
    line; ``direct_url.json`` (a path on the build host) goes. Sources get a fixed mtime and
    are compiled against it, so the ``.pyc`` files stay valid in the image (``import torch``
    takes about half the time) instead of being written again in every container.
    """
    scripts = target / "bin"
    if scripts.is_dir():
        bin_dir = staging / "usr/local/bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for script in sorted(scripts.iterdir()):
            data = script.read_bytes()
            if data.startswith(b"#!") and b"python" in data.split(b"\n", 1)[0]:
                data = b"#!/usr/bin/python3\n" + data.split(b"\n", 1)[1]
            (bin_dir / script.name).write_bytes(data)
            (bin_dir / script.name).chmod(0o755)
        shutil.rmtree(scripts)
    for direct_url in target.glob("*.dist-info/direct_url.json"):
        direct_url.unlink()
    for folder in [staging, *staging.rglob("*")]:
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(0o755)
    for path in [*staging.rglob("*")]:
        os.utime(path, (FIXED_EPOCH, FIXED_EPOCH), follow_symlinks=False)
    python = _python311()
    if python is not None:
        # Exit 1 means some file did not compile (torch ships Python 3.12-only test helpers);
        # pip ignores those too. The log lists them.
        _run(
            [python, "-m", "compileall", "-q", f"-s{staging}", "-p/", str(target)],
            what="compileall",
            log=log,
            ok=(0, 1),
        )


def _go_binary(source: GoProgram, key: str, cache: Path, log: Path) -> Path:
    """The cached static binary, built with the local Go toolchain when missing."""
    binary = cache / "bin" / f"{source.path.replace('/', '_')}-{key}"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ImageBuildError("'go' is not on PATH; the pause image is built from Go sources")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.tmp-{os.getpid()}")
    _run(
        [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."],
        what="go build",
        log=log,
        cwd=source.source,
        env=_go_env(),
    )
    partial.rename(binary)
    return binary


def _cached_layer(layers: Path, name: str, key: str) -> BuiltLayer | None:
    meta, tar = layers / f"{key}.json", layers / f"{key}.tar"
    try:
        raw = json.loads(meta.read_text(encoding="utf-8"))
        descriptor = oci.Descriptor(oci.LAYER_MEDIA_TYPE, str(raw["digest"]), int(raw["size"]))
        if tar.stat().st_size != descriptor.size:
            return None
    except (OSError, ValueError, KeyError):
        return None
    return BuiltLayer(name, key, descriptor, tar)


def _store_layer(
    layers: Path, name: str, key: str, entries: Iterable[oci.LayerEntry], *, mtime_clamp: int
) -> BuiltLayer:
    """Write a layer tar into the cache (temporary name, then renamed) and record its digest.

    Cached tars of other versions of the same layer (same name, other inputs) are deleted.
    """
    layers.mkdir(parents=True, exist_ok=True)
    _remove_stale(layers, f"{key}.tar.tmp-*")
    partial = layers / f"{key}.tar.tmp-{os.getpid()}"
    try:
        with open(partial, "wb") as sink:
            descriptor = oci.write_layer(entries, sink, mtime_clamp=mtime_clamp)
        partial.rename(layers / f"{key}.tar")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    meta = {"name": name, "digest": descriptor.digest, "size": descriptor.size}
    (layers / f"{key}.json").write_text(json.dumps(meta), encoding="utf-8")
    for other in layers.glob("*.json"):  # older versions of this layer: never used again
        with contextlib.suppress(OSError, ValueError):
            if other.stem != key and json.loads(other.read_text()).get("name") == name:
                (layers / f"{other.stem}.tar").unlink(missing_ok=True)
                other.unlink()
    return BuiltLayer(name, key, descriptor, layers / f"{key}.tar")


def ensure_layer(layer: LayerSpec, *, cache: Path, report: Callable[[str], None]) -> BuiltLayer:
    """The layer's tar from the cache, or built now (and cached) when its inputs are new."""
    key = layer_key(layer.source)
    layers = cache / "layers"
    cached = _cached_layer(layers, layer.name, key)
    if cached is not None:
        return cached
    cache.mkdir(parents=True, exist_ok=True)
    report(f"layer {layer.name} ({key}): building")
    started = time.monotonic()
    log = cache / f"build-{layer.name}.log"
    source = layer.source
    if isinstance(source, Debootstrap):
        rootfs, epoch = _ensure_rootfs(source, cache, report)
        entries = _tree_entries(rootfs, keep=oci.keep_in_base_layer_entry, as_root=False)
        built = _store_layer(layers, layer.name, key, entries, mtime_clamp=epoch)
    elif isinstance(source, Wheels):
        (cache / "tmp").mkdir(exist_ok=True)
        _remove_stale(cache / "tmp", f"{layer.name}-*")
        staging = cache / "tmp" / f"{layer.name}-{key}-{os.getpid()}"
        _remove_tree(staging)
        try:
            _wheels_tree(source, staging, cache, log, report)
            entries = _tree_entries(staging, keep=None, as_root=True)
            built = _store_layer(layers, layer.name, key, entries, mtime_clamp=FIXED_EPOCH)
        finally:
            _remove_tree(staging)
    elif isinstance(source, Files):
        files = {path: (contents, mode) for path, contents, mode in source.files}
        entries = oci.file_entries(files, mtime=FIXED_EPOCH)
        built = _store_layer(layers, layer.name, key, entries, mtime_clamp=FIXED_EPOCH)
    else:
        binary = _go_binary(source, key, cache, log)
        contents = binary.read_bytes()
        entries = oci.file_entries({source.path: (contents, 0o755)}, mtime=FIXED_EPOCH)
        built = _store_layer(layers, layer.name, key, entries, mtime_clamp=FIXED_EPOCH)
    report(
        f"layer {layer.name}: {built.descriptor.size / 1e6:.1f} MB, "
        f"{built.descriptor.digest[:19]}, built in {time.monotonic() - started:.0f}s"
    )
    return built


# --------------------------------------------------------------------------- images


def ensure_images(
    specs: Iterable[ImageSpec],
    *,
    registry: str,
    cache: Path,
    report: Callable[[str], None],
    on_outcome: Callable[[ImageOutcome], None] | None = None,
) -> dict[str, str]:
    """Build (or reuse) every image's layers and push what the registry lacks.

    Args:
        specs: the images.
        registry: ``HOST:PORT`` of a plain-HTTP registry; images go to their repository path
            without registry host (``library/pytorch-demo``, ``pause``).
        cache: the node cache folder (see :func:`node_cache`).
        report: receives one progress line at a time.
        on_outcome: receives what was done for each image (pushed or not, which blobs).

    Returns:
        Normalised reference -> manifest digest.
    """
    client = RegistryClient(registry)
    if not client.ping():
        raise ImageBuildError(f"no registry answers at http://{registry}/v2/")
    with build_lock(cache, report):
        return _ensure_images(specs, client, cache=cache, report=report, on_outcome=on_outcome)


@contextlib.contextmanager
def build_lock(cache: Path, report: Callable[[str], None]) -> Iterator[None]:
    """Hold the cache's image-build lock, waiting (and saying so) while another build has it.

    ``dev up``'s background build and a ``dev images`` run would otherwise write the same layer
    files; the second waits, then finds them built.
    """
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "images.lock", "a", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report("another image build is running with this cache; waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ensure_images(
    specs: Iterable[ImageSpec],
    client: RegistryClient,
    *,
    cache: Path,
    report: Callable[[str], None],
    on_outcome: Callable[[ImageOutcome], None] | None,
) -> dict[str, str]:
    built: dict[str, BuiltLayer] = {}
    holders: dict[str, str] = {}
    digests: dict[str, str] = {}
    for spec in specs:
        reference = oci.parse_reference(spec.reference)
        layers = []
        for layer in spec.layers:
            key = layer_key(layer.source)
            if key not in built:
                built[key] = ensure_layer(layer, cache=cache, report=report)
            layers.append(built[key])
        image = oci.assemble(spec.run, [layer.descriptor for layer in layers])
        paths = [layer.path for layer in layers]
        outcome = push_image(client, reference, image, paths, holders=holders, report=report)
        digests[outcome.reference] = outcome.digest
        if on_outcome is not None:
            on_outcome(outcome)
    return digests


# --------------------------------------------------------------------------- command line


@contextlib.contextmanager
def registry_or_throwaway(
    registry: str | None, cache: Path, report: Callable[[str], None]
) -> Iterator[str]:
    """``registry`` (HOST:PORT) when given, else a registry started on the cache's storage."""
    if registry:
        yield registry
        return
    with Registry(cache / "registry", cache / "registry-run") as started:
        report(f"registry started on {started.host} (storage {started.storage})")
        yield started.host


def main(argv: Sequence[str] | None = None) -> int:
    """Build and push the seed images and the pause image; print a summary."""
    parser = argparse.ArgumentParser(
        prog="python -m torchgate_dev.node.images", description=__doc__
    )
    parser.add_argument("--registry", help="HOST:PORT of a running registry (default: start one)")
    parser.add_argument("--cache", type=Path, default=None, help="node cache folder")
    parser.add_argument("--seeds", type=Path, default=SEEDS_DIR, help="seed manifests folder")
    args = parser.parse_args(argv)
    cache: Path = args.cache or node_cache()
    started = time.monotonic()

    def report(line: str) -> None:
        print(f"[images {time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    outcomes: list[ImageOutcome] = []
    specs = (*seed_images(args.seeds), pause_image())
    try:
        with registry_or_throwaway(args.registry, cache, report) as registry:
            ensure_images(
                specs, registry=registry, cache=cache, report=report, on_outcome=outcomes.append
            )
    except (ImageBuildError, OSError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for outcome in outcomes:
        state = "pushed" if outcome.manifest_pushed else "up to date"
        print(f"{outcome.reference}  {outcome.digest}  {outcome.size / 1e6:.1f} MB  {state}")
    print(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build torchgate's own image from the repository's ``Dockerfile``, unchanged, and push it.

Why: to run torchgate inside the local cluster, its real node must pull torchgate's image, and
that image should be the one users get from ``docker build .`` (README, "Install on a
cluster"), not a look-alike: the Dockerfile's two stages, its wheel-only runtime and its
``pip uninstall`` are what the manifests rely on. The build machines have no Docker engine and
cannot pull ``python:3.11-slim-bookworm``, so:

- **Debian's buildah builds the Dockerfile as written** (:mod:`torchgate_dev.node.buildah` says how
  it is kept inside the node cache). buildah 1.28 supports the runtime stage's
  ``RUN --mount=type=bind,from=builder``; the build argument ``PYTHON_IMAGE`` names the base
  below, pulled from the loopback registry.
- **A local stand-in for the base image**, ``registry.torchgate.local/python:3.11-slim-bookworm``,
  made with :func:`torchgate_dev.node.images.ensure_images` on the *same* debootstrap layer as the
  seed images (``images.BASE_LAYER``: one blob in the registry for all of them). On top: what
  the official image offers that the Dockerfile uses. ``pip``/``setuptools``/``wheel`` pinned as
  in the official 3.11 images (pip 24.0 is CPython 3.11's ensurepip; wheel 0.45.1 is the last
  release without a dependency); Debian's ``EXTERNALLY-MANAGED`` whited out (the official
  image's Python is not the distribution's, so ``pip install`` as root is allowed there); a
  ``python`` command (a two-line ``sh`` wrapper: ``images.Files`` holds regular files only).
- **This machine's CA bundle in the stand-in.** TLS to PyPI goes through an egress proxy whose
  CA only this machine's bundle has: with Debian's ``ca-certificates`` in the container, pip
  fails with "self-signed certificate in certificate chain". pip 24.0 trusts its own certifi
  unless told otherwise, so like this machine the image has an ``/etc/pip.conf`` naming the
  bundle (inert in the product image, where pip is gone).
- **pip's RECORD files are corrected** in the top layer: ``images.Wheels`` installs with
  ``pip install --target``, whose RECORD names console scripts ``../../bin/pip`` (relative to a
  temporary ``lib/python``), which from ``dist-packages`` is not ``/usr/local/bin``. The
  Dockerfile's ``pip uninstall --yes pip setuptools wheel`` finds ``pip`` and ``pip3`` through
  pip's entry points, but ``pip3.11`` only through RECORD: uncorrected, a broken
  ``/usr/local/bin/pip3.11`` stays in the product image.
- **Cached on its inputs**: the tag is a digest of the Dockerfile, ``.dockerignore``, every file
  of the build context (:mod:`torchgate_dev.node.buildcontext`), the build argument, the base
  image's manifest digest and buildah's version. When the registry already holds that tag
  nothing is built: a fraction of a second instead of a build. Not in the key: the versions of
  the dependencies, which the Dockerfile resolves from PyPI at build time (it pins none).

Run ``python -m torchgate_dev.node.productimage [--registry HOST:PORT]``; without ``--registry`` it
starts a registry on the cache's registry storage for the run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from torchgate_dev.node import buildah, buildcontext, images, oci
from torchgate_dev.node.config import REGISTRY_ALIAS
from torchgate_dev.node.registry import RegistryClient

PRODUCT_FORMAT: Final = 1
"""Bump when the way the product image is built changes (flags, base): every tag changes."""

PYTHON_REFERENCE: Final = f"{REGISTRY_ALIAS}/python:3.11-slim-bookworm"
PRODUCT_REPOSITORY: Final = "torchgate"
PRODUCT_NAME: Final = f"{REGISTRY_ALIAS}/{PRODUCT_REPOSITORY}"
DEV_TAG: Final = "dev"
REPO_ROOT: Final = Path(__file__).resolve().parents[3]
"""The checkout around an editable install: the Dockerfile and its build context."""
HOST_CA_BUNDLE: Final = Path("/etc/ssl/certs/ca-certificates.crt")

PYTHON_TOOLS: Final = ("pip==24.0", "setuptools==65.5.1", "wheel==0.45.1")
PIP_LAYER: Final = images.LayerSpec("python-pip", images.Wheels(PYTHON_TOOLS))
_PYTHON_WRAPPER: Final = b'#!/bin/sh\nexec /usr/bin/python3 "$@"\n'
_PIP_CONF: Final = b"[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"
_STEP_LINE: Final = re.compile(r"^(\[\d+/\d+\] )?(STEP \d+/\d+: |COMMIT)")
_LOCAL_NAME: Final = "localhost/torchgate-build"


class ProductImageError(images.ImageBuildError):
    """The build or the registry failed; the message says which and shows the tool's output."""


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
            if len(parts) != 3 or parts[0] != images.SITE_PACKAGES:
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


# --------------------------------------------------------------------------- build inputs


def inputs_key(
    *,
    dockerfile: bytes,
    dockerignore: bytes,
    files: Mapping[str, str],
    base_digest: str,
    build_args: Mapping[str, str],
    builder: str,
) -> str:
    """A short digest of everything the build reads: the product image's tag.

    Args:
        dockerfile: the Dockerfile's bytes.
        dockerignore: the ``.dockerignore``'s bytes.
        files: the build context (:func:`torchgate_dev.node.buildcontext.context_digests`).
        base_digest: the manifest digest of the base image the build argument names.
        build_args: the ``--build-arg`` values.
        builder: the builder's version line.
    """
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
                visible = {p for p in visible if not p.startswith(prefix)}
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
    tags: Sequence[str] = (DEV_TAG,),
) -> ProductImage:
    """Build the Dockerfile at ``context`` with buildah unless the registry has its input tag.

    Args:
        registry: ``HOST:PORT`` of the plain-HTTP loopback registry.
        cache: the node cache folder (see :func:`torchgate_dev.node.images.node_cache`).
        report: receives one progress line at a time.
        context: the build context, with ``Dockerfile`` and ``.dockerignore`` at its root.
        tags: more tags of ``registry.torchgate.local/torchgate`` to point at the image
            (the install tests use the README's ``0.1.0`` and ``0.1.1``).

    Returns:
        ``registry.torchgate.local/torchgate:<inputs key>`` (also tagged ``dev``), its manifest
        digest and size.

    Raises:
        ProductImageError: the registry does not answer, or buildah failed.
    """
    started = time.monotonic()
    try:
        tool = buildah.find_buildah()
    except buildah.BuildahError as error:
        raise ProductImageError(str(error)) from error
    client = RegistryClient(registry)
    if not client.ping():
        raise ProductImageError(f"no registry answers at http://{registry}/v2/")
    base = ensure_python_image(registry=registry, cache=cache, report=report)
    report(f"base {base.reference}: {base.digest[:19]}, {base.size / 1e6:.1f} MB")
    build_args = {"PYTHON_IMAGE": PYTHON_REFERENCE}
    builder = buildah.buildah_version(tool)
    file_count, tag = _context_tag(
        context, base_digest=base.digest, build_args=build_args, builder=builder
    )
    reference = f"{PRODUCT_NAME}:{tag}"
    digest = client.manifest_digest(PRODUCT_REPOSITORY, tag)
    built = digest is None
    if digest is not None:
        report(f"{reference}: in the registry ({digest[:19]}), build skipped")
    else:
        report(f"{reference}: building ({file_count} files in the context)")
        paths = buildah.BuildahPaths(cache / "buildah")
        try:
            _share_base_layers(client, registry=registry, base_digest=base.digest)
            _build_and_push(
                paths,
                context=context,
                registry=registry,
                tag=tag,
                build_args=build_args,
                report=report,
            )
        except buildah.BuildahError as error:
            raise ProductImageError(str(error)) from error
        digest = client.manifest_digest(PRODUCT_REPOSITORY, tag)
        if digest is None:
            raise ProductImageError(f"the registry has no {reference} after the push")
    manifest = fetch_manifest(registry, PRODUCT_REPOSITORY, digest)
    media_type = str(json.loads(manifest).get("mediaType") or oci.MANIFEST_MEDIA_TYPE)
    for extra in tags:
        if client.manifest_digest(PRODUCT_REPOSITORY, extra) != digest:
            client.put_manifest(PRODUCT_REPOSITORY, extra, manifest, media_type)
            report(f"{PRODUCT_NAME}:{extra} -> {digest[:19]}")
    seconds = time.monotonic() - started
    size = manifest_size(manifest)
    report(f"{reference}: {digest[:19]}, {size / 1e6:.1f} MB, {seconds:.1f}s")
    return ProductImage(reference, digest, size, seconds, built)


def _context_tag(
    context: Path, *, base_digest: str, build_args: Mapping[str, str], builder: str
) -> tuple[int, str]:
    """How many files the build context has, and the build's :func:`inputs_key`."""
    dockerignore = (context / ".dockerignore").read_bytes()
    rules = buildcontext.parse_dockerignore(dockerignore.decode())
    files = buildcontext.context_digests(context, rules)
    key = inputs_key(
        dockerfile=(context / "Dockerfile").read_bytes(),
        dockerignore=dockerignore,
        files=files,
        base_digest=base_digest,
        build_args=build_args,
        builder=builder,
    )
    return len(files), key


def _share_base_layers(client: RegistryClient, *, registry: str, base_digest: str) -> None:
    """Link the base image's layers into the product's repository before buildah pushes.

    buildah reuses a layer the destination repository has, as it is (uncompressed, the digest
    the seed images share); one it does not know there it compresses and uploads again, a copy
    under another digest. Whether it knows depends on its blob-info cache, whose entries name
    the registry's port, new every run: mounting them first makes the result the same always.
    """
    source = oci.parse_reference(PYTHON_REFERENCE).repository
    manifest = json.loads(fetch_manifest(registry, source, base_digest))
    for layer in manifest["layers"]:
        digest = str(layer["digest"])
        if not client.has_blob(PRODUCT_REPOSITORY, digest):
            client.mount_blob(PRODUCT_REPOSITORY, digest, source)


def _build_and_push(
    paths: buildah.BuildahPaths,
    *,
    context: Path,
    registry: str,
    tag: str,
    build_args: Mapping[str, str],
    report: Callable[[str], None],
) -> None:
    """``buildah bud``, push under ``tag``, then drop the local copy (the registry keeps it)."""
    local = f"{_LOCAL_NAME}:{tag}"
    with buildah.session(paths, alias=REGISTRY_ALIAS, registry=registry) as current:
        paths.log.write_text("", encoding="utf-8")
        started = time.monotonic()
        argv = buildah.bud_argv(
            current.buildah,
            paths,
            context=context,
            tag=local,
            build_args=build_args,
            policy=current.policy,
        )
        buildah.stream(current, argv, what="buildah bud", report=report, show=_is_step, cwd=context)
        report(f"buildah bud: done in {time.monotonic() - started:.1f}s (log {paths.log})")
        started = time.monotonic()
        destination = f"{registry}/{PRODUCT_REPOSITORY}:{tag}"
        argv = buildah.push_argv(
            current.buildah, paths, image=local, destination=destination, policy=current.policy
        )
        buildah.stream(current, argv, what="buildah push", report=report, show=lambda _: False)
        report(f"buildah push: done in {time.monotonic() - started:.1f}s")
        # Storage keeps the base image for the next build; older bases (no name left) go.
        current.run([*current.global_args, "rmi", local])
        current.run([*current.global_args, "rmi", "--prune"])
    leftover = buildah.mounts_below(paths.base)
    if leftover:
        report(f"warning: still mounted below {paths.base}: {', '.join(leftover)}")


def _is_step(line: str) -> bool:
    return _STEP_LINE.match(line) is not None


def run_in_image(reference: str, argv: Sequence[str], *, registry: str, cache: Path) -> str:
    """Run a command in a throwaway container of a pushed image; its output.

    The image's user, working directory and environment apply; there is no network (see
    :func:`torchgate_dev.node.buildah.run_in_image`).
    """
    paths = buildah.BuildahPaths(cache / "buildah")
    with buildah.session(paths, alias=REGISTRY_ALIAS, registry=registry) as current:
        return buildah.run_in_image(current, reference, argv)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """Build and push the product image (and its base); print the reference and digest."""
    parser = argparse.ArgumentParser(
        prog="python -m torchgate_dev.node.productimage", description=__doc__
    )
    parser.add_argument("--registry", help="HOST:PORT of a running registry (default: start one)")
    parser.add_argument("--cache", type=Path, default=None, help="node cache folder")
    args = parser.parse_args(argv)
    cache: Path = args.cache or images.node_cache()
    started = time.monotonic()

    def report(line: str) -> None:
        print(f"[product {time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    try:
        with images.registry_or_throwaway(args.registry, cache, report) as registry:
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

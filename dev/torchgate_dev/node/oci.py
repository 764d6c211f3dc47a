"""OCI images as bytes: references, digests, layer tars, manifests, and a learnable data set.

Why this exists: the local cluster's real kubelet node pulls the seed manifests' images from a
loopback registry we fill ourselves. The build machines have no Docker engine and reach no
container registry, so images are assembled by hand: a layer is a plain tar, the config and the
manifest are small JSON documents naming the layers by digest. Everything that decides *what* an
image contains, and so its digest, lives here without I/O, so the same inputs always give the same
digest and the rules are table-tested; ``images.py`` is the shell that reads files and runs tools.

Choices that matter:

- Layers are **uncompressed** (``application/vnd.oci.image.layer.v1.tar``): gzip would cost
  minutes of CPU on multi-GiB torch layers for a registry on loopback, and it makes the layer
  digest equal to its diff_id.
- A layer tar is deterministic: entries sorted by path components, owners as numbers (no names),
  modification times clamped to a per-layer epoch, hard links written as links to the first path.
  Times are *clamped*, not all set to one value: Debian's precompiled ``.pyc`` files record their
  source's mtime, and a base layer that moved every mtime would make Python ignore them and
  recompile the standard library in every container.
- References follow Docker's normalisation (``pytorch-demo`` is
  ``docker.io/library/pytorch-demo:latest``) because that is what the kubelet and containerd do
  with the image names written in pod specs.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import random
import re
import struct
import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Final, Literal

MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE: Final = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE: Final = "application/vnd.oci.image.layer.v1.tar"

DEFAULT_REGISTRY: Final = "docker.io"
DEFAULT_TAG: Final = "latest"
DEFAULT_PATH: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# --------------------------------------------------------------------------- references

# distribution/reference's grammar (reference/regexp.go), restricted to what we accept.
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_NAME_MAX = 255
_LEGACY_DEFAULT_DOMAIN = "index.docker.io"


class InvalidReference(ValueError):
    """An image reference that Docker would refuse too; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class ImageReference:
    """A normalised image reference: registry host, repository path, tag."""

    registry: str
    repository: str
    tag: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}:{self.tag}"


def parse_reference(text: str) -> ImageReference:
    """Normalise an image name the way Docker and containerd do.

    ``pytorch-demo`` becomes ``docker.io/library/pytorch-demo:latest``; the first path component
    is a registry host only when it contains ``.`` or ``:`` or is ``localhost`` (and has no upper
    case letter). Digest references (``name@sha256:...``) are refused: the images built here are
    always addressed by tag.

    Raises:
        InvalidReference: the text is not a valid reference.
    """
    if not text or text != text.strip() or any(c.isspace() for c in text):
        raise InvalidReference(f"invalid reference format: {text!r}")
    if "@" in text:
        raise InvalidReference(f"digest references are not supported here: {text!r}")
    name, tag = text, DEFAULT_TAG
    colon = text.rfind(":")
    if colon > text.rfind("/"):
        name, tag = text[:colon], text[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise InvalidReference(f"invalid tag {tag!r} in {text!r}")
    slash = name.find("/")
    first = name[:slash]
    if slash == -1 or (
        not any(c in first for c in ".:") and first != "localhost" and first.lower() == first
    ):
        registry, repository = DEFAULT_REGISTRY, name
    else:
        registry, repository = first, name[slash + 1 :]
    if registry == _LEGACY_DEFAULT_DOMAIN:
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = f"library/{repository}"
    if not _DOMAIN.fullmatch(registry):
        raise InvalidReference(f"invalid registry host {registry!r} in {text!r}")
    if repository.lower() != repository:
        raise InvalidReference(f"repository name must be lowercase: {text!r}")
    if not all(_PATH_COMPONENT.fullmatch(part) for part in repository.split("/")):
        raise InvalidReference(f"invalid repository name {repository!r} in {text!r}")
    if len(registry) + 1 + len(repository) > _NAME_MAX:
        raise InvalidReference(f"repository name must not be more than {_NAME_MAX} characters")
    return ImageReference(registry, repository, tag)


# --------------------------------------------------------------------------- digests, JSON

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def sha256_digest(data: bytes) -> str:
    """The OCI digest (``sha256:<hex>``) of some bytes."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def is_digest(value: str) -> bool:
    """Whether ``value`` is a well-formed sha256 digest."""
    return _DIGEST.fullmatch(value) is not None


def canonical_json(value: object) -> bytes:
    """JSON with sorted keys and no spaces, so equal documents have equal digests."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI content descriptor: what a manifest says about one blob."""

    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict[str, object]:
        """The descriptor as it appears in a manifest."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def describe(data: bytes, media_type: str) -> Descriptor:
    """The descriptor of an in-memory blob."""
    return Descriptor(media_type, sha256_digest(data), len(data))


# --------------------------------------------------------------------------- config, manifest


@dataclass(frozen=True, slots=True)
class RunConfig:
    """The process part of an image config (``config`` in the OCI image config)."""

    env: tuple[str, ...] = (DEFAULT_PATH,)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    working_dir: str = ""


@dataclass(frozen=True, slots=True)
class AssembledImage:
    """An image's config and manifest, ready to push next to its layer blobs."""

    config: bytes
    config_descriptor: Descriptor
    manifest: bytes
    layers: tuple[Descriptor, ...]

    @property
    def digest(self) -> str:
        """The manifest digest: what ``crictl images --digests`` and pulls by digest show."""
        return sha256_digest(self.manifest)

    @property
    def size(self) -> int:
        """Bytes of all blobs (config and layers); uncompressed layers, so also on disk."""
        return self.config_descriptor.size + sum(layer.size for layer in self.layers)


def image_config(run: RunConfig, diff_ids: Sequence[str]) -> bytes:
    """The OCI image config JSON for linux/amd64 with the given layers' diff_ids."""
    process: dict[str, object] = {"Env": list(run.env)}
    if run.entrypoint:
        process["Entrypoint"] = list(run.entrypoint)
    if run.cmd:
        process["Cmd"] = list(run.cmd)
    if run.working_dir:
        process["WorkingDir"] = run.working_dir
    return canonical_json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": process,
            "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        }
    )


def image_manifest(config: Descriptor, layers: Sequence[Descriptor]) -> bytes:
    """The OCI image manifest naming a config and layers by digest."""
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": config.to_json(),
            "layers": [layer.to_json() for layer in layers],
        }
    )


def assemble(run: RunConfig, layers: Sequence[Descriptor]) -> AssembledImage:
    """Config and manifest for uncompressed layers (their digests are their diff_ids)."""
    for layer in layers:
        if layer.media_type != LAYER_MEDIA_TYPE or not is_digest(layer.digest):
            raise ValueError(f"not an uncompressed layer descriptor: {layer}")
    config = image_config(run, [layer.digest for layer in layers])
    config_descriptor = describe(config, CONFIG_MEDIA_TYPE)
    return AssembledImage(
        config, config_descriptor, image_manifest(config_descriptor, layers), tuple(layers)
    )


# --------------------------------------------------------------------------- layer tars

EntryKind = Literal["file", "directory", "symlink"]


@dataclass(frozen=True, slots=True)
class LayerEntry:
    """One path of a layer; ``open`` yields a regular file's bytes (read when written)."""

    path: str
    kind: EntryKind
    mode: int
    uid: int = 0
    gid: int = 0
    mtime: int = 0
    size: int = 0
    linkname: str = ""
    inode: tuple[int, int] | None = None
    """(device, inode) of a regular file with several names; later names become hard links."""
    open: Callable[[], BinaryIO] | None = field(default=None, compare=False, repr=False)


class HashingWriter:
    """A write-only stream that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._hash = hashlib.sha256()
        self.size = 0

    @property
    def digest(self) -> str:
        """Digest of everything written so far."""
        return f"sha256:{self._hash.hexdigest()}"

    def write(self, data: bytes, /) -> int:
        """Hash, count and forward ``data``."""
        self._hash.update(data)
        self.size += len(data)
        self._sink.write(data)
        return len(data)

    def tell(self) -> int:
        """Bytes written so far."""
        return self.size

    def read(self, size: int, /) -> bytes:
        """Not readable."""
        raise OSError("HashingWriter is write-only")

    def seek(self, pos: int, /) -> int:
        """Not seekable."""
        raise OSError("HashingWriter is not seekable")

    def close(self) -> None:
        """Leave the sink open: its owner closes it."""


def _check_path(path: str) -> None:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"layer paths are relative and normalised, not {path!r}")


def tar_info(entry: LayerEntry, *, mtime_clamp: int) -> tarfile.TarInfo:
    """The tar header of an entry: numeric owners only, mtime clamped to ``mtime_clamp``."""
    _check_path(entry.path)
    info = tarfile.TarInfo(entry.path)
    info.mode = entry.mode & 0o7777
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mtime = min(entry.mtime, mtime_clamp)
    if entry.kind == "directory":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, entry.linkname
    else:
        info.type, info.size = tarfile.REGTYPE, entry.size
    return info


def write_layer(entries: Iterable[LayerEntry], sink: BinaryIO, *, mtime_clamp: int) -> Descriptor:
    """Write a deterministic layer tar to ``sink`` and return its descriptor.

    Entries are sorted by path components (a directory before what it holds), whatever order
    they come in. Raises ValueError on duplicate or non-normalised paths.
    """
    ordered = sorted(entries, key=lambda entry: entry.path.split("/"))
    for before, after in itertools.pairwise(ordered):
        if before.path == after.path:
            raise ValueError(f"duplicate layer path {before.path!r}")
    writer = HashingWriter(sink)
    first_names: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT, bufsize=1 << 20) as tar:
        for entry in ordered:
            info = tar_info(entry, mtime_clamp=mtime_clamp)
            if entry.kind == "file" and entry.inode is not None:
                if entry.inode in first_names:
                    info.type, info.size = tarfile.LNKTYPE, 0
                    info.linkname = first_names[entry.inode]
                    tar.addfile(info)
                    continue
                first_names[entry.inode] = entry.path
            if entry.kind == "file":
                if entry.open is None:
                    raise ValueError(f"regular file {entry.path!r} has no contents")
                with entry.open() as contents:
                    tar.addfile(info, contents)
            else:
                tar.addfile(info)
    return Descriptor(LAYER_MEDIA_TYPE, writer.digest, writer.size)


def file_entries(files: Mapping[str, tuple[bytes, int]], *, mtime: int) -> list[LayerEntry]:
    """Entries for in-memory files (path -> (contents, mode)) and their parent directories."""
    entries: dict[str, LayerEntry] = {}
    for path, (contents, mode) in files.items():
        _check_path(path)
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            entries.setdefault(parent, LayerEntry(parent, "directory", 0o755, mtime=mtime))
        entries[path] = LayerEntry(
            path,
            "file",
            mode,
            mtime=mtime,
            size=len(contents),
            open=_bytes_opener(contents),
        )
    return list(entries.values())


def _bytes_opener(contents: bytes) -> Callable[[], BinaryIO]:
    return lambda: io.BytesIO(contents)


# What a container runtime mounts over (its contents in an image are never seen), and caches.
_EMPTIED_DIRS: Final = ("dev", "proc", "sys")
_RUNTIME_FILES: Final = ("etc/hostname", "etc/hosts", "etc/resolv.conf")
_CACHE_DIRS: Final = ("var/cache/apt", "var/lib/apt/lists")


def keep_in_base_layer(path: str, *, is_dir: bool) -> bool:
    """Whether a path of a debootstrap root file system belongs in the base layer.

    Dropped: what ``/dev``, ``/proc`` and ``/sys`` hold (the runtime mounts them; the
    directories themselves stay), the files the runtime bind-mounts (``/etc/hosts``,
    ``/etc/hostname``, ``/etc/resolv.conf``, which debootstrap copies from the build host), and
    the files of apt's download cache and package lists (their directories stay, so apt works).
    """
    if path in _RUNTIME_FILES:
        return False
    for top in _EMPTIED_DIRS:
        if path.startswith(f"{top}/"):
            return False
    return is_dir or not any(path.startswith(f"{cache}/") for cache in _CACHE_DIRS)


def keep_in_base_layer_entry(path: str, is_dir: bool) -> bool:
    """:func:`keep_in_base_layer` with a positional ``is_dir``, as a tree walk's filter."""
    return keep_in_base_layer(path, is_dir=is_dir)


# --------------------------------------------------------------------------- IDX data sets

IDX_IMAGES_MAGIC: Final = 2051
IDX_LABELS_MAGIC: Final = 2049
MNIST_FILES: Final = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
"""The raw files torchvision's ``MNIST`` and ``FashionMNIST`` check for (``raw/<name>``,
uncompressed): the two data sets share their file format and names."""


def idx_images(images: Sequence[bytes], *, rows: int, cols: int) -> bytes:
    """An IDX3 file: big-endian magic 2051, count, rows, cols, then uint8 pixels row by row."""
    for index, image in enumerate(images):
        if len(image) != rows * cols:
            raise ValueError(f"image {index} has {len(image)} bytes, not {rows}x{cols}")
    return struct.pack(">IIII", IDX_IMAGES_MAGIC, len(images), rows, cols) + b"".join(images)


def idx_labels(labels: bytes) -> bytes:
    """An IDX1 file: big-endian magic 2049, count, then one uint8 label per item."""
    return struct.pack(">II", IDX_LABELS_MAGIC, len(labels)) + labels


_SIDE: Final = 28


def _in_shape(label: int, x: int, y: int) -> bool:
    """Whether pixel (x, y) is lit in class ``label``'s pattern.

    The patterns are large blocks that differ in where their mass is (halves, centre, frame,
    quadrant pairs, bands): a convolutional net trained with the seed's plain SGD (lr 0.01) for
    one epoch of a few dozen steps learns them, which thin strokes would not allow.
    """
    inner = 3 <= x <= 24 and 3 <= y <= 24
    centre = 8 <= x <= 19 and 8 <= y <= 19
    match label:
        case 0:  # top half
            return inner and y <= 12
        case 1:  # bottom half
            return inner and y >= 15
        case 2:  # left half
            return inner and x <= 12
        case 3:  # right half
            return inner and x >= 15
        case 4:  # centre square
            return centre
        case 5:  # frame around the centre
            return inner and not centre
        case 6:  # top-left and bottom-right quadrants
            return inner and (x <= 13) == (y <= 13)
        case 7:  # top-right and bottom-left quadrants
            return inner and (x <= 13) != (y <= 13)
        case 8:  # horizontal band
            return inner and 10 <= y <= 17
        case _:  # vertical band
            return inner and 10 <= x <= 17


def _template(label: int) -> list[float]:
    """Class ``label``'s noiseless 28x28 pattern, intensities in [0, 1]."""
    return [float(_in_shape(label, x, y)) for y in range(_SIDE) for x in range(_SIDE)]


@dataclass(frozen=True, slots=True)
class Split:
    """A labelled set of 28x28 uint8 images."""

    images: tuple[bytes, ...]
    labels: bytes


def synthetic_split(count: int, *, seed: int) -> Split:
    """``count`` images, classes balanced and shuffled: a class pattern, shifted, plus noise.

    Each image is its class's template moved by up to one pixel, scaled to a random brightness
    and overlaid with uniform noise, so the classes are easy but not trivial to tell apart.
    """
    rng = random.Random(seed)
    templates = [_template(label) for label in range(10)]
    labels = [index % 10 for index in range(count)]
    rng.shuffle(labels)
    images = []
    for label in labels:
        template = templates[label]
        dx, dy = rng.randint(-1, 1), rng.randint(-1, 1)
        brightness = rng.uniform(200.0, 255.0)
        pixels = bytearray(_SIDE * _SIDE)
        for y in range(_SIDE):
            sy = y - dy
            for x in range(_SIDE):
                sx = x - dx
                inside = 0 <= sx < _SIDE and 0 <= sy < _SIDE
                value = brightness * template[sy * _SIDE + sx] if inside else 0.0
                value += rng.uniform(-30.0, 30.0)
                pixels[y * _SIDE + x] = max(0, min(255, int(value)))
        images.append(bytes(pixels))
    return Split(tuple(images), bytes(labels))


def synthetic_mnist(*, train: int = 3000, test: int = 500, seed: int = 1) -> dict[str, bytes]:
    """An MNIST-shaped data set: the four raw IDX files by name (see ``MNIST_FILES``).

    3,000 training images: with two ranks each trains on 1,500 (24 steps of 64), enough for the
    images' MNIST scripts to be well above chance after one epoch; CPU time stays a few seconds.
    """
    train_split = synthetic_split(train, seed=seed)
    test_split = synthetic_split(test, seed=seed + 1)
    return dict(
        zip(
            MNIST_FILES,
            (
                idx_images(train_split.images, rows=_SIDE, cols=_SIDE),
                idx_labels(train_split.labels),
                idx_images(test_split.images, rows=_SIDE, cols=_SIDE),
                idx_labels(test_split.labels),
            ),
            strict=True,
        )
    )

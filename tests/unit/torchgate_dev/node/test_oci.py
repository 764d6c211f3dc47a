"""OCI references, config/manifest digests, deterministic layer tars, IDX files, synthetic data."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile

import pytest

from torchgate_dev.node import oci

# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pytorch-demo", ("docker.io", "library/pytorch-demo", "latest")),
        ("pytorch-demo:v1", ("docker.io", "library/pytorch-demo", "v1")),
        ("library/pytorch-demo", ("docker.io", "library/pytorch-demo", "latest")),
        (
            "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            ("docker.io", "kubeflowkatib/pytorch-mnist", "v1beta1-45c5727"),
        ),
        (
            "kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            ("docker.io", "kubeflowkatib/pytorch-mnist", "v1beta1-45c5727"),
        ),
        ("index.docker.io/ubuntu", ("docker.io", "library/ubuntu", "latest")),
        ("registry.torchgate.local/pause:3.10", ("registry.torchgate.local", "pause", "3.10")),
        ("localhost/app", ("localhost", "app", "latest")),
        ("localhost:5000/team/app:1.0", ("localhost:5000", "team/app", "1.0")),
        ("127.0.0.1:5000/app", ("127.0.0.1:5000", "app", "latest")),
        ("Registry/app", ("Registry", "app", "latest")),
        ("a/b/c", ("docker.io", "a/b/c", "latest")),
        ("my_app.v2__x-y--z", ("docker.io", "library/my_app.v2__x-y--z", "latest")),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_references_are_normalised_like_docker(text: str, expected: tuple[str, str, str]) -> None:
    reference = oci.parse_reference(text)

    assert (reference.registry, reference.repository, reference.tag) == expected
    assert oci.parse_reference(str(reference)) == reference


@pytest.mark.parametrize(
    "text",
    [
        "",
        " pytorch-demo",
        "pytorch demo",
        "PyTorch-Demo",
        "docker.io/Library/app",
        "app:",
        "app:-tag",
        "app:" + "t" * 129,
        "app@sha256:" + "0" * 64,
        "app//x",
        "/app",
        "app/",
        "app-",
        "-app",
        "app..x",
        "bad_host.example/app",
        "docker.io/" + "a" * 250,
    ],
)
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(oci.InvalidReference):
        oci.parse_reference(text)


# ----------------------------------------------------------------------------- digests, documents


def _layer(data: bytes) -> oci.Descriptor:
    return oci.describe(data, oci.LAYER_MEDIA_TYPE)


@pytest.mark.parametrize(
    "run",
    [
        oci.RunConfig(),
        oci.RunConfig(cmd=("python3", "demo.py"), working_dir="/workspace"),
        oci.RunConfig(env=("PATH=/bin", "A=b"), entrypoint=("/pause",)),
    ],
    ids=["empty", "cmd-and-workdir", "entrypoint"],
)
def test_assembled_image_names_its_blobs_by_their_digests(run: oci.RunConfig) -> None:
    layers = [_layer(b"first layer"), _layer(b"second layer")]

    image = oci.assemble(run, layers)

    config, manifest = json.loads(image.config), json.loads(image.manifest)
    assert image.config_descriptor == oci.describe(image.config, oci.CONFIG_MEDIA_TYPE)
    assert image.digest == "sha256:" + hashlib.sha256(image.manifest).hexdigest()
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    assert manifest["config"] == image.config_descriptor.to_json()
    assert manifest["layers"] == [layer.to_json() for layer in layers]
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer.digest for layer in layers]}
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"]["Env"] == list(run.env)
    assert config["config"].get("Cmd", []) == list(run.cmd)
    assert config["config"].get("Entrypoint", []) == list(run.entrypoint)
    assert config["config"].get("WorkingDir", "") == run.working_dir
    assert image.size == image.config_descriptor.size + sum(layer.size for layer in layers)


def test_assembling_twice_gives_the_same_digest_and_another_config_another() -> None:
    layers = [_layer(b"x")]

    first = oci.assemble(oci.RunConfig(cmd=("a",)), layers)
    again = oci.assemble(oci.RunConfig(cmd=("a",)), layers)
    other = oci.assemble(oci.RunConfig(cmd=("b",)), layers)

    assert first.manifest == again.manifest
    assert first.digest != other.digest


def test_compressed_or_malformed_layers_are_refused() -> None:
    gzipped = oci.Descriptor(oci.LAYER_MEDIA_TYPE + "+gzip", "sha256:" + "0" * 64, 1)
    malformed = oci.Descriptor(oci.LAYER_MEDIA_TYPE, "sha256:xyz", 1)

    for layer in (gzipped, malformed):
        with pytest.raises(ValueError, match="uncompressed"):
            oci.assemble(oci.RunConfig(), [layer])


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("sha256:" + "a" * 64, True),
        ("sha256:" + "A" * 64, False),
        ("sha256:" + "a" * 63, False),
        ("sha512:" + "a" * 64, False),
    ],
)
def test_digest_shape(value: str, valid: bool) -> None:
    assert oci.is_digest(value) is valid


# ----------------------------------------------------------------------------- layer tars


def _entries() -> list[oci.LayerEntry]:
    blob = b"#!/bin/sh\necho hi\n"
    return [
        oci.LayerEntry("usr", "directory", 0o755, mtime=1),
        oci.LayerEntry("usr/bin", "directory", 0o755, mtime=1),
        oci.LayerEntry(
            "usr/bin/hi",
            "file",
            0o755,
            uid=0,
            gid=50,
            mtime=5_000_000_000,
            size=len(blob),
            inode=(1, 7),
            open=lambda: io.BytesIO(blob),
        ),
        oci.LayerEntry(
            "usr/bin/hello",
            "file",
            0o755,
            size=len(blob),
            inode=(1, 7),
            open=lambda: io.BytesIO(blob),
        ),
        oci.LayerEntry("usr/bin/sh", "symlink", 0o777, linkname="dash", mtime=3),
        oci.LayerEntry("usr-local", "directory", 0o700, uid=1000, gid=1000, mtime=2),
    ]


def _write(entries: list[oci.LayerEntry], clamp: int = 100) -> tuple[oci.Descriptor, bytes]:
    sink = io.BytesIO()
    descriptor = oci.write_layer(entries, sink, mtime_clamp=clamp)
    return descriptor, sink.getvalue()


def test_layer_tar_is_deterministic_whatever_the_entry_order() -> None:
    first, data = _write(_entries())
    again, _ = _write(_entries())
    reversed_, _ = _write(list(reversed(_entries())))

    assert first == again == reversed_
    assert first.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert first.size == len(data)
    assert first.media_type == oci.LAYER_MEDIA_TYPE


def test_layer_tar_content_is_sorted_clamped_with_numeric_owners_and_hard_links() -> None:
    _, data = _write(_entries(), clamp=100)

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        summary = [
            (m.name, m.type, m.mode, m.uid, m.gid, m.uname, m.mtime, m.linkname) for m in members
        ]
        hello = tar.extractfile("usr/bin/hello")
        assert hello is not None
        assert hello.read() == b"#!/bin/sh\necho hi\n"

    assert summary == [
        ("usr", tarfile.DIRTYPE, 0o755, 0, 0, "", 1, ""),
        ("usr/bin", tarfile.DIRTYPE, 0o755, 0, 0, "", 1, ""),
        ("usr/bin/hello", tarfile.REGTYPE, 0o755, 0, 0, "", 0, ""),
        ("usr/bin/hi", tarfile.LNKTYPE, 0o755, 0, 50, "", 100, "usr/bin/hello"),
        ("usr/bin/sh", tarfile.SYMTYPE, 0o777, 0, 0, "", 3, "dash"),
        ("usr-local", tarfile.DIRTYPE, 0o700, 1000, 1000, "", 2, ""),
    ]


def test_a_different_clamp_or_content_changes_the_digest() -> None:
    base, _ = _write(_entries(), clamp=100)
    clamped, _ = _write(_entries(), clamp=2)
    changed = [*_entries()[:-1], oci.LayerEntry("usr-local", "directory", 0o755, mtime=2)]

    assert base.digest != clamped.digest
    assert base.digest != _write(changed)[0].digest


@pytest.mark.parametrize("path", ["/usr", "usr/", "usr//bin", "./usr", "usr/../etc", ""])
def test_layer_paths_must_be_relative_and_normalised(path: str) -> None:
    with pytest.raises(ValueError, match="normalised"):
        _write([oci.LayerEntry(path, "directory", 0o755)])


def test_duplicate_layer_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        _write([oci.LayerEntry("a", "directory", 0o755), oci.LayerEntry("a", "directory", 0o700)])


def test_file_entries_add_parent_directories_once() -> None:
    entries = oci.file_entries(
        {"opt/app/main.py": (b"print(1)\n", 0o644), "opt/app/data/x": (b"\x00", 0o600)}, mtime=9
    )

    assert sorted((e.path, e.kind, e.mode) for e in entries) == [
        ("opt", "directory", 0o755),
        ("opt/app", "directory", 0o755),
        ("opt/app/data", "directory", 0o755),
        ("opt/app/data/x", "file", 0o600),
        ("opt/app/main.py", "file", 0o644),
    ]
    assert _write(entries)[0] == _write(list(reversed(entries)))[0]


@pytest.mark.parametrize(
    ("path", "is_dir", "kept"),
    [
        ("dev", True, True),
        ("dev/null", False, False),
        ("dev/pts", True, False),
        ("proc", True, True),
        ("proc/self", True, False),
        ("sys/kernel", True, False),
        ("etc/hosts", False, False),
        ("etc/hostname", False, False),
        ("etc/resolv.conf", False, False),
        ("etc/host.conf", False, True),
        ("var/cache/apt/archives", True, True),
        ("var/cache/apt/archives/python3_3.11.2-1+b1_amd64.deb", False, False),
        ("var/cache/apt/pkgcache.bin", False, False),
        ("var/lib/apt/lists/partial", True, True),
        ("var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease", False, False),
        ("usr/lib/python3.11/os.py", False, True),
        ("device/x", False, True),
    ],
)
def test_base_layer_drops_what_the_runtime_mounts_and_apt_caches(
    path: str, is_dir: bool, kept: bool
) -> None:
    assert oci.keep_in_base_layer(path, is_dir=is_dir) is kept


# ----------------------------------------------------------------------------- IDX, data set


def _read_idx(data: bytes) -> tuple[int, tuple[int, ...], bytes]:
    """An independent IDX reader: magic (type and rank), dimensions, payload."""
    (magic,) = struct.unpack_from(">I", data, 0)
    rank = magic & 0xFF
    assert magic >> 8 == 0x08  # unsigned byte
    dims = struct.unpack_from(f">{rank}I", data, 4)
    return magic, dims, data[4 + 4 * rank :]


def test_idx_files_round_trip() -> None:
    images = [bytes(range(6)), bytes(range(6, 12)), bytes(6)]

    magic, dims, payload = _read_idx(oci.idx_images(images, rows=2, cols=3))
    label_magic, label_dims, labels = _read_idx(oci.idx_labels(bytes([3, 1, 4])))

    assert (magic, dims, payload) == (2051, (3, 2, 3), b"".join(images))
    assert (label_magic, label_dims, labels) == (2049, (3,), bytes([3, 1, 4]))


def test_idx_images_of_the_wrong_size_are_refused() -> None:
    with pytest.raises(ValueError, match="image 1"):
        oci.idx_images([bytes(4), bytes(5)], rows=2, cols=2)


def test_synthetic_mnist_has_the_files_torchvision_reads() -> None:
    files = oci.synthetic_mnist(train=200, test=50, seed=3)

    assert tuple(files) == oci.MNIST_FILES
    shapes = {name: _read_idx(data)[1] for name, data in files.items()}
    assert shapes == {
        "train-images-idx3-ubyte": (200, 28, 28),
        "train-labels-idx1-ubyte": (200,),
        "t10k-images-idx3-ubyte": (50, 28, 28),
        "t10k-labels-idx1-ubyte": (50,),
    }
    train_labels = _read_idx(files["train-labels-idx1-ubyte"])[2]
    assert sorted(set(train_labels)) == list(range(10))
    assert all(train_labels.count(label) == 20 for label in range(10))
    assert files == oci.synthetic_mnist(train=200, test=50, seed=3)
    assert files != oci.synthetic_mnist(train=200, test=50, seed=4)


def test_synthetic_data_is_learnable_by_a_nearest_class_mean_classifier() -> None:
    train = oci.synthetic_split(1000, seed=1)
    test = oci.synthetic_split(300, seed=2)
    sums = [[0] * 784 for _ in range(10)]
    for image, label in zip(train.images, train.labels, strict=True):
        row = sums[label]
        for index, value in enumerate(image):
            row[index] += value
    means = [[value / train.labels.count(label) for value in row] for label, row in enumerate(sums)]

    def predict(image: bytes) -> int:
        distances = [sum((p - m) ** 2 for p, m in zip(image, mean, strict=True)) for mean in means]
        return distances.index(min(distances))

    correct = sum(
        predict(image) == label for image, label in zip(test.images, test.labels, strict=True)
    )

    assert correct / len(test.images) > 0.8

"""The loopback registry and the image pipeline, end to end with the (fast) pause image.

Starts Debian's ``docker-registry`` on 127.0.0.1, builds the pause image from its Go sources,
pushes it, and reads everything back over the Registry HTTP API v2 the way containerd does: the
manifest by tag, then every blob by digest. A second run with the same cache, and a run with an
empty cache (the build is reproducible), push nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchgate_dev.node import images, oci
from torchgate_dev.node.registry import REGISTRY_BINARY, Registry

pytestmark = pytest.mark.e2e

PAUSE = "registry.torchgate.local/pause:3.10"


def _missing(what: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is missing", pytrace=False)
    pytest.skip(f"{what} is missing")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    if not REGISTRY_BINARY.exists():
        _missing(f"{REGISTRY_BINARY} (apt-get install docker-registry)")
    if shutil.which("go") is None:
        _missing("the Go toolchain")
    with Registry(tmp_path / "storage", tmp_path / "registry") as started:
        yield started


def _get(url: str, accept: str | None = None) -> tuple[bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return response.read(), {k.lower(): v for k, v in response.headers.items()}


def _ensure(registry: Registry, cache: Path) -> tuple[dict[str, str], list[images.ImageOutcome]]:
    outcomes: list[images.ImageOutcome] = []
    digests = images.ensure_images(
        [images.pause_image()],
        registry=registry.host,
        cache=cache,
        report=lambda line: None,
        on_outcome=outcomes.append,
    )
    return digests, outcomes


def test_pause_image_is_served_by_tag_and_digest_and_never_pushed_twice(
    registry: Registry, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"

    digests, (first,) = _ensure(registry, cache)

    assert list(digests) == [PAUSE]
    assert first.manifest_pushed
    assert len(first.uploaded) == 2  # config and the one layer
    base = f"http://{registry.host}/v2/pause"
    manifest_bytes, headers = _get(f"{base}/manifests/3.10", oci.MANIFEST_MEDIA_TYPE)
    assert headers["docker-content-digest"] == digests[PAUSE]
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == digests[PAUSE]
    manifest = json.loads(manifest_bytes)
    assert manifest["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    blobs: dict[str, bytes] = {}
    for descriptor in [manifest["config"], *manifest["layers"]]:
        blob, _ = _get(f"{base}/blobs/{descriptor['digest']}")
        assert "sha256:" + hashlib.sha256(blob).hexdigest() == descriptor["digest"]
        assert len(blob) == descriptor["size"]
        blobs[descriptor["digest"]] = blob
    config = json.loads(blobs[manifest["config"]["digest"]])
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["rootfs"]["diff_ids"] == [layer["digest"] for layer in manifest["layers"]]
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == oci.LAYER_MEDIA_TYPE
    with tarfile.open(fileobj=io.BytesIO(blobs[layer["digest"]])) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.mode, member.uid, member.gid) == ("pause", 0o755, 0, 0)
        executable = tar.extractfile(member)
        assert executable is not None
        assert executable.read(4) == b"\x7fELF"

    again, (second,) = _ensure(registry, cache)
    rebuilt, (third,) = _ensure(registry, tmp_path / "empty-cache")

    assert again == rebuilt == digests
    assert (second.manifest_pushed, second.uploaded, second.mounted) == (False, (), ())
    assert (third.manifest_pushed, third.uploaded, third.mounted) == (False, (), ())


def test_pause_exits_zero_on_sigterm(registry: Registry, tmp_path: Path) -> None:
    del registry  # only for its skip conditions: the Go toolchain is needed
    cache = tmp_path / "cache"
    layer = images.ensure_layer(images.pause_image().layers[0], cache=cache, report=print)
    with tarfile.open(layer.path) as tar:
        tar.extractall(tmp_path / "root", filter="tar")
    process = subprocess.Popen(
        [str(tmp_path / "root" / "pause")], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    time.sleep(0.3)
    assert process.poll() is None

    process.send_signal(signal.SIGTERM)

    assert process.wait(timeout=5) == 0
    assert process.stderr is not None
    assert b"got signal terminated" in process.stderr.read()
    process.stderr.close()

"""torchgate's image, built from the unchanged Dockerfile with buildah, read back like containerd.

Builds the image (or finds it: the tag is a digest of the build's inputs) in the node cache and
pushes it to a registry on the node cache's registry storage, so only the first run on a machine
builds: about 10 s, plus the Debian base layer's debootstrap (about 35 s) on a fresh cache. Then
reads the manifest by tag and the config and layers by digest over the Registry HTTP API v2, and
runs ``torchgate`` in a container of the pulled image. The image is the product alone: no module,
data file or Go file of the dev tooling (torchgate-dev) is in it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchgate.kube import manifestfiles
from torchgate_dev.node import images, oci, productimage
from torchgate_dev.node.registry import REGISTRY_BINARY, Registry

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

SITE = "usr/local/lib/python3.11/dist-packages"
LAYER_TYPES = (oci.LAYER_MEDIA_TYPE, f"{oci.LAYER_MEDIA_TYPE}+gzip")  # containerd 1.6 pulls both


def _host_state() -> dict[str, bool]:
    """What buildah makes outside our folders unless told otherwise (torchgate_dev.node.buildah)."""
    return {
        "/var/lib/containers/storage": Path("/var/lib/containers/storage").exists(),
        "/etc/cni/net.d/cni.lock": Path("/etc/cni/net.d/cni.lock").exists(),
        "bridge cni-podman0": Path("/sys/class/net/cni-podman0").exists(),
    }


def _missing(what: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is missing", pytrace=False)
    pytest.skip(f"{what} is missing")


@pytest.fixture(scope="module")
def host_before() -> dict[str, bool]:
    return _host_state()


@pytest.fixture(scope="module")
def registry(
    tmp_path_factory: pytest.TempPathFactory, host_before: dict[str, bool]
) -> Iterator[Registry]:
    del host_before  # taken before anything is built
    if os.geteuid() != 0:
        pytest.skip("buildah runs rootful here, and debootstrap needs root")
    if not REGISTRY_BINARY.exists():
        _missing(f"{REGISTRY_BINARY} (apt-get install docker-registry)")
    for tool in ("buildah", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            _missing(f"{tool} (apt-get install {tool})")
    storage = images.node_cache() / "registry"
    with Registry(storage, tmp_path_factory.mktemp("registry")) as started:
        yield started


@pytest.fixture(scope="module")
def product(registry: Registry) -> productimage.ProductImage:
    return productimage.build_product_image(
        registry=registry.host, cache=images.node_cache(), report=print
    )


def _get(url: str, accept: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=60) as response:
        body: bytes = response.read()
    return body


def _manifest(registry: Registry, repository: str, reference: str) -> dict[str, Any]:
    raw = productimage.fetch_manifest(registry.host, repository, reference)
    document: dict[str, Any] = json.loads(raw)
    return document


def _layer_names(registry: Registry, repository: str, digest: str) -> list[str]:
    """Member names of a layer, streamed (gzip or not) without keeping the blob."""
    url = f"http://{registry.host}/v2/{repository}/blobs/{digest}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with (
        opener.open(url, timeout=600) as response,
        tarfile.open(fileobj=response, mode="r|*") as tar,
    ):
        return [member.name for member in tar]


def _is_build_tool(path: str) -> bool:
    """Whether ``path`` belongs to pip, setuptools or wheel (scripts, packages, metadata)."""
    folder, _, name = path.rpartition("/")
    if folder == "usr/local/bin":
        return name.startswith("pip") or name == "wheel"
    tools = ("pip", "setuptools", "wheel", "pkg_resources", "_distutils_hack")
    return folder == SITE and (
        name in tools or name.startswith(tuple(f"{tool}-" for tool in tools))
    )


def test_config_runs_torchgate_as_the_unprivileged_user(
    product: productimage.ProductImage, registry: Registry
) -> None:
    tag = product.reference.rsplit(":", 1)[1]
    manifest = _manifest(registry, "torchgate", tag)
    config = json.loads(
        _get(f"http://{registry.host}/v2/torchgate/blobs/{manifest['config']['digest']}")
    )

    process = config["config"]
    assert manifest["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    assert {layer["mediaType"] for layer in manifest["layers"]} <= set(LAYER_TYPES)
    assert process["User"] == "65532:65532"
    assert process["Entrypoint"] == ["torchgate"]
    assert process["Cmd"] == ["--help"]
    assert process["WorkingDir"] == "/tmp"
    assert {"PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "TMPDIR=/tmp"} <= set(process["Env"])
    assert set(process["ExposedPorts"]) == {"8443/tcp", "8080/tcp"}
    assert process["Labels"]["org.opencontainers.image.title"] == "torchgate"
    assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"])
    assert (config["os"], config["architecture"]) == ("linux", "amd64")


def test_layers_hold_torchgate_over_the_shared_base_and_no_pip(
    product: productimage.ProductImage, registry: Registry
) -> None:
    tag = product.reference.rsplit(":", 1)[1]
    manifest = _manifest(registry, "torchgate", tag)
    base = _manifest(registry, "python", "3.11-slim-bookworm")
    digests = [layer["digest"] for layer in manifest["layers"]]

    layers = [_layer_names(registry, "torchgate", digest) for digest in digests]
    merged = productimage.merged_paths(layers)

    assert digests[: len(base["layers"])] == [layer["digest"] for layer in base["layers"]]
    assert len(digests) == len(base["layers"]) + 1  # one RUN layer on top of the base
    top = {name.removeprefix("./").rstrip("/") for name in layers[-1]}
    assert "usr/local/bin/torchgate" in top
    assert {
        "usr/local/bin/torchgate",
        f"{SITE}/torchgate/cli.py",
        f"{SITE}/torchgate/webhook",
    } <= merged
    # Nothing generic at the top of site-packages: the product's packages live under torchgate/.
    for name in ("webhook", "controller", "certs", "pytorchjob"):
        assert f"{SITE}/{name}" not in merged
    assert sorted(filter(_is_build_tool, merged)) == []
    assert f"{SITE}/pip" in productimage.merged_paths(layers[:-1])  # the base had it
    assert not any(path == "wheels" or path.startswith(("wheels/", "src/")) for path in merged)


def test_the_image_carries_the_core_and_no_dev_tooling(
    product: productimage.ProductImage, registry: Registry
) -> None:
    tag = product.reference.rsplit(":", 1)[1]
    digests = [layer["digest"] for layer in _manifest(registry, "torchgate", tag)["layers"]]
    merged = productimage.merged_paths(
        _layer_names(registry, "torchgate", digest) for digest in digests
    )
    installed = sorted(path for path in merged if path.startswith(f"{SITE}/torchgate"))
    dev_tooling = (
        *(f"{SITE}/torchgate/{name}" for name in ("dev", "controlplane", "node", "data")),
        *(f"{SITE}/torchgate/{name}.py" for name in ("devcluster", "resources")),
        f"{SITE}/torchgate_dev",
    )

    assert f"{SITE}/torchgate/webhook/server.py" in installed
    assert f"{SITE}/torchgate/controller/command.py" in installed
    assert [path for path in installed if path.startswith(dev_tooling)] == []
    assert [path for path in merged if path.endswith((".go", "/go.mod", "/go.sum"))] == []
    # Its one data file is the PyTorchJob CRD ``torchgate check`` validates against.
    data = [path for path in installed if path.endswith((".sh", ".yaml", ".env"))]
    assert data == [f"{SITE}/torchgate/pytorchjob/data/{manifestfiles.CRD_FILE}"]
    # The command itself knows the dev tooling lives elsewhere, and says so in one line.
    answer = productimage.run_in_image(
        product.reference,
        ["sh", "-c", "torchgate dev up; echo exit $?"],
        registry=registry.host,
        cache=images.node_cache(),
    )
    lines = answer.strip().splitlines()  # the command's stdout, then its stderr
    assert [line for line in lines if line.startswith("exit ")] == ["exit 2"]
    (message,) = [line for line in lines if not line.startswith("exit ")]
    assert "torchgate-dev" in message


def test_a_second_build_is_skipped_and_dev_names_the_same_image(
    product: productimage.ProductImage, registry: Registry
) -> None:
    again = productimage.build_product_image(
        registry=registry.host, cache=images.node_cache(), report=print
    )

    assert again.built is False
    assert (again.reference, again.digest, again.size_bytes) == (
        product.reference,
        product.digest,
        product.size_bytes,
    )
    assert again.seconds < 30
    dev = productimage.fetch_manifest(registry.host, "torchgate", "dev")
    assert oci.sha256_digest(dev) == product.digest


def test_torchgate_runs_in_the_image_as_65532(
    product: productimage.ProductImage, registry: Registry
) -> None:
    def run(*argv: str) -> str:
        return productimage.run_in_image(
            product.reference, argv, registry=registry.host, cache=images.node_cache()
        )

    assert run("torchgate", "--help").startswith("usage: torchgate [-h]")
    installed = importlib.metadata.version("torchgate")
    assert run("torchgate", "--version") == f"torchgate {installed}\n"
    assert run("id", "-u").strip() == "65532"
    assert run("sh", "-c", "command -v pip pip3 wheel || echo none").strip() == "none"


def test_the_base_image_offers_pip_python_and_allows_installing_as_root(
    product: productimage.ProductImage, registry: Registry
) -> None:
    del product  # built first, so the base image is in the registry
    script = (
        "import os, sysconfig; "
        "print(os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"
    )

    def run(*argv: str) -> str:
        return productimage.run_in_image(
            productimage.PYTHON_REFERENCE, argv, registry=registry.host, cache=images.node_cache()
        )

    assert run("pip", "--version").startswith(f"pip 24.0 from /{SITE}/pip (python 3.11)")
    assert run("pip3", "--version").startswith("pip 24.0")
    assert run("python", "-c", script).strip() == "False"
    assert run("id", "-u").strip() == "0"
    listed = run("pip", "list", "--format=freeze")
    assert {"setuptools==65.5.1", "wheel==0.45.1"} <= set(listed.split())


def test_buildah_touched_nothing_outside_the_cache(
    product: productimage.ProductImage, host_before: dict[str, bool]
) -> None:
    del product

    created = [what for what, exists in _host_state().items() if exists and not host_before[what]]

    assert created == []
    assert (images.node_cache() / "buildah" / "storage").is_dir()

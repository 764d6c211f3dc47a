"""The product image's pure parts: input key, base image spec, RECORD fix, buildah settings."""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

from torchgate_dev.node import buildah, buildcontext, images, productimage

REPO_ROOT = Path(__file__).resolve().parents[4]
BASE = "sha256:" + "b" * 64

# ----------------------------------------------------------------------------- input key


def _context(root: Path) -> Path:
    """A small build context with the repository's Dockerfile and .dockerignore."""
    for name in ("Dockerfile", ".dockerignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    files = {
        "pyproject.toml": "[project]\nname = 'torchgate'\n",
        "README.md": "# torchgate\n",
        "torchgate/webhook/server.py": "SERVER = 1\n",
        "torchgate/cli.py": "def main() -> int:\n    return 0\n",
        "torchgate/certs/authority.py": "CA = 1\n",
        "tests/test_x.py": "def test() -> None: ...\n",
        "docs/real-node.md": "notes\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _key(root: Path, *, base: str = BASE) -> str:
    rules = buildcontext.parse_dockerignore((root / ".dockerignore").read_text())
    return productimage.inputs_key(
        dockerfile=(root / "Dockerfile").read_bytes(),
        dockerignore=(root / ".dockerignore").read_bytes(),
        files=buildcontext.context_digests(root, rules),
        base_digest=base,
        build_args={"PYTHON_IMAGE": productimage.PYTHON_REFERENCE},
        builder="buildah version 1.28.2",
    )


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("torchgate/webhook/server.py", "SERVER = 2\n"),
        ("torchgate/cli.py", "def main() -> int:\n    return 1\n"),
        ("torchgate/new_module.py", "X = 1\n"),
        ("torchgate/certs/authority.py", "CA = 2\n"),
        ("pyproject.toml", "[project]\nname = 'torchgate'\nversion = '2'\n"),
        ("README.md", "# torchgate 2\n"),
        ("Dockerfile", "FROM scratch\n"),
        (".dockerignore", "*\n!torchgate/webhook/\n"),
    ],
)
def test_the_key_changes_with_what_the_build_reads(tmp_path: Path, path: str, text: str) -> None:
    root = _context(tmp_path)
    before = _key(root)
    (root / path).parent.mkdir(parents=True, exist_ok=True)

    (root / path).write_text(text)

    assert _key(root) != before


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_x.py",
        "docs/real-node.md",
        ".venv/lib/site.py",
        "torchgate/webhook/__pycache__/server.cpython-311.pyc",
        "torchgate/certs/ca.pem",
        "torchgate/certs/server.key",
        "scratch.txt",
    ],
)
def test_the_key_ignores_what_the_build_does_not_read(tmp_path: Path, path: str) -> None:
    root = _context(tmp_path)
    before = _key(root)
    (root / path).parent.mkdir(parents=True, exist_ok=True)

    (root / path).write_text("changed\n")

    assert _key(root) == before


def test_the_key_changes_with_the_base_image_and_a_file_mode(tmp_path: Path) -> None:
    root = _context(tmp_path)
    before = _key(root)

    assert _key(root, base="sha256:" + "c" * 64) != before
    (root / "torchgate/cli.py").chmod(0o755)
    assert _key(root) != before


def test_the_key_is_a_valid_tag_and_stable(tmp_path: Path) -> None:
    root = _context(tmp_path)

    key = _key(root)

    assert key == _key(root)
    assert len(key) == 24
    assert int(key, 16) >= 0


# ----------------------------------------------------------------------------- base image


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            b"pip/__init__.py,sha256=a,1\n../../bin/pip,sha256=b,2\n../../bin/pip3.11,,\n",
            b"pip/__init__.py,sha256=a,1\n../../../bin/pip,sha256=b,2\n../../../bin/pip3.11,,\n",
        ),
        (b"setuptools/__init__.py,sha256=a,1\n", None),
        (b"", None),
        (b"x/../../bin/not-a-script,,\n", None),
    ],
    ids=["console scripts", "no scripts", "empty", "not at line start"],
)
def test_record_scripts_are_relocated_to_usr_local_bin(
    record: bytes, expected: bytes | None
) -> None:
    assert productimage.relocated_record(record) == expected


def _files(spec: images.ImageSpec) -> dict[str, tuple[bytes, int]]:
    source = spec.layers[-1].source
    assert isinstance(source, images.Files)
    return {path: (contents, mode) for path, contents, mode in source.files}


def test_python_image_shares_the_debian_layer_and_offers_what_the_dockerfile_uses() -> None:
    record = "usr/local/lib/python3.11/dist-packages/pip-24.0.dist-info/RECORD"

    spec = productimage.python_image(ca_bundle=b"CA", records={record: b"fixed"})

    assert spec.reference == "registry.torchgate.local/python:3.11-slim-bookworm"
    assert spec.layers[0] == images.BASE_LAYER
    assert spec.layers[1] == productimage.PIP_LAYER
    files = _files(spec)
    assert files["usr/lib/python3.11/.wh.EXTERNALLY-MANAGED"] == (b"", 0o644)
    assert files["usr/local/bin/python"][1] == 0o755
    assert files[record] == (b"fixed", 0o644)
    assert files["etc/ssl/certs/ca-certificates.crt"] == (b"CA", 0o644)
    assert files["usr/lib/ssl/cert.pem"] == (b"CA", 0o644)
    assert b"cert = /etc/ssl/certs/ca-certificates.crt" in files["etc/pip.conf"][0]
    assert spec.run.cmd == ("python3",)
    assert spec.run.env[0].startswith("PATH=/usr/local/sbin:/usr/local/bin:")


def test_python_image_without_a_ca_bundle_configures_no_certificates() -> None:
    files = _files(productimage.python_image(ca_bundle=None, records={}))

    assert not any(path.startswith(("etc/ssl", "usr/lib/ssl", "etc/pip")) for path in files)


def test_python_tools_are_pinned_like_the_official_image() -> None:
    names = [requirement.split("==")[0] for requirement in productimage.PYTHON_TOOLS]

    assert names == ["pip", "setuptools", "wheel"]
    assert all("==" in requirement for requirement in productimage.PYTHON_TOOLS)


# ----------------------------------------------------------------------------- buildah settings


def test_registries_conf_maps_the_alias_to_the_loopback_registry() -> None:
    text = buildah.registries_conf(alias="registry.torchgate.local", location="127.0.0.1:5123")

    parsed = tomllib.loads(text)

    assert parsed == {
        "unqualified-search-registries": [],
        "registry": [
            {
                "prefix": "registry.torchgate.local",
                "location": "127.0.0.1:5123",
                "insecure": True,
            }
        ],
    }


def test_storage_conf_keeps_everything_under_the_cache(tmp_path: Path) -> None:
    paths = buildah.BuildahPaths(tmp_path / "buildah")

    parsed = tomllib.loads(buildah.storage_conf(paths))

    assert parsed == {
        "storage": {
            "driver": "overlay",
            "graphroot": str(tmp_path / "buildah" / "storage"),
            "runroot": str(tmp_path / "buildah" / "run"),
        }
    }


def test_bud_uses_oci_isolation_host_network_and_our_storage(tmp_path: Path) -> None:
    paths = buildah.BuildahPaths(tmp_path)

    argv = buildah.bud_argv(
        "buildah",
        paths,
        context=REPO_ROOT,
        tag="localhost/torchgate-build:abc",
        build_args={"PYTHON_IMAGE": productimage.PYTHON_REFERENCE},
        policy=tmp_path / "policy.json",
    )

    assert argv[:7] == ["buildah", *buildah.storage_args(paths)]
    assert argv[7] == "bud"
    assert {"--isolation=oci", "--network=host", "--format=oci"} <= set(argv)
    assert f"--cni-config-dir={tmp_path / 'cni'}" in argv
    assert "--build-arg=PYTHON_IMAGE=registry.torchgate.local/python:3.11-slim-bookworm" in argv
    assert argv[-1] == str(REPO_ROOT)


def test_push_goes_to_the_plain_http_registry(tmp_path: Path) -> None:
    argv = buildah.push_argv(
        "buildah",
        buildah.BuildahPaths(tmp_path),
        image="localhost/torchgate-build:abc",
        destination="127.0.0.1:5000/torchgate:abc",
        policy=tmp_path / "policy.json",
    )

    assert "--tls-verify=false" in argv
    assert argv[-2:] == ["localhost/torchgate-build:abc", "docker://127.0.0.1:5000/torchgate:abc"]


# ----------------------------------------------------------------------------- registry reads


def _layers(*layers: Iterable[str]) -> set[str]:
    return productimage.merged_paths(layers)


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ([["a/", "a/b"], ["a/c"]], {"a", "a/b", "a/c"}),
        ([["a/", "a/b", "a/b/c"], ["a/.wh.b"]], {"a"}),
        ([["usr/", "usr/bin/", "usr/bin/pip"], ["usr/bin/.wh.pip"]], {"usr", "usr/bin"}),
        ([["d/", "d/x", "d/y"], ["d/", "d/.wh..wh..opq", "d/z"]], {"d", "d/z"}),
        ([["./a", "./b/"], []], {"a", "b"}),
        ([["a"], [".wh.a", "a2"]], {"a2"}),
    ],
    ids=["union", "folder whiteout", "file whiteout", "opaque folder", "dot paths", "top"],
)
def test_merged_paths_apply_whiteouts(layers: list[list[str]], expected: set[str]) -> None:
    assert _layers(*layers) == expected


def test_manifest_size_counts_config_and_layers() -> None:
    manifest = json.dumps(
        {"config": {"size": 10}, "layers": [{"size": 100}, {"size": 1000}]}
    ).encode()

    assert productimage.manifest_size(manifest) == 1110

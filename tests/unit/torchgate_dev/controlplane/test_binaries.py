"""Building and finding the control-plane binaries (torchgate_dev.controlplane.binaries)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from tests.unit.torchgate_dev.controlplane.planefiles import (
    executable,
)
from torchgate_dev.controlplane.binaries import (
    BIN_DIR_ENV,
    Binaries,
    BinariesUnavailable,
    build_binaries,
    ensure_binaries,
)
from torchgate_dev.controlplane.versions import VERSION_ENV

# ----------------------------------------------------------------------------- binaries


def build_dir(folder: Path) -> Path:
    folder.mkdir()
    for name in (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "etcd",
        "kwok",
        "kubelet",
        "kube-proxy",
    ):
        executable(folder / name, "exit 0\n")
    (folder / "stages").mkdir()
    return folder


def path_with_go(tmp_path: Path) -> str:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    executable(tools / "go", "exit 0\n")
    return f"{tools}:{os.environ['PATH']}"


def test_missing_go_is_reported_as_such(tmp_path: Path) -> None:
    with pytest.raises(BinariesUnavailable, match="Go is not installed") as failure:
        build_binaries(environ={"PATH": str(tmp_path)})

    assert failure.value.go_missing


def test_failed_build_quotes_the_end_of_its_output(tmp_path: Path) -> None:
    script = executable(tmp_path / "build.sh", 'echo "compile error in foo.go" >&2\nexit 3\n')
    progress = io.StringIO()

    with pytest.raises(BinariesUnavailable, match="exited with 3") as failure:
        build_binaries(script=script, progress=progress, environ={"PATH": path_with_go(tmp_path)})

    assert not failure.value.go_missing
    assert "compile error in foo.go" in str(failure.value)
    assert "compile error in foo.go" in progress.getvalue()


def test_build_returns_the_folder_it_printed_last(tmp_path: Path) -> None:
    folder = build_dir(tmp_path / "bin")
    script = executable(tmp_path / "build.sh", f'echo "[build] ok" >&2\necho "{folder}"\n')

    binaries = build_binaries(
        script=script, progress=io.StringIO(), environ={"PATH": path_with_go(tmp_path)}
    )

    assert binaries == Binaries.in_directory(folder)
    assert binaries.kwok == folder / "kwok"


def test_build_that_prints_no_folder_is_an_error(tmp_path: Path) -> None:
    script = executable(tmp_path / "build.sh", "exit 0\n")

    with pytest.raises(BinariesUnavailable, match="no binary folder"):
        build_binaries(
            script=script, progress=io.StringIO(), environ={"PATH": path_with_go(tmp_path)}
        )


def test_incomplete_binary_folder_lists_what_is_missing(tmp_path: Path) -> None:
    folder = build_dir(tmp_path / "bin")
    (folder / "kwok").unlink()
    (folder / "stages").rmdir()

    with pytest.raises(BinariesUnavailable, match="kwok, stages/"):
        Binaries.in_directory(folder)


def test_binary_folder_from_the_environment_skips_the_build(tmp_path: Path) -> None:
    folder = build_dir(tmp_path / "bin")

    binaries = ensure_binaries(
        script=tmp_path / "no-such-script.sh", environ={BIN_DIR_ENV: str(folder), "PATH": ""}
    )

    assert binaries.etcd == folder / "etcd"


# ----------------------------------------------------------------------------- versions


def version_echoing_script(tmp_path: Path) -> Path:
    """A build script that builds "nothing" into a folder named after its argument."""
    bin_root = tmp_path / "bin"
    for version in ("1.37.2", "1.36.3"):
        build_dir(bin_root.parent / f"bin-{version}")
    return executable(tmp_path / "build.sh", f'echo "{bin_root}-$1"\n')


@pytest.mark.parametrize(
    ("version", "environ", "built"),
    [
        (None, {}, "1.37.2"),
        (None, {VERSION_ENV: "1.36.3"}, "1.36.3"),
        ("v1.36.3", {VERSION_ENV: "1.37.2"}, "1.36.3"),
    ],
    ids=["default", "environment", "argument"],
)
def test_the_build_is_asked_for_the_chosen_version(
    tmp_path: Path, version: str | None, environ: dict[str, str], built: str
) -> None:
    script = version_echoing_script(tmp_path)

    binaries = ensure_binaries(
        version=version,
        script=script,
        progress=io.StringIO(),
        environ={"PATH": path_with_go(tmp_path), **environ},
    )

    assert binaries.kube_apiserver.parent == tmp_path / f"bin-{built}"


def test_an_unsupported_version_is_refused_before_any_build(tmp_path: Path) -> None:
    with pytest.raises(BinariesUnavailable, match=r"supported: 1\.37\.2 \(default\), 1\.36\.3"):
        ensure_binaries(
            version="1.35.0",
            script=tmp_path / "no-such-script.sh",
            environ={"PATH": path_with_go(tmp_path)},
        )

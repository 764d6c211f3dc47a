"""The real node's housekeeping that shells out, against stand-in executables."""

from __future__ import annotations

import json
import shlex
import threading
from pathlib import Path

import pytest

from torchgate_dev.node import runtime
from torchgate_dev.node.config import NodePaths
from torchgate_dev.node.images import build_lock

CURRENT = "sha256:" + "a" * 64
OLD = "sha256:" + "b" * 64
OCI = "application/vnd.oci.image.manifest.v1+json"
LISTING = f"""REF TYPE DIGEST SIZE PLATFORMS LABELS
docker.io/library/pytorch-demo:latest {OCI} {CURRENT} 4.1 GiB linux/amd64 -
docker.io/library/pytorch-demo@{OLD} {OCI} {OLD} 4.1 GiB linux/amd64 -
sha256:{"c" * 64} {OCI} {OLD} 4.1 GiB linux/amd64 -
"""


def fake_ctr(tmp_path: Path) -> Path:
    listing = tmp_path / "listing.txt"
    listing.write_text(LISTING)
    calls = tmp_path / "calls.jsonl"
    script = tmp_path / "ctr"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if 'ls' in sys.argv: print(open({str(listing)!r}).read(), end='')\n"
    )
    script.chmod(0o755)
    return script


def binaries(ctr: Path) -> runtime.NodeBinaries:
    unused = Path("/nonexistent")
    return runtime.NodeBinaries(
        kubelet=unused,
        kube_proxy=unused,
        coredns=unused,
        containerd=unused,
        runc=unused,
        ctr=ctr,
        registry=unused,
        cni_bin_dir=unused,
    )


def test_images_no_registry_tag_points_at_are_removed_and_current_ones_kept(
    tmp_path: Path,
) -> None:
    ctr = fake_ctr(tmp_path)
    paths = NodePaths(work=tmp_path, cache=tmp_path)

    removed = runtime.prune_images(binaries(ctr), paths, {CURRENT})

    assert removed == [f"docker.io/library/pytorch-demo@{OLD}", f"sha256:{'c' * 64}"]
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    (rm,) = [call for call in calls if "rm" in call]
    assert rm[-2:] == removed
    assert rm[:4] == ["--address", str(paths.containerd_socket), "-n", "k8s.io"]


def test_nothing_is_removed_when_every_image_is_current(tmp_path: Path) -> None:
    ctr = fake_ctr(tmp_path)

    removed = runtime.prune_images(binaries(ctr), NodePaths(tmp_path, tmp_path), {CURRENT, OLD})

    assert removed == []
    calls = (tmp_path / "calls.jsonl").read_text()
    assert '"rm"' not in calls


def test_a_second_image_build_waits_for_the_first_and_says_so(tmp_path: Path) -> None:
    lines: list[str] = []
    entered = threading.Event()

    def second() -> None:
        with build_lock(tmp_path, lines.append):
            entered.set()

    with build_lock(tmp_path, lines.append):
        waiting = threading.Thread(target=second)
        waiting.start()
        assert not entered.wait(0.5), "the second build must wait"
    waiting.join(timeout=5)

    assert entered.is_set()
    assert len(lines) == 1
    assert "waiting" in lines[0]


def test_a_second_real_node_is_refused_with_the_command_that_stops_the_first(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "my dev", tmp_path / "other"
    assert runtime.claim(tmp_path / "cache", first, 1.0, lambda _: True) is None

    with pytest.raises(runtime.NodeUnavailable) as refused:
        runtime.claim(tmp_path / "cache", second, 2.0, lambda workdir: workdir == first)

    command = str(refused.value).split("stop it first (", 1)[1].split(",", 1)[0]
    assert shlex.split(command) == ["torchgate", "dev", "down", "--dir", str(first)]
    assert str(refused.value).endswith("or start this one with --no-real-node")

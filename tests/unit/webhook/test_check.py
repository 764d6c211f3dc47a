"""``torchgate check``: exit codes, output formats, line numbers, skipped documents."""

from __future__ import annotations

import json
from pathlib import Path

import jsonpatch
import pytest
import yaml

from tests.builders.policy import policy
from torchgate.cli import main

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
SEEDS = SHARED / "seeds" / "manifests"


def seed_000_with_image(tmp_path: Path, image: str = "pytorch-demo") -> Path:
    """Seed 000 with its ``<训练镜像>`` placeholder replaced, as the walkthrough tells users to."""
    text = (SEEDS / "000-pytorch-dist-mnist-nccl.yaml").read_text(encoding="utf-8")
    assert "<训练镜像>" in text
    path = tmp_path / "000-pytorch-dist-mnist-nccl.yaml"
    path.write_text(text.replace("<训练镜像>", image), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_allowed_manifests_exit_0_and_show_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(SEEDS / "003-torchrun-cpu.yaml"))
    assert code == 0
    assert "PyTorchJob torchrun-cpu: allowed" in out
    assert "+          cleanPodPolicy: Running" in out or "+    cleanPodPolicy: Running" in out
    assert "1 PyTorchJob(s) checked: 1 allowed, 0 denied" in out


def test_denied_manifests_exit_1_with_errors_pointing_at_their_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = SEEDS / "002-resnet50-nccl-rdma-16.yaml"
    code, out, _ = run(capsys, str(path))
    assert code == 1
    lines = path.read_text().splitlines()
    world_size = next(i for i, line in enumerate(lines, 1) if "--world-size=16" in line)
    assert f"error: {path}:{world_size}: spec.pytorchReplicaSpecs[Master]" in out


def test_seed_000_as_published_is_refused_at_its_placeholder_images(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "-o", "json", str(SEEDS / "000-pytorch-dist-mnist-nccl.yaml"))
    assert code == 1
    errors = json.loads(out)["results"][0]["errors"]
    assert [(e["type"], e["field"]) for e in errors] == [
        ("FieldValueInvalid", f"spec.pytorchReplicaSpecs[{kind}].template.spec.containers[0].image")
        for kind in ("Master", "Worker")
    ]


def test_json_output_has_the_documented_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = seed_000_with_image(tmp_path)
    code, out, _ = run(
        capsys, "-o", "json", str(path), str(SEEDS / "002-resnet50-nccl-rdma-16.yaml")
    )
    assert code == 1
    results = json.loads(out)["results"]
    assert [r["allowed"] for r in results] == [True, False]
    first = results[0]
    assert set(first) >= {"source", "index", "kind", "namespace", "name", "allowed"}
    assert set(first) >= {"errors", "warnings", "patch", "object"}
    original = yaml.safe_load(path.read_text())
    assert jsonpatch.apply_patch(original, first["patch"]) == first["object"]
    denied = results[1]
    assert {"field", "type", "message"} <= set(denied["errors"][0])
    assert denied["errors"][0]["type"].startswith("FieldValue")


def test_yaml_output_parses(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-o", "yaml", str(SEEDS / "004-pytorch-simple.yaml"))
    assert code == 0
    assert yaml.safe_load(out)["results"][0]["namespace"] == "kubeflow"


def test_other_kinds_in_multi_document_files_are_skipped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = (SHARED / "realworld" / "019-adt-hyperpod-kueue-elastic-multidoc.yaml").read_text()
    path = tmp_path / "multi.yaml"
    path.write_text(source)
    code, out, _ = run(capsys, "-o", "json", str(path))
    results = json.loads(out)["results"]
    assert [r["kind"] for r in results] == ["PyTorchJob"]
    assert results[0]["index"] == 2, "index counts every document of the file"
    assert code == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("kind: PyTorchJob\nspec: [unclosed\n", ":3:1: not valid YAML: expected ',' or ']'"),
        ("a: 1\n  b: 2\n", ":2:"),
    ],
    ids=["unclosed-flow", "bad-indent"],
)
def test_malformed_yaml_exits_2_with_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, out, err = run(capsys, str(path))
    assert code == 2
    assert f"{path}{expected}" in err
    assert "Traceback" not in err + out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("kind: PyTorchJob\nspec:\n  x: &a [*a]\n", ":3:"),
        ("kind: PyTorchJob\nspec: " + "[" * 3000 + "]" * 3000 + "\n", ": not valid YAML"),
    ],
    ids=["self-containing-anchor", "nested-too-deeply"],
)
@pytest.mark.parametrize("output", ["text", "json"])
def test_yaml_that_kubectl_refuses_exits_2_without_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, expected: str, output: str
) -> None:
    # found by fuzzing: a self-containing list crashed -o json, deep nesting crashed the reader
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "-o", output, str(path))
    assert code == 2
    assert f"{path}{expected}" in err
    assert "Traceback" not in err + out


def test_a_policy_file_that_is_not_utf8_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_bytes(b"kind: PlacementPolicy\nmetadata: {name: \xff}\n")
    code, _, err = run(capsys, "--policy", str(policy_file), str(SEEDS / "003-torchrun-cpu.yaml"))
    assert code == 2
    assert f"{policy_file}: not UTF-8 text" in err


def test_yaml_errors_name_where_the_construct_began(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: PyTorchJob\nspec: [unclosed\n")
    _, _, err = run(capsys, str(path))
    assert "(while parsing a flow sequence at line 2)" in err


def test_unreadable_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, str(tmp_path / "missing.yaml"))
    assert code == 2
    assert "cannot read" in err


def test_a_policy_file_changes_the_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hosts = policy(
        "hosts", allowedHostPaths=["/dev/shm", "/tmp", "/sys", "/mnt/lustre"], maxGPUsPerJob=1
    )
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(hosts))
    code, out, _ = run(
        capsys,
        "-o",
        "json",
        "--policy",
        str(policy_file),
        str(seed_000_with_image(tmp_path)),
    )
    assert code == 1
    fields = [e["field"] for e in json.loads(out)["results"][0]["errors"]]
    assert fields == ["spec.pytorchReplicaSpecs"], "2 GPUs > maxGPUsPerJob 1"


def test_an_invalid_policy_file_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("kind: PlacementPolicy\nmetadata: {name: p}\nspec: {priority: high}\n")
    code, _, err = run(capsys, "--policy", str(policy_file), str(SEEDS / "003-torchrun-cpu.yaml"))
    assert code == 2
    assert "spec.priority" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "no PyTorchJob in the input: it is empty"),
        (
            "apiVersion: v1\nkind: ConfigMap\n---\nkind: List\nitems: []\n",
            "no PyTorchJob in the input: 2 document(s) of other kinds skipped"
            " ({path}[0] ConfigMap, {path}[1] List)",
        ),
    ],
    ids=["empty", "other-kinds-only"],
)
def test_an_input_without_any_pytorchjob_is_bad_input_not_a_pass(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, said: str
) -> None:
    path = tmp_path / "rendered.yaml"
    path.write_text(content)

    code, out, err = run(capsys, str(path))

    assert code == 2
    assert out == ""
    assert err.splitlines() == [f"torchgate check: {said.format(path=path)}"]


def test_one_pytorchjob_among_other_kinds_is_enough(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    other = tmp_path / "configmap.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\n")

    code, _, _ = run(capsys, str(other), str(SEEDS / "003-torchrun-cpu.yaml"))

    assert code == 0


@pytest.mark.parametrize("kind", ["PytorchJob", "pytorchjob"])
def test_a_pytorchjob_kind_spelled_otherwise_is_bad_input_naming_the_document(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    source = (SEEDS / "003-torchrun-cpu.yaml").read_text()
    path = tmp_path / "jobs.yaml"
    path.write_text(f"{source}\n---\n{source.replace('kind: PyTorchJob', f'kind: {kind}')}")

    code, _, err = run(capsys, str(path))

    assert code == 2
    assert err.splitlines() == [
        f"torchgate check: {path}[1]: kind {kind!r} is not PyTorchJob (kinds are case-sensitive)"
    ]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "{path}: no PlacementPolicy or TeamQuota in it (--policy reads those)"),
        (
            b"kind: Placementpolicy\nmetadata: {name: p}\nspec: {maxGPUsPerJob: 1}\n",
            "{path}: no PlacementPolicy or TeamQuota in it (--policy reads those)",
        ),
        (b"\xff\xfe", "{path}: not UTF-8 text"),
        (b"kind: PlacementPolicy\nspec: [1\n", "{path}:3:1: not valid YAML: expected ',' or ']'"),
    ],
    ids=["empty", "no-policy-kind", "not-utf-8", "not-yaml"],
)
def test_a_policy_file_that_gives_no_policy_is_bad_input_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, said: str
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_bytes(content)

    code, out, err = run(capsys, "--policy", str(policy_file), str(SEEDS / "003-torchrun-cpu.yaml"))

    assert code == 2
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {said.format(path=policy_file)}")


@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_the_namespace_of_jobs_that_name_none_selects_the_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        yaml.safe_dump(policy("tight", namespaces=["team-vision"], maxGPUsPerJob=1))
    )
    job = seed_000_with_image(tmp_path)
    assert "namespace" not in yaml.safe_load(job.read_text())["metadata"]

    elsewhere, _, _ = run(capsys, "--policy", str(policy_file), str(job))
    code, out, _ = run(
        capsys, "-o", "json", "--policy", str(policy_file), flag, "team-vision", str(job)
    )

    assert elsewhere == 0
    assert code == 1
    assert [e["field"] for e in json.loads(out)["results"][0]["errors"]] == [
        "spec.pytorchReplicaSpecs"
    ]


def test_a_job_without_a_name_is_shown_as_having_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("kind: PyTorchJob\nmetadata: {namespace: team-vision}\n")

    code, out, _ = run(capsys, str(path))

    assert code == 1
    assert out.splitlines()[0] == f"{path}[0] PyTorchJob team-vision/(no name): DENIED"

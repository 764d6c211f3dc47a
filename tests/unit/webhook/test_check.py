"""``torchgate check``: exit codes, output formats, line numbers, skipped documents."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

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
    path.write_text(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {namespace: team-vision}\n"
    )

    code, out, _ = run(capsys, str(path))

    assert code == 1
    assert out.splitlines()[0] == f"{path}[0] PyTorchJob team-vision/(no name): DENIED"


def as_read_back(job: dict[str, Any], uid: str) -> dict[str, Any]:
    """``job`` as ``kubectl get -o yaml`` writes it: with status and server-set metadata."""
    metadata = {
        **job["metadata"],
        "uid": uid,
        "resourceVersion": "4242",
        "generation": 1,
        "creationTimestamp": "2026-11-27T08:00:00Z",
        "managedFields": [{"manager": "kubectl", "operation": "Update"}],
    }
    return {**job, "metadata": metadata, "status": {"conditions": [{"type": "Running"}]}}


def cluster_list(tmp_path: Path, *seeds: str) -> Path:
    """A ``kubectl get pytorchjobs -A -o yaml`` of the seeds, as read back from a cluster."""
    items = [
        as_read_back(yaml.safe_load((SEEDS / seed).read_text()), uid=f"uid-{n}")
        for n, seed in enumerate(seeds)
    ]
    path = tmp_path / "cluster.yaml"
    listing = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}
    path.write_text(yaml.safe_dump(listing, sort_keys=False))
    return path


def test_the_jobs_of_a_list_are_checked_as_their_creation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = cluster_list(tmp_path, "003-torchrun-cpu.yaml", "002-resnet50-nccl-rdma-16.yaml")

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 1
    results = json.loads(out)["results"]
    assert [(r["name"], r["index"], r["item"], r["allowed"]) for r in results] == [
        ("torchrun-cpu", 0, 0, True),
        ("pytorch-dist-mnist-nccl", 0, 1, False),
    ]
    for result in results:
        assert "status" not in result["object"]
        assert not {"uid", "resourceVersion", "managedFields"} & set(result["object"]["metadata"])


def test_an_error_in_a_list_item_points_at_its_line_in_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = cluster_list(tmp_path, "003-torchrun-cpu.yaml", "002-resnet50-nccl-rdma-16.yaml")
    lines = path.read_text().splitlines()
    item = lines.index("    name: pytorch-dist-mnist-nccl")
    args = next(n for n, line in enumerate(lines[item:], item + 1) if line.strip() == "args:")

    code, out, _ = run(capsys, str(path))

    assert code == 1
    assert f"{path}[0].items[1] PyTorchJob pytorch-dist-mnist-nccl: DENIED" in out
    args_error = f"{path}:{args + 1}: spec.pytorchReplicaSpecs[Master].template.spec.containers[0]"
    assert f"error: {args_error}.args: Forbidden: WORLD_SIZE" in out


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("kind: List\nitems:\n- kind: PyTorchJob\n- just text\n", "[0].items[1] (line 4): must be"),
        ("kind: List\nitems: {kind: PyTorchJob}\n", "[0].items (line 2): must be a list"),
        ("kind: List\nitems: [{kind: PytorchJob}]\n", "[0].items[0]: kind 'PytorchJob' is not"),
    ],
    ids=["item-not-an-object", "items-not-a-list", "item-kind-misspelled"],
)
def test_a_list_that_is_not_a_list_of_objects_is_bad_input_naming_where(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, said: str
) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(content)

    code, out, err = run(capsys, str(path))

    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {path}{said}")


def test_a_directory_is_its_manifest_files_in_name_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = (SEEDS / "003-torchrun-cpu.yaml").read_text()
    (tmp_path / "b.yml").write_text(job.replace("name: torchrun-cpu", "name: b"))
    (tmp_path / "a.yaml").write_text(job.replace("name: torchrun-cpu", "name: a"))
    as_json = yaml.safe_load(job.replace("name: torchrun-cpu", "name: c"))
    (tmp_path / "c.json").write_text(json.dumps(as_json))
    (tmp_path / "d.txt").write_text(job.replace("name: torchrun-cpu", "name: d"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.yaml").write_text(job.replace("name: torchrun-cpu", "name: e"))

    code, out, _ = run(capsys, "-o", "json", str(tmp_path))

    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["name"], r["source"]) for r in results] == [
        (name, str(tmp_path / file))
        for name, file in [("a", "a.yaml"), ("b", "b.yml"), ("c", "c.json")]
    ]


def test_a_directory_without_manifests_is_bad_input_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("kind: PyTorchJob\n")

    code, _, err = run(capsys, str(tmp_path))

    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {tmp_path}: a directory without manifests")


def test_a_list_on_stdin_is_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = cluster_list(tmp_path, "003-torchrun-cpu.yaml").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(listing))

    code, out, _ = run(capsys, "-")

    assert code == 0
    assert out.splitlines()[0] == "<stdin>[0].items[0] PyTorchJob torchrun-cpu: allowed"


def test_a_job_pasted_from_kubectl_get_is_refused_as_the_webhook_refuses_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = yaml.safe_load((SEEDS / "003-torchrun-cpu.yaml").read_text())
    path = tmp_path / "pasted.yaml"
    path.write_text(yaml.safe_dump(as_read_back(job, uid="uid-0"), sort_keys=False))

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 1
    (result,) = json.loads(out)["results"]
    assert {e["field"] for e in result["errors"]} == {
        "metadata.uid",
        "metadata.resourceVersion",
        "status",
    }


def seed_003_headed(tmp_path: Path, head: str) -> Path:
    """Seed 003 (allowed as it is) with its apiVersion, kind and metadata replaced by ``head``."""
    source = (SEEDS / "003-torchrun-cpu.yaml").read_text()
    path = tmp_path / "job.yaml"
    path.write_text(head + source[source.index("\nspec:\n") + 1 :])
    return path


V1 = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n"


@pytest.mark.parametrize(
    ("head", "said"),
    [
        ("kind: PyTorchJob\nmetadata: {name: j}\n", "[0]: apiVersion not set"),
        ("apiVersion: ''\nkind: PyTorchJob\nmetadata: {name: j}\n", "[0]: apiVersion not set"),
        (
            "apiVersion: kubeflow.org/v2\nkind: PyTorchJob\nmetadata: {name: j}\n",
            '[0].apiVersion (line 1): no matches for kind "PyTorchJob" in version '
            '"kubeflow.org/v2" (the PyTorchJob CRD serves kubeflow.org/v1 only)',
        ),
        (
            "apiVersion: kubeflow.org/v1beta1\nkind: PyTorchJob\nmetadata: {name: j}\n",
            '[0].apiVersion (line 1): no matches for kind "PyTorchJob" in version '
            '"kubeflow.org/v1beta1"',
        ),
        (
            "kind: PyTorchJob\nmetadata: {name: j}\napiVersion: v1\n",
            '[0].apiVersion (line 3): no matches for kind "PyTorchJob" in version "v1"',
        ),
        (
            "apiVersion: batch/v1\nkind: PyTorchJob\nmetadata: {name: j}\n",
            '[0].apiVersion (line 1): no matches for kind "PyTorchJob" in version "batch/v1"',
        ),
        (
            "apiVersion: Kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j}\n",
            '[0].apiVersion (line 1): no matches for kind "PyTorchJob" in version '
            '"Kubeflow.org/v1"',
        ),
        (
            "apiVersion: 1\nkind: PyTorchJob\nmetadata: {name: j}\n",
            "[0].apiVersion (line 1): must be a string (kubeflow.org/v1), not 1",
        ),
        (
            "apiVersion: kubeflow.org/v1/pytorchjobs\nkind: PyTorchJob\nmetadata: {name: j}\n",
            "[0].apiVersion (line 1): unexpected GroupVersion string 'kubeflow.org/v1/pytorchjobs'",
        ),
    ],
    ids=[
        "missing",
        "empty",
        "kubeflow-v2",
        "kubeflow-v1beta1",
        "core-v1",
        "built-in-group",
        "group-no-crd-can-have",
        "not-a-string",
        "too-many-slashes",
    ],
)
def test_a_pytorchjob_of_a_version_kubectl_cannot_map_is_bad_input_naming_the_document(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, head: str, said: str
) -> None:
    path = seed_003_headed(tmp_path, head)

    code, out, err = run(capsys, str(path))

    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {path}{said}")


def test_a_list_item_without_an_api_version_is_bad_input_naming_the_item(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = cluster_list(tmp_path, "003-torchrun-cpu.yaml", "004-pytorch-simple.yaml")
    listing = yaml.safe_load(path.read_text())
    del listing["items"][1]["apiVersion"]
    path.write_text(yaml.safe_dump(listing, sort_keys=False))

    code, _, err = run(capsys, str(path))

    assert code == 2
    assert err.splitlines() == [f"torchgate check: {path}[0].items[1]: apiVersion not set (a "
                                "PyTorchJob is kubeflow.org/v1)"]  # fmt: skip


def test_a_pytorchjob_of_another_operators_group_is_skipped_like_other_kinds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # KubeDL's PyTorchJob: the webhook, registered for kubeflow.org, never sees it.
    other = seed_003_headed(
        tmp_path, "apiVersion: training.kubedl.io/v1alpha1\nkind: PyTorchJob\nmetadata: {name: k}\n"
    )
    alone, _, err = run(capsys, str(other))
    kubeflow = tmp_path / "kubeflow.yaml"
    kubeflow.write_text((SEEDS / "003-torchrun-cpu.yaml").read_text())
    code, out, _ = run(capsys, "-o", "json", str(other), str(kubeflow))

    assert alone == 2
    assert err.splitlines() == [
        f"torchgate check: no PyTorchJob in the input: 1 document(s) of other kinds skipped "
        f"({other}[0] PyTorchJob (training.kubedl.io/v1alpha1))"
    ]
    assert code == 0
    assert [r["source"] for r in json.loads(out)["results"]] == [str(kubeflow)]


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (f"{V1}metadata: [j]\n", "[0].metadata (line 3): must be an object, not ['j']"),
        (f"{V1}metadata:\n  name: 7\n", "[0].metadata.name (line 4): must be a string, not 7"),
        (
            f"{V1}metadata:\n  generateName: [j-]\n",
            "[0].metadata.generateName (line 4): must be a string, not ['j-']",
        ),
        (
            f"{V1}metadata:\n  name: j\n  namespace: 7\n",
            "[0].metadata.namespace (line 5): must be a string, not 7",
        ),
        (
            f"{V1}metadata:\n  name: j\n  labels:\n    team: 7\n",
            "[0].metadata.labels[team] (line 6): must be a string, not 7 (quote it)",
        ),
        (
            f"{V1}metadata:\n  name: j\n  annotations:\n    sidecar.istio.io/inject: false\n",
            "[0].metadata.annotations[sidecar.istio.io/inject] (line 6): must be a string, not "
            "False (quote it)",
        ),
        (
            f"{V1}metadata:\n  name: j\n  labels: team-a\n",
            "[0].metadata.labels (line 5): must map keys to strings, not 'team-a'",
        ),
        (
            f"{V1}metadata:\n  name: j\n  namespace: Team_A\n",
            "[0].metadata.namespace (line 5): 'Team_A' is not a namespace name: a lowercase "
            "RFC 1123 label must consist of",
        ),
        (
            f"{V1}metadata:\n  name: j\n  namespace: {'n' * 64}\n",
            f"[0].metadata.namespace (line 5): '{'n' * 64}' is not a namespace name",
        ),
        (
            f'{V1}metadata:\n  name: j\n  namespace: "team-a\\n"\n',
            "[0].metadata.namespace (line 5): 'team-a\\n' is not a namespace name",
        ),
    ],
    ids=[
        "metadata-not-an-object",
        "name-not-a-string",
        "generate-name-not-a-string",
        "namespace-not-a-string",
        "label-not-a-string",
        "annotation-unquoted-boolean",
        "labels-not-a-map",
        "namespace-not-a-label",
        "namespace-too-long",
        "namespace-trailing-newline",
    ],
)
@pytest.mark.parametrize("output", ["text", "json"])
def test_metadata_the_apiserver_cannot_decode_or_place_is_bad_input_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, head: str, said: str, output: str
) -> None:
    path = seed_003_headed(tmp_path, head)

    code, out, err = run(capsys, "-o", output, str(path))

    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {path}{said}")


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ("{name: My_Job}", ("FieldValueInvalid", "metadata.name")),
        ("{name: j.x}", ("FieldValueInvalid", "metadata.name")),
        ("{namespace: team-a}", ("FieldValueRequired", "metadata.name")),
        ('{name: "j\\n"}', ("FieldValueInvalid", "metadata.name")),
    ],
    ids=[
        "not-a-label",
        "a-subdomain-but-not-a-label",
        "no-name",
        "trailing-newline",
    ],
)
def test_a_name_the_apiserver_refuses_stays_the_webhooks_denial_at_metadata_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, metadata: str, expected: tuple[str, str]
) -> None:
    # The apiserver refuses these at metadata.name too (a custom resource's name is a DNS-1123
    # subdomain); the webhook's rule is stricter (pods are named after the job), so check reports
    # its denial rather than bad input.
    path = seed_003_headed(tmp_path, f"{V1}metadata: {metadata}\n")

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 1
    (result,) = json.loads(out)["results"]
    assert [(e["type"], e["field"]) for e in result["errors"]] == [expected]


def test_a_namespace_of_the_right_shape_is_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = seed_003_headed(
        tmp_path,
        f"{V1}metadata:\n  name: j\n  namespace: team-a\n  labels: {{team: a, empty: null}}\n",
    )

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 0
    assert json.loads(out)["results"][0]["namespace"] == "team-a"


def seed_003_edited(tmp_path: Path, anchor: str, replacement: str) -> Path:
    """Seed 003 (allowed as it is) with the one text ``anchor`` replaced."""
    source = (SEEDS / "003-torchrun-cpu.yaml").read_text()
    assert source.count(anchor) == 1
    path = tmp_path / "job.yaml"
    path.write_text(source.replace(anchor, replacement))
    return path


WORKER = "    Worker:\n      replicas: 1\n"
SPEC = "spec:\n  pytorchReplicaSpecs:\n"


@pytest.mark.parametrize(
    ("anchor", "replacement", "said"),
    [
        (
            WORKER,
            "    Worker:\n      imagePullPolicy: Always\n      replicas: 1\n",
            'unknown field "spec.pytorchReplicaSpecs.Worker.imagePullPolicy" (line 19)',
        ),
        (
            SPEC,
            "spec:\n  cleanPodPolicy: None\n  pytorchReplicaSpecs:\n",
            'unknown field "spec.cleanPodPolicy" (line 6)',
        ),
        (
            SPEC,
            "spec:\n  foo: null\n  pytorchReplicaSpecs:\n",
            'unknown field "spec.foo" (line 6)',
        ),
        (
            "  name: torchrun-cpu\n",
            '  name: torchrun-cpu\n  clusterName: ""\n',
            'unknown field "metadata.clusterName" (line 5)',
        ),
        (
            SPEC,
            "spec:\n  runPolicy:\n    schedulingPolicy: {queueName: q}\n  pytorchReplicaSpecs:\n",
            'unknown field "spec.runPolicy.schedulingPolicy.queueName" (line 7)',
        ),
        (
            SPEC,
            "spec:\n  elasticPolicy:\n    rdzvConf:\n      - {key: k, val: v}\n"
            "  pytorchReplicaSpecs:\n",
            'unknown field "spec.elasticPolicy.rdzvConf[0].val" (line 8)',
        ),
        (
            SPEC,
            "spec:\n  foo: 1\n  cleanPodPolicy: None\n  pytorchReplicaSpecs:\n",
            'unknown field "spec.foo" (line 6), unknown field "spec.cleanPodPolicy" (line 7)',
        ),
    ],
    ids=[
        "replica-image-pull-policy",
        "spec-clean-pod-policy",
        "null-unknown-field",
        "metadata-cluster-name",
        "scheduling-policy-queue-name",
        "list-item-field",
        "every-unknown-field-named",
    ],
)
@pytest.mark.parametrize("output", ["text", "json"])
def test_fields_the_crd_does_not_declare_are_bad_input_naming_each_as_the_apiserver_does(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    anchor: str,
    replacement: str,
    said: str,
    output: str,
) -> None:
    # kubectl apply validates strictly: the apiserver refuses these while decoding the job,
    # before the webhook is asked (HTTP 400, strict decoding error).
    path = seed_003_edited(tmp_path, anchor, replacement)

    code, out, err = run(capsys, "-o", output, str(path))

    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {path}[0]: {said}: the PyTorchJob CRD has no such")


R_WORKER = "spec.pytorchReplicaSpecs.Worker"


@pytest.mark.parametrize(
    ("anchor", "replacement", "field", "hint"),
    [
        (
            SPEC,
            "spec:\n  cleanPodPolicy: None\n  pytorchReplicaSpecs:\n",
            "spec.cleanPodPolicy",
            "moved to spec.runPolicy.cleanPodPolicy in kubeflow.org/v1",
        ),
        (
            SPEC,
            "spec:\n  schedulingPolicy: {queue: q}\n  pytorchReplicaSpecs:\n",
            "spec.schedulingPolicy",
            "moved to spec.runPolicy.schedulingPolicy in kubeflow.org/v1",
        ),
        (
            SPEC,
            "spec:\n  maxReplicas: 2\n  pytorchReplicaSpecs:\n",
            "spec.maxReplicas",
            "belongs in spec.elasticPolicy.maxReplicas",
        ),
        (
            WORKER,
            "    Worker:\n      imagePullPolicy: Always\n      replicas: 1\n",
            f"{R_WORKER}.imagePullPolicy",
            f"belongs in {R_WORKER}.template.spec.containers[*]",
        ),
        (
            WORKER,
            "    Worker:\n      nodeSelector: {a: b}\n      replicas: 1\n",
            f"{R_WORKER}.nodeSelector",
            f"belongs in {R_WORKER}.template.spec",
        ),
        (
            WORKER,
            "    Worker:\n      labels: {a: b}\n      replicas: 1\n",
            f"{R_WORKER}.labels",
            f"belongs in {R_WORKER}.template.metadata",
        ),
        (
            WORKER,
            "    Worker:\n      replica: 2\n      replicas: 1\n",
            f"{R_WORKER}.replica",
            f"the fields of {R_WORKER} are replicas, restartPolicy, template",
        ),
        (
            SPEC,
            "spec:\n  foo: 1\n  pytorchReplicaSpecs:\n",
            "spec.foo",
            "the fields of spec are elasticPolicy, nprocPerNode, pytorchReplicaSpecs, runPolicy",
        ),
        (
            SPEC,
            "spec:\n  runPolicy:\n    schedulingPolicy: {queueName: q}\n  pytorchReplicaSpecs:\n",
            "spec.runPolicy.schedulingPolicy.queueName",
            "the fields of spec.runPolicy.schedulingPolicy are minAvailable, minResources, "
            "priorityClass, queue, scheduleTimeoutSeconds",
        ),
        (
            SPEC,
            "spec:\n  elasticPolicy:\n    rdzvConf:\n      - {key: k, val: v}\n"
            "  pytorchReplicaSpecs:\n",
            "spec.elasticPolicy.rdzvConf[0].val",
            "the fields of spec.elasticPolicy.rdzvConf[0] are key, value",
        ),
        (
            "kind: PyTorchJob\n",
            "kind: PyTorchJob\nstatus2: {}\n",
            "status2",
            "the fields of a PyTorchJob are apiVersion, kind, metadata, spec, status",
        ),
    ],
    ids=[
        "pre-v1-clean-pod-policy",
        "pre-v1-scheduling-policy",
        "elastic-field-in-spec",
        "container-field-in-replica",
        "pod-field-in-replica",
        "pod-metadata-in-replica",
        "misspelled-replica-field",
        "unknown-spec-field",
        "unknown-scheduling-field",
        "unknown-list-item-field",
        "unknown-top-level-field",
    ],
)
def test_an_unknown_field_is_told_where_it_belongs_or_what_its_object_has(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    anchor: str,
    replacement: str,
    field: str,
    hint: str,
) -> None:
    path = seed_003_edited(tmp_path, anchor, replacement)

    code, _, err = run(capsys, str(path))

    assert code == 2
    (line,) = err.splitlines()
    assert f'unknown field "{field}"' in line
    assert line.endswith(f"; {field}: {hint}")


def test_realworld_025s_pre_v1_clean_pod_policy_is_told_where_it_moved(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = SHARED / "realworld" / "025-kfwebsite-status-output-cleanpodpolicy.yaml"

    code, _, err = run(capsys, str(path))

    assert code == 2
    assert err.rstrip().endswith(
        "; spec.cleanPodPolicy: moved to spec.runPolicy.cleanPodPolicy in kubeflow.org/v1"
    )


def test_an_unknown_metadata_field_gets_no_hint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # metadata is Kubernetes' ObjectMeta: its fields are not the PyTorchJob CRD's to list.
    path = seed_003_edited(
        tmp_path, "  name: torchrun-cpu\n", '  name: torchrun-cpu\n  clusterName: ""\n'
    )

    code, _, err = run(capsys, str(path))

    assert code == 2
    (line,) = err.splitlines()
    assert line.endswith("before any webhook sees it)")


@pytest.mark.parametrize(
    ("replicas", "code"),
    [("replicas: -1\n      replicas: 2\n", 0), ("replicas: 2\n      replicas: -1\n", 1)],
    ids=["last-is-valid", "last-is-invalid"],
)
def test_the_last_of_two_equal_keys_is_the_one_checked_as_kubectl_sends_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, replicas: str, code: int
) -> None:
    # kubectl keeps the last of two equal keys without a word (tests/e2e/test_check_agrees_e2e.py).
    path = seed_003_edited(tmp_path, WORKER, "    Worker:\n      " + replicas)

    result, out, _ = run(capsys, "-o", "json", str(path))

    assert result == code
    errors = json.loads(out)["results"][0]["errors"]
    # A negative replicas is refused by the apiserver's scale check, before the validating
    # webhook is asked (the cluster's verdict on replicas: -1.0, tests/clusternumbers.py).
    expected = (
        [] if code == 0 else [("FieldValueInvalid", ".spec.pytorchReplicaSpecs.Worker.replicas")]
    )
    assert [(e["type"], e["field"]) for e in errors] == expected


MASTER_TEMPLATE = (
    "    Master:\n      replicas: 1\n      restartPolicy: OnFailure\n      template:\n"
)


@pytest.mark.parametrize(
    ("anchor", "replacement"),
    [
        (SPEC, "spec:\n  runPolicy: {suspend: false, schedulingPolicy: {queue: q}}\n" + SPEC[6:]),
        (SPEC, "spec:\n  nprocPerNode: '2'\n" + SPEC[6:]),
        (MASTER_TEMPLATE, MASTER_TEMPLATE + "        metadata: {labels: {a: b}, x: 1}\n"),
        (
            MASTER_TEMPLATE + "        spec:\n",
            MASTER_TEMPLATE + "        spec:\n          hostname: m\n          anything: 1\n",
        ),
    ],
    ids=["declared-fields", "nproc-string", "template-metadata-kept-as-given", "pod-spec-field"],
)
def test_fields_the_crd_declares_or_keeps_as_given_are_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, anchor: str, replacement: str
) -> None:
    path = seed_003_edited(tmp_path, anchor, replacement)

    code, _, err = run(capsys, "-o", "json", str(path))

    assert code == 0, err


MASTER = "    Master:\n      replicas: 1\n"
TYPE_INVALID = "FieldValueTypeInvalid"


@pytest.mark.parametrize(
    ("anchor", "replacement", "expected"),
    [
        (
            WORKER,
            "    Worker:\n      replicas: $NUM_NODES\n",
            [
                (TYPE_INVALID, "spec.pytorchReplicaSpecs.Worker.replicas"),
                ("FieldValueInvalid", ".spec.pytorchReplicaSpecs.Worker.replicas"),
            ],
        ),
        (
            MASTER,
            "    Master:\n      replicas: '1'\n",
            [(TYPE_INVALID, "spec.pytorchReplicaSpecs.Master.replicas")],
        ),
        (
            SPEC,
            "spec:\n  runPolicy: {suspend: 'false'}\n" + SPEC[6:],
            [(TYPE_INVALID, "spec.runPolicy.suspend")],
        ),
        (
            SPEC,
            "spec:\n  nprocPerNode: 2\n" + SPEC[6:],
            [(TYPE_INVALID, "spec.nprocPerNode")],
        ),
        (
            SPEC,
            "spec:\n  elasticPolicy: {rdzvConf: [{key: k, value: 1}]}\n" + SPEC[6:],
            [(TYPE_INVALID, "spec.elasticPolicy.rdzvConf[0].value")],
        ),
    ],
    ids=[
        "worker-replicas-left-by-envsubst",
        "master-replicas-quoted",
        "suspend-quoted",
        "nproc-per-node-a-number",
        "list-item-value",
    ],
)
def test_a_value_of_the_wrong_type_is_denied_with_the_apiservers_causes_only(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    anchor: str,
    replacement: str,
    expected: list[tuple[str, str]],
) -> None:
    # The apiserver validates the CRD's schema before asking the validating webhook, and stops
    # there: the webhook's own errors (a string where replicas are counted) are never shown.
    path = seed_003_edited(tmp_path, anchor, replacement)

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 1
    (result,) = json.loads(out)["results"]
    assert [(e["type"], e["field"]) for e in result["errors"]] == expected


def test_a_job_the_mutating_webhook_refuses_is_denied_for_that_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A second Worker spelled "worker": the mutating webhook refuses the duplicate, and the
    # apiserver stops there; the validating webhook (which refuses the key too) is not asked.
    source = (SEEDS / "003-torchrun-cpu.yaml").read_text()
    path = tmp_path / "job.yaml"
    path.write_text(source + source[source.index(WORKER) :].replace("    Worker:", "    worker:"))

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 1
    (result,) = json.loads(out)["results"]
    errors = [(e["type"], e["field"]) for e in result["errors"]]
    assert errors == [("FieldValueDuplicate", "spec.pytorchReplicaSpecs[worker]")]


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (f"{V1}metadata:\n  generateName: j-\n", "[0].metadata.generateName (line 4): from j-:"),
        (
            f"{V1}metadata:\n  namespace: team-a\n  generateName: J-\n",
            "[0].metadata.generateName (line 5): from J-:",
        ),
        (
            f'{V1}metadata:\n  name: ""\n  generateName: j-\n',
            "[0].metadata.generateName (line 5): from j-:",
        ),
    ],
    ids=["generate-name-alone", "generate-name-not-a-label", "empty-name"],
)
@pytest.mark.parametrize("output", ["text", "json"])
def test_a_generate_name_without_a_name_is_bad_input_in_kubectl_applys_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, head: str, said: str, output: str
) -> None:
    # kubectl apply finds the object it applies by name, so it refuses these before asking the
    # apiserver: "error: from j-: cannot use generate name with apply" (kubectl create takes them).
    path = seed_003_headed(tmp_path, head)

    code, out, err = run(capsys, "-o", output, str(path))

    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"torchgate check: {path}{said} cannot use generate name with apply")


def test_a_generate_name_in_a_list_item_is_bad_input_naming_the_item(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = yaml.safe_load((SEEDS / "003-torchrun-cpu.yaml").read_text())
    job["metadata"] = {"generateName": "j-"}
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [job]}))

    code, _, err = run(capsys, str(path))

    assert code == 2
    assert err.startswith(f"torchgate check: {path}[0].items[0].metadata.generateName (line ")


def test_a_generate_name_beside_a_name_is_ignored_as_kubectl_apply_ignores_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = seed_003_headed(tmp_path, f"{V1}metadata:\n  name: j\n  generateName: k-\n")

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 0
    assert json.loads(out)["results"][0]["name"] == "j"


@pytest.mark.parametrize(
    "namespace", ["Bad_NS", "team.a", "team-", "n" * 64], ids=["upper", "dot", "dash", "long"]
)
@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_a_namespace_flag_naming_no_possible_namespace_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flag: str, namespace: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", flag, namespace, str(SEEDS / "003-torchrun-cpu.yaml")])

    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: torchgate check ")
    assert err.splitlines()[-1].startswith(
        f"torchgate check: error: argument -n/--namespace: {namespace!r} is not a namespace name: "
        "a lowercase RFC 1123 label"
    )


SEED_003_TEXT = (SEEDS / "003-torchrun-cpu.yaml").read_text()
MANAGED_ELSEWHERE = "spec:\n  runPolicy: {managedBy: kubeflow.org/training-operator}\n"


def seed_003_as(name: str = "torchrun-cpu", namespace: str | None = None) -> str:
    head = f"metadata:\n  name: {name}\n" + (f"  namespace: {namespace}\n" if namespace else "")
    return SEED_003_TEXT.replace("metadata:\n  name: torchrun-cpu\n", head)


def outcomes(results: list[dict[str, Any]]) -> list[tuple[str, str | None, bool, list[str]]]:
    """Per result: what reaches the webhook, the document it updates, the verdict, the fields."""
    return [
        (r["operation"], r["updates"], r["allowed"], [e["field"] for e in r["errors"]])
        for r in results
    ]


@pytest.mark.parametrize(
    ("documents", "namespace", "expected"),
    [
        (
            [seed_003_as(), seed_003_as()],
            "default",
            [("CREATE", None, True, []), ("UPDATE", "[0]", True, [])],
        ),
        (
            [seed_003_as(), seed_003_as().replace("spec:\n", MANAGED_ELSEWHERE, 1)],
            "default",
            [("CREATE", None, True, []), ("UPDATE", "[0]", False, ["spec.runPolicy.managedBy"])],
        ),
        (
            [seed_003_as(), seed_003_as(namespace="team-a")],
            "team-a",
            [("CREATE", None, True, []), ("UPDATE", "[0]", True, [])],
        ),
        (
            [
                seed_003_as(),
                seed_003_as().replace("spec:\n", MANAGED_ELSEWHERE, 1),
                seed_003_as(),
            ],
            "default",
            [
                ("CREATE", None, True, []),
                ("UPDATE", "[0]", False, ["spec.runPolicy.managedBy"]),
                ("UPDATE", "[0]", True, []),
            ],
        ),
        (
            [seed_003_as().replace("image: pytorch-demo", "image: <x>"), seed_003_as()],
            "default",
            [
                (
                    "CREATE",
                    None,
                    False,
                    [
                        f"spec.pytorchReplicaSpecs[{kind}].template.spec.containers[0].image"
                        for kind in ("Master", "Worker")
                    ],
                ),
                ("CREATE", None, True, []),
            ],
        ),
        (
            [seed_003_as(), seed_003_as(namespace="team-a"), seed_003_as(name="other")],
            "",  # -n default would refuse team-a's job, as kubectl apply -n default does
            [("CREATE", None, True, []), ("CREATE", None, True, []), ("CREATE", None, True, [])],
        ),
    ],
    ids=[
        "the-same-job-twice",
        "managed-by-changed-on-update",
        "the-namespace-given-and-defaulted-alike",
        "a-denied-update-leaves-the-first",
        "the-first-denied-so-the-second-creates",
        "other-namespace-or-name",
    ],
)
def test_the_same_job_again_in_the_input_is_judged_as_the_update_kubectl_apply_sends(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    documents: list[str],
    namespace: str,
    expected: list[tuple[str, str | None, bool, list[str]]],
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("---\n".join(documents))

    code, out, _ = run(capsys, "-o", "json", "-n", namespace, str(path))

    assert code == (0 if all(allowed for _, _, allowed, _ in expected) else 1)
    assert outcomes(json.loads(out)["results"]) == [
        (operation, None if updates is None else f"{path}{updates}", allowed, fields)
        for operation, updates, allowed, fields in expected
    ]


def test_an_update_keeps_what_the_webhook_defaulted_and_the_default_gang_follows_the_workers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # kubectl apply's three-way JSON merge patch replaces a list whole (the containers, without
    # the port the webhook added) and leaves what the manifest never had (runPolicy): the
    # webhook defaults the changed templates again, and the gang size it defaulted follows the
    # three Workers.
    path = tmp_path / "jobs.yaml"
    three = seed_003_as().replace(
        "    Worker:\n      replicas: 1", "    Worker:\n      replicas: 3"
    )
    path.write_text(f"{seed_003_as()}---\n{three}")

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 0
    created, updated = (r["object"] for r in json.loads(out)["results"])
    worker = updated["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    assert worker["template"] == created["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert "ports" in worker["template"]["spec"]["containers"][0]
    assert updated["spec"]["runPolicy"] == {
        **created["spec"]["runPolicy"],
        "schedulingPolicy": {"minAvailable": 4},
    }


def test_the_same_job_twice_is_an_update_that_changes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seed = SEEDS / "000-pytorch-dist-mnist-nccl.yaml"
    manifest = seed.read_text().replace("<训练镜像>", "pytorch-demo")
    path = tmp_path / "jobs.yaml"
    path.write_text(f"{manifest}---\n{manifest}")

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 0
    results = json.loads(out)["results"]
    assert outcomes(results) == [("CREATE", None, True, []), ("UPDATE", f"{path}[0]", True, [])]
    created, updated = (r["object"] for r in results)
    assert updated == created
    pod = created["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["torchgate-dshm"]


def test_a_job_applied_again_as_stored_is_unchanged_and_nothing_is_sent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, out, _ = run(capsys, "-o", "json", str(SEEDS / "003-torchrun-cpu.yaml"))
    stored = json.loads(out)["results"][0]["object"]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([stored, stored]))

    code, out, _ = run(capsys, "-o", "json", str(path))

    assert code == 0
    assert outcomes(json.loads(out)["results"]) == [
        ("CREATE", None, True, []),
        ("NONE", f"{path}[0]", True, []),
    ]


def test_the_text_report_says_which_document_an_update_patches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"{seed_003_as()}---\n{seed_003_as()}")

    code, out, _ = run(capsys, str(path))

    assert code == 0
    verdicts = [line for line in out.splitlines() if " PyTorchJob " in line]
    assert verdicts[0] == f"{path}[0] PyTorchJob torchrun-cpu: allowed"
    assert verdicts[1] == (
        f"{path}[1] PyTorchJob torchrun-cpu: allowed (an UPDATE: kubectl apply patches the job as "
        f"{path}[0] left it)"
    )


def test_an_empty_namespace_flag_is_the_default_namespace_as_kubectl_reads_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(policy("tight", namespaces=["default"], maxGPUsPerJob=1)))
    job = seed_000_with_image(tmp_path)

    code, out, _ = run(capsys, "-o", "json", "--policy", str(policy_file), "-n", "", str(job))

    assert code == 1
    assert [e["field"] for e in json.loads(out)["results"][0]["errors"]] == [
        "spec.pytorchReplicaSpecs"
    ]


@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_a_job_naming_another_namespace_than_the_flag_is_bad_input_in_kubectls_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"{seed_003_as(name='a')}---\n{seed_003_as(name='b', namespace='team-b')}")

    code, out, err = run(capsys, flag, "team-a", str(path))

    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line == (
        f"torchgate check: {path}[1].metadata.namespace (line 34): the namespace from the provided "
        'object "team-b" does not match the namespace "team-a". You must pass '
        "'--namespace=team-b' to perform this operation."
    )


@pytest.mark.parametrize("namespace", ["team-b", ""], ids=["the-same", "empty"])
def test_a_flag_that_does_not_contradict_a_jobs_namespace_lets_it_be_judged_there(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, namespace: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(seed_003_as(namespace="team-b"))

    code, out, _ = run(capsys, "-o", "json", "-n", namespace, str(path))

    assert code == 0
    assert json.loads(out)["results"][0]["namespace"] == "team-b"


def test_policies_that_tie_are_reported_as_the_webhook_warns_without_changing_the_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(
        yaml.safe_dump_all(
            [
                policy("kubeflow-team", namespaces=["kubeflow"], priority=1),
                policy("everyone", priority=1),
                policy("vision", namespaces=["cv"], priority=2),
            ]
        )
    )
    job = str(SEEDS / "004-pytorch-simple.yaml")  # in namespace kubeflow

    code, out, _ = run(capsys, "-o", "json", "--policy", str(policy_file), job)
    text_code, text, _ = run(capsys, "--policy", str(policy_file), job)

    assert code == text_code == 0
    (warning,) = json.loads(out)["policyWarnings"]
    assert warning.startswith(
        'PlacementPolicy "kubeflow-team" ties with PlacementPolicy "everyone" at priority 1 on '
        'namespace kubeflow ("everyone" selects every namespace)'
    )
    assert text.splitlines()[0] == f"warning: {warning}"


def test_policies_that_do_not_tie_give_no_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(
        yaml.safe_dump_all([policy("a", namespaces=["ml"]), policy("b", namespaces=["cv"])])
    )
    code, out, _ = run(
        capsys, "-o", "yaml", "--policy", str(policy_file), str(SEEDS / "004-pytorch-simple.yaml")
    )
    assert code == 0
    assert yaml.safe_load(out)["policyWarnings"] == []

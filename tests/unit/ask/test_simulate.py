"""``torchgate simulate``: a dry run through admission, then the controller's forecast."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchgate.ask.channel import Unanswered
from torchgate.ask.simulate import Simulation, read_jobs, render, simulate
from torchgate.cli import build_parser, main
from torchgate.kube.errors import AlreadyExists, Invalid
from torchgate.pytorchjob.outlook import Forecast, Gang, Place

G = 1000
KUBEFLOW_V1 = {"apiVersion": "kubeflow.org/v1"}
V1 = "apiVersion: kubeflow.org/v1\n"  # a PyTorchJob document's first line (kubectl needs it)
JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {}}


class Apiserver:
    """Answers the dry run as told; keeps what it was sent."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.sent: list[tuple[str, dict[str, str], Any]] = []

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.sent.append((path, dict(kw.get("query") or {}), kw.get("body")))
        if self.error is not None:
            raise self.error
        kw["warnings"].extend(["torchgate: defaulted", "torchgate: will start now on n1"])
        return {**kw["body"], "status": {}}


class Controller:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[Any] = []

    async def post(self, path: str, body: Any) -> Any:
        self.asked.append((path, body))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_the_dry_run_result_is_what_the_controller_is_asked_about() -> None:
    apiserver = Apiserver()
    controller = Controller(Forecast("Start", nodes={"j-master-0": "n1"}).to_json())

    result = await simulate(apiserver, controller, JOB, "team-a")  # type: ignore[arg-type]

    ((path, query, sent),) = apiserver.sent
    assert path == "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs"
    assert query["dryRun"] == "All"
    assert sent["metadata"] == {"name": "j", "namespace": "team-a"}
    ((_, asked),) = controller.asked
    assert asked == {"job": {**sent, "status": {}}}
    body = result.to_json()
    assert (body["allowed"], body["startsNow"], body["nodes"], body["preempts"]) == (
        True,
        True,
        {"j-master-0": "n1"},
        [],
    )
    assert body["warnings"] == ["torchgate: defaulted"], "the forecast is not repeated"


async def test_a_refusal_lists_the_causes_the_apiserver_passed_on() -> None:
    causes = [{"field": "spec.x", "reason": "FieldValueInvalid", "message": "bad"}]
    refusal = Invalid(422, "Invalid", "m", "POST", "/p", body={"details": {"causes": causes}})

    result = await simulate(Apiserver(refusal), Controller(None), JOB, "ns")  # type: ignore[arg-type]

    assert result.allowed is False
    assert result.to_json()["errors"] == causes
    assert render(result)[0] == "ns/j: refused"


async def test_a_job_that_exists_is_pointed_at_explain() -> None:
    exists = AlreadyExists(409, "AlreadyExists", "exists", "POST", "/p")

    result = await simulate(Apiserver(exists), Controller(None), JOB, "ns")  # type: ignore[arg-type]

    assert [error["reason"] for error in result.errors] == ["AlreadyExists"]


async def test_without_the_controller_the_admission_verdict_still_stands() -> None:
    unanswered = Unanswered("the controller's pool service did not answer")

    result = await simulate(Apiserver(), Controller(unanswered), JOB, "ns")  # type: ignore[arg-type]

    body = result.to_json()
    assert (body["allowed"], body["startsNow"], body["controller"]) == (
        True,
        None,
        "the controller's pool service did not answer",
    )


def test_the_text_says_where_whom_and_what_it_borrows() -> None:
    start = Simulation(
        "ns/j",
        allowed=True,
        forecast=Forecast("Start", nodes={"j-master-0": "n1"}, domain="rack=r1",
                          borrows={"gpus": 8 * G}, cohort="h100"),
    )  # fmt: skip
    preempt = Simulation(
        "ns/u",
        allowed=True,
        forecast=Forecast(
            "Preempt", nodes={"u-master-0": "n2"}, preempts=(Gang("ns/l", 8 * G, 1),)
        ),
    )
    wait = Simulation(
        "ns/w",
        allowed=True,
        forecast=Forecast(
            "Wait",
            reason="WaitingForQuota",
            message="m",
            place=Place(2, 3, ahead_jobs=1, ahead_gpus=8 * G),
        ),
    )

    assert render(start) == [
        "ns/j: allowed; will start now on n1 (rack=r1); borrows 8 GPUs of cohort h100's idle quota",
        "  nodes:    j-master-0 -> n1",
        "  domain:   rack=r1",
        "  preempts: nothing",
        "  borrows:  8 GPUs of cohort h100's idle quota",
    ]
    assert "  preempts: ns/l (8 GPUs, priority 1)" in render(preempt)
    assert render(wait)[1:] == [
        "  reason:   WaitingForQuota",
        "  queue:    #2 of 3 in the pool, 1 job (8 GPUs) ahead",
    ]


def test_only_the_pytorchjobs_of_a_file_are_simulated(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"kind: ConfigMap\n---\n{V1}kind: PyTorchJob\nmetadata: {{name: a}}\n---\n")

    assert read_jobs(str(path)) == [
        {**KUBEFLOW_V1, "kind": "PyTorchJob", "metadata": {"name": "a"}}
    ]
    path.write_text("kind: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        read_jobs(str(path))


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"kind: PyTorchJob\nspec: [unclosed\n", ":3:1: not valid YAML: expected ',' or ']'"),
        (b"\xff\xfe kind: PyTorchJob\n", ": not UTF-8 text"),
    ],
    ids=["unclosed-flow", "not-utf-8"],
)
def test_a_file_that_does_not_parse_is_one_line_naming_the_file_and_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, said: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(content)

    assert main(["simulate", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"torchgate simulate: {path}{said}")


def test_a_pytorchjob_kind_spelled_otherwise_is_not_skipped_without_a_word(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("kind: PyTorchJob\nmetadata: {name: a}\n---\nkind: PytorchJob\n")

    with pytest.raises(ValueError, match=r"jobs.yaml\[1\]: kind 'PytorchJob' is not PyTorchJob"):
        read_jobs(str(path))


def test_the_jobs_of_a_list_are_simulated_as_their_creation(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        f"- {V1}  kind: PyTorchJob\n  metadata: {{name: a, uid: u1, resourceVersion: '7'}}\n"
        "  status: {conditions: []}\n"
        "- kind: ConfigMap\n  metadata: {name: c}\n"
        f"- {V1}  kind: PyTorchJob\n  metadata: {{name: b, namespace: ns, managedFields: []}}\n"
    )

    assert read_jobs(str(path)) == [
        {**KUBEFLOW_V1, "kind": "PyTorchJob", "metadata": {"name": "a"}},
        {**KUBEFLOW_V1, "kind": "PyTorchJob", "metadata": {"name": "b", "namespace": "ns"}},
    ]


def test_a_list_item_that_is_not_an_object_is_bad_input_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("kind: List\nitems:\n- kind: PyTorchJob\n- 3\n")

    assert main(["simulate", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"torchgate simulate: {path}[0].items[1] (line 4): must be an object")


def test_a_directory_is_its_manifest_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(f"{V1}kind: PyTorchJob\nmetadata: {{name: b}}\n")
    (tmp_path / "a.json").write_text(json.dumps({**JOB, "metadata": {"name": "a"}}))
    (tmp_path / "c.txt").write_text(f"{V1}kind: PyTorchJob\nmetadata: {{name: c}}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text(f"{V1}kind: PyTorchJob\nmetadata: {{name: d}}\n")

    assert [job["metadata"]["name"] for job in read_jobs(str(tmp_path))] == ["a", "b"]


def test_a_directory_without_manifests_is_bad_input_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "-f", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"torchgate simulate: {tmp_path}: a directory without manifests")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("kind: PyTorchJob\nmetadata: {name: a}\n", "[0]: apiVersion not set"),
        (
            "apiVersion: kubeflow.org/v2\nkind: PyTorchJob\nmetadata: {name: a}\n",
            '[0].apiVersion (line 1): no matches for kind "PyTorchJob" in version "kubeflow.org',
        ),
        (f"{V1}kind: PyTorchJob\nmetadata: {{name: a, namespace: 7}}\n", "[0].metadata.namespace"),
        (
            f"{V1}kind: PyTorchJob\nmetadata: {{name: a, namespace: Team_A}}\n",
            "[0].metadata.namespace (line 3): 'Team_A' is not a namespace name",
        ),
    ],
    ids=["no-api-version", "kubeflow-v2", "namespace-not-a-string", "namespace-not-a-label"],
)
def test_what_kubectl_or_the_apiserver_refuses_before_admission_is_bad_input_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, said: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(content)

    assert main(["simulate", "-f", str(path)]) == 2  # before any cluster is asked
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"torchgate simulate: {path}{said}")


def test_a_pytorchjob_of_another_operators_group_is_not_simulated(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "apiVersion: training.kubedl.io/v1alpha1\nkind: PyTorchJob\nmetadata: {name: k}\n---\n"
        f"{V1}kind: PyTorchJob\nmetadata: {{name: a}}\n"
    )

    assert [job["metadata"]["name"] for job in read_jobs(str(path))] == ["a"]


@pytest.mark.parametrize(
    "namespace", ["Bad_NS", "team.a", "team-", "n" * 64], ids=["upper", "dot", "dash", "long"]
)
@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_a_namespace_flag_naming_no_possible_namespace_is_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flag: str, namespace: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:  # before any cluster is asked
        main(["simulate", flag, namespace, "-f", "job.yaml"])

    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: torchgate simulate ")
    assert err.splitlines()[-1].startswith(
        f"torchgate simulate: error: argument -n/--namespace: {namespace!r} is not a namespace "
        "name: a lowercase RFC 1123 label"
    )


def test_an_empty_namespace_flag_is_the_contexts_namespace_as_kubectl_reads_it() -> None:
    args = build_parser("simulate").parse_args(["simulate", "-n", "", "-f", "job.yaml"])

    assert not args.namespace  # _simulate_all asks the kubeconfig's context, as kubectl does


def test_a_job_in_another_namespace_than_the_flag_is_bad_input_as_kubectl_create_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"{V1}kind: PyTorchJob\nmetadata: {{name: a, namespace: team-b}}\n")

    assert main(["simulate", "-n", "team-a", "-f", str(path)]) == 2  # before any cluster is asked
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"torchgate simulate: {path}[0].metadata.namespace (line 3): the namespace from the "
        'provided object "team-b" does not match the namespace "team-a". You must pass '
        "'--namespace=team-b' to perform this operation."
    )

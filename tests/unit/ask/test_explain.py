"""``torchgate explain``'s command line: which job it reads, and its exit codes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from torchgate.ask import explain
from torchgate.ask.channel import Unanswered
from torchgate.cli import main
from torchgate.kube.errors import Forbidden, NotFound, unreachable

JOBS = "/apis/kubeflow.org/v1/namespaces/{}/pytorchjobs/{}"


class Apiserver:
    """Holds one job, ``team-vision/more``; every other job is not found."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.asked.append(path)
        if "/pytorchjobs/" in path:
            if path != JOBS.format("team-vision", "more"):
                raise NotFound(404, "NotFound", "not found", method, path)
            return {"metadata": {"name": "more", "namespace": "team-vision"}, "status": {}}
        return {"items": []}

    async def close(self) -> None:
        return None


class SilentController:
    async def get(self, path: str) -> Any:
        raise Unanswered("nobody home")

    async def close(self) -> None:
        return None


@pytest.fixture
def apiserver(monkeypatch: pytest.MonkeyPatch) -> Apiserver:
    server = Apiserver()

    async def connect(kubeconfig: str | None) -> Apiserver:
        return server

    monkeypatch.setattr(explain.KubeClient, "connect", connect)
    monkeypatch.setattr(explain, "current_namespace", lambda kubeconfig: "default")
    monkeypatch.setattr(explain, "PoolChannel", lambda api, target: SilentController())
    return server


@pytest.mark.parametrize(
    "arguments",
    [
        ["more", "-n", "team-vision"],
        ["team-vision/more"],
        ["team-vision/more", "-n", "team-vision"],
    ],
    ids=["name-and-namespace", "namespace/name", "both-agreeing"],
)
def test_the_job_is_named_as_top_and_simulate_print_it_or_by_name_and_namespace(
    apiserver: Apiserver, capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    assert main(["explain", *arguments]) == 0
    assert apiserver.asked[0] == JOBS.format("team-vision", "more")
    assert capsys.readouterr().out.startswith("PyTorchJob team-vision/more:")


def test_a_job_that_does_not_exist_exits_1_naming_it(
    apiserver: Apiserver, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "gone"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "torchgate explain: PyTorchJob default/gone not found"


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["team-vision/more", "-n", "team-speech"], "-n team-speech contradicts"),
        (["a/b/c"], "JOB is a name or NAMESPACE/NAME, not 'a/b/c'"),
        (["team-vision/"], "JOB is a name or NAMESPACE/NAME, not 'team-vision/'"),
        (["."], "JOB .: '.' is not a resource name"),
        (["team-vision/.."], "JOB team-vision/..: '..' is not a resource name"),
        (["More", "-n", "team-vision"], "JOB More: 'More' is not a resource name"),
        (["Team-Vision/more"], "JOB Team-Vision/more: 'Team-Vision' is not a namespace name"),
        (["./more"], "JOB ./more: '.' is not a namespace name"),
    ],
    ids=[
        "namespace-contradicts-n",
        "two-slashes",
        "no-name",
        "dot-the-list-of-jobs",
        "dot-dot-the-namespace",
        "capital-letter",
        "namespace-capital-letters",
        "namespace-dot",
    ],
)
def test_a_job_that_cannot_name_one_is_a_usage_error_asking_nothing(
    apiserver: Apiserver, capsys: pytest.CaptureFixture[str], arguments: list[str], said: str
) -> None:
    assert main(["explain", *arguments]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"torchgate explain: {said}")
    assert apiserver.asked == []


def test_an_n_that_can_name_no_namespace_is_a_usage_error_asking_nothing(
    apiserver: Apiserver, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "more", "-n", "Team_Vision"])

    assert exit_info.value.code == 2
    assert "argument -n/--namespace" in capsys.readouterr().err.splitlines()[-1]
    assert apiserver.asked == []


def test_an_empty_n_is_the_contexts_namespace(
    apiserver: Apiserver, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "more", "-n", ""]) == 1
    assert apiserver.asked == [JOBS.format("default", "more")]


@pytest.mark.parametrize("forbidden", [("pods",), ("events",), ("pods", "events")])
def test_a_user_who_may_read_the_job_alone_gets_it_explained_and_told_what_was_left_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], forbidden: tuple[str, ...]
) -> None:
    class ReadsJobsOnly(Apiserver):
        async def request(self, method: str, path: str, **kw: Any) -> Any:
            kind = path.rsplit("/", 1)[-1]
            if kind in forbidden:
                message = f'{kind} is forbidden: User "alice" cannot list resource "{kind}"'
                raise Forbidden(403, "Forbidden", message, method, path)
            return await super().request(method, path, **kw)

    async def connect(kubeconfig: str | None) -> ReadsJobsOnly:
        return ReadsJobsOnly()

    monkeypatch.setattr(explain.KubeClient, "connect", connect)
    monkeypatch.setattr(explain, "PoolChannel", lambda api, target: SilentController())

    assert main(["explain", "team-vision/more", "-o", "json"]) == 0

    explained = json.loads(capsys.readouterr().out)
    assert explained["job"] == "team-vision/more"
    assert sorted(explained["unread"]) == sorted(forbidden)
    for kind in forbidden:
        assert f'cannot list resource "{kind}"' in explained["unread"][kind]


def test_a_cluster_that_does_not_answer_is_one_line_saying_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Gone(Apiserver):
        async def request(self, method: str, path: str, **kw: Any) -> Any:
            raise unreachable(method, path, "Cannot connect to host 127.0.0.1:1")

    async def connect(kubeconfig: str | None) -> Gone:
        return Gone()

    monkeypatch.setattr(explain.KubeClient, "connect", connect)
    monkeypatch.setattr(explain, "current_namespace", lambda kubeconfig: "default")

    assert main(["explain", "more"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"torchgate explain: cannot reach the cluster (GET {JOBS.format('default', 'more')}): "
        "Cannot connect to host 127.0.0.1:1"
    )

"""``torchgate top``'s output channel: escape codes and cutting on a terminal only."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from torchgate.ask import top
from torchgate.ask.channel import Unanswered
from torchgate.cli import main
from torchgate.kube.errors import unreachable
from torchgate.pytorchjob.outlook import PoolView, QueueEntry

LONG = "team vision is at its quota (16/16 GPUs; may borrow 8 more); " + "x" * 120
VIEW = PoolView(
    gpu_resource="nvidia.com/gpu",
    queue=(QueueEntry("ns/a", 1, "vision", 0, 8000, "Quota", "WaitingForQuota", LONG, 5.0),),
    waiting_jobs=1,
)


class Screen(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


class Channel:
    """Answers ``answers`` in turn, then stops the watch."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers

    async def get(self, path: str) -> Any:
        if not self.answers:
            raise KeyboardInterrupt
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self) -> None:
        return None


class Api:
    async def close(self) -> None:
        return None


def show(
    monkeypatch: pytest.MonkeyPatch, screen: Screen, answers: list[Any], *, watch: bool
) -> int:
    async def connect(kubeconfig: str | None) -> Api:
        return Api()

    monkeypatch.setattr(top.KubeClient, "connect", connect)
    monkeypatch.setattr(top, "PoolChannel", lambda api, target: Channel(answers))
    monkeypatch.setattr(top, "_columns", lambda out: 100)
    args = argparse.Namespace(
        watch=watch,
        interval=0.0,
        kubeconfig=None,
        controller=None,
        controller_ca=None,
        controller_namespace=None,
    )
    try:
        return asyncio.run(top._run(args, screen))
    except KeyboardInterrupt:
        return 0


def test_piped_watch_prints_plain_uncut_screens_one_after_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = Screen(terminal=False)
    show(monkeypatch, screen, [VIEW.to_json(), VIEW.to_json()], watch=True)

    text = screen.getvalue()
    assert "\x1b" not in text
    assert text.count("torchgate top") == 2
    assert text.count(LONG) == 2


def test_on_a_terminal_watch_redraws_in_place_and_cuts_to_its_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = Screen(terminal=True)
    show(monkeypatch, screen, [VIEW.to_json(), Unanswered("nobody home")], watch=True)

    frames = screen.getvalue().split(top.HOME_AND_CLEAR)
    assert frames[0] == ""
    assert len(frames) == 3
    assert max(len(line) for line in frames[1].splitlines()) <= 100
    assert "nobody home" in frames[2]  # the next refresh tries again


def test_watch_goes_on_while_the_apiserver_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = Screen(terminal=False)
    silent = unreachable("GET", "/api/v1/namespaces/torchgate-system/services/x/proxy/v1/pool",
                         "Cannot connect to host 127.0.0.1:6443")  # fmt: skip
    show(monkeypatch, screen, [silent, VIEW.to_json()], watch=True)

    first, second = screen.getvalue().split("\n\n", 1)
    assert "cannot reach the cluster (GET /api/v1/namespaces/" in first
    assert second.startswith("torchgate top  nvidia.com/gpu:")


def test_once_without_an_answer_says_why_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = show(monkeypatch, Screen(terminal=False), [Unanswered("nobody home")], watch=False)

    assert code == 2
    assert "torchgate top: nobody home" in capsys.readouterr().err


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "soon"])
def test_an_interval_that_is_not_a_positive_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], interval: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["top", "--watch", "--interval", interval])

    assert exit_info.value.code == 2
    assert "argument --interval" in capsys.readouterr().err.splitlines()[-1]


def test_a_kubeconfig_whose_certificate_authority_is_not_pem_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {"server": "https://127.0.0.1:1", "certificate-authority": str(garbage)}
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    assert main(["top", "--kubeconfig", str(kubeconfig)]) == 2

    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"torchgate top: cannot use the kubeconfig's certificate authority {garbage}: "
        "no PEM certificate in it"
    )

"""The ``torchgate`` command line finds commands other distributions add, and names missing ones.

``dev`` is the one added command: torchgate-dev registers it in the ``torchgate.commands`` entry
point group (the tests run with it installed); without it, ``torchgate dev`` is a one-line usage
error that says how to install it. The wheel test checks the same with only the product installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import re
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml

from tests.builders.job import job
from torchgate import cli
from torchgate.webhook import check
from torchgate_dev import command as dev_command

REFUSED_SEED = (
    Path(__file__).resolve().parents[2].parent
    / "shared/seeds/manifests/002-resnet50-nccl-rdma-16.yaml"
)
PRODUCT_COMMANDS = ["webhook", "check", "controller", "certs", "explain", "simulate", "top"]


def installed_only(*added: EntryPoint) -> object:
    """A stand-in for ``entry_points`` that sees only ``added`` in the command group."""

    def entry_points(*, group: str) -> list[EntryPoint]:
        return list(added) if group == cli.ENTRY_POINT_GROUP else []

    return entry_points


def test_dev_comes_from_the_entry_point_torchgate_dev_registers() -> None:
    commands = cli.available_commands()
    summary = importlib.metadata.metadata("torchgate-dev")["Summary"]

    assert list(commands) == [*PRODUCT_COMMANDS, "dev"]
    assert commands["dev"].help == summary
    assert commands["dev"].command() is dev_command


def test_help_lists_the_added_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])

    assert exit_info.value.code == 0
    listed = re.findall(r"^ {4}(\S+)", capsys.readouterr().out, flags=re.MULTILINE)
    assert listed == [*PRODUCT_COMMANDS, "dev"]


def test_without_torchgate_dev_dev_is_one_line_saying_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "entry_points", installed_only())

    status = cli.main(["dev", "up", "--no-real-node"])

    assert status == cli.EXIT_USAGE == 2
    output = capsys.readouterr()
    assert output.out == ""
    (line,) = output.err.splitlines()
    assert "torchgate-dev" in line
    assert "pip install" in line
    assert list(cli.available_commands()) == PRODUCT_COMMANDS


def test_an_unknown_command_is_still_argparses_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "entry_points", installed_only())

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sideways"])

    assert exit_info.value.code == 2
    assert "invalid choice: 'sideways'" in capsys.readouterr().err


def test_a_product_command_is_never_replaced_by_an_added_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    impostor = EntryPoint(name="check", value="torchgate_dev.command", group=cli.ENTRY_POINT_GROUP)
    monkeypatch.setattr(cli, "entry_points", installed_only(impostor))

    commands = cli.available_commands()

    assert list(commands) == PRODUCT_COMMANDS
    assert commands["check"].command() is check


def test_an_added_command_without_distribution_metadata_names_its_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    added = EntryPoint(name="extra", value="torchgate_dev.command", group=cli.ENTRY_POINT_GROUP)
    monkeypatch.setattr(cli, "entry_points", installed_only(added))

    commands = cli.available_commands()

    assert commands["extra"].help == "from torchgate_dev.command"
    assert commands["extra"].command() is dev_command


def test_the_product_installs_a_kubectl_plugin_that_is_the_same_command() -> None:
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}

    # kubectl runs `kubectl-torchgate explain JOB` for `kubectl torchgate explain JOB`.
    assert scripts["kubectl-torchgate"] == scripts["torchgate"] == "torchgate.cli:main"


def test_a_reader_that_stops_early_ends_the_command_without_a_traceback() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "torchgate", "check", str(REFUSED_SEED)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()  # `| head -0`: the reader is gone before the first line
        stderr = process.stderr.read().decode()
        code = process.wait(timeout=60)

    assert code == cli.EXIT_BROKEN_PIPE == 141
    assert stderr == ""


def test_a_broken_pipe_in_any_command_is_the_same_quiet_exit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job("j").master().build()))
    monkeypatch.setattr(sys, "stdout", ClosedPipe())

    assert cli.main(["check", "-o", "json", str(manifest)]) == cli.EXIT_BROKEN_PIPE


@pytest.mark.parametrize(
    "arguments", [["check", "--bogus", "job.yaml"], ["--bogus", "check", "job.yaml"]]
)
def test_a_flag_the_command_does_not_know_is_that_commands_usage_error(
    capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(arguments)

    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: torchgate check ")
    assert err.splitlines()[-1] == "torchgate check: error: unrecognized arguments: --bogus"


def test_ctrl_c_ends_a_command_quietly_with_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Typing(io.StringIO):
        def read(self, size: int | None = -1) -> str:
            raise KeyboardInterrupt  # Ctrl-C while `torchgate check -` waits for stdin

    monkeypatch.setattr(sys, "stdin", Typing())

    assert cli.main(["check", "-"]) == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == ""


def test_version_prints_the_installed_distributions_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])

    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"torchgate {importlib.metadata.version('torchgate')}\n"


def test_every_controller_flag_with_a_default_names_it_in_its_help() -> None:
    """``torchgate controller --help`` says what each flag is when not given."""
    parser = cli.build_parser("controller")
    controller = next(
        a.choices["controller"]
        for a in parser._actions
        if isinstance(a, argparse._SubParsersAction) and "controller" in a.choices
    )
    silent = [
        action.option_strings[-1]
        for action in controller._actions
        if action.option_strings
        and action.default not in (None, False, argparse.SUPPRESS)
        and "default" not in (action.help or "")
    ]
    assert silent == []


@pytest.mark.parametrize(
    ("environment", "arguments", "expected"),
    [(None, [], 256), ("40", [], 40), ("40", ["--max-connections=7"], 7)],
)
def test_the_webhooks_connection_cap_is_its_flag_else_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch, environment: str | None, arguments: list[str], expected: int
) -> None:
    monkeypatch.delenv("TORCHGATE_WEBHOOK_MAX_CONNECTIONS", raising=False)
    if environment is not None:
        monkeypatch.setenv("TORCHGATE_WEBHOOK_MAX_CONNECTIONS", environment)
    required = ["--tls-cert-file=c", "--tls-private-key-file=k"]
    args = cli.build_parser("webhook").parse_args(["webhook", *required, *arguments])
    assert args.max_connections == expected


@pytest.mark.parametrize("environment", ["0", "many"])
def test_a_bad_connection_cap_in_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], environment: str
) -> None:
    monkeypatch.setenv("TORCHGATE_WEBHOOK_MAX_CONNECTIONS", environment)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["webhook", "--tls-cert-file=c", "--tls-private-key-file=k"])
    assert exit_info.value.code == 2
    assert "--max-connections" in capsys.readouterr().err

"""Command-line scanning: which flags are found, with which value, in which field."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchgate.webhook.arguments import (
    CommandLine,
    FlagUse,
    gpu_requests,
    parse_nnodes,
    scan_command_line,
    tokenize,
)

Found = tuple[str, str | None, str]  # (flag, value, field)


def found(uses: tuple[FlagUse, ...]) -> list[Found]:
    return [(use.flag, use.value, use.field) for use in uses]


BACKEND_CASES = [
    pytest.param([], ["--backend", "nccl"], [("--backend", "nccl", "args")], id="separate-token"),
    pytest.param([], ["--backend=gloo"], [("--backend", "gloo", "args")], id="equals"),
    pytest.param(
        ["python", "t.py", "--dist-backend", "nccl"],
        [],
        [("--dist-backend", "nccl", "command")],
        id="dist-backend-in-command",
    ),
    pytest.param(
        [], ["--dist_backend=nccl"], [("--dist_backend", "nccl", "args")], id="underscore"
    ),
    pytest.param(
        ["sh", "-c", "python t.py --backend nccl"],
        [],
        [("--backend", "nccl", "command")],
        id="inside-shell-string",
    ),
    pytest.param(
        ["bash", "-c"],
        ["cd /w && python t.py --backend=nccl --epochs 3"],
        [("--backend", "nccl", "args")],
        id="shell-script-in-args",
    ),
    pytest.param(
        ["sh", "-c", "python 't.py --backend nccl"],
        [],
        [("--backend", "nccl", "command")],
        id="unbalanced-quote-falls-back-to-whitespace",
    ),
    pytest.param(
        ["sh", "-c", "python t.py --backend 'nccl'"],
        [],
        [("--backend", "nccl", "command")],
        id="quoted-value",
    ),
    pytest.param([], ["--backend"], [("--backend", None, "args")], id="no-value"),
    pytest.param([], ["--backends=nccl", "--rdzv_backend=c10d"], [], id="other-flags-ignored"),
]


@pytest.mark.parametrize(("command", "args", "expected"), BACKEND_CASES)
def test_backend_flags(command: list[str], args: list[str], expected: list[Found]) -> None:
    assert found(scan_command_line(command, args).backends) == expected


STRAY_CASES = [
    pytest.param(["--world-size=16"], [("--world-size", "16", "args")], id="world-size"),
    pytest.param(["--world_size", "2"], [("--world_size", "2", "args")], id="world_size-separate"),
    pytest.param(["--rank", "0"], [("--rank", "0", "args")], id="rank"),
    pytest.param(["--rank"], [("--rank", None, "args")], id="rank-without-value"),
    pytest.param(
        ["--master_addr=h", "--master-port", "29500"],
        [
            ("--master_addr", "h", "args"),
            ("--master-port", "29500", "args"),
        ],
        id="master-addr-and-port",
    ),
    pytest.param(
        ["--node_rank=1", "--rdzv-endpoint=h:1"],
        [
            ("--node_rank", "1", "args"),
            ("--rdzv-endpoint", "h:1", "args"),
        ],
        id="torchrun-rendezvous-flags",
    ),
    pytest.param(["--rank-zero-only", "--ranks=2"], [], id="longer-flags-are-not-rank"),
    pytest.param(["--local-rank=0", "--local_rank", "1"], [], id="local-rank-is-not-stray"),
    pytest.param(["-rank", "0"], [], id="single-dash-is-not-the-flag"),
]


@pytest.mark.parametrize(("args", "expected"), STRAY_CASES)
def test_stray_flags(args: list[str], expected: list[Found]) -> None:
    assert found(scan_command_line(["python", "train.py"], args).stray) == expected


LAUNCHER_CASES = [
    pytest.param(
        ["torchrun", "--nnodes=2", "--nproc_per_node", "4", "train.py", "--nnodes=9"],
        [("--nnodes", "2", "command")],
        [("--nproc_per_node", "4", "command")],
        id="torchrun-options-stop-at-the-script",
    ),
    pytest.param(
        ["python", "train.py", "--nnodes=2", "--nproc-per-node=4"],
        [],
        [],
        id="script-flags-are-not-launcher-flags",
    ),
    pytest.param(
        ["python", "-m", "torch.distributed.run", "--nnodes", "1:4", "t.py"],
        [("--nnodes", "1:4", "command")],
        [],
        id="python-m-torch-distributed-run",
    ),
    pytest.param(
        ["python3", "-m", "torch.distributed.launch", "--nproc-per-node=8", "t.py"],
        [],
        [("--nproc-per-node", "8", "command")],
        id="torch-distributed-launch",
    ),
    pytest.param(
        ["/usr/local/bin/torchrun", "--standalone", "--nnodes=1", "t.py"],
        [("--nnodes", "1", "command")],
        [],
        id="switch-takes-no-value",
    ),
    pytest.param(
        ["torchrun", "--rdzv-backend", "c10d", "--nnodes", "3", "t.py"],
        [("--nnodes", "3", "command")],
        [],
        id="valued-option-skips-its-value",
    ),
    pytest.param(
        ["bash", "-c", "wget x -O /t.py; /usr/local/bin/torchrun --nnodes=3 /t.py --nnodes=5"],
        [("--nnodes", "3", "command")],
        [],
        id="launcher-after-shell-separator",
    ),
    pytest.param(
        ["sh", "-c", "echo torchrun; python t.py --nnodes=2"],
        [],
        [],
        id="separator-ends-launcher-options",
    ),
    pytest.param(
        ["sh", "-c", "torchrun \\\n  --nnodes=2 \\\n  t.py"],
        [("--nnodes", "2", "command")],
        [],
        id="line-continuation",
    ),
    pytest.param(
        ["sh", "-c", "torchrun\n--nnodes=2 t.py"],
        [],
        [],
        id="newline-ends-the-command",
    ),
]


@pytest.mark.parametrize(("argv", "nnodes", "nproc"), LAUNCHER_CASES)
def test_launcher_options(argv: list[str], nnodes: list[Found], nproc: list[Found]) -> None:
    line = scan_command_line(argv, [])
    assert (found(line.nnodes), found(line.nproc_per_node)) == (nnodes, nproc)


def test_launcher_split_between_command_and_args_keeps_each_field() -> None:
    line = scan_command_line(["torchrun"], ["--nnodes", "2", "train.py"])
    assert found(line.nnodes) == [("--nnodes", "2", "args")]
    assert line.uses_launcher


def test_flag_value_in_the_next_field() -> None:
    line = scan_command_line(["python", "t.py", "--backend"], ["nccl"])
    assert found(line.backends) == [("--backend", "nccl", "command")]


def test_values_from_shell_scripts_are_marked() -> None:
    line = scan_command_line(["sh", "-c", "torchrun --nnodes=$N t.py"], ["--rank=1"])
    assert [use.in_shell for use in (*line.nnodes, *line.stray)] == [True, False]


@pytest.mark.parametrize(
    ("use", "written"),
    [
        pytest.param(FlagUse("--rank", "0", "args"), "--rank=0", id="inline"),
        pytest.param(FlagUse("--rank", "0", "args", inline=False), "--rank 0", id="separate"),
        pytest.param(FlagUse("--rank", None, "args"), "--rank", id="bare"),
    ],
)
def test_written_form(use: FlagUse, written: str) -> None:
    assert use.written == written


def test_nothing_to_find_in_an_empty_command_line() -> None:
    assert scan_command_line([], []) == CommandLine()


def test_tokenize_splits_interesting_script_lines_only() -> None:
    tokens = tokenize(["sh", "-c", "echo 'hi there'\ntorchrun 'a b' --nnodes=2|tee x"], [])
    words = [t.text for t in tokens if not t.ends_command]
    assert words == ["sh", "-c", "torchrun", "a b", "--nnodes=2", "tee", "x"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("2", (2, 2), id="single"),
        pytest.param("1:4", (1, 4), id="range"),
        pytest.param(" 3 ", (3, 3), id="spaces"),
        pytest.param("1:", None, id="open-range"),
        pytest.param(":4", None, id="missing-min"),
        pytest.param("two", None, id="word"),
        pytest.param("$NUM_NODES", None, id="variable"),
        pytest.param("-1", None, id="negative"),
    ],
)
def test_parse_nnodes(value: str, expected: tuple[int, int] | None) -> None:
    assert parse_nnodes(value) == expected


@pytest.mark.parametrize("value", ["9" * 5000, "1:" + "9" * 5000], ids=["count", "range"])
def test_nnodes_of_more_digits_than_any_count_are_not_parsed(value: str) -> None:
    assert parse_nnodes(value) is None  # 5000 digits: once a ValueError


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failure
@given(st.lists(st.text(max_size=40), max_size=6), st.lists(st.text(max_size=40), max_size=6))
def test_never_raises_on_any_strings(command: list[str], args: list[str]) -> None:
    scan_command_line(command, args)


def shlex_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return line.split()


@settings(deadline=None, max_examples=500)
@given(st.text(alphabet=" \t\r'\"();|&<>$=-./:#\\\xa0ab", max_size=30))
def test_script_lines_split_like_shlex(rest: str) -> None:
    line = "torchrun " + rest
    tokens = tokenize(["sh", "-c", line], [])
    assert [token.text for token in tokens[3:-1]] == shlex_words(line)


GPU_REQUEST_CASES = [
    pytest.param(["--gpus", "2"], [("--gpus", "2", "args")], id="lightning-gpus"),
    pytest.param(["--gpus=-1"], [("--gpus", "-1", "args")], id="gpus-all"),
    pytest.param(["--gpus", "0,1"], [("--gpus", "0,1", "args")], id="gpus-list"),
    pytest.param(["--gpus", "0"], [], id="gpus-zero-is-cpu"),
    pytest.param(["--num_gpus=4"], [("--num_gpus", "4", "args")], id="num-gpus"),
    pytest.param(["--gpus-per-node", "8"], [("--gpus-per-node", "8", "args")], id="per-node"),
    pytest.param(
        ["--accelerator", "gpu", "--devices", "2"],
        [("--accelerator", "gpu", "args"), ("--devices", "2", "args")],
        id="accelerator-gpu-and-devices",
    ),
    pytest.param(["--accelerator=cuda"], [("--accelerator", "cuda", "args")], id="cuda"),
    pytest.param(["--accelerator", "cpu", "--devices", "4"], [], id="cpu-devices-are-processes"),
    pytest.param(["--devices", "2"], [], id="devices-without-accelerator"),
    pytest.param(["--device", "cuda:0"], [("--device", "cuda:0", "args")], id="torch-device"),
    pytest.param(["--device", "cpu"], [], id="torch-device-cpu"),
    pytest.param(["--cuda", "--epochs", "3"], [("--cuda", None, "args")], id="cuda-switch"),
    pytest.param(["--use_gpu", "false"], [], id="switch-turned-off"),
    pytest.param(["--no-cuda"], [], id="no-cuda"),
    pytest.param(["--gpus", "$(NUM_GPUS)"], [], id="expanded-by-kubernetes"),
]


@pytest.mark.parametrize(("args", "expected"), GPU_REQUEST_CASES)
def test_gpu_requests(args: list[str], expected: list[Found]) -> None:
    assert found(gpu_requests(scan_command_line([], args))) == expected


def test_gpu_requests_inside_a_shell_script() -> None:
    line = scan_command_line(["bash", "-c", "cd /w\npython fit.py --accelerator gpu"], [])
    assert found(gpu_requests(line)) == [("--accelerator", "gpu", "command")]

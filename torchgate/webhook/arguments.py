"""Scanning a container's command line for the distributed-training flags torchgate cares about.

Why scan command lines at all: the controller injects the rendezvous environment (``WORLD_SIZE``,
``RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` and torchrun's ``PET_*`` variables), and a flag on the
command line silently wins over it. A hand-written ``--world-size=16`` is the classic case: once
the job is resized the flag is stale, and training hangs. Flags also reveal the process-group
backend (``--backend nccl`` on a CPU-only replica cannot work) and torchrun's ``--nnodes`` /
``--nproc-per-node``, which must agree with the job's replica counts and GPUs.

What counts as the command line: Kubernetes runs ``command + args`` as one argv, so both are
scanned as one token stream and every finding remembers which of the two fields holds it. An
element containing whitespace is treated as a shell script (``["sh", "-c", "python t.py ..."]``)
and tokenised with ``shlex``; bad quoting falls back to whitespace splitting, never an exception.
Only the lines of a script that mention a flag or launcher of interest are tokenised: SDK-generated
jobs embed whole Python programs in a ``bash -c`` string, and ``shlex`` costs about a microsecond
per character, which the webhook's latency budget cannot afford for text that cannot matter.

``--nnodes`` and ``--nproc-per-node`` are read only from the options of a torchrun-style launcher
(``torchrun``, ``python -m torch.distributed.run`` or ``...launch``), up to the training script:
a user's own script may define flags with the same names.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from torchgate.pytorchjob import contract
from torchgate.pytorchjob.digits import parse_integer

ArgvField = Literal["command", "args"]

BACKEND_FLAGS: Final = frozenset({"--backend", "--dist-backend", "--dist_backend"})

# Flag spelling -> the environment variable the controller injects instead.
STRAY_FLAGS: Final = contract.STRAY_FLAGS

# Framework flags that can ask for GPUs (Lightning's Trainer flags, common script conventions).
# Which values ask for GPUs is decided by ``gpu_requests``.
GPU_COUNT_FLAGS: Final = frozenset(
    {
        "--gpus",
        "--gpus-per-node",
        "--gpus_per_node",
        "--num-gpus",
        "--num_gpus",
        "--ngpus",
        "--n-gpus",
        "--n_gpus",
        "--n_gpu",
    }
)
GPU_SWITCHES: Final = frozenset({"--cuda", "--use-cuda", "--use_cuda", "--use-gpu", "--use_gpu"})
ACCELERATOR_FLAGS: Final = frozenset({"--accelerator"})
DEVICES_FLAGS: Final = frozenset({"--devices"})
DEVICE_FLAGS: Final = frozenset({"--device"})
_GPU_FLAGS: Final = (
    GPU_COUNT_FLAGS | GPU_SWITCHES | ACCELERATOR_FLAGS | DEVICES_FLAGS | DEVICE_FLAGS
)
_GPU_ACCELERATORS: Final = frozenset({"gpu", "cuda"})
_FALSE_VALUES: Final = frozenset({"false", "0", "no", "off"})

NNODES_FLAGS: Final = frozenset({"--nnodes"})
NPROC_FLAGS: Final = frozenset({"--nproc-per-node", "--nproc_per_node"})

LAUNCHER_MODULES: Final = frozenset({"torch.distributed.run", "torch.distributed.launch"})
_LAUNCHER_PROGRAM: Final = "torchrun"

# torchrun / torch.distributed.launch options that take no value; every other option does.
_LAUNCHER_SWITCHES: Final = frozenset(
    {
        "--standalone",
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--use-env",
        "--use_env",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)

# A cheap filter for script lines worth tokenising (a superset of what the scan looks for).
_INTERESTING = re.compile(
    r"--(?:backend|dist[-_]backend|world[-_]size|rank|master[-_]addr|master[-_]port|"
    r"node[-_]rank|rdzv[-_]endpoint|nnodes|nproc[-_]per[-_]node|"
    r"n_?gpus?|gpus|num[-_]gpus|n-gpus|devices?|accelerator|cuda|use[-_](?:cuda|gpu))"
    r"|torchrun|torch\.distributed\.(?:run|launch)"
)
_INTERESTING_PREFIXES: Final = ("--", "torchrun", "torch.distributed.")
# shlex(posix, whitespace_split, punctuation_chars) splits exactly like these when a line has no
# escapes or comments and its quotes are balanced, at a fraction of the cost.
_SIMPLE_LINE = re.compile(r"[();<>|&]+|[^ \t\r\n();<>|&]+")
_QUOTED_LINE = re.compile(r"""[();<>|&]++|(?:[^ \t\r\n'"();<>|&]++|'[^']*+'|"[^"]*+")++""")
_QUOTED_PART = re.compile(r"""'([^']*)'|"([^"]*)"|([^'"]+)""")
_NEEDS_SHLEX = re.compile(r"[\\#]")
_PUNCTUATION = frozenset("();<>|&")
_NNODES = re.compile(r"^([0-9]+)(?::([0-9]+))?$")


class Token(NamedTuple):
    """One word of the argv, or a shell command boundary (``ends_command``)."""

    text: str
    field: ArgvField
    # Came from a shell script, where the shell expands $VARIABLES before the program sees them.
    in_shell: bool = False
    ends_command: bool = False


@dataclass(frozen=True, slots=True)
class FlagUse:
    """One occurrence of a flag: how it was spelled, its value and where it was found."""

    flag: str
    value: str | None
    field: ArgvField
    in_shell: bool = False
    inline: bool = True  # "--flag=value" (True) or "--flag value" (False)

    @property
    def written(self) -> str:
        """The flag as the user wrote it, for messages (``--world-size=16``)."""
        if self.value is None:
            return self.flag
        return f"{self.flag}={self.value}" if self.inline else f"{self.flag} {self.value}"


@dataclass(frozen=True, slots=True)
class CommandLine:
    """What a container's command line says about distributed training."""

    backends: tuple[FlagUse, ...] = ()
    stray: tuple[FlagUse, ...] = ()
    nnodes: tuple[FlagUse, ...] = ()
    nproc_per_node: tuple[FlagUse, ...] = ()
    uses_launcher: bool = False
    # Framework flags that may ask for GPUs (``--gpus``, ``--accelerator``, ``--device``...).
    gpu_flags: tuple[FlagUse, ...] = ()
    # The names of the flag kinds above that the line has: a rule about one kind runs only then.
    said: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kinds = ("backends", "stray", "nnodes", "nproc_per_node", "gpu_flags")
        object.__setattr__(self, "said", tuple(kind for kind in kinds if getattr(self, kind)))


_NOTHING_FOUND: Final = CommandLine()


def tokenize(command: Sequence[str], args: Sequence[str]) -> list[Token]:
    """The argv ``command + args`` as tokens.

    An element containing whitespace is a shell script: it contributes the words of its lines
    that mention a flag or launcher of interest, each line closed by an ``ends_command`` token.
    """
    return [*_element_tokens(command, "command"), *_element_tokens(args, "args")]


def scan_command_line(command: Sequence[str], args: Sequence[str]) -> CommandLine:
    """Find backend, stray and launcher flags in ``command + args``."""
    if not command and not args:
        return _NOTHING_FOUND
    tokens = tokenize(command, args)
    backends: list[FlagUse] = []
    stray: list[FlagUse] = []
    nnodes: list[FlagUse] = []
    nproc: list[FlagUse] = []
    gpu_flags: list[FlagUse] = []
    uses_launcher = False
    for index, (text, _, _, ends_command) in enumerate(tokens):
        if text.startswith("--"):
            name, equals, value = text.partition("=")
            if name in BACKEND_FLAGS:
                backends.append(_flag_use(tokens, index, name, value if equals else None))
            elif name in STRAY_FLAGS:
                stray.append(_flag_use(tokens, index, name, value if equals else None))
            elif name in _GPU_FLAGS:
                gpu_flags.append(_flag_use(tokens, index, name, value if equals else None))
        elif "torch" in text and not ends_command and is_launcher_start(tokens, index):
            uses_launcher = True
            for position in _launcher_option_indexes(tokens, index + 1):
                name, equals, value = tokens[position].text.partition("=")
                if name in NNODES_FLAGS:
                    nnodes.append(_flag_use(tokens, position, name, value if equals else None))
                elif name in NPROC_FLAGS:
                    nproc.append(_flag_use(tokens, position, name, value if equals else None))
    return CommandLine(
        tuple(backends),
        tuple(stray),
        tuple(nnodes),
        tuple(nproc),
        uses_launcher,
        tuple(gpu_flags),
    )


def gpu_requests(line: CommandLine) -> tuple[FlagUse, ...]:
    """The flags of ``line`` that ask the framework for GPUs.

    ``--gpus N`` (and the ``--num-gpus`` family) with N > 0, -1 (all) or a device list;
    ``--accelerator gpu`` (or ``cuda``); ``--devices N`` only beside such an accelerator (with
    ``--accelerator cpu`` it counts processes); ``--device cuda[:i]``; a ``--cuda`` /
    ``--use-gpu`` switch not followed by a false value. A value the shell or Kubernetes expands
    is not judged.
    """
    uses = [use for use in line.gpu_flags if not expanded_at_runtime(use)]
    accelerators = [(u.value or "").lower() for u in uses if u.flag in ACCELERATOR_FLAGS]
    on_gpu = any(value in _GPU_ACCELERATORS for value in accelerators)
    asking: list[FlagUse] = []
    for use in uses:
        value = (use.value or "").strip().lower()
        if use.flag in GPU_COUNT_FLAGS:
            wanted = _asks_for_devices(value)
        elif use.flag in GPU_SWITCHES:
            wanted = use.value is None or value not in _FALSE_VALUES
        elif use.flag in ACCELERATOR_FLAGS:
            wanted = value in _GPU_ACCELERATORS
        elif use.flag in DEVICES_FLAGS:
            wanted = on_gpu and _asks_for_devices(value)
        else:
            wanted = value == "gpu" or value.startswith("cuda")
        if wanted:
            asking.append(use)
    return tuple(asking)


def _asks_for_devices(value: str) -> bool:
    """Whether a device-count value asks for at least one device (N > 0, -1, auto, a list)."""
    if value in ("-1", "auto"):
        return True
    if value.isascii() and value.isdigit():
        return value.strip("0") != ""  # N > 0, however many digits
    return "," in value or value.startswith("[")


def expanded_at_runtime(use: FlagUse) -> bool:
    """Whether a flag value is a variable something expands before the program sees it."""
    value = use.value or ""
    return "$(" in value or (use.in_shell and "$" in value)


def parse_nnodes(value: str) -> tuple[int, int] | None:
    """Parse torchrun's ``--nnodes``: ``N`` gives ``(N, N)``, ``MIN:MAX`` gives ``(MIN, MAX)``."""
    match = _NNODES.match(value.strip())
    if not match:
        return None
    low = parse_integer(match[1])
    high = parse_integer(match[2]) if match[2] is not None else low
    if low is None or high is None:  # more digits than any count
        return None
    return low, high


def is_launcher_start(tokens: Sequence[Token], index: int) -> bool:
    """Whether ``tokens[index]`` begins a torchrun-style launcher (its options follow)."""
    text = tokens[index].text
    if text.endswith(_LAUNCHER_PROGRAM):
        return text == _LAUNCHER_PROGRAM or text.endswith("/" + _LAUNCHER_PROGRAM)
    return text in LAUNCHER_MODULES and index > 0 and tokens[index - 1].text == "-m"


# ------------------------------------------------------------------ internals


def _element_tokens(elements: Sequence[str], field: ArgvField) -> list[Token]:
    tokens: list[Token] = []
    for element in elements:
        if " " in element or "\n" in element or "\t" in element:
            tokens.extend(_script_tokens(element, field))
        else:
            tokens.append(Token(element, field))
    return tokens


def _script_tokens(script: str, field: ArgvField) -> list[Token]:
    boundary = Token("", field, in_shell=True, ends_command=True)
    out = [boundary]
    for line in _interesting_lines(script.replace("\\\n", " ")):
        out.extend(
            Token(word, field, in_shell=True, ends_command=_is_separator(word))
            for word in _split_line(line)
        )
        out.append(boundary)
    return out


def _interesting_lines(script: str) -> list[str]:
    """The lines of ``script`` that mention a flag or launcher of interest, in order."""
    lines: list[str] = []
    taken_until = -1
    for match in _interesting_matches(script):
        if match.start() < taken_until:
            continue  # another match on a line already taken
        start = script.rfind("\n", 0, match.start()) + 1
        end = script.find("\n", match.end())
        taken_until = len(script) if end == -1 else end
        lines.append(script[start:taken_until])
    return lines


def _interesting_matches(text: str) -> list[re.Match[str]]:
    """Matches of ``_INTERESTING`` in ``text``, in order.

    Tries the pattern only where one of its literal prefixes occurs: ``str.find`` skips through
    a 40 kB script several times faster than the regex engine scans it.
    """
    found: list[re.Match[str]] = []
    for prefix in _INTERESTING_PREFIXES:
        position = text.find(prefix)
        while position != -1:
            match = _INTERESTING.match(text, position)
            if match is not None:
                found.append(match)
            position = text.find(prefix, position + 1)
    found.sort(key=lambda match: match.start())
    return found


def _split_line(line: str) -> list[str]:
    if not _NEEDS_SHLEX.search(line):
        if "'" not in line and '"' not in line:
            return _SIMPLE_LINE.findall(line)
        words = _quoted_words(line)
        if words is not None:
            return words
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: the shell would refuse it too; split on whitespace
        return line.split()


def _quoted_words(line: str) -> list[str] | None:
    """The words of a line with quotes but no escapes; None when a quote is left open."""
    words: list[str] = []
    position = 0
    for match in _QUOTED_LINE.finditer(line):
        if line[position : match.start()].strip(" \t\r\n"):
            return None  # an unmatched quote was skipped
        word = match[0]
        words.append(_unquote(word) if "'" in word or '"' in word else word)
        position = match.end()
    return None if line[position:].strip(" \t\r\n") else words


def _unquote(word: str) -> str:
    return "".join(part[part.lastindex or 0] for part in _QUOTED_PART.finditer(word))


def _is_separator(word: str) -> bool:
    return bool(word) and all(char in _PUNCTUATION for char in word)


def _flag_use(tokens: Sequence[Token], index: int, name: str, value: str | None) -> FlagUse:
    token = tokens[index]
    if value is not None:
        return FlagUse(name, value, token.field, token.in_shell)
    following = tokens[index + 1] if index + 1 < len(tokens) else None
    if following is None or following.ends_command or following.text.startswith("-"):
        return FlagUse(name, None, token.field, token.in_shell)
    return FlagUse(name, following.text, token.field, token.in_shell, inline=False)


def _launcher_option_indexes(tokens: Sequence[Token], start: int) -> list[int]:
    """Indexes of a launcher's own option tokens (values included), up to its script."""
    indexes: list[int] = []
    position = start
    while position < len(tokens):
        token = tokens[position]
        if token.ends_command or not token.text.startswith("-") or token.text == "--":
            break  # the training script (or "--") ends the launcher's own options
        indexes.append(position)
        position += 1
        takes_value = "=" not in token.text and token.text not in _LAUNCHER_SWITCHES
        if takes_value and position < len(tokens) and not tokens[position].ends_command:
            indexes.append(position)
            position += 1
    return indexes

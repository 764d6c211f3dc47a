"""``torchgate`` command line: one entry point, one module per subcommand.

Subcommand modules are imported only when used, so ``torchgate check`` starts without loading the
Kubernetes client and ``torchgate webhook`` without the controller. Each module provides
``add_arguments(parser)`` and ``run(args) -> int`` (the process exit code).

Rules:

1. The product's commands are declared here (:data:`COMMANDS`); they are all there is in the
   product's wheel and image.
2. Other installed distributions add commands through the :data:`ENTRY_POINT_GROUP` entry points
   (name -> module). Their help line is the distribution's summary, read from its metadata, so
   listing them imports none of them. A product command is never replaced by one.
3. A command that another distribution provides (:data:`PROVIDED_ELSEWHERE`), asked for while that
   distribution is not installed, gets one line saying how to install it and exit code 2 (a usage
   error), not argparse's list of choices.
4. Output read by a reader that stops early (``torchgate check ... | head``) ends the command
   quietly, as SIGPIPE ends ``cat``: no traceback, exit code :data:`EXIT_BROKEN_PIPE`, which no
   command uses for a verdict (0, 1 and 2 keep their meaning).
5. A usage error of a selected command (a flag it does not know) shows that command's usage,
   exit code 2.
6. Ctrl-C ends a command quietly with :data:`EXIT_INTERRUPTED`, as SIGINT ends ``cat``, unless the
   command handles it itself (``top --watch`` ends with 0, the servers shut down gracefully).
7. ``--version`` prints the installed distribution's version (:func:`product_version`), what a
   bug report and an upgrade check need first.
8. A command of :data:`STOPPED_BY_SIGNAL` (the pods' long-running ones) has SIGTERM and SIGINT
   caught from the moment it is selected, before its module is imported
   (:mod:`torchgate.stopsignals`): one that comes while it starts ends it cleanly once its loop
   runs, not with Python's default (exit code 143). Their one-shot forms (``controller stop``,
   ``certs`` without ``--watch``) give the signals back as they start.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version
from typing import Final, NoReturn, Protocol, cast

from torchgate import stopsignals

# name -> (module, one-line help)
COMMANDS: Final[Mapping[str, tuple[str, str]]] = {
    "webhook": (
        "torchgate.webhook.command",
        "run the mutating and validating admission webhook (TLS)",
    ),
    "check": (
        "torchgate.webhook.check",
        "run the webhook's defaulting and validation on files, offline",
    ),
    "controller": ("torchgate.controller.command", "run the gang controller for PyTorchJobs"),
    "certs": (
        "torchgate.certs.command",
        "create or renew the webhook certificates; patch caBundle",
    ),
    "explain": (
        "torchgate.ask.explain",
        "why a PyTorchJob waits (its place in the queue), or where and since when it runs",
    ),
    "simulate": (
        "torchgate.ask.simulate",
        "would these jobs start now, where, whom would they preempt (dry run + forecast)",
    ),
    "top": (
        "torchgate.ask.top",
        "the pool on one screen: teams, topology domains, unusable nodes, the queue's head",
    ),
}

ENTRY_POINT_GROUP: Final = "torchgate.commands"
"""Entry points of this group add commands: ``name = "package.module"``."""

PROVIDED_ELSEWHERE: Final[Mapping[str, tuple[str, str]]] = {
    "dev": ("torchgate-dev", "pip install torchgate-dev; in a checkout: pip install -e ./dev"),
}
"""name -> (the distribution that provides it, how to install that)."""

STOPPED_BY_SIGNAL: Final = frozenset({"controller", "webhook", "certs"})
"""Commands that stop cleanly on SIGTERM or SIGINT from their first moment (rule 8)."""

EXIT_USAGE: Final = 2
EXIT_BROKEN_PIPE: Final = 128 + signal.SIGPIPE
"""What a shell reports for a process SIGPIPE ended (rule 4)."""
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
"""What a shell reports for a process SIGINT ended (rule 6)."""


class Command(Protocol):
    """What a subcommand module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the subcommand's flags."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the subcommand and return the exit code."""


@dataclass(frozen=True, slots=True)
class Subcommand:
    """One command of ``torchgate``: its help line, and how to import its module."""

    help: str
    load: Callable[[], object]

    def command(self) -> Command:
        """The subcommand's module (imported now)."""
        return cast(Command, self.load())


def _product_command(module: str, help_text: str) -> Subcommand:
    return Subcommand(help_text, lambda: importlib.import_module(module))


def _added_command(entry_point: EntryPoint) -> Subcommand:
    distribution = entry_point.dist
    summary = distribution.metadata["Summary"] if distribution is not None else None
    return Subcommand(summary or f"from {entry_point.value}", entry_point.load)


def available_commands() -> dict[str, Subcommand]:
    """The product's commands, then those installed distributions add (rules 1 and 2)."""
    commands = {name: _product_command(*declared) for name, declared in COMMANDS.items()}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        commands.setdefault(entry_point.name, _added_command(entry_point))
    return commands


class _TopLevelParser(argparse.ArgumentParser):
    """``torchgate``'s parser: its errors, once a command is selected, are that command's (rule 5).

    argparse hands the flags a command does not know up to the top level, which would answer
    ``usage: torchgate [-h] COMMAND ...`` for ``torchgate check -x``.
    """

    command_parser: argparse.ArgumentParser | None = None

    def error(self, message: str) -> NoReturn:
        """Report ``message`` with the selected command's usage, else with the top level's."""
        if self.command_parser is not None:
            self.command_parser.error(message)
        super().error(message)


def build_parser(
    selected: str | None, commands: Mapping[str, Subcommand] | None = None
) -> argparse.ArgumentParser:
    """The top-level parser; only ``selected`` gets its flags loaded."""
    known = available_commands() if commands is None else commands
    parser = _TopLevelParser(
        prog="torchgate",
        description="Admission webhook, placement policies and gang controller for PyTorchJobs.",
    )
    parser.add_argument(
        "--version", action="version", version=f"torchgate {product_version()}", help="print it"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, subcommand in known.items():
        if name == selected:
            sub_parser = sub.add_parser(name, help=subcommand.help, description=subcommand.help)
            subcommand.command().add_arguments(sub_parser)
            parser.command_parser = sub_parser
        else:
            sub.add_parser(name, help=subcommand.help, add_help=False)
    return parser


def product_version() -> str:
    """The installed torchgate distribution's version (``unknown`` when run from a bare tree)."""
    try:
        return version("torchgate")
    except PackageNotFoundError:
        return "unknown"


def missing_command_message(name: str) -> str | None:
    """One line on how to get ``name`` when another distribution provides it (rule 3), else None."""
    if name not in PROVIDED_ELSEWHERE:
        return None
    distribution, install = PROVIDED_ELSEWHERE[name]
    return f"torchgate: '{name}' comes with {distribution}, which is not installed ({install})"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchgate`` console script (and of ``kubectl-torchgate``).

    Installed as ``kubectl-torchgate`` too, so ``kubectl torchgate explain JOB`` works: kubectl
    runs the plugin named after its first argument with the arguments that follow.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in arguments if not a.startswith("-")), None)
    if selected in STOPPED_BY_SIGNAL:
        stopsignals.PROCESS.catch()
    commands = available_commands()
    if selected is not None and selected not in commands:
        message = missing_command_message(selected)
        if message is not None:
            print(message, file=sys.stderr)
            return EXIT_USAGE
    parser = build_parser(selected if selected in commands else None, commands)
    args = parser.parse_args(arguments)
    try:
        code = commands[args.command].command().run(args)
        sys.stdout.flush()  # here, not at interpreter exit, where a closed pipe prints a traceback
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush meets no closed pipe (rule 4)."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())

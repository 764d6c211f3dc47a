"""``torchgate`` command line: one entry point, one module per subcommand.

Subcommand modules are imported only when used, so ``torchgate check`` starts without loading the
Kubernetes client and ``torchgate webhook`` without the controller. Each module provides
``add_arguments(parser)`` and ``run(args) -> int`` (the process exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
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
    "dev": ("torchgate.dev", "start or stop a local control plane with fake GPU nodes"),
}


class Command(Protocol):
    """What a subcommand module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the subcommand's flags."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the subcommand and return the exit code."""


def _load(name: str) -> Command:
    return cast(Command, importlib.import_module(COMMANDS[name][0]))


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    """The top-level parser; only ``selected`` gets its flags loaded."""
    parser = argparse.ArgumentParser(
        prog="torchgate",
        description="Admission webhook, placement policies and gang controller for PyTorchJobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        if name == selected:
            sub_parser = sub.add_parser(name, help=help_text, description=help_text)
            _load(name).add_arguments(sub_parser)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchgate`` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in arguments if not a.startswith("-")), None)
    parser = build_parser(selected if selected in COMMANDS else None)
    args = parser.parse_args(arguments)
    return _load(args.command).run(args)


if __name__ == "__main__":
    raise SystemExit(main())

"""``torchgate top [--watch]``: the pool on one screen, from the controller's pool view.

Why the pool view and not the objects a user can read: the view is the admission cycle's own
state (the waiting queue in admission order with each job's live reason, the ledger's GPUs per
node including nodes held for preemptors, what each team borrows and lends), which TeamQuota
status, nodes and pods only approximate, and a user who may read the pool view (``get`` on
``pools.torchgate.io``) needs no cluster-wide read of nodes and pods. It comes through the
apiserver's proxy with the user's own credentials (``channel``).

Rules:

1. On a terminal the screen is cut to its width and, with ``--watch``, redrawn in place every
   ``--interval`` seconds (cursor home, clear); anywhere else (a pipe, a file) the output is plain
   text, never cut, with no escape sequence, and ``--watch`` prints one screen after another,
   separated by a blank line. The interval is more than 0 seconds (a usage error otherwise).
2. When the controller does not answer, or the apiserver whose proxy leads to it, one line says
   why on stderr: exit 2 (with ``--watch`` the screen says so and the next refresh tries again).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from datetime import UTC, datetime
from typing import TextIO

from torchgate.ask.channel import (
    PoolChannel,
    Unanswered,
    add_channel_arguments,
    cluster_problem,
    target_from,
)
from torchgate.ask.poolscreen import render
from torchgate.kube.client import ConfigError, KubeClient
from torchgate.kube.errors import ApiError
from torchgate.pytorchjob.outlook import POOL_PATH, MalformedAnswer, pool_from_json

HOME_AND_CLEAR = "\x1b[H\x1b[2J"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``torchgate top`` flags."""
    parser.add_argument("-w", "--watch", action="store_true", help="refresh until interrupted")
    parser.add_argument(
        "--interval",
        type=_positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="with --watch (default 2)",
    )
    add_channel_arguments(parser)
    parser.epilog = "exit codes: 0 shown, 2 the controller did not answer (without --watch)"


def _positive_seconds(text: str) -> float:
    """``--interval``: seconds above 0 (0 or less would ask the controller in a tight loop)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return seconds


def run(args: argparse.Namespace) -> int:
    """Show the pool once, or until interrupted with ``--watch``; return the exit code."""
    try:
        return asyncio.run(_run(args, sys.stdout))
    except KeyboardInterrupt:
        return 0
    except (ConfigError, ApiError) as exc:
        print(f"torchgate top: {cluster_problem(exc)}", file=sys.stderr)
        return 2


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    terminal = out.isatty()
    api = await KubeClient.connect(args.kubeconfig)
    channel = PoolChannel(
        api, target_from(args.controller, args.controller_ca, args.controller_namespace, os.environ)
    )
    try:
        first = True
        while True:
            width = _columns(out) if terminal else None
            lines, problem = await _screen(channel, width)
            if problem is not None and not args.watch:
                print(f"torchgate top: {problem}", file=sys.stderr)
                return 2
            if terminal and args.watch:
                out.write(HOME_AND_CLEAR)
            elif not first:
                out.write("\n")
            out.write("".join(f"{line}\n" for line in lines))
            out.flush()
            first = False
            if not args.watch:
                return 0
            await asyncio.sleep(args.interval)
    finally:
        await channel.close()
        await api.close()


def _columns(out: TextIO) -> int:
    """The terminal's own width (not ``$COLUMNS``, which a shell may have left stale)."""
    try:
        return os.get_terminal_size(out.fileno()).columns
    except OSError:
        return shutil.get_terminal_size().columns


async def _screen(channel: PoolChannel, width: int | None) -> tuple[list[str], str | None]:
    """The lines to show and, when the controller did not answer, why."""
    now = datetime.now(UTC)
    try:
        view = pool_from_json(await channel.get(POOL_PATH))
    except Unanswered as exc:
        problem = str(exc)
    except MalformedAnswer as exc:
        problem = f"the controller's answer was malformed: {exc}"
    except ApiError as exc:  # the apiserver itself did not answer (channel rule 4)
        problem = cluster_problem(exc)
    else:
        return render(view, now, width=width), None
    line = f"torchgate top  {now.strftime('%Y-%m-%d %H:%M:%S %Z')}  {problem}"
    return [line[:width] if width else line], problem

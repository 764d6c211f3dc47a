"""SIGTERM and SIGINT for the long-running commands, caught from the process's first moment.

Kubernetes sends a pod SIGTERM at any moment, a rollout's right after the container started. Until
a command's event loop runs, Python's defaults would end the process at once (143 for SIGTERM, a
traceback and 130 for SIGINT) while it imports its modules, loads its certificate or kubeconfig or
waits on an exec credential plugin. So the CLI catches both signals before it imports the command
at all (``cli`` rule 8), a caught signal is only noted, and the command's loop takes the signals
over (:meth:`StopSignals.run`): its stop event is set at once when one was noted before. Each step
of the start that waits races that event (:func:`unless_stopped`). The commands that stop this
way are the pods' long-running ones: ``torchgate controller``, ``torchgate webhook`` and
``torchgate certs --watch`` (the webhook's sidecar). A one-shot command the CLI cannot tell apart
before the import (``torchgate controller stop``, ``torchgate certs`` without ``--watch``) gives
them back (``release``) and ends on them as any command does.

Signal handlers belong to the process, so their state does too: :data:`PROCESS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
T = TypeVar("T")


class StopSignals:
    """SIGTERM and SIGINT noted until an event loop takes them over."""

    def __init__(self) -> None:
        self.caught: int | None = None  # the signal noted, if any

    def catch(self) -> None:
        """Note the signals from now on instead of dying of them.

        Also after an event loop's close, which gives them back to Python's defaults: the process
        is ending already and keeps its clean exit code to the end.
        """
        for signum in SIGNALS:
            signal.signal(signum, self._note)

    def attach(self, loop: asyncio.AbstractEventLoop) -> asyncio.Event:
        """The stop event, set by ``loop`` on either signal (already set when one came before)."""
        stop = asyncio.Event()
        for signum in SIGNALS:
            loop.add_signal_handler(signum, stop.set)
        if self.caught is not None:  # read after the loop took over: none falls between the two
            stop.set()
        return stop

    def run(self, main: Callable[[asyncio.Event], Coroutine[Any, Any, T]]) -> T:
        """``main(stop)`` in a new event loop that takes the signals over (``attach``).

        The signals are caught before (the CLI did already; a caller that is not the CLI gets
        the same) and again once the loop has closed, which gave them back to Python's defaults.
        """
        self.catch()

        async def attached() -> T:
            return await main(self.attach(asyncio.get_running_loop()))

        try:
            return asyncio.run(attached())
        finally:
            self.catch()

    def release(self) -> None:
        """Give the signals back to Python's defaults and deliver the one noted, if any, now."""
        for signum in SIGNALS:
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, default)
        caught, self.caught = self.caught, None
        if caught is not None:
            signal.raise_signal(caught)

    def _note(self, signum: int, frame: object) -> None:
        del frame
        self.caught = signum


PROCESS: Final = StopSignals()
"""This process's stop signals (the CLI catches them, the command's loop attaches them)."""


class Stopped(Exception):
    """The stop came before the awaited work ended (``unless_stopped``)."""


async def unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T:
    """``work``'s result, unless ``stop`` is set first: then ``work`` is cancelled and awaited.

    Raises ``Stopped`` then, and also when ``work`` failed by the time the stop came (a clean
    stop, not the failure). ``work`` has ended either way when this returns or raises, so what
    follows (giving up a Lease it may have taken) does not race it.
    """
    if stop.is_set():  # a signal noted before the loop ran: do not even start
        work.close()
        raise Stopped
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        interrupted = not working.done()
        if interrupted:
            working.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await working
    if interrupted or (stop.is_set() and working.exception() is not None):
        raise Stopped
    return working.result()

"""SIGTERM and SIGINT for ``torchgate controller``, caught from the process's first moment.

Kubernetes sends a pod SIGTERM at any moment, a rollout's right after the container started. Until
a command's event loop runs, Python's defaults would end the process at once (143 for SIGTERM, a
traceback and 130 for SIGINT) while it imports its modules, loads its kubeconfig or waits on an
exec credential plugin. So the CLI catches both signals before it imports the controller at all
(``cli`` rule 8), a caught signal is only noted, and the controller's loop takes the signals over
(``attach``): its stop event is set at once when one was noted before. ``torchgate controller
stop``, which the CLI cannot tell apart before the import, gives them back (``release``).

Signal handlers belong to the process, so their state does too: :data:`PROCESS`.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Final

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


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

    def release(self) -> None:
        """Give the signals back to Python's defaults and deliver the one noted, if any, now."""
        for signum in SIGNALS:
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, default)
        if self.caught is not None:
            signal.raise_signal(self.caught)

    def _note(self, signum: int, frame: object) -> None:
        del frame
        self.caught = signum


PROCESS: Final = StopSignals()
"""This process's stop signals (the CLI catches them, the controller's loop attaches them)."""

"""SIGTERM and SIGINT caught before a loop runs, then taken over by it (``torchgate.stopsignals``).

The signals are raised in this process for real; the suite's autouse fixture gives pytest its
own handlers back after each test.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from torchgate.cli import main
from torchgate.stopsignals import StopSignals


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_before_the_loop_runs_is_noted_and_sets_the_stop_once_it_runs(
    signum: signal.Signals,
) -> None:
    signals = StopSignals()
    signals.catch()

    signal.raise_signal(signum)  # the process lives on

    async def stop_is_set() -> bool:
        return signals.attach(asyncio.get_running_loop()).is_set()

    assert signals.caught == signum
    assert asyncio.run(stop_is_set())


def test_a_signal_once_the_loop_runs_sets_the_stop() -> None:
    signals = StopSignals()
    signals.catch()

    async def stopped_by_a_signal() -> bool:
        stop = signals.attach(asyncio.get_running_loop())
        assert not stop.is_set()
        signal.raise_signal(signal.SIGTERM)
        async with asyncio.timeout(5):
            await stop.wait()
        return True

    assert asyncio.run(stopped_by_a_signal())


def test_released_signals_are_python_s_defaults_again_and_the_noted_one_is_delivered() -> None:
    signals = StopSignals()
    signals.catch()
    signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):  # SIGINT's default, as if it came now
        signals.release()

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_controller_s_stop_action_leaves_the_signals_to_python() -> None:
    """The CLI caught them before it could tell ``controller stop`` from ``controller``."""
    assert main(["controller", "stop", "--kubeconfig", "/nonexistent", "--timeout=0"]) == 0

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

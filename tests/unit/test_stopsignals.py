"""Stop signals caught before a loop runs, taken over by it, raced by start steps (``stopsignals``).

The signals are raised in this process for real; the suite's autouse fixture gives pytest its
own handlers back after each test.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from torchgate.cli import main
from torchgate.stopsignals import Stopped, StopSignals, unless_stopped


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
    assert signals.caught is None  # delivered once, not again by a later release


def test_the_controller_s_stop_action_leaves_the_signals_to_python() -> None:
    """The CLI caught them before it could tell ``controller stop`` from ``controller``."""
    assert main(["controller", "stop", "--kubeconfig", "/nonexistent", "--timeout=0"]) == 0

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_certs_without_watch_leaves_the_signals_to_python(tmp_path: Path) -> None:
    """The CLI caught them before it could tell one-shot ``certs`` from ``certs --watch``."""
    assert main(["certs", "--out-dir", str(tmp_path), "--ip", "127.0.0.1"]) == 0

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_a_step_stopped_midway_has_ended_when_the_stop_is_reported() -> None:
    stop = asyncio.Event()
    ended: list[str] = []

    async def step() -> str:
        try:
            await asyncio.Event().wait()  # a connect or a Lease take that does not answer
        finally:
            ended.append("step")
        return "done"

    racing = asyncio.create_task(unless_stopped(step(), stop))
    await asyncio.sleep(0.01)
    stop.set()

    with pytest.raises(Stopped):
        await racing
    assert ended == ["step"]


async def test_a_stop_that_came_first_starts_nothing() -> None:
    stop = asyncio.Event()
    stop.set()
    started: list[str] = []

    async def step() -> None:
        started.append("step")

    with pytest.raises(Stopped):
        await unless_stopped(step(), stop)
    assert started == []


async def test_a_step_that_ends_gives_its_result_and_one_that_fails_while_stopping_is_a_stop() -> (
    None
):
    stop = asyncio.Event()

    async def answer() -> int:
        return 7

    assert await unless_stopped(answer(), stop) == 7

    async def fail_as_the_stop_comes() -> None:
        stop.set()
        raise OSError("no configuration")

    with pytest.raises(Stopped):
        await unless_stopped(fail_as_the_stop_comes(), stop)


def test_a_run_gives_its_result_stops_for_a_signal_noted_before_and_keeps_catching_after() -> None:
    signals = StopSignals()
    signals.catch()
    signal.raise_signal(signal.SIGTERM)  # while the command started, before its loop

    async def main(stop: asyncio.Event) -> str:
        async with asyncio.timeout(5):
            await stop.wait()
        return "stopped"

    assert signals.run(main) == "stopped"
    signal.raise_signal(signal.SIGINT)  # after the loop closed: noted, the process lives on
    assert signals.caught == signal.SIGINT

"""Suite-wide hooks.

helm (for the tests that render and lint the chart) is built from its Go module on first use; a
cold build takes minutes, longer than one test's timeout. So it is built (or found in the cache,
about a second) right after collection, before any test's clock starts, with the build's progress
shown live, when a selected test uses it.

``torchgate controller`` owns its process's SIGTERM and SIGINT (``torchgate.stopsignals``); a test
that runs its CLI in this process gets pytest's handlers put back after it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

import pytest

# Shared case helpers that assert: pytest rewrites their asserts too, for the same failure reports.
pytest.register_assert_rewrite(
    "tests.builders",
    "tests.unit.webhook.validationcases",
    "tests.unit.torchgate_dev.controlplane.planefiles",
)


@pytest.fixture(autouse=True)
def _restore_stop_signal_handlers() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build or find helm before the first test when a selected test renders the chart."""
    config = session.config
    if config.option.collectonly:
        return
    helpers = [sys.modules.get(name) for name in ("tests.helmtool", "tests.manifestset")]
    helpers = [module for module in helpers if module is not None]
    if not helpers:
        return
    uses_helm = any(
        module in vars(item.module).values()
        for item in session.items
        if isinstance(item, pytest.Function)
        for module in helpers
    )
    if not uses_helm:
        return
    from tests import helmtool

    capture = config.pluginmanager.getplugin("capturemanager")
    shown = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with shown:
        helmtool.prebuild()

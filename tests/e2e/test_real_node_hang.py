"""Hangs on the real node: a Master that stops touching its progress file is restarted as a hang.

The dev cluster's controller adds the progress probe to the Master of a job annotated
``torchgate.io/progress-deadline-seconds``; the kubelet of ``real-0`` runs it (an exec liveness
probe: no apiserver request), ends the hung container with the hang message as its termination
message, and the controller restarts the whole gang, counted against ``backoffLimit``. A Master
that keeps touching the file is left alone. The training loop is a shell loop in the seed demo
image (``touch "$TORCHGATE_PROGRESS_FILE"``), as a Python loop would call ``os.utime``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.controller_process import condition, dump, events_of, get_job, is_true
from tests.e2e.test_real_node import RealNodeCluster, demo_job, sh
from tests.e2e.test_real_node import real as real  # the fixture: a dev cluster with real-0

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

DEADLINE = "6"
# A shell that is PID 1 ignores SIGTERM unless it traps it.
TRAP = "trap 'exit 143' TERM; "


@pytest.fixture(autouse=True)
def _clean(real: RealNodeCluster) -> Iterator[None]:
    yield
    real.clean_up_test()


def with_deadline(job: dict[str, Any], *, backoff_limit: int) -> dict[str, Any]:
    job["metadata"].setdefault("annotations", {})["torchgate.io/progress-deadline-seconds"] = (
        DEADLINE
    )
    job["spec"].setdefault("runPolicy", {})["backoffLimit"] = backoff_limit
    return job


def test_a_master_that_stops_making_progress_is_restarted_as_a_counted_hang(
    real: RealNodeCluster,
) -> None:
    namespace = real.new_namespace("hang")
    steps = 'for i in 1 2 3; do touch "$TORCHGATE_PROGRESS_FILE"; sleep 1; done; '
    master = sh(TRAP + steps + "while true; do sleep 0.2; done")
    real.apply(with_deadline(demo_job("stuck", namespace, master=master), backoff_limit=1))

    hang = real.wait_for(
        lambda: next(
            (e for e in events_of(real, namespace, "stuck") if e["reason"] == "Hang"), None
        ),
        timeout=120,
        what="a Hang restart",
    )
    print(f"Hang event: {hang['message']}")
    stored = get_job(real, namespace, "stuck")
    assert stored is not None
    assert stored["metadata"]["annotations"]["torchgate.io/restarts"] == "1", dump(stored)
    restarting = condition(stored, "Restarting")
    assert restarting is not None
    assert restarting["reason"] == "Hang", dump(stored)
    # The second attempt hangs as well: the restart was counted, so backoffLimit 1 is reached.
    real.wait_for(
        lambda: is_true(get_job(real, namespace, "stuck"), "Failed"),
        timeout=120,
        what="the job to fail on its backoff limit",
    )
    failed = condition(get_job(real, namespace, "stuck"), "Failed")
    assert failed is not None
    assert failed["reason"] == "BackoffLimitExceeded"


def test_a_master_that_keeps_making_progress_is_never_restarted(real: RealNodeCluster) -> None:
    namespace = real.new_namespace("progress")
    steps = 'for i in $(seq 1 18); do touch "$TORCHGATE_PROGRESS_FILE"; sleep 1; done; exit 0'
    real.apply(with_deadline(demo_job("busy", namespace, master=sh(TRAP + steps)), backoff_limit=0))

    real.wait_job(namespace, "busy", "Succeeded", timeout=180)
    stored = get_job(real, namespace, "busy")
    assert stored is not None
    assert "torchgate.io/restarts" not in stored["metadata"].get("annotations", {}), dump(stored)
    assert stored["metadata"]["annotations"].get("torchgate.io/gang-attempt", "1") == "1"
    assert not [e for e in events_of(real, namespace, "busy") if e["reason"] == "Hang"]

"""The parts of ``benchmarks/webhook_bench.py``, one concern per module.

* ``workload``: the AdmissionReviews sent (pure).
* ``baseline``: the ``bare`` and ``naive`` servers (``torchgate`` is the real command).
* ``processes``: starting, pinning and stopping the servers; CPU accounting from ``/proc``.
* ``loadgen``: the epoll + ``ssl`` load generator, open and closed loop.
* ``stats``: percentiles, phase latencies and the summary with its ratios to bare (pure).
* ``phases``: the run: answer checks, warm-up, the fixed-rate sweep, max throughput, ``wrk``.
* ``report``: the text tables and the JSON document.
* ``cli``: flags and ``main``.

``benchmarks/webhook_bench.py`` is the command; this package is run from it (its folder is then
on ``sys.path``). Importing the package puts the checkout on ``sys.path`` too, for ``torchgate``
and ``tests.builders``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ENTRY: Final = REPO / "benchmarks" / "webhook_bench.py"
SERVER_TIME_HEADER: Final = "X-Torchgate-Server-Time"
SERVERS: Final = ("bare", "naive", "torchgate")
ROUTES: Final = ("mutate", "validate")
POLICY_FILE: Final = REPO / "manifests" / "samples" / "placementpolicy.yaml"

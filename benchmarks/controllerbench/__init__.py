"""The parts of ``benchmarks/controller_bench.py``, one concern per module.

* ``workload``: the PyTorchJobs submitted and the plain script's pods (pure).
* ``stats``: percentiles, deciles, write counts per job or pod, the summary over rounds (pure).
* ``cluster``: the benchmark's client of the apiserver (``torchgate.kube``), its pod watch (an
  ``Informer``), bounded concurrency, clearing a namespace between phases.
* ``sampling``: the twice-a-second sampler of apiserver writes, the controller's creates and every
  process's CPU (``/proc``).
* ``phases``: the plain script, the controller phase, one round, the whole run.
* ``report``: the text lines printed after the run.
* ``cli``: flags and ``main``.

``benchmarks/controller_bench.py`` is the command; this package is run from it (its folder is then
on ``sys.path``). Importing the package puts the checkout on ``sys.path`` too, for ``torchgate``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

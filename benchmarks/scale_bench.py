"""Scale benchmark: the gang controller on 1,000 to 5,000 kwok nodes of 8 GPUs (issue 23).

A benchmark, not a test: it prints figures and writes them as JSON and PNG; it asserts nothing.

For each ``--nodes`` size, on its own local control plane: the webhook's latency idle; the plain
script creating a pod per GPU (``nodes`` gangs of 8, pinned); the real ``torchgate controller``
given the same gangs at once (the burst: its pod-create rate against the plain script's, the
controller's CPU and RSS per 1,000 pods); then a steady Poisson stream of mixed gangs with fake
run times for ``--minutes`` (admission latency: created -> all pods bound; release: Master done
-> pods gone), the webhook probed throughout. See ``docs/scale.md`` and ``scalebench/phases.py``.

Run: ``flock /tmp/torchgate-bench.lock .venv/bin/python benchmarks/scale_bench.py --nodes 1000``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from scalebench.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""Controller benchmark: 1,000 PyTorchJobs (1 Master + 7 Workers, 1 GPU) on 200 fake 8-GPU nodes.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing.

It starts its own local control plane (the cached binaries), then in one run measures:

1. **Baseline**: a plain script creates the same 1,600 pods (the first wave's worth: 200 gangs of 8,
   each gang pinned to one node as the controller pins them) straight through the API with the
   same write concurrency the controller uses, and the rate is
   taken between the first and last pod seen by a watch. The pods are then deleted. Then the same
   again while the same 1,000 PyTorchJobs are submitted (nothing acts on them): in the controller
   run the users' submissions load the apiserver during the first wave too.
2. **The controller** (the real ``torchgate controller`` process): all 1,000 jobs are submitted
   at once; each Master finishes by itself a few seconds after it starts (kwok's
   ``torchgate.io/fake-run-seconds`` stage; durations are spread over ``--spread`` seconds, as
   real jobs do not all end in the same second), so jobs succeed, torchgate deletes their Workers
   and the next waiting gangs are admitted into the freed GPUs, five waves in all. A watch records
   when every pod appears, when each Master succeeds and when its job's other pods are gone.

Reported: jobs admitted per second in the first wave (and pods/s against the baseline's),
p50/p99 of job create -> all its pods created (first wave, and all jobs including queueing),
p50/p99 of Master success -> all other pods of the job deleted (GPUs free), the controller's
peak RSS, apiserver writes by verb and resource, and the CPU of every process of the rig.
Run: ``.venv/bin/python benchmarks/controller_bench.py [--jobs 1000 --nodes 200]``; see
``benchmarks/README.md``. The code lives in the ``controllerbench`` package beside this file, one
concern per module; it reaches the apiserver only through ``torchgate.kube``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The package beside this file: its folder is sys.path[0] when this runs as a script, not when
# it is loaded some other way.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from controllerbench import REPO
from controllerbench.cli import main
from controllerbench.cluster import bounded, clear_namespace, connect
from controllerbench.sampling import cpu_seconds
from controllerbench.stats import percentile
from controllerbench.workload import gang

# What pool_bench.py and apiserver_costs.py import from here.
__all__ = [
    "REPO",
    "bounded",
    "clear_namespace",
    "connect",
    "cpu_seconds",
    "gang",
    "main",
    "percentile",
]

if __name__ == "__main__":
    sys.exit(main())

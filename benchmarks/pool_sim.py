"""Pool-sharing benchmarks by simulation: the real admission cycle, a simulated clock, no cluster.

Why a simulation beside the cluster benchmark (``pool_bench.py``): on the local control plane a
run takes minutes, its figures include the apiserver's and kwok's delays, and the 2-core machine
makes them noisy. Here ``torchgate.controller.admission.decide`` (the cycle the admitter runs:
quota, topology placement, preemption) is driven by a deterministic discrete-event loop, so a
burst of hundreds of gangs is decided in well under a second and every figure is exact: it says
what the *decisions* are worth, the cluster run adds what the machinery costs.

The loop (``simulate``): at every instant something changes (a gang ends, a gang is submitted), a
cycle runs over every waiting gang; ``Admit`` starts the gang at once and it ends ``seconds``
later; ``Preempt`` stops the victims (their GPUs free at once, the gang goes back to the queue and
will run its full time again) and starts the preemptor; ``Wait`` leaves it waiting. Without
backfill, the cycle's outcomes are applied only up to the first gang that waits (what the
admitter does with ``--starvation-seconds 0``: nothing behind a waiting gang jumps the queue).

Benchmarks (the numbers are the issue's):

1. ``burst``: a burst of gangs of 1 to 32 whole-node pods (log-uniform sizes, so many small gangs
   and a few large ones) on 32 nodes of 8 GPUs, all submitted at once, each running a fixed time.
   Makespan and GPU occupancy (work done / (pool GPUs x makespan)), with and without backfill,
   against the optimum the workload allows. With one run time ``T`` for every gang the optimum is
   exact: rigid gangs of equal duration can always be started at multiples of ``T`` (all gangs
   starting within one interval ``[kT, (k+1)T)`` run together at the latest of those starts, so
   they fit the pool at once), so the optimal makespan is ``T`` times the fewest bins of 32 nodes
   that hold the gang sizes, which ``min_bins`` finds by a small branch-and-bound (proven optimal
   when it ends within its node budget; the JSON says which). With run times spread over
   ``[T, T + spread]`` only the lower bound ``max(GPU-seconds / pool GPUs, longest gang)`` is
   given.
4. ``fairness``: two teams with a nominal quota of half the pool each (borrowing allowed) submit
   bursts at the same second; the time each takes to hold its share (100 % and 90 % of its
   nominal GPUs), against the same bursts without quotas (priority, creation time, then name:
   the apiserver's creation timestamps have one-second resolution, so a burst submitted "at once"
   is ordered by namespace and name, and the first team takes the pool).

Preemption latency (benchmark 2) is only meaningful on a cluster (it is the time victims take to
go and the preemptor's pods to start; a simulated cycle decides it at once): ``pool_bench.py``.

The code lives in the ``poolbench`` package beside this file, one concern per module.

    .venv/bin/python benchmarks/pool_sim.py --rounds 20 --out bench-results/pool_sim.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# The package beside this file: its folder is sys.path[0] when this runs as a script, not when
# it is loaded some other way.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from poolbench.sim_cli import main

if __name__ == "__main__":
    raise SystemExit(main())

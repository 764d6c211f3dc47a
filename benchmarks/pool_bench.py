"""Pool-sharing benchmarks on the local control plane: the real controller, kwok nodes.

A benchmark, not a test: it prints figures and writes them as JSON; it asserts nothing. The same
workloads as ``pool_sim.py`` (which decides them with the admission cycle alone, on a simulated
clock) run here through the real ``torchgate controller`` process against the local control
plane with ``--nodes`` kwok nodes of 8 GPUs (racks of 8, labelled as the simulation's). Every pod
asks for 8 GPUs (a whole node); a gang's Master ends by itself ``seconds`` after it starts
(kwok's ``torchgate.io/fake-run-seconds`` stage, as ``controller_bench.py``), and torchgate then
deletes its Workers (``cleanPodPolicy: Running``) and admits the next gangs.

Scenarios (``--only``, default all; the numbers are the issue's benchmarks):

1. ``burst``: ``--jobs`` gangs of 1 to 32 pods, all submitted at once, every gang running
   ``--seconds``. Makespan (first submission to the last Master's success) and occupancy (work
   done / (pool GPUs x makespan)) with backfill (``--starvation-seconds`` very large, so a
   waiting gang never stops smaller ones behind it) and without (``--starvation-seconds 0``:
   nothing behind a waiting gang is admitted), each against the exact optimum of the burst and
   the simulation's makespan for the same burst (the decisions' own cost; the rest is the
   machinery: pod creation, kwok's start and stop, whole-second run times).
2. ``preemption``: the pool full of low-priority gangs of 8 pods (PriorityClass ``bench-low``),
   a ``bench-high`` gang of ``--urgent-pods`` pods is submitted: time until all its pods are
   Running, p50/p99 over ``--preemption-rounds``; in every round, the same gang submitted when
   half the pool is free (no preemption) is the baseline. Needs the sharing cycle wired into the
   controller.
4. ``fairness``: two teams (``TeamQuota`` a and b, half the pool each, one cohort) submit bursts
   at the same moment; the time until each team's Running pods hold its share (100 % and 90 %),
   against the same bursts without TeamQuotas. Needs TeamQuotas wired into the controller.

Rounds repeat each scenario; the summary gives medians over rounds and every round's value, and
ratios pair figures of the same round (the VM's speed drifts by tens of percent over minutes).

The code lives in the ``poolbench`` package beside this file, one concern per module.

    .venv/bin/python benchmarks/pool_bench.py --out bench-results/pool.json
    .venv/bin/python benchmarks/pool_bench.py --only burst --rounds 1 --jobs 24 --seconds 20
"""

from __future__ import annotations

import sys
from pathlib import Path

# The package beside this file: its folder is sys.path[0] when this runs as a script, not when
# it is loaded some other way.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from poolbench.bench_cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""The parts of ``benchmarks/pool_sim.py`` and ``benchmarks/pool_bench.py``, one concern per module.

Pure (no I/O; the simulation reads only the thread's CPU clock, as a figure):

* ``workload``: gangs, bursts, two teams, the labelled pool: the same for both benchmarks.
* ``optimum``: the lower bound and the exact optimum of a burst (bin packing).
* ``simulation``: the discrete-event loop over ``torchgate.controller.admission.decide.decide``.
* ``stats``: medians over rounds, step series.
* ``figures``: the simulation's figures per round and over rounds.
* ``manifests``: the jobs, TeamQuotas, nodes and PriorityClasses the cluster run creates.

Shells:

* ``harness``: the plane's preparation, the controller process, the pod watch, submissions.
* ``scenarios``: the cluster run's burst, preemption and fairness rounds.
* ``sim_cli`` and ``bench_cli``: the two commands' flags, runs and JSON.

``benchmarks/pool_sim.py`` and ``benchmarks/pool_bench.py`` are the commands; they run this
package with their folder on ``sys.path`` (the cluster shells import ``controller_bench`` from
there). The pure modules import each other relatively, so tests import them as
``benchmarks.poolbench``.
"""

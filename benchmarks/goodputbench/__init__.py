"""The parts of ``benchmarks/goodput_bench.py``, one concern per module.

* ``model`` (pure): the workload, the failure rate, the figures.
* ``run`` (the shell): the plane, the controller, the failures, the pod watch.

``benchmarks/goodput_bench.py`` runs this package with its folder on ``sys.path``; tests import
the pure module as ``benchmarks.goodputbench.model``.
"""

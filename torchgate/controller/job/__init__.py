"""One PyTorchJob's life as a gang: plan, pods, env, status, and the reconciler that applies it.

``plan.plan(observed) -> Plan`` is the one decision (its rules are listed in ``plan``); ``gang``
and ``finish`` hold the rules it delegates to, ``disruption`` tells a gang taken apart by its
nodes or by someone else from one whose program failed, ``model`` what it reads and returns,
``pods`` and ``envvars`` the objects it creates, ``status`` the training-operator-compatible
conditions and ``writes`` when a status is worth writing. All of that is pure; ``reconciler``
reads the caches, asks the admitter (``torchgate.controller.admission``) for a gang's nodes, and
applies the plan.
"""

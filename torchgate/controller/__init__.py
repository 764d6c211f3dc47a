"""torchgate's gang controller for Kubeflow PyTorchJobs.

Why a controller of our own instead of the training-operator: the training-operator creates replica
pods one by one as soon as a job exists, so two large jobs on a busy GPU pool each grab part of the
pool and wait for each other forever (partial gangs holding GPUs), and with its default
``cleanPodPolicy: None`` a finished job keeps its workers, and their GPUs, until someone deletes it.
torchgate creates no pod of a job until the whole gang fits, pins each pod to the node it was
planned on, restarts at gang level, and deletes the remaining pods the moment a job ends, while
keeping the names, labels, env and status that users' images and tooling expect from the
training-operator.

Layout: the decisions live in pure modules with no I/O (``envvars``, ``pods``, ``placement``,
``status``, ``planning``; the clock is a parameter) and a thin async shell (informers, work queue,
admitter loop, reconciler, leader election) reads the cluster, calls ``planning.plan`` and applies
the result.
"""

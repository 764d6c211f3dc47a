"""torchgate's gang controller for Kubeflow PyTorchJobs.

Why a controller of our own instead of the training-operator: the training-operator creates replica
pods one by one as soon as a job exists, so two large jobs on a busy GPU pool each grab part of the
pool and wait for each other forever (partial gangs holding GPUs), and with its default
``cleanPodPolicy: None`` a finished job keeps its workers, and their GPUs, until someone deletes it.
torchgate creates no pod of a job until the whole gang fits, pins each pod to the node it was
planned on, restarts at gang level, and deletes the remaining pods the moment a job ends, while
keeping the names, labels, env and status that users' images and tooling expect from the
training-operator.

Layout, by concept (each subpackage: pure decisions with no I/O, the clock a parameter, and one
async shell that reads the caches, calls them and applies the answer):

- ``job``: one PyTorchJob's life: ``plan(observed) -> Plan`` and its rules (gang, finish), the
  pods and env it builds, its status and when to write it; the shell is ``job.reconciler``.
- ``admission``: which waiting gang gets the pool next: node filters, quota, preemption,
  topology placement and the one cycle over them (``admission.decide``), and what that cycle
  would do, asked without acting (``admission.forecasting``); the shell is
  ``admission.admitter``, fed by the capacity ledger and the waiting queue.
- ``poolservice``: the leader's HTTPS answers from the admitter's snapshot (forecasts for the
  webhook, one job's outlook for ``torchgate explain``, the pool view), each caller checked by
  TokenReview and SubjectAccessReview.
- the process, here at the top: ``command`` (flags), ``manager`` (informers, work queue, workers,
  wiring), ``leader`` (the Lease), ``queue`` (the work queue) and ``metrics``.

Imports run downwards only: the process > ``job``/``poolservice`` > ``admission`` >
``metrics``/``queue``/``leader`` > ``torchgate.kube`` > ``torchgate.pytorchjob`` (import-linter
enforces it).
"""

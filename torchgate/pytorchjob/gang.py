"""Gang arithmetic, declared once: pods, nodes and processes of a PyTorchJob.

The webhook defaults ``minAvailable`` and checks ``--nnodes``/``--nproc-per-node`` flags against
what the controller will inject; the controller injects ``PET_NNODES``/``WORLD_SIZE`` and waits for
``minAvailable`` pods to be placed together. Every answer is one function here, over plain
numbers, so the webhook (which reads raw objects) and the controller (which reads
``spec.JobSpec``) ask the same question the same way and cannot disagree.

Rules:

- Replica counts: at most ``MAX_REPLICAS`` pods of one replica type (webhook and controller
  alike refuse more).
- Total replicas: the sum of the replica counts (Master and Worker).
- Elastic bounds ``(minReplicas, maxReplicas)`` count **Workers**: an unset bound copies the
  other; both unset are the Worker count (the training-operator's ``setElasticPolicy``).
- ``PET_NNODES`` counts torchrun **nodes**, i.e. pods: the total replicas, written ``N``; elastic
  jobs: the Masters plus the elastic bounds, written ``MIN:MAX``.
- Default gang size (the ``minAvailable`` the webhook persists, and the controller's answer when
  a job has none): every replica; for an elastic job, the Masters plus as many Workers as the
  elastic minimum, when that is fewer than the Workers (torchrun starts once that many joined).
- Effective ``minAvailable``: the job's own when it is between 1 and the total, else the default
  gang size.
- ``nprocPerNode`` as a number: a positive JSON integer or a string of ASCII digits; anything
  else (``auto``, ``cpu``, ``gpu``, blanks) is not a number.
- ``WORLD_SIZE``: processes, i.e. total replicas times the numeric ``nprocPerNode``, else one per
  pod (as the training-operator).

Why the elastic bounds count Workers, and ``PET_NNODES`` adds the Masters: every pod runs
torchrun, the Master too, and each torchrun agent joins the rendezvous as one node, so a Master
and *W* Workers are *W* + 1 nodes. The bounds, though, are what the job's ``scale`` subresource
moves (``.spec.pytorchReplicaSpecs.Worker.replicas``: ``kubectl scale``, the training-operator's
HPA with ``minReplicas``/``maxReplicas`` as its own), what the defaults copy (the Worker count)
and what the default gang size takes (``minReplicas`` Workers), so they are a Worker count;
``PET_NNODES`` is the one place that counts nodes, and it adds the Masters. The
training-operator passes the bare bounds (``PET_NNODES=MIN:MAX``) to a job with a Master, one
node short: with default bounds ``W:W`` and *W* + 1 pods, torchrun's c10d rendezvous completes
with the first *W* to join and leaves the last one out (torch >= 2.3 parks it in its redundancy
list, waiting with its GPUs idle; older torch times it out after ``join_timeout``, failing its
pod and so the gang), and the one left out may be the Master. The webhook's checks
(``--nnodes``, a Worker count outside the bounds) and the controller's env read ``nnodes``
alike, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from torchgate.pytorchjob.digits import parse_integer

Bounds = tuple[int, int]

MAX_COUNT: Final = 2**31 - 1
"""Replica counts and ``minAvailable`` are int32 in the API: a larger number is not a count."""

MAX_REPLICAS: Final = 100_000
"""Most pods of one replica type: Kubernetes' own limit for index-addressed pods (an Indexed Job's
``completions`` and ``parallelism``), far beyond any gang a cluster can place. The controller
names, plans and demands every pod of a job on each reconcile, so an int32 count (2,147,483,647
workers pass the CRD schema) would stall it for hours and exhaust its memory."""


def total_replicas(counts: Iterable[int]) -> int:
    """Pods in the whole job."""
    return sum(counts)


def elastic_bounds(min_replicas: int | None, max_replicas: int | None, *, workers: int) -> Bounds:
    """``(minReplicas, maxReplicas)``: an unset bound copies the other, both unset = Workers."""
    low = min_replicas
    high = max_replicas
    if low is None:
        low = high if high is not None else workers
    if high is None:
        high = low
    return low, high


def nnodes(*, total: int, elastic: Bounds | None, masters: int = 0) -> Bounds:
    """``PET_NNODES`` as ``(min, max)``: the total, or the Masters plus an elastic job's bounds.

    Args:
        total: Pods in the whole job.
        elastic: The elastic bounds (Workers, ``elastic_bounds``), None for a job that is not
            elastic.
        masters: The job's Masters (0 or 1), each one more torchrun node beside the Workers.
    """
    if elastic is None:
        return total, total
    return masters + elastic[0], masters + elastic[1]


def format_nnodes(bounds: Bounds, *, elastic: bool) -> str:
    """``PET_NNODES`` as torchrun reads it: ``N``, or ``MIN:MAX`` for an elastic job."""
    return f"{bounds[0]}:{bounds[1]}" if elastic else str(bounds[0])


def default_gang_size(*, masters: int, workers: int, elastic: Bounds | None) -> int:
    """Pods that must be placed together by default (see the module rules)."""
    if elastic is not None and 0 < elastic[0] < workers:
        workers = elastic[0]
    return masters + workers


def is_min_available(wanted: int, *, total: int | None) -> bool:
    """Whether ``minAvailable`` is between 1 and the total (``None``: total unknown)."""
    return wanted >= 1 and (total is None or wanted <= total)


def min_available(wanted: int | None, *, total: int, default: int) -> int:
    """The job's ``minAvailable`` when it is between 1 and ``total``, else ``default``."""
    return wanted if wanted is not None and is_min_available(wanted, total=total) else default


def integer_nproc(value: object) -> int | None:
    """``nprocPerNode`` as a positive number, ``None`` for ``auto``/``cpu``/``gpu`` and the rest."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        number = parse_integer(value) or 0
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        return None
    return number if number > 0 else None


def world_size(*, total: int, nproc_per_node: object) -> int:
    """Processes in the job: total replicas times the numeric ``nprocPerNode``, else one per pod."""
    return total * (integer_nproc(nproc_per_node) or 1)

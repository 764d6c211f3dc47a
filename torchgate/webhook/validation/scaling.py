"""Scaling a job through its ``scale`` subresource (``kubectl scale``, an HPA): who may, how far.

Why: the CRD's ``scale`` subresource (``specReplicasPath``
``.spec.pytorchReplicaSpecs.Worker.replicas``) exists for elastic jobs, whose HPA moves the
Worker count between ``elasticPolicy.minReplicas`` and ``maxReplicas`` (the training-operator's
``ReconcileHPA``). Its writes carry an ``autoscaling/v1`` Scale, not the job, and the mutating
webhook never sees them, so the gang size it defaulted (``runPolicy.schedulingPolicy.
minAvailable``) would stay at the old count: a non-elastic job scaled that way would have its new
Workers placed "where they fit" instead of together. An apply or a patch of the job goes through
the mutating webhook, which moves the gang size along (``defaulting``'s UPDATE rules).

The validating route reads the stored job and judges the scale (``validate_scale`` in this
package) by these rules, in this order; the first one that refuses gives the verdict alone:

1. The Scale's ``spec.replicas`` is a non-negative integer (``scale_replicas``).
2. The job has a Worker replica spec to scale (``worker_to_scale``).
3. A job without ``spec.elasticPolicy`` keeps its Worker count: scaling it to another count is
   Forbidden at the Worker's ``replicas``, naming apply and patch (``only_elastic_jobs_scale``).
4. An elastic job's new count stays within its ``minReplicas`` and ``maxReplicas``
   (``within_elastic_bounds``; a bound that is not an integer is left to the job's own rules).
   A job that sets neither keeps its Worker count: both bounds are then the Worker count
   (``gang.elastic_bounds``), which its running pods' torchrun got in ``PET_NNODES``, and a
   scale does not restart them, so a new Worker (with the new count in its own ``PET_NNODES``)
   could never join their rendezvous.

Then the job as it would be after the scale (``scaled_job``) passes the same validation as an
UPDATE from the stored job: the Worker replica limit, the team's quota ceiling and every other
rule. Any JSON value may appear anywhere; malformed input becomes a field error, never an
exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from torchgate.pytorchjob import gang, names
from torchgate.pytorchjob.fieldpath import FieldError, FieldPath, forbidden, invalid, required
from torchgate.pytorchjob.spec import as_int
from torchgate.webhook.validation.facts import OBJECT, REPLICA_SPECS

SCALE_REPLICAS: Final = FieldPath().child("spec").child("replicas")  # of the Scale
WORKER: Final = REPLICA_SPECS.key(names.WORKER)
WORKER_REPLICAS: Final = WORKER.child("replicas")
CHANGE_WITH_APPLY: Final = (
    "only a job with spec.elasticPolicy is scaled through its scale subresource (kubectl scale, "
    "an HPA); change spec.pytorchReplicaSpecs.Worker.replicas with kubectl apply or kubectl "
    "patch instead, so that the webhook moves the gang size "
    "(spec.runPolicy.schedulingPolicy.minAvailable) along"
)


def scaled_job(job: Mapping[str, Any], replicas: object) -> dict[str, Any] | list[FieldError]:
    """``job`` as it would be after scaling its Workers to ``replicas``, or rules 1-4's refusal."""
    count = scale_replicas(replicas)
    if isinstance(count, FieldError):
        return [count]
    worker = worker_to_scale(job)
    if isinstance(worker, FieldError):
        return [worker]
    elastic = job["spec"].get("elasticPolicy")  # worker_to_scale read spec: an object
    refused = (
        only_elastic_jobs_scale(worker, count)
        if elastic is None
        else within_elastic_bounds(elastic, count, worker=worker)
    )
    return refused or scaled(job, count)


def scale_replicas(replicas: object) -> int | FieldError:
    """Rule 1: the count asked for, or the error naming the Scale's ``spec.replicas``."""
    count = as_int(replicas)
    if count is None or count < 0:
        return invalid(SCALE_REPLICAS, replicas, "must be a non-negative integer")
    return count


def worker_to_scale(job: Mapping[str, Any]) -> Mapping[str, Any] | FieldError:
    """Rule 2: the stored job's Worker replica spec, or the error saying there is none."""
    spec = job.get("spec")
    replica_specs = spec.get("pytorchReplicaSpecs") if isinstance(spec, OBJECT) else None
    worker = replica_specs.get(names.WORKER) if isinstance(replica_specs, OBJECT) else None
    if not isinstance(worker, OBJECT):
        return required(WORKER, "must be configured to scale the job")
    return worker


def only_elastic_jobs_scale(worker: Mapping[str, Any], count: int) -> list[FieldError]:
    """Rule 3: a job that is not elastic is not scaled to another count."""
    current = worker.get("replicas")
    if (1 if current is None else as_int(current)) == count:
        return []  # nothing changes: the gang size stays right
    return [forbidden(WORKER_REPLICAS, CHANGE_WITH_APPLY)]


def within_elastic_bounds(
    elastic: object, count: int, *, worker: Mapping[str, Any]
) -> list[FieldError]:
    """Rule 4: ``minReplicas <= count <= maxReplicas``; neither set: the Worker count stays."""
    if not isinstance(elastic, OBJECT):
        return []  # the job's own rules refuse it (policy.elastic_policy)
    low_raw, high_raw = elastic.get("minReplicas"), elastic.get("maxReplicas")
    if low_raw is None and high_raw is None:
        current = as_int(worker.get("replicas", 1))
        if current is None or current < 1:
            return []  # the job's own rules refuse it (pod.replica_count)
        fixed, _ = gang.elastic_bounds(None, None, workers=current)
        if count == fixed:
            return []
        detail = (
            f"must stay {fixed}: spec.elasticPolicy sets neither minReplicas nor maxReplicas, so "
            f"both are the Worker count ({fixed}) the running pods' torchrun rendezvous takes; "
            "set them to scale within them"
        )
        return [invalid(WORKER_REPLICAS, count, detail)]
    low, high = as_int(low_raw), as_int(high_raw)
    if (low is None or low <= count) and (high is None or count <= high):
        return []
    bounds = f"{'' if low is None else low}..{'' if high is None else high}"
    detail = f"must be within spec.elasticPolicy minReplicas..maxReplicas ({bounds}) to scale"
    return [invalid(WORKER_REPLICAS, count, detail)]


def scaled(job: Mapping[str, Any], count: int) -> dict[str, Any]:
    """``job`` with ``count`` Workers, as the apiserver stores it after the scale (a copy)."""
    spec = job["spec"]
    replica_specs = spec["pytorchReplicaSpecs"]
    worker = {**replica_specs[names.WORKER], "replicas": count}
    return {**job, "spec": {**spec, "pytorchReplicaSpecs": {**replica_specs, names.WORKER: worker}}}

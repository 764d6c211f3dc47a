"""What ``cleanPodPolicy`` keeps when a job ends, declared once for the webhook and the controller.

Why one declaration: the webhook refuses a ``cleanPodPolicy: None`` the admin's PlacementPolicy
does not allow, and the controller, ending a job that got past it anyway (the webhook was
bypassed, or the policy changed after admission), deletes the pods that policy would not let it
keep. Declared twice, one side would refuse what the other keeps, or keep what the other refuses.

Why only accelerators: a pod still running when its job ends keeps what it holds until someone
deletes the job. For GPUs, the scarce part of the pool, that is the training-operator's best
known complaint (its default is ``None``: Workers running on after the Master succeeded, holding
their GPUs). A pod without accelerators holds some CPU and memory, and keeping it (its state, for
debugging) is what manifests and SDK examples written for the training-operator ask for with
``None``. So ``allowCleanPodPolicyNone`` governs only pods that hold the accelerators the policy
names (its ``gpuResource``); the webhook says which replicas those are, and every other pod keeps
``None`` as written.

Rules:

1. ``holds_accelerators``: a pod (or a replica's pod template) holds accelerators when what it
   takes from its node (``units.pod_units``: kube-scheduler's effective request, containers,
   init containers, overhead, a limit standing for a missing request, plus the GPUs its claims
   ask for, ``pytorchjob.devices``) has some of what the policy counts as GPUs.
2. ``clean_pod_policy_for``: a pod is cleaned up as its job's ``cleanPodPolicy`` says, except that
   ``None`` acts as ``Running`` for a pod that holds accelerators when the policy does not allow
   ``None``. Every other value is kept as written.
3. ``replicas_not_kept``: the replicas (those that run pods) whose pods rule 2 does not keep
   although the job says ``None``, in the order given. The webhook refuses the job naming them;
   the controller warns naming them when it ends such a job.

Invariant: the webhook admits a job's ``cleanPodPolicy: None`` exactly when the controller, ending
that job under the same policy, deletes none of its running pods
(``tests/unit/pytorchjob/test_contract.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Final

from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources
from torchgate.pytorchjob.spec import pod_requests
from torchgate.pytorchjob.units import pod_units

KEEP: Final = "None"
"""The ``cleanPodPolicy`` that keeps every pod (the training-operator's default)."""
INSTEAD_OF_KEEP: Final = "Running"
"""What ``None`` acts as where rule 2 does not allow it: running and pending pods go."""


def holds_accelerators(
    pod_spec: Mapping[str, Any], *, gpus: GpuSources | str, claims: ClaimLookup = NO_CLAIMS
) -> bool:
    """Rule 1: whether a pod with this spec holds GPUs (``gpus``; a name: that resource)."""
    sources = GpuSources(gpus) if isinstance(gpus, str) else gpus
    if sources.counts_claims:
        taken = pod_units(pod_spec, sources, claims)
        return any(taken.get(resource, 0) > 0 for resource in sources.resources)
    return any(
        pod_requests(pod_spec, only=resource).get(resource, Decimal(0)) > 0
        for resource in sources.resources
    )


def clean_pod_policy_for(
    clean_pod_policy: str,
    pod_spec: Mapping[str, Any],
    *,
    gpus: GpuSources | str,
    allow_none: bool,
    claims: ClaimLookup = NO_CLAIMS,
) -> str:
    """Rule 2: how a pod with this spec is cleaned up when its job ends."""
    if (
        clean_pod_policy == KEEP
        and not allow_none
        and holds_accelerators(pod_spec, gpus=gpus, claims=claims)
    ):
        return INSTEAD_OF_KEEP
    return clean_pod_policy


def replicas_not_kept(
    clean_pod_policy: str,
    pod_specs: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    gpus: GpuSources | str,
    allow_none: bool,
    claims: ClaimLookup = NO_CLAIMS,
) -> tuple[str, ...]:
    """Rule 3: the replicas, of ``(replica, pod spec)`` pairs, whose pods ``None`` cannot keep."""
    if clean_pod_policy != KEEP:
        return ()
    return tuple(
        replica
        for replica, pod_spec in pod_specs
        if clean_pod_policy_for(
            clean_pod_policy, pod_spec, gpus=gpus, allow_none=allow_none, claims=claims
        )
        != KEEP
    )

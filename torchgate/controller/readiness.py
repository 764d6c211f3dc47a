"""When a controller replica answers ``/readyz`` with 200: what a rolling upgrade waits for.

Why: readiness is what ``kubectl rollout`` and the Service ``torchgate-controller`` read. A
replica that says ready before its caches are filled puts its pool service behind the Service
while every answer is 503, and lets a rollout replace a working replica with one that cannot
act; a standby that is never ready stalls every rollout (a Deployment of 2 with
``maxUnavailable`` 0 waits for the new pod before it stops an old one). So readiness follows the
replica's role, as kube-scheduler's and kube-apiserver's ``/readyz`` follow their informers'
sync, and ``/healthz`` (liveness) stays ok in all of these: a restart would help none of them.

Rules (``not_ready_reasons``; ready when it returns nothing):

1. A replica that is stopping (SIGTERM) is not ready: it acts no more and is leaving.
2. A standby is ready once its leader election has read the Lease (or created it): it can take
   over. One that never could (RBAC on ``leases``, a missing Lease namespace) stays not ready,
   so a rollout of a broken release stops at its first pod.
3. A leader is ready once its caches are synced: the moment it starts to reconcile and its pool
   service answers (``Manager.synced``, ``poolservice`` rule 2). Until then it is not ready,
   also when it just took over from another replica.
4. A synced leader is not ready while one of the caches it needs cannot list or watch (the
   apiserver refuses or does not answer: the cache holds what it last saw, and the replica acts
   on it). The probe's ``failureThreshold`` tells a broken watch from one being re-listed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What readiness is decided from.

    Attributes:
        stopping: SIGTERM or SIGINT was received.
        leading: The replica holds the Lease (or runs without leader election).
        lease_read: Its leader election has read or created the Lease at least once.
        synced: Its caches are filled (``Manager.synced``).
        failing: The caches it needs whose last list or watch failed, by resource plural.
    """

    stopping: bool
    leading: bool
    lease_read: bool
    synced: bool
    failing: tuple[str, ...] = ()


def stopping_reasons(state: ReplicaState) -> list[str]:
    """Rule 1."""
    return ["stopping"] if state.stopping else []


def standby_reasons(state: ReplicaState) -> list[str]:
    """Rule 2."""
    if state.leading or state.lease_read:
        return []
    return ["standby: the leader Lease has not been read yet"]


def sync_reasons(state: ReplicaState) -> list[str]:
    """Rule 3."""
    if not state.leading or state.synced:
        return []
    return ["leader: caches not synced yet"]


def watch_reasons(state: ReplicaState) -> list[str]:
    """Rule 4."""
    if not state.leading or not state.synced:
        return []
    return [f"leader: cannot list or watch {plural}" for plural in state.failing]


def not_ready_reasons(state: ReplicaState) -> list[str]:
    """Why the replica is not ready, in rule order; empty when it is ready."""
    return [
        *stopping_reasons(state),
        *standby_reasons(state),
        *sync_reasons(state),
        *watch_reasons(state),
    ]

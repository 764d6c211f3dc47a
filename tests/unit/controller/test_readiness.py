"""Readiness of a controller replica by its role (``controller.readiness`` rules 1-4)."""

from __future__ import annotations

import pytest

from torchgate.controller.readiness import ReplicaState, not_ready_reasons

STANDBY_WAITING = "standby: the leader Lease has not been read yet"
NOT_SYNCED = "leader: caches not synced yet"


@pytest.mark.parametrize(
    ("state", "reasons"),
    [
        # Rule 2: a standby that has read the Lease is ready, whatever its (empty) caches.
        (ReplicaState(stopping=False, leading=False, lease_read=True, synced=False), []),
        (ReplicaState(stopping=False, leading=False, lease_read=False, synced=False),
         [STANDBY_WAITING]),
        # Rule 3: a leader only once synced, also right after it took over.
        (ReplicaState(stopping=False, leading=True, lease_read=True, synced=False), [NOT_SYNCED]),
        (ReplicaState(stopping=False, leading=True, lease_read=True, synced=True), []),
        # Rule 4: a synced leader whose needed caches cannot list or watch.
        (ReplicaState(stopping=False, leading=True, lease_read=True, synced=True,
                      failing=("pods", "nodes")),
         ["leader: cannot list or watch pods", "leader: cannot list or watch nodes"]),
        # ... while syncing it only says it is not synced; a standby watches nothing.
        (ReplicaState(stopping=False, leading=True, lease_read=True, synced=False,
                      failing=("pods",)), [NOT_SYNCED]),
        (ReplicaState(stopping=False, leading=False, lease_read=True, synced=False,
                      failing=("pods",)), []),
        # Rule 1: stopping, whatever the role.
        (ReplicaState(stopping=True, leading=True, lease_read=True, synced=True), ["stopping"]),
        (ReplicaState(stopping=True, leading=False, lease_read=True, synced=False), ["stopping"]),
    ],
)  # fmt: skip
def test_not_ready_reasons(state: ReplicaState, reasons: list[str]) -> None:
    assert not_ready_reasons(state) == reasons

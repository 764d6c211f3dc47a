"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two replicas never both act.

The client-go algorithm: a candidate takes the Lease when it is free or when its record has not
changed for ``lease_duration`` *as observed by the candidate's own clock* (so clock skew between
machines does not matter), writing with the resourceVersion it read so only one writer wins (409
for the others). The leader renews every ``retry_period``; if it cannot renew within
``renew_deadline`` it must stop acting at once — the controller exits and restarts clean rather
than risk two leaders. Every renewal attempt is itself bounded by what is left of the renew
deadline (as client-go bounds it): a request that hangs, for up to the client's 30 s timeout,
must not keep a leader acting after a successor, waiting only ``lease_duration`` (15 s), has
taken over.

A candidate that stops gives the Lease up (client-go's ``ReleaseOnCancel``): it writes the Lease
back with no holder, a ``leaseDurationSeconds`` of 1 and renewed now (``released_spec``), so the
next candidate takes it at its next try instead of waiting out ``lease_duration``. It does so not
only when it knows it leads but whenever it has sent a write that takes the Lease: a standby
stopped while its take is in flight may hold the Lease without ever having read the answer. So the
release reads the Lease first and writes only when the apiserver names this candidate the holder
(newer client-go reads first too), trying again on a conflict (a take the apiserver applied after
the read), all within ``renew_deadline``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from torchgate.kube.client import KubeApi
from torchgate.kube.errors import AlreadyExists, ApiError, Conflict, NotFound
from torchgate.kube.resources import LEASES
from torchgate.pytorchjob import moments

log = logging.getLogger("torchgate.controller.leader")


class LeaderElector:
    """Acquire and hold one Lease."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._observed_record: Any = None
        self._observed_at = 0.0
        self.is_leader = False
        # The Lease was read or created at least once: this candidate can take over (a standby's
        # readiness, ``readiness`` rule 2).
        self.lease_read = False
        # A write naming this candidate the holder was sent, answered or not: it may hold the
        # Lease, so a stop must give it up.
        self.take_sent = False

    async def acquire(self) -> None:
        """Block until this candidate holds the Lease."""
        while True:
            if await self._try_acquire_or_renew():
                break
            await asyncio.sleep(self.retry_period)
        self.is_leader = True
        log.info(
            "became the leader (lease %s/%s, identity %s)", self.namespace, self.name, self.identity
        )

    async def hold(self) -> None:
        """Renew until renewal fails for ``renew_deadline``; then return (leadership lost).

        Each attempt may take only what is left of the deadline since the last renewal, so this
        returns at most ``renew_deadline`` (plus one ``retry_period``) after the last successful
        renewal, however long a request would hang.
        """
        loop = asyncio.get_running_loop()
        last_renewal = loop.time()
        while True:
            await asyncio.sleep(self.retry_period)
            left = last_renewal + self.renew_deadline - loop.time()
            renewed = False
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        renewed = await self._try_acquire_or_renew()
                except TimeoutError:
                    log.warning("renewing the leader lease took longer than the renew deadline")
            if renewed:
                last_renewal = loop.time()
            elif loop.time() - last_renewal >= self.renew_deadline:
                self.is_leader = False
                log.error("lost the leader lease %s/%s", self.namespace, self.name)
                return

    async def release(self) -> None:
        """Give the Lease up (on stop) so a successor need not wait for it to expire.

        Done when this candidate leads or may have just taken the Lease (``take_sent``); the
        Lease is written back only if the apiserver names this candidate its holder. Bounded by
        ``renew_deadline``: a stop must finish within the pod's grace period even when the
        apiserver does not answer, and a Lease not given up only costs the successor
        ``lease_duration``.
        """
        if not (self.is_leader or self.take_sent):
            return
        self.is_leader = False
        self.take_sent = False
        try:
            async with asyncio.timeout(self.renew_deadline):
                await self._give_up_lease()
        except TimeoutError:
            log.warning("could not release the lease within %.0f s", self.renew_deadline)
        except ApiError as exc:
            log.warning("could not release the lease: %s", exc)

    async def _give_up_lease(self) -> None:
        path = LEASES.path(self.namespace, self.name)
        while True:
            try:
                lease = await self.api.request("GET", path)
            except NotFound:
                return  # never created: nothing to give up
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = released_spec(spec, datetime.now(UTC))
            try:
                await self.api.request("PUT", path, body=lease)
            except Conflict:
                continue  # changed since the read (our own late take, a renewal): read again
            log.info("released the leader lease %s/%s", self.namespace, self.name)
            return

    async def _try_acquire_or_renew(self) -> bool:
        loop = asyncio.get_running_loop()
        now = datetime.now(UTC)
        path = LEASES.path(self.namespace, self.name)
        try:
            lease = await self.api.request("GET", path)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, transitions=0),
            }
            self.take_sent = True
            try:
                await self.api.request("POST", LEASES.path(self.namespace), body=body)
            except AlreadyExists:
                return False  # another candidate created it first
            except ApiError as exc:  # its namespace is missing, RBAC forbids: no one can lead
                log.warning("cannot create the leader lease: %s", exc)
                return False
            self.lease_read = True
            return True
        except ApiError as exc:
            log.warning("cannot read the leader lease: %s", exc)
            return False
        self.lease_read = True
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"))
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = loop.time()
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = loop.time() > self._observed_at + duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            lease["spec"] = {**spec, "renewTime": moments.format_micro_time(now)}
        else:
            lease["spec"] = self._spec(now, transitions=transitions + 1)
        self.take_sent = True
        try:
            updated = await self.api.request("PUT", path, body=lease)
        except Conflict:
            return False
        except ApiError as exc:
            log.warning("cannot renew the leader lease: %s", exc)
            return False
        new_spec = updated.get("spec") or {}
        self._observed_record = (
            new_spec.get("holderIdentity"),
            new_spec.get("renewTime"),
            new_spec.get("acquireTime"),
        )
        self._observed_at = loop.time()
        return True

    def _spec(self, now: datetime, *, transitions: int) -> dict[str, Any]:
        """A new holder's record: this identity, acquired and renewed now."""
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": moments.format_micro_time(now),
            "renewTime": moments.format_micro_time(now),
            "leaseTransitions": transitions,
        }


def released_spec(spec: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A given-up Lease's record, as client-go's ``release`` writes it.

    No holder (a candidate takes a Lease with no holder at once, whatever its clock observed),
    a duration of 1 s and renewed now (for a reader that goes by times alone), the count of
    transitions kept.
    """
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": moments.format_micro_time(now),
        "renewTime": moments.format_micro_time(now),
        "leaseTransitions": int(spec.get("leaseTransitions") or 0),
    }

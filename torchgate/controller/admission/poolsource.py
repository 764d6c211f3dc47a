"""What the admission cycle learns from the cluster about sharing the pool, and TeamQuota status.

The admitter asks for the valid TeamQuotas, the valid policies' ``preemption`` and ``topology``
sections, and a job's topology request; this module answers from the caches, parsing each
TeamQuota once per resourceVersion. It also writes what ``kubectl get teamquotas`` shows: each
team's ``status`` (``usedGPUs``, ``borrowedGPUs``, ``admittedJobs``, ``waitingJobs`` and a
``Valid`` condition), computed by the admitter's last cycle and written only when it changed, at
most every ``period`` seconds, so a busy pool costs one status write per team and period (rule 5).

A TeamQuota that does not parse, or that claims a namespace another team (earlier by name)
already owns (``pool.resolve_teams``), is left out; its ``Valid`` condition says why.

Why a finalizer: a TeamQuota deleted at once would leave its team's running gangs counting for no
team, so another team could no longer reclaim what they borrow and any higher-priority gang could
preempt them. As Kueue does for a ClusterQueue with admitted workloads, the controller keeps
``pool.QUOTA_FINALIZER`` on a TeamQuota while its team has admitted gangs (``kubectl delete``
then waits for them; the team admits no new gang meanwhile: ``quota`` rule 5), and takes it off
when none has. An idle TeamQuota has none, so it goes at once.

A stopping leader keeps the finalizers when a successor is coming (rule 4): a rolling upgrade, an
evicted or deleted pod, a drained node all stop the leader while its Deployment still asks for
replicas, and the next leader carries on (a deletion requested meanwhile keeps waiting for the
gangs, the protection an upgrade must not drop). It takes them off every TeamQuota only when none
is coming: its Deployment is gone, being deleted or scaled to zero. Uninstalling therefore scales
the controller to zero first, while its ServiceAccount and RBAC still exist: ``helm uninstall``
deletes the Deployment, the RBAC and the ServiceAccount in one pass, so a leader stopped by it can
no longer write anything; the chart's pre-delete hook runs ``torchgate controller stop``
(``controller/stopping.py``) before that, README's kustomize steps scale it by hand. A controller
not told its Deployment (run by hand) has no successor to wait for and takes them off when it
stops.

Rules (each one function):

1. ``team_statuses``: a TeamQuota's counters: GPUs used and borrowed (over nominal, in whole
   GPUs, rounded up) by its admitted gangs, GPUs held beyond what the team may hold
   (``overQuotaGPUs``, ``quota`` rule 6: its quota was lowered below its usage), its admitted
   and waiting jobs; teams without jobs count zeros.
2. ``quota_conditions``: ``Valid`` with the errors that left a team out (``True`` without);
   for a TeamQuota being deleted whose team still has admitted gangs, ``Deleting``
   (``GangsRunning``) saying it admits no new gang and goes once they end; for a team over its
   quota, ``OverQuota`` (``UsageAboveQuota``) saying by how much, that its gangs keep running
   and that its new gangs wait; the pass that first writes it also records a Warning Event
   ``UsageAboveQuota`` on the TeamQuota (in namespace ``default``, as for a cluster-scoped
   object), once per time it goes over (rule 5).
3. ``finalizers_wanted``: a TeamQuota's finalizers with ``pool.QUOTA_FINALIZER`` when its team
   has admitted gangs (running or reserved) and without it when it has none (a team left out
   counts none); a valid team no cycle has counted yet (the controller just started) keeps what
   it has. Written with the TeamQuota's ``resourceVersion`` (a conflict is tried again on the
   next pass), only when they change.
4. ``release_at_stop``: a stopping leader takes the finalizer off every TeamQuota
   (``release_finalizers``) only when no successor is coming: its Deployment, read as it stops,
   is gone, being deleted or scaled to zero replicas (an uninstall, ``kubectl scale
   --replicas=0``), or it was not told its Deployment; otherwise (a rolling upgrade, an eviction)
   it leaves them for the next leader. A Deployment it cannot read keeps them: protection first
   (an uninstall scales to zero before deleting, so none depends on that read).
5. ``next_status``: what a pass writes, compared with the previous status: the one this leader
   last wrote to that very TeamQuota (remembered by name and uid: one deleted and recreated
   under its name is a new object, its stored status empty), else the one stored (its cache's,
   so a restarted or newly elected controller carries on from its predecessor's). Each
   condition keeps its ``lastTransitionTime`` while its status is unchanged and nothing is
   written when the previous status already says it all (``conditions.status_to_write``, as the
   webhook writes a PlacementPolicy's); the ``UsageAboveQuota`` Event is
   recorded only when the status newly says over quota (``says_over_quota``: ``overQuotaGPUs``
   above zero or ``OverQuota`` True), so a restart records it no second time. A valid team no
   cycle has counted yet (the controller just started) keeps its stored status, as it keeps its
   finalizer: zeros written before the first cycle would only flap.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from torchgate.controller.admission.quota import Admitted, TeamTotals, over_quota
from torchgate.kube.client import MERGE_PATCH, KubeApi
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.informer import Informer, ParsedOnce
from torchgate.kube.resources import DEPLOYMENTS, EVENTS, TEAM_QUOTAS
from torchgate.pytorchjob import moments
from torchgate.pytorchjob.conditions import conditions_of, status_to_write
from torchgate.pytorchjob.events import event_body, involved_object
from torchgate.pytorchjob.fieldpath import FieldError
from torchgate.pytorchjob.outlook import gpus_phrase
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.pytorchjob.pool import (
    GPUS,
    QUOTA_FINALIZER,
    QUOTA_KIND,
    PoolSettings,
    TeamQuota,
    parse_team_quota,
    resolve_teams,
    topology_request,
)
from torchgate.pytorchjob.reasons import (
    DELETING,
    OVER_QUOTA,
    REASON_QUOTA_GANGS_RUNNING,
    REASON_QUOTA_INVALID,
    REASON_QUOTA_USAGE_ABOVE,
    REASON_QUOTA_VALID,
    VALID,
)
from torchgate.pytorchjob.units import MILLI

log = logging.getLogger("torchgate.controller.pool")


class PoolSource:
    """Parsed TeamQuotas and pool settings from the caches; TeamQuota status writes."""

    def __init__(
        self,
        api: KubeApi,
        *,
        quotas: Informer,
        policies: Callable[[], Iterable[PlacementPolicy]],
        team_status: Callable[[], Mapping[str, Mapping[str, int]]],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.quotas = quotas
        self.policies = policies
        self.team_status = team_status
        self.clock = clock
        self._quotas = ParsedOnce(quotas.values, parse_team_quota)
        # What this leader last wrote, by TeamQuota (name, uid): a TeamQuota deleted and
        # recreated under its name is another object, whose status is its own (rule 5).
        self._written: dict[tuple[str, str], dict[str, Any]] = {}

    def report(self) -> dict[str, list[FieldError]]:
        """TeamQuota name -> its errors (empty when valid)."""
        parsed = self._quotas.by_name()
        errors = {name: list(found[1]) for name, found in parsed.items()}
        good = [found[0] for found in parsed.values() if found[0] is not None]
        for name, clashes in resolve_teams(good).errors.items():
            errors[name].extend(clashes)
        return errors

    def teams(self) -> dict[str, TeamQuota]:
        """The valid TeamQuotas by name (``pool.resolve_teams`` of those that parse)."""
        parsed = self._quotas.by_name()
        return dict(resolve_teams(q for q, _ in parsed.values() if q is not None).valid)

    def settings(self) -> list[PoolSettings]:
        """The ``preemption`` and ``topology`` sections of every valid PlacementPolicy, by name."""
        return [
            PoolSettings(preemption=policy.preemption, topology=policy.topology)
            for policy in sorted(self.policies(), key=lambda p: p.name)
        ]

    def topology_of(
        self, annotations: Mapping[str, str], policy: PlacementPolicy
    ) -> tuple[str | None, bool]:
        """The level (label key) a job requires or prefers under its policy, and whether required.

        A request the webhook would refuse (unknown level, both annotations) counts as none.
        """
        request, errors = topology_request(annotations, policy.topology)
        if errors or request.level is None:
            return None, False
        return policy.topology.levels[request.level], request.required

    async def write_statuses(self, *, period: float = 2.0) -> None:
        """Write every TeamQuota's status when it changed (until cancelled)."""
        while True:
            await asyncio.sleep(period)
            try:
                await self.write_once()
            except ApiError as exc:
                log.warning("could not write TeamQuota status: %s", exc)

    async def write_once(self) -> None:
        """One pass of ``write_statuses``."""
        counters = self.team_status()
        errors = self.report()
        raw = {obj["metadata"]["name"]: obj for obj in self.quotas.values()}
        for name in sorted(errors):
            stored = raw.get(name, {})
            metadata = stored.get("metadata", {})
            # A team left out counts no gang; a valid one no cycle counted yet keeps its finalizer.
            counted = counters[name]["admittedJobs"] if name in counters else None
            admitted = 0 if errors[name] else counted
            await self._write_finalizers(name, metadata, admitted)
            if admitted is None:  # and its status (rule 5): zeros now would only flap
                continue
            status: dict[str, Any] = dict(counters.get(name) or _zero())
            deleting = bool(metadata.get("deletionTimestamp"))
            status["conditions"] = quota_conditions(
                errors[name],
                deleting_with=admitted if deleting else None,
                over=(status.get("usedGPUs", 0), status.get("overQuotaGPUs", 0)),
            )
            # What this leader last wrote is newer than its cache; a new leader starts from what
            # the cache holds (its predecessor's status).
            previous = self._written.get(_identity(name, stored))
            write = next_status(
                status,
                stored.get("status") if previous is None else previous,
                now=moments.format_time(self.clock()),
            )
            if write.status is None:
                continue
            if write.goes_over:
                await self._over_quota_event(name, metadata, status["conditions"][-1]["message"])
            await self.api.request(
                "PATCH",
                TEAM_QUOTAS.path(None, name, "status"),
                body={"status": write.status},
                content_type=MERGE_PATCH,
            )
            self._written[_identity(name, stored)] = write.status
        current = {_identity(name, obj) for name, obj in raw.items()}
        for gone in [key for key in self._written if key not in current]:
            del self._written[gone]

    async def _over_quota_event(self, name: str, metadata: Mapping[str, Any], message: str) -> None:
        """A Warning Event on TeamQuota ``name``: it holds more than its quota (rule 2)."""
        event = event_body(
            "default",
            involved_object(
                f"{TEAM_QUOTAS.group}/{TEAM_QUOTAS.version}", QUOTA_KIND, name, metadata
            ),
            type="Warning",
            reason=REASON_QUOTA_USAGE_ABOVE,
            message=f"TeamQuota {name} is over its quota: {message}",
            component="torchgate-controller",
            now=moments.format_time(self.clock()),
        )
        try:
            await self.api.request("POST", EVENTS.path("default"), body=event)
        except ApiError as exc:
            log.warning("could not record an Event on TeamQuota %s: %s", name, exc)

    async def release_finalizers(
        self, *, seconds: float, deployment: tuple[str, str] | None = None
    ) -> bool:
        """Take the finalizer off every TeamQuota when no successor is coming (rule 4).

        ``deployment``: the controller's Deployment (namespace, name), read first; ``None``: not
        known, so none is coming. Gives up after ``seconds``; a TeamQuota it could not release
        waits for the next leader. True when it released them.
        """

        async def release() -> bool:
            found: Mapping[str, Any] | None = None
            if deployment is not None:
                namespace, name = deployment
                try:
                    found = await self.api.request("GET", DEPLOYMENTS.path(namespace, name))
                except NotFound:
                    found = None
                except ApiError as exc:
                    log.warning(
                        "kept the finalizer on the TeamQuotas: could not read Deployment %s/%s: %s",
                        namespace,
                        name,
                        exc,
                    )
                    return False
            if not release_at_stop(found, known=deployment is not None):
                log.info(
                    "kept the finalizer on the TeamQuotas for the next leader: Deployment %s "
                    "still asks for replicas",
                    "/".join(deployment or ()),
                )
                return False
            for obj in list(self.quotas.values()):
                metadata = obj["metadata"]
                try:
                    await self._write_finalizers(metadata["name"], metadata, 0)
                except ApiError as exc:
                    log.warning(
                        "could not take the finalizer off TeamQuota %s: %s", metadata["name"], exc
                    )
            return True

        try:
            async with asyncio.timeout(seconds):
                return await release()
        except TimeoutError:
            log.warning("gave up taking the finalizer off the TeamQuotas after %.0fs", seconds)
            return False

    async def _write_finalizers(
        self, name: str, metadata: Mapping[str, Any], admitted: int | None
    ) -> None:
        """Put ``pool.QUOTA_FINALIZER`` on or off TeamQuota ``name`` when it should (rule 3)."""
        wanted = finalizers_wanted(metadata.get("finalizers") or [], admitted_jobs=admitted)
        if wanted is None:
            return
        await self.api.request(
            "PATCH",
            TEAM_QUOTAS.path(None, name),
            body={
                "metadata": {
                    "finalizers": wanted,
                    "resourceVersion": metadata.get("resourceVersion"),
                }
            },
            content_type=MERGE_PATCH,
        )


def _zero() -> dict[str, int]:
    return {
        "usedGPUs": 0,
        "borrowedGPUs": 0,
        "overQuotaGPUs": 0,
        "admittedJobs": 0,
        "waitingJobs": 0,
    }


def team_statuses(
    teams: Mapping[str, TeamQuota],
    admitted: Iterable[Admitted] | TeamTotals,
    waiting: Iterable[str | None],
) -> dict[str, dict[str, int]]:
    """Team name -> its status counters (rule 1).

    ``admitted``: the gangs holding capacity, or their totals by team as the ledger keeps them.
    """
    out = {name: _zero() for name in teams}
    totals = admitted if isinstance(admitted, TeamTotals) else TeamTotals.of(admitted)
    used: dict[str, int] = {}
    for name, count in totals.gangs.items():
        if name in out:
            out[name]["admittedJobs"] = count
            used[name] = totals.usage[name].get(GPUS, 0)
    for team in waiting:
        if team in out:
            out[team]["waitingJobs"] += 1
    for name, amount in used.items():
        limit = teams[name].limits.get(GPUS)
        nominal = limit.nominal if limit is not None else amount
        out[name]["usedGPUs"] = math.ceil(amount / MILLI)
        out[name]["borrowedGPUs"] = math.ceil(max(0, amount - nominal) / MILLI)
        beyond = over_quota(teams[name], totals.usage, teams).get(GPUS, 0)
        out[name]["overQuotaGPUs"] = math.ceil(beyond / MILLI)
    return out


def quota_conditions(
    errors: Sequence[FieldError],
    *,
    deleting_with: int | None = None,
    over: tuple[int, int] = (0, 0),
) -> list[dict[str, Any]]:
    """A TeamQuota's conditions, without their transition times (rule 2).

    ``deleting_with``: when the TeamQuota is being deleted, its team's admitted gangs (``None``
    when it is not being deleted, or no cycle has counted them yet). ``over``: the GPUs its
    team uses and how many of them are beyond its quota, in whole GPUs (its status counters).
    """
    if not errors:
        valid = {"type": VALID, "status": "True", "reason": REASON_QUOTA_VALID, "message": ""}
    else:
        message = "; ".join(str(error) for error in errors)[:1024]
        valid = {
            "type": VALID,
            "status": "False",
            "reason": REASON_QUOTA_INVALID,
            "message": message,
        }
    conditions = [valid]
    if deleting_with:
        conditions.append(
            {
                "type": DELETING,
                "status": "True",
                "reason": REASON_QUOTA_GANGS_RUNNING,
                "message": (
                    f"being deleted: admits no new gang of its team; goes once its "
                    f"{deleting_with} admitted gang(s) end"
                ),
            }
        )
    used, beyond = over
    if beyond > 0:
        held = gpus_phrase(used * MILLI)  # the status counts whole GPUs; the phrase takes milli
        conditions.append(
            {
                "type": OVER_QUOTA,
                "status": "True",
                "reason": REASON_QUOTA_USAGE_ABOVE,
                "message": (
                    f"its team's admitted gangs use {held}, {beyond} more than "
                    "its quota now lets it hold: they keep running (nothing is preempted for it), "
                    "what they use over nominal can be reclaimed by the other teams of its "
                    "cohort, and its new gangs wait until its usage is back within quota"
                ),
            }
        )
    return conditions


def _identity(name: str, obj: Mapping[str, Any]) -> tuple[str, str]:
    """A TeamQuota's name and uid: what this leader's memory of its writes is keyed by (rule 5)."""
    metadata = obj.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return name, str(uid or "")


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """What one pass writes of a TeamQuota's status (rule 5).

    Attributes:
        status: The status to write, its conditions stamped; ``None``: the previous one already
            says all of it, nothing is written.
        goes_over: Whether it newly says the team is over its quota (the Warning Event is
            recorded then, and only then).
    """

    status: dict[str, Any] | None
    goes_over: bool


def next_status(status: Mapping[str, Any], previous: object, *, now: str) -> StatusWrite:
    """The status to write of a TeamQuota, given the ``previous`` one (rule 5).

    ``status``: its counters and conditions (rules 1 and 2); ``previous``: the status last written
    (by this leader, else as stored: any shape, as anyone may have written it); ``now``: the time
    a condition that changed its status began.
    """
    written = status_to_write(status, previous, now=now)
    if written is None:
        return StatusWrite(None, goes_over=False)
    return StatusWrite(
        written, goes_over=says_over_quota(written) and not says_over_quota(previous)
    )


def says_over_quota(status: object) -> bool:
    """Whether a TeamQuota status says its team is over its quota (rule 5).

    ``overQuotaGPUs`` above zero, or an ``OverQuota`` condition True (any shape: none says so).
    """
    if not isinstance(status, Mapping):
        return False
    beyond = status.get("overQuotaGPUs")
    if isinstance(beyond, int) and not isinstance(beyond, bool) and beyond > 0:
        return True
    return any(
        condition.get("type") == OVER_QUOTA and condition.get("status") == "True"
        for condition in conditions_of(status)
    )


def finalizers_wanted(finalizers: Sequence[str], *, admitted_jobs: int | None) -> list[str] | None:
    """The TeamQuota's finalizers as they should be; ``None`` when they already are (rule 3).

    ``admitted_jobs``: its team's admitted gangs, ``None`` when no cycle has counted them yet.
    """
    held = QUOTA_FINALIZER in finalizers
    if admitted_jobs is None or held == (admitted_jobs > 0):
        return None
    if admitted_jobs > 0:
        return [*finalizers, QUOTA_FINALIZER]
    return [name for name in finalizers if name != QUOTA_FINALIZER]


def release_at_stop(deployment: Mapping[str, Any] | None, *, known: bool) -> bool:
    """Whether a stopping leader takes the finalizer off every TeamQuota (rule 4).

    ``deployment``: the controller's Deployment as read when it stops (``None``: not found);
    ``known``: whether the controller was told its Deployment. True when no successor is coming.
    """
    if not known or deployment is None:
        return True
    if deployment.get("metadata", {}).get("deletionTimestamp"):
        return True
    replicas = deployment.get("spec", {}).get("replicas", 1)
    return isinstance(replicas, int) and replicas <= 0

"""The shell of quarantine: record faults on the Nodes, quarantine them, lift cooldowns, tidy.

The reconciler reports every gang restart whose cause counts against its node
(``job.disruption.NODE_FAULTS``), with the outage it came from, and the thresholds of the job's
policy; ``rules.due`` decides (the gangs one outage took down counting once, rule 6) on the
node's recent faults: those its Node records (``rules.history_of``, written by this controller
or by the one before a restart or failover) and those not written yet. One loop here applies:
it quarantines the nodes due, writes each node's faults to its Node (``rules.history_patch``),
lifts the quarantines whose cooldown has ended and tidies the labels of nodes an admin cleared,
then sleeps until the next cooldown ends or something changes. A quarantine (and the tidying of an
admin's clearing) stamps the start of a fresh count on the Node (``rules`` rule 9), and every count
and every write here keeps only the faults after it: faults held in memory from before it (a fault
of a job under another policy, recorded while the quarantine was pending, reads the node's earlier
faults back) are dropped, not written back. A fault recorded while a quarantine is pending
(decided, not applied yet) neither decides another nor extends it. Each quarantine and lift is an
Event on the Node; a quarantine is also an Event on each job whose faults counted, and counted in
``torchgate_controller_node_quarantines_total``. A Node whose recorded faults cannot be read (a
hand edit) gets a Warning Event ``NodeFaultHistoryUnreadable`` once per bad value; the readable
faults count and the next write drops the rest. Patches that fail (a conflict with another writer
of the node's taints, an apiserver error) are retried on the next pass; the node cache, not this
object, says what is quarantined and what was recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from prometheus_client import Counter

from torchgate.controller.quarantine import rules
from torchgate.kube.client import MERGE_PATCH, KubeApi
from torchgate.kube.errors import ApiError
from torchgate.kube.informer import Informer
from torchgate.kube.resources import NODES
from torchgate.pytorchjob import moments, names, reasons
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.policy import QuarantineSettings

log = logging.getLogger("torchgate.controller.quarantine")
RETRY_SECONDS: Final = 5.0
# An Event: the object it is about (a Node, or a job by key), its type, reason and message.
EventSink = Callable[[Mapping[str, Any] | JobKey, str, str, str], None]


class QuarantineKeeper:
    """Faults and quarantines on the Nodes; in memory only the faults not written yet."""

    def __init__(
        self,
        api: KubeApi,
        *,
        nodes: Informer,
        quarantines: Counter,
        record_event: EventSink,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.nodes = nodes
        self.quarantines = quarantines
        self.record_event = record_event
        self.clock = clock
        self._unwritten: dict[str, tuple[rules.Fault, ...]] = {}  # a node's faults to write
        self._reported: dict[str, str] = {}  # the unreadable value last reported, per node
        self._due: dict[str, tuple[rules.Quarantine, tuple[rules.Fault, ...]]] = {}
        self._wake = asyncio.Event()

    def record(self, fault: rules.Fault, settings: QuarantineSettings) -> None:
        """A gang restarted for a fault of ``fault.node``; quarantine it when ``settings`` say."""
        now = self.clock()
        node = self.nodes.get("", fault.node)
        earlier = self._unwritten.get(fault.node)
        if earlier is None:
            earlier = self._recorded(node) if node is not None else ()
        start = rules.count_start(node) if node is not None else None
        fresh = rules.since({*earlier, fault}, start)  # rule 9: none from before a quarantine
        counted = rules.recent(fresh, now=now, window_seconds=settings.window_seconds)
        self._unwritten[fault.node] = counted
        self._wake.set()
        quarantine = rules.due(counted, now=now, settings=settings)
        pending = fault.node in self._due
        if pending or (node is not None and rules.quarantine_of(node).tainted):
            return  # quarantined already: its cooldown is not extended
        if quarantine is not None:
            self._due[fault.node] = (quarantine, counted)

    def _recorded(self, node: Mapping[str, Any]) -> tuple[rules.Fault, ...]:
        """The faults ``node`` records (rule 7); an unreadable record reported once per value."""
        history = rules.history_of(node)
        name = str((node.get("metadata") or {}).get("name") or "")
        if history.unreadable and self._reported.get(name) != history.text:
            self._reported[name] = history.text
            message = (
                f"node {name}: {history.unreadable} entries of the annotation "
                f"{names.ANNOTATION_QUARANTINE_FAULTS} cannot be read and are dropped; "
                f"{len(history.faults)} faults counted"
            )
            log.warning("%s", message)
            self.record_event(node, "Warning", reasons.NODE_FAULT_HISTORY_UNREADABLE, message)
        return history.faults

    def on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Node informer handler: a change of a node's quarantine wakes the loop."""
        if old is None or rules.quarantine_of(node) != rules.quarantine_of(old):
            self._wake.set()

    def quarantined(self) -> int:
        """How many nodes carry the quarantine taint now."""
        return sum(1 for node in self.nodes.values() if rules.quarantine_of(node).tainted)

    async def run(self) -> None:
        """Apply quarantines, lifts and tidying until cancelled."""
        while True:
            self._wake.clear()
            sleep = await self.converge()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep):
                    await self._wake.wait()

    async def converge(self) -> float | None:
        """One look at every node; the seconds until the next one needs looking at."""
        now = self.clock()
        waits: list[float] = []
        for name, (quarantine, faults) in list(self._due.items()):
            node = self.nodes.get("", name)
            if node is None:
                del self._due[name]
            elif await self._patch(name, rules.quarantine_patch(node, quarantine, now=now)):
                del self._due[name]
                self._announce(node, quarantine, faults)
            else:
                waits.append(RETRY_SECONDS)
        for name, faults in list(self._unwritten.items()):
            node = self.nodes.get("", name)
            if node is None:
                del self._unwritten[name]  # deleted: its record with it
            elif await self._patch(
                name, rules.history_patch(faults, start=rules.count_start(node))
            ):
                if self._unwritten.get(name) is faults:  # no fault came in meanwhile
                    del self._unwritten[name]
            else:
                waits.append(RETRY_SECONDS)
        for node in list(self.nodes.values()):
            name = str((node.get("metadata") or {}).get("name") or "")
            state = rules.quarantine_of(node)
            step, left = rules.next_step(state, now=now)
            if left is not None:
                waits.append(left)
            if step is None or name in self._due:
                continue
            afresh = now if step == "tidy" else None  # cleared by an admin: counting afresh
            if not await self._patch(name, rules.release_patch(node, afresh_at=afresh)):
                waits.append(RETRY_SECONDS)
            elif step == "lift":
                message = f"node {name}: the quarantine ({state.cause}) ended after its cooldown"
                self.record_event(node, "Normal", reasons.NODE_QUARANTINE_LIFTED, message)
            else:
                log.info("node %s: quarantine cleared by hand; labels removed", name)
        return min(waits) if waits else None

    async def _patch(self, name: str, body: Mapping[str, Any]) -> bool:
        try:
            patched = await self.api.request(
                "PATCH", NODES.path(None, name), body=dict(body), content_type=MERGE_PATCH
            )
        except ApiError as exc:
            log.warning("node %s: quarantine patch failed (%s); retrying", name, exc)
            return False
        if isinstance(patched, dict):
            self.nodes.remember(patched)
        return True

    def _announce(
        self,
        node: Mapping[str, Any],
        quarantine: rules.Quarantine,
        faults: tuple[rules.Fault, ...],
    ) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        counted = rules.one_per_outage(faults)
        causes = ", ".join(sorted({f.cause for f in counted}))
        message = (
            f"node {name} is quarantined until {moments.format_label_time(quarantine.until)} after "
            f"{len(counted)} infrastructure faults ({causes}): no new gang is placed on it; "
            f"clear with: kubectl taint nodes {name} {names.TAINT_QUARANTINE}-"
        )
        self.quarantines.labels(quarantine.cause).inc()
        self.record_event(node, "Warning", reasons.NODE_QUARANTINED, message)
        for job in sorted({f.job for f in faults}):
            self.record_event(job, "Warning", reasons.NODE_QUARANTINED, message)

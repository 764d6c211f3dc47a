"""Wiring: caches, the work queue, workers, the admitter, leader election and the metrics server.

Event handlers only map objects to job keys and enqueue them (pods and Services by their
``job-name`` label, the jobs with pods on a node whose readiness or ``NoExecute`` taints changed;
nodes, pod capacity changes, PriorityClasses and TeamQuotas wake the admitter; a node's
quarantine wakes the quarantine keeper, which the reconciler tells of nodes' faults); workers run
``reconcile``
with per-key exclusivity, retry failures with exponential backoff, honour ``requeue_after``
timers, and a periodic resync re-queues every job as a safety net. Whether the cluster serves
Kubernetes' gang objects (Workload, PodGroup) is asked of API discovery before the first
reconcile and again every ``gang_objects_recheck_seconds``, so turning the API on or off takes
effect without a restart. Only the Lease holder runs any
of it; a replica that loses the Lease exits so that it restarts clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.poolsource import PoolSource
from torchgate.controller.admission.slices import driver_keys, free_devices
from torchgate.controller.job import status as st
from torchgate.controller.job.disruption import node_health
from torchgate.controller.job.gangobjects import serves_gang_objects
from torchgate.controller.job.model import Event, EventType
from torchgate.controller.job.reconciler import Options, Reconciler, is_ours, job_key_of_pod
from torchgate.controller.leader import LeaderElector
from torchgate.controller.metrics import ControllerMetrics, TeamShare
from torchgate.controller.poolservice import (
    PoolFacts,
    PoolServiceOptions,
    mark_leader,
    serve_when_ready,
)
from torchgate.controller.quarantine.keeper import QuarantineKeeper
from torchgate.controller.queue import NORMAL, URGENT, ShutDown, WorkQueue
from torchgate.controller.readiness import ReplicaState, not_ready_reasons
from torchgate.kube.client import KubeApi
from torchgate.kube.dra import DraCaches
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.informer import Informer, ParsedOnce, key_of
from torchgate.kube.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NODES,
    PLACEMENT_POLICIES,
    PODS,
    PRIORITY_CLASSES,
    PYTORCHJOBS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICES,
    TEAM_QUOTAS,
    WORKLOADS,
    Resource,
)
from torchgate.pytorchjob import names
from torchgate.pytorchjob.names import JobKey
from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy
from torchgate.pytorchjob.pool import GPUS
from torchgate.stopsignals import Stopped, unless_stopped

log = logging.getLogger("torchgate.controller")

# How long a stopping leader lets the reconciles in flight end, may take to take its finalizer off
# the TeamQuotas, and then to send the Events it holds (``run_as_leader``).
RECONCILE_DRAIN_SECONDS = 5.0
QUOTA_RELEASE_SECONDS = 3.0
EVENT_FLUSH_SECONDS = 5.0


class GangObjectsDiscovery:
    """Whether the cluster serves ``scheduling.k8s.io/v1beta1`` Workload and PodGroup.

    A group version that is not served answers 404; any other error keeps the last answer (an
    apiserver hiccup does not switch gangs between kinds of scheduling).
    """

    def __init__(self, api: KubeApi, recheck_seconds: float) -> None:
        self.api = api
        self.recheck_seconds = recheck_seconds
        self.served = False

    async def check(self) -> None:
        """Ask discovery once."""
        try:
            discovery = await self.api.request("GET", WORKLOADS.discovery_path())
        except NotFound:
            discovery = None
        except ApiError as exc:
            log.warning("cannot tell whether %s is served: %s", WORKLOADS.discovery_path(), exc)
            return
        served = serves_gang_objects(discovery)
        if served != self.served:
            log.info(
                "%s Workload and PodGroup %s",
                WORKLOADS.discovery_path(),
                "served: gangs get Kubernetes gang objects" if served else "not served",
            )
        self.served = served

    async def run(self) -> None:
        """Ask again every ``recheck_seconds`` until cancelled."""
        while True:
            await asyncio.sleep(self.recheck_seconds)
            await self.check()


@dataclass(frozen=True, slots=True)
class ManagerOptions:
    """How to run the controller."""

    namespace: str | None = None
    workers: int = 32
    # Workers that take only URGENT keys (pods that ended), so freeing GPUs never waits for a
    # worker busy creating another gang's pods.
    urgent_workers: int = 4
    resync_seconds: float = 300.0
    starvation_seconds: float = 300.0
    arrival_settle_seconds: float = 0.25
    wave_hold_seconds: float = 2.0
    stuck_termination_seconds: float = 60.0
    gang_backoff_seconds: float = 10.0
    # How long to wait for the TeamQuota list at start (the CRD may not be installed).
    quota_sync_seconds: float = 10.0
    gang_objects_recheck_seconds: float = 30.0
    # The controller's own Deployment (namespace, name): a stopping leader reads it to tell a
    # rolling upgrade (keep the TeamQuotas' finalizer) from an uninstall (take it off).
    deployment: tuple[str, str] | None = None
    options: Options = field(default_factory=Options)


class Manager:
    """Everything the leader runs."""

    def __init__(self, api: KubeApi, settings: ManagerOptions) -> None:
        self.api = api
        self.settings = settings
        namespace = settings.namespace
        selector = f"{names.LABEL_OPERATOR_NAME}={names.OPERATOR_NAME}"
        self.jobs = Informer(api, PYTORCHJOBS, namespace=namespace)
        # Every pod of the cluster uses capacity, not only ours, so pods are watched cluster-wide.
        self.pods = Informer(api, PODS)
        self.services = Informer(api, SERVICES, namespace=namespace, label_selector=selector)
        self.nodes = Informer(api, NODES)
        self.policy_objects = Informer(api, PLACEMENT_POLICIES)
        self.priority_classes = Informer(api, PRIORITY_CLASSES)
        self.team_quotas = Informer(api, TEAM_QUOTAS)
        # What a job's claims ask for (``pytorchjob.devices``): the same caches as the webhook's.
        self.dra = DraCaches(
            claims=Informer(api, RESOURCE_CLAIMS),
            templates=Informer(api, RESOURCE_CLAIM_TEMPLATES),
            classes=Informer(api, DEVICE_CLASSES),
        )
        # GPU capacity of DRA nodes (``admission.slices``): devices per node and pool, minus
        # the devices an admin's DeviceTaintRules take out of use (run only where served).
        self.slices = Informer(api, RESOURCE_SLICES)
        self.taint_rules = Informer(api, DEVICE_TAINT_RULES)
        # The caches nothing is decided without (the others are read once listed, see ``run``).
        self.needed = (
            self.nodes,
            self.pods,
            self.services,
            self.policy_objects,
            self.priority_classes,
            self.jobs,
        )
        self.queue: WorkQueue[JobKey] = WorkQueue()
        self.metrics = ControllerMetrics(
            job_states=lambda: (st.state_of(job) for job in self.jobs.values()),
            queue_depth=lambda: len(self.queue),
            events_dropped=lambda: self.reconciler.events.dropped,
            quarantined_nodes=lambda: self.quarantine.quarantined(),
            waiting=lambda: self.admitter.demand(),
            teams=self._team_shares,
        )
        self.quarantine = QuarantineKeeper(
            api,
            nodes=self.nodes,
            quarantines=self.metrics.node_quarantines,
            record_event=self._record_event,
        )
        self.pool = PoolSource(
            api,
            quotas=self.team_quotas,
            policies=self.policies,
            team_status=lambda: self.admitter.team_status,
        )
        self.admitter = Admitter(
            on_admit_job=self.queue.add,
            on_reason=self.queue.add,
            on_admit=self.metrics.gang_wait.observe,
            teams=self.pool.teams,
            pool_settings=self.pool.settings,
            starvation_seconds=settings.starvation_seconds,
            stuck_seconds=settings.stuck_termination_seconds,
            backoff_base=settings.gang_backoff_seconds,
            claims_for=self.dra.view,
            device_capacity=self.device_capacity,
            arrival_settle_seconds=settings.arrival_settle_seconds,
            wave_hold_seconds=settings.wave_hold_seconds,
        )
        self.gang_objects = GangObjectsDiscovery(api, settings.gang_objects_recheck_seconds)
        self.reconciler = Reconciler(
            api,
            jobs=self.jobs,
            pods=self.pods,
            services=self.services,
            policies=self.policies,
            priority_of=self.priority_of,
            admitter=self.admitter,
            preempts_of=self.preempts_of,
            topology_of=self.pool.topology_of,
            metrics=self.metrics,
            options=settings.options,
            nodes=self.nodes,
            claims_for=self.dra.view,
            node_faults=self.quarantine.record,
            gang_objects_served=lambda: self.gang_objects.served,
            requeue=self.queue.add,
        )
        self._parsed_policies = ParsedOnce(
            self.policy_objects.values, lambda raw: parse_policy(raw)[0]
        )
        self.synced = asyncio.Event()  # the caches are filled (the pool service answers then)
        self._workers: list[asyncio.Task[None]] = []
        self.pods.index_by(job_key_of_pod)
        self.services.index_by(job_key_of_pod)
        self.jobs.add_handler(self._on_job)
        self.pods.add_handler(self._on_pod)
        self.pods.add_handler(self.admitter.on_pod)
        self.pods.add_handler(self.reconciler.on_pod)
        self.services.add_handler(self._on_pod)
        self.nodes.add_handler(self.admitter.on_node)
        self.nodes.add_handler(self._on_node)
        self.nodes.add_handler(self.quarantine.on_node)
        self.policy_objects.add_handler(lambda *_: self._requeue_all())
        self.priority_classes.add_handler(lambda *_: self.admitter.wake())
        self.team_quotas.add_handler(lambda *_: self.admitter.wake())
        # A template or DeviceClass changes what waiting jobs claim (claims are per pod: too many
        # to requeue on, and a job names one only when shared, which the webhook refuses).
        self.dra.templates.add_handler(lambda *_: self._requeue_all())
        self.dra.classes.add_handler(lambda *_: self._requeue_all())
        # What claimed pods count comes from claims, templates and classes (``ledger`` rule 6);
        # free devices from slices and claims are read again by the next cycle.
        for counted in (self.dra.claims, self.dra.templates, self.dra.classes):
            counted.add_handler(self.admitter.on_claims)
        self.slices.add_handler(lambda *_: self.admitter.wake())
        self.taint_rules.add_handler(lambda *_: self.admitter.wake())

    # ------------------------------------------------------------------ cache views

    async def _served(self, resource: Resource) -> bool:
        """Whether API discovery lists ``resource`` (asked once, at start; an error: no)."""
        try:
            discovery = await self.api.request("GET", resource.discovery_path())
        except ApiError as exc:
            log.info("%s not served (%s): going on without", resource.plural, exc)
            return False
        if not resource.served_in(discovery):
            log.info("%s not served: going on without", resource.plural)
            return False
        return True

    def device_capacity(
        self, counted: Callable[[tuple[str, str]], Mapping[str, int] | None]
    ) -> dict[str, dict[str, int]]:
        """Free GPU devices per node, of the DeviceClasses some policy counts as GPUs."""
        seen = self.dra.view("")
        keys: dict[str, str] = {}
        for policy in self.policies():
            for name, key in policy.gpus(seen).class_keys.items():
                keys.setdefault(name, key)
        if not keys:
            return {}
        drivers = driver_keys(self.dra.classes.values(), keys)
        return free_devices(
            self.slices.values(),
            self.dra.claims.values(),
            drivers,
            counted,
            taint_rules=self.taint_rules.values(),
        )

    def _team_shares(self) -> list[TeamShare]:
        """Each team's nominal GPUs and what the last admission cycle counted it using."""
        teams = self.pool.teams()
        shares = []
        for name, status in sorted(self.admitter.team_status.items()):
            limit = teams[name].limits.get(GPUS) if name in teams else None
            nominal = limit.nominal / 1000 if limit is not None else 0.0
            used, borrowed = status.get("usedGPUs", 0), status.get("borrowedGPUs", 0)
            shares.append(TeamShare(name, nominal, used, borrowed))
        return shares

    def policies(self) -> Iterable[PlacementPolicy]:
        """The valid PlacementPolicies (parsed once per resourceVersion)."""
        return [p for p in self._parsed_policies.by_name().values() if p is not None]

    def _priority_class(self, class_name: str | None) -> dict[str, Any] | None:
        """The PriorityClass named (the global default when unnamed), if it exists."""
        for raw in self.priority_classes.values():
            name = (raw.get("metadata") or {}).get("name")
            if (class_name and name == class_name) or (not class_name and raw.get("globalDefault")):
                return raw
        return None

    def priority_of(self, class_name: str | None) -> int:
        """The value of a PriorityClass (the global default's when unnamed, else 0)."""
        raw = self._priority_class(class_name)
        value = raw.get("value") if raw is not None else 0
        return value if isinstance(value, int) else 0

    def preempts_of(self, class_name: str | None) -> bool:
        """Whether jobs of the class may preempt: ``preemptionPolicy: Never`` waits."""
        raw = self._priority_class(class_name)
        return raw is None or raw.get("preemptionPolicy") != "Never"

    def pool_facts(self) -> PoolFacts:
        """What the pool service reads (forecasts, one job's outlook, the pool view)."""
        return PoolFacts(
            snapshot=lambda candidate, gpu: self.admitter.snapshot(candidate, gpu_resource=gpu),
            candidate=lambda job, since: self.reconciler.candidate(job, since=since),
            policies=self.policies,
            synced=self.synced.is_set,
            clock=self.admitter.clock,
            ours=lambda job: is_ours(job, self.reconciler.options),
            cached=self.jobs.get,
        )

    # ------------------------------------------------------------------ event handlers

    def _on_job(self, kind: str, job: dict[str, Any], _: dict[str, Any] | None) -> None:
        key = key_of(job)
        self.queue.add(key)
        if kind == "DELETED":
            self.admitter.cancel(key)

    def _on_pod(self, kind: str, obj: dict[str, Any], _: dict[str, Any] | None) -> None:
        key = job_key_of_pod(obj)
        if key is None:
            return
        phase = (obj.get("status") or {}).get("phase")
        # A pod that ended may end its job (release the gang's GPUs) or restart the gang.
        ended = kind == "DELETED" or phase in ("Succeeded", "Failed")
        self.queue.add(key, URGENT if ended else NORMAL)

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A node lost, tainted ``NoExecute``, deleted or back: its jobs look at it again."""
        if kind != "DELETED" and old is not None and node_health(node) == node_health(old):
            return
        name = str((node.get("metadata") or {}).get("name") or "")
        for key in self.admitter.jobs_on(name):
            self.queue.add(key, URGENT)

    def _record_event(
        self, about: Mapping[str, Any] | JobKey, type_: str, reason: str, message: str
    ) -> None:
        """An Event from the quarantine keeper: on a Node, or on a job (by key, if it exists)."""
        event = Event(cast(EventType, type_), reason, message)
        if isinstance(about, tuple):
            job = self.jobs.get(*about)
            if job is not None:
                self.reconciler.events.record(job, event)
        else:
            self.reconciler.events.record_on_node(about, event)

    def failing_caches(self) -> tuple[str, ...]:
        """The needed caches whose last list or watch failed (``readiness`` rule 4)."""
        return tuple(i.resource.plural for i in self.needed if i.failure is not None)

    def _requeue_all(self) -> None:
        for job in self.jobs.values():
            self.queue.add(key_of(job))

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Fill the caches, then reconcile until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self.needed:
                group.create_task(informer.run())
            for informer in self.needed:
                await informer.synced.wait()
            group.create_task(self.team_quotas.run())
            dra = (self.dra.claims, self.dra.templates, self.dra.classes, self.slices)
            for informer in dra:
                group.create_task(informer.run())
            if await self._served(DEVICE_TAINT_RULES):
                group.create_task(self.taint_rules.run())
            try:
                async with asyncio.timeout(self.settings.quota_sync_seconds):
                    await self.team_quotas.synced.wait()
            except TimeoutError:
                log.warning("TeamQuotas not listed yet (is the CRD installed?); going on without")
            try:  # claimed GPUs are counted from these: plan no gang before they are listed
                async with asyncio.timeout(self.settings.quota_sync_seconds):
                    await asyncio.gather(*(informer.synced.wait() for informer in dra))
            except TimeoutError:
                log.warning("resource.k8s.io/v1 not listed yet; claimed GPUs count once it is")
            log.info(
                "caches synced: %d jobs, %d pods, %d nodes",
                len(self.jobs.store),
                len(self.pods.store),
                len(self.nodes.store),
            )
            if self.settings.options.gang_objects:
                await self.gang_objects.check()
                group.create_task(self.gang_objects.run())
            self.synced.set()
            self._requeue_all()
            group.create_task(self.admitter.run())
            group.create_task(self.pool.write_statuses())
            group.create_task(self._resync())
            group.create_task(self.reconciler.events.run())
            group.create_task(self.quarantine.run())
            for _ in range(self.settings.workers):
                self._workers.append(group.create_task(self._worker(NORMAL)))
            for _ in range(self.settings.urgent_workers):
                self._workers.append(group.create_task(self._worker(URGENT)))

    async def finish_reconciles(self, seconds: float) -> None:
        """Hand out no more keys and let the reconciles in flight end, for at most ``seconds``.

        A reconcile stopped halfway has created part of a gang and recorded none of its Events.
        """
        self.queue.shut_down()
        if self._workers:
            await asyncio.wait(self._workers, timeout=seconds)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            self._requeue_all()

    async def _worker(self, max_lane: int) -> None:
        while True:
            try:
                key = await self.queue.get(max_lane)
            except ShutDown:
                return
            started = time.perf_counter()
            try:
                requeue_after = await self.reconciler.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self.queue.add_rate_limited(key)
                self.metrics.reconcile_errors.inc()
                log.warning(
                    "%s/%s: reconcile failed (%s); retrying in %.2fs",
                    *key,
                    exc,
                    delay,
                    extra={"job": "/".join(key)},
                )
            else:
                self.queue.forget(key)
                if requeue_after is not None:
                    self.queue.add_after(key, requeue_after)
            finally:
                self.queue.done(key)
                self.metrics.reconcile_seconds.observe(time.perf_counter() - started)


async def serve_metrics(
    metrics: ControllerMetrics, not_ready: Callable[[], list[str]], bind: str, port: int
) -> web.AppRunner:
    """Plain-HTTP ``/metrics``, ``/healthz`` (ok while the process serves) and ``/readyz``.

    ``/readyz`` answers 503 with ``not_ready()``'s reasons, one a line, while there are any
    (``readiness``), else ``ok``. ``torchgate_controller_leader`` tells which replica acts.
    """

    async def metrics_text(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        reasons = not_ready()
        if reasons:
            return web.Response(status=503, text="".join(f"{reason}\n" for reason in reasons))
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_text)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, bind, port).start()
    return runner


async def run_as_leader(
    api: KubeApi,
    settings: ManagerOptions,
    *,
    elector: LeaderElector | None,
    metrics_bind: str,
    metrics_port: int | None,
    stop: asyncio.Event,
    pool_service: PoolServiceOptions | None = None,
) -> int:
    """Serve metrics, wait for the Lease, run the manager until ``stop`` or the Lease is lost.

    The pool service (when configured) is served by the leader only, from the moment it leads;
    its pod carries the leader label meanwhile (``poolservice`` rule 4).

    On ``stop`` it starts no reconcile, lets those in flight end (at most
    ``RECONCILE_DRAIN_SECONDS``: a gang is not left half created, its Events not recorded), then
    stops acting (the manager is cancelled), then, unless its Deployment still asks for replicas
    (a rolling upgrade: the next leader carries on), takes its finalizer off every TeamQuota (at
    most ``QUOTA_RELEASE_SECONDS``: ``poolsource`` rule 4), then stops the pool
    service (answers in flight get ``poolservice.DRAIN_SECONDS``, rule 7), then gives the Lease
    up (at most the renew deadline) while it sends the Events of what it did that it still holds
    (those waiting for a status write put off during a wave, and the recorder's backlog; at most
    ``EVENT_FLUSH_SECONDS``; the successor does not wait for them): a stop ends within a pod's
    30 s grace period, even when the apiserver hangs. A standby stopped while it takes the Lease
    gives it up too (its write may have landed: ``leader``).
    """
    manager = Manager(api, settings)
    leading = False

    def not_ready() -> list[str]:
        state = ReplicaState(
            stopping=stop.is_set(),
            leading=leading,
            lease_read=elector is None or elector.lease_read,
            synced=manager.synced.is_set(),
            failing=manager.failing_caches(),
        )
        return not_ready_reasons(state)

    pod = pool_service.pod if pool_service is not None else None
    if pod is not None:
        await mark_leader(api, namespace=pod[0], pod=pod[1], leading=False)
    runner = (
        await serve_metrics(manager.metrics, not_ready, metrics_bind, metrics_port)
        if metrics_port is not None
        else None
    )
    lost = False
    background: list[asyncio.Task[None]] = []
    try:
        if elector is not None:
            try:
                await unless_stopped(elector.acquire(), stop)
            except Stopped:
                return 0  # the Lease is given up below: this standby's take may have landed
        leading = True
        manager.metrics.leader.set(1)
        if pool_service is not None:
            serving = serve_when_ready(api, manager.pool_facts(), pool_service)
            background.append(asyncio.create_task(serving))
        run = asyncio.create_task(manager.run())
        waiters = {run, asyncio.create_task(stop.wait())}
        if elector is not None:
            waiters.add(asyncio.create_task(elector.hold()))
        done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        lost = elector is not None and not stop.is_set() and run not in done
        if stop.is_set() and run not in done:
            await manager.finish_reconciles(RECONCILE_DRAIN_SECONDS)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if stop.is_set() and run not in done:  # no TeamQuota waits for a controller gone
            await manager.pool.release_finalizers(
                seconds=QUOTA_RELEASE_SECONDS, deployment=settings.deployment
            )
        if run in done and run.exception() is not None:
            raise run.exception()  # type: ignore[misc]
    finally:
        manager.metrics.leader.set(0)
        manager.queue.shut_down()
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if leading:
            manager.reconciler.record_held_events()
        await asyncio.gather(
            elector.release() if elector is not None and not lost else asyncio.sleep(0),
            manager.reconciler.events.flush(EVENT_FLUSH_SECONDS) if leading else asyncio.sleep(0),
        )
        if runner is not None:
            await runner.cleanup()
    return 1 if lost else 0

"""The controller's Prometheus metrics, on a registry of its own.

Besides reconcile latency, queue depth and pod writes, three measure what torchgate is for:

- ``torchgate_controller_gang_wait_seconds``: how long gangs waited for capacity before admission.
- ``torchgate_controller_gang_restarts_total{cause}``: whole-gang restarts by cause
  (``pytorchjob.reasons.Cause``): ``ContainerFailed`` is the program's own failure, ``Hang`` a
  Master that made no progress for its deadline and ``ImagePullFailed`` an image the job's pods
  could not pull a second time, the three ``backoffLimit`` counts; ``NodeLost``,
  ``NodeTainted``, ``PodDisrupted``, ``PodDeleted``, ``PodStuck`` are the infrastructure's or
  someone else's, ``Preempted``, ``ScheduleTimeout`` and ``GangIncomplete``
  torchgate's own.
- ``torchgate_controller_quarantined_nodes`` and
  ``torchgate_controller_node_quarantines_total{cause}``: nodes kept out of new placements now,
  and quarantines set so far by the cause most of their faults had (``controller.quarantine``).
- ``torchgate_controller_released_gpus_total`` and
  ``torchgate_controller_gpu_seconds_released_total``: GPUs torchgate freed by deleting
  still-running pods the moment a job ended, and the GPU-seconds returned to the pool since then:
  what the training-operator's default (``cleanPodPolicy: None``) would have kept occupied until
  someone deleted the job. The second grows while such a finished job still exists and stops when
  it is deleted, as the operator's pods would have gone with it.

Every replica is scraped, the standby too: ``torchgate_controller_leader`` is 1 while a replica
leads (holds the Lease, or runs with ``--no-leader-elect``) and 0 while it stands by, so
replicas that are up while none leads (the Lease cannot be taken: RBAC, its namespace) are told
apart from a working controller. A standby's other metrics are zeros: it watches nothing.

The pool's dashboards read, at scrape time, from the admission cycle's own state (no extra work
between scrapes): per team and ``Queued`` reason, ``torchgate_controller_waiting_jobs``,
``torchgate_controller_waiting_gpus`` and ``torchgate_controller_longest_wait_seconds``; per
team, ``torchgate_controller_team_quota_gpus``, ``torchgate_controller_team_used_gpus`` and
``torchgate_controller_team_borrowed_gpus``. A namespace no team owns counts under ``team=""``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from torchgate.pytorchjob.names import JobKey


class WaitingDemand(Protocol):
    """The jobs of one team waiting for one reason (``admission.waiting.Demand``)."""

    @property
    def team(self) -> str:
        """The owning team, ``""`` for none."""

    @property
    def reason(self) -> str:
        """The ``Queued`` reason."""

    @property
    def jobs(self) -> int:
        """How many wait."""

    @property
    def gpus(self) -> int:
        """The GPUs they ask for, in milli-units."""

    @property
    def longest_wait(self) -> float:
        """Seconds the longest waiter has waited."""


@dataclass(frozen=True, slots=True)
class TeamShare:
    """One team's GPUs: its nominal quota, what its admitted gangs use, what of that is borrowed."""

    team: str
    quota: float
    used: float
    borrowed: float


class ControllerMetrics:
    """Counters, histograms and the collectors computed at scrape time."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        job_states: Callable[[], Iterable[str]] = lambda: (),
        queue_depth: Callable[[], int] = lambda: 0,
        events_dropped: Callable[[], int] = lambda: 0,
        quarantined_nodes: Callable[[], int] = lambda: 0,
        waiting: Callable[[], Iterable[WaitingDemand]] = lambda: (),
        teams: Callable[[], Iterable[TeamShare]] = lambda: (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.clock = clock
        self.reconcile_seconds = Histogram(
            "torchgate_controller_reconcile_seconds",
            "Time to reconcile one PyTorchJob.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "torchgate_controller_reconcile_errors_total",
            "Reconciles that failed and were retried with backoff.",
            registry=self.registry,
        )
        self.pods_created = Counter(
            "torchgate_controller_pods_created_total", "Pods created.", registry=self.registry
        )
        self.pods_deleted = Counter(
            "torchgate_controller_pods_deleted_total", "Pods deleted.", registry=self.registry
        )
        self.leader = Gauge(
            "torchgate_controller_leader",
            "1 while this replica leads (holds the Lease, or runs without leader election), "
            "0 while it stands by.",
            registry=self.registry,
        )
        self.api_writes = Gauge(
            "torchgate_controller_api_writes",
            "Pod and Service creates and deletes: in_flight at the apiserver, or waiting for one "
            "of the write-concurrency slots.",
            ["write", "state"],
            registry=self.registry,
        )
        self.gang_restarts = Counter(
            "torchgate_controller_gang_restarts_total",
            "Whole-gang restarts by cause (only ContainerFailed, Hang and ImagePullFailed count "
            "against backoffLimit).",
            ["cause"],
            registry=self.registry,
        )
        self.node_quarantines = Counter(
            "torchgate_controller_node_quarantines_total",
            "Nodes quarantined, by the cause most of their counted faults had.",
            ["cause"],
            registry=self.registry,
        )
        self.gang_wait = Histogram(
            "torchgate_controller_gang_wait_seconds",
            "Time a gang waited for capacity before it was admitted.",
            buckets=(0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600),
            registry=self.registry,
        )
        self.released_gpus = Counter(
            "torchgate_controller_released_gpus_total",
            "GPUs freed by deleting still-running pods when their job ended.",
            registry=self.registry,
        )
        self.release_seconds = Histogram(
            "torchgate_controller_release_seconds",
            "Time from a job's end (the deciding pod's exit) to the deletion of its other pods.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=self.registry,
        )
        self._held: dict[JobKey, tuple[int, float]] = {}  # GPUs freed, when
        self._retired_gpu_seconds = 0.0
        self.registry.register(
            _ScrapeTime(self, job_states, queue_depth, events_dropped, quarantined_nodes)
        )
        self.registry.register(_PoolGauges(waiting, teams))

    def record_release(self, key: JobKey, gpus: int, since_end: float | None) -> None:
        """A job's end released ``gpus`` still held by running pods, ``since_end`` s after it."""
        if key in self._held:
            return
        if since_end is not None:
            self.release_seconds.observe(max(since_end, 0.0))
        if gpus:
            self.released_gpus.inc(gpus)
            self._held[key] = (gpus, self.clock())

    def forget_job(self, key: JobKey) -> None:
        """The job is gone: stop counting GPU-seconds for it."""
        held = self._held.pop(key, None)
        if held is not None:
            self._retired_gpu_seconds += held[0] * (self.clock() - held[1])

    def gpu_seconds_released(self) -> float:
        """GPU-seconds returned to the pool by releasing pods at job end, so far."""
        now = self.clock()
        live = sum(gpus * (now - since) for gpus, since in self._held.values())
        return self._retired_gpu_seconds + live


class _ScrapeTime(Collector):
    """Metrics computed from the caches when Prometheus scrapes."""

    def __init__(
        self,
        metrics: ControllerMetrics,
        job_states: Callable[[], Iterable[str]],
        queue_depth: Callable[[], int],
        events_dropped: Callable[[], int],
        quarantined_nodes: Callable[[], int],
    ) -> None:
        self.metrics = metrics
        self.quarantined_nodes = quarantined_nodes
        self.job_states = job_states
        self.queue_depth = queue_depth
        self.events_dropped = events_dropped

    def collect(self) -> Iterator[Any]:
        by_state: dict[str, int] = {}
        for state in self.job_states():
            by_state[state] = by_state.get(state, 0) + 1
        jobs = GaugeMetricFamily(
            "torchgate_controller_jobs", "PyTorchJobs by state (last condition).", labels=["state"]
        )
        for state, count in sorted(by_state.items()):
            jobs.add_metric([state], count)
        yield jobs
        yield GaugeMetricFamily(
            "torchgate_controller_queue_depth",
            "Jobs queued for reconcile.",
            value=self.queue_depth(),
        )
        yield GaugeMetricFamily(
            "torchgate_controller_quarantined_nodes",
            "Nodes carrying torchgate's quarantine taint.",
            value=self.quarantined_nodes(),
        )
        yield CounterMetricFamily(
            "torchgate_controller_events_dropped",
            "Events not sent because the backlog was full (each is still a log line).",
            value=self.events_dropped(),
        )
        yield CounterMetricFamily(
            "torchgate_controller_gpu_seconds_released",
            "GPU-seconds returned to the pool by deleting running pods when jobs ended.",
            value=self.metrics.gpu_seconds_released(),
        )


class _PoolGauges(Collector):
    """Who waits and who uses what, from the admission cycle's state at scrape time."""

    def __init__(
        self,
        waiting: Callable[[], Iterable[WaitingDemand]],
        teams: Callable[[], Iterable[TeamShare]],
    ) -> None:
        self.waiting = waiting
        self.teams = teams

    def collect(self) -> Iterator[Any]:
        labels = ["team", "reason"]
        jobs = GaugeMetricFamily(
            "torchgate_controller_waiting_jobs", "Jobs waiting, by team and reason.", labels=labels
        )
        gpus = GaugeMetricFamily(
            "torchgate_controller_waiting_gpus",
            "GPUs the waiting jobs count against their team, by team and reason.",
            labels=labels,
        )
        longest = GaugeMetricFamily(
            "torchgate_controller_longest_wait_seconds",
            "How long the longest-waiting job has waited, by team and reason.",
            labels=labels,
        )
        for demand in self.waiting():
            key = [demand.team, demand.reason]
            jobs.add_metric(key, demand.jobs)
            gpus.add_metric(key, demand.gpus / 1000)
            longest.add_metric(key, demand.longest_wait)
        yield from (jobs, gpus, longest)
        quota = GaugeMetricFamily(
            "torchgate_controller_team_quota_gpus", "A team's nominal GPUs.", labels=["team"]
        )
        used = GaugeMetricFamily(
            "torchgate_controller_team_used_gpus",
            "GPUs a team's admitted gangs use (borrowed ones included).",
            labels=["team"],
        )
        borrowed = GaugeMetricFamily(
            "torchgate_controller_team_borrowed_gpus",
            "GPUs a team uses beyond its nominal quota.",
            labels=["team"],
        )
        for share in self.teams():
            quota.add_metric([share.team], share.quota)
            used.add_metric([share.team], share.used)
            borrowed.add_metric([share.team], share.borrowed)
        yield from (quota, used, borrowed)

"""What ``plan()`` reads and returns, and the draft its rules build the answer in.

``Observed`` is everything a plan may look at, ``Plan`` what it asks for, ``Event`` what it reports;
the readers below interpret raw pods (ownership, gang attempt, exit code) the same way for every
rule; ``Draft`` collects a plan's actions and the status it will leave behind, and ``GangPods``
sorts a job's pods once (current attempt, stale, terminating). The rules themselves are in
``plan``, ``gang`` and ``finish``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from torchgate.controller.admission.nodes import PodDemand, job_demands
from torchgate.controller.job import status as st
from torchgate.controller.job.disruption import (
    DEFAULT_FAILURE_WINDOW_SECONDS,
    DEFAULT_LOST_AFTER_SECONDS,
    DEFAULT_STUCK_AFTER_SECONDS,
    NODE_FAULTS,
    NodeFault,
    NodeHealth,
)
from torchgate.controller.quarantine.rules import Outage
from torchgate.pytorchjob import names, progress
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources
from torchgate.pytorchjob.digits import parse_integer
from torchgate.pytorchjob.reasons import Cause
from torchgate.pytorchjob.spec import JobSpec, as_int, as_mapping, pytorch_container_name

# The job's current gang attempt; its pods carry the attempt that created them under the same key.
ANNOTATION_ATTEMPT: Final = names.ANNOTATION_GANG_ATTEMPT
# The node of the job's first stuck image pull (``disruption`` rule 6: later ones are the job's).
ANNOTATION_IMAGE_PULL_STUCK: Final = "torchgate.io/image-pull-stuck"

EventType = Literal["Normal", "Warning"]
AdoptedKind = Literal["Pod", "Service"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """Everything ``plan`` may look at (the shell reads it; nothing here does I/O).

    Attributes:
        job_raw: The job as read (metadata with annotations and deletionTimestamp, status).
        job: ``pytorchjob.spec.parse_job`` of it.
        pods: The job's pods (filtered again here by controlling ownerReference uid).
        name_holders: Pods and Services without the job's labels that hold one of its pods' or
            Services' names (a user's own, say): never the job's, and no change of theirs
            reconciles the job. A Service says ``kind: Service`` (``holds_service_name``); any
            other holder is a pod (pods are listed without their kind).
        services: The job's Services (same filter).
        now: The clock, timezone-aware.
        allow_clean_pod_policy_none: The admin policy lets finished jobs keep running pods.
        reservation: Pod name -> node the admitter reserved; ``None`` when not admitted.
        wait_reason: The admitter's latest shortfall message for this job, if any.
        wait_kind: What it waits for (``Quota``, ``Capacity``, ``Topology``, ``Preempting``),
            which names the reason of its ``Queued`` condition and Event (``WaitingForQuota``,
            ``WaitingForResources``, ``WaitingForTopology``, ``WaitingForPreemption``).
        preempted_by: ``namespace/name`` of the job whose admission chose this job's gang as a
            victim, while the gang is being evicted.
        growth_wait: What its running gang's waiting Workers wait for (``Quota`` or
            ``Capacity``: ``ledger`` rule 7), once the admitter tried to place them;
            ``Refused`` while the apiserver's refusal to create them stands (``waiting`` rule 8).
        growth_refusal: The apiserver's words when it refused to create them (``Refused``).
        gpu_resource: The extended resource that counts as GPUs.
        gpu_sources: Everything that counts as GPUs (``policy.gpus``); None: ``gpu_resource`` only.
        claims: The ResourceClaims, templates and DeviceClasses the controller sees in the
            job's namespace (claimed GPUs set ``PET_NPROC_PER_NODE``).
        finish_grace_seconds: How long the running pods of a succeeded job may take to end on
            their own before they are deleted (rule 6).
        demands_of: ``job_demands``, or a memo of it (the shell keeps one per job spec: parsing
            every template's requests again on each reconcile of a waiting job is costly).
        departed: The last state of each of the job's pods this controller saw go away (the
            disruption rules judge a member that vanished by it).
        nodes: The nodes the job's pods are (or were) on, as the node cache has them; a node the
            cache no longer has is present as deleted, a node not listed is not judged.
        node_lost_seconds: How long a node may stay not Ready before its pods count as lost.
        failure_window_seconds: How long after a member failed a fault its node shows takes
            it (``disruption`` rule 8); 0: a failure is the program's at once.
        progress_deadline_seconds: The job's progress deadline (``pytorchjob.progress``), if any:
            its rendezvous replica is created with the probe that ends it when it hangs.
        stuck_pod_seconds: How long a bound pod may wait for its containers to start before it
            counts as stuck on its node (the job's policy's ``quarantine.stuckPodSeconds``).
        namespace_terminating: The apiserver refused a create in the job's namespace because
            the namespace is being deleted (``plan`` rules 1 and 9).
    """

    job_raw: Mapping[str, Any]
    job: JobSpec
    now: datetime
    pods: Sequence[Mapping[str, Any]] = ()
    name_holders: Sequence[Mapping[str, Any]] = ()
    services: Sequence[Mapping[str, Any]] = ()
    allow_clean_pod_policy_none: bool = False
    reservation: Mapping[str, str] | None = None
    wait_reason: str | None = None
    wait_kind: str | None = None
    growth_wait: str | None = None
    growth_refusal: str | None = None
    preempted_by: str | None = None
    gpu_resource: str = names.DEFAULT_GPU_RESOURCE
    gpu_sources: GpuSources | None = None
    claims: ClaimLookup = NO_CLAIMS
    finish_grace_seconds: float = 0.0
    demands_of: Callable[[JobSpec], tuple[PodDemand, ...]] = job_demands
    departed: Sequence[Mapping[str, Any]] = ()
    nodes: Mapping[str, NodeHealth] = field(default_factory=dict)
    node_lost_seconds: float = DEFAULT_LOST_AFTER_SECONDS
    failure_window_seconds: float = DEFAULT_FAILURE_WINDOW_SECONDS
    stuck_pod_seconds: float = DEFAULT_STUCK_AFTER_SECONDS
    progress_deadline_seconds: int | None = None
    namespace_terminating: bool = False

    @property
    def gpus(self) -> GpuSources:
        """What counts as GPUs for this job."""
        return self.gpu_sources or GpuSources(self.gpu_resource)


@dataclass(frozen=True, slots=True)
class Restart:
    """Why a plan restarts the gang: the cause, the node it happened on, whether it counts.

    Only ``ContainerFailed``, ``Hang`` and ``ImagePullFailed`` count against ``backoffLimit``
    (``disruption.COUNTED``); the node is known for the disruptions that happen on one
    (``job.disruption``), and so are the other nodes that took members with it
    (``other_nodes``, ``disruption`` rule 7); ``blames_node`` is False when the node is not at
    fault (an eviction someone asked for, ``disruption`` rule 3); ``outage`` is the spell of the
    node's trouble the restart came from (``disruption`` rule 9), not compared.
    """

    cause: Cause
    node: str | None = None
    counted: bool = False
    other_nodes: tuple[NodeFault, ...] = ()
    blames_node: bool = True
    outage: Outage | None = field(default=None, compare=False)

    def node_faults(self) -> tuple[NodeFault, ...]:
        """The nodes this restart charges a fault for quarantine, each once, with its outage."""
        blamed = self.node is not None and self.blames_node
        first = (
            (NodeFault(self.node, self.cause, self.outage),)
            if blamed and self.node is not None
            else ()
        )
        return tuple(f for f in (*first, *self.other_nodes) if f.cause in NODE_FAULTS)


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event to record on the job.

    ``announces_status`` marks an Event that reports a condition change of the plan's status
    (``Created``, ``Running``, ``Queued``, ...): it belongs to that status and is recorded when the
    status is written. Until then every plan derives the change, and its Event, again from the
    written status. Other Events report an action of the plan (``GangAdmitted`` with its creates)
    and are recorded with the action.
    """

    type: EventType
    reason: str
    message: str
    announces_status: bool = False


@dataclass(frozen=True, slots=True)
class Adoption:
    """An orphan the job adopts (``adoption``): kind, name and uid (the patch's precondition)."""

    kind: AdoptedKind
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do; the empty ``Plan()`` means "nothing".

    Every part is idempotent to apply (deterministic names: AlreadyExists on create and NotFound
    on delete mean "done"), in any order, and a crash between parts is repaired by the next plan.

    Attributes:
        status: The complete new ``status``, or ``None`` when unchanged. A time it drops
            (``startTime`` on resume) is present as ``None``, so it works as the body of a JSON
            merge patch (which removes it) as well as of a replace.
        events: Events to record on the job; only emitted on transitions and actions.
        create_services: Service manifests to create.
        create_pods: Pod manifests to create.
        delete_pods: Names of pods to delete.
        delete_services: Names of Services to delete.
        needs_admission: The job waits for the admitter to place ``demands`` all-or-nothing.
        demands: The gang to place, Master first (only with ``needs_admission``).
        growth: A running elastic gang's Workers beyond ``minAvailable`` that wait for the
            admitter to place them beside it (``gang.waiting_extras``), in rank order.
        unreserve: Pods the admitter reserved a node for that the job no longer expects (a
            scale down before they were created): the reservation drops them.
        extras: The names among ``create_pods`` of elastic Workers beyond ``minAvailable``: the
            apiserver may refuse them (a ResourceQuota) without breaking the running gang.
        restarts: New value of the job annotation ``torchgate.io/restarts``, or ``None``.
        attempt: New value of the job annotation ``torchgate.io/gang-attempt``, or ``None``:
            every restart moves the job to a new attempt (with its own rendezvous fence).
        image_pull_stuck: New value of the job annotation ``torchgate.io/image-pull-stuck``
            (the node of its first stuck image pull), or ``None``.
        restart: Why this plan restarts the gang, when it does.
        force_delete_pods: Names of pods to delete at once (grace period 0): they are on a lost
            node, whose kubelet would never confirm a graceful deletion.
        delete_job: ``ttlSecondsAfterFinished`` has passed: delete the job itself.
        requeue_after: Seconds until a timer (deadline, TTL, gang schedule timeout) needs a look.
        gang_timed_out: The gang was torn down because kube-scheduler did not bind enough of its
            pods in time; the admitter should back off before placing it again.
        adopt: Orphaned pods and Services of the job to adopt (``adoption``), before anything
            else of the plan is applied: the rest of the plan counts them as the job's.
    """

    status: dict[str, Any] | None = None
    events: tuple[Event, ...] = ()
    create_services: tuple[dict[str, Any], ...] = ()
    create_pods: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    delete_services: tuple[str, ...] = ()
    needs_admission: bool = False
    demands: tuple[PodDemand, ...] = ()
    growth: tuple[PodDemand, ...] = ()
    unreserve: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    restarts: int | None = None
    attempt: int | None = None
    image_pull_stuck: str | None = None
    restart: Restart | None = None
    force_delete_pods: tuple[str, ...] = ()
    delete_job: bool = False
    requeue_after: float | None = None
    gang_timed_out: bool = False
    adopt: tuple[Adoption, ...] = ()


# ------------------------------------------------------------------ reading the observed state


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` of a raw object (empty when malformed)."""
    return as_mapping(obj.get("metadata"))


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name`` (``""`` when missing)."""
    name = metadata_of(obj).get("name")
    return name if isinstance(name, str) else ""


def holds_service_name(holder: Mapping[str, Any]) -> bool:
    """Whether a name holder (``Observed.name_holders``) is a Service rather than a pod."""
    return holder.get("kind") == "Service"


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether ``obj`` has a controlling ownerReference to ``uid`` (anything when ``uid`` is "")."""
    if not uid:
        return True
    references = metadata_of(obj).get("ownerReferences")
    if not isinstance(references, list):
        return False
    return any(
        isinstance(ref, Mapping) and ref.get("uid") == uid and ref.get("controller") is True
        for ref in references
    )


def _count(value: object) -> int | None:
    """A non-negative decimal integer written as a string (annotations), else ``None``."""
    return parse_integer(value) if isinstance(value, str) else None


def restarts_of(job: JobSpec) -> int:
    """Gang restarts so far (the ``torchgate.io/restarts`` annotation; malformed counts as 0)."""
    return _count(job.annotations.get(names.ANNOTATION_RESTARTS)) or 0


def image_pull_stuck_on(job: JobSpec) -> str | None:
    """The node of the job's first stuck image pull (``None``: it has had none)."""
    value = job.annotations.get(ANNOTATION_IMAGE_PULL_STUCK)
    return value if isinstance(value, str) else None


def current_attempt(annotations: Mapping[str, Any]) -> int:
    """The job's gang attempt: its ``torchgate.io/gang-attempt``, else (older jobs) restarts + 1."""
    attempt = _count(annotations.get(ANNOTATION_ATTEMPT))
    return attempt if attempt else (_count(annotations.get(names.ANNOTATION_RESTARTS)) or 0) + 1


def attempt_of(pod: Mapping[str, Any]) -> int | None:
    """The gang attempt that created ``pod`` (``None`` for pods torchgate did not create)."""
    return _count(
        as_mapping(metadata_of(pod).get("annotations")).get(names.ANNOTATION_GANG_ATTEMPT)
    )


def expected_pods(job: JobSpec) -> dict[str, tuple[names.ReplicaType, int]]:
    """Pod name -> (replica type, index) for every replica of the job, Master first."""
    return {
        names.replica_name(job.name, spec.replica_type, index): (spec.replica_type, index)
        for spec in job.replica_specs
        for index in range(spec.replicas)
    }


def _pytorch_terminated(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``terminated`` state of the ``pytorch`` container (empty when it has none)."""
    statuses = as_mapping(pod.get("status")).get("containerStatuses")
    if not isinstance(statuses, list):
        return {}
    training = pytorch_container_name(as_mapping(pod.get("spec"))) or names.CONTAINER_NAME
    for container in statuses:
        if isinstance(container, Mapping) and container.get("name") == training:
            return as_mapping(as_mapping(container.get("state")).get("terminated"))
    return {}


def pytorch_exit_code(pod: Mapping[str, Any]) -> int | None:
    """Exit code of the terminated ``pytorch`` container, ``None`` when it has none."""
    return as_int(_pytorch_terminated(pod).get("exitCode"))


def ended_hung(pod: Mapping[str, Any]) -> bool:
    """The ``pytorch`` container was ended by the progress probe (``pytorchjob.progress``)."""
    return progress.is_hang(_pytorch_terminated(pod).get("message"))


def is_retryable(restart_policy: str, pod: Mapping[str, Any]) -> bool:
    """Whether a Failed pod should restart the gang (else the job fails for good).

    ``ExitCode``: 1-127 is the program's own failure (permanent); 128 and above is a signal (OOM
    kill 137, SIGTERM 143, ...) and retryable, as is a pod whose container never terminated (it
    failed before it started). Pods that were evicted or deleted are disruptions, not failures,
    and never come here (``job.disruption``).
    """
    if restart_policy == "Never":
        return False
    if restart_policy != "ExitCode":
        return True
    code = pytorch_exit_code(pod)
    return code is None or not 1 <= code <= 127


# ------------------------------------------------------------------ the draft


@dataclass(slots=True)
class Draft:
    """The plan being built by ``plan``'s rules, with the status it will leave behind."""

    observed: Observed
    conditions: list[st.Condition]
    start_time: str | None
    completion_time: str | None
    replica_statuses: dict[str, dict[str, Any]] | None = None
    events: list[Event] = field(default_factory=list)
    create_services: list[dict[str, Any]] = field(default_factory=list)
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    delete_services: list[str] = field(default_factory=list)
    needs_admission: bool = False
    growth: tuple[str, ...] = ()  # waiting extras of a running gang (``Plan.growth``)
    unreserve: tuple[str, ...] = ()
    extras: list[str] = field(default_factory=list)  # elastic extras in ``create_pods``
    restarts: int | None = None
    attempt: int | None = None
    image_pull_stuck: str | None = None
    restart: Restart | None = None
    force_delete_pods: list[str] = field(default_factory=list)
    delete_job: bool = False
    timers: list[float] = field(default_factory=list)
    gang_timed_out: bool = False

    @property
    def job(self) -> JobSpec:
        """The parsed job."""
        return self.observed.job

    @property
    def now(self) -> datetime:
        """The clock of this plan."""
        return self.observed.now

    def set_condition(self, kind: str, status: str, reason: str, message: str) -> bool:
        """Set a condition; True when its status or reason changed (a transition)."""
        before = st.find_condition(self.conditions, kind)
        self.conditions = st.set_condition(self.conditions, kind, status, reason, message, self.now)
        after = st.find_condition(self.conditions, kind)
        if after is None:
            return False
        if before is None:
            return True
        return (before.get("status"), before.get("reason")) != (
            after.get("status"),
            after.get("reason"),
        )

    def event(self, kind: EventType, reason: str, message: str) -> None:
        """An Event reporting an action of this plan."""
        self.events.append(Event(kind, reason, message))

    def transition(self, kind: EventType, reason: str, message: str) -> None:
        """An Event announcing a condition change of this plan's status."""
        self.events.append(Event(kind, reason, message, announces_status=True))

    def delete_pod(self, name: str) -> None:
        """Ask for the pod's deletion (once)."""
        if name and name not in self.delete_pods and name not in self.force_delete_pods:
            self.delete_pods.append(name)

    def force_delete(self, name: str) -> None:
        """Ask for the pod's deletion without a grace period (once), instead of a graceful one."""
        if name in self.delete_pods:
            self.delete_pods.remove(name)
        if name and name not in self.force_delete_pods:
            self.force_delete_pods.append(name)

    def timer(self, seconds: float) -> None:
        """Ask to be planned again in ``seconds`` (the earliest timer wins)."""
        self.timers.append(max(seconds, 0.001))

    def status(self) -> dict[str, Any] | None:
        """The status this plan leaves behind, ``None`` when it is the one observed."""
        old = as_mapping(self.observed.job_raw.get("status"))
        new = dict(old)
        new["conditions"] = self.conditions
        if self.replica_statuses is not None:
            new["replicaStatuses"] = self.replica_statuses
        times = (("startTime", self.start_time), ("completionTime", self.completion_time))
        for key, value in times:
            if value is not None or new.get(key) is not None:
                new[key] = value  # a dropped time becomes null, which a merge patch removes
        return None if new == old else new

    def _growth_demands(self) -> tuple[PodDemand, ...]:
        if not self.growth:
            return ()
        waiting = frozenset(self.growth)
        return tuple(d for d in self.observed.demands_of(self.job) if d.pod_name in waiting)

    def finish(self) -> Plan:
        """The plan."""
        return Plan(
            status=self.status(),
            events=tuple(self.events),
            create_services=tuple(self.create_services),
            create_pods=tuple(self.create_pods),
            delete_pods=tuple(self.delete_pods),
            delete_services=tuple(self.delete_services),
            needs_admission=self.needs_admission,
            demands=self.observed.demands_of(self.job) if self.needs_admission else (),
            growth=self._growth_demands(),
            unreserve=self.unreserve,
            extras=tuple(self.extras),
            restarts=self.restarts,
            attempt=self.attempt,
            image_pull_stuck=self.image_pull_stuck,
            restart=self.restart,
            force_delete_pods=tuple(self.force_delete_pods),
            delete_job=self.delete_job,
            requeue_after=min(self.timers) if self.timers else None,
            gang_timed_out=self.gang_timed_out,
        )


@dataclass(frozen=True, slots=True)
class GangPods:
    """The job's pods, sorted out once.

    ``current`` are pods of the current gang attempt with an expected name (terminating ones
    included); ``stale_live`` names live pods of an older attempt or an unexpected name;
    ``departed`` are the last states of current members that went away.
    """

    owned: list[Mapping[str, Any]]
    expected: dict[str, tuple[names.ReplicaType, int]]
    attempt: int
    live: list[Mapping[str, Any]]
    terminating: list[Mapping[str, Any]]
    current: dict[str, Mapping[str, Any]]
    current_live: dict[str, Mapping[str, Any]]
    stale_live: list[str]
    departed: list[Mapping[str, Any]]


def sort_pods(observed: Observed) -> GangPods:
    """The job's pods sorted out for the rules (see ``GangPods``)."""
    job = observed.job
    owned = [p for p in observed.pods if isinstance(p, Mapping) and controlled_by(p, job.uid)]
    expected = expected_pods(job)
    attempt = current_attempt(job.annotations)
    live: list[Mapping[str, Any]] = []
    terminating: list[Mapping[str, Any]] = []
    current: dict[str, Mapping[str, Any]] = {}
    stale_live: list[str] = []
    for pod in owned:
        name = name_of(pod)
        is_current = name in expected and attempt_of(pod) == attempt
        if is_current:
            current[name] = pod
        if st.is_terminating(pod):
            terminating.append(pod)
            continue
        live.append(pod)
        if not is_current:
            stale_live.append(name)
    current_live = {n: p for n, p in current.items() if not st.is_terminating(p)}
    departed = [
        pod
        for pod in observed.departed
        if controlled_by(pod, job.uid)
        and (name := name_of(pod)) in expected
        and name not in current
        and attempt_of(pod) == attempt
    ]
    return GangPods(
        owned, expected, attempt, live, terminating, current, current_live, stale_live, departed
    )

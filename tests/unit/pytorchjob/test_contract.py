"""Each contract between the webhook and the controller is one declaration, and both follow it.

``pytorchjob.contract`` declares every injected variable; these tests fail when the controller
injects a name it does not declare (or never injects a declared one), when the webhook does not
refuse a reserved name or flag the controller overrides, when it refuses a default, or when
README's table and the declaration disagree, or when in some gang attempt the rendezvous pod
listens elsewhere than every pod's ``MASTER_PORT`` says. For generated jobs they also fail when
what the webhook stores and what the controller builds from it disagree on the gang size
(``pytorchjob.gang``), on the node requirements (``pytorchjob.affinity``), on ``PET_NNODES``, or
on which container is ``pytorch`` (``pytorchjob.spec.pytorch_container_index``). For pool
sharing they fail when the webhook and the controller disagree on which team owns a namespace
(``pool.resolve_teams``), on what a gang counts against its team's quota (``pool.gang_usage``),
or when the admitter's queue and the admission cycle disagree on the admission order
(``pool.admission_order``). For GPUs claimed through Dynamic Resource Allocation they fail when the
webhook (``maxGPUsPerJob``) and the controller (quota usage waiting and running, demands,
``PET_NPROC_PER_NODE``) count a job's claimed GPUs differently (``pytorchjob.devices``).
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.claims import (
    GPU_CLASS,
    claim_refs,
    claim_template,
    claiming_pod,
    device_request,
    seen,
)
from tests.builders.job import container, gpu_job, job, parsed_job, with_uid
from tests.builders.node import node
from tests.builders.team import parsed_team, team_quota
from tests.unit.controller.helpers import World, env_of
from tests.unit.nodeselector import NODE_NAMES, Node, affinity_matches, nodes, term_lists
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.decide import Pool, WaitingGang, decide
from torchgate.controller.admission.nodes import job_demands
from torchgate.controller.admission.poolsource import PoolSource
from torchgate.controller.admission.topology import Capacity, build_topology, shape_of
from torchgate.controller.admission.waiting import GangRequest
from torchgate.controller.job.envvars import merge_env, rank_env
from torchgate.controller.job.model import expected_pods
from torchgate.controller.job.plan import pytorch_exit_code
from torchgate.controller.job.pods import build_pod
from torchgate.controller.job.reconciler import Options, Reconciler, job_key_of_pod
from torchgate.controller.metrics import ControllerMetrics
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS, PYTORCHJOBS, SERVICES, TEAM_QUOTAS
from torchgate.pytorchjob import affinity, contract, gang, names
from torchgate.pytorchjob.devices import RESOURCE_CLAIM_TEMPLATE, GpuSources, SeenClaims
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.pytorchjob.pool import GPUS
from torchgate.pytorchjob.spec import pytorch_container_index
from torchgate.webhook.defaulting import default_job
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.validation import Team, scaling, validate_create, validate_scale

README = Path(__file__).resolve().parents[3] / "README.md"


def injected_names(raw: Any) -> set[str]:
    parsed = parsed_job(with_uid(raw))
    return {
        entry["name"]
        for replica, count in (("Master", 1), ("Worker", 2))
        if replica in raw["spec"]["pytorchReplicaSpecs"]
        for index in range(count)
        for entry in rank_env(parsed, replica, index, gpus_per_pod=1)
    }


def test_the_controller_injects_exactly_the_declared_names() -> None:
    plain = injected_names(gpu_job("plain", workers=2).build())
    elastic = injected_names(
        gpu_job("el", workers=2)
        .elastic(
            minReplicas=1,
            maxReplicas=3,
            maxRestarts=2,
            standalone=True,
            rdzvConf=[{"key": "timeout", "value": "90"}],
        )
        .build()
    )

    assert plain | elastic == contract.NAMES
    assert plain == {v.name for v in contract.VARIABLES if v.elastic is not True}
    assert elastic == {v.name for v in contract.VARIABLES if v.elastic is not False}


@pytest.mark.parametrize("name", sorted(contract.RESERVED))
def test_the_webhook_refuses_every_reserved_name_the_controller_injects(name: str) -> None:
    raw = job().master(**{}).workers(1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = [
        container(env={name: "x"})
    ]

    verdict = validate_create(raw, DEFAULT_POLICY)

    field = "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].env[0].name"
    assert (ErrorType.FORBIDDEN, field) in [(e.type, e.field) for e in verdict.errors]


@pytest.mark.parametrize("name", sorted(contract.DEFAULTS))
def test_a_default_the_user_sets_is_admitted_and_kept(name: str) -> None:
    raw = job().master().workers(1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = [
        container(env={name: "0"})
    ]

    assert validate_create(raw, DEFAULT_POLICY).allowed
    ours = rank_env(parsed_job(with_uid(raw)), "Master", 0, gpus_per_pod=0)
    merged = merge_env([{"name": name, "value": "0"}], ours)
    assert [e["value"] for e in merged if e["name"] == name] == ["0"]


@pytest.mark.parametrize("flag", sorted(contract.STRAY_FLAGS))
def test_the_webhook_refuses_every_flag_that_overrides_an_injected_name(flag: str) -> None:
    raw = job().master(args=[f"{flag}=1"]).workers(1).build()

    verdict = validate_create(raw, DEFAULT_POLICY)

    field = "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].args"
    assert (ErrorType.FORBIDDEN, field) in [(e.type, e.field) for e in verdict.errors]


def test_readme_lists_exactly_the_declared_names() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Env and networking contract") :]
    section = section[: section.index("\n### ", 1)]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert set(re.findall(r"`((?:PET_|PYTHON|MASTER|WORLD|RANK)[A-Z_]*)", table)) == contract.NAMES


# ------------------------------------------------------------------ the other contracts
#
# For generated jobs, what the webhook persists and what the controller builds from it agree:
# the gang size, the merged node requirements, PET_NNODES and the ``pytorch`` container. Each
# side derives them from one function in ``pytorchjob`` (``gang``, ``affinity``,
# ``spec.pytorch_container_index``); these tests prove it by behaviour, so a copy that drifts
# fails here.

_OTHER_LABELS = ("zone", "pool")  # template terms never name the hostname label the hosts pin
_GPU = DEFAULT_POLICY.gpu_resource


@st.composite
def agreeing_jobs(draw: st.DrawFn) -> tuple[dict[str, Any], str | None, list[str]]:
    """A job the webhook admits, the node the admitter planned for it, and its pinned hosts."""
    workers = draw(st.integers(1, 5))
    terms = draw(term_lists(_OTHER_LABELS))
    pod_spec: dict[str, Any] = {}
    if terms is not None:
        required = {"nodeSelectorTerms": terms}
        pod_spec["affinity"] = {"nodeAffinity": {affinity.REQUIRED_AFFINITY: required}}
    containers = [container()]
    if draw(st.booleans()):
        containers.insert(draw(st.integers(0, 1)), container(name="sidecar"))
    builder = job("agree")
    has_master = draw(st.booleans())
    if has_master:
        builder.master(containers=copy.deepcopy(containers), pod_spec=copy.deepcopy(pod_spec))
    bounds = None
    if draw(st.booleans()):
        low = draw(st.one_of(st.none(), st.integers(1, 6)))
        high = draw(st.one_of(st.none(), st.integers(low or 1, 7)))
        bounds = {k: v for k, v in (("minReplicas", low), ("maxReplicas", high)) if v}
        # the webhook admits an elastic job's Workers in range (a Master or not)
        low, high = gang.elastic_bounds(low, high, workers=workers)
        workers = min(max(workers, low), high)
    builder.workers(workers, containers=copy.deepcopy(containers), pod_spec=copy.deepcopy(pod_spec))
    if bounds is not None:
        builder.elastic(**bounds)
    raw = builder.build()
    total = sum(spec.get("replicas", 1) for spec in raw["spec"]["pytorchReplicaSpecs"].values())
    minimum = draw(st.one_of(st.none(), st.integers(1, total)))
    if minimum is not None:
        builder.scheduling(minAvailable=minimum)
    hosts = draw(st.lists(st.sampled_from(NODE_NAMES), max_size=2, unique=True))
    if hosts:
        builder.hosts(*hosts)
    planned = draw(st.one_of(st.none(), st.sampled_from(NODE_NAMES)))
    return builder.build(), planned, hosts


def admitted(raw: dict[str, Any]) -> dict[str, Any]:
    """The job the webhook stores (defaulted, then validated)."""
    result = default_job(raw, DEFAULT_POLICY)
    assert not result.errors
    verdict = validate_create(result.object, DEFAULT_POLICY)
    assert verdict.allowed, verdict.errors
    return with_uid(result.object)


def pods_of(stored: dict[str, Any], planned: str | None, attempt: int = 0) -> list[dict[str, Any]]:
    parsed = parsed_job(stored)
    return [
        build_pod(
            stored,
            parsed,
            spec.replica_type,
            index,
            node=planned,
            attempt=attempt,
            gpus=_GPU,
        )
        for spec in parsed.replica_specs
        for index in range(spec.replicas)
    ]


# ------------------------------------------------------------------ fencing gang attempts


@pytest.mark.parametrize(
    ("declared", "attempt", "taken", "port"),
    [
        (23456, 1, (), 23456),
        (23456, 2, (), 23457),
        (23456, contract.RENDEZVOUS_PORTS, (), 23456 + contract.RENDEZVOUS_PORTS - 1),
        (23456, contract.RENDEZVOUS_PORTS + 1, (), 23456),
        (23456, 2, (23457, 23458), 23459),
        (23456, 1, (23456,), 23456),
        (65535, 2, (), 65534),
        (65534, 3, (), 65533),
    ],
    ids=[
        "first-attempt-declared",
        "second-attempt-next",
        "last-of-the-window",
        "window-wraps",
        "declared-ports-skipped",
        "first-attempt-always-declared",
        "downwards-at-the-top",
        "up-then-down",
    ],
)
def test_each_attempt_has_its_rendezvous_port(
    declared: int, attempt: int, taken: tuple[int, ...], port: int
) -> None:
    assert contract.rendezvous_port(declared, attempt, taken=taken) == port


@given(
    st.integers(1, 65535),
    st.frozensets(st.integers(1, 65535), max_size=20),
)
def test_attempts_of_one_window_never_share_a_port_nor_take_a_declared_one(
    declared: int, taken: frozenset[int]
) -> None:
    window = range(1, contract.RENDEZVOUS_PORTS + 1)
    ports = [contract.rendezvous_port(declared, k, taken=taken) for k in window]
    assert ports[0] == declared
    assert len(set(ports)) == len(ports)
    assert all(0 < port <= contract.MAX_PORT and port not in taken for port in ports[1:])


@settings(max_examples=100, deadline=None)
@given(agreeing_jobs(), st.integers(1, 40))
def test_every_pods_master_port_is_where_the_rendezvous_pod_listens_in_every_attempt(
    case: tuple[dict[str, Any], str | None, list[str]], attempt: int
) -> None:
    raw, planned, _ = case
    stored = admitted(raw)
    pods = pods_of(stored, planned, attempt=attempt)
    master = next(p for p in pods if p["metadata"]["labels"].get(names.LABEL_JOB_ROLE))
    index = pytorch_container_index(master["spec"])
    assert index is not None
    declared = {
        port["name"]: port["containerPort"]
        for port in master["spec"]["containers"][index].get("ports", [])
    }
    for pod in pods:
        assert env_of(pod, pod_training_container(pod))["MASTER_PORT"] == str(
            declared[names.PORT_NAME]
        )


def pod_training_container(pod: dict[str, Any]) -> str:
    index = pytorch_container_index(pod["spec"])
    assert index is not None
    return str(pod["spec"]["containers"][index]["name"])


@settings(max_examples=150, deadline=None)
@given(agreeing_jobs())
def test_webhook_and_controller_agree_on_the_gang_size(
    case: tuple[dict[str, Any], str | None, list[str]],
) -> None:
    raw, _, _ = case
    stored = admitted(raw)
    persisted = stored["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"]
    assert parsed_job(stored).min_available == persisted
    # A job that bypassed the webhook (no minAvailable persisted) gets the same gang.
    assert parsed_job(with_uid(raw)).min_available == persisted


@settings(max_examples=150, deadline=None)
@given(agreeing_jobs(), st.lists(st.tuples(st.sampled_from(NODE_NAMES), nodes()), max_size=6))
def test_webhook_and_controller_agree_on_node_requirements(
    case: tuple[dict[str, Any], str | None, list[str]], sample: list[tuple[str, Node]]
) -> None:
    raw, planned, hosts = case
    stored = admitted(raw)
    for spec_key, replica in raw["spec"]["pytorchReplicaSpecs"].items():
        template_affinity = replica["template"]["spec"].get("affinity")
        pods = [
            p
            for p in pods_of(stored, planned)
            if p["metadata"]["name"].startswith(f"agree-{spec_key.lower()}-")
        ]
        for pod in pods:
            for hostname, generated in sample:
                node = Node(generated.name, {**generated.labels, names.HOSTNAME_LABEL: hostname})
                expected = (
                    affinity_matches(template_affinity, node)
                    and (not hosts or hostname in hosts)
                    and (planned is None or node.name == planned)
                )
                assert affinity_matches(pod["spec"].get("affinity"), node) == expected, node


@settings(max_examples=100, deadline=None)
@given(agreeing_jobs())
def test_the_webhook_accepts_exactly_the_nnodes_the_controller_injects(
    case: tuple[dict[str, Any], str | None, list[str]],
) -> None:
    raw, _, _ = case
    pod = pods_of(admitted(raw), None)[-1]  # a Worker
    injected = env_of(pod)["PET_NNODES"]
    low, _, high = injected.partition(":")
    for value, refused in ((injected, False), (f"{int(low) + 1}:{int(high or low) + 1}", True)):
        variant = copy.deepcopy(raw)
        worker = variant["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        index = pytorch_container_index(worker)
        assert index is not None
        worker["containers"][index]["command"] = ["torchrun", f"--nnodes={value}", "train.py"]
        errors = validate_create(variant, DEFAULT_POLICY).errors
        field = f"spec.pytorchReplicaSpecs[Worker].template.spec.containers[{index}].command"
        assert ((ErrorType.INVALID, field) in [(e.type, e.field) for e in errors]) == refused


def node_range(pod: Mapping[str, Any]) -> tuple[int, int]:
    """``PET_NNODES`` of a pod as ``(min, max)``."""
    low, _, high = env_of(pod)["PET_NNODES"].partition(":")
    return int(low), int(high or low)


@settings(max_examples=150, deadline=None)
@given(agreeing_jobs())
def test_every_pod_count_the_webhook_admits_is_within_the_nnodes_the_controller_injects(
    case: tuple[dict[str, Any], str | None, list[str]],
) -> None:
    """One reading of the node count (``gang.nnodes``): every pod is a torchrun node.

    The webhook admits an elastic job's Workers within its bounds, scales them within the bounds
    and defaults its gang to the Master plus ``minReplicas`` Workers; the controller's
    ``PET_NNODES`` must take each such count of pods, the Master too, and the default gang must
    reach its minimum (else the rendezvous leaves a pod out, or never completes).
    """
    raw, _, _ = case
    stored = admitted(raw)
    pods = pods_of(stored, None)
    (low, high), *others = {node_range(pod) for pod in pods}
    assert not others, "every pod gets the same PET_NNODES"
    assert low <= len(pods) <= high
    if "schedulingPolicy" not in raw["spec"].get("runPolicy", {}):
        assert low <= parsed_job(stored).min_available <= len(pods)
    for count in range(1, 9):
        if not validate_scale(stored, count, DEFAULT_POLICY).allowed:
            continue
        scaled = scaling.scaled_job(stored, count)
        assert isinstance(scaled, dict)
        pods = pods_of(scaled, None)
        (low, high), *others = {node_range(pod) for pod in pods}
        assert not others, "every pod gets the same PET_NNODES"
        assert low <= len(pods) <= high, (count, [p["metadata"]["name"] for p in pods])


@pytest.mark.parametrize(
    "layout",
    [
        ("pytorch",),
        ("sidecar", "pytorch"),
        ("pytorch", "sidecar"),
        ("a", "pytorch", "b"),
        ("trainer",),  # no pytorch container: refused; the first one is checked and gets the env
        ("trainer", "sidecar"),
    ],
    ids=lambda layout: "-".join(layout),
)
def test_webhook_and_controller_agree_on_the_pytorch_container(layout: tuple[str, ...]) -> None:
    def built(env_at: int | None) -> dict[str, Any]:
        containers = [
            container(name=name, env={contract.RANK: "0"} if i == env_at else None)
            for i, name in enumerate(layout)
        ]
        return job("c").master(containers=containers).workers(1).build()

    stored = default_job(built(None), DEFAULT_POLICY).object
    pod = pods_of(with_uid(stored), None)[0]
    given_env = [i for i, c in enumerate(pod["spec"]["containers"]) if c.get("env")]
    given_port = [
        i
        for i, c in enumerate(
            stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
        )
        if c.get("ports")
    ]
    pod_spec = stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    training = pytorch_container_index(pod_spec)
    assert given_env == given_port == [training]
    for index in range(len(layout)):
        errors = validate_create(built(index), DEFAULT_POLICY).errors
        field = f"spec.pytorchReplicaSpecs[Master].template.spec.containers[{index}].env[0].name"
        refused = (ErrorType.FORBIDDEN, field) in [(e.type, e.field) for e in errors]
        assert refused == (index == training), index


@pytest.mark.parametrize(
    "layout", [("sidecar", "pytorch"), ("trainer", "sidecar")], ids=lambda x: "-".join(x)
)
def test_the_controller_reads_the_exit_code_of_the_container_it_gave_the_env(
    layout: tuple[str, ...],
) -> None:
    raw = job("c").master(containers=[container(name=n) for n in layout]).workers(1).build()
    pod = pods_of(with_uid(raw), None)[0]
    given_env = next(c["name"] for c in pod["spec"]["containers"] if c.get("env"))
    pod["status"] = {
        "containerStatuses": [
            {
                "name": c["name"],
                "state": {"terminated": {"exitCode": 7 if c["name"] == given_env else 0}},
            }
            for c in pod["spec"]["containers"]
        ]
    }
    assert pytorch_exit_code(pod) == 7


# ------------------------------------------------------------------ pool-sharing contracts
#
# The webhook refuses a job its team can never hold; the controller admits gangs against the
# same teams and quotas. Both ask ``pool`` (``resolve_teams``, ``gang_usage``,
# ``admission_order``); these tests drive each side through its own entry points (the webhook's
# TeamQuota cache and validating rules; the controller's TeamQuota source, reconciler and
# admitter) on the same inputs, so a side that grows its own copy with other answers fails.


class _Api:
    """An apiserver that accepts every write (TeamQuota status, job status, Services)."""

    def __init__(self, job_raw: dict[str, Any] | None = None) -> None:
        self.job = job_raw

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        if method == "PATCH" and self.job is not None:
            return self.job
        return kw.get("body") or {}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


_NAMESPACES = ("n1", "n2", "n3")


@st.composite
def quota_objects(draw: st.DrawFn) -> list[dict[str, Any]]:
    """TeamQuotas that may claim each other's namespaces; some do not parse."""
    return [
        team_quota(
            name,
            draw(st.lists(st.sampled_from(_NAMESPACES), min_size=1, unique=True)),
            version="1",
            cohort=draw(st.sampled_from(("x", "y"))),
            # one in five has no nominalGPUs: it does not parse
            nominalGPUs=8 if draw(st.integers(0, 4)) else None,
        )
        for name in draw(st.lists(st.sampled_from("abcde"), unique=True, max_size=5))
    ]


def _controller_owner(objects: list[dict[str, Any]], namespace: str) -> str | None:
    """The team whose TeamQuota status counts a job of ``namespace`` as waiting."""
    api = _Api()
    informer = Informer(api, TEAM_QUOTAS)  # type: ignore[arg-type]
    for raw in objects:
        informer.remember(raw)
    source = PoolSource(
        api,  # type: ignore[arg-type]
        quotas=informer,
        policies=lambda: [],
        team_status=lambda: {},
    )
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    admitter.teams = source.teams
    spec = parsed_job(with_uid(job("j", namespace).master(gpus=1).build()))
    admitter.request(
        (namespace, "j"),
        GangRequest(
            uid=spec.uid,
            demands=job_demands(spec),
            min_count=spec.min_available,
            usage={GPUS: 1000},
            priority=0,
            created="2026-01-01T00:00:00Z",
            gpus=GpuSources(_GPU),
        ),
    )
    admitter.cycle()  # no nodes: the job waits, and its team's status counts it
    owners = [team for team, status in admitter.team_status.items() if status["waitingJobs"]]
    assert len(owners) <= 1
    return owners[0] if owners else None


@settings(max_examples=80, deadline=None)
@given(quota_objects())
def test_webhook_and_controller_agree_on_which_team_owns_a_namespace(
    objects: list[dict[str, Any]],
) -> None:
    cache = PolicyCache()
    cache.replace_quotas(objects, "test")
    for namespace in (*_NAMESPACES, "elsewhere"):
        webhook = cache.team_for(namespace)
        assert (webhook.quota.name if webhook else None) == _controller_owner(objects, namespace)


@st.composite
def gang_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """Jobs with GPUs and CPU per replica type, maybe elastic, maybe with a ``minAvailable``.

    Every GPU replica asks the same GPUs per pod (the webhook refuses others); a Master may ask
    none.
    """
    masters = draw(st.integers(0, 1))
    workers = draw(st.integers(0 if masters else 1, 4))
    gpus = draw(st.integers(1, 4))
    builder = job("quota", "team-ns")

    def resources() -> dict[str, Any]:
        count = draw(st.sampled_from((gpus, None))) if masters and workers else gpus
        return {
            "gpus": count,
            "requests": {"cpu": f"{draw(st.integers(1, 3000))}m"},
            "args": ["--backend", "nccl" if count else "gloo"],
        }

    if masters:
        builder.master(**resources())
    if workers:
        builder.workers(workers, **resources())
        if draw(st.booleans()):
            builder.elastic(minReplicas=draw(st.integers(1, workers)), maxReplicas=workers)
    if draw(st.booleans()):
        builder.scheduling(minAvailable=draw(st.integers(1, masters + workers)))
    return builder.build()


async def _waiting_usage(stored: dict[str, Any]) -> Mapping[str, int]:
    """What the controller's reconciler asks the admitter to count for the job's gang."""
    api = _Api(stored)
    jobs, pods, services = (Informer(api, kind) for kind in (PYTORCHJOBS, PODS, SERVICES))  # type: ignore[arg-type]
    pods.index_by(job_key_of_pod)
    services.index_by(job_key_of_pod)
    jobs.remember(stored)
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    reconciler = Reconciler(
        api,  # type: ignore[arg-type]
        jobs=jobs,
        pods=pods,
        services=services,
        policies=lambda: (),
        priority_of=lambda name: 0,
        admitter=admitter,
        metrics=ControllerMetrics(),
        options=Options(manage_unowned=True),
    )
    key = (stored["metadata"]["namespace"], stored["metadata"]["name"])
    await reconciler.reconcile(key)
    return admitter.queue.waiting[key].request.usage


def _running_usage(stored: dict[str, Any]) -> Mapping[str, int]:
    """What the controller's ledger counts for the job's gang once its pods run."""
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    parsed = parsed_job(stored)
    for pod in pods_of(stored, None)[: parsed.min_available]:
        pod["spec"]["nodeName"] = "n1"
        pod["status"] = {"phase": "Running"}
        admitter.on_pod("ADDED", pod, None)
    (gang,) = admitter.ledger.holding({}, 0.0)
    return gang.usage


def _refused(stored: dict[str, Any], gpus: int, cpu_millis: int) -> bool:
    """Whether the webhook refuses the job for a team that can hold at most this much."""
    quota = parsed_team(
        "t",
        gpus,
        0,
        namespaces=["team-ns"],
        resources=[{"name": "cpu", "nominal": f"{cpu_millis}m"}],
    )
    verdict = validate_create(stored, DEFAULT_POLICY, team=Team(quota=quota, cohort=(quota,)))
    field = "spec.pytorchReplicaSpecs"
    return (ErrorType.FORBIDDEN, field) in [(e.type, e.field) for e in verdict.errors]


@settings(max_examples=60, deadline=None)
@given(gang_jobs())
def test_webhook_and_controller_count_the_same_gang_against_quota(raw: dict[str, Any]) -> None:
    stored = admitted(raw)
    waiting = asyncio.run(_waiting_usage(stored))
    assert _running_usage(stored) == waiting, "a gang counts the same waiting and running"
    gpus, cpu = waiting.get(GPUS, 0), waiting.get("cpu", 0)
    # The webhook holds the job within a team quota of exactly that much, and refuses it with a
    # quota one GPU or one millicore smaller: it counted exactly what the controller counts.
    assert not _refused(stored, gpus // 1000, cpu)
    if gpus:
        assert _refused(stored, gpus // 1000 - 1, cpu)
    assert _refused(stored, gpus // 1000, cpu - 1)


@st.composite
def queued_jobs(draw: st.DrawFn) -> list[tuple[str, str, int, str]]:
    """(namespace, name, priority, created) of waiting jobs, with ties on every key."""
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(("a", "b")), st.sampled_from(("x", "y", "z"))),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    stamps = ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")
    return [
        (ns, name, draw(st.sampled_from((0, 5))), draw(st.sampled_from(stamps)))
        for ns, name in keys
    ]


@settings(max_examples=100, deadline=None)
@given(queued_jobs(), st.randoms())
def test_the_admitter_queue_and_the_cycle_decide_in_the_same_order(
    queued: list[tuple[str, str, int, str]], shuffler: Any
) -> None:
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    admitter.on_node("ADDED", node("n0", gpus=8), None)
    gangs = []
    for namespace, name, priority, created in queued:
        spec = parsed_job(with_uid(job(name, namespace).master(gpus=8).build(), uid=name))
        admitter.request(
            (namespace, name),
            GangRequest(
                uid=spec.uid,
                demands=job_demands(spec),
                min_count=1,
                usage={GPUS: 8000},
                priority=priority,
                created=created,
                gpus=GpuSources(_GPU),
            ),
        )
        requests = {f"{name}-0": {_GPU: 8000, "pods": 1000}}
        gangs.append(
            WaitingGang(
                key=(namespace, name),
                team=None,
                priority=priority,
                created=created,
                pods=tuple(requests),
                requests=requests,
                usage={GPUS: 8000},
                shape=shape_of(requests.values()),
            )
        )
    queue_order = [w.key for w in admitter.queue.ready(0.0)]
    shuffler.shuffle(gangs)
    topology = build_topology((), [("n0", {})])
    pool = Pool(capacity=Capacity(topology, {"n0": {_GPU: 8000, "pods": 110_000}}))
    cycle_order = [outcome.key for outcome in decide(pool, gangs, 0.0)]
    assert queue_order == cycle_order
    assert Counter(cycle_order) == Counter((ns, name) for ns, name, _, _ in queued)
    assert admitter.cycle() == [queue_order[0]], "one node: the first in order gets it"


# ------------------------------------------------------------------ cleanPodPolicy None
#
# ``pytorchjob.cleanup`` decides which pods ``cleanPodPolicy: None`` keeps when a job ends. The
# webhook refuses the job when some would not be kept; the controller, ending the same job under
# the same policy, deletes exactly those that are still running. Each side through its own entry
# point: the webhook's verdict, the controller's plan when the job ends with every pod running.

_ACCELERATORS = ("nvidia.com/gpu", "amd.com/gpu")
_GLOO = ["--backend", "gloo"]
_DEADLINE = 60


@st.composite
def jobs_keeping_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Master + Workers, each replica's pods with or without some accelerator, ``None`` cleanup."""
    gpus = draw(st.integers(1, 2))
    builder = job("keep")
    for replica in ("Master", "Worker"):
        resource = draw(st.one_of(st.none(), st.sampled_from(_ACCELERATORS)))
        in_init = resource is not None and draw(st.booleans())
        pytorch = container(args=_GLOO, gpus=gpus if resource and not in_init else None)
        if resource is not None:
            pytorch["resources"] = {"limits": {resource: gpus}} if not in_init else {}
        pod_spec: dict[str, Any] = {}
        if in_init:
            warm_up = container(name="warm-up", gpus=gpus, gpu_resource=str(resource))
            pod_spec["initContainers"] = [warm_up]
        if replica == "Master":
            builder.master(containers=[pytorch], pod_spec=pod_spec)
        else:
            builder.workers(draw(st.integers(1, 3)), containers=[pytorch], pod_spec=pod_spec)
    return builder.run_policy(cleanPodPolicy="None", activeDeadlineSeconds=_DEADLINE).build()


def running_pods_deleted_at_the_end(
    stored: dict[str, Any], *, gpu_resource: str, allow: bool
) -> list[str]:
    """The running pods the controller deletes when the job ends with every pod running.

    It ends by its deadline, so no pod has finished on its own: whatever runs is kept or not
    by ``cleanPodPolicy`` alone.
    """
    world = World(with_uid(stored))
    options: dict[str, Any] = {"gpu_resource": gpu_resource, "allow_clean_pod_policy_none": allow}
    world.apply(world.plan(**options))
    expected = list(expected_pods(parsed_job(world.job_raw)))
    world.apply(world.plan(reservation=dict.fromkeys(expected, "n1"), **options))
    for name in expected:
        world.run(name)
    world.apply(world.plan(**options))
    world.tick(_DEADLINE + 1)
    return sorted(world.plan(**options).delete_pods)


@settings(max_examples=120, deadline=None)
@given(jobs_keeping_pods(), st.sampled_from(_ACCELERATORS), st.booleans())
def test_the_webhook_refuses_cleanpodpolicy_none_exactly_where_the_controller_would_not_keep(
    raw: dict[str, Any], gpu_resource: str, allow: bool
) -> None:
    policy = PlacementPolicy(name="p", gpu_resource=gpu_resource, allow_clean_pod_policy_none=allow)
    stored = default_job(raw, policy).object
    errors = validate_create(stored, policy).errors
    refused = (ErrorType.FORBIDDEN, "spec.runPolicy.cleanPodPolicy") in [
        (e.type, e.field) for e in errors
    ]

    deleted = running_pods_deleted_at_the_end(stored, gpu_resource=gpu_resource, allow=allow)

    assert refused == bool(deleted), (refused, deleted)


# ------------------------------------------------------------------ claimed GPUs (DRA)
#
# ``pytorchjob.devices`` is the one GPU count. The webhook counts a job's claimed GPUs for
# ``maxGPUsPerJob`` (and quota, nccl, ``/dev/shm``, ``nprocPerNode``); the controller for the
# gang's quota usage (waiting and running), its placement demands and ``PET_NPROC_PER_NODE``.
# Each side through its own entry points, on generated jobs whose pods claim GPUs through
# ResourceClaimTemplates: a side that counts claims its own way fails.

_DRA_POLICY = PlacementPolicy(name="dra", gpu_device_classes=(GPU_CLASS,))


@st.composite
def claiming_jobs(draw: st.DrawFn) -> tuple[dict[str, Any], SeenClaims, int]:
    """(job, the templates it names, GPUs per pod): Workers (and maybe a Master) claiming GPUs."""
    gpus = draw(st.integers(1, 8))
    split = draw(st.integers(0, gpus - 1))  # two requests in one template, or one
    requests = [device_request("a", count=gpus - split)]
    if split:
        requests.append(device_request("b", count=split))
    other = device_request("nic", device_class="nic.example.com", count=draw(st.integers(1, 2)))
    template = claim_template("gpus", *requests, other, namespace="team-ns")
    builder = job("dra", "team-ns")

    def pod() -> dict[str, Any]:
        pytorch = container(args=["--backend", "nccl"])
        pytorch["resources"] = claim_refs("gpus")
        return {
            "containers": [pytorch],
            "pod_spec": claiming_pod(("gpus", RESOURCE_CLAIM_TEMPLATE, "gpus")),
        }

    if draw(st.booleans()):
        builder.master(**pod())
    builder.workers(draw(st.integers(1, 3)), **pod())
    return builder.build(), seen(template), gpus


async def _claimed_usage(stored: dict[str, Any], claims: SeenClaims) -> Any:
    """What the reconciler asks the admitter for: the gang's quota usage and demands."""
    api = _Api(stored)
    jobs, pods, services = (Informer(api, kind) for kind in (PYTORCHJOBS, PODS, SERVICES))  # type: ignore[arg-type]
    pods.index_by(job_key_of_pod)
    services.index_by(job_key_of_pod)
    jobs.remember(stored)
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    reconciler = Reconciler(
        api,  # type: ignore[arg-type]
        jobs=jobs,
        pods=pods,
        services=services,
        policies=lambda: (_DRA_POLICY,),
        priority_of=lambda name: 0,
        admitter=admitter,
        metrics=ControllerMetrics(),
        options=Options(manage_unowned=True),
        claims_for=lambda namespace: claims,
    )
    key = (stored["metadata"]["namespace"], stored["metadata"]["name"])
    await reconciler.reconcile(key)
    return admitter.queue.waiting[key].request


@settings(max_examples=40, deadline=None)
@given(claiming_jobs())
def test_webhook_and_controller_count_the_same_claimed_gpus(
    generated: tuple[dict[str, Any], SeenClaims, int],
) -> None:
    raw, claims, per_pod = generated
    defaulted = default_job(raw, _DRA_POLICY, claims=claims)
    assert validate_create(defaulted.object, _DRA_POLICY, claims=claims).allowed
    stored = with_uid(defaulted.object)
    parsed = parsed_job(stored)
    total = per_pod * parsed.total_replicas
    # The webhook: maxGPUsPerJob holds exactly the job's claimed GPUs.
    for limit, allowed in ((total, True), (total - 1, False)):
        capped = replace(_DRA_POLICY, max_gpus_per_job=limit)
        assert validate_create(defaulted.object, capped, claims=claims).allowed is allowed
    # The controller: the gang's quota usage and every pod's demand, while it waits...
    waiting = asyncio.run(_claimed_usage(stored, claims))
    assert waiting.usage[GPUS] == total * 1000
    assert {d.requests[_GPU] for d in waiting.demands} == {per_pod * 1000}
    # ... the pods it builds (PET_NPROC_PER_NODE) and what they count once they run.
    sources = _DRA_POLICY.gpus(claims)
    admitter = Admitter(
        on_admit_job=lambda key: None, on_reason=lambda key: None, claims_for=lambda ns: claims
    )
    admitter.note(("team-ns", "dra"), priority=0, gpus=sources)
    built = [
        build_pod(
            stored, parsed, r.replica_type, i, node=None, attempt=0, gpus=sources, claims=claims
        )
        for r in parsed.replica_specs
        for i in range(r.replicas)
    ]
    for index, pod in enumerate(built):
        assert env_of(pod)[contract.PET_NPROC_PER_NODE] == str(per_pod)
        pod["spec"]["nodeName"] = f"n{index}"
        pod["status"] = {"phase": "Running"}
        admitter.on_pod("ADDED", pod, None)
    (gang,) = admitter.ledger.holding({}, 0.0)
    assert gang.usage[GPUS] == total * 1000

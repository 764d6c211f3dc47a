"""Each contract between the webhook and the controller is one declaration, and both follow it.

``pytorchjob.contract`` declares every injected variable; these tests fail when the controller
injects a name it does not declare (or never injects a declared one), when the webhook does not
refuse a reserved name or flag the controller overrides, when it refuses a default, or when
README's table and the declaration disagree. For generated jobs they also fail when what the
webhook stores and what the controller builds from it disagree on the gang size
(``pytorchjob.gang``), on the node requirements (``pytorchjob.affinity``), on ``PET_NNODES``, or
on which container is ``pytorch`` (``pytorchjob.spec.pytorch_container_index``).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container, gpu_job, job
from tests.unit.controller.helpers import env_of, parse, with_uid
from tests.unit.nodeselector import NODE_NAMES, Node, affinity_matches, nodes, term_lists
from torchgate.controller.job.envvars import merge_env, rank_env
from torchgate.controller.job.plan import pytorch_exit_code
from torchgate.controller.job.pods import build_pod
from torchgate.pytorchjob import affinity, contract, names
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.pytorchjob.spec import pytorch_container_index
from torchgate.webhook.defaulting import default_job
from torchgate.webhook.validation import validate_create

README = Path(__file__).resolve().parents[3] / "README.md"


def injected_names(raw: Any) -> set[str]:
    parsed = parse(with_uid(raw))
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
    ours = rank_env(parse(with_uid(raw)), "Master", 0, gpus_per_pod=0)
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
    if draw(st.booleans()):
        builder.master(containers=copy.deepcopy(containers), pod_spec=copy.deepcopy(pod_spec))
    builder.workers(workers, containers=copy.deepcopy(containers), pod_spec=copy.deepcopy(pod_spec))
    if draw(st.booleans()):
        low = draw(st.one_of(st.none(), st.integers(1, 6)))
        high = draw(st.one_of(st.none(), st.integers(low or 1, 7)))
        builder.elastic(**{k: v for k, v in (("minReplicas", low), ("maxReplicas", high)) if v})
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


def pods_of(stored: dict[str, Any], planned: str | None) -> list[dict[str, Any]]:
    parsed = parse(stored)
    return [
        build_pod(
            stored, parsed, spec.replica_type, index, node=planned, attempt=0, gpu_resource=_GPU
        )
        for spec in parsed.replica_specs
        for index in range(spec.replicas)
    ]


@settings(max_examples=150, deadline=None)
@given(agreeing_jobs())
def test_webhook_and_controller_agree_on_the_gang_size(
    case: tuple[dict[str, Any], str | None, list[str]],
) -> None:
    raw, _, _ = case
    stored = admitted(raw)
    persisted = stored["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"]
    assert parse(stored).min_available == persisted
    # A job that bypassed the webhook (no minAvailable persisted) gets the same gang.
    assert parse(with_uid(raw)).min_available == persisted


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

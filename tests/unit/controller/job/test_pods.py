"""Pod and Service manifests built from replica templates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders.job import UID, JobBuilder, container, gpu_job, job, parsed_job, with_uid
from tests.unit.controller.helpers import env_of
from torchgate.controller.admission.nodes import node_view, required_affinity_terms
from torchgate.controller.job.pods import build_pod, build_service, pin_to_node, service_replicas
from torchgate.pytorchjob import progress

NODE_PIN = {"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def demo(**pod_spec: Any) -> dict[str, Any]:
    return with_uid(
        job("demo")
        .master(gpus=1, pod_spec=pod_spec or None)
        .workers(2, gpus=1, pod_spec=pod_spec or None)
        .build()
    )


def pod_of(
    raw: dict[str, Any], replica_type: str = "Worker", index: int = 1, **kw: Any
) -> dict[str, Any]:
    options: dict[str, Any] = {"node": None, "attempt": 1, "gpus": "nvidia.com/gpu"}
    options.update(kw)
    return build_pod(raw, parsed_job(raw), replica_type, index, **options)


def test_pod_identity_labels_and_owner() -> None:
    pod = pod_of(demo())
    assert pod["metadata"]["name"] == "demo-worker-1"
    assert pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "torchgate",
        "training.kubeflow.org/job-name": "demo",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "1",
    }
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "demo",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


@pytest.mark.parametrize(
    ("builder", "replica_type", "index"),
    [
        (job("demo").master().workers(2), "Master", 0),
        (job("demo").workers(2), "Worker", 0),
    ],
    ids=["master", "worker-only"],
)
def test_rendezvous_master_gets_the_job_role_label(
    builder: JobBuilder, replica_type: str, index: int
) -> None:
    raw = with_uid(builder.build())
    labels = pod_of(raw, replica_type, index)["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-role"] == "master"


def test_user_labels_are_kept_and_ours_win() -> None:
    def label(raw: dict[str, Any]) -> None:
        for spec in raw["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["metadata"] = {
                "labels": {
                    "team": "vision",
                    "training.kubeflow.org/job-name": "spoofed",
                    "training.kubeflow.org/job-role": "master",
                },
                "annotations": {"sidecar.istio.io/inject": "false"},
            }

    raw = with_uid(job("demo").master().workers(2).edit(label).build())
    worker = pod_of(raw, "Worker", 1)
    assert worker["metadata"]["labels"]["team"] == "vision"
    assert worker["metadata"]["labels"]["training.kubeflow.org/job-name"] == "demo"
    assert "training.kubeflow.org/job-role" not in worker["metadata"]["labels"]
    assert worker["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def test_annotations_record_attempt_and_planned_node() -> None:
    pinned = pod_of(demo(), node="gpu-7", attempt=3)["metadata"]["annotations"]
    assert pinned == {"torchgate.io/gang-attempt": "3", "torchgate.io/planned-node": "gpu-7"}
    unpinned = pod_of(demo(), attempt=1)["metadata"]["annotations"]
    assert unpinned == {"torchgate.io/gang-attempt": "1"}


def test_restart_policy_is_always_never() -> None:
    raw = demo(restartPolicy="OnFailure")
    assert pod_of(raw)["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("node", [None, "gpu-7"])
def test_a_templates_node_name_is_dropped(node: str | None) -> None:
    raw = demo(nodeName="quarantined-0")
    assert "nodeName" not in pod_of(raw, node=node)["spec"]
    assert raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeName"]


def test_env_goes_into_the_pytorch_container_only() -> None:
    raw = with_uid(
        job("demo")
        .master(containers=[container(name="sidecar"), container(gpus=2, env={"RANK": "7"})])
        .workers(1)
        .build()
    )
    pod = pod_of(raw, "Master", 0)
    sidecar, pytorch = pod["spec"]["containers"]
    assert "env" not in sidecar
    names = [e["name"] for e in pytorch["env"]]
    assert names.count("RANK") == 1
    assert env_of(pod)["RANK"] == "0"
    assert env_of(pod)["PET_NPROC_PER_NODE"] == "2"


def test_template_is_not_mutated() -> None:
    affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    raw = demo(affinity=affinity, restartPolicy="Always")
    before = copy.deepcopy(raw)
    pod_of(raw, node="gpu-7")
    assert raw == before


def test_node_pin_is_anded_into_every_existing_term() -> None:
    affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]},
                    {},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"x": 1},
    }
    pinned = pin_to_node(affinity, "gpu-7")
    terms = pinned["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}],
            "matchFields": [NODE_PIN],
        },
        {
            "matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["x"]},
                NODE_PIN,
            ],
        },
        {},  # matches no node; pinning it would make it match one
    ]
    assert pinned["podAntiAffinity"] == {"x": 1}
    assert pinned["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 1, "preference": {}}
    ]


@pytest.mark.parametrize(
    "affinity",
    [None, {}, {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}, "junk"],
    ids=["none", "empty", "no-terms", "malformed"],
)
def test_node_pin_creates_a_term_when_there_is_none(affinity: object) -> None:
    pinned = pin_to_node(affinity, "gpu-7")
    assert pinned["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [{"matchFields": [NODE_PIN]}]


def test_pod_without_node_has_no_pin() -> None:
    assert "affinity" not in pod_of(demo(), node=None)["spec"]


def test_build_pod_rejects_a_replica_the_job_does_not_have() -> None:
    raw = with_uid(job("solo").workers(1).build())
    with pytest.raises(ValueError, match="no Master replica"):
        pod_of(raw, "Master", 0)


def test_service_is_headless_and_selects_exactly_its_pod() -> None:
    raw = with_uid(gpu_job("demo", workers=1).build())
    master = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["ports"] = [
        {"name": "pytorchjob-port", "containerPort": 29500},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        {"containerPort": 7000},  # unnamed ports are not published
    ]
    service = build_service(raw, parsed_job(raw), "Master", 0)
    assert service["metadata"]["name"] == "demo-master-0"
    assert service["metadata"]["ownerReferences"][0]["uid"] == UID
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {
        "training.kubeflow.org/operator-name": "torchgate",
        "training.kubeflow.org/job-name": "demo",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
    }
    assert service["spec"]["ports"] == [
        {"name": "pytorchjob-port", "port": 29500, "targetPort": 29500, "protocol": "TCP"},
        {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"},
    ]


def test_service_always_publishes_the_rendezvous_port() -> None:
    raw = with_uid(gpu_job("demo", workers=1).build())
    ports = build_service(raw, parsed_job(raw), "Master", 0)["spec"]["ports"]
    assert ports == [
        {"name": "pytorchjob-port", "port": 23456, "targetPort": 23456, "protocol": "TCP"}
    ]


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        (job("d").master().workers(3), [("Master", 0)]),
        (job("d").workers(3), [("Worker", 0)]),
        (job("d").workers(3).elastic(), [("Worker", 0)]),
        (job("d").master().workers(3).elastic(), [("Master", 0), ("Worker", 0)]),
        (job("d").master().workers(3).elastic(rdzvHost="etcd"), [("Master", 0)]),
    ],
    ids=["master", "worker-only", "elastic-worker-only", "elastic-master", "elastic-rdzv-host"],
)
def test_which_replicas_get_a_service(builder: JobBuilder, expected: list[tuple[str, int]]) -> None:
    assert service_replicas(parsed_job(with_uid(builder.build()))) == expected


def test_node_pin_selects_the_node_by_name_even_when_its_hostname_label_differs() -> None:
    nodes = [
        node_view(
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": hostname}},
                "status": {"allocatable": {"cpu": "8"}},
            }
        )
        for name, hostname in (("gpu-7", "ip-10-0-0-7"), ("gpu-8", "gpu-7"))
    ]
    terms = required_affinity_terms({"affinity": pin_to_node(None, "gpu-7")})
    assert terms is not None
    matching = [n.name for n in nodes if n is not None and any(t.matches(n) for t in terms)]
    assert matching == ["gpu-7"]


def test_the_pod_declares_its_attempts_rendezvous_port_and_a_host_port_moves_with_it() -> None:
    raw = demo(hostNetwork=True)
    spec = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    spec["containers"][0]["ports"] = [
        {"name": "pytorchjob-port", "containerPort": 23456, "hostPort": 23456},
        {"name": "metrics", "containerPort": 9090},
    ]
    pod = pod_of(raw, "Master", 0, attempt=2)
    assert pod["spec"]["containers"][0]["ports"] == [
        {"name": "pytorchjob-port", "containerPort": 23457, "hostPort": 23457},
        {"name": "metrics", "containerPort": 9090},
    ]
    assert env_of(pod)["MASTER_PORT"] == "23457"
    assert spec["containers"][0]["ports"][0]["containerPort"] == 23456, "template untouched"


# ------------------------------------------------------------------ the progress probe

PROGRESS_ENV = "TORCHGATE_PROGRESS_FILE"  # spelled out: the contract must agree with the test


def pytorch_of(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    return dict(found)


def test_with_a_deadline_the_master_gets_the_progress_file_and_its_probe() -> None:
    master = pytorch_of(pod_of(demo(), "Master", 0, progress_deadline=90))
    assert env_of({"spec": {"containers": [master]}})[PROGRESS_ENV] == progress.PROGRESS_FILE
    probe = master["livenessProbe"]
    assert probe == progress.liveness_probe(90)
    assert PROGRESS_ENV in probe["exec"]["command"][2]


def test_workers_and_jobs_without_a_deadline_get_no_probe() -> None:
    worker = pytorch_of(pod_of(demo(), "Worker", 0, progress_deadline=90))
    master = pytorch_of(pod_of(demo(), "Master", 0))
    for container_spec in (worker, master):
        assert "livenessProbe" not in container_spec
        assert PROGRESS_ENV not in env_of({"spec": {"containers": [container_spec]}})


def test_the_users_own_probe_and_progress_path_are_kept() -> None:
    own_probe = {"httpGet": {"path": "/healthz", "port": 8080}}
    raw = with_uid(job().master().workers(1).build())
    master = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["livenessProbe"] = own_probe
    assert pytorch_of(pod_of(raw, "Master", 0, progress_deadline=90))["livenessProbe"] == own_probe

    raw = with_uid(job().master(env={PROGRESS_ENV: "/ckpt/progress"}).workers(1).build())
    ours = pytorch_of(pod_of(raw, "Master", 0, progress_deadline=90))
    assert env_of({"spec": {"containers": [ours]}})[PROGRESS_ENV] == "/ckpt/progress"
    assert ours["livenessProbe"] == progress.liveness_probe(90)

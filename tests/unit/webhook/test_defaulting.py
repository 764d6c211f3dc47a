"""Defaulting: what the mutating webhook persists, and that its patch reproduces it exactly."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.job import container, gpu_job, job
from tests.builders.policy import parsed_policy
from torchgate.pytorchjob.fieldpath import ErrorType, render_warnings
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy
from torchgate.webhook.defaulting import SHM_PATH, SHM_VOLUME, Defaulted, default_job

MASTER = ("spec", "pytorchReplicaSpecs", "Master")
WORKER = ("spec", "pytorchReplicaSpecs", "Worker")
POD = ("template", "spec")


def at(obj: Any, *path: str | int) -> Any:
    for token in path:
        obj = obj[token]
    return obj


def defaulted(raw: dict[str, Any], pol: PlacementPolicy = DEFAULT_POLICY, **kw: Any) -> Any:
    before = copy.deepcopy(raw)
    result = default_job(raw, pol, **kw)
    assert raw == before, "defaulting must never mutate its input"
    assert jsonpatch.apply_patch(raw, result.patch) == result.object, "patch must give the object"
    return result


def warned_paths(result: Defaulted) -> set[str]:
    return {str(warning.path) for warning in result.warnings}


def test_replica_keys_are_normalised_case_insensitively() -> None:
    raw = job().master(key="master").workers(2, key="WORKER").build()
    result = defaulted(raw)
    assert set(result.object["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert at(result.object, *WORKER, "replicas") == 2
    assert "spec.pytorchReplicaSpecs[Master]" in warned_paths(result)


def test_two_spellings_of_one_replica_type_are_a_duplicate_error() -> None:
    raw = job().workers(1, key="worker").workers(1, key="Worker").build()
    result = defaulted(raw)
    assert [(e.type, e.field) for e in result.errors] == [
        (ErrorType.DUPLICATE, "spec.pytorchReplicaSpecs[worker]")
    ]


@pytest.mark.parametrize(
    ("field", "expected"),
    [("replicas", 1), ("restartPolicy", "OnFailure")],
    ids=["replicas", "restartPolicy"],
)
def test_replica_fields_default(field: str, expected: Any) -> None:
    raw = job().master(replicas=None, restart_policy=None).build()
    result = defaulted(raw)
    assert at(result.object, *MASTER, field) == expected
    assert f"spec.pytorchReplicaSpecs[Master].{field}" in warned_paths(result)


def test_user_values_are_never_overridden() -> None:
    raw = (
        job()
        .master()
        .workers(3, restart_policy="ExitCode")
        .run_policy(cleanPodPolicy="All", backoffLimit=0)
        .build()
    )
    result = defaulted(raw)
    assert at(result.object, *WORKER, "restartPolicy") == "ExitCode"
    assert at(result.object, "spec", "runPolicy", "cleanPodPolicy") == "All"
    assert at(result.object, "spec", "runPolicy", "backoffLimit") == 0


def test_pytorch_container_gets_the_port_once() -> None:
    raw = job().master().build()
    result = defaulted(raw)
    ports = at(result.object, *MASTER, *POD, "containers", 0, "ports")
    assert ports == [{"name": "pytorchjob-port", "containerPort": 23456}]
    again = defaulted(result.object)
    assert again.patch == [], "defaulting a defaulted job must be a no-op"


def test_existing_named_port_is_kept() -> None:
    c = container()
    c["ports"] = [{"name": "pytorchjob-port", "containerPort": 24456}]
    raw = job().master(containers=[c]).build()
    result = defaulted(raw)
    assert at(result.object, *MASTER, *POD, "containers", 0, "ports") == c["ports"]


def test_port_goes_only_to_the_pytorch_container() -> None:
    sidecar = container(name="sidecar", image="busybox")
    raw = job().master(containers=[sidecar, container()]).build()
    result = defaulted(raw)
    pod = at(result.object, *MASTER, *POD)
    assert "ports" not in pod["containers"][0]
    assert pod["containers"][1]["ports"][0]["name"] == "pytorchjob-port"


def test_gpu_replicas_get_dev_shm_with_the_policy_size() -> None:
    raw = gpu_job(workers=2).build()
    result = defaulted(raw, parsed_policy("admin", sharedMemory={"sizeLimit": "16Gi"}))
    for replica in (MASTER, WORKER):
        pod = at(result.object, *replica, *POD)
        assert pod["volumes"] == [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
        ]
        assert {"name": SHM_VOLUME, "mountPath": SHM_PATH} in pod["containers"][0]["volumeMounts"]


def test_cpu_replicas_get_no_dev_shm() -> None:
    raw = job().master().workers(1).build()
    pod = at(defaulted(raw).object, *MASTER, *POD)
    assert "volumes" not in pod


def test_dev_shm_already_mounted_is_left_alone() -> None:
    c = container(gpus=1)
    c["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    raw = (
        job()
        .master(containers=[c], pod_spec={"volumes": [{"name": "shm", "emptyDir": {}}]})
        .build()
    )
    pod = at(defaulted(raw).object, *MASTER, *POD)
    assert pod["volumes"] == [{"name": "shm", "emptyDir": {}}]


def test_dev_shm_volume_name_avoids_collisions() -> None:
    taken = {"volumes": [{"name": SHM_VOLUME, "emptyDir": {}}]}
    raw = job().master(gpus=1, pod_spec=taken).build()
    pod = at(defaulted(raw).object, *MASTER, *POD)
    assert pod["volumes"][-1]["name"] == f"{SHM_VOLUME}-2"
    assert pod["containers"][0]["volumeMounts"][-1]["name"] == f"{SHM_VOLUME}-2"


@pytest.mark.parametrize("name", [["x"], {"a": 1}, 7, None], ids=["list", "object", "int", "null"])
def test_a_volume_name_that_is_not_a_string_takes_no_name_from_dev_shm(name: Any) -> None:
    # seen by fuzzing real-world jobs: a list as a volume name crashed the mutating route
    odd = {"volumes": [{"name": name, "emptyDir": {}}]}
    raw = job().master(gpus=1, pod_spec=odd).build()
    pod = at(defaulted(raw).object, *MASTER, *POD)
    assert pod["volumes"][-1]["name"] == SHM_VOLUME
    assert pod["containers"][0]["volumeMounts"][-1]["name"] == SHM_VOLUME


@pytest.mark.parametrize(
    ("security_context", "expected"),
    [
        (None, {"capabilities": {"add": ["IPC_LOCK"]}}),
        ({"runAsUser": 1}, {"runAsUser": 1, "capabilities": {"add": ["IPC_LOCK"]}}),
        (
            {"capabilities": {"add": ["SYS_PTRACE"]}},
            {"capabilities": {"add": ["SYS_PTRACE", "IPC_LOCK"]}},
        ),
        ({"capabilities": {"add": ["IPC_LOCK"]}}, {"capabilities": {"add": ["IPC_LOCK"]}}),
    ],
    ids=["no-context", "other-fields", "other-capability", "already-there"],
)
def test_rdma_containers_get_ipc_lock(security_context: Any, expected: Any) -> None:
    c = container(limits={"rdma/hca": 1})
    if security_context is not None:
        c["securityContext"] = security_context
    raw = job().master(containers=[c]).build()
    result = defaulted(raw)
    assert at(result.object, *MASTER, *POD, "containers", 0, "securityContext") == expected


def test_rdma_resource_list_comes_from_the_policy() -> None:
    c = container(limits={"vpc.amazonaws.com/efa": 4})
    raw = job().master(containers=[c]).build()
    assert "securityContext" not in at(defaulted(raw).object, *MASTER, *POD, "containers", 0)
    efa = parsed_policy("admin", rdmaResources=["vpc.amazonaws.com/efa"])
    context = at(defaulted(raw, efa).object, *MASTER, *POD, "containers", 0, "securityContext")
    assert context == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_run_policy_defaults_from_the_policy() -> None:
    admin = parsed_policy(
        "admin",
        jobDefaults={
            "cleanPodPolicy": "All",
            "backoffLimit": 5,
            "ttlSecondsAfterFinished": 3600,
            "managedBy": "torchgate.io/controller",
            "scheduleTimeoutSeconds": 120,
        },
    )
    raw = gpu_job(workers=3).build()
    run_policy = defaulted(raw, admin).object["spec"]["runPolicy"]
    assert run_policy == {
        "cleanPodPolicy": "All",
        "backoffLimit": 5,
        "ttlSecondsAfterFinished": 3600,
        "managedBy": "torchgate.io/controller",
        "schedulingPolicy": {"minAvailable": 4, "scheduleTimeoutSeconds": 120},
    }


def test_built_in_run_policy_defaults() -> None:
    run_policy = defaulted(gpu_job(workers=15).build()).object["spec"]["runPolicy"]
    assert run_policy == {
        "cleanPodPolicy": "Running",
        "backoffLimit": 3,
        "schedulingPolicy": {"minAvailable": 16},
    }


def test_elastic_gang_size_uses_the_elastic_minimum() -> None:
    raw = job().master().workers(4).elastic(minReplicas=2, maxReplicas=4).build()
    scheduling = defaulted(raw).object["spec"]["runPolicy"]["schedulingPolicy"]
    assert scheduling == {"minAvailable": 3}


def test_policy_node_selector_and_tolerations_go_into_every_template() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    admin = parsed_policy("admin", nodeSelector={"pool": "a100"}, tolerations=[toleration])
    result = defaulted(gpu_job(workers=2).build(), admin)
    for replica in (MASTER, WORKER):
        pod = at(result.object, *replica, *POD)
        assert pod["nodeSelector"] == {"pool": "a100"}
        assert pod["tolerations"] == [toleration]
    assert defaulted(result.object, admin).patch == []


def test_a_missing_section_is_added_whole_in_one_operation() -> None:
    admin = parsed_policy("admin", nodeSelector={"pool": "a100", "zone": "b"})
    result = defaulted(job().master().build(), admin)
    added = [op["path"] for op in result.patch]
    assert added.count("/spec/runPolicy") == 1
    assert not [path for path in added if path.startswith("/spec/runPolicy/")]
    selector = "/spec/pytorchReplicaSpecs/Master/template/spec/nodeSelector"
    assert [path for path in added if path.startswith(selector)] == [selector]
    assert at(result.object, *MASTER, *POD, "nodeSelector") == {"pool": "a100", "zone": "b"}
    assert set(result.object["spec"]["runPolicy"]) >= {"cleanPodPolicy", "schedulingPolicy"}


def test_the_defaulted_object_is_built_on_demand_without_touching_the_input() -> None:
    raw = gpu_job(workers=2).build()
    result = default_job(raw, DEFAULT_POLICY)
    built = result.object
    assert built is result.object, "built once"
    assert built is not raw
    assert built["spec"] is not raw["spec"]
    assert "runPolicy" not in raw["spec"]
    assert "runPolicy" in built["spec"]


def test_replicas_with_one_pod_spec_get_equal_defaults_and_no_shared_parts() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    admin = parsed_policy("admin", nodeSelector={"pool": "a100"}, tolerations=[toleration])
    result = defaulted(gpu_job(workers=2).build(), admin)
    master = at(result.object, *MASTER, *POD)
    worker = at(result.object, *WORKER, *POD)
    assert master == worker
    assert master["nodeSelector"] is not worker["nodeSelector"]
    assert master["tolerations"] is not worker["tolerations"]
    assert master["volumes"][-1] is not worker["volumes"][-1]
    paths = warned_paths(result)
    for replica in ("Master", "Worker"):
        pod = f"spec.pytorchReplicaSpecs[{replica}].template.spec"
        assert {f"{pod}.nodeSelector", f"{pod}.tolerations", f"{pod}.containers[0]"} <= paths


def test_conflicting_node_selector_is_an_error_not_an_override() -> None:
    admin = parsed_policy("admin", nodeSelector={"pool": "a100"})
    raw = job().master(pod_spec={"nodeSelector": {"pool": "t4"}}).build()
    result = defaulted(raw, admin)
    assert [(e.type, e.field) for e in result.errors] == [
        (ErrorType.INVALID, "spec.pytorchReplicaSpecs[Master].template.spec.nodeSelector[pool]")
    ]
    assert at(result.object, *MASTER, *POD, "nodeSelector") == {"pool": "t4"}


def test_pinned_hosts_become_a_required_node_affinity() -> None:
    raw = gpu_job(workers=1).hosts("host-a", "host-b").build()
    result = defaulted(raw)
    expression = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host-a", "host-b"]}
    for replica in (MASTER, WORKER):
        terms = at(
            result.object,
            *replica,
            *POD,
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        )
        assert terms == [{"matchExpressions": [expression]}]
    assert defaulted(result.object).patch == []


def test_pinned_hosts_are_anded_into_existing_terms() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}]
            }
        }
    }
    raw = job().master(pod_spec={"affinity": affinity}).hosts("h1").build()
    terms = at(
        defaulted(raw).object,
        *MASTER,
        *POD,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    assert terms[0]["matchExpressions"] == [
        zone,
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1"]},
    ]


@pytest.mark.parametrize(
    "empty",
    [{}, {"matchExpressions": []}, {"matchExpressions": None, "matchFields": []}],
    ids=["no-sections", "empty-expressions", "null-and-empty"],
)
def test_pinned_hosts_leave_an_empty_term_matching_no_node(empty: dict[str, Any]) -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}
    required = {"nodeSelectorTerms": [empty, {"matchExpressions": [zone]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    raw = job().master(pod_spec={"affinity": affinity}).hosts("h1").build()
    terms = at(
        defaulted(raw).object,
        *MASTER,
        *POD,
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1"]}
    assert terms == [empty, {"matchExpressions": [zone, host]}]


def test_pinned_hosts_already_in_every_term_change_nothing() -> None:
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [host]}, {}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    raw = job().master(pod_spec={"affinity": affinity}).hosts("h1").build()
    result = defaulted(raw)
    assert at(result.object, *MASTER, *POD, "affinity") == affinity
    assert "spec.pytorchReplicaSpecs[Master].template.spec.affinity" not in warned_paths(result)


@pytest.mark.parametrize(
    ("pod_spec", "field"),
    [
        (
            {"nodeSelector": {"kubernetes.io/hostname": "elsewhere"}},
            "spec.pytorchReplicaSpecs[Master].template.spec.nodeSelector[kubernetes.io/hostname]",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": ["elsewhere"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "spec.pytorchReplicaSpecs[Master].template.spec.affinity.nodeAffinity."
            "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]",
        ),
    ],
    ids=["node-selector", "node-affinity"],
)
def test_pinned_hosts_conflicting_with_the_template_are_errors(
    pod_spec: dict[str, Any], field: str
) -> None:
    raw = job().master(pod_spec=pod_spec).hosts("h1").build()
    assert [(e.type, e.field) for e in defaulted(raw).errors] == [(ErrorType.INVALID, field)]


def test_every_default_is_announced_with_the_torchgate_prefix() -> None:
    result = defaulted(gpu_job(workers=1).build())
    assert result.warnings
    assert all(w.startswith("torchgate: ") for w in render_warnings(result.warnings))


def test_update_restores_only_run_policy_fields_the_old_object_had() -> None:
    old = defaulted(gpu_job(workers=1).build()).object
    new = gpu_job(workers=1).build()  # the original manifest, as `kubectl replace` sends it
    result = defaulted(new, old=old)
    run_policy = result.object["spec"]["runPolicy"]
    assert run_policy == {"cleanPodPolicy": "Running", "backoffLimit": 3}
    assert at(result.object, *MASTER, *POD) == at(old, *MASTER, *POD), (
        "a template the update changed is defaulted as on CREATE"
    )


def test_update_keeps_what_the_user_changed() -> None:
    old = defaulted(gpu_job(workers=1).build()).object
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"]["cleanPodPolicy"] = "All"
    assert defaulted(new, old=old).patch == []


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        {"spec": None},
        {"spec": {"pytorchReplicaSpecs": None}},
        {"spec": {"pytorchReplicaSpecs": {"Master": None, "worker": "x"}}},
        {"spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"containers": "x"}}}}}},
        {"spec": {"pytorchReplicaSpecs": {"Master": {"template": None}}, "runPolicy": 3}},
        {"spec": {"runPolicy": {"schedulingPolicy": []}}},
    ],
    ids=[
        "null",
        "list",
        "null-spec",
        "null-specs",
        "bad-replicas",
        "bad-containers",
        "bad-policy",
        "bad-scheduling",
    ],
)
def test_malformed_jobs_never_crash(raw: Any) -> None:
    result = default_job(copy.deepcopy(raw), DEFAULT_POLICY)
    if result.patch:
        assert jsonpatch.apply_patch(raw, result.patch) == result.object


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def mutated_jobs(draw: st.DrawFn) -> dict[str, Any]:
    raw = gpu_job(workers=draw(st.integers(1, 16))).hosts("h1").build()
    for _ in range(draw(st.integers(0, 3))):
        replica = draw(st.sampled_from(["Master", "Worker"]))
        section = draw(
            st.sampled_from(
                ["replicas", "restartPolicy", "template", "ports", "resources", "volumes"]
            )
        )
        value = draw(json_value)
        target = raw["spec"]["pytorchReplicaSpecs"][replica]
        if section in ("replicas", "restartPolicy", "template"):
            target[section] = value
        else:
            pod = (
                target["template"].get("spec") if isinstance(target.get("template"), dict) else None
            )
            if not isinstance(pod, dict):
                continue
            if section == "volumes":
                pod["volumes"] = value
            elif isinstance(pod.get("containers"), list) and isinstance(pod["containers"][0], dict):
                pod["containers"][0][section] = value
    return raw


@settings(max_examples=300, deadline=None)
@given(mutated_jobs())
def test_patch_always_reproduces_the_defaulted_object(raw: dict[str, Any]) -> None:
    defaulted(
        raw, parsed_policy("admin", nodeSelector={"pool": "a"}, sharedMemory={"sizeLimit": "1Gi"})
    )


@pytest.mark.parametrize(
    "replicas", [1.8446744073709552e19, 2**31, 2**63], ids=["float-2^64", "int32-max+1", "2^63"]
)
def test_no_gang_size_is_defaulted_beyond_what_the_api_stores(replicas: float) -> None:
    raw = gpu_job(workers=1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = replicas
    run_policy = defaulted(raw).object["spec"]["runPolicy"]
    assert "schedulingPolicy" not in run_policy

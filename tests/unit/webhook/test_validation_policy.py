"""PlacementPolicy rules: host paths, privilege, pinned hosts, GPU budget, cleanup, node pool."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.job import container, cpu_job, gpu_job, job, with_uid
from tests.builders.policy import parsed_policy
from tests.unit.webhook.gometadata import annotations_refusals
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    HOSTS,
    INVALID,
    MC0,
    MPOD,
    NOT_SUPPORTED,
    REQUIRED,
    SPECS,
    TOO_LONG,
    WPOD,
    Pairs,
    case,
    check,
    master_container,
    pairs,
    setting,
    warned,
)
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.names import ANNOTATION_GANG_ATTEMPT
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy, parse_policy
from torchgate.webhook.validation import validate_create, validate_update
from torchgate_dev import packagedata

# ---------------------------------------------------------------------- rule 7: policy


DATA_PATHS = parsed_policy("data", allowedHostPaths=["/dev/shm", "/data"])
PRIVILEGED = parsed_policy("priv", allowPrivileged=True)
BUDGET = parsed_policy("budget", maxGPUsPerJob=8)
KEEP_PODS = parsed_policy("keep", allowCleanPodPolicyNone=True)
OTHER_ACCELERATOR = parsed_policy("amd", gpuResource="amd.com/gpu")
GLOO = ["--backend", "gloo"]
POOL = parsed_policy("pool", nodeSelector={"pool": "gpu"})


def host_path_job(*paths: str) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "hostPath": {"path": p}} for i, p in enumerate(paths)]
    return job().master(pod_spec={"volumes": volumes}).workers(1).build()


POLICY = [
    case(
        "host-path-refused-by-default",
        host_path_job("/dev/shm", "/data/x"),
        [(FORBIDDEN, f"{MPOD}.volumes[0].hostPath"), (FORBIDDEN, f"{MPOD}.volumes[1].hostPath")],
    ),
    case(
        "host-path-allowed-by-prefix",
        host_path_job("/dev/shm", "/data/x"),
        [],
        DATA_PATHS,
    ),
    case(
        "host-path-outside-prefix",
        host_path_job("/database"),
        [(FORBIDDEN, f"{MPOD}.volumes[0].hostPath")],
        DATA_PATHS,
    ),
    case(
        "host-path-without-path",
        job().master(pod_spec={"volumes": [{"name": "v", "hostPath": {}}]}).workers(1).build(),
        [(REQUIRED, f"{MPOD}.volumes[0].hostPath.path")],
    ),
    case(
        "privileged-refused",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("securityContext"), {"privileged": True}))
        .build(),
        [(FORBIDDEN, f"{MC0}.securityContext.privileged")],
    ),
    case(
        "privileged-init-container-refused",
        job()
        .master(
            pod_spec={
                "initContainers": [
                    {"name": "i", "image": "busybox", "securityContext": {"privileged": True}}
                ]
            }
        )
        .workers(1)
        .build(),
        [(FORBIDDEN, f"{MPOD}.initContainers[0].securityContext.privileged")],
    ),
    case(
        "privileged-allowed",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("securityContext"), {"privileged": True}))
        .build(),
        [],
        PRIVILEGED,
    ),
    case(
        "pinned-host-not-allowed",
        cpu_job().hosts("node-a", "node-c").build(),
        [(NOT_SUPPORTED, "metadata.annotations[torchgate.io/hosts]")],
        HOSTS,
    ),
    case("pinned-hosts-allowed", cpu_job().hosts("node-a", "node-b").build(), [], HOSTS),
    case("pinned-hosts-without-a-list", cpu_job().hosts("any-node").build(), []),
    case(
        "pinned-host-malformed",
        cpu_job().hosts("Node_A").build(),
        [(INVALID, "metadata.annotations[torchgate.io/hosts]")],
    ),
    case(
        "gpu-budget-exceeded",
        job().master(gpus=4).workers(2, gpus=4).build(),
        [(FORBIDDEN, SPECS)],
        BUDGET,
    ),
    case("gpu-budget-met", job().master(gpus=4).workers(1, gpus=4).build(), [], BUDGET),
    case(
        "clean-pod-policy-none-refused",
        gpu_job(workers=2).run_policy(cleanPodPolicy="None").build(),
        [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")],
    ),
    case(
        "clean-pod-policy-none-allowed",
        gpu_job(workers=2).run_policy(cleanPodPolicy="None").build(),
        [],
        KEEP_PODS,
    ),
    case(
        "clean-pod-policy-none-on-a-gpu-free-job",
        cpu_job().run_policy(cleanPodPolicy="None").build(),
        [],
    ),
    case(
        "clean-pod-policy-none-with-gpus-on-the-workers-only",
        job()
        .master(args=GLOO)
        .workers(2, gpus=1, args=GLOO)
        .run_policy(cleanPodPolicy="None")
        .build(),
        [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")],
    ),
    case(
        "clean-pod-policy-none-with-a-gpu-init-container",
        job()
        .master(pod_spec={"initContainers": [container(name="warm-up", gpus=1)]})
        .workers(1)
        .run_policy(cleanPodPolicy="None")
        .build(),
        [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")],
    ),
    case(
        "clean-pod-policy-none-with-gpus-the-policy-does-not-name",
        job()
        .master(gpus=1, args=GLOO)
        .workers(2, gpus=1, args=GLOO)
        .run_policy(cleanPodPolicy="None")
        .build(),
        [],
        OTHER_ACCELERATOR,
    ),
    case(
        "clean-pod-policy-none-with-the-policys-own-accelerator",
        job()
        .master(gpus=1, gpu_resource="amd.com/gpu", args=GLOO)
        .workers(1, args=GLOO)
        .run_policy(cleanPodPolicy="None")
        .build(),
        [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")],
        OTHER_ACCELERATOR,
    ),
    case(
        "node-selector-conflicts-with-policy",
        job().master(pod_spec={"nodeSelector": {"pool": "cpu", "zone": "a"}}).workers(1).build(),
        [(INVALID, f"{MPOD}.nodeSelector[pool]")],
        POOL,
    ),
    case(
        "node-selector-agrees-with-policy",
        job().master(pod_spec={"nodeSelector": {"pool": "gpu"}}).workers(1).build(),
        [],
        POOL,
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), POLICY)
def test_policy_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


# ------------------------------------------------- rule 7: privilege over the node, not the pod


def sharing(*fields: str) -> dict[str, Any]:
    """A job whose Master shares the node's namespaces named by ``fields``."""
    return job().master(pod_spec=dict.fromkeys(fields, True)).workers(1).build()


def adding(*capabilities: Any) -> dict[str, Any]:
    """A job whose Master's training container adds ``capabilities``."""
    context = {"capabilities": {"add": list(capabilities)}}
    edit = setting(*master_container("securityContext"), context)
    return job().master().workers(1).edit(edit).build()


ADD = f"{MC0}.securityContext.capabilities.add"
HOST_ACCESS = [
    case(
        "host-namespaces-refused-by-default",
        sharing("hostNetwork", "hostPID", "hostIPC"),
        [
            (FORBIDDEN, f"{MPOD}.hostNetwork"),
            (FORBIDDEN, f"{MPOD}.hostPID"),
            (FORBIDDEN, f"{MPOD}.hostIPC"),
        ],
    ),
    case(
        "host-namespaces-allowed-with-privilege", sharing("hostPID", "hostNetwork"), [], PRIVILEGED
    ),
    case(
        "host-namespaces-set-false",
        job().master(pod_spec={"hostPID": False, "hostNetwork": False}).workers(1).build(),
        [],
    ),
    case(
        "node-capabilities-refused-in-any-spelling",
        adding("IPC_LOCK", "SYS_ADMIN", "all", "cap_sys_module", "SYS_PTRACE", 7),
        [(FORBIDDEN, f"{ADD}[1]"), (FORBIDDEN, f"{ADD}[2]"), (FORBIDDEN, f"{ADD}[3]")],
    ),
    case("pod-capabilities-allowed", adding("IPC_LOCK", "SYS_PTRACE", "NET_ADMIN"), []),
    case("node-capabilities-allowed-with-privilege", adding("SYS_ADMIN", "ALL"), [], PRIVILEGED),
    case(
        "host-port-refused-by-default",
        job()
        .master()
        .workers(1)
        .edit(
            setting(
                *master_container("ports"),
                [
                    {"name": "pytorchjob-port", "containerPort": 23456},
                    {"name": "kubelet", "containerPort": 8080, "hostPort": 10250},
                    {"name": "unset", "containerPort": 8081, "hostPort": 0},
                ],
            )
        )
        .build(),
        [(FORBIDDEN, f"{MC0}.ports[1].hostPort")],
    ),
    case(
        "host-port-allowed-with-privilege",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("ports"), [{"containerPort": 80, "hostPort": 80}]))
        .build(),
        [],
        PRIVILEGED,
    ),
    case(
        "privileged-node-capability-and-host-port-in-one-container",
        job()
        .master()
        .workers(1)
        .edit(
            setting(
                *master_container("securityContext"),
                {"privileged": True, "capabilities": {"add": ["IPC_LOCK", "BPF"]}},
            )
        )
        .edit(setting(*master_container("ports"), [{"containerPort": 80, "hostPort": 80}]))
        .build(),
        [
            (FORBIDDEN, f"{MC0}.securityContext.privileged"),
            (FORBIDDEN, f"{ADD}[1]"),
            (FORBIDDEN, f"{MC0}.ports[0].hostPort"),
        ],
    ),
    case(
        "node-capability-in-an-init-container",
        job()
        .master(
            pod_spec={
                "initContainers": [
                    {
                        "name": "i",
                        "image": "busybox",
                        "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
                    }
                ]
            }
        )
        .workers(1)
        .build(),
        [(FORBIDDEN, f"{MPOD}.initContainers[0].securityContext.capabilities.add[0]")],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), HOST_ACCESS)
def test_privilege_over_the_node_needs_allow_privileged(
    raw: Any, active_policy: PlacementPolicy, expected: Pairs
) -> None:
    check(raw, active_policy, expected)


# ------------------------------------- rule 7: out of the admin's control of the pool and kernel


def tolerating(*tolerations: Any) -> dict[str, Any]:
    """A job whose Master tolerates ``tolerations``."""
    return job().master(pod_spec={"tolerations": list(tolerations)}).workers(1).build()


def confined(pod: Any, training: Any) -> dict[str, Any]:
    """A job whose Master's pod and training container have these ``securityContext``s."""
    edit = setting(*master_container("securityContext"), training)
    return job().master(pod_spec={"securityContext": pod}).workers(1).edit(edit).build()


APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR = f"{APPARMOR_PREFIX}pytorch"
INIT_APPARMOR = f"{APPARMOR_PREFIX}init"
SECCOMP_POD = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"
SECCOMP = f"{SECCOMP_PREFIX}pytorch"
MANN = f"{SPECS}[Master].template.metadata.annotations"
WANN = f"{SPECS}[Worker].template.metadata.annotations"


def annotated(
    *,
    master: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    pod: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A job whose templates carry these annotations; Master and Worker share a pod spec.

    ``pod``, ``training``: the pod's and the ``pytorch`` container's ``securityContext``;
    ``init``: an init container ``init`` with this ``securityContext``.
    """
    pod_spec: dict[str, Any] = {"securityContext": pod} if pod is not None else {}
    if init is not None:
        pod_spec["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
        if init:
            pod_spec["initContainers"][0]["securityContext"] = init
    raw = job().master(pod_spec=pod_spec).workers(1, pod_spec=pod_spec).build()
    for key, entries in (("Master", master), ("Worker", worker)):
        template = raw["spec"]["pytorchReplicaSpecs"][key]["template"]
        if training is not None:
            template["spec"]["containers"][0]["securityContext"] = copy.deepcopy(training)
        if entries is not None:
            template["metadata"] = {"annotations": dict(entries)}
    return raw


QUARANTINE = "torchgate.io/quarantine"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TOLERATES_ALL = {"operator": "Exists"}
WRITES_ALL = parsed_policy("all", tolerations=[TOLERATES_ALL])
TOL = f"{MPOD}.tolerations"
UNCONFINED = {"seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"}}
ESCAPES = [
    case(
        "tolerations-of-every-taint-the-quarantine-or-a-cordon-refused",
        tolerating(
            GPU_TOLERATION,  # 0: a named taint
            TOLERATES_ALL,  # 1
            {"operator": "Exists", "effect": "NoExecute"},  # 2: every health taint
            {"operator": "Exists", "effect": "PreferNoSchedule"},  # 3: a preference only
            {"key": QUARANTINE, "operator": "Exists"},  # 4
            {"key": QUARANTINE, "value": "PodStuck", "effect": "NoSchedule"},  # 5: one cause
            {"key": QUARANTINE, "operator": "Exists", "effect": "NoExecute"},  # 6: none exists
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},  # 7: a cordon
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            "not a toleration",  # 9: no pod decodes it (the template has no schema)
        ),
        [*((FORBIDDEN, f"{TOL}[{i}]") for i in (1, 2, 4, 5, 7)), (INVALID, f"{TOL}[9]")],
    ),
    case("every-taint-tolerated-with-privilege", tolerating(TOLERATES_ALL), [], PRIVILEGED),
    case("every-taint-tolerated-as-the-policy-writes", tolerating(TOLERATES_ALL), [], WRITES_ALL),
    case(
        "the-policys-own-tolerations-and-one-more-the-extra-refused",
        tolerating(TOLERATES_ALL, {"key": QUARANTINE, "operator": "Exists"}),
        [(FORBIDDEN, f"{TOL}[1]")],
        WRITES_ALL,
    ),
    case(
        "node-name-refused-even-with-privilege",
        job().master(pod_spec={"nodeName": "gpu-0"}).workers(1).build(),
        [(FORBIDDEN, f"{MPOD}.nodeName")],
        PRIVILEGED,
    ),
    case(
        "unconfined-profiles-refused-in-pod-and-container",
        confined(UNCONFINED, {**UNCONFINED, "runAsNonRoot": True}),
        [
            (FORBIDDEN, f"{MPOD}.securityContext.seccompProfile.type"),
            (FORBIDDEN, f"{MPOD}.securityContext.appArmorProfile.type"),
            (FORBIDDEN, f"{MC0}.securityContext.seccompProfile.type"),
            (FORBIDDEN, f"{MC0}.securityContext.appArmorProfile.type"),
        ],
    ),
    case(
        "confining-profiles-allowed",
        confined(
            {"seccompProfile": {"type": "RuntimeDefault"}},
            {"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-train"}},
        ),
        [],
    ),
    case("unconfined-allowed-with-privilege", confined(UNCONFINED, UNCONFINED), [], PRIVILEGED),
    case(
        "unconfined-with-a-localhost-profile-invalid-then-refused",
        confined({}, {"appArmorProfile": {"type": "Unconfined", "localhostProfile": "a"}}),
        [
            (INVALID, f"{MC0}.securityContext.appArmorProfile.localhostProfile"),
            (FORBIDDEN, f"{MC0}.securityContext.appArmorProfile.type"),
        ],
    ),
    case(
        "unconfined-with-a-localhost-profile-invalid-with-privilege",
        confined({"seccompProfile": {"type": "Unconfined", "localhostProfile": "a"}}, {}),
        [(INVALID, f"{MPOD}.securityContext.seccompProfile.localhostProfile")],
        PRIVILEGED,
    ),
    case(
        "legacy-apparmor-annotation-unconfined-refused",
        annotated(master={APPARMOR: "unconfined"}),
        [(FORBIDDEN, f"{MANN}[{APPARMOR}]")],
    ),
    case(
        "legacy-apparmor-annotation-refused-on-a-worker-sharing-the-masters-pod-spec",
        annotated(worker={APPARMOR: "unconfined"}),
        [(FORBIDDEN, f"{WANN}[{APPARMOR}]")],
    ),
    case(
        "legacy-apparmor-annotation-refused-beside-the-field",
        annotated(master={APPARMOR: "unconfined"}, pod={"appArmorProfile": {"type": "Unconfined"}}),
        [
            (FORBIDDEN, f"{MPOD}.securityContext.appArmorProfile.type"),
            (FORBIDDEN, f"{MANN}[{APPARMOR}]"),
            (FORBIDDEN, f"{WPOD}.securityContext.appArmorProfile.type"),
        ],
    ),
    case(
        "legacy-apparmor-annotations-that-confine-allowed",
        annotated(
            master={APPARMOR: "runtime/default", INIT_APPARMOR: "localhost/k8s-train"}, init={}
        ),
        [],
    ),
    case(
        "legacy-apparmor-annotation-unconfined-allowed-with-privilege",
        annotated(master={APPARMOR: "unconfined"}, worker={APPARMOR: "unconfined"}),
        [],
        PRIVILEGED,
    ),
]


RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def on_both(kind: ErrorType, field: str, times: int = 1) -> Pairs:
    """``kind`` at ``field`` of Master's pod spec, then of Worker's (``annotated`` shares it)."""
    return [(kind, f"{pod}.{field}") for pod in (MPOD, WPOD) for _ in range(times)]


LOCALHOST_A = {"type": "Localhost", "localhostProfile": "a"}
SIDECAR_APPARMOR = f"{APPARMOR_PREFIX}sidecar"
# What the apiserver refuses in every pod of the template: refused under every policy.
REFUSED_IN_EVERY_POD = [
    (
        "apparmor-annotation-naming-no-container",
        annotated(master={SIDECAR_APPARMOR: "runtime/default"}),
        [(INVALID, f"{MANN}[{SIDECAR_APPARMOR}]")],
    ),
    (
        "apparmor-annotation-unconfining-no-container-is-only-invalid",
        annotated(master={SIDECAR_APPARMOR: "unconfined"}),
        [(INVALID, f"{MANN}[{SIDECAR_APPARMOR}]")],
    ),
    (
        "apparmor-annotation-with-a-capital-u",
        annotated(master={APPARMOR: "Unconfined"}),
        [(INVALID, f"{MANN}[{APPARMOR}]")],
    ),
    (
        "apparmor-annotation-of-an-unknown-profile-on-a-worker",
        annotated(worker={APPARMOR: "k8s-train"}),
        [(INVALID, f"{WANN}[{APPARMOR}]")],
    ),
    (
        "apparmor-annotation-disagreeing-with-the-containers-field",
        annotated(master={APPARMOR: "localhost/a"}, training={"appArmorProfile": RUNTIME_DEFAULT}),
        [(FORBIDDEN, f"{MANN}[{APPARMOR}]")],
    ),
    (
        "apparmor-annotation-naming-another-localhost-profile",
        annotated(master={APPARMOR: "localhost/b"}, training={"appArmorProfile": LOCALHOST_A}),
        [(FORBIDDEN, f"{MANN}[{APPARMOR}]")],
    ),
    (
        "apparmor-annotation-not-copied-disagreeing-with-the-pods-field",
        annotated(master={APPARMOR: ""}, pod={"appArmorProfile": RUNTIME_DEFAULT}),
        [(FORBIDDEN, f"{MANN}[{APPARMOR}]")],
    ),
    (
        "init-container-apparmor-annotation-disagreeing-with-its-field",
        annotated(master={INIT_APPARMOR: "runtime/default"}, init={"appArmorProfile": LOCALHOST_A}),
        [(FORBIDDEN, f"{MANN}[{INIT_APPARMOR}]")],
    ),
    (
        "seccomp-annotation-of-an-unknown-profile",
        annotated(master={SECCOMP_POD: "RuntimeDefault"}),
        [(INVALID, f"{MANN}[{SECCOMP_POD}]")],
    ),
    (
        "seccomp-annotation-of-an-absolute-or-climbing-localhost-path",
        annotated(master={SECCOMP_POD: "localhost//etc/a", SECCOMP: "localhost/../a"}),
        [(INVALID, f"{MANN}[{SECCOMP_POD}]"), (INVALID, f"{MANN}[{SECCOMP}]")],
    ),
    (
        "seccomp-pod-annotation-disagreeing-with-the-pods-field",
        annotated(master={SECCOMP_POD: "localhost/a"}, pod={"seccompProfile": RUNTIME_DEFAULT}),
        [(FORBIDDEN, f"{MANN}[{SECCOMP_POD}]")],
    ),
    (
        "seccomp-container-annotation-disagreeing-with-its-field",
        annotated(master={SECCOMP: "localhost/b"}, training={"seccompProfile": LOCALHOST_A}),
        [(FORBIDDEN, f"{MANN}[{SECCOMP}]")],
    ),
    # The profile fields (the pod spec is Master's and Worker's: both are refused).
    (
        "seccomp-field-of-type-localhost-without-its-profile",
        annotated(training={"seccompProfile": {"type": "Localhost"}}),
        on_both(REQUIRED, "containers[0].securityContext.seccompProfile.localhostProfile"),
    ),
    (
        "seccomp-field-of-type-localhost-with-a-null-profile",
        annotated(pod={"seccompProfile": {"type": "Localhost", "localhostProfile": None}}),
        on_both(REQUIRED, "securityContext.seccompProfile.localhostProfile"),
    ),
    (
        "seccomp-field-with-a-profile-but-another-type",
        annotated(pod={"seccompProfile": {**RUNTIME_DEFAULT, "localhostProfile": "a"}}),
        on_both(INVALID, "securityContext.seccompProfile.localhostProfile"),
    ),
    (
        "seccomp-field-without-a-type",
        annotated(init={"seccompProfile": {}}),
        on_both(REQUIRED, "initContainers[0].securityContext.seccompProfile.type"),
    ),
    (
        "seccomp-field-of-an-unknown-type-with-a-profile",
        annotated(pod={"seccompProfile": {"type": "localhost", "localhostProfile": "a"}}),
        [
            (kind, f"{pod}.securityContext.seccompProfile.{field}")
            for pod in (MPOD, WPOD)
            for kind, field in ((NOT_SUPPORTED, "type"), (INVALID, "localhostProfile"))
        ],
    ),
    (
        "seccomp-field-of-an-absolute-climbing-profile",
        annotated(training={"seccompProfile": {"type": "Localhost", "localhostProfile": "/../a"}}),
        on_both(INVALID, "containers[0].securityContext.seccompProfile.localhostProfile", 2),
    ),
    (
        "apparmor-field-of-type-localhost-without-its-profile",
        annotated(init={"appArmorProfile": {"type": "Localhost"}}),
        on_both(REQUIRED, "initContainers[0].securityContext.appArmorProfile.localhostProfile"),
    ),
    (
        "apparmor-field-of-an-empty-profile",
        annotated(pod={"appArmorProfile": {"type": "Localhost", "localhostProfile": ""}}),
        on_both(REQUIRED, "securityContext.appArmorProfile.localhostProfile"),
    ),
    (
        "apparmor-field-of-a-padded-profile",
        annotated(training={"appArmorProfile": {"type": "Localhost", "localhostProfile": "a\n"}}),
        on_both(INVALID, "containers[0].securityContext.appArmorProfile.localhostProfile"),
    ),
    (
        "apparmor-field-of-a-profile-longer-than-path-max",
        annotated(pod={"appArmorProfile": {"type": "Localhost", "localhostProfile": "é" * 2048}}),
        on_both(TOO_LONG, "securityContext.appArmorProfile.localhostProfile"),
    ),
    (
        "apparmor-field-with-a-profile-but-another-type",
        annotated(pod={"appArmorProfile": {**RUNTIME_DEFAULT, "localhostProfile": "a"}}),
        on_both(INVALID, "securityContext.appArmorProfile.localhostProfile"),
    ),
    (
        "apparmor-field-with-an-empty-type",
        annotated(training={"appArmorProfile": {"type": ""}}),
        on_both(REQUIRED, "containers[0].securityContext.appArmorProfile.type"),
    ),
    (
        "apparmor-field-of-an-unknown-type-with-a-profile-is-only-not-supported",
        annotated(pod={"appArmorProfile": {"type": "unconfined", "localhostProfile": "a"}}),
        on_both(NOT_SUPPORTED, "securityContext.appArmorProfile.type"),
    ),
]
# What the apiserver accepts, though it looks alike.
ACCEPTED_IN_EVERY_POD = [
    ("apparmor-annotation-for-an-init-container", annotated(master={INIT_APPARMOR: ""}, init={})),
    (
        "apparmor-annotation-copied-over-the-pods-field",
        annotated(master={APPARMOR: "localhost/a"}, pod={"appArmorProfile": RUNTIME_DEFAULT}),
    ),
    (
        "apparmor-annotation-agreeing-with-the-containers-field",
        annotated(master={APPARMOR: "localhost/a"}, training={"appArmorProfile": LOCALHOST_A}),
    ),
    (
        "seccomp-docker-default-agreeing-with-runtime-default",
        annotated(master={SECCOMP_POD: "docker/default"}, pod={"seccompProfile": RUNTIME_DEFAULT}),
    ),
    (
        "seccomp-container-annotation-not-compared-with-the-pods-field",
        annotated(master={SECCOMP: "localhost/b"}, pod={"seccompProfile": LOCALHOST_A}),
    ),
    (
        "seccomp-annotation-naming-no-container",
        annotated(master={f"{SECCOMP_PREFIX}sidecar": "localhost/"}),
    ),
    (
        "seccomp-field-of-an-empty-profile",
        annotated(pod={"seccompProfile": {"type": "Localhost", "localhostProfile": ""}}),
    ),
    (
        "apparmor-field-of-an-absolute-climbing-profile",
        annotated(training={"appArmorProfile": {"type": "Localhost", "localhostProfile": "/../a"}}),
    ),
    (
        "apparmor-field-of-a-profile-of-path-max",
        annotated(pod={"appArmorProfile": {"type": "Localhost", "localhostProfile": "a" * 4095}}),
    ),
    (
        "profile-fields-with-a-null-or-a-dotted-profile",
        annotated(
            pod={
                "appArmorProfile": {**RUNTIME_DEFAULT, "localhostProfile": None},
                "seccompProfile": {"type": "Localhost", "localhostProfile": "a/b..c"},
            }
        ),
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(raw, expected, id=name) for name, raw, expected in REFUSED_IN_EVERY_POD]
    + [pytest.param(raw, [], id=name) for name, raw in ACCEPTED_IN_EVERY_POD],
)
@pytest.mark.parametrize("active_policy", [DEFAULT_POLICY, PRIVILEGED], ids=["default", "priv"])
def test_profile_annotations_the_apiserver_refuses_in_every_pod_are_refused_under_every_policy(
    raw: Any, expected: Pairs, active_policy: PlacementPolicy
) -> None:
    check(raw, active_policy, expected)


@pytest.mark.parametrize(("raw", "active_policy", "expected"), ESCAPES)
def test_escaping_the_admins_placement_or_confinement_needs_allow_privileged(
    raw: Any, active_policy: PlacementPolicy, expected: Pairs
) -> None:
    check(raw, active_policy, expected)


def test_legacy_seccomp_annotations_are_warned_as_ignored_under_every_policy() -> None:
    raw = annotated(master={SECCOMP_POD: "unconfined", SECCOMP: "runtime/default", "a": "b"})

    for active_policy in (DEFAULT_POLICY, PRIVILEGED):
        verdict = validate_create(raw, active_policy)

        assert pairs(verdict) == []
        assert warned(verdict) == [f"{MANN}[{SECCOMP_POD}]", f"{MANN}[{SECCOMP}]"]


def test_an_update_that_adds_the_legacy_apparmor_annotation_is_refused() -> None:
    admitted = with_uid(cpu_job().build())
    updated = copy.deepcopy(admitted)
    worker = updated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    worker["metadata"] = {"annotations": {APPARMOR: "unconfined"}}

    verdict = validate_update(admitted, updated, DEFAULT_POLICY)

    assert pairs(verdict) == [(FORBIDDEN, f"{WANN}[{APPARMOR}]")]


ANNOTATION_KEYS = st.sampled_from(
    [
        *(APPARMOR, INIT_APPARMOR, f"{APPARMOR_PREFIX}sidecar", f"{APPARMOR_PREFIX}", SECCOMP_POD),
        *(SECCOMP, f"{SECCOMP_PREFIX}init", f"{SECCOMP_PREFIX}sidecar", f"{SECCOMP_POD}x"),
    ]
) | st.text(max_size=20)
ANNOTATION_VALUES = st.sampled_from(
    [
        *("unconfined", "Unconfined", "runtime/default", "docker/default", "", "localhost/"),
        *("localhost/a", "localhost/b", "localhost/ a", "localhost/a\x1c", "localhost//a"),
        *("localhost/../a", "localhost/a/..", "localhost/a..b", "runtime/default "),
    ]
) | st.text(max_size=12)
VALID_PROFILES = [
    {"type": "Unconfined"},
    {"type": "RuntimeDefault"},
    {"type": "Localhost", "localhostProfile": "a"},
    {"type": "Localhost", "localhostProfile": "b"},
]
# Profile fields the apiserver refuses in one of the two profiles, or both.
INVALID_PROFILES = [
    {},
    {"type": None},
    {"type": ""},
    {"type": "localhost", "localhostProfile": "a"},
    {"type": "Localhost"},
    {"type": "Localhost", "localhostProfile": None},
    {"type": "Localhost", "localhostProfile": ""},
    {"type": "Localhost", "localhostProfile": " a"},
    {"type": "Localhost", "localhostProfile": "/a"},
    {"type": "Localhost", "localhostProfile": "x/../a"},
    {"type": "Localhost", "localhostProfile": "a" * 4096},
    {"type": "RuntimeDefault", "localhostProfile": "a"},
    {"type": "Unconfined", "localhostProfile": ""},
]
PROFILES = st.none() | st.sampled_from(VALID_PROFILES) | st.sampled_from(INVALID_PROFILES)


def security(apparmor: Any, seccomp: Any) -> dict[str, Any]:
    """A ``securityContext`` with these profiles (None: unset)."""
    profiles = {"appArmorProfile": apparmor, "seccompProfile": seccomp}
    return {field: profile for field, profile in profiles.items() if profile is not None}


def apiserver_refusals(
    annotations: dict[str, str], pod: dict[str, Any], containers: dict[str, dict[str, Any]]
) -> list[tuple[ErrorType, str]]:
    """What pod creation refuses, by annotation (its key) or profile field (its path in the pod).

    A line-by-line reading of pkg/apis/core/validation (v1.36, v1.37): the profile fields'
    validation, ``ValidatePodSpecificAnnotations`` (seccomp, AppArmor), the AppArmor copy of
    ``applyAppArmorVersionSkew`` and ``ValidatePodCreate``'s two agreement checks, for a Linux
    pod whose ``containers`` (init ones first, each ``init`` or ``pytorch``) have these
    securityContexts; the annotations' other checks are ``gometadata``'s (on the pod's
    annotations: the controller adds its gang attempt).
    """
    refused: list[tuple[ErrorType, str]] = []
    for where, context in (  # validatePodSpecSecurityContext, ValidateSecurityContext
        ("spec", pod),
        *((CONTAINER_PATHS[name], context) for name, context in containers.items()),
    ):
        for field, validate in (
            ("seccompProfile", seccomp_field),
            ("appArmorProfile", apparmor_field),
        ):
            if context.get(field) is not None:
                path = f"{where}.securityContext.{field}"
                refused += [(kind, f"{path}.{leaf}") for kind, leaf in validate(context[field])]
    for key, value in annotations.items():  # ValidateSeccompPodAnnotations
        if key == SECCOMP_POD or key.startswith(SECCOMP_PREFIX):
            if value.startswith("localhost/"):
                target = value.removeprefix("localhost/")
                if target.startswith("/"):  # path.IsAbs
                    refused.append((INVALID, annotation(key)))
                if ".." in target.split("/"):
                    refused.append((INVALID, annotation(key)))
            elif value not in ("runtime/default", "docker/default", "unconfined"):
                refused.append((INVALID, annotation(key)))
    for key, value in annotations.items():  # ValidateAppArmorPodAnnotations
        if key.startswith(APPARMOR_PREFIX):
            if key.removeprefix(APPARMOR_PREFIX) not in containers:
                refused.append((INVALID, annotation(key)))
            if value not in ("", "runtime/default", "unconfined") and not value.startswith(
                "localhost/"
            ):
                refused.append((INVALID, annotation(key)))
    pod_apparmor = pod.get("appArmorProfile")
    effective: dict[str, Any] = {}
    for name, context in containers.items():  # applyAppArmorVersionSkew
        own = context.get("appArmorProfile")
        key = APPARMOR_PREFIX + name
        if key in annotations and own is None:
            copied = field_for_annotation(annotations[key])
            if copied is not None and copied != pod_apparmor:
                own = copied
        effective[name] = own
    seccomp_pod = pod.get("seccompProfile")  # validateSeccompAnnotationsAndFields
    if seccomp_pod is not None and SECCOMP_POD in annotations:
        refused += disagreements(
            annotations[SECCOMP_POD], seccomp_pod, annotation(SECCOMP_POD), seccomp=True
        )
    for name, context in containers.items():
        key = SECCOMP_PREFIX + name
        if context.get("seccompProfile") is not None and key in annotations:
            refused += disagreements(
                annotations[key], context["seccompProfile"], annotation(key), seccomp=True
            )
    for name in containers:  # validateAppArmorAnnotationsAndFieldsMatchOnCreate
        profile = effective[name] if effective[name] is not None else pod_apparmor
        key = APPARMOR_PREFIX + name
        if profile is not None and key in annotations:
            refused += disagreements(annotations[key], profile, annotation(key), seccomp=False)
    if annotations:
        refused += annotations_refusals({**annotations, ANNOTATION_GANG_ATTEMPT: "0"})
    return refused


def annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"


CONTAINER_PATHS = {"init": "spec.initContainers[0]", "pytorch": "spec.containers[0]"}


def seccomp_field(profile: dict[str, Any]) -> list[tuple[ErrorType, str]]:
    """``validateSeccompProfileField``: (type, the profile's field) of each refusal."""
    kind, local = profile.get("type") or "", profile.get("localhostProfile")
    refused = []
    if kind == "":
        refused.append((REQUIRED, "type"))
    elif kind not in ("Localhost", "RuntimeDefault", "Unconfined"):
        refused.append((NOT_SUPPORTED, "type"))
    if kind == "Localhost":
        if local is None:
            refused.append((REQUIRED, "localhostProfile"))
        else:  # validateLocalDescendingPath
            if local.startswith("/"):
                refused.append((INVALID, "localhostProfile"))
            if ".." in local.split("/"):
                refused.append((INVALID, "localhostProfile"))
    elif local is not None:
        refused.append((INVALID, "localhostProfile"))
    return refused


def apparmor_field(profile: dict[str, Any]) -> list[tuple[ErrorType, str]]:
    """``ValidateAppArmorProfileField``: (type, the profile's field) of each refusal."""
    kind, local = profile.get("type") or "", profile.get("localhostProfile")
    refused = []
    if kind == "Localhost":
        if local is None:
            refused.append((REQUIRED, "localhostProfile"))
        else:
            if local.strip(" \t\n") != local:  # strings.TrimSpace, for the generated values
                refused.append((INVALID, "localhostProfile"))
            elif local == "":
                refused.append((REQUIRED, "localhostProfile"))
            if len(local.encode()) > 4095:
                refused.append((TOO_LONG, "localhostProfile"))
    elif kind in ("RuntimeDefault", "Unconfined"):
        if local is not None:
            refused.append((INVALID, "localhostProfile"))
    elif kind == "":
        refused.append((REQUIRED, "type"))
    else:
        refused.append((NOT_SUPPORTED, "type"))
    return refused


def field_for_annotation(value: str) -> dict[str, Any] | None:
    """``ApparmorFieldForAnnotation``, None when ``ValidateAppArmorProfileField`` refuses it."""
    if value == "unconfined":
        return {"type": "Unconfined"}
    if value == "runtime/default":
        return {"type": "RuntimeDefault"}
    profile = value.removeprefix("localhost/")
    if value.startswith("localhost/") and profile:
        go_space = "\t\n\v\f\r \x85\xa0"  # the generated values use no other
        if profile.strip(go_space) == profile and len(profile.encode()) <= 4095:
            return {"type": "Localhost", "localhostProfile": profile}
    return None


def disagreements(
    value: str, profile: dict[str, Any], key: str, *, seccomp: bool
) -> list[tuple[ErrorType, str]]:
    """``validateSeccompAnnotationsAndFieldsMatch`` and its AppArmor twin."""
    defaults = ("runtime/default", "docker/default") if seccomp else ("runtime/default",)
    kind = profile.get("type")
    if kind not in ("Unconfined", "RuntimeDefault", "Localhost"):
        return []  # no case of the switch
    agrees = (
        (kind == "Unconfined" and value == "unconfined")
        or (kind == "RuntimeDefault" and value in defaults)
        or (kind == "Localhost" and value == "localhost/" + str(profile.get("localhostProfile")))
    )
    return [] if agrees else [(FORBIDDEN, key)]


@settings(max_examples=400, deadline=None)
@given(
    entries=st.dictionaries(ANNOTATION_KEYS, ANNOTATION_VALUES, max_size=6),
    profiles=st.tuples(*[PROFILES] * 6),
    with_init=st.booleans(),
    on_worker=st.booleans(),
)
def test_the_profile_annotations_refused_are_those_the_apiserver_refuses_in_every_pod(
    entries: dict[str, str], profiles: tuple[Any, ...], with_init: bool, on_worker: bool
) -> None:
    """Under every policy (here the one allowing privilege: no policy refusal adds to them)."""
    pod, training, init = (security(*profiles[i : i + 2]) for i in (0, 2, 4))
    containers = {"init": init, "pytorch": training} if with_init else {"pytorch": training}
    annotations = {"master": entries} if not on_worker else {"worker": entries}
    raw = annotated(**annotations, pod=pod, training=training, init=init if with_init else None)

    verdict = validate_create(raw, PRIVILEGED)

    expected = [  # the replicas share their pod spec, not their annotations
        (kind, f"{SPECS}[{replica}].template.{path}")
        for replica, annotated_here in (("Master", not on_worker), ("Worker", on_worker))
        for kind, path in apiserver_refusals(entries if annotated_here else {}, pod, containers)
    ]
    assert Counter(pairs(verdict)) == Counter(expected)


@settings(max_examples=200, deadline=None)
@given(
    entries=st.dictionaries(ANNOTATION_KEYS, ANNOTATION_VALUES, max_size=6),
    on_worker=st.booleans(),
    privileged=st.booleans(),
)
def test_exactly_the_apparmor_annotations_that_unconfine_are_refused_by_the_policy(
    entries: dict[str, str], on_worker: bool, privileged: bool
) -> None:
    """Whichever replica carries them (the other shares its pod spec), and only unprivileged."""
    raw = annotated(worker=entries, init={}) if on_worker else annotated(master=entries, init={})
    where = WANN if on_worker else MANN

    verdict = validate_create(raw, PRIVILEGED if privileged else DEFAULT_POLICY)

    unconfining = [
        (FORBIDDEN, f"{where}[{key}]")
        for key, value in entries.items()
        if key in (APPARMOR, INIT_APPARMOR) and value == "unconfined" and not privileged
    ]
    assert [pair for pair in pairs(verdict) if pair[0] is FORBIDDEN] == unconfining


def test_an_update_that_tolerates_every_taint_is_refused() -> None:
    admitted = with_uid(cpu_job().build())
    updated = copy.deepcopy(admitted)
    updated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [
        TOLERATES_ALL
    ]

    verdict = validate_update(admitted, updated, DEFAULT_POLICY)

    assert pairs(verdict) == [(FORBIDDEN, f"{WPOD}.tolerations[0]")]


def test_an_update_that_shares_the_nodes_pid_namespace_is_refused() -> None:
    admitted = with_uid(cpu_job().build())
    updated = copy.deepcopy(admitted)
    for replica in updated["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["hostPID"] = True

    verdict = validate_update(admitted, updated, DEFAULT_POLICY)

    assert pairs(verdict) == [(FORBIDDEN, f"{MPOD}.hostPID"), (FORBIDDEN, f"{WPOD}.hostPID")]


# ---------------------------------------------------------------------- the dev cluster's policy

SEEDS = Path(__file__).resolve().parents[3].parent / "shared" / "seeds" / "manifests"


def dev_policy() -> PlacementPolicy:
    documents = yaml.safe_load_all(packagedata.SAMPLE_POLICY.read_text(encoding="utf-8"))
    (raw,) = [
        d
        for d in documents
        if d["kind"] == "PlacementPolicy" and d["metadata"]["name"] == "dev-a100"
    ]
    result, errors = parse_policy(raw)
    assert result is not None, errors
    return result


def keeping_pods(manifest: str, *, image: str | None = None) -> dict[str, Any]:
    text = (SEEDS / manifest).read_text(encoding="utf-8")
    raw: dict[str, Any] = yaml.safe_load(text.replace("<训练镜像>", image or "<训练镜像>"))
    raw.setdefault("spec", {}).setdefault("runPolicy", {})["cleanPodPolicy"] = "None"
    return raw


def test_under_the_dev_policy_a_gpu_free_job_keeps_its_pods_and_a_gpu_job_may_not() -> None:
    policy = dev_policy()
    assert not policy.allow_clean_pod_policy_none

    cpu = validate_create(keeping_pods("003-torchrun-cpu.yaml"), policy)
    gpu = validate_create(
        keeping_pods("000-pytorch-dist-mnist-nccl.yaml", image="pytorch-demo"), policy
    )

    assert cpu.allowed, cpu.errors
    assert pairs(gpu) == [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")]

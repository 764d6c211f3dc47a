"""PlacementPolicy rules: host paths, privilege, pinned hosts, GPU budget, cleanup, node pool."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import cpu_job, job
from tests.builders.policy import parsed_policy
from tests.unit.webhook.validationcases import (
    FORBIDDEN,
    HOSTS,
    INVALID,
    MC0,
    MPOD,
    NOT_SUPPORTED,
    REQUIRED,
    SPECS,
    Pairs,
    case,
    check,
    master_container,
    setting,
)
from torchgate.pytorchjob.policy import PlacementPolicy

# ---------------------------------------------------------------------- rule 7: policy


DATA_PATHS = parsed_policy("data", allowedHostPaths=["/dev/shm", "/data"])
PRIVILEGED = parsed_policy("priv", allowPrivileged=True)
BUDGET = parsed_policy("budget", maxGPUsPerJob=8)
KEEP_PODS = parsed_policy("keep", allowCleanPodPolicyNone=True)
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
        cpu_job().run_policy(cleanPodPolicy="None").build(),
        [(FORBIDDEN, "spec.runPolicy.cleanPodPolicy")],
    ),
    case(
        "clean-pod-policy-none-allowed",
        cpu_job().run_policy(cleanPodPolicy="None").build(),
        [],
        KEEP_PODS,
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

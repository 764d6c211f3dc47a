"""The webhook behind a real apiserver: seeds, failurePolicy Fail, live policies, UPDATE rules.

Unit and component tests call the review functions directly; only here does the apiserver sit in
between, with what it really does: mutating before validating webhooks, filling ``metadata.uid``
before validating admission, keeping the webhook's Status causes, sending ``Warning`` headers to
kubectl, refusing writes when a ``failurePolicy: Fail`` webhook is away. The module starts
``torchgate webhook`` as a subprocess (``--kubeconfig``, so it watches PlacementPolicies), with
certificates made by ``torchgate certs``, and registers it by URL with the same pure function
``torchgate dev`` uses. Assertions are on stored objects and on (reason, field) pairs.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders.job import gpu_job
from tests.builders.policy import policy
from tests.e2e.conftest import REPO_ROOT, Cluster, load_yaml
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook  # the module-scoped fixture
from torchgate.pytorchjob import names
from torchgate.pytorchjob.fieldpath import ErrorType

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

SEEDS = REPO_ROOT.parent / "shared" / "seeds" / "manifests"
JOBS = f"/apis/{names.API_VERSION}"

REQUIRED = ErrorType.REQUIRED.value
INVALID = ErrorType.INVALID.value
FORBIDDEN = ErrorType.FORBIDDEN.value
NOT_FOUND = ErrorType.NOT_FOUND.value

M = "spec.pytorchReplicaSpecs[Master]"
W = "spec.pytorchReplicaSpecs[Worker]"
MPOD, WPOD = f"{M}.template.spec", f"{W}.template.spec"
MC0, WC0 = f"{MPOD}.containers[0]", f"{WPOD}.containers[0]"
_WARNING = re.compile(r"^Warning: torchgate: (?P<field>[^:\s]+): ", re.MULTILINE)


# ----------------------------------------------------------------------------- helpers


def jobs_path(namespace: str, name: str = "") -> str:
    return f"{JOBS}/namespaces/{namespace}/pytorchjobs" + (f"/{name}" if name else "")


def causes(body: dict[str, Any]) -> set[tuple[str, str]]:
    return {(c["reason"], c["field"]) for c in body.get("details", {}).get("causes", [])}


def warned_fields(stderr: str) -> set[str]:
    """Field paths of the ``torchgate:`` warnings kubectl printed."""
    return {match["field"] for match in _WARNING.finditer(stderr)}


def pytorch_pod(stored: dict[str, Any], replica: str) -> dict[str, Any]:
    pod: dict[str, Any] = stored["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
    return pod


def pytorch_container(stored: dict[str, Any], replica: str) -> dict[str, Any]:
    return next(c for c in pytorch_pod(stored, replica)["containers"] if c["name"] == "pytorch")


def shm_volume_name(stored: dict[str, Any], replica: str) -> str | None:
    """The volume mounted at /dev/shm of the pytorch container, if it is a memory emptyDir."""
    mounts = pytorch_container(stored, replica).get("volumeMounts", [])
    volumes = {v["name"]: v for v in pytorch_pod(stored, replica).get("volumes", [])}
    for name in [m["name"] for m in mounts if m.get("mountPath") == "/dev/shm"]:
        if volumes.get(name, {}).get("emptyDir", {}).get("medium") == "Memory":
            return str(name)
    return None


def apply(cluster: Cluster, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(obj), check=False
    )
    return result


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for item in (obj or {}).get("status", {}).get("conditions", []):
        if item.get("type") == kind:
            return dict(item)
    return {}


# ----------------------------------------------------------------------------- (a) the seeds


@dataclass(frozen=True)
class StoredSeed:
    """A seed the webhook lets through, and what it must have added."""

    name: str
    declared_namespace: str | None
    shm: bool
    min_available: int
    # A placeholder image the user must replace first, and what the walkthrough replaces it with.
    placeholder: tuple[str, str] | None = None


PLACEHOLDER_SEED = "000-pytorch-dist-mnist-nccl.yaml"
STORED_SEEDS = {
    PLACEHOLDER_SEED: StoredSeed(
        "pytorch-dist-mnist-nccl", None, True, 2, placeholder=("<训练镜像>", "pytorch-demo")
    ),
    "003-torchrun-cpu.yaml": StoredSeed("torchrun-cpu", None, False, 2),
    "004-pytorch-simple.yaml": StoredSeed("pytorch-simple", "kubeflow", False, 2),
}
REFUSED_SEED = "002-resnet50-nccl-rdma-16.yaml"
SEED_002_CAUSES = {
    (FORBIDDEN, f"{MC0}.args"),  # the stray --world-size=16
    (FORBIDDEN, f"{WC0}.args"),
    (REQUIRED, f"{WC0}.volumeMounts[5].mountPath"),  # NCCL_DEBUG pasted under volumeMounts
    (NOT_FOUND, f"{WC0}.volumeMounts[5].name"),
    (REQUIRED, f"{WC0}.volumeMounts[6].mountPath"),  # LD_PRELOAD likewise
    (NOT_FOUND, f"{WC0}.volumeMounts[6].name"),
    (FORBIDDEN, f"{MC0}.env[2]"),  # NVIDIA_VISIBLE_DEVICES=all without a GPU request
    (FORBIDDEN, f"{WC0}.env[2]"),
    *((FORBIDDEN, f"{pod}.volumes[{i}].hostPath") for pod in (MPOD, WPOD) for i in range(5)),
}


def test_every_seed_manifest_has_an_expected_outcome() -> None:
    assert {path.name for path in SEEDS.glob("*.yaml")} == {*STORED_SEEDS, REFUSED_SEED}


@pytest.mark.parametrize("seed", sorted(STORED_SEEDS), ids=lambda s: s.split("-")[0])
def test_seed_is_stored_with_the_webhook_defaults(
    cluster: Cluster, webhook: LocalWebhook, seed: str
) -> None:
    expected = STORED_SEEDS[seed]
    if expected.declared_namespace is None:
        namespace = cluster.new_namespace("seed")
        scope = ["--namespace", namespace]
    else:
        namespace = expected.declared_namespace  # kubectl refuses --namespace that contradicts
        cluster.kubectl("create", "namespace", namespace, check=False)
        scope = []
    text = (SEEDS / seed).read_text(encoding="utf-8")
    if expected.placeholder is not None:
        text = text.replace(*expected.placeholder)
    try:
        result = cluster.kubectl("apply", "-f", "-", *scope, input=text, check=False)

        assert result.returncode == 0, result.stderr
        stored = cluster.get("pytorchjob", expected.name, namespace)
        assert stored is not None
        run_policy = stored["spec"]["runPolicy"]
        assert run_policy["cleanPodPolicy"] == "Running"
        assert run_policy["schedulingPolicy"]["minAvailable"] == expected.min_available
        for replica in ("Master", "Worker"):
            ports = pytorch_container(stored, replica).get("ports", [])
            assert {"name": "pytorchjob-port", "containerPort": 23456} in ports
            assert (shm_volume_name(stored, replica) is not None) is expected.shm
        defaulted = {
            "spec.runPolicy.cleanPodPolicy",
            "spec.runPolicy.schedulingPolicy.minAvailable",
            f"{MC0}.ports",
            f"{WC0}.ports",
        }
        assert defaulted - warned_fields(result.stderr) == set()
    finally:
        if expected.declared_namespace is not None:
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_seed_000_as_published_is_refused_at_its_placeholder_images(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("seed")
    result = cluster.kubectl(
        "apply", "-f", str(SEEDS / PLACEHOLDER_SEED), "--namespace", namespace, check=False
    )

    assert result.returncode != 0
    assert cluster.list_objects("pytorchjobs", namespace) == []
    status, body = cluster.api_request(
        "POST", jobs_path(namespace), load_yaml(SEEDS / PLACEHOLDER_SEED)
    )

    assert (status, body["reason"]) == (422, "Invalid")
    assert causes(body) == {(INVALID, f"{MC0}.image"), (INVALID, f"{WC0}.image")}
    assert cluster.list_objects("pytorchjobs", namespace) == []


def test_seed_002_is_refused_with_every_cause(cluster: Cluster, webhook: LocalWebhook) -> None:
    namespace = cluster.new_namespace("seed")
    result = cluster.kubectl(
        "apply", "-f", str(SEEDS / REFUSED_SEED), "--namespace", namespace, check=False
    )

    assert result.returncode != 0
    assert cluster.list_objects("pytorchjobs", namespace) == []
    # kubectl shows the Status message, which lists every cause by its field path.
    assert [field for _, field in SEED_002_CAUSES if field not in result.stderr] == []

    status, body = cluster.api_request(
        "POST", jobs_path(namespace), load_yaml(SEEDS / REFUSED_SEED)
    )

    assert (status, body["reason"]) == (422, "Invalid")
    assert SEED_002_CAUSES - causes(body) == set()
    assert cluster.list_objects("pytorchjobs", namespace) == []


# ----------------------------------------------------------------------------- (b) failurePolicy


def test_writes_fail_while_the_webhook_is_down_and_pass_once_it_is_back(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("fail")
    webhook.stop()
    try:
        refused = apply(cluster, gpu_job("while-down", namespace=namespace).build())
        status, body = cluster.api_request(
            "POST", jobs_path(namespace), gpu_job("while-down", namespace=namespace).build()
        )

        assert refused.returncode != 0
        assert (status, body["reason"]) == (500, "InternalError")  # failed calling webhook
        assert cluster.get("pytorchjob", "while-down", namespace) is None
    finally:
        webhook.start()

    accepted = apply(cluster, gpu_job("while-down", namespace=namespace).build())

    assert accepted.returncode == 0, accepted.stderr
    stored = cluster.get("pytorchjob", "while-down", namespace)
    assert stored is not None
    assert stored["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


# ----------------------------------------------------------------------------- (c) live policies


def test_policy_created_in_the_cluster_steers_new_jobs_and_a_bad_one_is_reported(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("policy")
    suffix = secrets.token_hex(3)
    good = policy(f"e2e-a100-{suffix}", namespaces=[namespace], nodeSelector={"pool": "a100"})
    # Higher priority, same namespace: were it not ignored, it would win the selection.
    bad = policy(
        f"e2e-bad-{suffix}",
        namespaces=[namespace],
        priority=100,
        allowedHostPaths=["data"],  # not absolute: the parser's rule, not the CRD schema's
    )
    try:
        cluster.apply(good)
        began = time.monotonic()

        def defaulted_selector() -> dict[str, Any] | None:
            status, body = cluster.api_request(
                "POST",
                jobs_path(namespace) + "?dryRun=All",
                gpu_job("probe", namespace=namespace).build(),
            )
            if status != 201:
                return None
            return pytorch_pod(body, "Worker").get("nodeSelector")

        assert cluster.wait_for(defaulted_selector, timeout=10, what="the policy in use") == {
            "pool": "a100"
        }
        assert time.monotonic() - began < 10

        # Written through the webhook, it would be refused (test_policy_admission_e2e.py); written
        # while the webhook is down (failurePolicy Ignore for policies), it is stored.
        webhook.stop()
        try:
            cluster.apply(bad)
        finally:
            webhook.start()
        reported = cluster.wait_for(
            lambda: (
                condition(cluster.get("placementpolicy", bad["metadata"]["name"]), "Valid") or None
            ),
            timeout=10,
            what="a Valid condition on the bad policy",
        )
        assert (reported["status"], reported["reason"]) == ("False", "InvalidSpec")
        accepted = condition(cluster.get("placementpolicy", good["metadata"]["name"]), "Valid")
        assert accepted["status"] == "True"

        result = apply(cluster, gpu_job("steered", namespace=namespace).build())

        assert result.returncode == 0, result.stderr
        stored = cluster.get("pytorchjob", "steered", namespace)
        assert stored is not None
        for replica in ("Master", "Worker"):
            assert pytorch_pod(stored, replica)["nodeSelector"] == {"pool": "a100"}
        assert stored["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    finally:
        cluster.kubectl(
            "delete", "placementpolicy", good["metadata"]["name"], bad["metadata"]["name"],
            "--ignore-not-found", check=False,
        )  # fmt: skip


# ----------------------------------------------------------------------------- (d) UPDATE


def test_update_of_managed_by_is_refused_and_a_label_change_is_not(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("update")
    original = gpu_job("owned", namespace=namespace).build()
    original["spec"]["runPolicy"] = {"managedBy": "kubeflow.org/training-operator"}
    assert apply(cluster, original).returncode == 0
    stored = cluster.get("pytorchjob", "owned", namespace)
    assert stored is not None

    moved = json.loads(json.dumps(stored))
    moved["spec"]["runPolicy"]["managedBy"] = "torchgate.io/controller"
    status, body = cluster.api_request("PUT", jobs_path(namespace, "owned"), moved)

    assert (status, body["reason"]) == (422, "Invalid")
    assert causes(body) == {(INVALID, "spec.runPolicy.managedBy")}
    after = cluster.get("pytorchjob", "owned", namespace)
    assert after is not None
    assert after["spec"]["runPolicy"]["managedBy"] == "kubeflow.org/training-operator"

    labelled = json.loads(json.dumps(after))
    labelled["metadata"].setdefault("labels", {})["team"] = "vision"
    status, body = cluster.api_request("PUT", jobs_path(namespace, "owned"), labelled)

    assert status == 200, body
    final = cluster.get("pytorchjob", "owned", namespace)
    assert final is not None
    assert final["metadata"]["labels"]["team"] == "vision"
    assert final["spec"] == after["spec"]

"""Telling people what will happen, on the real control plane: forecasts, explain, simulate.

``torchgate controller`` (a subprocess, serving its pool service over TLS with a certificate from
``torchgate certs``) and ``torchgate webhook`` (a subprocess asking that pool service for
forecasts, registered with ``failurePolicy: Fail``) run against the local apiserver and kwok
nodes of a pool label of each test's own. The commands run as a user would run them
(``torchgate explain``/``simulate``, ``kubectl torchgate ...`` and ``kubectl apply
--dry-run=server``), with the cluster's kubeconfig and the pool service's address; assertions
read their output and the cluster. The last test stops the controller: admission goes on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    events_once,
    get_job,
    is_true,
    live_pods,
)
from tests.e2e.node_outages import set_not_ready
from tests.e2e.rbac import token_kubeconfig
from tests.e2e.test_pool_sharing import QUOTA_CRD, Pool, queued_reason, running, wait_running
from tests.e2e.webhook_process import LocalWebhook
from torchgate_dev.apiserver import wait_for_admission
from torchgate_dev.controlplane import kwok
from torchgate_dev.paths import CA_CERT, TLS_CERT, TLS_KEY
from torchgate_dev.ports import free_port
from torchgate_dev.state import DevError

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent


class Stack:
    """The controller with its pool service and the webhook that asks it."""

    def __init__(self, controller: ControllerProcess, webhook: LocalWebhook, pool_port: int):
        self.controller = controller
        self.webhook = webhook
        self.url = f"https://127.0.0.1:{pool_port}"
        self.ca = webhook.tls / CA_CERT

    def env(self, cluster: Cluster) -> dict[str, str]:
        """A user's environment: the cluster's kubeconfig, the pool service and its CA."""
        return {
            **{k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"},
            "KUBECONFIG": str(cluster.kubeconfig),
            "TORCHGATE_CONTROLLER": self.url,
            "TORCHGATE_CONTROLLER_CA": str(self.ca),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }


def serving_controller(
    cluster: Cluster, workdir: Path, webhook: LocalWebhook, pool_port: int, **options: bool
) -> ControllerProcess:
    """A controller serving the pool service on ``pool_port`` with the webhook's certificate."""
    return ControllerProcess(
        cluster.kubeconfig,
        workdir,
        "--pool-service-port", str(pool_port),
        "--pool-service-bind-address", "127.0.0.1",
        "--tls-cert-file", str(webhook.tls / TLS_CERT),
        "--tls-private-key-file", str(webhook.tls / TLS_KEY),
        **options,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stack(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if cluster.plane.attached:
        pytest.skip("the webhook runs on this machine's loopback; an attached cluster cannot")
    cluster.kubectl("apply", "-f", str(QUOTA_CRD))
    pool_port = free_port()
    workdir = tmp_path_factory.mktemp("forecast")
    webhook = LocalWebhook(cluster, workdir, controller_port=pool_port)
    ca_bundle = webhook.make_certificates()
    controller = serving_controller(cluster, workdir, webhook, pool_port).start()
    webhook.start()
    try:
        webhook.register(ca_bundle)
        try:
            wait_for_admission(cluster.api_request, timeout=30)
        except DevError as error:
            pytest.fail(str(error), pytrace=False)
        yield Stack(controller, webhook, pool_port)
    finally:
        webhook.unregister()
        webhook.stop()
        if controller.process is not None and controller.process.poll() is None:
            controller.stop()


@pytest.fixture
def pool(cluster: Cluster, stack: Stack) -> Iterator[Pool]:
    made = Pool(cluster)
    yield made
    made.clean_up()


def torchgate(
    stack: Stack, cluster: Cluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchgate", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=stack.env(cluster),
        check=False,
    )


def manifest(pool: Pool, namespace: str, name: str, *, pods: int, gpus: int, **extra: Any) -> str:
    """The job ``Pool.job`` would create, as YAML to apply or simulate."""
    pod_spec: dict[str, Any] = {"nodeSelector": {"pool": pool.label}}
    if "priority_class" in extra:
        pod_spec["priorityClassName"] = extra["priority_class"]

    def replica(count: int, resources: dict[str, Any], **more: Any) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "registry.invalid/train:1", "resources": resources}
        container |= more
        return {"replicas": count, "template": {"spec": {"containers": [container], **pod_spec}}}

    gpu_pod = {"limits": {"nvidia.com/gpu": gpus}}
    if "master_cpu" in extra:
        # a CPU-only Master of that many CPUs beside the GPU Workers: a rank on CPU, so gloo
        cpu_pod = {"requests": {"cpu": extra["master_cpu"]}}
        specs = {"Master": replica(1, cpu_pod, args=["--backend", "gloo"])}
    else:
        specs = {"Master": replica(1, gpu_pod)}
    if pods > 1:
        specs["Worker"] = replica(pods - 1, gpu_pod)
    return yaml.safe_dump(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": specs},
        }
    )


# ------------------------------------------------------------------ explain


def test_a_job_waiting_for_its_teams_quota_is_explained_with_its_place_and_the_teams_numbers(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(2)
    namespace = cluster.new_namespace("vision")
    pool.team("vision", [namespace], 8, borrowingLimitGPUs=0)
    pool.job(namespace, "first", pods=1, gpus=8)
    wait_running(cluster, namespace, "first", 1)
    pool.job(namespace, "second", pods=1, gpus=8)
    cluster.wait_for(
        lambda: queued_reason(cluster, namespace, "second") == "WaitingForQuota",
        what="second waiting for quota",
    )

    result = torchgate(stack, cluster, "explain", "second", "-n", namespace, "-o", "json")

    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert (told["state"], told["reason"]) == ("Waiting", "WaitingForQuota")
    # First of its team; in the pool, after whatever other modules left waiting.
    assert told["queue"]["team"]["position"] == 1
    assert told["position"] == told["queue"]["pool"]["position"] >= 1
    assert "8/8 GPUs" in told["message"], told["message"]
    assert told["mustEnd"][0]["job"] == f"{namespace}/first"
    assert told["controller"] == "answered"

    plugin = subprocess.run(
        ["kubectl", "torchgate", "explain", "first", "-n", namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env=stack.env(cluster),
        check=False,
    )
    assert plugin.returncode == 0, plugin.stderr
    assert plugin.stdout.startswith(f"PyTorchJob {namespace}/first: Running")
    assert f"{pool.label}-" in plugin.stdout  # its node

    wide = cluster.kubectl("get", "pytorchjobs", "-n", namespace, "-o", "wide").stdout
    (row,) = [line for line in wide.splitlines() if line.startswith("second ")]
    assert "WaitingForQuota" in row
    assert re.search(r"#\d+ of \d+ in the pool \(team \S+ #1 of 1", row), row
    assert "8/8 GPUs" in row


def test_explain_tells_a_job_whose_node_selector_no_node_has_what_must_change(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("lost")
    lost = yaml.safe_load(manifest(pool, namespace, "lost", pods=1, gpus=1))
    template = lost["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    template["spec"]["nodeSelector"] = {"pool": f"{pool.label}-typo"}
    cluster.apply(lost)
    cluster.wait_for(
        lambda: queued_reason(cluster, namespace, "lost") == "WaitingForResources",
        what="lost waiting",
    )

    as_json = torchgate(stack, cluster, "explain", "lost", "-n", namespace, "-o", "json")
    as_text = torchgate(stack, cluster, "explain", "lost", "-n", namespace)

    assert as_json.returncode == as_text.returncode == 0, as_json.stderr + as_text.stderr
    told = json.loads(as_json.stdout)
    assert told["placeable"] is False
    assert told["message"].startswith("no eligible node in pool pool="), told["message"]
    (line,) = [line for line in as_text.stdout.splitlines() if line.startswith("  to start:")]
    assert "its nodeSelector, affinity, tolerations or pinned hosts must change" in line


HEALTH_TAINT = "nvidia.com/gpu-health=unhealthy:NoExecute"


def test_a_job_waiting_for_gpus_on_sick_nodes_is_told_so_and_that_clearing_them_starts_it(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    *healthy, sick_a, sick_b, lost = pool.nodes(5)
    sick = [sick_a, sick_b]
    namespace = cluster.new_namespace("sick")
    try:
        for node in sick:
            cluster.kubectl("taint", "nodes", node, HEALTH_TAINT)
        set_not_ready(cluster, lost)
        cluster.apply(yaml.safe_load(manifest(pool, namespace, "first", pods=1, gpus=8)))
        (held,) = wait_running(cluster, namespace, "first", 1)
        cluster.apply(yaml.safe_load(manifest(pool, namespace, "pair", pods=2, gpus=8)))
        clause = (
            "(24 nvidia.com/gpu more on 3 nodes out of use: 2 tainted nvidia.com/gpu-health, "
            "1 NotReady)"
        )

        def queued_message() -> str:
            found = condition(get_job(cluster, namespace, "pair"), "Queued")
            return str(found.get("message", "")) if found else ""

        message = cluster.wait_for(
            lambda: clause in (text := queued_message()) and text,
            timeout=60,
            what="pair told of the nodes out of use",
        )
        assert f"waiting for 16 nvidia.com/gpu in pool pool={pool.label}: 8 free {clause}" in (
            message
        )

        as_json = torchgate(stack, cluster, "explain", "pair", "-n", namespace, "-o", "json")
        as_text = torchgate(stack, cluster, "explain", "pair", "-n", namespace)

        assert as_json.returncode == as_text.returncode == 0, as_json.stderr + as_text.stderr
        told = json.loads(as_json.stdout)
        assert told["message"].endswith(clause), told["message"]
        assert told["startsIfCleared"] == sorted([*sick, lost])
        assert "clearing them would let it start" in as_text.stdout, as_text.stdout

        for node in sick:  # what explain promised: their return lets it start
            cluster.kubectl("taint", "nodes", node, f"{HEALTH_TAINT}-")
        pods = wait_running(cluster, namespace, "pair", 2)
        assert held["spec"]["nodeName"] not in {p["spec"]["nodeName"] for p in pods}
        assert held["spec"]["nodeName"] in healthy
    finally:
        cluster.kubectl("label", "node", lost, f"{kwok.LABEL_FAKE_HEARTBEAT}-")
        for node in sick:
            cluster.kubectl("taint", "nodes", node, f"{HEALTH_TAINT}-", check=False)


def test_a_job_waiting_for_another_teams_gangs_within_quota_is_told_their_end_lets_it_start(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(2)
    wide_ns, hog_ns = cluster.new_namespace("wide"), cluster.new_namespace("hog")
    pool.team("wide", [wide_ns], 8)
    pool.team("hog", [hog_ns], 16)
    pool.job(hog_ns, "hog", pods=2, gpus=8)  # all 16 GPUs, within its team's quota
    wait_running(cluster, hog_ns, "hog", 2)
    pool.job(wide_ns, "wide", pods=2, gpus=8)  # would borrow 8 of hog's team's quota
    cluster.wait_for(
        lambda: queued_reason(cluster, wide_ns, "wide") is not None, what="wide waiting"
    )

    as_json = torchgate(stack, cluster, "explain", "wide", "-n", wide_ns, "-o", "json")
    as_text = torchgate(stack, cluster, "explain", "wide", "-n", wide_ns)

    assert as_json.returncode == as_text.returncode == 0, as_json.stderr + as_text.stderr
    told = json.loads(as_json.stdout)
    assert told["mustEnd"] == [], "no one may be preempted for it"
    assert [gang["job"] for gang in told["endingLetsStart"]] == [f"{hog_ns}/hog"]
    (line,) = [line for line in as_text.stdout.splitlines() if line.startswith("  to start:")]
    assert line.startswith(f"  to start: {hog_ns}/hog (16 GPUs, priority 0) would have to end")

    cluster.kubectl("delete", "pytorchjob", "hog", "-n", hog_ns, "--wait=false")
    wait_running(cluster, wide_ns, "wide", 2)  # what explain said: hog's end lets it start


def test_a_pair_one_of_whose_two_nodes_is_not_ready_is_told_to_clear_it_not_to_change(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    _, lost = pool.nodes(2)
    namespace = cluster.new_namespace("halved")
    try:
        set_not_ready(cluster, lost)
        cluster.apply(yaml.safe_load(manifest(pool, namespace, "pair", pods=2, gpus=8)))

        def told() -> dict[str, Any] | None:
            result = torchgate(stack, cluster, "explain", "pair", "-n", namespace, "-o", "json")
            body = json.loads(result.stdout) if result.returncode == 0 else None
            return body if body and body["startsIfCleared"] == [lost] else None

        explained = cluster.wait_for(told, timeout=60, what="pair told its node is out of use")
        as_text = torchgate(stack, cluster, "explain", "pair", "-n", namespace)

        assert explained["placeable"] is False, explained["message"]
        lines = as_text.stdout.splitlines()
        (start,) = [line for line in lines if line.startswith("  to start:")]
        assert "its nodes out of use must return to use" in start, as_text.stdout
        assert "nodeSelector" not in start
        assert f"  clear:    {lost} (out of use): clearing them would let it start" in lines
    finally:
        cluster.kubectl("label", "node", lost, f"{kwok.LABEL_FAKE_HEARTBEAT}-")


def test_a_job_the_training_operator_runs_is_told_torchgate_does_not_run_it(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("theirs")
    theirs = yaml.safe_load(manifest(pool, namespace, "theirs", pods=1, gpus=8))
    theirs["spec"]["runPolicy"] = {"managedBy": "kubeflow.org/training-operator"}
    text = yaml.safe_dump(theirs)

    simulated = torchgate(stack, cluster, "simulate", "-f", "-", "-o", "json", stdin=text)
    applied = cluster.kubectl("apply", "-f", "-", input=text)
    explained = torchgate(stack, cluster, "explain", "theirs", "-n", namespace)

    assert simulated.returncode == explained.returncode == 0, simulated.stderr + explained.stderr
    told = json.loads(simulated.stdout)
    assert (told["startsNow"], told["verdict"], told["reason"], told["nodes"]) == (
        False, "Wait", "ManagedElsewhere", {},
    )  # fmt: skip
    warnings = applied.stderr.splitlines()
    assert not [line for line in warnings if "torchgate: will" in line], applied.stderr
    (warning,) = [line for line in warnings if "torchgate: torchgate does not run it" in line]
    assert "kubeflow.org/training-operator: that controller runs it" in warning
    assert "kubeflow.org/training-operator: that controller runs it" in explained.stdout
    assert "not admitted yet" not in explained.stdout
    assert live_pods(cluster, namespace, "theirs") == []


def test_a_job_naming_no_manager_is_told_whether_the_controller_runs_it(
    cluster: Cluster, stack: Stack, pool: Pool, tmp_path: Path
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("unowned")
    text = manifest(pool, namespace, "unowned", pods=1, gpus=8)  # no spec.runPolicy.managedBy
    held = yaml.safe_load(manifest(pool, namespace, "held", pods=1, gpus=8))
    held["spec"]["runPolicy"] = {"suspend": True}  # and suspended: never acted on either
    port = int(stack.url.rsplit(":", 1)[1])
    assert stack.controller.stop() == 0
    strict = serving_controller(cluster, tmp_path, stack.webhook, port, manage_unowned=False)
    strict.start()
    try:

        def simulated() -> Any:
            told = torchgate(stack, cluster, "simulate", "-f", "-", "-o", "json", stdin=text)
            answer = json.loads(told.stdout) if told.returncode == 0 else None
            return answer if isinstance(answer, dict) and "verdict" in answer else None

        forecast = cluster.wait_for(simulated, timeout=60, what="the controller's forecast")
        cluster.kubectl("apply", "-f", "-", input=text)

        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(held))

        def explained_not_run(name: str) -> str | None:  # once the controller's cache holds it
            told = torchgate(stack, cluster, "explain", name, "-n", namespace).stdout
            return told if "does not run it" in told else None

        explained = cluster.wait_for(
            lambda: explained_not_run("unowned"), timeout=15, what="explain: not run"
        )
        suspended = cluster.wait_for(
            lambda: explained_not_run("held"), timeout=15, what="explain: suspended, not run"
        )
        not_ours = torchgate(stack, cluster, "explain", "unowned", "-n", namespace, "-o", "json")
    finally:
        stopped = strict.stop()
        stack.controller.start()  # the module's controller, --manage-unowned, for what follows
    assert stopped == 0, strict.log()
    assert "torchgate does not run it: spec.runPolicy.managedBy is unset" in explained
    assert "not admitted yet" not in explained
    assert json.loads(not_ours.stdout)["runs"] is False, not_ours.stdout
    assert f"PyTorchJob {namespace}/held: Suspended" in suspended, suspended
    assert "torchgate does not run it: spec.runPolicy.managedBy is unset" in suspended
    assert "has not suspended it yet" not in suspended
    assert "to resume:" not in suspended
    assert (forecast["verdict"], forecast["reason"]) == ("Wait", "ManagedElsewhere"), forecast
    assert live_pods(cluster, namespace, "unowned") == []
    # With --manage-unowned the controller runs it, and explain does not say otherwise.
    wait_running(cluster, namespace, "unowned", 1)
    run = torchgate(stack, cluster, "explain", "unowned", "-n", namespace)
    assert "does not run it" not in run.stdout
    ours = torchgate(stack, cluster, "explain", "unowned", "-n", namespace, "-o", "json")
    assert json.loads(ours.stdout)["runs"] is True, ours.stdout
    resumable = torchgate(stack, cluster, "explain", "held", "-n", namespace).stdout
    assert "does not run it" not in resumable
    assert "to resume:" in resumable


def test_explain_names_the_pods_of_an_admitted_job_that_have_not_started_and_why(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    (node,) = pool.nodes(1)
    namespace = cluster.new_namespace("pull")
    typo = yaml.safe_load(manifest(pool, namespace, "typo", pods=2, gpus=1))
    for replica in typo["spec"]["pytorchReplicaSpecs"].values():  # kwok: the image never pulls
        replica["template"]["metadata"] = {"annotations": kwok.image_pull_failure_annotation()}
    cluster.apply(typo)

    def both_pods_pulling() -> bool:
        pods = live_pods(cluster, namespace, "typo")
        statuses = [s for p in pods for s in p["status"].get("containerStatuses", [])]
        reasons = [s["state"].get("waiting", {}).get("reason") for s in statuses]
        return len(pods) == 2 and reasons == ["ImagePullBackOff"] * 2

    cluster.wait_for(both_pods_pulling, what="typo's pods waiting for their image")

    result = torchgate(stack, cluster, "explain", "typo", "-n", namespace, "-o", "json")

    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert told["state"] == "Waiting"
    pulling = 'ImagePullBackOff (Back-off pulling image "registry.invalid/train:1")'
    assert told["message"] == (
        f"admitted; not started: typo-master-0 on {node}: {pulling}; "
        f"typo-worker-0 on {node}: {pulling}"
    )


def test_a_user_who_may_only_read_jobs_gets_one_explained_and_told_what_was_left_out(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("reader")
    cluster.apply(yaml.safe_load(manifest(pool, namespace, "solo", pods=1, gpus=8)))
    wait_running(cluster, namespace, "solo", 1)
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl(
        "create", "role", "jobs-reader", "-n", namespace,
        "--verb=get", "--resource=pytorchjobs.kubeflow.org",
    )  # fmt: skip
    cluster.kubectl(
        "create", "rolebinding", "jobs-reader", "-n", namespace, "--role=jobs-reader",
        f"--serviceaccount={namespace}:reader",
    )  # fmt: skip
    kubeconfig = token_kubeconfig(cluster, namespace, "reader")
    may_read = ("--kubeconfig", str(kubeconfig), "get", "pytorchjob", "solo", "-n", namespace)
    cluster.wait_for(lambda: cluster.kubectl(*may_read), what="the reader's RBAC in effect")

    result = subprocess.run(
        [sys.executable, "-m", "torchgate", "explain", f"{namespace}/solo", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**stack.env(cluster), "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert is_true(get_job(cluster, namespace, "solo"), "Running")
    assert told["state"] == "Running"
    assert sorted(told["unread"]) == ["events", "pods"]
    for kind in ("pods", "events"):
        assert f'cannot list resource "{kind}"' in told["unread"][kind]


def test_a_job_being_deleted_is_explained_as_deleting_not_as_what_it_last_ran(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("deleting")
    cluster.apply(yaml.safe_load(manifest(pool, namespace, "going", pods=1, gpus=8)))
    wait_running(cluster, namespace, "going", 1)
    held = json.dumps({"metadata": {"finalizers": ["e2e.torchgate.io/hold"]}})  # another tool's
    cluster.kubectl("patch", "pytorchjob", "going", "-n", namespace, "--type=merge", "-p", held)
    cluster.kubectl("delete", "pytorchjob", "going", "-n", namespace, "--wait=false")
    try:
        stored = get_job(cluster, namespace, "going")
        assert stored is not None
        assert is_true(stored, "Running"), "its last condition still says Running"

        result = torchgate(stack, cluster, "explain", f"{namespace}/going", "-o", "json")

        assert result.returncode == 0, result.stderr
        told = json.loads(result.stdout)
        assert (told["state"], told["reason"]) == ("Deleting", "")
        assert told["since"] == stored["metadata"]["deletionTimestamp"]
    finally:
        cluster.kubectl(
            "patch", "pytorchjob", "going", "-n", namespace, "--type=json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]',
        )  # fmt: skip


def test_a_gang_restarting_while_a_member_terminates_is_explained_as_its_restart_says(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(2)
    namespace = cluster.new_namespace("restart")
    cluster.apply(yaml.safe_load(manifest(pool, namespace, "gang", pods=2, gpus=8)))
    wait_running(cluster, namespace, "gang", 2)
    held = json.dumps({"metadata": {"finalizers": ["e2e.torchgate.io/hold"]}})  # slow to end
    cluster.kubectl("patch", "pod", "gang-master-0", "-n", namespace, "--type=merge", "-p", held)
    cluster.kubectl("delete", "pod", "gang-master-0", "-n", namespace, "--wait=false")
    try:
        restarting = cluster.wait_for(
            lambda: condition(get_job(cluster, namespace, "gang"), "Restarting"),
            what="the gang restarting",
        )

        result = torchgate(stack, cluster, "explain", f"{namespace}/gang", "-o", "json")

        assert result.returncode == 0, result.stderr
        told = json.loads(result.stdout)
        stored = get_job(cluster, namespace, "gang")
        assert condition(stored, "Queued") is None, "not queued again while its pods go"
        assert (told["state"], told["reason"]) == ("Waiting", restarting["reason"]), told
        assert told["message"] == restarting["message"]
        assert list(told["nodes"]) == ["gang-master-0"]  # the member still terminating
    finally:
        cluster.kubectl(
            "patch", "pod", "gang-master-0", "-n", namespace, "--type=json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False,
        )  # fmt: skip


def test_a_preempted_gang_whose_member_still_terminates_is_explained_as_preempted(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("victim")
    high = pool.priority_class("high", 1000)
    cluster.apply(yaml.safe_load(manifest(pool, namespace, "low", pods=1, gpus=8)))
    wait_running(cluster, namespace, "low", 1)
    held = json.dumps({"metadata": {"finalizers": ["e2e.torchgate.io/hold"]}})  # slow to end
    cluster.kubectl("patch", "pod", "low-master-0", "-n", namespace, "--type=merge", "-p", held)
    urgent = manifest(pool, namespace, "urgent", pods=1, gpus=8, priority_class=high)
    cluster.apply(yaml.safe_load(urgent))
    try:
        preempted = cluster.wait_for(
            lambda: is_true(job := get_job(cluster, namespace, "low"), "Preempted") and job,
            what="low preempted",
        )

        result = torchgate(stack, cluster, "explain", f"{namespace}/low", "-o", "json")

        assert result.returncode == 0, result.stderr
        told = json.loads(result.stdout)
        stored = get_job(cluster, namespace, "low")
        assert condition(stored, "Queued") is None, "not queued again while its pods go"
        assert (told["state"], told["reason"]) == ("Waiting", "Preempted"), told
        assert told["message"] == condition(preempted, "Preempted")["message"]
        assert list(told["nodes"]) == ["low-master-0"]  # its member still terminating
    finally:
        cluster.kubectl(
            "patch", "pod", "low-master-0", "-n", namespace, "--type=json",
            "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False,
        )  # fmt: skip


def test_a_job_created_again_under_the_name_of_one_that_restarted_has_no_restarts(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("again")
    again = yaml.safe_load(manifest(pool, namespace, "again", pods=1, gpus=8))
    cluster.apply(again)
    wait_running(cluster, namespace, "again", 1)
    cluster.kubectl("delete", "pod", "again-master-0", "-n", namespace)
    events_once(cluster, namespace, "again", "PodDeleted")
    cluster.kubectl("delete", "pytorchjob", "again", "-n", namespace)
    cluster.apply(again)  # the same manifest again: a new job of the same name
    wait_running(cluster, namespace, "again", 1)

    result = torchgate(stack, cluster, "explain", f"{namespace}/again", "-o", "json")

    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert told["state"] == "Running"
    assert told["restarts"] == {"counted": 0, "events": []}, "the first job's restart is not its"


# ------------------------------------------------------------------ the forecast at admission


def test_a_server_dry_run_of_a_job_that_cannot_fit_warns_why_and_creates_nothing(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(2)
    namespace = cluster.new_namespace("big")

    # Three 8-GPU pods on two 8-GPU nodes: no job's end can make room, and the warning says so.
    expected = (
        f"Warning: torchgate: will wait: no eligible nodes in pool pool={pool.label} can ever "
        "hold all 3 pods of the gang: it asks 24 nvidia.com/gpu and they have 16 even empty"
    )

    def dry_run() -> subprocess.CompletedProcess[str]:
        return cluster.kubectl(
            "apply",
            "--dry-run=server",
            "-f",
            "-",
            input=manifest(pool, namespace, "too-big", pods=3, gpus=8),
        )

    # The controller counts new nodes from its watch: until it has seen both, the forecast
    # (rightly) counts one node's GPUs. CI once asked that moment ("8 free", now "8 even empty").
    cluster.wait_for(
        lambda: expected in dry_run().stderr.splitlines(), what="a forecast counting both nodes"
    )
    result = dry_run()

    forecasts = [line for line in result.stderr.splitlines() if "torchgate: will" in line]
    assert forecasts == [expected], result.stderr
    assert "(server dry run)" in result.stdout
    assert get_job(cluster, namespace, "too-big") is None


def test_kubectl_apply_of_a_job_that_will_wait_beside_a_tainted_node_is_warned_of_it(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    *_, sick = pool.nodes(3)
    namespace = cluster.new_namespace("apply-sick")
    try:
        cluster.kubectl("taint", "nodes", sick, HEALTH_TAINT)
        cluster.apply(yaml.safe_load(manifest(pool, namespace, "first", pods=1, gpus=8)))
        wait_running(cluster, namespace, "first", 1)
        pair = manifest(pool, namespace, "pair", pods=2, gpus=8)
        expected = (
            f"Warning: torchgate: will wait for 16 nvidia.com/gpu in pool pool={pool.label}: "
            "8 free (8 nvidia.com/gpu more on 1 node out of use: 1 tainted nvidia.com/gpu-health)"
        )
        # the controller learns of the taint from its watch: ask until it has
        cluster.wait_for(
            lambda: (
                expected
                in cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=pair).stderr
            ),
            what="a forecast naming the tainted node",
        )

        applied = cluster.kubectl("apply", "-f", "-", input=pair)

        forecasts = [line for line in applied.stderr.splitlines() if "torchgate: will" in line]
        assert forecasts == [expected], applied.stderr
        told = expected.removeprefix("Warning: torchgate: will wait for ")

        def queued_message() -> str:
            found = condition(get_job(cluster, namespace, "pair"), "Queued")
            return str(found.get("message", "")) if found else ""

        cluster.wait_for(
            lambda: queued_message().endswith(told),
            timeout=60,
            what="pair's Queued message saying what the warning said",
        )
    finally:
        cluster.kubectl("taint", "nodes", sick, f"{HEALTH_TAINT}-", check=False)


def test_a_job_created_suspended_is_told_it_waits_for_its_resumption_and_starts_once_resumed(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    (node,) = pool.nodes(1)
    namespace = cluster.new_namespace("held")
    held = yaml.safe_load(manifest(pool, namespace, "held", pods=1, gpus=8))
    held["spec"]["runPolicy"] = {"suspend": True}
    suspended = yaml.safe_dump(held)

    simulated = torchgate(stack, cluster, "simulate", "-f", "-", "-o", "json", stdin=suspended)
    applied = cluster.kubectl("apply", "-f", "-", input=suspended)

    assert simulated.returncode == 0, simulated.stderr
    told = json.loads(simulated.stdout)
    assert (told["startsNow"], told["verdict"], told["reason"], told["nodes"]) == (
        False, "Wait", "PyTorchJobSuspended", {},
    )  # fmt: skip
    forecasts = [line for line in applied.stderr.splitlines() if "torchgate: will" in line]
    assert [line.split(":", 3)[2] for line in forecasts] == [" will wait for its resumption"]
    cluster.wait_for(
        lambda: is_true(get_job(cluster, namespace, "held"), "Suspended"), what="held suspended"
    )
    assert live_pods(cluster, namespace, "held") == [], "a suspended job has no pods"

    cluster.kubectl(
        "patch", "pytorchjob", "held", "-n", namespace, "--type", "merge",
        "-p", json.dumps({"spec": {"runPolicy": {"suspend": False}}}),
    )  # fmt: skip

    (started,) = wait_running(cluster, namespace, "held", 1)
    assert started["spec"]["nodeName"] == node


# ------------------------------------------------------------------ simulate


def test_simulate_names_the_nodes_of_a_job_that_fits(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    nodes = pool.nodes(2)
    namespace = cluster.new_namespace("fits")

    result = torchgate(
        stack, cluster, "simulate", "-f", "-", "-o", "json",
        stdin=manifest(pool, namespace, "fits", pods=2, gpus=8),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert (told["allowed"], told["startsNow"], told["preempts"]) == (True, True, [])
    assert sorted(told["nodes"]) == ["fits-master-0", "fits-worker-0"]
    assert sorted(told["nodes"].values()) == sorted(nodes)
    assert get_job(cluster, namespace, "fits") is None, "a simulation creates nothing"


def test_a_cpu_master_beside_two_8_gpu_workers_is_told_it_starts_and_runs_on_two_8_gpu_nodes(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    nodes = pool.nodes(2)
    namespace = cluster.new_namespace("launch")
    # kube-scheduler runs it: the 4-CPU Master fits beside a Worker on a 64-CPU node
    launcher = manifest(pool, namespace, "launch", pods=3, gpus=8, master_cpu="4")

    def simulated() -> dict[str, Any] | None:
        result = torchgate(stack, cluster, "simulate", "-f", "-", "-o", "json", stdin=launcher)
        assert result.returncode == 0, result.stderr
        told: dict[str, Any] = json.loads(result.stdout)
        return told if told["startsNow"] else None

    # the controller counts new nodes from its watch: until it has seen both, it waits
    told = cluster.wait_for(simulated, what="a simulation counting both nodes")
    assert told["nodes"]["launch-master-0"] == told["nodes"]["launch-worker-0"], "rank 0 by rank 1"
    assert sorted(set(told["nodes"].values())) == sorted(nodes)

    cluster.kubectl("apply", "-f", "-", input=launcher)
    started = wait_running(cluster, namespace, "launch", 3)

    where = {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in started}
    assert where["launch-master-0"] == where["launch-worker-0"]
    assert sorted(set(where.values())) == sorted(nodes)


def test_simulate_names_the_gangs_a_high_priority_job_would_preempt_and_it_preempts_those(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(3)
    namespace = cluster.new_namespace("urgent")
    low = pool.priority_class("low", 1)
    middle = pool.priority_class("middle", 5)
    high = pool.priority_class("high", 1000)
    for name, klass in (("low-a", low), ("low-b", low), ("middle", middle)):
        pool.job(namespace, name, pods=1, gpus=8, priority_class=klass)
    for name in ("low-a", "low-b", "middle"):
        wait_running(cluster, namespace, name, 1)

    result = torchgate(
        stack, cluster, "simulate", "-f", "-", "-o", "json",
        stdin=manifest(pool, namespace, "urgent", pods=2, gpus=8, priority_class=high),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    told = json.loads(result.stdout)
    assert told["startsNow"] is False
    assert told["reason"] == "WaitingForPreemption"
    assert told["preempts"] == [f"{namespace}/low-a", f"{namespace}/low-b"]

    pool.job(namespace, "urgent", pods=2, gpus=8, priority_class=high)
    wait_running(cluster, namespace, "urgent", 2)
    preempted = {
        name for name in ("low-a", "low-b", "middle")
        if is_true(get_job(cluster, namespace, name), "Preempted")
    }  # fmt: skip
    assert preempted == {"low-a", "low-b"}
    assert running(cluster, namespace, "middle")


# ------------------------------------------------------------------ without the controller


def test_with_the_controller_down_admission_defaults_and_refuses_as_before(
    cluster: Cluster, stack: Stack, pool: Pool
) -> None:
    pool.nodes(1)
    namespace = cluster.new_namespace("down")
    assert stack.controller.stop() == 0

    started = time.monotonic()
    allowed = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-",
        input=manifest(pool, namespace, "fine", pods=1, gpus=8),
    )  # fmt: skip
    took = time.monotonic() - started
    bad = yaml.safe_load(manifest(pool, namespace, "stray", pods=1, gpus=8))
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"] = [
        "--world-size=16"
    ]
    status, refused = cluster.api_request(
        "POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs?dryRun=All", bad
    )

    assert "(server dry run)" in allowed.stdout
    assert "defaulted" in allowed.stderr, "the defaults are announced as before"
    assert "torchgate: will" not in allowed.stderr, "no forecast without the controller"
    assert took < 10
    assert status == 422, refused
    fields = [cause["field"] for cause in refused["details"]["causes"]]
    assert fields == ["spec.pytorchReplicaSpecs[Master].template.spec.containers[0].args"]
    explained = torchgate(stack, cluster, "explain", "nothing-here", "-n", namespace)
    assert explained.returncode == 1

"""Failure drills on torchgate installed in the cluster, as an admin would meet them.

torchgate is installed with kustomize (README's overlay, image built from the Dockerfile) onto a
control plane with the real node, and then broken on purpose while it works:

- one webhook pod is deleted while jobs are submitted: the other replica (and the deleted pod's
  shutdown delay, while it leaves the Service) keep admission answering, and no job is stored
  without the webhook's defaults or in spite of its refusal;
- the process of the controller holding the Lease is killed (SIGKILL, as by the OOM killer) while
  a gang is being created: once the Lease expires, a replacement takes it and finishes the job,
  with no duplicate and no orphan pod;
- the serving certificate is re-issued while requests flow: none fails;
- every webhook pod is stopped: a PyTorchJob is refused with a message that names torchgate, and
  torchgate's own namespace stays editable, so the admin can bring it back.

Each drill prints its figures (requests and failures, seconds to take over) for the record.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders.job import job
from tests.builders.policy import policy
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import get_job, is_true, job_pods
from tests.e2e.installation import (
    IMAGE,
    NAMESPACE,
    component_pods,
    force_uninstall,
    installable_cluster,
    local_real_node_binaries,
    rolled_out,
)
from torchgate_dev.node.config import NodePaths

pytestmark = [pytest.mark.e2e, pytest.mark.real_node, pytest.mark.timeout(600)]

REPO_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
SLEEP_UNTIL_SIGTERM = "trap 'exit 0' TERM; while true; do sleep 0.2; done"


@pytest.fixture(scope="module")
def installed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """Install torchgate with README's kustomize overlay; both Deployments rolled out."""
    binaries = local_real_node_binaries(request)
    workdir = tmp_path_factory.mktemp("drills")
    with installable_cluster(binaries, workdir / "cluster") as cluster:
        (workdir / "manifests").symlink_to(REPO_MANIFESTS)  # kustomize takes relative paths
        overlay = workdir / "my-torchgate"
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            "resources:\n  - ../manifests/overlays/default\n"
            f"images:\n  - name: torchgate\n    newName: {IMAGE}\n    newTag: 0.1.0\n"
        )
        cluster.kubectl("apply", "--server-side", "-k", str(overlay))
        try:
            for name in ("torchgate-webhook", "torchgate-controller"):
                cluster.kubectl(
                    "-n", NAMESPACE, "rollout", "status", f"deployment/{name}",
                    "--timeout=180s", timeout=200,
                )  # fmt: skip
            yield cluster
        finally:
            force_uninstall(cluster)


@pytest.fixture(autouse=True)
def _clean(installed: Cluster) -> Iterator[None]:
    yield
    installed.clean_up_test()


def run_by_torchgate(cluster: Cluster, namespace: str) -> str:
    """A policy that makes the installed controller run this namespace's jobs; its name."""
    name = f"run-{namespace}"
    cluster.apply(
        policy(name, namespaces=[namespace], jobDefaults={"managedBy": "torchgate.io/controller"})
    )
    return name


def cpu_job(name: str, namespace: str, *, master: str, worker: str, workers: int) -> Any:
    """``pytorch-demo`` running the shell scripts ``master`` and ``worker``, no GPUs."""

    def sh(script: str) -> dict[str, Any]:
        return {"image": "pytorch-demo", "command": ["sh", "-c", script]}

    return job(name, namespace).master(**sh(master)).workers(workers, **sh(worker)).build()


def submit(cluster: Cluster, obj: Any, *, dry_run: bool = False) -> tuple[int, Any]:
    namespace = obj["metadata"]["namespace"]
    path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
    return cluster.api_request("POST", path + ("?dryRun=All" if dry_run else ""), obj)


def is_refusal_by_torchgate(status: int, body: Any) -> bool:
    causes = body.get("details", {}).get("causes", []) if isinstance(body, dict) else []
    return status == 422 and any("world-size" in c.get("message", "") for c in causes)


class Flow:
    """Requests sent from a thread until stopped: the outcomes, in order."""

    def __init__(self, send: Any, pause: float) -> None:
        self.outcomes: list[tuple[str, int, Any]] = []
        self.times: list[float] = []
        self._send, self._pause = send, pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flow:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            self.times.append(time.monotonic())
            self.outcomes.append(self._send(index))
            index += 1
            time.sleep(self._pause)


# ----------------------------------------------------------------------------- the drills


def test_admission_keeps_answering_while_a_webhook_pod_is_deleted(installed: Cluster) -> None:
    cluster = installed
    namespace = cluster.new_namespace("drill-pod")

    def send(index: int) -> tuple[str, int, Any]:
        raw = job(f"j{index}", namespace).master(gpus=0).workers(1, gpus=0).build()
        kind = "valid"
        if index % 4 == 3:  # a stray distributed argument the webhook must refuse
            container = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
            container["containers"][0]["args"] = ["--world-size=2"]
            kind = "invalid"
        status, body = submit(cluster, raw)
        return kind, status, body

    victim = component_pods(cluster, "webhook")[0]["metadata"]["name"]
    with Flow(send, pause=0.1) as flow:
        time.sleep(2)
        deleted = time.monotonic()
        cluster.kubectl("delete", "pod", "-n", NAMESPACE, victim, "--wait=false")
        cluster.wait_for(
            lambda: cluster.get("pod", victim, NAMESPACE) is None,
            timeout=120,
            what="the deleted webhook pod gone",
        )
        gone = time.monotonic()
        time.sleep(2)

    failed = [
        (kind, status, body)
        for kind, status, body in flow.outcomes
        if not (
            (kind == "valid" and status == 201)
            or (kind == "invalid" and is_refusal_by_torchgate(status, body))
        )
    ]
    during = sum(1 for t in flow.times if deleted <= t <= gone)
    print(
        f"drill webhook pod deleted: {len(flow.outcomes)} submissions, {during} while the pod "
        f"was terminating ({gone - deleted:.1f}s), {len(failed)} failed"
    )
    assert during >= 10, "submissions overlapped the pod's termination"
    assert failed == []
    stored = cluster.list_objects("pytorchjobs", namespace)
    valid = sum(1 for kind, _, _ in flow.outcomes if kind == "valid")
    assert len(stored) == valid, "every valid job stored, no refused one"
    for item in stored:  # each one went through the mutating webhook
        assert item["spec"]["runPolicy"]["cleanPodPolicy"] == "Running", item["metadata"]["name"]
        assert item["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    cluster.wait_for(lambda: rolled_out(cluster, "torchgate-webhook"), timeout=120)


def container_pid(cluster: Cluster, pod: str, container: str) -> int:
    """The host PID of a container's process, from containerd (the node is this machine)."""
    found = cluster.get("pod", pod, NAMESPACE)
    assert found is not None
    (status,) = [s for s in found["status"]["containerStatuses"] if s["name"] == container]
    container_id = status["containerID"].split("://")[1]
    socket_path = NodePaths(work=Path(), cache=Path()).containerd_socket
    listed = subprocess.run(
        ["ctr", "--address", str(socket_path), "-n", "k8s.io", "tasks", "ls"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (pid,) = [line.split()[1] for line in listed.splitlines() if line.startswith(container_id)]
    return int(pid)


def lease_holder(cluster: Cluster) -> str:
    lease = cluster.get("lease", "torchgate-controller", NAMESPACE) or {}
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def test_the_other_controller_takes_over_a_gang_mid_creation_with_no_duplicate_or_orphan(
    installed: Cluster,
) -> None:
    cluster = installed
    namespace = cluster.new_namespace("drill-leader")
    policy = run_by_torchgate(cluster, namespace)
    try:
        holder = cluster.wait_for(lambda: lease_holder(cluster), what="a leader")
        leader_pod = holder.split("_")[0]
        raw = cpu_job("gang", namespace, master="sleep 25", worker=SLEEP_UNTIL_SIGTERM, workers=3)
        cluster.wait_for(
            lambda: (
                submit(cluster, raw)[0] == 201
                and (get_job(cluster, namespace, "gang") or {})["spec"]["runPolicy"].get(
                    "managedBy"
                )
            ),
            timeout=30,
            what="the job admitted with the policy's managedBy",
        )
        killed = time.monotonic()
        os.kill(container_pid(cluster, leader_pod, "controller"), signal.SIGKILL)
        new_holder = cluster.wait_for(
            lambda: (h := lease_holder(cluster)) and h != holder and h,
            timeout=90,
            what="another controller holding the Lease",
        )
        takeover = time.monotonic() - killed
        seen: dict[str, set[str]] = {}

        def succeeded() -> bool:
            for pod in job_pods(cluster, namespace, "gang"):
                seen.setdefault(pod["metadata"]["name"], set()).add(pod["metadata"]["uid"])
            return is_true(get_job(cluster, namespace, "gang"), "Succeeded")

        cluster.wait_for(succeeded, timeout=240, what="the gang Succeeded")
        print(
            f"drill leader killed: {new_holder.split('_')[0]} took the Lease after "
            f"{takeover:.1f}s; pods {sorted(seen)}"
        )
        assert sorted(seen) == ["gang-master-0", "gang-worker-0", "gang-worker-1", "gang-worker-2"]
        assert all(len(uids) == 1 for uids in seen.values()), f"a pod was made twice: {seen}"
        stored = get_job(cluster, namespace, "gang")
        assert stored is not None
        assert stored["metadata"].get("annotations", {}).get("torchgate.io/restarts", "0") == "0"
        uid = stored["metadata"]["uid"]
        for pod in job_pods(cluster, namespace, "gang"):
            owners = [o for o in pod["metadata"].get("ownerReferences", []) if o.get("controller")]
            assert [o["uid"] for o in owners] == [uid], "no orphan: every pod is the job's"
    finally:
        cluster.kubectl("delete", "placementpolicy", policy, check=False)


def served_serial(pod_ip: str) -> int:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        socket.create_connection((pod_ip, 8443), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    from cryptography import x509

    return int(x509.load_der_x509_certificate(der).serial_number)


def test_rotating_the_serving_certificate_fails_no_request(installed: Cluster) -> None:
    cluster = installed
    namespace = cluster.new_namespace("drill-cert")
    pod = component_pods(cluster, "webhook")[0]
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    before = served_serial(ip)
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "certs-watch")
    rotate = [a for a in sidecar["args"] if not a.startswith(("--watch", "--interval"))]

    def send(index: int) -> tuple[str, int, Any]:
        raw = job(f"c{index}", namespace).master(gpus=0).workers(1, gpus=0).build()
        status, body = submit(cluster, raw, dry_run=True)
        return "valid", status, body

    with Flow(send, pause=0.1) as flow:
        time.sleep(2)
        cluster.kubectl(
            "exec", "-n", NAMESPACE, name, "-c", "certs-watch", "--", "torchgate", *rotate,
            "--force",
        )  # fmt: skip
        after = cluster.wait_for(
            lambda: (serial := served_serial(ip)) != before and serial,
            timeout=60,
            what="the webhook serving the new certificate",
        )
        time.sleep(3)

    failed = [(status, body) for _, status, body in flow.outcomes if status != 201]
    print(
        f"drill certificate rotated (serial {before:x} -> {after:x}): "
        f"{len(flow.outcomes)} requests, {len(failed)} failed"
    )
    assert len(flow.outcomes) >= 30
    assert failed == []


def test_with_every_webhook_pod_stopped_jobs_are_refused_and_torchgate_stays_repairable(
    installed: Cluster, tmp_path: Path
) -> None:
    cluster = installed
    namespace = cluster.new_namespace("drill-down")
    manifest = tmp_path / "job.json"
    manifest.write_text(
        json.dumps(cpu_job("refused", namespace, master="true", worker="true", workers=1))
    )
    cluster.kubectl("-n", NAMESPACE, "scale", "deployment/torchgate-webhook", "--replicas=0")
    try:
        cluster.wait_for(
            lambda: (
                not cluster.list_objects("pods", NAMESPACE, "app.kubernetes.io/component=webhook")
            ),
            timeout=120,
            what="no webhook pod, terminating ones included",
        )
        refused = cluster.kubectl("apply", "-f", str(manifest), check=False)
        assert refused.returncode != 0
        assert 'failed calling webhook "mutate.pytorchjobs.torchgate.io"' in refused.stderr
        assert get_job(cluster, namespace, "refused") is None
        # torchgate's namespace is not intercepted: the admin can still change it.
        cluster.kubectl("-n", NAMESPACE, "create", "configmap", "drill-note", "--from-literal=a=b")
        cluster.kubectl("-n", NAMESPACE, "delete", "configmap", "drill-note")
    finally:
        cluster.kubectl("-n", NAMESPACE, "scale", "deployment/torchgate-webhook", "--replicas=2")
    cluster.kubectl(
        "-n", NAMESPACE, "rollout", "status", "deployment/torchgate-webhook", "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    cluster.wait_for(
        lambda: cluster.kubectl("apply", "-f", str(manifest), check=False).returncode == 0,
        timeout=60,
        what="admission back",
    )
    assert get_job(cluster, namespace, "refused") is not None

"""Crash safety and leader election of the controller on the real control plane."""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    create_job,
    get_job,
    job_pods,
)

pytestmark = pytest.mark.e2e
JOBS = 20
WORKERS = 3


def created_pods(text: str) -> float:
    match = re.search(r"^torchgate_controller_pods_created_total (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_killing_the_controller_mid_flight_leaves_no_duplicate_or_orphan_pod(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = cluster.new_namespace("crash")
    label = f"crash-{namespace[-6:]}"
    cluster.add_gpu_nodes(10, label, gpus=8, labels={"pool": label})
    first = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    jobs = [
        job(f"j{i:02d}", namespace)
        .master(gpus=1, pod_spec={"nodeSelector": {"pool": label}})
        .workers(WORKERS, gpus=1, pod_spec={"nodeSelector": {"pool": label}})
        .build()
        for i in range(JOBS)
    ]
    threads = [threading.Thread(target=create_job, args=(cluster, j)) for j in jobs]
    for thread in threads:
        thread.start()
    # Kill it while gangs are being created: some jobs have all pods, some part, some none.
    cluster.wait_for(
        lambda: len(cluster.list_objects("pods", namespace)) >= 6,
        timeout=60,
        what="the first gangs being created",
    )
    first.kill()
    for thread in threads:
        thread.join()
    partial = len(cluster.list_objects("pods", namespace))
    second = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    try:

        def converged() -> list[dict[str, object]] | None:
            pods = cluster.list_objects("pods", namespace)
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            running = [p for p in live if p["status"].get("phase") == "Running"]
            ready = len(pods) == JOBS * (WORKERS + 1) and len(running) == len(pods)
            return pods if ready else None

        pods = cluster.wait_for(converged, timeout=120, what="all 20 gangs Running")
        jobs_now = {
            j["metadata"]["name"]: j for j in cluster.list_objects("pytorchjobs", namespace)
        }
        names = Counter(p["metadata"]["name"] for p in pods)
        assert all(count == 1 for count in names.values())
        for name, found in jobs_now.items():
            mine = [
                p for p in pods if p["metadata"]["labels"]["training.kubeflow.org/job-name"] == name
            ]
            assert sorted(p["metadata"]["name"] for p in mine) == sorted(
                [f"{name}-master-0"] + [f"{name}-worker-{i}" for i in range(WORKERS)]
            ), f"duplicate or missing replica in {name}"
            owners = {
                ref["uid"]
                for p in mine
                for ref in p["metadata"]["ownerReferences"]
                if ref.get("controller")
            }
            assert owners == {found["metadata"]["uid"]}, f"orphan pod in {name}"
            attempts = {p["metadata"]["annotations"]["torchgate.io/gang-attempt"] for p in mine}
            assert len(attempts) == 1, f"pods of two gang attempts in {name}"
        per_node = Counter(p["spec"]["nodeName"] for p in pods)
        assert max(per_node.values()) <= 8
        for name in jobs_now:
            cluster.finish_pod(namespace, f"{name}-master-0", 0)
        cluster.wait_for(
            lambda: all(
                any(
                    c["type"] == "Succeeded" and c["status"] == "True"
                    for c in (get_job(cluster, namespace, n) or {})
                    .get("status", {})
                    .get("conditions", [])
                )
                for n in jobs_now
            ),
            timeout=120,
            what="all jobs Succeeded",
        )
        print(f"pods present when the first controller was killed: {partial}")
    finally:
        assert second.stop() == 0, second.log()


def test_two_replicas_never_both_act_and_the_standby_takes_over(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = cluster.new_namespace("leader")
    label = f"ld-{namespace[-6:]}"
    cluster.add_gpu_nodes(1, label, gpus=8, labels={"pool": label})
    lease = f"torchgate-e2e-{namespace[-6:]}"
    extra = ("--leader-election-id", lease)
    one = ControllerProcess(cluster.kubeconfig, tmp_path, *extra, leader_elect=True).start()
    two = ControllerProcess(cluster.kubeconfig, tmp_path, *extra, leader_elect=True).start()
    processes = [one, two]
    try:
        holder = cluster.wait_for(
            lambda: (
                (cluster.get("lease", lease, "default") or {}).get("spec", {}).get("holderIdentity")
            ),
            what="a leader",
        )
        create_job(
            cluster,
            job("first", namespace)
            .master(gpus=1, pod_spec={"nodeSelector": {"pool": label}})
            .build(),
        )
        cluster.wait_for(lambda: job_pods(cluster, namespace, "first"), what="first's pod")
        counts = [created_pods(p.metrics()) for p in processes]
        assert sorted(counts)[0] == 0, f"both replicas created pods: {counts}"
        leader = processes[counts.index(max(counts))]
        standby = processes[1 - processes.index(leader)]
        leader.kill()
        create_job(
            cluster,
            job("second", namespace)
            .master(gpus=1, pod_spec={"nodeSelector": {"pool": label}})
            .build(),
        )
        cluster.wait_for(
            lambda: job_pods(cluster, namespace, "second"), timeout=60, what="the standby took over"
        )
        assert created_pods(standby.metrics()) >= 1
        new_holder = (cluster.get("lease", lease, "default") or {})["spec"]["holderIdentity"]
        assert new_holder != holder
    finally:
        for process in processes:
            if process.process is not None and process.process.poll() is None:
                process.stop()

"""The controller on the real control plane with kwok GPU nodes.

Gangs, env, status, restarts, release of GPUs, timers, deletion.
Every test gets its own namespace and its own node pool label, so capacity claims are exact.
Assertions read the cluster's state (pods, their node, env, conditions, Events), never logs.
"""

from __future__ import annotations

import copy
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders.job import container, job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    FINISH_GRACE_SECONDS,
    ControllerProcess,
    condition,
    create_job,
    dump,
    events_of,
    events_once,
    get_job,
    is_true,
    job_pods,
    live_pods,
)
from tests.e2e.controller_process import controller as controller  # the module-scoped fixture

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]
SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds" / "manifests"


def pool(cluster: Cluster, name: str, nodes: int, gpus: int = 8) -> list[str]:
    """Fake GPU nodes labelled ``pool=<name>``."""
    return cluster.add_gpu_nodes(nodes, name, gpus=gpus, labels={"pool": name})


def in_pool(raw: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    raw["metadata"]["namespace"] = namespace
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {"pool": name}
    return raw


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    (pytorch,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
    return {e["name"]: e.get("value", "") for e in pytorch.get("env", [])}


def wait_running(cluster: Cluster, namespace: str, name: str, pods: int) -> list[dict[str, Any]]:
    return cluster.wait_for(
        lambda: running_pods(cluster, namespace, name, pods),
        timeout=60,
        what=f"{pods} Running pods of {name}",
    )


def running_pods(
    cluster: Cluster, namespace: str, name: str, count: int
) -> list[dict[str, Any]] | None:
    """The job's live pods when exactly ``count`` of them are Running, else None."""
    found = live_pods(cluster, namespace, name)
    ok = len(found) == count and all(p["status"].get("phase") == "Running" for p in found)
    return found if ok else None


def finished_at(pod: dict[str, Any]) -> datetime:
    (status,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "pytorch"]
    return parse_time(status["state"]["terminated"]["finishedAt"])


@pytest.mark.parametrize(
    ("seed", "name"),
    [("003-torchrun-cpu.yaml", "torchrun-cpu"), ("004-pytorch-simple.yaml", "pytorch-simple")],
    ids=["seed-003", "seed-004"],
)
def test_seed_jobs_run_to_success_and_their_pods_are_released(
    cluster: Cluster, controller: ControllerProcess, seed: str, name: str
) -> None:
    namespace = cluster.new_namespace("seed")
    label = f"p{namespace[-6:]}"
    pool(cluster, label, 2)
    create_job(cluster, in_pool(yaml.safe_load((SEEDS / seed).read_text()), label, namespace))
    pods = wait_running(cluster, namespace, name, 2)
    job_now = get_job(cluster, namespace, name)
    assert is_true(job_now, "Created")
    assert is_true(job_now, "Running"), dump(job_now)

    by_name = {p["metadata"]["name"]: p for p in pods}
    master, worker = by_name[f"{name}-master-0"], by_name[f"{name}-worker-0"]
    assert env_of(master)["MASTER_ADDR"] == f"{name}-master-0"
    assert env_of(master)["MASTER_PORT"] == "23456"
    assert env_of(master)["WORLD_SIZE"] == "2"
    assert (env_of(master)["RANK"], env_of(worker)["RANK"]) == ("0", "1")
    assert env_of(worker)["PET_NNODES"] == "2"
    # The selector users know from the training-operator docs (seed 004) finds the master.
    selected = cluster.list_objects(
        "pods",
        namespace,
        f"training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=master,"
        "training.kubeflow.org/replica-index=0",
    )
    assert [p["metadata"]["name"] for p in selected] == [f"{name}-master-0"]
    service = cluster.get("service", f"{name}-master-0", namespace)
    assert service is not None
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True

    cluster.finish_pod(namespace, f"{name}-master-0", 0)
    done = cluster.wait_for(
        lambda: (j := get_job(cluster, namespace, name)) and is_true(j, "Succeeded") and j,
        timeout=30,
        what=f"{name} Succeeded",
    )
    assert [c["type"] for c in done["status"]["conditions"]] == ["Created", "Running", "Succeeded"]
    assert condition(done, "Running")["status"] == "False"
    assert done["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    assert done["status"]["startTime"]
    assert done["status"]["completionTime"]

    def worker_released() -> dict[str, Any] | None:
        pods_now = {p["metadata"]["name"]: p for p in job_pods(cluster, namespace, name)}
        gone = f"{name}-worker-0" not in pods_now
        deleting = not gone and pods_now[f"{name}-worker-0"]["metadata"].get("deletionTimestamp")
        return pods_now if gone or deleting else None

    # The Worker still runs: it gets the controller's finish grace to end on its own first.
    remaining = cluster.wait_for(
        worker_released, timeout=FINISH_GRACE_SECONDS + 10, what="the worker deleted"
    )
    master_done = remaining[f"{name}-master-0"]
    assert master_done["status"]["phase"] == "Succeeded", "finished pods stay for their logs"
    released = remaining.get(f"{name}-worker-0")
    if released is not None:  # still terminating: its deletion was requested at this time
        delay = parse_time(released["metadata"]["deletionTimestamp"]) - finished_at(master_done)
        # deletionTimestamp = request time + the pod's grace period
        grace = released["metadata"].get("deletionGracePeriodSeconds", 0)
        assert delay.total_seconds() - grace <= FINISH_GRACE_SECONDS + 1.0
    completion = parse_time(done["status"]["completionTime"])
    assert (completion - finished_at(master_done)).total_seconds() <= 1.0
    assert cluster.get("service", f"{name}-master-0", namespace) is None


def test_big_gang_waits_with_a_reason_and_starts_at_once_when_gpus_are_released(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("gang")
    label = f"a100-{namespace[-6:]}"
    pool(cluster, label, 2)  # 16 GPUs in the pool
    small = job("small", namespace).master(gpus=1).workers(7, gpus=1).build()
    create_job(cluster, in_pool(small, label, namespace))
    wait_running(cluster, namespace, "small", 8)

    big = job("big", namespace).master(gpus=1).workers(15, gpus=1).build()
    create_job(cluster, in_pool(big, label, namespace))
    queued = cluster.wait_for(
        lambda: condition(get_job(cluster, namespace, "big"), "Queued"),
        timeout=30,
        what="big queued",
    )
    assert queued["status"] == "True"
    # Its place in the queue (other modules' jobs may wait too), then what it waits for.
    place, reason = queued["message"].split(": ", 1)
    assert re.fullmatch(r"#\d+ of \d+ in the pool, (nothing|.+\)) ahead", place), place
    assert reason == f"waiting for 16 nvidia.com/gpu in pool pool={label}: 8 free"
    events = events_once(cluster, namespace, "big", "WaitingForResources")
    reasons = {e["reason"]: e["message"] for e in events}
    assert reasons["WaitingForResources"] == queued["message"]
    assert job_pods(cluster, namespace, "big") == [], "no pod of a gang that does not fit"

    released_at = time.time()
    cluster.finish_pod(namespace, "small-master-0", 0)
    pods = wait_running(cluster, namespace, "big", 16)
    created = sorted(parse_time(p["metadata"]["creationTimestamp"]).timestamp() for p in pods)
    assert created[-1] - created[0] <= 1.0, "the whole gang is created together"
    assert created[0] >= int(released_at), "nothing was created before the GPUs were free"
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    after = get_job(cluster, namespace, "big")
    assert condition(after, "Queued") is None, dump(after)


def test_pinned_hosts_job_lands_only_on_its_hosts(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("pin")
    label = f"pin-{namespace[-6:]}"
    nodes = pool(cluster, label, 4)
    chosen = [nodes[1], nodes[3]]
    pinned = job("pinned", namespace).master(gpus=8).workers(1, gpus=8).hosts(*chosen).build()
    create_job(cluster, in_pool(pinned, label, namespace))
    pods = wait_running(cluster, namespace, "pinned", 2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(chosen)
    # A second pinned job cannot fit on the (now full) pinned hosts and says so.
    again = job("again", namespace).master(gpus=1).hosts(*chosen).build()
    create_job(cluster, in_pool(again, label, namespace))
    queued = cluster.wait_for(
        lambda: condition(get_job(cluster, namespace, "again"), "Queued"), what="again queued"
    )
    assert f"on hosts {','.join(chosen)}" in queued["message"]


def test_gang_not_bound_in_time_is_torn_down_and_requeued(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("timeout")
    label = f"to-{namespace[-6:]}"
    pool(cluster, label, 1)
    # No scheduler by that name runs, so kube-scheduler never binds these pods.
    stuck = (
        job("stuck", namespace)
        .master(gpus=1, pod_spec={"schedulerName": "no-such-scheduler"})
        .workers(1, gpus=1, pod_spec={"schedulerName": "no-such-scheduler"})
        .scheduling(scheduleTimeoutSeconds=2)
        .build()
    )
    create_job(cluster, in_pool(stuck, label, namespace))
    first = cluster.wait_for(
        lambda: live_pods(cluster, namespace, "stuck"), what="the gang created"
    )
    first_uids = {p["metadata"]["uid"] for p in first}
    assert all(not p["spec"].get("nodeName") for p in first)
    cluster.wait_for(
        lambda: (
            not (
                set(p["metadata"]["uid"] for p in job_pods(cluster, namespace, "stuck"))
                & first_uids
            )
        ),
        timeout=20,
        what="the unbound gang torn down",
    )
    assert events_once(cluster, namespace, "stuck", "GangScheduleTimeout")
    second = cluster.wait_for(
        lambda: live_pods(cluster, namespace, "stuck"), timeout=30, what="the gang re-admitted"
    )
    assert not {p["metadata"]["uid"] for p in second} & first_uids


def test_exit_code_137_restarts_the_whole_gang_and_exit_code_1_fails_the_job(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("exit")
    label = f"ec-{namespace[-6:]}"
    pool(cluster, label, 1)
    exit_job = (
        job("ec", namespace)
        .master(gpus=1, restart_policy="ExitCode")
        .workers(2, gpus=1, restart_policy="ExitCode")
        .run_policy(backoffLimit=3)
        .build()
    )
    create_job(cluster, in_pool(exit_job, label, namespace))
    first = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in wait_running(cluster, namespace, "ec", 3)
    }
    cluster.finish_pod(namespace, "ec-worker-1", 137)
    second = cluster.wait_for(
        lambda: (
            (pods := running_pods(cluster, namespace, "ec", 3))
            and not {p["metadata"]["uid"] for p in pods} & set(first.values())
            and pods
        ),
        timeout=60,
        what="every pod of the gang recreated",
    )
    assert sorted(p["metadata"]["name"] for p in second) == sorted(first)
    restarted = get_job(cluster, namespace, "ec")
    assert restarted["metadata"]["annotations"]["torchgate.io/restarts"] == "1"
    assert condition(restarted, "Restarting") is not None or is_true(restarted, "Running")
    assert events_once(cluster, namespace, "ec", "PyTorchJobRestarting")

    cluster.finish_pod(namespace, "ec-worker-0", 1)
    failed = cluster.wait_for(
        lambda: (j := get_job(cluster, namespace, "ec")) and is_true(j, "Failed") and j,
        what="ec Failed",
    )
    assert condition(failed, "Failed")["reason"] == "PyTorchJobFailed"
    cluster.wait_for(
        lambda: (
            not live_pods(cluster, namespace, "ec")
            or all(
                p["status"]["phase"] in ("Succeeded", "Failed")
                for p in live_pods(cluster, namespace, "ec")
            )
        ),
        what="running pods of the failed job deleted",
    )


def test_backoff_limit_ends_the_job(cluster: Cluster, controller: ControllerProcess) -> None:
    namespace = cluster.new_namespace("backoff")
    label = f"bo-{namespace[-6:]}"
    pool(cluster, label, 1)
    flaky = (
        job("flaky", namespace).master(gpus=1).workers(1, gpus=1).run_policy(backoffLimit=1).build()
    )
    create_job(cluster, in_pool(flaky, label, namespace))
    wait_running(cluster, namespace, "flaky", 2)
    cluster.finish_pod(namespace, "flaky-worker-0", 1)  # OnFailure: retryable, restart 1 of 1
    cluster.wait_for(
        lambda: (
            get_job(cluster, namespace, "flaky")["metadata"]["annotations"].get(
                "torchgate.io/restarts"
            )
            == "1"
            and running_pods(cluster, namespace, "flaky", 2)
        ),
        what="the first restart",
    )
    cluster.finish_pod(namespace, "flaky-worker-0", 1)
    failed = cluster.wait_for(
        lambda: (j := get_job(cluster, namespace, "flaky")) and is_true(j, "Failed") and j,
        what="flaky Failed",
    )
    assert condition(failed, "Failed")["reason"] == "BackoffLimitExceeded"
    cluster.wait_for(
        lambda: all(
            p["status"]["phase"] == "Failed" for p in live_pods(cluster, namespace, "flaky")
        ),
        what="the running master deleted",
    )


def test_active_deadline_ends_the_job_on_time(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("deadline")
    label = f"dl-{namespace[-6:]}"
    pool(cluster, label, 1)
    slow = (
        job("slow", namespace)
        .master(gpus=1)
        .workers(1, gpus=1)
        .run_policy(activeDeadlineSeconds=3)
        .build()
    )
    create_job(cluster, in_pool(slow, label, namespace))
    wait_running(cluster, namespace, "slow", 2)
    # Nothing else happens to this job: only the controller's timer can end it.
    failed = cluster.wait_for(
        lambda: (j := get_job(cluster, namespace, "slow")) and is_true(j, "Failed") and j,
        timeout=20,
        what="slow Failed by its deadline",
    )
    assert condition(failed, "Failed")["reason"] == "DeadlineExceeded"
    elapsed = parse_time(failed["status"]["completionTime"]) - parse_time(
        failed["status"]["startTime"]
    )
    assert 3 <= elapsed.total_seconds() <= 6
    cluster.wait_for(lambda: not live_pods(cluster, namespace, "slow"), what="its pods deleted")


def test_deleting_a_job_removes_its_pods_and_service(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("delete")
    label = f"del-{namespace[-6:]}"
    pool(cluster, label, 1)
    doomed = job("doomed", namespace).master(gpus=1).workers(2, gpus=1).build()
    create_job(cluster, in_pool(doomed, label, namespace))
    wait_running(cluster, namespace, "doomed", 3)
    cluster.kubectl("delete", "pytorchjob", "doomed", "--namespace", namespace, "--wait=false")
    cluster.wait_for(
        lambda: (
            not job_pods(cluster, namespace, "doomed")
            and cluster.get("service", "doomed-master-0", namespace) is None
        ),
        timeout=60,
        what="pods and Service garbage-collected",
    )


def test_a_service_whose_selector_was_edited_is_made_again_beside_the_running_gang(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """A Service selecting other pods sends MASTER_ADDR astray: it is remade, the gang kept."""
    namespace = cluster.new_namespace("edited")
    label = f"edit-{namespace[-6:]}"
    pool(cluster, label, 1)
    create_job(
        cluster,
        in_pool(
            job("edited", namespace).master(gpus=1).workers(1, gpus=1).build(), label, namespace
        ),
    )
    gang = {p["metadata"]["uid"] for p in wait_running(cluster, namespace, "edited", 2)}
    service = cluster.get("service", "edited-master-0", namespace)
    assert service is not None
    selector = service["spec"]["selector"]

    cluster.kubectl(
        "patch", "service", "edited-master-0", "-n", namespace, "--type", "merge",
        "-p", '{"spec": {"selector": {"app": "mine"}}}',
    )  # fmt: skip

    def made_again() -> dict[str, Any] | None:
        found = cluster.get("service", "edited-master-0", namespace)
        fresh = found and found["metadata"]["uid"] != service["metadata"]["uid"]
        return found if fresh else None

    remade = cluster.wait_for(made_again, timeout=60, what="the Service made again")
    assert remade["spec"]["selector"] == selector
    assert {p["metadata"]["uid"] for p in live_pods(cluster, namespace, "edited")} == gang
    told = cluster.wait_for(
        lambda: [
            e
            for e in events_of(cluster, namespace, "edited")
            if e["reason"] == "ServiceSelectorChanged"
        ],
        what="a ServiceSelectorChanged Event",
    )
    assert [(e["type"], int(e.get("count") or 1)) for e in told] == [("Warning", 1)]


def test_suspend_deletes_pods_and_resume_readmits(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("suspend")
    label = f"sus-{namespace[-6:]}"
    pool(cluster, label, 1)
    paused = job("paused", namespace).master(gpus=1).workers(1, gpus=1).build()
    create_job(cluster, in_pool(paused, label, namespace))
    wait_running(cluster, namespace, "paused", 2)
    patch = '{"spec":{"runPolicy":{"suspend":true}}}'
    cluster.kubectl("patch", "pytorchjob", "paused", "-n", namespace, "--type=merge", "-p", patch)
    cluster.wait_for(
        lambda: (
            is_true(get_job(cluster, namespace, "paused"), "Suspended")
            and not live_pods(cluster, namespace, "paused")
        ),
        what="suspended with no pods",
    )
    patch = '{"spec":{"runPolicy":{"suspend":false}}}'
    cluster.kubectl("patch", "pytorchjob", "paused", "-n", namespace, "--type=merge", "-p", patch)
    wait_running(cluster, namespace, "paused", 2)
    resumed = get_job(cluster, namespace, "paused")
    assert condition(resumed, "Suspended")["status"] == "False"


def test_ttl_deletes_the_finished_job(cluster: Cluster, controller: ControllerProcess) -> None:
    namespace = cluster.new_namespace("ttl")
    label = f"ttl-{namespace[-6:]}"
    pool(cluster, label, 1)
    short = job("short", namespace).master(gpus=1).run_policy(ttlSecondsAfterFinished=2).build()
    create_job(cluster, in_pool(short, label, namespace))
    wait_running(cluster, namespace, "short", 1)
    cluster.finish_pod(namespace, "short-master-0", 0)
    cluster.wait_for(
        lambda: is_true(get_job(cluster, namespace, "short"), "Succeeded"), what="short Succeeded"
    )
    cluster.wait_for(
        lambda: get_job(cluster, namespace, "short") is None,
        timeout=20,
        what="short deleted by TTL",
    )


def test_metrics_describe_the_work(cluster: Cluster, controller: ControllerProcess) -> None:
    text = controller.metrics()
    for name in (
        "torchgate_controller_reconcile_seconds_bucket",
        "torchgate_controller_queue_depth",
        "torchgate_controller_jobs{",
        "torchgate_controller_gang_wait_seconds_count",
        "torchgate_controller_gpu_seconds_released_total",
        "torchgate_controller_released_gpus_total",
        "torchgate_controller_pods_created_total",
    ):
        assert name in text, name


def test_job_that_bypassed_the_webhook_and_cannot_run_is_failed_with_the_reason(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("invalid")
    broken = job("broken", namespace).master(restart_policy="Sometimes").build()
    create_job(cluster, broken)
    failed = cluster.wait_for(
        lambda: (j := get_job(cluster, namespace, "broken")) and is_true(j, "Failed") and j,
        what="broken Failed",
    )
    assert condition(failed, "Failed")["reason"] == "PyTorchJobFailedValidation"
    assert "restartPolicy" in condition(failed, "Failed")["message"]
    assert job_pods(cluster, namespace, "broken") == []


def test_jobs_managed_by_someone_else_are_left_alone(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("other")
    theirs = (
        job("theirs", namespace)
        .master()
        .run_policy(managedBy="kubeflow.org/training-operator")
        .build()
    )
    create_job(cluster, theirs)
    time.sleep(2)  # give the controller every chance to (wrongly) act
    assert job_pods(cluster, namespace, "theirs") == []
    assert "status" not in (get_job(cluster, namespace, "theirs") or {}) or not get_job(
        cluster, namespace, "theirs"
    ).get("status", {}).get("conditions")


def test_container_template_is_kept_with_only_our_changes(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("tmpl")
    label = f"tm-{namespace[-6:]}"
    pool(cluster, label, 1)
    main = container(env={"RANK": "7", "NCCL_DEBUG": "INFO"}, gpus=1)
    sidecar = container(name="logger", image="busybox")
    kept = job("kept", namespace).master(containers=[main, sidecar]).build()
    create_job(cluster, in_pool(copy.deepcopy(kept), label, namespace))
    (pod,) = wait_running(cluster, namespace, "kept", 1)
    env = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert env.count("RANK") == 1, "our RANK replaces the user's, never duplicates it"
    assert env_of(pod)["RANK"] == "0"
    assert env_of(pod)["NCCL_DEBUG"] == "INFO"
    assert "env" not in pod["spec"]["containers"][1], "sidecars get no injected env"
    assert pod["spec"]["restartPolicy"] == "Never"

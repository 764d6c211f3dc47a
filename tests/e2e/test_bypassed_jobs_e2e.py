"""Jobs the webhook never saw, stored as they are, beside a healthy job the controller must run.

The webhook keeps such jobs out, but they reach the controller all the same: the webhook down
with ``failurePolicy: Ignore``, jobs created before torchgate was installed. This module runs the
controller with no webhook at all. For each job it cannot run, the controller fails the job once
(a ``Failed`` condition and a Warning Event naming the field), creates nothing, and goes on with
the healthy job; it does not retry what can never succeed. A user's own pod or Service holding the
name of a job's pod or Service is never taken for the job's: the job waits, saying so, until the
name is free. A status a human edited (``kubectl edit --subresource=status``, never sent to the
webhook) does not hold off what the controller owes the job. A job deleted with
``kubectl delete --cascade=orphan`` and created again adopts the pods and Service it left.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    condition,
    create_job,
    events_of,
    get_job,
    is_true,
    job_pods,
)
from tests.e2e.controller_process import controller as controller  # the module-scoped fixture

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FAILED_VALIDATION = "PyTorchJobFailedValidation"


def pool_job(name: str, namespace: str, pool: str, workers: int = 1) -> dict[str, Any]:
    pod_spec = {"nodeSelector": {"pool": pool}}
    return (
        job(name, namespace).master(pod_spec=pod_spec).workers(workers, pod_spec=pod_spec).build()
    )


def services_of(cluster: Cluster, namespace: str) -> list[str]:
    status, body = cluster.api_request("GET", f"/api/v1/namespaces/{namespace}/services")
    assert status == 200, body
    return [item["metadata"]["name"] for item in body["items"]]


@pytest.mark.parametrize(
    "name",
    # The apiserver stores a PyTorchJob under any DNS-1123 subdomain of up to 253 characters;
    # "<name>-master-0" would be 64 characters, and a Service name may hold no dot.
    ["j" * 55, "train.v2"],
    ids=["pod-name-of-64-characters", "dot-in-the-name"],
)
def test_a_job_whose_pod_and_service_names_are_invalid_fails_once_and_creates_nothing(
    cluster: Cluster, controller: ControllerProcess, name: str
) -> None:
    namespace = cluster.new_namespace("bad-name")
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    create_job(cluster, pool_job(name, namespace, pool))
    create_job(cluster, pool_job("healthy", namespace, pool))

    failed = cluster.wait_for(
        lambda: (found := get_job(cluster, namespace, name)) and is_true(found, "Failed") and found,
        what=f"{name} Failed",
    )
    assert condition(failed, "Failed")["reason"] == FAILED_VALIDATION
    assert "metadata.name" in condition(failed, "Failed")["message"]
    cluster.wait_for(
        lambda: (
            len(job_pods(cluster, namespace, "healthy")) == 2
            and is_true(get_job(cluster, namespace, "healthy"), "Running")
        ),
        what="the healthy job Running beside it",
    )
    time.sleep(5)  # the controller retried such a job with backoff: 1.6 s, 3.2 s, ...
    assert job_pods(cluster, namespace, name) == []
    assert not [s for s in services_of(cluster, namespace) if s.startswith(name[:20])]
    warnings = [
        event
        for event in events_of(cluster, namespace, name)
        if event["type"] == "Warning" and event["reason"] == FAILED_VALIDATION
    ]
    assert len(warnings) == 1, warnings
    assert int(warnings[0].get("count") or 1) == 1
    assert "metadata.name" in warnings[0]["message"]


def users_object(kind: str, namespace: str, pool: str) -> dict[str, Any]:
    """A user's own pod or Service named ``squat-master-0`` (no torchgate labels, no owner)."""
    metadata = {"name": "squat-master-0", "namespace": namespace}
    if kind == "service":
        spec: dict[str, Any] = {
            "clusterIP": "None",
            "selector": {"app": "mine"},
            "ports": [{"name": "web", "port": 8080}],
        }
        return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}
    spec = {
        "nodeSelector": {"pool": pool},
        "containers": [{"name": "mine", "image": "docker.io/library/busybox:1.36"}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.mark.parametrize("kind", ["pod", "service"])
def test_an_object_that_is_not_the_jobs_holding_a_members_name_keeps_the_gang_waiting_saying_so(
    cluster: Cluster, controller: ControllerProcess, kind: str
) -> None:
    """A pod's name, or the name of the Service MASTER_ADDR resolves: the job never takes it."""
    namespace = cluster.new_namespace("taken")
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    cluster.apply(users_object(kind, namespace, pool))
    mine = cluster.get(kind, "squat-master-0", namespace)
    assert mine is not None
    time.sleep(2)  # the controller's pod cache has it (a Service it never caches)
    create_job(cluster, pool_job("squat", namespace, pool))
    create_job(cluster, pool_job("healthy", namespace, pool))

    def waiting_for_the_name() -> dict[str, Any] | None:
        found = get_job(cluster, namespace, "squat")
        queued = condition(found, "Queued")
        named = queued and queued.get("reason") == "PodNameConflict"
        return found if named and "squat-master-0" in queued.get("message", "") else None

    cluster.wait_for(waiting_for_the_name, what="squat Queued PodNameConflict naming its master")
    cluster.wait_for(
        lambda: (
            len(job_pods(cluster, namespace, "healthy")) == 2
            and is_true(get_job(cluster, namespace, "healthy"), "Running")
        ),
        what="the healthy job Running beside it",
    )
    time.sleep(5)  # without the rule, squat's pods were created (beside the user's pod/Service)
    assert job_pods(cluster, namespace, "squat") == []
    assert not is_true(get_job(cluster, namespace, "squat"), "Running")
    still = cluster.get(kind, "squat-master-0", namespace)
    assert still is not None
    assert still["metadata"]["uid"] == mine["metadata"]["uid"]
    assert not still["metadata"].get("ownerReferences")
    assert still["spec"].get("selector") == mine["spec"].get("selector")
    conflicts = [
        event
        for event in events_of(cluster, namespace, "squat")
        if event["type"] == "Warning" and event["reason"] == "PodNameConflict"
    ]
    assert sum(int(event.get("count") or 1) for event in conflicts) == 1  # told once, not hot
    assert "squat-master-0" in conflicts[0]["message"]

    # The name freed (its deletion reconciles no job: the gang looks again on its own), it runs.
    cluster.kubectl("delete", kind, "squat-master-0", "-n", namespace, "--grace-period=0")
    cluster.wait_for(
        lambda: (
            len(job_pods(cluster, namespace, "squat")) == 2
            and is_true(get_job(cluster, namespace, "squat"), "Running")
        ),
        timeout=120,
        what="squat Running once the name is free",
    )
    squat = get_job(cluster, namespace, "squat")
    assert squat is not None
    service = cluster.get("service", "squat-master-0", namespace)
    assert service is not None  # the job's own now, selecting its Master
    owners = service["metadata"].get("ownerReferences") or []
    assert [o["uid"] for o in owners if o.get("controller")] == [squat["metadata"]["uid"]]


def test_a_job_deleted_with_cascade_orphan_and_created_again_adopts_its_service_and_pods(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    """Its labelled orphans are patched to the new uid, as a ReplicaSet's are, not held for ever."""
    namespace = cluster.new_namespace("orphan")
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    create_job(cluster, pool_job("again", namespace, pool))
    cluster.wait_for(
        lambda: (
            len(job_pods(cluster, namespace, "again")) == 2
            and is_true(get_job(cluster, namespace, "again"), "Running")
        ),
        what="again Running",
    )
    before = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in job_pods(cluster, namespace, "again")
    }
    service_uid = cluster.get("service", "again-master-0", namespace)["metadata"]["uid"]

    cluster.kubectl("delete", "pytorchjob", "again", "-n", namespace, "--cascade=orphan")
    orphan = cluster.get("service", "again-master-0", namespace)
    assert orphan is not None
    assert not orphan["metadata"].get("ownerReferences")  # the garbage collector left it so
    create_job(cluster, pool_job("again", namespace, pool))
    again = get_job(cluster, namespace, "again")
    assert again is not None
    new_uid = again["metadata"]["uid"]

    def controller_of(kind: str, name: str) -> str | None:
        found = cluster.get(kind, name, namespace) or {}
        references = found.get("metadata", {}).get("ownerReferences") or []
        return next((r["uid"] for r in references if r.get("controller")), None)

    cluster.wait_for(
        lambda: controller_of("service", "again-master-0") == new_uid,
        what="the orphaned Service adopted by the job created again",
    )
    cluster.wait_for(
        lambda: (
            all(controller_of("pod", name) == new_uid for name in before)
            and is_true(get_job(cluster, namespace, "again"), "Running")
        ),
        what="its orphaned pods adopted, the job Running",
    )
    service = cluster.get("service", "again-master-0", namespace)
    assert service["metadata"]["uid"] == service_uid  # the same Service, not made again
    after = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in job_pods(cluster, namespace, "again")
    }
    assert after == before  # the same pods: adopted, neither deleted nor made again
    queued = condition(get_job(cluster, namespace, "again"), "Queued") or {}
    assert queued.get("reason") != "PodNameConflict"
    assert not [
        event
        for event in events_of(cluster, namespace, "again")
        if event["reason"] == "PodNameConflict"
    ]
    cluster.finish_pod(namespace, "again-master-0", 0)
    cluster.wait_for(
        lambda: is_true(get_job(cluster, namespace, "again"), "Succeeded"),
        what="the job created again Succeeded",
    )


def test_a_start_time_edited_into_the_future_does_not_hold_off_the_active_deadline(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    namespace = cluster.new_namespace("edited")
    pool = f"p{namespace[-6:]}"
    cluster.add_gpu_nodes(1, pool, labels={"pool": pool})
    edited = pool_job("edited", namespace, pool)
    edited["spec"]["runPolicy"] = {"activeDeadlineSeconds": 20}
    create_job(cluster, edited)
    cluster.wait_for(
        lambda: is_true(get_job(cluster, namespace, "edited"), "Running"), what="edited Running"
    )
    edit = {
        "status": {
            "startTime": "2099-01-01T00:00:00Z",
            "conditions": [{"type": "Exploded", "status": "True", "reason": "ByHand"}],
            "replicaStatuses": {"Bogus": {"active": -5}},
        }
    }
    cluster.kubectl(
        "patch", "pytorchjob", "edited", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(edit),
    )  # fmt: skip
    failed = cluster.wait_for(
        lambda: (
            (found := get_job(cluster, namespace, "edited")) and is_true(found, "Failed") and found
        ),
        timeout=60,
        what="edited Failed at its deadline",
    )
    assert condition(failed, "Failed")["reason"] == "DeadlineExceeded"
    assert failed["status"]["startTime"] != "2099-01-01T00:00:00Z"

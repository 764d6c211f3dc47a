"""``plan()``: admission, gang integrity, restarts and disruptions, completion, cleanup, timers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.builders.job import JobBuilder, container, gpu_job, job, parsed_job, with_uid
from tests.builders.node import node
from tests.builders.pod import ended, set_phase
from tests.unit.controller.helpers import NOW, World, env_of, is_quiet
from torchgate.controller.job.adoption import adoption_patch
from torchgate.controller.job.disruption import (
    NodeFault,
    NodeHealth,
    TimedTaint,
    deleted_node,
    node_health,
)
from torchgate.controller.job.gang import NAME_HOLDER_RECHECK_SECONDS
from torchgate.controller.job.model import (
    ANNOTATION_ATTEMPT,
    Adoption,
    Observed,
    Plan,
    Restart,
    current_attempt,
)
from torchgate.controller.job.plan import asks_namespace_first, plan
from torchgate.controller.job.pods import owner_reference
from torchgate.pytorchjob import names
from torchgate.pytorchjob.moments import format_time
from torchgate.pytorchjob.taints import Taint

MASTER, W0, W1 = "demo-master-0", "demo-worker-0", "demo-worker-1"
ALL = (MASTER, W0, W1)
RESERVATION = {MASTER: "n1", W0: "n1", W1: "n2"}


def demo_world(builder: JobBuilder | None = None) -> World:
    return World(with_uid((builder or gpu_job("demo", workers=2)).build()))


def admitted_world(builder: JobBuilder | None = None) -> World:
    """A job whose gang was admitted and created (pods Pending, unbound)."""
    world = demo_world(builder)
    world.apply(world.plan())
    world.apply(world.plan(reservation=RESERVATION))
    return world


def running_world(builder: JobBuilder | None = None) -> World:
    world = admitted_world(builder)
    for name in world.pods:
        world.run(name, node=RESERVATION.get(name, "n1"))
    world.apply(world.plan(reservation=RESERVATION))
    return world


def condition(world_or_status: Any, kind: str) -> dict[str, Any] | None:
    status = world_or_status.job_raw["status"] if isinstance(world_or_status, World) else None
    status = status if status is not None else world_or_status
    for item in status.get("conditions", []):
        if item["type"] == kind:
            found: dict[str, Any] = item
            return found
    return None


def must(world_or_status: Any, kind: str) -> dict[str, Any]:
    found = condition(world_or_status, kind)
    assert found is not None, kind
    return found


def status_of(result: Plan) -> dict[str, Any]:
    assert result.status is not None
    return result.status


def reasons(result: Plan) -> list[str]:
    return [event.reason for event in result.events]


# ------------------------------------------------------------------ nothing to do


def test_a_job_being_deleted_gets_nothing() -> None:
    world = running_world()
    world.job_raw["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert world.plan() == Plan()


def test_a_job_managed_by_another_controller_is_left_alone() -> None:
    world = demo_world(gpu_job("demo").run_policy(managedBy="kueue.x-k8s.io/multikueue"))
    assert world.plan() == Plan()


# ------------------------------------------------------------------ admission


def test_new_job_asks_for_admission_of_the_whole_gang() -> None:
    result = demo_world().plan()
    assert result.needs_admission
    assert [d.pod_name for d in result.demands] == list(ALL)
    assert not result.create_pods
    assert result.status is not None
    assert condition(result.status, "Created") is not None
    assert reasons(result) == [], "Created is a condition only, as the training-operator sets it"


def test_waiting_job_shows_the_shortfall_as_queued() -> None:
    world = demo_world()
    first = world.plan(wait_reason="waiting for 3 nvidia.com/gpu in the cluster: 1 free")
    assert "WaitingForResources" in reasons(first)
    world.apply(first)
    queued = condition(world, "Queued")
    assert queued is not None
    assert (queued["status"], queued["reason"]) == ("True", "WaitingForResources")
    update = world.plan(wait_reason="waiting for 3 nvidia.com/gpu in the cluster: 2 free")
    assert update.events == ()  # a new message is not a transition
    assert update.status is not None
    assert must(update.status, "Queued")["message"].endswith("2 free")


def test_a_waiting_job_gets_its_master_service_before_admission() -> None:
    world = demo_world()
    waiting = world.plan(wait_reason="waiting")
    assert waiting.needs_admission
    assert waiting.create_pods == ()
    assert [s["metadata"]["name"] for s in waiting.create_services] == [MASTER]
    world.apply(waiting)
    admitted = world.plan(reservation=RESERVATION, wait_reason="waiting")
    assert [p["metadata"]["name"] for p in admitted.create_pods] == list(ALL)
    assert admitted.create_services == ()  # made while the job waited


def test_reservation_creates_every_pod_pinned_and_the_master_service() -> None:
    world = demo_world()
    result = world.plan(reservation=RESERVATION, wait_reason="waiting")
    assert [p["metadata"]["name"] for p in result.create_pods] == list(ALL)
    for pod in result.create_pods:
        name = pod["metadata"]["name"]
        assert pod["metadata"]["annotations"]["torchgate.io/planned-node"] == RESERVATION[name]
        assert pod["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "1"
    assert [s["metadata"]["name"] for s in result.create_services] == [MASTER]
    assert result.status is not None
    assert condition(result.status, "Queued") is None
    assert status_of(result)["startTime"] == format_time(NOW)
    assert reasons(result) == ["GangAdmitted"]
    assert not result.needs_admission


def test_events_of_condition_changes_go_with_the_status_those_of_actions_with_the_actions() -> None:
    queued = demo_world().plan(wait_reason="waiting for 3 nvidia.com/gpu in the cluster: 1 free")
    announcing = {e.reason: e.announces_status for e in queued.events}
    assert announcing == {"WaitingForResources": True}
    world = demo_world()
    first = world.plan(reservation=RESERVATION)
    assert first.create_pods
    assert [(e.reason, e.announces_status) for e in first.events] == [("GangAdmitted", False)]


def test_pods_are_never_created_without_a_reservation() -> None:
    world = admitted_world()
    del world.pods[W1]
    result = world.plan()
    assert not result.create_pods
    assert sorted(result.delete_pods) == [MASTER, W0]
    assert "GangIncomplete" in reasons(result)


def test_an_interrupted_creation_is_completed_while_the_reservation_holds() -> None:
    world = admitted_world()
    del world.pods[W1]
    result = world.plan(reservation=RESERVATION)
    assert [p["metadata"]["name"] for p in result.create_pods] == [W1]
    assert not result.delete_pods


def test_a_terminating_gang_member_tears_the_gang_down() -> None:
    world = running_world()
    world.pods[W1] = set_phase(world.pods[W1], "Running", deleted=NOW)
    result = world.plan(reservation=RESERVATION)
    assert sorted(result.delete_pods) == [MASTER, W0]
    assert not result.create_pods
    assert condition(result.status, "Restarting") is not None


def test_no_pod_is_created_while_old_pods_are_terminating() -> None:
    world = running_world()
    world.apply(Plan(delete_pods=ALL))
    result = world.plan(reservation=RESERVATION)
    assert not result.create_pods
    assert not result.needs_admission
    world.settle()
    assert world.plan().needs_admission


def test_stale_pods_of_an_older_attempt_are_deleted_not_adopted() -> None:
    world = running_world()
    world.job_raw["metadata"]["annotations"] = {"torchgate.io/restarts": "1"}
    result = world.plan(reservation=RESERVATION)
    assert sorted(result.delete_pods) == sorted(ALL)
    assert not result.create_pods


def test_pods_of_another_owner_are_never_touched_and_block_admission() -> None:
    world = running_world()
    world.pods[W1]["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    world.apply(Plan(delete_pods=(MASTER, W0)))
    world.settle()
    result = world.plan(reservation=RESERVATION)
    assert W1 not in result.delete_pods
    assert not result.create_pods
    assert not result.needs_admission
    assert must(result.status, "Queued")["reason"] == "PodNameConflict"
    assert "PodNameConflict" in reasons(result)
    world.apply(result)
    assert is_quiet(world.plan(reservation=RESERVATION))


# ------------------------------------------------------------------ gang schedule timeout


def test_unbound_gang_times_out_and_is_torn_down() -> None:
    world = admitted_world()
    world.tick(30)
    waiting = world.plan(reservation=RESERVATION)
    assert waiting.requeue_after == pytest.approx(30)
    assert not waiting.gang_timed_out
    world.tick(31)
    result = world.plan(reservation=RESERVATION)
    assert result.gang_timed_out
    assert sorted(result.delete_pods) == sorted(ALL)
    assert "GangScheduleTimeout" in reasons(result)


def test_schedule_timeout_is_configurable_and_min_available_counts() -> None:
    world = admitted_world(gpu_job("demo", workers=2).scheduling(scheduleTimeoutSeconds=600))
    world.tick(120)
    assert world.plan(reservation=RESERVATION).requeue_after == pytest.approx(480)
    world = admitted_world(gpu_job("demo", workers=2).scheduling(minAvailable=2))
    world.run(MASTER)
    world.run(W0)
    world.tick(3600)
    result = world.plan(reservation=RESERVATION)
    assert not result.gang_timed_out
    assert result.requeue_after is None


# ------------------------------------------------------------------ running


def test_running_condition_when_the_master_runs() -> None:
    world = admitted_world()
    world.run(MASTER)
    result = world.plan(reservation=RESERVATION)
    assert must(result.status, "Running")["message"] == "PyTorchJob demo is running."
    assert status_of(result)["replicaStatuses"]["Master"]["active"] == 1
    assert status_of(result)["replicaStatuses"]["Worker"]["active"] == 0
    assert reasons(result) == [], "Running is a condition only, as the training-operator sets it"


def test_worker_only_job_runs_when_any_worker_runs() -> None:
    world = World(with_uid(job("solo").workers(2).build()))
    world.apply(world.plan())
    world.apply(world.plan(reservation={"solo-worker-0": "n1", "solo-worker-1": "n1"}))
    world.run("solo-worker-1")
    result = world.plan()
    assert must(result.status, "Running")["message"] == "PyTorchJob default/solo is running."


# ------------------------------------------------------------------ success and cleanup


def succeeded_world(builder: JobBuilder | None = None) -> World:
    world = running_world(builder)
    world.finish_pod(MASTER, "Succeeded", exit_code=0)
    world.pods[W1] = set_phase(world.pods[W1], "Pending")
    return world


def test_master_success_completes_the_job_and_frees_running_and_pending_pods() -> None:
    world = succeeded_world()
    result = world.plan()
    succeeded = must(result.status, "Succeeded")
    assert succeeded["reason"] == "PyTorchJobSucceeded"
    assert succeeded["message"] == "PyTorchJob demo is successfully completed."
    assert must(result.status, "Running")["status"] == "False"
    assert status_of(result)["completionTime"] == format_time(NOW)
    assert sorted(result.delete_pods) == [W0, W1]
    assert result.delete_services == (MASTER,)
    assert status_of(result)["replicaStatuses"]["Master"]["succeeded"] == 1
    assert reasons(result) == ["PyTorchJobSucceeded"]


def test_clean_pod_policy_all_deletes_every_pod() -> None:
    world = succeeded_world(gpu_job("demo", workers=2).run_policy(cleanPodPolicy="All"))
    assert sorted(world.plan().delete_pods) == sorted(ALL)


def test_clean_pod_policy_none_keeps_pods_when_the_admin_allows_it() -> None:
    world = succeeded_world(gpu_job("demo", workers=2).run_policy(cleanPodPolicy="None"))
    result = world.plan(allow_clean_pod_policy_none=True)
    assert not result.delete_pods
    assert not result.delete_services
    workers = status_of(result)["replicaStatuses"]["Worker"]
    assert (workers["active"], workers["succeeded"]) == (0, 1)  # leftover active -> succeeded


def test_clean_pod_policy_none_is_overridden_with_a_warning_when_not_allowed() -> None:
    world = succeeded_world(gpu_job("demo", workers=2).run_policy(cleanPodPolicy="None"))
    result = world.plan(allow_clean_pod_policy_none=False)
    assert sorted(result.delete_pods) == [W0, W1]
    warning = [e for e in result.events if e.reason == "CleanPodPolicyOverridden"]
    assert warning[0].type == "Warning"


def test_clean_pod_policy_none_keeps_the_pods_of_a_gpu_free_job_without_the_admins_leave() -> None:
    world = succeeded_world(job("demo").master().workers(2).run_policy(cleanPodPolicy="None"))
    result = world.plan(allow_clean_pod_policy_none=False)
    assert not result.delete_pods
    assert not result.delete_services
    assert "CleanPodPolicyOverridden" not in reasons(result)


def test_clean_pod_policy_none_keeps_gpu_free_pods_and_frees_the_gpu_ones_when_not_allowed() -> (
    None
):
    gloo = ["--backend", "gloo"]
    builder = (
        job("demo")
        .master(restart_policy="Never", args=gloo)
        .workers(2, gpus=1, restart_policy="Never", args=gloo)
        .run_policy(cleanPodPolicy="None")
    )
    world = running_world(builder)
    world.finish_pod(W1, "Failed", exit_code=1)  # the job fails; its Master is still running
    result = world.plan(allow_clean_pod_policy_none=False)
    assert must(result.status, "Failed")["status"] == "True"
    assert result.delete_pods == (W0,)
    assert result.delete_services == (MASTER,)
    assert "CleanPodPolicyOverridden" in reasons(result)


@pytest.mark.parametrize(
    ("gpu_resource", "kept"),
    [("nvidia.com/gpu", False), ("amd.com/gpu", True)],
    ids=["the-policys-gpus", "a-resource-the-policy-does-not-name"],
)
def test_clean_pod_policy_none_frees_only_the_accelerators_the_policy_names(
    gpu_resource: str, kept: bool
) -> None:
    world = succeeded_world(gpu_job("demo", workers=2).run_policy(cleanPodPolicy="None"))
    result = world.plan(allow_clean_pod_policy_none=False, gpu_resource=gpu_resource)
    assert sorted(result.delete_pods) == ([] if kept else [W0, W1])


def test_clean_pod_policy_none_frees_a_pod_whose_init_container_holds_a_gpu() -> None:
    warm_up = {"initContainers": [container(name="warm-up", gpus=1)]}
    builder = job("demo").master().workers(2, pod_spec=warm_up).run_policy(cleanPodPolicy="None")
    world = succeeded_world(builder)
    result = world.plan(allow_clean_pod_policy_none=False)
    assert sorted(result.delete_pods) == [W0, W1]


def test_cleanup_of_a_finished_job_is_repeated_until_done() -> None:
    world = succeeded_world()
    world.apply(world.plan())
    world.pods[W0]["metadata"].pop("deletionTimestamp")  # the delete was lost
    result = world.plan()
    assert result.delete_pods == (W0,)
    assert result.status is None
    assert result.events == ()


def test_running_ranks_of_a_succeeded_job_get_the_finish_grace_and_pending_ones_go_at_once() -> (
    None
):
    world = succeeded_world()
    first = world.plan(finish_grace_seconds=5)
    assert first.delete_pods == (W1,), "the pending Worker never started: deleted at once"
    assert first.requeue_after == pytest.approx(5)
    assert must(first.status, "Succeeded")["status"] == "True"
    world.apply(first)
    world.tick(2)
    second = world.plan(finish_grace_seconds=5)
    assert second.delete_pods == ()
    assert second.requeue_after == pytest.approx(3)
    world.tick(3)
    assert world.plan(finish_grace_seconds=5).delete_pods == (W0,)


def test_a_rank_that_ends_within_the_finish_grace_stays_completed() -> None:
    world = succeeded_world()
    world.apply(world.plan(finish_grace_seconds=5))
    world.tick(1)
    world.finish_pod(W0, "Succeeded", exit_code=0)
    result = world.plan(finish_grace_seconds=5)
    assert W0 not in result.delete_pods
    assert result.requeue_after is None


def test_a_ttl_shorter_than_the_finish_grace_waits_for_it() -> None:
    world = succeeded_world(gpu_job("demo", workers=2).run_policy(ttlSecondsAfterFinished=0))
    first = world.plan(finish_grace_seconds=5)
    assert not first.delete_job
    assert first.requeue_after == pytest.approx(5)
    world.apply(first)
    world.tick(5)
    last = world.plan(finish_grace_seconds=5)
    assert last.delete_job
    assert last.delete_pods == (W0,)


def test_the_running_ranks_of_a_failed_job_get_no_finish_grace() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(activeDeadlineSeconds=10))
    world.tick(20)
    result = world.plan(finish_grace_seconds=5)
    assert must(result.status, "Failed")["reason"] == "DeadlineExceeded"
    assert sorted(result.delete_pods) == sorted(ALL)


@pytest.mark.parametrize(
    ("elastic", "phases", "done"),
    [
        (False, ("Succeeded", "Running"), False),
        (False, ("Succeeded", "Succeeded"), True),
        (True, ("Succeeded", "Running"), True),
    ],
    ids=["one-of-two", "all", "elastic-any"],
)
def test_worker_only_success(elastic: bool, phases: tuple[str, str], done: bool) -> None:
    builder = job("solo").workers(2)
    world = World(with_uid((builder.elastic() if elastic else builder).build()))
    reservation = {"solo-worker-0": "n1", "solo-worker-1": "n1"}
    world.apply(world.plan())
    world.apply(world.plan(reservation=reservation))
    for name, phase in zip(("solo-worker-0", "solo-worker-1"), phases, strict=True):
        world.pods[name] = set_phase(world.pods[name], phase, node="n1")
    status = world.plan(reservation=reservation).status
    succeeded = condition(status, "Succeeded") if status else None
    assert (succeeded is not None) is done
    if succeeded:
        assert succeeded["message"] == "PyTorchJob default/solo successfully completed."


# ------------------------------------------------------------------ failure and restarts


@pytest.mark.parametrize(
    ("restart_policy", "state", "restarts"),
    [
        ("Never", {"exit_code": 137}, False),
        ("ExitCode", {"exit_code": 1}, False),
        ("ExitCode", {"exit_code": 127}, False),
        ("ExitCode", {"exit_code": 137}, True),
        ("ExitCode", {}, True),
        ("OnFailure", {"exit_code": 1}, True),
        ("Always", {"exit_code": 2}, True),
    ],
    ids=[
        "never",
        "exitcode-1",
        "exitcode-127",
        "exitcode-137",
        "no-terminated-state",
        "onfailure",
        "always",
    ],
)
def test_failed_pod_fails_or_restarts_the_gang(
    restart_policy: str, state: dict[str, Any], restarts: bool
) -> None:
    builder = (
        job("demo").master(restart_policy=restart_policy).workers(2, restart_policy=restart_policy)
    )
    world = running_world(builder)
    world.finish_pod(W1, "Failed", **state)
    result = world.plan()
    if restarts:
        assert result.restarts == 1
        assert sorted(result.delete_pods) == sorted(ALL)
        restarting = must(result.status, "Restarting")
        assert restarting["message"] == (
            "PyTorchJob demo is restarting because 1 Worker replica(s) failed."
        )
        assert condition(result.status, "Failed") is None
    else:
        assert result.restarts is None
        failed = must(result.status, "Failed")
        assert failed["reason"] == "PyTorchJobFailed"
        assert failed["message"] == "PyTorchJob demo is failed because 1 Worker replica(s) failed."
        assert sorted(result.delete_pods) == [MASTER, W0]  # the failed pod stays for its logs


def test_restart_is_readmitted_with_a_new_attempt() -> None:
    world = running_world()
    world.finish_pod(W0, "Failed", exit_code=137)
    world.apply(world.plan())
    world.settle()
    readmit = world.plan()
    assert readmit.needs_admission
    created = world.plan(reservation=RESERVATION).create_pods
    assert {p["metadata"]["annotations"]["torchgate.io/gang-attempt"] for p in created} == {"2"}


def test_backoff_limit_fails_the_job() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=2))
    world.job_raw["metadata"]["annotations"] = {"torchgate.io/restarts": "2"}
    for pod in world.pods.values():
        pod["metadata"]["annotations"]["torchgate.io/gang-attempt"] = "3"
    world.finish_pod(W0, "Failed", exit_code=137)
    result = world.plan()
    failed = must(result.status, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == (
        "Job demo has failed because it has reached the specified backoff limit"
    )
    assert result.restarts is None


# ------------------------------------------------------------------ deadline and TTL


def test_active_deadline_is_a_timer_then_fails_the_job() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(activeDeadlineSeconds=600))
    world.tick(100)
    assert world.plan().requeue_after == pytest.approx(500)
    world.tick(500)
    result = world.plan()
    failed = must(result.status, "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert sorted(result.delete_pods) == sorted(ALL)


def test_a_restarts_annotation_of_5000_digits_counts_as_none() -> None:
    world = running_world()
    world.job_raw["metadata"]["annotations"][names.ANNOTATION_RESTARTS] = "9" * 5000
    world.job_raw["metadata"]["annotations"].pop(ANNOTATION_ATTEMPT, None)
    assert current_attempt(world.job_raw["metadata"]["annotations"]) == 1
    world.plan()  # once a ValueError (Python turns at most 4300 digits into an int)


@pytest.mark.parametrize(
    "edited", ["2099-01-01T00:00:00Z", "yesterday"], ids=["in-the-future", "not-a-time"]
)
def test_a_start_time_a_human_edited_does_not_move_the_deadline(edited: str) -> None:
    # kubectl edit --subresource=status: the gang's pods say when the job started
    world = running_world(gpu_job("demo", workers=2).run_policy(activeDeadlineSeconds=600))
    started = world.job_raw["status"]["startTime"]
    world.job_raw["status"]["startTime"] = edited
    world.tick(100)
    result = world.plan()
    assert result.requeue_after == pytest.approx(500)
    assert status_of(result)["startTime"] == started
    world.apply(result)
    world.tick(500)
    assert must(world.plan().status, "Failed")["reason"] == "DeadlineExceeded"


def test_the_largest_active_deadline_the_api_stores_is_a_timer() -> None:
    # found by fuzzing: an int64 deadline ends after the year 9999, and planning raised
    world = running_world(gpu_job("demo", workers=2).run_policy(activeDeadlineSeconds=2**63 - 1))
    world.tick(100)
    result = world.plan()
    assert result.requeue_after == pytest.approx(2**63 - 1 - 100)
    assert result.status is None or condition(result.status, "Failed") is None


def test_ttl_after_finished_is_a_timer_then_deletes_the_job() -> None:
    world = succeeded_world(gpu_job("demo", workers=2).run_policy(ttlSecondsAfterFinished=60))
    first = world.plan()
    assert first.requeue_after == pytest.approx(60)
    world.apply(first)
    world.tick(10)
    assert world.plan().requeue_after == pytest.approx(50)
    world.tick(50)
    assert world.plan().delete_job


# ------------------------------------------------------------------ suspend and resume


def test_suspend_deletes_everything_and_resume_readmits() -> None:
    world = running_world()
    world.job_raw["spec"]["runPolicy"] = {"suspend": True}
    suspended = world.plan()
    assert sorted(suspended.delete_pods) == sorted(ALL)
    assert suspended.delete_services == (MASTER,)
    assert must(suspended.status, "Suspended")["reason"] == "PyTorchJobSuspended"
    assert must(suspended.status, "Running")["status"] == "False"
    assert status_of(suspended)["replicaStatuses"]["Master"]["active"] == 0
    world.apply(suspended)
    world.settle()
    world.tick(60)
    world.job_raw["spec"]["runPolicy"] = {"suspend": False}
    resumed = world.plan()
    assert must(resumed.status, "Suspended")["status"] == "False"
    assert status_of(resumed)["startTime"] is None  # null: a merge patch removes it
    assert resumed.needs_admission
    world.apply(resumed)
    assert "startTime" not in world.job_raw["status"]
    admitted = world.plan(reservation=RESERVATION)
    assert status_of(admitted)["startTime"] == format_time(NOW + timedelta(seconds=60))


def test_the_deadline_restarts_after_resume() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(activeDeadlineSeconds=600))
    world.job_raw["spec"]["runPolicy"]["suspend"] = True
    world.apply(world.plan())
    world.settle()
    world.tick(3600)
    world.job_raw["spec"]["runPolicy"]["suspend"] = False
    world.apply(world.plan())
    world.apply(world.plan(reservation=RESERVATION))
    world.tick(100)
    result = world.plan(reservation=RESERVATION)
    assert must(world, "Suspended")["status"] == "False"
    assert condition(world, "Failed") is None
    assert result.requeue_after == pytest.approx(500)


# ------------------------------------------------------------------ robustness


def test_malformed_observed_state_does_not_crash() -> None:
    raw = with_uid(gpu_job("demo", workers=2).build())
    raw["status"] = {"conditions": "junk", "startTime": 5}
    raw["metadata"]["annotations"] = {"torchgate.io/restarts": "²"}
    junk: list[Any] = [None, "pod", {"metadata": None}, {"metadata": {"ownerReferences": "x"}}]
    result = plan(Observed(job_raw=raw, job=parsed_job(raw), now=NOW, pods=junk, services=junk))
    assert result.needs_admission


def test_a_pod_without_the_jobs_labels_holding_a_members_name_keeps_the_gang_waiting() -> None:
    """A user's pod named like the Master: nothing is created beside it, the job says why."""
    world = demo_world()
    world.apply(world.plan())
    users_pod = {"metadata": {"name": MASTER, "namespace": "default"}, "status": {}}

    result = world.plan(reservation=RESERVATION, name_holders=(users_pod,))

    assert not result.create_pods
    assert not result.delete_pods
    assert must(result.status, "Queued")["reason"] == "PodNameConflict"
    assert MASTER in must(result.status, "Queued")["message"]
    assert "PodNameConflict" in reasons(result)
    # Its deletion reconciles no job: the gang looks again on its own.
    assert result.requeue_after == NAME_HOLDER_RECHECK_SECONDS
    world.apply(result)
    assert world.plan(reservation=RESERVATION, name_holders=(users_pod,)).events == ()
    # The name freed, the gang is created whole.
    freed = world.plan(reservation=RESERVATION)
    assert sorted(pod["metadata"]["name"] for pod in freed.create_pods) == sorted(ALL)


def users_service(name: str, **metadata: Any) -> dict[str, Any]:
    """A user's own Service, as the reconciler reads it after its create's AlreadyExists."""
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", **metadata},
        "spec": {"clusterIP": "None", "selector": {"app": "mine"}},
    }


@pytest.mark.parametrize("reservation", [None, RESERVATION], ids=["waiting", "admitted"])
def test_a_service_not_the_jobs_holding_its_masters_service_name_keeps_the_gang_waiting(
    reservation: dict[str, str] | None,
) -> None:
    """MASTER_ADDR names the Service: nothing of the gang is made while a user's holds the name."""
    world = demo_world()
    held = users_service(MASTER)

    result = world.plan(reservation=reservation, name_holders=(held,))

    assert not result.create_pods
    assert not result.create_services
    assert not result.needs_admission
    assert must(result.status, "Queued")["reason"] == "PodNameConflict"
    message = must(result.status, "Queued")["message"]
    assert f"Services {MASTER}" in message
    assert "pods" not in message  # the name is held by a Service, not by a pod
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "PodNameConflict")]
    assert MASTER in result.events[0].message
    # No event tells of its deletion: the gang looks again on its own, and is told once.
    assert result.requeue_after == NAME_HOLDER_RECHECK_SECONDS
    world.apply(result)
    assert world.plan(reservation=reservation, name_holders=(held,)).events == ()
    # The name freed, the job's own Service is made (and, admitted, the whole gang).
    freed = world.plan(reservation=reservation)
    assert [s["metadata"]["name"] for s in freed.create_services] == [MASTER]
    created = sorted(pod["metadata"]["name"] for pod in freed.create_pods)
    assert created == (sorted(ALL) if reservation else [])
    assert freed.needs_admission is (reservation is None)


def _theirs(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"uid": "uid-of-another", "controller": True}]
    return obj


@pytest.mark.parametrize(
    ("holders", "services", "held"),
    [
        ((users_service(W1),), (), None),  # no Service of the job has a Worker's name
        (({"metadata": {"name": "other-master-0"}, "kind": "Service"},), (), None),
        ((), (_theirs(users_service(MASTER)),), f"Services {MASTER}"),  # an earlier job's
        ((users_service(MASTER), {"metadata": {"name": W0}}), (), f"pods {W0} and Services"),
        (({"metadata": {"name": MASTER}, "kind": 7},), (), f"pods {MASTER},"),  # kind: a pod's
        ((users_service(MASTER, ownerReferences="junk"),), (), f"Services {MASTER}"),
        (("junk", {"kind": "Service", "metadata": "junk"}, {"kind": "Service"}), ("junk",), None),
    ],
    ids=[
        "service-named-like-a-worker",
        "service-of-another-name",
        "earlier-jobs-service",
        "pod-and-service",
        "holder-of-no-known-kind-is-a-pod",
        "malformed-owner-references",
        "malformed-holders",
    ],
)
def test_which_name_holders_keep_the_gang_waiting(
    holders: tuple[Any, ...], services: tuple[Any, ...], held: str | None
) -> None:
    world = demo_world()
    world.services = {str(index): service for index, service in enumerate(services)}
    result = world.plan(reservation=RESERVATION, name_holders=holders)
    queued = condition(result.status, "Queued") if result.status else None
    if held is None:
        assert sorted(pod["metadata"]["name"] for pod in result.create_pods) == sorted(ALL)
        assert queued is None
    else:
        assert not result.create_pods
        assert queued is not None
        assert queued["reason"] == "PodNameConflict"
        assert held in queued["message"]


@pytest.mark.parametrize(
    "selector",
    [{"app": "mine"}, {}, None, "junk", {**names.job_selector("demo"), "extra": "x"}],
    ids=["another-selector", "empty", "removed", "malformed", "one-label-more"],
)
@pytest.mark.parametrize(
    ("world_of", "reservation"),
    [(running_world, RESERVATION), (demo_world, None)],
    ids=["running", "waiting-for-admission"],
)
def test_the_jobs_service_whose_selector_was_edited_is_made_again(
    selector: Any, world_of: Any, reservation: dict[str, str] | None
) -> None:
    """MASTER_ADDR resolves through it: one selecting other pods (or none) breaks every attempt."""
    world = world_of()
    if world_of is demo_world:
        world.apply(world.plan())  # its Service made as it waits
    assert is_quiet(world.plan(reservation=reservation))
    world.services[MASTER]["spec"]["selector"] = selector  # kubectl edit service

    result = world.plan(reservation=reservation)

    assert result.delete_services == (MASTER,)
    assert not result.create_services
    assert not result.create_pods
    assert not result.delete_pods, "the gang keeps running: the Service alone is made again"
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "ServiceSelectorChanged")]
    world.apply(result)
    again = world.plan(reservation=reservation)
    (made,) = again.create_services
    assert made["spec"]["selector"] == {
        **names.job_selector("demo"),
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
    }


def test_a_service_being_deleted_or_not_the_jobs_is_not_deleted_for_its_selector() -> None:
    world = running_world()
    world.services[MASTER]["spec"]["selector"] = {"app": "mine"}
    world.services[MASTER]["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert world.plan(reservation=RESERVATION).delete_services == ()
    del world.services[MASTER]["metadata"]["deletionTimestamp"]
    world.services[MASTER]["metadata"]["ownerReferences"][0]["uid"] = "uid-of-another"
    assert world.plan(reservation=RESERVATION).delete_services == ()


def orphaned_world(kind: str) -> World:
    """The job created again after ``kubectl delete --cascade=orphan`` of its earlier self.

    Its Services (and, for ``kind="pod"``, its Master pod, Pending) are left with the job's labels
    and no ownerReference, as the garbage collector leaves orphans.
    """
    earlier = demo_world()
    earlier.apply(earlier.plan(reservation=RESERVATION))
    world = demo_world()
    world.job_raw["metadata"]["uid"] = "uid-of-the-new-job"
    kept = [(world.services, earlier.services[MASTER])]
    if kind == "pod":
        kept.append((world.pods, earlier.pods[MASTER]))
    for store, obj in kept:
        obj["metadata"].pop("ownerReferences")
        obj["metadata"]["uid"] = f"uid-of-{MASTER}"
        store[MASTER] = obj
    return world


def _controllers(obj: dict[str, Any]) -> list[str]:
    return [r["uid"] for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")]


@pytest.mark.parametrize("kind", ["service", "pod"])
def test_orphans_with_the_jobs_labels_are_adopted_not_held_against_it(kind: str) -> None:
    """As ReplicaSets and Jobs do: an orphan whose labels match is patched in, then the job's."""
    world = orphaned_world(kind)

    result = world.plan(reservation=RESERVATION)

    orphans = [(Adoption("Service", MASTER, f"uid-of-{MASTER}"))]
    if kind == "pod":
        orphans.insert(0, Adoption("Pod", MASTER, f"uid-of-{MASTER}"))
    assert list(result.adopt) == orphans
    assert condition(result.status, "Queued") is None  # no PodNameConflict
    assert result.create_services == ()  # the adopted Service is the job's: not made again
    created = sorted(pod["metadata"]["name"] for pod in result.create_pods)
    assert created == (sorted(ALL) if kind == "service" else [W0, W1])  # the Master is adopted
    world.apply(result)
    assert _controllers(world.services[MASTER]) == ["uid-of-the-new-job"]
    if kind == "pod":
        assert _controllers(world.pods[MASTER]) == ["uid-of-the-new-job"]
    assert world.plan(reservation=RESERVATION).adopt == ()  # adopted once


def _labelled_service(**metadata: Any) -> dict[str, Any]:
    """The job's Master Service from an earlier job, as the label-selected cache holds it."""
    world = demo_world()
    service = world.plan().create_services[0]
    service["metadata"].pop("ownerReferences")
    service["metadata"].update({"uid": "uid-of-the-service", **metadata})
    return service


@pytest.mark.parametrize(
    ("services", "holders", "adopted"),
    [
        ((_labelled_service(),), (), True),
        ((_labelled_service(ownerReferences=[{"uid": "cm", "controller": False}]),), (), True),
        ((), ({**_labelled_service(), "kind": "Service"},), True),  # read by the GET
        ((_theirs(_labelled_service()),), (), False),  # another live owner's
        ((), (users_service(MASTER, uid="uid-of-mine"),), False),  # unlabelled: a user's own
        ((_labelled_service(deletionTimestamp=format_time(NOW)),), (), False),
        ((_labelled_service(uid=None),), (), False),  # no uid to patch by
    ],
    ids=[
        "orphan",
        "orphan-with-another-owner-not-controlling",
        "orphan-found-by-the-get",
        "controlled-by-another-uid",
        "unlabelled",
        "being-deleted",
        "without-uid",
    ],
)
def test_which_services_holding_a_service_name_are_adopted(
    services: tuple[dict[str, Any], ...], holders: tuple[dict[str, Any], ...], adopted: bool
) -> None:
    """Only an orphan with the job's labels is adopted; anything else still blocks the gang."""
    world = demo_world()
    world.services = {str(index): service for index, service in enumerate(services)}
    result = world.plan(reservation=RESERVATION, name_holders=holders)
    queued = condition(result.status, "Queued") if result.status else None
    if adopted:
        assert [(a.kind, a.name) for a in result.adopt] == [("Service", MASTER)]
        assert result.adopt[0].uid == "uid-of-the-service"
        assert queued is None
        assert sorted(pod["metadata"]["name"] for pod in result.create_pods) == sorted(ALL)
        assert result.create_services == ()
    else:
        assert result.adopt == ()
        assert not result.create_pods
        assert queued is not None
        assert queued["reason"] == "PodNameConflict"
        assert f"Services {MASTER}" in queued["message"]


def test_a_job_being_deleted_adopts_nothing() -> None:
    world = orphaned_world("pod")
    world.job_raw["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert world.plan(reservation=RESERVATION).adopt == ()


def test_the_adoption_patch_adds_the_controlling_reference_with_the_orphans_uid() -> None:
    world = orphaned_world("service")
    (adoption,) = world.plan().adopt
    reference = owner_reference(world.job_raw, parsed_job(world.job_raw))
    assert adoption_patch(adoption, reference) == {
        "metadata": {"ownerReferences": [reference], "uid": f"uid-of-{MASTER}"}
    }
    assert reference["controller"] is True
    assert reference["uid"] == "uid-of-the-new-job"


def test_zero_replica_job_is_not_admitted() -> None:
    world = World(with_uid(job("empty").workers(0).build()))
    result = world.plan(reservation={})
    assert not result.needs_admission
    assert not result.create_pods


def test_full_lifecycle_is_quiet_between_transitions() -> None:
    world = demo_world()
    world.apply(world.plan())
    assert is_quiet(world.plan())
    world.apply(world.plan(reservation=RESERVATION))
    assert is_quiet(world.plan(reservation=RESERVATION))
    for name in ALL:
        world.run(name)
    world.apply(world.plan())
    assert is_quiet(world.plan())
    world.finish_pod(MASTER, "Succeeded", exit_code=0)
    world.apply(world.plan())
    assert is_quiet(world.plan())


# ------------------------------------------------------------------ disruptions and lost nodes


def lost_node(name: str = "n2", *, for_seconds: float = 45) -> dict[str, NodeHealth]:
    since = NOW - timedelta(seconds=for_seconds)
    return {name: NodeHealth(name, ready="Unknown", ready_since=since)}


def gpu_health_taint(name: str = "n2") -> dict[str, NodeHealth]:
    taint = Taint("nvidia.com/gpu-health", "unhealthy", "NoExecute")
    return {name: NodeHealth(name, no_execute=(TimedTaint(taint, NOW),))}


def test_a_lost_node_restarts_the_whole_gang_uncounted_and_force_deletes_its_pods() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    result = world.plan(nodes=lost_node("n2"), node_lost_seconds=30)
    assert result.force_delete_pods == (W1,), "no kubelet on n2 would confirm a deletion"
    assert sorted(result.delete_pods) == [MASTER, W0]
    assert result.restarts is None
    assert result.attempt == 2
    assert result.restart == Restart("NodeLost", "n2")
    restarting = must(result.status, "Restarting")
    assert restarting["reason"] == "NodeLost"
    assert "node n2 is lost (Ready Unknown for 45s)" in restarting["message"]
    assert "not counted against backoffLimit" in restarting["message"]
    assert condition(result.status, "Failed") is None
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "NodeLost")]
    assert "n2" in result.events[0].message


def test_a_node_shutting_down_restarts_the_gang_charging_no_fault_and_awaits_its_kubelet() -> None:
    """Its kubelet is alive and stops the pods within their grace: none is force-deleted."""
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    since = NOW - timedelta(seconds=45)
    nodes = {"n2": NodeHealth("n2", ready="False", ready_since=since, shutting_down=True)}
    result = world.plan(nodes=nodes, node_lost_seconds=30)
    assert result.restart == Restart("NodeLost", "n2", blames_node=False)
    assert result.restart.node_faults() == ()
    assert not result.force_delete_pods
    assert sorted(result.delete_pods) == sorted(ALL)
    assert result.restarts is None
    assert "node n2 is shutting down" in must(result.status, "Restarting")["message"]


def test_a_node_not_ready_within_the_bound_is_waited_for_then_lost() -> None:
    world = running_world()
    waiting = world.plan(nodes=lost_node("n2", for_seconds=10), node_lost_seconds=30)
    assert is_quiet(waiting)
    assert waiting.requeue_after == pytest.approx(20)
    world.tick(20)
    lost = world.plan(nodes=lost_node("n2", for_seconds=30), node_lost_seconds=30)
    assert lost.restart == Restart("NodeLost", "n2")


def test_a_deleted_node_is_lost_at_once() -> None:
    world = running_world()
    result = world.plan(nodes={"n2": deleted_node("n2")})
    assert result.restart == Restart("NodeLost", "n2")
    assert result.force_delete_pods == (W1,)


def test_an_untolerated_no_execute_taint_replaces_the_gang_at_once_naming_the_taint() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    result = world.plan(nodes=gpu_health_taint("n2"))
    assert result.restart == Restart("NodeTainted", "n2")
    assert sorted(result.delete_pods) == sorted(ALL), "the kubelet there confirms deletions"
    assert not result.force_delete_pods
    assert result.restarts is None
    assert (
        "nvidia.com/gpu-health=unhealthy:NoExecute" in must(result.status, "Restarting")["message"]
    )
    assert [e.reason for e in result.events] == ["NodeTainted"]


def test_a_no_schedule_taint_leaves_a_running_gang_alone() -> None:
    world = running_world()
    raw = node("n2", taints=[{"key": "nvidia.com/gpu-health", "effect": "NoSchedule"}])
    assert is_quiet(world.plan(nodes={"n2": node_health(raw)}))


@pytest.mark.parametrize("restart_policy", ["Never", "ExitCode", "OnFailure"])
def test_an_evicted_pod_restarts_the_gang_uncounted_whatever_the_restart_policy(
    restart_policy: str,
) -> None:
    builder = (
        job("demo").master(restart_policy=restart_policy).workers(2, restart_policy=restart_policy)
    )
    world = running_world(builder.run_policy(backoffLimit=0))
    world.finish_pod(W1, "Failed", exit_code=137, reason="Evicted")
    result = world.plan()
    assert result.restart == Restart("PodDisrupted", "n2")
    assert result.restarts is None
    assert condition(result.status, "Failed") is None
    assert result.attempt == 2


def test_a_pod_deleted_by_someone_else_is_a_disruption_even_when_it_then_fails() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    world.pods[W1] = set_phase(world.pods[W1], "Failed", exit_code=143, deleted=NOW)
    result = world.plan()
    assert result.restart == Restart("PodDeleted", "n2")
    assert result.restarts is None
    assert condition(result.status, "Failed") is None


def test_a_deleted_member_asks_whether_the_namespace_is_being_deleted_first() -> None:
    world = running_world()
    world.pods[W1] = set_phase(world.pods[W1], "Running", deleted=NOW)
    assert asks_namespace_first(world.plan())


def test_members_deleted_with_their_namespace_restart_nothing() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    for name in ALL:
        world.pods[name] = set_phase(world.pods[name], "Running", deleted=NOW)
    assert is_quiet(world.plan(namespace_terminating=True))


def test_an_eviction_does_not_ask_about_the_namespace() -> None:
    world = running_world()
    world.finish_pod(W1, "Failed", exit_code=137, reason="Evicted")
    result = world.plan()
    assert result.restart == Restart("PodDisrupted", "n2")
    assert not asks_namespace_first(result)


def test_a_disruption_outranks_the_failures_it_causes_in_the_other_ranks() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    world.finish_pod(MASTER, "Failed", exit_code=1)  # its peer on n2 went away under it
    result = world.plan(nodes=gpu_health_taint("n2"))
    assert result.restart == Restart("NodeTainted", "n2")
    assert result.restarts is None


def test_a_containers_own_failure_still_counts_against_the_backoff_limit() -> None:
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=0))
    world.finish_pod(W0, "Failed", exit_code=1)
    result = world.plan(nodes={"n1": NodeHealth("n1"), "n2": NodeHealth("n2")})
    assert must(result.status, "Failed")["reason"] == "BackoffLimitExceeded"
    world = running_world(gpu_job("demo", workers=2).run_policy(backoffLimit=1))
    world.finish_pod(W0, "Failed", exit_code=1)
    restarted = world.plan()
    assert (restarted.restarts, restarted.attempt) == (1, 2)
    assert restarted.restart == Restart("ContainerFailed", counted=True)


def test_a_member_that_vanished_is_judged_by_its_last_state() -> None:
    world = running_world()
    last_seen = set_phase(world.pods.pop(W1), "Running", deleted=NOW)
    result = world.plan(departed=[last_seen], nodes=gpu_health_taint("n2"))
    assert result.restart == Restart("NodeTainted", "n2")
    assert sorted(result.delete_pods) == [MASTER, W0]


def test_every_restart_begins_a_new_attempt_whose_pods_get_a_new_rendezvous_port() -> None:
    world = running_world()
    world.apply(world.plan(nodes=lost_node("n2")))
    world.settle()
    assert world.job_raw["metadata"]["annotations"]["torchgate.io/gang-attempt"] == "2"
    assert is_quiet(world.plan(nodes=lost_node("n2")))
    created = world.plan(reservation={MASTER: "n1", W0: "n1", W1: "n3"}).create_pods
    assert {p["metadata"]["annotations"]["torchgate.io/gang-attempt"] for p in created} == {"2"}
    assert {env_of(p)["MASTER_PORT"] for p in created} == {"23457"}


def test_preemption_and_a_schedule_timeout_begin_new_attempts_uncounted() -> None:
    world = running_world()
    preempted = world.plan(preempted_by="team-b/urgent")
    assert (preempted.attempt, preempted.restarts) == (2, None)
    assert preempted.restart == Restart("Preempted")
    world.apply(preempted)
    assert world.plan(preempted_by="team-b/urgent").attempt is None, "decided once"
    world = admitted_world()
    world.tick(61)
    timed_out = world.plan(reservation=RESERVATION)
    assert (timed_out.attempt, timed_out.restart) == (2, Restart("ScheduleTimeout"))


def test_pods_already_terminating_on_a_lost_node_are_force_deleted_in_any_state() -> None:
    world = succeeded_world()
    world.apply(world.plan())
    assert "deletionTimestamp" in world.pods[W1]["metadata"]
    world.pods[W1]["spec"]["nodeName"] = "n2"
    result = world.plan(nodes=lost_node("n2"))
    assert result.force_delete_pods == (W1,)
    assert not result.delete_pods


def test_a_gang_whose_pods_vanished_unseen_starts_a_new_attempt() -> None:
    world = running_world()
    world.pods.clear()
    result = world.plan(reservation=RESERVATION)
    assert result.restart == Restart("GangIncomplete")
    assert (result.attempt, result.needs_admission, result.create_pods) == (2, True, ())
    world.apply(result)
    created = world.plan(reservation=RESERVATION).create_pods
    assert {p["metadata"]["annotations"]["torchgate.io/gang-attempt"] for p in created} == {"2"}


# ------------------------------------------------------------------ a crash, then its node's fault


def crash(world: World, name: str, *, exit_code: int = 1) -> None:
    """``name``'s training container fails now (a CUDA error: exit code 1)."""
    world.pods[name] = ended(set_phase(world.pods[name], "Failed"), at=format_time(world.now))
    world.pods[name]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = (
        exit_code
    )


def healthy() -> dict[str, NodeHealth]:
    return {"n1": NodeHealth("n1"), "n2": NodeHealth("n2")}


def tainted_at(world: World) -> dict[str, NodeHealth]:
    """n2 gets the GPU health taint now (``timeAdded``: now)."""
    taint = Taint("nvidia.com/gpu-health", "unhealthy", "NoExecute")
    return {
        "n1": NodeHealth("n1"),
        "n2": NodeHealth("n2", no_execute=(TimedTaint(taint, world.now),)),
    }


def crashed_world(restart_policy: str = "OnFailure", exit_code: int = 1) -> World:
    builder = (
        job("demo").master(restart_policy=restart_policy).workers(2, restart_policy=restart_policy)
    )
    world = running_world(builder.run_policy(backoffLimit=3))
    crash(world, W1, exit_code=exit_code)
    return world


def held(result: Plan) -> bool:
    """The failure is not judged yet: no restart, nothing deleted, the job not ended."""
    return (
        result.restart is None
        and result.restarts is None
        and not result.delete_pods
        and (result.status is None or condition(result.status, "Failed") is None)
    )


@pytest.mark.parametrize("restart_policy", ["OnFailure", "ExitCode", "Never"])
def test_a_crash_its_node_is_tainted_for_a_moment_later_is_the_nodes_fault(
    restart_policy: str,
) -> None:
    """An Xid: the rank dies with a CUDA error, the health checker taints the node 1 s later."""
    world = crashed_world(restart_policy)
    first = world.plan(nodes=healthy(), failure_window_seconds=5)
    assert held(first)
    assert first.requeue_after == pytest.approx(5)
    world.tick(1)
    result = world.plan(nodes=tainted_at(world), failure_window_seconds=5)
    assert result.restart == Restart("NodeTainted", "n2")
    assert result.restart.node_faults() == (NodeFault("n2", "NodeTainted"),)
    assert result.restarts is None
    assert result.attempt == 2
    assert sorted(result.delete_pods) == sorted(ALL)
    assert condition(result.status, "Failed") is None
    assert must(result.status, "Restarting")["reason"] == "NodeTainted"


def test_a_taint_after_the_window_leaves_the_crash_the_programs() -> None:
    world = crashed_world()
    world.tick(6)
    result = world.plan(nodes=tainted_at(world), failure_window_seconds=5)
    assert result.restart == Restart("ContainerFailed", counted=True)
    assert result.restarts == 1


@pytest.mark.parametrize(
    ("restart_policy", "ends"), [("OnFailure", False), ("ExitCode", True)], ids=["retried", "ended"]
)
def test_a_crash_on_a_healthy_node_is_judged_when_the_window_closes(
    restart_policy: str, ends: bool
) -> None:
    world = crashed_world(restart_policy)
    world.tick(2)
    waiting = world.plan(nodes=healthy(), failure_window_seconds=5)
    assert held(waiting)
    assert waiting.requeue_after == pytest.approx(3)
    world.tick(3)
    result = world.plan(nodes=healthy(), failure_window_seconds=5)
    if ends:
        assert must(result.status, "Failed")["reason"] == "PyTorchJobFailed"
        assert result.restarts is None
    else:
        assert result.restart == Restart("ContainerFailed", counted=True)
        assert result.restarts == 1


def test_no_window_judges_a_crash_at_once_as_before() -> None:
    world = crashed_world()
    result = world.plan(nodes=tainted_at(world), failure_window_seconds=0)
    assert result.restart == Restart("ContainerFailed", counted=True)
    assert result.restarts == 1

"""``torchgate explain``'s rules: state, reason and place from the job and the controller's view."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.builders.pod import pod
from torchgate.ask.explanation import explain, render, restarts_of, state_of
from torchgate.pytorchjob.outlook import (
    Gang,
    JobOutlook,
    Place,
    outlook_from_json,
    queued_message,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
G = 1000
PLACE = Place(pool=2, pool_size=3, team="vision", team_position=1, team_size=1, ahead_jobs=1,
              ahead_gpus=16 * G)  # fmt: skip
QUOTA = "team vision is at its quota (16/16 GPUs; may borrow 0 more); the job needs 8 GPUs"


def condition(
    kind: str, status: str = "True", reason: str = "", message: str = ""
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-03-01T11:50:00Z",
    }


def a_job(*conditions: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "big", "namespace": "team-vision", "annotations": annotations},
        "spec": {"runPolicy": {}},
        "status": {"conditions": list(conditions)},
    }


WAITING = a_job(
    condition("Created", reason="PyTorchJobCreated"),
    condition("Queued", reason="WaitingForQuota", message=queued_message(PLACE, QUOTA)),
)


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ([], "Waiting"),
        ([condition("Created"), condition("Queued")], "Waiting"),
        ([condition("Created"), condition("Running")], "Running"),
        ([condition("Running", "False"), condition("Restarting")], "Waiting"),
        ([condition("Running", "False"), condition("Succeeded")], "Finished"),
        ([condition("Failed")], "Finished"),
    ],
    ids=["new", "queued", "running", "restarting", "succeeded", "failed"],
)
def test_the_state_is_waiting_running_or_finished(
    conditions: list[dict[str, Any]], state: str
) -> None:
    assert state_of(a_job(*conditions)) == state


@pytest.mark.parametrize(
    "conditions",
    [
        [condition("Created"), condition("Running")],
        [condition("Created"), condition("Queued", reason="WaitingForQuota")],
        [condition("Running", "False"), condition("Succeeded")],
    ],
    ids=["running", "queued", "succeeded"],
)
def test_a_job_being_deleted_is_deleting_whatever_its_conditions_last_said(
    conditions: list[dict[str, Any]],
) -> None:
    job = a_job(*conditions)
    job["metadata"]["deletionTimestamp"] = "2026-03-01T11:59:00Z"
    master = pod("big-master-0", gang=("team-vision", "big"), replica_type="Master", node="n1",
                 deleted="2026-03-01T11:59:00Z")  # fmt: skip
    still_queued = JobOutlook(job="team-vision/big", known=True, waiting=True, place=PLACE)

    explained = explain(job, outlook=still_queued, pods=[master])

    assert state_of(job) == "Deleting"
    told = explained.to_json()
    assert (told["state"], told["reason"], told["position"]) == ("Deleting", "", None)
    assert told["since"] == "2026-03-01T11:59:00Z"
    assert told["nodes"] == {"big-master-0": "n1"}  # its terminating pod still holds the node
    assert render(explained, NOW)[0] == "PyTorchJob team-vision/big: Deleting"


LOST = "PyTorchJob big is restarting because node n1 was lost: the whole gang is placed again"
RESTARTING = a_job(condition("Created"), condition("Restarting", reason="NodeLost", message=LOST))
OLD_GANG = JobOutlook(job="team-vision/big", known=True, nodes={"big-master-0": "n1"})


@pytest.mark.parametrize(
    ("pods", "outlook"),
    [
        ([pod("big-master-0", gang=("team-vision", "big"), node="n1", deleted=NOW.isoformat())],
         OLD_GANG),
        ([], None),
        ([], JobOutlook(job="team-vision/big")),
    ],
    ids=["a-member-terminating", "no-pods-no-controller", "no-pods-none-held"],
)  # fmt: skip
def test_a_restarting_gang_whose_old_pods_are_going_is_told_as_its_restart_says(
    pods: list[dict[str, Any]], outlook: JobOutlook | None
) -> None:
    told = explain(RESTARTING, outlook=outlook, pods=pods).to_json()

    assert (told["state"], told["reason"], told["message"]) == ("Waiting", "NodeLost", LOST)
    assert told["since"] == "2026-03-01T11:50:00Z"
    assert told["nodes"] == ({"big-master-0": "n1"} if pods else {})


def test_a_preempted_gang_whose_member_still_terminates_is_told_it_was_preempted() -> None:
    message = "PyTorchJob big was preempted by team-speech/urgent: its whole gang is deleted"
    job = a_job(
        condition("Created"),
        condition("Preempted", reason="Preempted", message=message),
        condition("Running", "False", reason="Preempted", message=message),
    )
    going = pod("big-master-0", gang=("team-vision", "big"), node="n1", deleted=NOW.isoformat())

    told = explain(job, outlook=JobOutlook(job="team-vision/big"), pods=[going]).to_json()

    assert (told["state"], told["reason"], told["message"]) == ("Waiting", "Preempted", message)
    assert told["nodes"] == {"big-master-0": "n1"}


def test_a_restarting_gang_admitted_again_or_queued_again_is_told_so() -> None:
    new_gang = [pod("big-master-0", gang=("team-vision", "big"), node="n2", phase="Pending")]
    admitted = JobOutlook(job="team-vision/big", known=True, nodes={"big-master-0": "n2"})
    queued = a_job(
        *RESTARTING["status"]["conditions"], condition("Queued", reason="WaitingForQuota")
    )

    again = explain(RESTARTING, outlook=admitted, pods=new_gang).to_json()
    waiting = explain(queued, outlook=None).to_json()

    assert again["message"].startswith("admitted; not started: big-master-0 on n2")
    assert waiting["reason"] == "WaitingForQuota"


def test_restart_events_about_an_earlier_job_of_the_same_name_are_not_the_jobs() -> None:
    def restarted(uid: str, at: str) -> dict[str, Any]:
        about = {"kind": "PyTorchJob", "name": "big", "uid": uid}
        return {
            "reason": "PodDeleted",
            "lastTimestamp": at,
            "message": "m",
            "involvedObject": about,
        }

    job = a_job(condition("Created"), condition("Running"))
    job["metadata"]["uid"] = "new"
    events = [restarted("old", "2026-03-01T11:00:00Z"), restarted("new", "2026-03-01T11:55:00Z")]

    told = explain(job, outlook=None, events=events).to_json()

    assert [restart["at"] for restart in told["restarts"]["events"]] == ["2026-03-01T11:55:00Z"]


def test_a_waiting_job_takes_the_live_reason_place_and_what_must_end_from_the_controller() -> None:
    outlook = JobOutlook(
        job="team-vision/big",
        known=True,
        waiting=True,
        kind="Quota",
        reason="WaitingForQuota",
        message=QUOTA,
        place=PLACE,
        must_end=(Gang("team-vision/small", 8 * G, 0, "vision"),),
    )

    explained = explain(WAITING, outlook=outlook)

    body = explained.to_json()
    assert (body["state"], body["reason"], body["position"], body["message"]) == (
        "Waiting",
        "WaitingForQuota",
        2,
        QUOTA,
    )
    assert body["nodes"] == {}
    assert [gang["job"] for gang in body["mustEnd"]] == ["team-vision/small"]
    text = render(explained, NOW)
    assert text[0] == "PyTorchJob team-vision/big: Waiting (WaitingForQuota)"
    assert any("#2 of 3 in the pool" in line for line in text)
    assert any("team-vision/small (8 GPUs, priority 0) would have to end" in line for line in text)


def test_a_job_waiting_for_another_teams_gangs_within_quota_is_told_their_end_lets_it_start() -> (
    None
):
    outlook = JobOutlook(
        job="team-vision/big",
        known=True,
        waiting=True,
        kind="Capacity",
        reason="WaitingForCapacity",
        message="waiting for 8 nvidia.com/gpu",
        place=PLACE,
        ending_lets_start=(Gang("team-speech/hog", 32 * G, 0, "speech"),),
    )

    explained = explain(WAITING, outlook=outlook_from_json(outlook.to_json()))

    assert [gang["job"] for gang in explained.to_json()["endingLetsStart"]] == ["team-speech/hog"]
    (advice,) = [line for line in render(explained, NOW) if line.startswith("  to start:")]
    assert advice.startswith("  to start: team-speech/hog (32 GPUs, priority 0) would have to end")
    assert "waits for its turn" not in advice


def test_a_job_another_controller_runs_is_told_who_runs_it_not_that_it_is_not_admitted() -> None:
    theirs = a_job(condition("Created", reason="PyTorchJobCreated"))
    theirs["spec"]["runPolicy"]["managedBy"] = "kubeflow.org/training-operator"

    explained = explain(theirs, outlook=JobOutlook(job="team-vision/big"))

    assert explained.state == "Waiting"
    assert explained.message.startswith("torchgate does not run it: ")
    assert "kubeflow.org/training-operator" in explained.message
    assert "to start:" not in "\n".join(render(explained, NOW))


QUEUED_OUTLOOK = JobOutlook(
    job="team-vision/big", known=True, waiting=True, kind="Quota", reason="WaitingForQuota",
    message=QUOTA, place=PLACE,
)  # fmt: skip


@pytest.mark.parametrize(
    ("manager", "outlook", "elsewhere"),
    [
        # the controller's answer (is_ours): unowned and no --manage-unowned -> it does not run it
        (None, JobOutlook(job="team-vision/big", runs=False), "managedBy is unset"),
        (None, QUEUED_OUTLOOK, None),  # queued: run (an older controller's: no runs, known)
        ("torchgate.io/controller", JobOutlook(job="team-vision/big", runs=True), None),
        (None, JobOutlook(job="team-vision/big", runs=True), None),  # --manage-unowned, unseen
        ("kubeflow.org/training-operator", JobOutlook(job="team-vision/big", runs=False),
         "kubeflow.org/training-operator: that controller runs it"),
        # no answer, or an older controller's (runs absent): the job's managedBy alone
        ("kubeflow.org/training-operator", None,
         "kubeflow.org/training-operator: that controller runs it"),
        ("kubeflow.org/training-operator", JobOutlook(job="team-vision/big"),
         "kubeflow.org/training-operator: that controller runs it"),
        (None, None, None),
        (None, JobOutlook(job="team-vision/big"), None),
    ],
)  # fmt: skip
def test_whether_torchgate_runs_a_waiting_job_is_the_controllers_answer_else_its_managed_by(
    manager: str | None, outlook: JobOutlook | None, elsewhere: str | None
) -> None:
    job = a_job(condition("Created", reason="PyTorchJobCreated"))
    if manager is not None:
        job["spec"]["runPolicy"]["managedBy"] = manager
    wire = None if outlook is None else outlook_from_json(outlook.to_json())

    explained = explain(job, outlook=wire)

    assert explained.state == "Waiting"
    assert explained.to_json()["runs"] is (elsewhere is None)  # waiting, or not ours
    if elsewhere is None:
        assert not explained.message.startswith("torchgate does not run it"), explained.message
    else:
        assert explained.message.startswith("torchgate does not run it: "), explained.message
        assert elsewhere in explained.message
        assert explained.position is None
        assert "to start:" not in "\n".join(render(explained, NOW))


@pytest.mark.parametrize(
    ("conditions", "manager", "outlook", "runs"),
    [
        ((condition("Running"),), "kubeflow.org/training-operator", None, False),
        ((condition("Running"),), None, JobOutlook(job="team-vision/big", runs=False), False),
        ((condition("Running"),), None, JobOutlook(job="team-vision/big", runs=True), True),
        ((condition("Succeeded"),), "kubeflow.org/training-operator", None, False),
        ((condition("Succeeded"),), "torchgate.io/controller", None, True),
    ],
    ids=["running-theirs", "running-unowned-strict", "running-ours", "finished-theirs",
         "finished-ours"],
)  # fmt: skip
def test_the_json_says_whether_torchgate_runs_a_running_or_finished_job_too(
    conditions: tuple[dict[str, Any], ...], manager: str | None, outlook: JobOutlook | None,
    runs: bool,
) -> None:  # fmt: skip
    job = a_job(*conditions)
    if manager is not None:
        job["spec"]["runPolicy"]["managedBy"] = manager
    wire = None if outlook is None else outlook_from_json(outlook.to_json())

    assert explain(job, outlook=wire).to_json()["runs"] is runs


def test_without_the_controller_the_place_is_read_from_the_queued_condition() -> None:
    explained = explain(WAITING, outlook=None, unanswered="the controller did not answer")

    assert (explained.state, explained.reason, explained.position) == (
        "Waiting",
        "WaitingForQuota",
        2,
    )
    assert explained.message == QUOTA
    assert explained.to_json()["controller"] == "the controller did not answer"
    assert render(explained, NOW)[-1] == "  (live view unavailable: the controller did not answer)"


def test_a_running_job_names_its_pods_nodes_in_rank_order_and_its_domains() -> None:
    running = a_job(condition("Created"), condition("Running", reason="PyTorchJobRunning"))
    pods = [
        pod("big-worker-1", node="a100-3", labels={"training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": "1"}),
        pod("big-master-0", node="a100-0", labels={"training.kubeflow.org/replica-type": "master",
            "training.kubeflow.org/replica-index": "0"}),
        pod("big-worker-0", node="a100-1", labels={"training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": "0"}),
        pod("old", node="a100-9", deleted="2026-03-01T11:00:00Z"),
    ]  # fmt: skip
    outlook = JobOutlook(job="team-vision/big", known=True, domains=("rack=r0",))

    explained = explain(running, outlook=outlook, pods=pods)

    assert explained.state == "Running"
    assert list(explained.nodes.items()) == [
        ("big-master-0", "a100-0"),
        ("big-worker-0", "a100-1"),
        ("big-worker-1", "a100-3"),
    ]
    assert explained.domains == ("rack=r0",)
    assert explained.since == "2026-03-01T11:50:00Z"
    assert "since 2026-03-01T11:50:00Z (10m ago)" in "\n".join(render(explained, NOW))


def test_restarts_come_from_the_jobs_events_once_each_with_their_cause() -> None:
    def event(reason: str, message: str, at: str) -> dict[str, str]:
        return {"reason": reason, "message": message, "lastTimestamp": f"2026-03-01T{at}Z"}

    events = [
        event("NodeLost", "node a100-1 lost", "11:40:00"),
        event("GangAdmitted", "creating 2 pods", "11:41:00"),
        event("PyTorchJobRestarting", "exit 1", "11:30:00"),
        event("PyTorchJobRestarting", "exit 1", "11:30:00"),
    ]
    running = a_job(condition("Running"), **{"torchgate.io/restarts": "1"})

    explained = explain(running, outlook=None, events=events)

    assert [(r.cause, r.at) for r in restarts_of(events)] == [
        ("PyTorchJobRestarting", "2026-03-01T11:30:00Z"),
        ("NodeLost", "2026-03-01T11:40:00Z"),
    ]
    assert explained.to_json()["restarts"]["counted"] == 1
    assert "  restarts: 2 (1 counted against backoffLimit)" in render(explained, NOW)


@pytest.mark.parametrize("reason", ["Hang", "ImagePullFailed", "PodStuck"])
def test_restarts_counted_or_for_a_stuck_pod_are_listed_too(reason: str) -> None:
    """Every restart Event the controller sends is one (``reasons.RESTART_EVENT_REASONS``)."""
    events = [{"reason": reason, "message": "restarting", "lastTimestamp": "2026-03-01T11:40:00Z"}]

    assert [(r.cause, r.at) for r in restarts_of(events)] == [(reason, "2026-03-01T11:40:00Z")]


def test_a_finished_job_says_how_it_ended() -> None:
    done = a_job(condition("Running", "False"), condition("Succeeded", message="it succeeded."))

    explained = explain(done, outlook=None)

    assert (explained.state, explained.reason, explained.message) == (
        "Finished",
        "",
        "it succeeded.",
    )
    assert explained.position is None


def test_a_job_no_node_admits_is_told_what_must_change_not_to_wait_for_its_turn() -> None:
    outlook = JobOutlook(
        job="team-vision/big",
        known=True,
        waiting=True,
        kind="Capacity",
        reason="WaitingForResources",
        message="no eligible node in pool pool=a100 for big-master-0: no schedulable node has ...",
        place=PLACE,
        placeable=False,
    )

    explained = explain(WAITING, outlook=outlook)

    assert explained.to_json()["placeable"] is False
    (line,) = [line for line in render(explained, NOW) if line.startswith("  to start:")]
    assert line == (
        "  to start: no job's end lets it start: nodes that admit and can hold its pods must join "
        "the pool, or it must ask for less (fewer or smaller pods), or its nodeSelector, affinity, "
        "tolerations or pinned hosts must change (it holds no one back)"
    )


@pytest.mark.parametrize("placeable", [False, True], ids=["no-node-holds-it", "capacity"])
def test_a_job_only_its_nodes_out_of_use_would_start_is_told_to_clear_them_not_other_advice(
    placeable: bool,
) -> None:
    outlook = JobOutlook(
        job="team-vision/big",
        known=True,
        waiting=True,
        kind="Capacity",
        reason="WaitingForResources",
        message="no eligible nodes in the cluster can ever hold all 2 pods of the gang: it asks 16 "
        "nvidia.com/gpu and they have 8 even empty (8 nvidia.com/gpu more on 1 node out of use: "
        "1 NotReady)",
        place=PLACE,
        placeable=placeable,
        starts_if_cleared=("down",),
    )

    text = render(explain(WAITING, outlook=outlook), NOW)

    (advice,) = [line for line in text if line.startswith("  to start:")]
    assert "its nodes out of use must return to use" in advice
    assert "waits for its turn" not in advice
    assert "nodeSelector" not in advice
    assert "  clear:    down (out of use): clearing them would let it start" in text


def test_a_job_its_nodes_out_of_use_would_start_is_told_clearing_them_would() -> None:
    outlook = JobOutlook(
        job="team-vision/big",
        known=True,
        waiting=True,
        kind="Capacity",
        reason="WaitingForResources",
        message="waiting for 16 nvidia.com/gpu in pool pool=a100: 8 free (24 nvidia.com/gpu more "
        "on 3 nodes out of use: 2 tainted nvidia.com/gpu-health, 1 NotReady)",
        place=PLACE,
        must_end=(Gang("team-vision/small", 8 * G, 0, "vision"),),
        starts_if_cleared=("down", "t1", "t2"),
    )

    explained = explain(WAITING, outlook=outlook_from_json(outlook.to_json()))

    assert explained.to_json()["startsIfCleared"] == ["down", "t1", "t2"]
    (line,) = [line for line in render(explained, NOW) if line.startswith("  clear:")]
    assert line == "  clear:    down, t1, t2 (out of use): clearing them would let it start"


SUSPENDED = condition(
    "Suspended", reason="PyTorchJobSuspended", message="PyTorchJob big is suspended."
)


def suspended(*conditions: dict[str, Any], suspend: bool = True) -> dict[str, Any]:
    job = a_job(*conditions)
    job["spec"]["runPolicy"]["suspend"] = suspend
    return job


def test_a_suspended_job_is_suspended_as_its_condition_says_and_is_told_how_to_resume() -> None:
    job = suspended(condition("Running", "False", reason="PyTorchJobSuspended"), SUSPENDED)

    explained = explain(job, outlook=JobOutlook(job="team-vision/big"))

    assert (explained.state, explained.reason) == ("Suspended", "PyTorchJobSuspended")
    assert explained.message == "PyTorchJob big is suspended."
    assert explained.since == "2026-03-01T11:50:00Z"
    assert explained.to_json()["state"] == "Suspended"
    lines = render(explained, NOW)
    assert lines[0] == "PyTorchJob team-vision/big: Suspended (PyTorchJobSuspended)"
    assert (
        "  to resume: kubectl patch pytorchjob big -n team-vision --type merge "
        """-p '{"spec":{"runPolicy":{"suspend":false}}}' (it queues for admission again)"""
    ) in lines
    assert "  suspended: since 2026-03-01T11:50:00Z (10m ago)" in lines


@pytest.mark.parametrize(
    ("job", "state"),
    [
        (suspended(), "Suspended"),  # the controller has not written its condition yet
        (suspended(SUSPENDED, suspend=False), "Waiting"),  # resumed: queued for admission again
        (suspended(condition("Succeeded"), SUSPENDED), "Finished"),
        (
            suspended(condition("Running"), condition("Queued", reason="WaitingForQuota")),
            "Suspended",
        ),
    ],
    ids=["requested", "resuming", "finished-before", "queued-when-suspended"],
)
def test_the_spec_decides_whether_a_job_is_suspended_and_an_end_outranks_it(
    job: dict[str, Any], state: str
) -> None:
    explained = explain(job, outlook=None)

    assert explained.state == state
    assert state_of(job) == state
    assert ("to resume:" in "\n".join(render(explained, NOW))) == (state == "Suspended")


@pytest.mark.parametrize(
    ("manager", "outlook", "conditions", "elsewhere"),
    [
        # the controller's answer: unowned and no --manage-unowned -> it never acts on suspend
        (None, JobOutlook(job="team-vision/big", runs=False), (), "managedBy is unset"),
        # suspended by torchgate earlier, then run by a controller without --manage-unowned
        (None, JobOutlook(job="team-vision/big", runs=False), (SUSPENDED,), "managedBy is unset"),
        ("kubeflow.org/training-operator", None, (SUSPENDED,),
         "kubeflow.org/training-operator: that controller runs it"),
        (None, JobOutlook(job="team-vision/big", runs=True), (), None),  # --manage-unowned
        (None, None, (), None),  # no answer: a job naming no manager is taken as run
        (None, JobOutlook(job="team-vision/big"), (SUSPENDED,), None),  # an older controller
    ],
    ids=["unowned-strict", "unowned-strict-suspended-before", "other-manager", "manage-unowned",
         "no-answer", "older-controller"],
)  # fmt: skip
def test_whether_torchgate_runs_a_suspended_job_decides_what_it_is_told(
    manager: str | None,
    outlook: JobOutlook | None,
    conditions: tuple[dict[str, Any], ...],
    elsewhere: str | None,
) -> None:
    job = suspended(*conditions)
    if manager is not None:
        job["spec"]["runPolicy"]["managedBy"] = manager
    wire = None if outlook is None else outlook_from_json(outlook.to_json())

    explained = explain(job, outlook=wire)

    text = "\n".join(render(explained, NOW))
    assert explained.state == "Suspended"
    assert explained.to_json()["runs"] is (elsewhere is None)
    if elsewhere is None:
        assert not explained.message.startswith("torchgate does not run it"), explained.message
        assert "to resume:" in text
    else:
        assert explained.message.startswith("torchgate does not run it: "), explained.message
        assert elsewhere in explained.message
        assert "has not suspended it yet" not in text
        assert "to resume:" not in text
        assert explained.since == (SUSPENDED["lastTransitionTime"] if conditions else None)


def pulling(name: str, node: str | None, *, replica_type: str, index: int) -> dict[str, Any]:
    """A pod of ``big`` bound to ``node`` whose image does not pull (None: not bound yet)."""
    labels = {
        "training.kubeflow.org/replica-type": replica_type,
        "training.kubeflow.org/replica-index": str(index),
    }
    made = pod(name, node=node, phase="Pending", labels=labels)
    if node is not None:
        waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "trian:1"'}
        made["status"]["containerStatuses"] = [{"name": "pytorch", "state": {"waiting": waiting}}]
    return made


ADMITTED = a_job(condition("Created", reason="PyTorchJobCreated"))
PULLING = [
    pulling("big-worker-0", "a100-1", replica_type="worker", index=0),
    pulling("big-master-0", "a100-0", replica_type="master", index=0),
    pulling("big-worker-1", None, replica_type="worker", index=1),
    pod("big-worker-2", node="a100-2", phase="Running"),
]
NOT_STARTED = (
    "admitted; not started: big-master-0 on a100-0: ImagePullBackOff (Back-off pulling image "
    '"trian:1"); big-worker-0 on a100-1: ImagePullBackOff (Back-off pulling image "trian:1"); '
    "big-worker-1: on no node yet"
)


def test_an_admitted_job_whose_pods_exist_says_which_have_not_started_and_why() -> None:
    outlook = JobOutlook(
        job="team-vision/big",
        known=True,
        nodes={"big-master-0": "a100-0", "big-worker-0": "a100-1", "big-worker-1": "a100-1"},
    )

    explained = explain(ADMITTED, outlook=outlook, pods=PULLING)

    assert (explained.state, explained.reason) == ("Waiting", "")
    assert explained.message == NOT_STARTED
    assert render(explained, NOW)[1] == f"  {NOT_STARTED}"


def test_without_the_controller_an_admitted_job_is_explained_by_its_pods() -> None:
    explained = explain(ADMITTED, outlook=None, pods=PULLING, unanswered="no answer")

    assert explained.message == NOT_STARTED
    assert explained.nodes == {"big-master-0": "a100-0", "big-worker-0": "a100-1",
                               "big-worker-2": "a100-2"}  # fmt: skip


def test_an_admitted_job_with_no_pod_yet_has_its_pods_being_created() -> None:
    outlook = JobOutlook(job="team-vision/big", known=True, nodes={"big-master-0": "a100-0"})

    explained = explain(ADMITTED, outlook=outlook, pods=[])

    assert explained.message == "admitted: its pods are being created"

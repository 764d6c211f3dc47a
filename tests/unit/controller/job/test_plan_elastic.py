"""``plan()`` for an elastic job's Workers beyond ``minAvailable``: placed by the admitter only.

The admitter places an elastic gang's ``minAvailable`` pods together and its extras only where
they fit; an extra with no room, or one a scale asks for while the gang runs, is left out: it
neither restarts the running gang nor is created unplaced for kube-scheduler to bind later,
outside admission and quota. The Running condition names the Workers left out.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import job, with_uid
from tests.unit.controller.helpers import World
from torchgate.controller.job.model import ANNOTATION_ATTEMPT

W0, W1, W2 = "el-worker-0", "el-worker-1", "el-worker-2"
PLACED = {W0: "n1", W1: "n2"}


def elastic_world(workers: int) -> World:
    built = job("el").workers(workers, gpus=8).elastic(minReplicas=1, maxReplicas=4)
    return World(with_uid(built.scheduling(minAvailable=1).build()))


def running(world: World, reservation: dict[str, str]) -> World:
    world.apply(world.plan())
    world.apply(world.plan(reservation=reservation))
    for name in list(world.pods):
        world.run(name, node=reservation[name])
    world.apply(world.plan(reservation=reservation))
    return world


def scale(world: World, workers: int) -> None:
    world.job_raw["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers


def running_message(world: World) -> str:
    (found,) = [c for c in world.job_raw["status"]["conditions"] if c["type"] == "Running"]
    assert found["status"] == "True"
    message: str = found["message"]
    return message


def attempt(world: World) -> str | None:
    annotations: dict[str, Any] = world.job_raw["metadata"].get("annotations", {})
    return annotations.get(ANNOTATION_ATTEMPT)


def test_admission_creates_only_the_extras_the_admitter_placed() -> None:
    world = elastic_world(3)
    world.apply(world.plan())

    admitted = world.plan(reservation=PLACED)

    assert sorted(p["metadata"]["name"] for p in admitted.create_pods) == [W0, W1]


def test_an_extra_left_out_at_admission_does_not_break_the_running_gang() -> None:
    world = running(elastic_world(3), PLACED)

    result = world.plan()  # the reservation settled: the admitter no longer names the pods

    assert (result.delete_pods, result.create_pods, result.attempt) == ((), (), None)
    assert sorted(world.pods) == [W0, W1]
    assert W2 in running_message(world)


def test_a_scale_up_while_running_neither_restarts_the_gang_nor_creates_unplaced_pods() -> None:
    world = running(elastic_world(2), PLACED)
    before = attempt(world)
    scale(world, 3)

    for reservation in (PLACED, None):  # the reservation still held, or settled
        result = world.plan(reservation=reservation)
        world.apply(result)
        assert (result.delete_pods, result.create_pods, result.attempt) == ((), (), None)

    assert attempt(world) == before
    assert sorted(world.pods) == [W0, W1]
    assert W2 in running_message(world)


def test_a_scale_down_deletes_the_highest_workers_and_keeps_the_gang() -> None:
    world = running(elastic_world(2), PLACED)
    scale(world, 1)

    result = world.plan()

    assert (result.delete_pods, result.create_pods, result.attempt) == ((W1,), (), None)
    world.apply(result)
    assert running_message(world) == "PyTorchJob default/el is running."


# ------------------------------------------------------------------ growth (``ledger`` rule 7)


def planned_node(manifest: dict[str, Any]) -> str | None:
    node: str | None = manifest["metadata"].get("annotations", {}).get("torchgate.io/planned-node")
    return node


def test_a_running_gang_asks_the_admitter_for_its_waiting_workers() -> None:
    world = running(elastic_world(2), PLACED)
    scale(world, 3)

    result = world.plan()

    assert [demand.pod_name for demand in result.growth] == [W2]
    world.apply(result)
    assert "waiting for the admitter" in running_message(world)


@pytest.mark.parametrize(
    ("wait", "said"),
    [("Capacity", "waiting for room"), ("Quota", "waiting for quota")],
    ids=["no-room", "over-quota"],
)
def test_the_running_condition_says_what_the_waiting_workers_wait_for(wait: str, said: str) -> None:
    world = running(elastic_world(2), PLACED)
    scale(world, 3)

    world.apply(world.plan(growth_wait=wait))

    assert said in running_message(world)


def test_a_gang_with_no_worker_waiting_asks_for_no_growth() -> None:
    world = running(elastic_world(2), PLACED)

    assert world.plan().growth == ()


def test_a_growth_reservation_creates_the_worker_there_without_a_restart() -> None:
    world = running(elastic_world(2), PLACED)
    before = attempt(world)
    first_two = {name: dict(world.pods[name]["metadata"]) for name in (W0, W1)}
    scale(world, 3)

    result = world.plan(reservation={W2: "n3"})

    assert [planned_node(p) for p in result.create_pods] == ["n3"]
    assert [p["metadata"]["name"] for p in result.create_pods] == [W2]
    assert (result.delete_pods, result.attempt, result.growth) == ((), None, ())
    world.apply(result)
    world.run(W2, node="n3")
    world.apply(world.plan())
    assert attempt(world) == before
    assert {name: world.pods[name]["metadata"] for name in (W0, W1)} == first_two  # not deleted
    assert running_message(world) == "PyTorchJob default/el is running."


def test_the_workers_created_beyond_min_available_are_named_as_extras() -> None:
    world = elastic_world(3)
    world.apply(world.plan())

    admitted = world.plan(reservation={W0: "n1", W1: "n2", W2: "n3"})

    assert admitted.extras == (W1, W2), "the apiserver may refuse these without breaking it"


def test_the_running_condition_gives_the_apiservers_refusal_of_the_waiting_workers() -> None:
    world = running(elastic_world(2), PLACED)
    scale(world, 3)
    refusal = 'pods "el-worker-2" is forbidden: exceeded quota: gpu-quota'

    world.apply(world.plan(growth_wait="Refused", growth_refusal=refusal))

    assert W2 in running_message(world)
    assert refusal in running_message(world)


def test_a_member_missing_beside_a_growth_reservation_still_breaks_the_gang() -> None:
    world = running(elastic_world(2), PLACED)
    scale(world, 3)
    del world.pods[W0]  # the required member is gone; the reservation names only the new one

    result = world.plan(reservation={W2: "n3"})

    assert result.attempt is not None  # a new gang attempt: the gang is restarted whole
    assert all(planned_node(p) is not None for p in result.create_pods)


def test_a_scale_down_before_the_reserved_worker_was_created_drops_it_from_the_reservation() -> (
    None
):
    world = running(elastic_world(2), PLACED)
    scale(world, 3)
    world.apply(world.plan())
    scale(world, 2)  # back down before the admitter's reservation of el-worker-2 was acted on

    result = world.plan(reservation={W2: "n3"})

    assert (result.unreserve, result.create_pods, result.delete_pods) == ((W2,), (), ())
    assert result.attempt is None

"""Replica names: the length the webhook checks is the length of the name the controller builds."""

from __future__ import annotations

import pytest

from torchgate.pytorchjob import names


@pytest.mark.parametrize(
    ("job_name", "replica_type", "index"),
    [
        ("resnet50-ddp", names.MASTER, 0),
        ("resnet50-ddp", names.WORKER, 14),
        ("a/b", names.WORKER, 1_000_000),  # "/" becomes "-": the same length
        ("x" * 60, names.MASTER, 9),
    ],
    ids=["master", "worker", "slash", "long"],
)
def test_replica_name_length_is_the_length_of_the_replica_name(
    job_name: str, replica_type: str, index: int
) -> None:
    built = names.replica_name(job_name, replica_type, index)
    assert names.replica_name_length(job_name, replica_type, index) == len(built)


@pytest.mark.parametrize(
    ("name", "can_be"),
    [
        ("train-1", True),
        ("a.b", True),
        ("a" * 253, True),  # one part longer than a label: the apiserver takes it for a resource
        ("a" * 254, False),
        ("Train", False),
        (".", False),
        ("..", False),
        ("a_b", False),
        ("", False),
    ],
)
def test_a_resource_name_is_what_the_apiserver_takes_for_a_custom_resource(
    name: str, can_be: bool
) -> None:
    assert (names.resource_name_problem(name) is None) is can_be

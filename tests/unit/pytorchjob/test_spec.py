"""``parse_job``: what the controller reads of a job, and the jobs it refuses to run."""

from __future__ import annotations

import pytest

from tests.builders.job import cpu_job, job
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.spec import parse_job


def test_a_worker_count_at_the_ceiling_is_read() -> None:
    spec, errors = parse_job(job().master().workers(100_000).build())
    assert errors == []
    assert spec is not None
    assert spec.total_replicas == 100_001


@pytest.mark.parametrize(
    "replicas", [100_001, 2**31 - 1, 2**70], ids=["ceiling+1", "int32", "2^70"]
)
def test_more_workers_than_the_ceiling_is_an_invalid_job(replicas: int) -> None:
    # a job that bypassed the webhook: planning its pods one by one would stall the controller
    spec, errors = parse_job(cpu_job().workers(replicas).build())
    assert spec is None
    assert [(e.type, e.field) for e in errors] == [
        (ErrorType.INVALID, "spec.pytorchReplicaSpecs[Worker].replicas")
    ]

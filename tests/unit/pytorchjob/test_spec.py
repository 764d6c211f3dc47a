"""``parse_job``: what the controller reads of a job, and the jobs it refuses to run."""

from __future__ import annotations

from typing import Any

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


# A job that bypassed the webhook: the apiserver stores a PyTorchJob under any DNS-1123 subdomain,
# but every pod and Service of it would be refused (422), and the controller retried forever.
@pytest.mark.parametrize(
    ("name", "build", "error"),
    [
        ("j" * 55, lambda b: b.master(), ErrorType.TOO_LONG),  # j...j-master-0: 64
        ("j" * 54, lambda b: b.master().workers(10), None),  # j...j-worker-9: 63
        ("j" * 54, lambda b: b.master().workers(11), ErrorType.TOO_LONG),  # j...j-worker-10
        ("j" * 54, lambda b: b.workers(2).elastic(maxReplicas=11), ErrorType.TOO_LONG),
        ("j" * 54, lambda b: b.workers(2).elastic(maxReplicas=10), None),
        ("train.v2", lambda b: b.master(), ErrorType.INVALID),  # no dot in a Service name
        ("2nd-run", lambda b: b.master(), ErrorType.INVALID),
    ],
    ids=["master-64", "worker-63", "worker-64", "elastic-max-64", "elastic-max-63", "dot", "digit"],
)
def test_a_name_its_pods_and_services_cannot_carry_is_an_invalid_job(
    name: str, build: Any, error: ErrorType | None
) -> None:
    spec, errors = parse_job(build(job(name)).build())
    found = [(e.type, e.field) for e in errors]
    assert found == ([] if error is None else [(error, "metadata.name")])
    assert (spec is None) == (error is not None)

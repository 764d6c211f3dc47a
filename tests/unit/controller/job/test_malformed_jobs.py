"""Any value anywhere in a real-world job: the controller reads it or refuses it, never raises.

A job that bypassed the webhook (installed later, or failing open) reaches the controller as the
apiserver stored it: the CRD types few fields and keeps pod templates as given. So each of the
real-world jobs, as written and as the webhook defaults them, has one value replaced by a wrong
one; ``parse_job`` either refuses it with field errors (the reconciler records them and stops),
or ``plan`` answers, before admission and with a reservation (pods, env and Services built).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given

from tests.unit.controller.helpers import NOW
from tests.unit.realworld import BROKEN_JOB_SETTINGS, REALWORLD_JOBS, broken_jobs
from torchgate.controller.admission.nodes import job_demands
from torchgate.controller.job.model import Observed, expected_pods
from torchgate.controller.job.plan import plan
from torchgate.pytorchjob.devices import plain_sources
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.pytorchjob.spec import parse_job
from torchgate.webhook.review import evaluate


def stored(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with what the apiserver adds (uid, creation time, a namespace)."""
    job = copy.deepcopy(job)
    metadata = job.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    metadata |= {"uid": "uid-1", "creationTimestamp": "2026-02-01T00:00:00Z"}
    return job


JOBS = [(name, stored(job)) for name, job in REALWORLD_JOBS] + [
    (f"{name} defaulted", stored(evaluate(job, DEFAULT_POLICY).object))
    for name, job in REALWORLD_JOBS
]


@BROKEN_JOB_SETTINGS
@given(broken_jobs(JOBS))
def test_a_broken_job_is_refused_or_planned(raw: dict[str, Any]) -> None:
    spec, errors = parse_job(raw)
    if spec is None:
        assert errors
        assert all(str(error) for error in errors)
        return
    assert errors == []
    job_demands(spec, plain_sources("nvidia.com/gpu"))
    plan(Observed(job_raw=raw, job=spec, now=NOW, progress_deadline_seconds=600))
    reservation = dict.fromkeys(expected_pods(spec), "n1")
    created = plan(Observed(job_raw=raw, job=spec, now=NOW, reservation=reservation))
    assert len(created.create_pods) <= len(reservation)

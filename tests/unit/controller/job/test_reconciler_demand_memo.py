"""The reconciler's memo of a job's gang demands: reused while the spec is the same, never stale."""

from __future__ import annotations

from typing import Any

from tests.builders.job import gpu_job, parsed_job, with_uid
from tests.unit.controller.helpers import NOW
from torchgate.controller.admission.nodes import PodDemand, job_demands
from torchgate.controller.job.model import Observed
from torchgate.controller.job.plan import plan
from torchgate.controller.job.reconciler import DemandMemo
from torchgate.pytorchjob import names

KEY = ("default", "demo")
GPU = "nvidia.com/gpu"


def demands(memo: DemandMemo, raw: dict[str, Any]) -> tuple[PodDemand, ...]:
    return memo.function_for(KEY, raw)(parsed_job(raw))


def test_same_spec_reuses_the_demands_it_computed() -> None:
    memo = DemandMemo()
    raw = with_uid(gpu_job(workers=3, gpus=2).build())
    first = demands(memo, raw)
    # A status write or resync hands the reconciler a new dict with the same spec.
    again = demands(memo, with_uid(gpu_job(workers=3, gpus=2).build()))
    assert again is first
    assert first == job_demands(parsed_job(raw))


def test_an_edited_spec_gets_new_demands() -> None:
    memo = DemandMemo()
    demands(memo, with_uid(gpu_job(workers=3, gpus=2).build()))
    edited = demands(memo, with_uid(gpu_job(workers=1, gpus=4).build()))
    assert [d.pod_name for d in edited] == ["demo-master-0", "demo-worker-0"]
    assert {d.requests[GPU] for d in edited} == {4000}


def test_pinned_hosts_annotation_is_part_of_the_key() -> None:
    memo = DemandMemo()
    demands(memo, with_uid(gpu_job().build()))
    pinned = with_uid(gpu_job().annotate(names.ANNOTATION_HOSTS, "gpu-1,gpu-2").build())
    assert {d.pinned_hosts for d in demands(memo, pinned)} == {("gpu-1", "gpu-2")}


def test_a_recreated_job_with_a_new_uid_is_not_confused_with_the_old_one() -> None:
    memo = DemandMemo()
    first = demands(memo, with_uid(gpu_job().build(), "uid-1"))
    second = demands(memo, with_uid(gpu_job().build(), "uid-2"))
    assert second is not first


def test_forget_drops_the_entry() -> None:
    memo = DemandMemo()
    demands(memo, with_uid(gpu_job().build()))
    assert len(memo) == 1
    memo.forget(KEY)
    assert len(memo) == 0


def test_an_object_that_is_not_plain_json_is_computed_without_memoising() -> None:
    memo = DemandMemo()
    raw = with_uid(gpu_job().build())
    raw["spec"]["odd"] = {1: "a non-string key"}  # only hand-built objects can hold this
    assert demands(memo, raw) == job_demands(parsed_job(raw))
    assert len(memo) == 0


def test_plan_takes_its_demands_from_the_given_function() -> None:
    raw = with_uid(gpu_job(workers=1).build())
    asked: list[str] = []

    def demands_of(spec: Any) -> tuple[PodDemand, ...]:
        asked.append(spec.name)
        return job_demands(spec)

    decision = plan(Observed(job_raw=raw, job=parsed_job(raw), now=NOW, demands_of=demands_of))
    assert decision.needs_admission
    assert asked == ["demo"]
    assert decision.demands == job_demands(parsed_job(raw))

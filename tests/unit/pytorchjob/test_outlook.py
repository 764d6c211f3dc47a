"""The pool service's answers: the wire format both sides read, the warning, the place phrase.

Agreement tests: what the controller builds (``forecasting``) is what the webhook and the command
line parse back (``*_from_json``), and the reason a forecast or an outlook gives for a wait kind
is the reason the controller writes into the job's ``Queued`` condition for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.builders.job import gpu_job, job
from tests.builders.node import node
from tests.builders.team import parsed_team
from tests.unit.controller.helpers import World, ask, candidate
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.forecasting import forecast, job_outlook, pool_view
from torchgate.controller.admission.topology import build_topology
from torchgate.controller.job import status as st
from torchgate.pytorchjob import reasons
from torchgate.pytorchjob.outlook import (
    DomainView,
    Forecast,
    Gang,
    JobOutlook,
    MalformedAnswer,
    NodeProblem,
    Place,
    PoolView,
    Preemptor,
    QueueEntry,
    TeamView,
    forecast_from_json,
    forecast_warning,
    outlook_from_json,
    place_phrase,
    pool_from_json,
    queued_message,
)

G = 1000
PLACE = Place(
    pool=3,
    pool_size=7,
    team="vision",
    team_position=1,
    team_size=2,
    cohort="h100",
    cohort_position=2,
    cohort_size=4,
    ahead_jobs=2,
    ahead_gpus=24 * G,
)


def admitter_with(nodes: int, teams: dict[str, Any] | None = None) -> Admitter:
    admitter = Admitter(
        on_admit_job=lambda key: None, on_reason=lambda key: None, teams=lambda: teams or {}
    )
    for index in range(nodes):
        admitter.on_node("ADDED", node(f"n{index}"), None)
    return admitter


# ------------------------------------------------------------------ the wire format


@pytest.mark.parametrize(
    "answer",
    [
        Forecast("Start", nodes={"a-master-0": "n0"}, domain="rack=r1", borrows={"gpus": 8 * G}),
        Forecast(
            "Preempt",
            nodes={"a-master-0": "n0"},
            preempts=(Gang("ns/low", 8 * G, 100, "speech"), Gang("ns/low2", 500, -3)),
            reason="WaitingForPreemption",
        ),
        Forecast("Wait", reason="WaitingForQuota", message="m", place=PLACE, team="v", cohort="c"),
    ],
    ids=["start", "preempt", "wait"],
)
def test_a_forecast_reads_back_as_it_was_written(answer: Forecast) -> None:
    assert forecast_from_json(answer.to_json()) == answer


def test_an_outlook_and_a_pool_view_read_back_as_they_were_written() -> None:
    outlook = JobOutlook(
        job="ns/a",
        known=True,
        waiting=True,
        kind="Quota",
        reason="WaitingForQuota",
        message="m",
        place=PLACE,
        must_end=(Gang("ns/b", 4 * G, 0),),
        nodes={"a-master-0": "n1"},
        domains=("rack=r1",),
        admitted_at="2026-01-01T00:00:00Z",
        team="vision",
        priority=7,
        gpus=16 * G,
    )
    view = PoolView(
        gpu_resource="nvidia.com/gpu",
        teams=(TeamView("v", "c", 16 * G, None, 8 * G, 0, 0, 1, 2, 16 * G, 12.5),),
        domains=(DomainView("rack", "r1", 2, 16 * G, 8 * G, 8 * G),),
        unusable_nodes=(NodeProblem("n9", "NotReady", "2026-11-26T10:00:00Z"),),
        queue=(QueueEntry("ns/a", 1, "v", 7, 16 * G, "Quota", "WaitingForQuota", "m", 12.5),),
        waiting_jobs=1,
        total_gpus=16 * G,
        used_gpus=8 * G,
    )

    assert outlook_from_json(outlook.to_json()) == outlook
    assert pool_from_json(view.to_json()) == view


def test_preemptors_read_back_and_a_pool_view_from_an_older_controller_has_none() -> None:
    view = PoolView(
        gpu_resource="nvidia.com/gpu",
        waiting_jobs=1,
        preempting=(Preemptor("ns/p", "v", 8 * G, ("ns/low-1", "ns/low-2")),),
    )

    assert pool_from_json(view.to_json()) == view
    older = {key: value for key, value in view.to_json().items() if key != "preempting"}
    assert pool_from_json(older).preempting == ()


def test_an_unplaceable_outlook_reads_back_and_one_from_an_older_controller_is_placeable() -> None:
    lost = JobOutlook(job="ns/a", known=True, waiting=True, placeable=False)

    assert outlook_from_json(lost.to_json()) == lost
    older = {key: value for key, value in lost.to_json().items() if key != "placeable"}
    assert outlook_from_json(older).placeable is True


@pytest.mark.parametrize("runs", [True, False])
def test_whether_the_controller_runs_a_job_reads_back_and_an_older_ones_is_not_known(
    runs: bool,
) -> None:
    outlook = JobOutlook(job="ns/a", runs=runs)

    assert outlook_from_json(outlook.to_json()) == outlook
    older = {key: value for key, value in outlook.to_json().items() if key != "runs"}
    assert outlook_from_json(older).runs is None
    with pytest.raises(MalformedAnswer):
        outlook_from_json({**outlook.to_json(), "runs": "yes"})


def test_what_the_controller_builds_is_what_the_readers_parse() -> None:
    teams = {"vision": parsed_team("vision", 8, 0, namespaces=["team-vision"])}
    admitter = admitter_with(2, teams)
    running = ask(admitter, gpu_job("run", namespace="team-vision", workers=0, gpus=8).build())
    admitter.cycle()
    waiting = ask(admitter, job("wait", "team-vision").master(gpus=8).build())
    admitter.cycle()
    snapshot, gang = admitter.snapshot(candidate(job("new").master(gpus=8).build()))
    assert gang is not None

    built = [forecast(snapshot, gang), job_outlook(snapshot, waiting), pool_view(snapshot)]
    readers = [forecast_from_json, outlook_from_json, pool_from_json]

    for answer, read in zip(built, readers, strict=True):
        assert read(answer.to_json()) == answer
    assert job_outlook(snapshot, running).known


@pytest.mark.parametrize(
    "raw",
    [None, [], {"verdict": "Maybe"}, {"verdict": "Start", "nodes": {"p": 3}}],
    ids=["null", "list", "unknown-verdict", "node-not-a-string"],
)
def test_an_answer_of_another_shape_is_malformed(raw: Any) -> None:
    with pytest.raises(MalformedAnswer):
        forecast_from_json(raw)


# Every field of every answer filled, so a value changed anywhere in it is read.
FULL_ANSWERS: list[tuple[Callable[[Any], object], dict[str, Any]]] = [
    (
        forecast_from_json,
        Forecast(
            "Wait",
            nodes={"a-master-0": "n0"},
            preempts=(Gang("ns/low", 8 * G, 1, "speech"),),
            borrows={"gpus": G},
            reason="WaitingForQuota",
            message="m",
            place=PLACE,
            team="vision",
            cohort="h100",
        ).to_json(),
    ),
    (
        outlook_from_json,
        JobOutlook(
            job="ns/a",
            known=True,
            waiting=True,
            place=PLACE,
            must_end=(Gang("ns/b", G, 2, "speech"),),
            ending_lets_start=(Gang("ns/c", G, 2),),
            preempting=("ns/d",),
            starts_if_cleared=("n9",),
            nodes={"a-master-0": "n0"},
            domains=("rack=r1",),
            admitted_at="2026-01-01T00:00:00Z",
            team="vision",
            priority=1,
            gpus=G,
            runs=True,
        ).to_json(),
    ),
    (
        pool_from_json,
        PoolView(
            gpu_resource="nvidia.com/gpu",
            teams=(TeamView("v", "c", 16 * G, None, 8 * G, 0, 0, 1, 2, 16 * G, 12.5),),
            domains=(DomainView("rack", "r1", 2, 16 * G, 8 * G, 8 * G),),
            unusable_nodes=(NodeProblem("n9", "NotReady", "2026-11-26T10:00:00Z"),),
            queue=(QueueEntry("ns/a", 1, "v", 7, 16 * G, "Quota", "WaitingForQuota", "m", 12.5),),
            waiting_jobs=1,
            total_gpus=16 * G,
            used_gpus=8 * G,
            preempting=(Preemptor("ns/p", "v", 8 * G, ("ns/b",)),),
        ).to_json(),
    ),
]
# What JSON can hold (orjson refuses NaN and Infinity, but not 1e308).
JSON_SCALARS = (
    hs.none()
    | hs.booleans()
    | hs.integers()
    | hs.floats(allow_nan=False, allow_infinity=False)
    | hs.sampled_from([1e308, -1e308])
    | hs.text(max_size=4)
)
JSON_VALUES = hs.recursive(
    JSON_SCALARS,
    lambda inner: (
        hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield from _paths(child, (*prefix, key))


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replaced(value[head], tuple(rest), new)
    return copy


@settings(max_examples=1500, deadline=None)
@given(hs.data())
def test_an_answer_with_any_field_of_any_json_value_is_read_or_malformed_never_a_crash(
    data: hs.DataObject,
) -> None:
    read, answer = data.draw(hs.sampled_from(FULL_ANSWERS))
    path = data.draw(hs.sampled_from(list(_paths(answer))))
    changed = _replaced(answer, path, data.draw(JSON_VALUES))

    with contextlib.suppress(MalformedAnswer):  # anything else escapes: a crash
        read(changed)


@pytest.mark.parametrize(
    ("read", "raw"),
    [
        (forecast_from_json, {"verdict": "Wait", "place": {**PLACE.to_json(), "team": {}}}),
        (forecast_from_json, {"verdict": "Start", "borrows": {"gpus": 1e308}}),
        (pool_from_json, {"teams": [{**FULL_ANSWERS[2][1]["teams"][0], "longestWaitSeconds": {}}]}),
        (pool_from_json, {"queue": [{**FULL_ANSWERS[2][1]["queue"][0], "waitingSeconds": "5s"}]}),
    ],
    ids=["team-without-name", "gpus-past-float", "longest-wait-an-object", "waited-a-string"],
)
def test_answers_that_crashed_the_readers_are_malformed(
    read: Callable[[Any], object], raw: Any
) -> None:
    with pytest.raises(MalformedAnswer):
        read(raw)


# ------------------------------------------------------------------ the reasons agree


@pytest.mark.parametrize("kind", sorted(reasons.QUEUED_REASONS))
def test_the_reason_for_a_wait_kind_is_the_queued_condition_the_controller_writes(
    kind: str,
) -> None:
    world = World(job("demo").master(gpus=1).build())

    result = world.plan(wait_reason="waiting", wait_kind=kind)

    assert result.status is not None
    queued = st.find_condition(result.status["conditions"], reasons.QUEUED)
    assert queued is not None
    assert queued["reason"] == reasons.QUEUED_REASONS[kind]


# ------------------------------------------------------------------ words


def test_the_warning_says_where_it_starts_what_it_borrows_and_whom_it_preempts() -> None:
    start = Forecast(
        "Start",
        nodes={"a-master-0": "a100-0", "a-worker-0": "a100-0", "a-worker-1": "a100-1"},
        domain="topology.torchgate.io/rack=r1",
        borrows={"gpus": 8 * G},
        cohort="h100",
    )
    assert forecast_warning(start) == (
        "torchgate: will start now on a100-0, a100-1 (topology.torchgate.io/rack=r1); "
        "borrows 8 GPUs of cohort h100's idle quota"
    )
    alone = Forecast("Start", nodes={"a": "n1"}, domain="kubernetes.io/hostname=n1")
    assert forecast_warning(alone) == "torchgate: will start now on n1"
    unlabelled = Forecast("Start", nodes={"a": "real-0"}, domain=sole_node_domain("real-0"))
    assert forecast_warning(unlabelled) == "torchgate: will start now on real-0"
    preempt = Forecast(
        "Preempt",
        nodes={"a": "n1", "b": "n2"},
        preempts=(Gang("team-speech/low-3", 8 * G, 100),),
        domain="the pool",
    )
    assert forecast_warning(preempt) == (
        "torchgate: will preempt team-speech/low-3 (8 GPUs, priority 100), then start on n1, n2"
    )


def sole_node_domain(node: str) -> str:
    """How the controller names ``node``'s own domain when it has no label for a level."""
    topology = build_topology(["topology.torchgate.io/rack"], [(node, {})])
    (level,) = topology.by_rank
    (domain,) = level
    return topology.domain_name(domain)


@pytest.mark.parametrize(
    ("message", "warning"),
    [
        (
            "waiting for 16 nvidia.com/gpu in pool pool=a100: 8 free",
            "torchgate: will wait for 16 nvidia.com/gpu in pool pool=a100: 8 free",
        ),
        (
            "team vision is at its quota (16/16 GPUs; may borrow 0 more); the job needs 8 GPUs",
            "torchgate: will wait: team vision is at its quota (16/16 GPUs; may borrow 0 more); "
            "the job needs 8 GPUs",
        ),
    ],
    ids=["capacity", "quota"],
)
def test_a_wait_warning_reads_as_a_sentence(message: str, warning: str) -> None:
    assert forecast_warning(Forecast("Wait", message=message)) == warning


def test_long_lists_are_cut_so_the_apiserver_keeps_the_warning_whole() -> None:
    nodes = {f"p{i}": f"node-{i}" for i in range(40)}
    victims = tuple(Gang(f"ns/victim-{i}", G, 0) for i in range(10))

    warning = forecast_warning(Forecast("Preempt", nodes=nodes, preempts=victims))

    assert "and 34 more" in warning
    assert "and 7 more" in warning
    assert len(warning) < 256


def test_the_place_reads_first_then_the_reason() -> None:
    assert place_phrase(PLACE) == (
        "#3 of 7 in the pool (team vision #1 of 2, cohort h100 #2 of 4), 2 jobs (24 GPUs) ahead"
    )
    assert queued_message(PLACE, "why").endswith("ahead: why")
    assert queued_message(None, "why") == "why"
    assert place_phrase(Place(pool=1, pool_size=1)) == "#1 of 1 in the pool, nothing ahead"

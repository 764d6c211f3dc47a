"""Forecasts, places, what must end, one job's outlook and the pool view, from the admitter.

Every forecast is checked against what the admitter's next cycle then does with the same job
(the forecast is the decision, not an estimate), and asking is checked to change nothing.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.builders.job import gpu_job, job
from tests.builders.node import BLOCK, RACK, labelled, node
from tests.builders.pod import pod
from tests.builders.policy import pool_settings
from tests.builders.team import parsed_team
from tests.unit.controller.helpers import ask, candidate
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.forecasting import (
    QueuedJob,
    ending_lets_start,
    forecast,
    job_outlook,
    must_end,
    pool_view,
    rank,
)
from torchgate.pytorchjob.outlook import forecast_warning, place_phrase
from torchgate.pytorchjob.pool import GPUS, PoolSettings, TeamQuota

G = 1000  # milli-units per GPU
TOPOLOGY = pool_settings(topology={"levels": [BLOCK, RACK, "kubernetes.io/hostname"]})
# Two blocks of one rack of two 8-GPU hosts: b1/r1: h1 h2; b2/r2: h3 h4.
HOSTS = labelled({"b1": {"r1": ["h1", "h2"]}, "b2": {"r2": ["h3", "h4"]}}, (BLOCK, RACK))


class Clocks:
    def __init__(self) -> None:
        self.now = 100.0
        self.wall = 1_000_000.0


def make(
    nodes: list[dict[str, Any]],
    *,
    teams: dict[str, TeamQuota] | None = None,
    settings: list[PoolSettings] | None = None,
    starvation: float = 300.0,
) -> tuple[Admitter, Clocks]:
    clocks = Clocks()
    admitter = Admitter(
        on_admit_job=lambda key: None,
        on_reason=lambda key: None,
        teams=lambda: teams or {},
        pool_settings=lambda: settings or [],
        starvation_seconds=starvation,
        clock=lambda: clocks.now,
        wall_clock=lambda: clocks.wall,
    )
    for raw in nodes:
        admitter.on_node("ADDED", raw, None)
    return admitter, clocks


def racked() -> list[dict[str, Any]]:
    return [node(name, labels=labels) for name, labels in HOSTS]


def run(admitter: Admitter, key: tuple[str, str]) -> None:
    """The admitted gang's pods show up Running where they were reserved."""
    reservation = admitter.ledger.reservations[key]
    for name, node_name in reservation.nodes.items():
        gpus = reservation.requests[name].get("nvidia.com/gpu", 0) // G
        admitter.on_pod("ADDED", pod(name, gang=key, node=node_name, gpus=gpus), None)
    admitter.free()


def state_of(admitter: Admitter) -> Any:
    """What a forecast must not change: the queue, reservations, holds, evictions."""
    return copy.deepcopy(
        (
            {key: (w.since, w.reported_reason) for key, w in admitter.queue.waiting.items()},
            dict(admitter.ledger.reservations),
            dict(admitter.ledger.holds),
            dict(admitter.ledger.evicting),
        )
    )


# ------------------------------------------------------------------ forecasts agree with cycles


def test_a_job_that_fits_is_forecast_to_start_where_the_next_cycle_puts_it() -> None:
    admitter, _ = make(racked(), settings=[TOPOLOGY])
    raw = gpu_job("fits", workers=1, gpus=8).build()

    snapshot, gang = admitter.snapshot(candidate(raw))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert (told.verdict, told.starts_now) == ("Start", True)
    assert told.domain == f"{RACK}=r1"
    key = ask(admitter, raw)
    assert admitter.cycle() == [key]
    assert dict(told.nodes) == dict(admitter.ledger.reservations[key].nodes)


def test_asking_for_a_forecast_changes_nothing_the_cycle_decides() -> None:
    admitter, _ = make(racked()[:1])
    running = ask(admitter, job("running").master(gpus=8).build())
    admitter.cycle()
    run(admitter, running)
    waiting = ask(admitter, job("waiting").master(gpus=8).build())
    admitter.cycle()
    before = state_of(admitter)

    for _ in range(3):
        snapshot, gang = admitter.snapshot(candidate(job("other").master(gpus=1).build()))
        assert gang is not None
        forecast(snapshot, gang)
        job_outlook(snapshot, waiting)
        pool_view(snapshot)

    assert state_of(admitter) == before
    assert admitter.cycle() == []


def test_a_high_priority_job_is_forecast_to_preempt_exactly_the_gangs_the_cycle_preempts() -> None:
    admitter, _ = make(racked())
    lows = []
    for index in range(4):
        low = ask(admitter, job(f"low{index}").master(gpus=8).build(), priority=index)
        admitter.cycle()
        run(admitter, low)
        lows.append(low)
    raw = gpu_job("urgent", workers=1, gpus=8).build()

    snapshot, gang = admitter.snapshot(candidate(raw, priority=100))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert told.verdict == "Preempt"
    assert [g.job for g in told.preempts] == ["default/low0", "default/low1"]
    assert [(g.gpus, g.priority) for g in told.preempts] == [(8 * G, 0), (8 * G, 1)]
    urgent = ask(admitter, raw, priority=100)
    admitter.cycle()
    assert admitter.ledger.holds[urgent].victims == (lows[0], lows[1])
    assert dict(admitter.ledger.holds[urgent].reservation.nodes) == dict(told.nodes)


def test_a_forecast_preemption_names_the_domain_its_nodes_share() -> None:
    admitter, _ = make(racked(), settings=[TOPOLOGY])
    for index in range(4):
        low = ask(admitter, job(f"low{index}").master(gpus=8).build(), priority=index)
        admitter.cycle()
        run(admitter, low)
    raw = gpu_job("urgent", workers=1, gpus=8).build()

    snapshot, gang = admitter.snapshot(candidate(raw, priority=100))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert told.verdict == "Preempt"
    racks = {{"h1": "r1", "h2": "r1", "h3": "r2", "h4": "r2"}[node] for node in told.nodes.values()}
    assert len(told.nodes) == 2
    assert len(racks) == 1
    (rack,) = racks
    assert told.domain == f"{RACK}={rack}"
    assert f"({RACK}={rack})" in forecast_warning(told)


def test_a_job_over_its_teams_quota_is_forecast_to_wait_with_the_teams_numbers() -> None:
    teams = {"vision": parsed_team("vision", 8, 0, namespaces=["team-vision"])}
    admitter, _ = make(racked(), teams=teams)
    first = ask(admitter, job("first", "team-vision").master(gpus=8).build())
    admitter.cycle()
    run(admitter, first)

    snapshot, gang = admitter.snapshot(candidate(job("more", "team-vision").master(gpus=8).build()))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert (told.verdict, told.reason) == ("Wait", "WaitingForQuota")
    assert told.message == (
        "team vision is at its quota (8/8 GPUs; may borrow 0 more); the job needs 8 GPUs"
    )
    assert told.place is not None
    assert (told.place.pool, told.place.team, told.place.team_position) == (1, "vision", 1)


def test_a_job_of_a_team_being_deleted_is_forecast_to_wait_as_the_cycle_does() -> None:
    teams = {"vision": parsed_team("vision", 8, namespaces=["team-vision"], deleting=True)}
    admitter, _ = make(racked(), teams=teams)
    raw = job("new", "team-vision").master(gpus=8).build()

    snapshot, gang = admitter.snapshot(candidate(raw))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert (told.verdict, told.reason) == ("Wait", "WaitingForQuota")
    key = ask(admitter, raw)
    assert admitter.cycle() == []
    assert admitter.wait_kind(key) == "Quota"


def test_a_job_that_needs_a_whole_rack_waits_for_topology_and_says_how_much_fits() -> None:
    admitter, _ = make(racked(), settings=[TOPOLOGY])
    spread = ask(admitter, job("spread").master(gpus=8).hosts("h1").build())
    admitter.cycle()
    run(admitter, spread)
    raw = gpu_job("rack", workers=1, gpus=8).build()

    snapshot, gang = admitter.snapshot(candidate(raw, topology=(BLOCK, True)))
    assert gang is not None
    first = forecast(snapshot, gang)
    assert first.verdict == "Start"
    assert set(first.nodes.values()) == {"h3", "h4"}

    other = ask(admitter, job("other").master(gpus=8).hosts("h3").build())
    admitter.cycle()
    run(admitter, other)
    snapshot, gang = admitter.snapshot(candidate(raw, topology=(BLOCK, True)))
    assert gang is not None
    told = forecast(snapshot, gang)
    assert (told.verdict, told.reason) == ("Wait", "WaitingForTopology")
    assert BLOCK in told.message


def test_a_candidate_behind_a_starving_gang_waits_for_it() -> None:
    admitter, clocks = make(racked()[:1], starvation=10)
    holder = ask(admitter, job("holder").master(gpus=4).build())
    admitter.cycle()
    run(admitter, holder)
    big = ask(admitter, job("big").master(gpus=8).build())
    admitter.cycle()
    clocks.now += 60

    snapshot, gang = admitter.snapshot(candidate(job("small").master(gpus=1).build()))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert told.verdict == "Wait"
    assert told.message.startswith(f"waiting behind {'/'.join(big)}")


def test_a_candidate_behind_a_gang_no_node_admits_starts_however_long_that_gang_waited() -> None:
    admitter, clocks = make(racked()[:1], starvation=10)
    lost = ask(
        admitter, job("lost").master(gpus=1, pod_spec={"nodeSelector": {"gpu": "h100"}}).build()
    )
    admitter.cycle()
    clocks.now += 60

    snapshot, gang = admitter.snapshot(candidate(job("small").master(gpus=1).build()))
    assert gang is not None
    told = forecast(snapshot, gang)

    assert told.verdict == "Start", told.message
    assert lost in admitter.queue.waiting


def test_the_outlook_of_a_job_no_node_admits_says_it_is_not_placeable() -> None:
    admitter, _ = make(racked()[:1])
    lost = ask(
        admitter, job("lost").master(gpus=1, pod_spec={"nodeSelector": {"gpu": "h100"}}).build()
    )
    only_node = racked()[0]["metadata"]["name"]
    admitter.on_pod("ADDED", pod("holder", node=only_node, gpus=4), None)
    big = ask(admitter, job("big").master(gpus=8).build())
    huge = ask(admitter, job("huge").master(gpus=16).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()

    assert job_outlook(snapshot, lost).placeable is False
    assert job_outlook(snapshot, big).placeable is True, "too big for now, yet nodes admit it"
    assert job_outlook(snapshot, huge).placeable is False, "more GPUs than any node has"


def test_the_outlook_of_a_gang_its_nodes_could_not_hold_even_empty_says_it_is_not_placeable() -> (
    None
):
    admitter, _ = make(racked()[:2])
    admitter.on_pod("ADDED", pod("holder", node=racked()[0]["metadata"]["name"], gpus=4), None)
    fits_empty = ask(admitter, job("fits").master(gpus=8).workers(1, gpus=8).build())
    too_many = ask(admitter, job("many").master(gpus=8).workers(2, gpus=8).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()

    assert job_outlook(snapshot, fits_empty).placeable is True, "two empty nodes hold it"
    assert job_outlook(snapshot, too_many).placeable is False, "24 GPUs on two 8-GPU nodes"


def queued(name: str, team: str | None, gpus: int, priority: int = 0) -> QueuedJob:
    key = ("ns", name)
    return QueuedJob(
        key=key,
        order=(-priority, "2026-01-01T00:00:00Z", *key),
        team=team,
        usage={GPUS: gpus * G},
        waited=1.0,
    )


def test_places_count_the_pool_the_team_the_cohort_and_what_is_ahead() -> None:
    teams = {
        "a": parsed_team("a", 8, cohort="c1"),
        "b": parsed_team("b", 8, cohort="c1"),
        "x": parsed_team("x", 8, cohort="c2"),
    }
    jobs = [queued("j1", "a", 8), queued("j2", "x", 4), queued("j3", None, 2), queued("j4", "b", 1)]

    places = rank(jobs, teams)

    last = places[("ns", "j4")]
    assert (last.pool, last.pool_size, last.ahead_jobs, last.ahead_gpus) == (4, 4, 3, 14 * G)
    assert (last.team, last.team_position, last.team_size) == ("b", 1, 1)
    assert (last.cohort, last.cohort_position, last.cohort_size) == ("c1", 2, 2)
    unowned = places[("ns", "j3")]
    assert (unowned.team, unowned.cohort) == (None, None)
    assert place_phrase(last) == (
        "#4 of 4 in the pool (team b #1 of 1, cohort c1 #2 of 2), 3 jobs (14 GPUs) ahead"
    )
    assert place_phrase(places[("ns", "j1")]).endswith("nothing ahead")


def test_the_queued_message_starts_with_the_place_and_the_same_numbers_as_the_outlook() -> None:
    teams = {"vision": parsed_team("vision", 8, 0, namespaces=["team-vision"])}
    admitter, _ = make(racked()[:2], teams=teams)
    first = ask(admitter, job("first", "team-vision").master(gpus=8).build())
    admitter.cycle()
    run(admitter, first)
    ahead = ask(admitter, job("ahead").master(gpus=16).build(), priority=1)
    waiting = ask(admitter, job("second", "team-vision").master(gpus=8).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    outlook = job_outlook(snapshot, waiting)

    assert outlook.place is not None
    assert (outlook.place.pool, outlook.place.ahead_jobs, outlook.place.ahead_gpus) == (
        2,
        1,
        16 * G,
    )
    assert admitter.wait_reason(waiting) == f"{place_phrase(outlook.place)}: {outlook.message}"
    assert admitter.wait_reason(ahead) is not None


# ------------------------------------------------------------------ what must end


def test_a_job_at_its_quota_needs_the_cheapest_of_its_teams_gangs_to_end() -> None:
    teams = {
        "vision": parsed_team("vision", 16, 0, namespaces=["team-vision"], cohort="c"),
        "speech": parsed_team("speech", 16, namespaces=["team-speech"], cohort="c"),
    }
    admitter, clocks = make(racked(), teams=teams)
    for name, workers, gpus in (("large", 1, 6), ("small", 0, 4)):  # small is the newest
        built = gpu_job(name, namespace="team-vision", workers=workers, gpus=gpus).build()
        key = ask(admitter, built)
        admitter.cycle()
        run(admitter, key)
        clocks.wall += 60
    waiting = ask(admitter, job("next", "team-vision").master(gpus=4).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    gang = next(g for g in snapshot.gangs if g.key == waiting)
    ended = must_end(snapshot, gang)

    assert ended is not None
    assert [a.key for a in ended] == [("team-vision", "small")]
    assert [g.job for g in job_outlook(snapshot, waiting).must_end] == ["team-vision/small"]


def test_nothing_may_end_for_a_job_when_only_other_teams_within_quota_hold_the_pool() -> None:
    teams = {
        "vision": parsed_team("vision", 16, namespaces=["team-vision"], cohort="c"),
        "speech": parsed_team("speech", 32, namespaces=["team-speech"], cohort="c"),
    }
    admitter, _ = make(racked(), teams=teams)
    hog = ask(admitter, gpu_job("hog", namespace="team-speech", workers=3, gpus=8).build())
    admitter.cycle()
    run(admitter, hog)
    waiting = ask(admitter, job("wants", "team-vision").master(gpus=8).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    gang = next(g for g in snapshot.gangs if g.key == waiting)

    assert must_end(snapshot, gang) is None


def test_the_other_teams_gangs_within_quota_whose_end_lets_a_job_start_are_named() -> None:
    teams = {
        "vision": parsed_team("vision", 16, namespaces=["team-vision"], cohort="c"),
        "speech": parsed_team("speech", 32, namespaces=["team-speech"], cohort="c"),
    }
    admitter, _ = make(racked(), teams=teams)
    hog = ask(admitter, gpu_job("hog", namespace="team-speech", workers=3, gpus=8).build())
    admitter.cycle()
    run(admitter, hog)
    waiting = ask(admitter, job("wants", "team-vision").master(gpus=8).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    gang = next(g for g in snapshot.gangs if g.key == waiting)
    outlook = job_outlook(snapshot, waiting)

    assert [a.key for a in ending_lets_start(snapshot, gang)] == [hog]
    assert (outlook.must_end, [g.job for g in outlook.ending_lets_start]) == (
        (),
        ["team-speech/hog"],
    )


def test_a_borrowing_job_is_told_that_a_lending_teams_end_lets_it_start() -> None:
    teams = {
        "vision": parsed_team("vision", 8, namespaces=["team-vision"], cohort="c"),
        "speech": parsed_team("speech", 24, namespaces=["team-speech"], cohort="c"),
    }
    admitter, _ = make(racked(), teams=teams)
    hog = ask(admitter, gpu_job("hog", namespace="team-speech", workers=2, gpus=8).build())
    admitter.cycle()
    run(admitter, hog)
    waiting = ask(admitter, gpu_job("wide", namespace="team-vision", workers=1, gpus=8).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    gang = next(g for g in snapshot.gangs if g.key == waiting)

    assert must_end(snapshot, gang) is None
    assert [a.key for a in ending_lets_start(snapshot, gang)] == [hog]


def test_no_end_lets_a_job_start_beyond_its_own_teams_borrowing_limit() -> None:
    teams = {
        "vision": parsed_team("vision", 8, 0, namespaces=["team-vision"], cohort="c"),
        "speech": parsed_team("speech", 24, namespaces=["team-speech"], cohort="c"),
    }
    admitter, _ = make(racked(), teams=teams)
    hog = ask(admitter, gpu_job("hog", namespace="team-speech", workers=2, gpus=8).build())
    admitter.cycle()
    run(admitter, hog)
    waiting = ask(admitter, gpu_job("wide", namespace="team-vision", workers=1, gpus=8).build())
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    gang = next(g for g in snapshot.gangs if g.key == waiting)

    assert must_end(snapshot, gang) is None
    assert ending_lets_start(snapshot, gang) == ()


# ------------------------------------------------------------------ one job, the pool


def test_a_running_jobs_outlook_names_its_nodes_and_domains() -> None:
    admitter, _ = make(racked(), settings=[TOPOLOGY])
    key = ask(admitter, gpu_job("train", workers=1, gpus=8).build())
    admitter.cycle()
    run(admitter, key)

    snapshot, _ = admitter.snapshot()
    outlook = job_outlook(snapshot, key)

    assert (outlook.known, outlook.waiting) == (True, False)
    assert set(outlook.nodes.values()) == {"h1", "h2"}
    assert outlook.domains == (f"{BLOCK}=b1", f"{RACK}=r1")
    assert outlook.admitted_at is not None
    assert not job_outlook(snapshot, ("default", "nobody")).known


def test_a_preemptor_whose_nodes_are_held_says_whom_it_waits_for() -> None:
    admitter, _ = make(racked()[:1])
    low = ask(admitter, job("low").master(gpus=8).build(), priority=1)
    admitter.cycle()
    run(admitter, low)
    high = ask(admitter, job("high").master(gpus=8).build(), priority=100)
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    outlook = job_outlook(snapshot, high)

    assert (outlook.kind, outlook.reason) == ("Preempting", "WaitingForPreemption")
    assert outlook.preempting == ("default/low",)
    assert outlook.place is None


def test_the_pool_view_shows_a_preemptor_whose_nodes_are_held_with_its_victims() -> None:
    admitter, _ = make(racked()[:1])
    low = ask(admitter, job("low").master(gpus=8).build(), priority=1)
    admitter.cycle()
    run(admitter, low)
    high = ask(admitter, job("high").master(gpus=8).build(), priority=100)
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    view = pool_view(snapshot)

    assert view.waiting_jobs == 1
    assert view.queue == ()
    assert [(p.job, p.gpus, p.victims) for p in view.preempting] == [
        ("/".join(high), 8 * G, ("default/low",))
    ]


def test_the_pool_view_counts_teams_domains_unusable_nodes_and_the_queue_head() -> None:
    teams = {
        "vision": parsed_team("vision", 8, namespaces=["team-vision"], cohort="c"),
        "speech": parsed_team("speech", 16, namespaces=["team-speech"], cohort="c"),
    }
    nodes = racked()
    nodes.append(
        node("sick", labels={"pool": "x"}, taints=[{"key": "gpu", "effect": "NoSchedule"}])
    )
    admitter, clocks = make(nodes, teams=teams, settings=[TOPOLOGY])
    borrower = ask(admitter, gpu_job("borrow", namespace="team-vision", workers=1, gpus=8).build())
    admitter.cycle()
    run(admitter, borrower)
    waiting = ask(admitter, gpu_job("wait", namespace="team-vision", workers=3, gpus=8).build())
    clocks.now += 30
    admitter.cycle()

    snapshot, _ = admitter.snapshot()
    view = pool_view(snapshot)

    by_team = {team.name: team for team in view.teams}
    vision, speech = by_team["vision"], by_team["speech"]
    assert (vision.used, vision.borrowed, vision.lent) == (16 * G, 8 * G, 0)
    assert (speech.used, speech.borrowed, speech.lent) == (0, 0, 8 * G)
    assert (vision.waiting_jobs, vision.waiting_gpus) == (1, 32 * G)
    assert vision.longest_wait_seconds == 30
    racks = {d.name: d for d in view.domains if d.level == RACK}
    assert (racks["r1"].used, racks["r1"].free) == (16 * G, 0)
    assert (racks["r2"].used, racks["r2"].free) == (0, 16 * G)
    assert [(n.node, n.reason) for n in view.unusable_nodes] == [("sick", "tainted gpu:NoSchedule")]
    assert [(e.job, e.position, e.reason) for e in view.queue] == [
        ("/".join(waiting), 1, "WaitingForQuota")
    ]
    assert (view.total_gpus, view.used_gpus) == (40 * G, 16 * G)


def test_the_pool_view_says_why_and_since_when_each_unusable_node_is_unusable() -> None:
    def with_ready(name: str, status: str) -> dict[str, Any]:
        raw = node(name)
        raw["status"]["conditions"] = [
            {"type": "Ready", "status": status, "lastTransitionTime": "2026-11-26T10:00:00Z"}
        ]
        return raw

    cordoned = node("cordoned")
    cordoned["spec"]["unschedulable"] = True
    evicting = node(
        "evicting",
        taints=[
            {"key": "a", "effect": "NoSchedule"},
            {"key": "b", "effect": "NoExecute", "timeAdded": "2026-11-26T11:00:00Z"},
        ],
    )
    nodes = [node("fine"), with_ready("lost", "Unknown"), with_ready("sick", "False"), cordoned]
    admitter, _ = make([*nodes, evicting])

    snapshot, _ = admitter.snapshot()
    view = pool_view(snapshot)

    assert [(n.node, n.reason, n.since) for n in view.unusable_nodes] == [
        ("cordoned", "cordoned", ""),
        ("evicting", "tainted a:NoSchedule, b:NoExecute", "2026-11-26T11:00:00Z"),
        ("lost", "lost (Ready is Unknown)", "2026-11-26T10:00:00Z"),
        ("sick", "NotReady", "2026-11-26T10:00:00Z"),
    ]


# ------------------------------------------------------------------ rules 6 and 8: nodes out of use

HEALTH = {"key": "nvidia.com/gpu-health", "value": "unhealthy", "effect": "NoExecute"}
POOL = {"nodeSelector": {"pool": "a100"}}


def a100(name: str, **fields: Any) -> dict[str, Any]:
    return node(name, labels={"pool": "a100"}, **fields)


def not_ready(raw: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    raw["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return raw


def sick_pool() -> Admitter:
    """Pool a100: ``busy`` full, ``free`` empty, ``t1``/``t2`` health-tainted, ``down`` NotReady."""
    admitter, _ = make(
        [
            a100("busy"),
            a100("free"),
            a100("t1", taints=[HEALTH]),
            a100("t2", taints=[HEALTH]),
            not_ready(a100("down")),
            node("elsewhere", taints=[HEALTH]),  # not in the pool: not its business
        ]
    )
    admitter.on_pod("ADDED", pod("holder", node="busy", gpus=8), None)
    return admitter


CLAUSE = (
    "(24 nvidia.com/gpu more on 3 nodes out of use: 2 tainted nvidia.com/gpu-health, 1 NotReady)"
)


def test_a_capacity_wait_names_the_gpus_on_nodes_out_of_use_and_whether_clearing_starts_it() -> (
    None
):
    admitter = sick_pool()
    pair = ask(
        admitter,
        job("pair").master(gpus=8, pod_spec=POOL).workers(1, gpus=8, pod_spec=POOL).build(),
    )
    admitter.cycle()

    message = "waiting for 16 nvidia.com/gpu in pool pool=a100: 8 free " + CLAUSE
    assert admitter.wait_kind(pair) == "Capacity"
    assert admitter.wait_reason(pair) == "#1 of 1 in the pool, nothing ahead: " + message
    outlook = job_outlook(admitter.snapshot()[0], pair)
    assert outlook.message == message
    assert outlook.starts_if_cleared == ("down", "t1", "t2")
    (entry,) = pool_view(admitter.snapshot()[0]).queue
    assert entry.message == message, "torchgate top tells the same"


def test_the_forecast_at_apply_names_the_nodes_out_of_use_as_the_queue_would() -> None:
    admitter = sick_pool()
    raw = job("pair").master(gpus=8, pod_spec=POOL).workers(1, gpus=8, pod_spec=POOL).build()

    snapshot, gang = admitter.snapshot(candidate(raw))
    assert gang is not None
    told = forecast(snapshot, gang)

    message = "waiting for 16 nvidia.com/gpu in pool pool=a100: 8 free " + CLAUSE
    assert (told.verdict, told.message) == ("Wait", message)
    assert forecast_warning(told).endswith(
        "will wait for 16 nvidia.com/gpu in pool pool=a100: 8 free " + CLAUSE
    )
    pair = ask(admitter, raw)
    admitter.cycle()
    assert admitter.wait_reason(pair).endswith(": " + told.message), "the queue says the same"


def test_clearing_is_not_promised_when_the_nodes_out_of_use_would_not_start_it() -> None:
    admitter = sick_pool()
    big = ask(
        admitter, job("big").master(gpus=8, pod_spec=POOL).workers(4, gpus=8, pod_spec=POOL).build()
    )
    admitter.cycle()

    outlook = job_outlook(admitter.snapshot()[0], big)
    assert outlook.message.endswith(CLAUSE), "five 8-GPU pods: 32 GPUs even with them back"
    assert outlook.starts_if_cleared == ()


def test_a_healthy_pool_says_nothing_of_nodes_out_of_use() -> None:
    admitter, _ = make([a100("busy"), a100("free")])
    admitter.on_pod("ADDED", pod("holder", node="busy", gpus=8), None)
    pair = ask(
        admitter,
        job("pair").master(gpus=8, pod_spec=POOL).workers(1, gpus=8, pod_spec=POOL).build(),
    )
    admitter.cycle()

    assert admitter.wait_reason(pair) == (
        "#1 of 1 in the pool, nothing ahead: "
        "waiting for 16 nvidia.com/gpu in pool pool=a100: 8 free"
    )
    assert job_outlook(admitter.snapshot()[0], pair).starts_if_cleared == ()

"""Team quotas: nominal, borrowing within a limit and idle quota, reclaim of borrowed gangs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hs

from tests.builders.gang import G, admitted
from tests.builders.team import parsed_team
from torchgate.controller.admission.preemption import choose_victims
from torchgate.controller.admission.quota import (
    Admitted,
    Borrows,
    Fits,
    QuotaWait,
    Reclaims,
    Units,
    Verdict,
    check_quota,
    closed_to_new_gangs,
    over_quota,
    reclaim_candidates,
    still_borrowing,
    usage_by_team,
    without,
)
from torchgate.pytorchjob.pool import GPUS, TeamQuota

TEAMS = {
    t.name: t
    for t in (parsed_team("a", 8, 4), parsed_team("b", 8), parsed_team("c", 8, cohort="other"))
}


def reclaim(
    claimant: TeamQuota,
    want: Units,
    ordered: list[Admitted],
    usage: Mapping[str, Units],
    teams: Mapping[str, TeamQuota],
) -> list[Admitted] | None:
    """Reclaim as the admission cycle does it: whole gangs, while their team still borrows."""

    def trial(victims: Sequence[Admitted]) -> bool | None:
        left = without(usage, victims)
        return isinstance(check_quota(claimant, want, left, teams), Fits | Borrows) or None

    choice = choose_victims(
        ordered, trial, allowed=lambda victim, chosen: still_borrowing(victim, chosen, usage, teams)
    )
    return None if choice is None else list(choice.victims)


def verdict(team_name: str | None, gpus: int, running: list[Admitted]) -> Verdict:
    owner = TEAMS.get(team_name) if team_name else None
    return check_quota(owner, {GPUS: gpus * G}, usage_by_team(running), TEAMS)


@pytest.mark.parametrize(
    ("team_name", "gpus", "running", "expected"),
    [
        (None, 64, [], Fits()),
        ("a", 8, [], Fits()),
        ("a", 4, [admitted("a-4", 4, team="a")], Fits()),
        ("a", 4, [admitted("a-8", 8, team="a")], Borrows({GPUS: 4 * G})),
        ("b", 16, [], Borrows({GPUS: 8 * G})),  # no borrowing limit: all of a's idle quota
        ("c", 8, [admitted("c-1", 1, team="c")], None),  # c's cohort has nobody to lend
        ("a", 5, [admitted("a-8", 8, team="a")], None),  # over the borrowing limit
        # a's idle quota is only 4
        ("b", 8, [admitted("b-8", 8, team="b"), admitted("a-4", 4, team="a")], None),
        # a's own share is lent to b
        ("a", 4, [admitted("a-4", 4, team="a"), admitted("b-12", 12, team="b")], Reclaims()),
    ],
    ids=[
        "no-team",
        "within-nominal",
        "up-to-nominal",
        "borrows",
        "borrows-unlimited",
        "nothing-idle",
        "over-limit",
        "not-enough-idle",
        "reclaims",
    ],
)
def test_quota_verdicts(
    team_name: str | None, gpus: int, running: list[Admitted], expected: Verdict | None
) -> None:
    found = verdict(team_name, gpus, running)
    if expected is None:
        assert isinstance(found, QuotaWait)
    else:
        assert found == expected


@pytest.mark.parametrize(
    ("team_name", "running", "said"),
    [
        ("a", [admitted("a-12", 12, team="a")], "the job needs 1 GPU"),
        (
            "b",
            [admitted("a-8", 8, team="a"), admitted("b-8", 8, team="b")],
            "team b would borrow 1 GPU over its quota",
        ),
    ],
    ids=["needs", "would-borrow"],
)
def test_a_quota_wait_names_one_gpu_in_the_singular(
    team_name: str, running: list[Admitted], said: str
) -> None:
    found = verdict(team_name, 1, running)

    assert isinstance(found, QuotaWait)
    assert said in found.message
    assert "1 GPUs" not in found.message


def test_resources_without_a_quota_are_not_limited() -> None:
    owner = TEAMS["a"]
    assert check_quota(owner, {"cpu": 10**9}, {}, TEAMS) == Fits()


def test_reclaim_takes_the_cheapest_borrowed_gangs_only_as_many_as_needed() -> None:
    running = [
        admitted("a-4", 4, team="a"),
        admitted("b-own", 8, team="b", priority=5, at=1.0),
        admitted("b-old", 2, team="b", priority=0, at=2.0),
        admitted("b-new", 2, team="b", priority=0, at=3.0),
    ]
    usage = usage_by_team(running)
    claimant = TEAMS["a"]
    assert check_quota(claimant, {GPUS: 4 * G}, usage, TEAMS) == Reclaims()
    ordered = reclaim_candidates(
        claimant, {GPUS: 4 * G}, running, usage, TEAMS, protected=lambda _: False
    )
    assert [g.key[1] for g in ordered] == ["b-new", "b-old", "b-own"]
    victims = reclaim(claimant, {GPUS: 4 * G}, ordered, usage, TEAMS)
    assert victims is not None
    assert sorted(v.key[1] for v in victims) == ["b-new", "b-old"]


def test_reclaim_skips_protected_gangs_and_may_fail() -> None:
    running = [admitted("a-4", 4, team="a"), admitted("b-big", 12, team="b")]
    usage = usage_by_team(running)
    claimant = TEAMS["a"]
    ordered = reclaim_candidates(
        claimant, {GPUS: 4 * G}, running, usage, TEAMS, protected=lambda _: True
    )
    assert ordered == []
    assert reclaim(claimant, {GPUS: 4 * G}, ordered, usage, TEAMS) is None


def test_a_team_within_its_nominal_is_never_a_reclaim_candidate() -> None:
    running = [
        admitted("b-8", 8, team="b"),
        admitted("a-8-0-0.0", 8, team="a"),
        admitted("a-borrowed", 2, team="a"),
    ]
    usage = usage_by_team(running)
    ordered = reclaim_candidates(
        TEAMS["b"], {GPUS: 2 * G}, running, usage, TEAMS, protected=lambda _: False
    )
    assert [g.key[1] for g in ordered] == ["a-8-0-0.0", "a-borrowed"]
    assert (
        reclaim_candidates(
            TEAMS["a"], {GPUS: 2 * G}, running, usage, TEAMS, protected=lambda _: False
        )
        == []
    )


# ------------------------------------------------------------------ properties


@hs.composite
def cohorts(draw: hs.DrawFn) -> tuple[dict[str, TeamQuota], list[Admitted]]:
    """Teams of one cohort and a valid state: gangs admitted one by one only when quota allowed."""
    count = draw(hs.integers(1, 4))
    teams = {
        f"t{i}": parsed_team(
            f"t{i}", draw(hs.integers(0, 16)), draw(hs.one_of(hs.none(), hs.integers(0, 8)))
        )
        for i in range(count)
    }
    running: list[Admitted] = []
    for index in range(draw(hs.integers(0, 12))):
        name = draw(hs.sampled_from(sorted(teams)))
        size = draw(hs.sampled_from((1, 2, 4, 8)))
        candidate = admitted(
            f"g{index}", size, team=name, priority=draw(hs.integers(0, 2)), at=float(index)
        )
        found = check_quota(teams[name], candidate.usage, usage_by_team(running), teams)
        if isinstance(found, Fits | Borrows):
            running.append(candidate)
    return teams, running


def _within_limits(teams: Mapping[str, TeamQuota], running: list[Admitted]) -> None:
    usage = usage_by_team(running)
    for name, quota in teams.items():
        limit = quota.limits[GPUS]
        used = usage.get(name, {}).get(GPUS, 0)
        if limit.borrowing is not None:
            assert used <= limit.nominal + limit.borrowing
    total = sum(usage.get(name, {}).get(GPUS, 0) for name in teams)
    assert total <= sum(q.limits[GPUS].nominal for q in teams.values())


@settings(max_examples=300, deadline=None)
@given(cohorts(), hs.sampled_from((1, 2, 4, 8, 16)), hs.integers(0, 3))
def test_quota_is_never_exceeded_except_by_borrowing_within_its_limit(
    state: tuple[dict[str, TeamQuota], list[Admitted]], size: int, which: int
) -> None:
    teams, running = state
    _within_limits(teams, running)
    name = sorted(teams)[which % len(teams)]
    new = admitted("new", size, team=name)
    found = check_quota(teams[name], new.usage, usage_by_team(running), teams)
    if isinstance(found, Fits | Borrows):
        after = [*running, new]
        _within_limits(teams, after)
        used = usage_by_team(after)[name][GPUS]
        nominal = teams[name].limits[GPUS].nominal
        if isinstance(found, Fits):
            assert used <= nominal
        else:
            assert used - nominal == found.amount[GPUS] > 0


_BORROW_WAIT = re.compile(r"would borrow ([\d.]+) GPUs? over .* leave ([\d.]+) GPUs? idle$")


@settings(max_examples=300, deadline=None)
@given(cohorts(), hs.sampled_from((1, 2, 4, 8, 16)), hs.integers(0, 3))
def test_a_gang_waiting_to_borrow_is_told_less_is_idle_to_lend_than_it_would_borrow(
    state: tuple[dict[str, TeamQuota], list[Admitted]], size: int, which: int
) -> None:
    """Its own team's idle quota is not lent to it: the idle amount it is told leaves it out."""
    teams, running = state
    name = sorted(teams)[which % len(teams)]
    new = admitted("new", size, team=name)
    found = check_quota(teams[name], new.usage, usage_by_team(running), teams)
    told = _BORROW_WAIT.search(found.message) if isinstance(found, QuotaWait) else None
    assume(told is not None)
    assert told is not None
    borrow, idle = (Decimal(amount) for amount in told.groups())
    assert idle < borrow, found


def test_the_idle_quota_a_borrowing_gang_is_told_of_is_the_other_teams_not_its_own() -> None:
    # b (nominal 8) uses nothing and asks 16: it would borrow 8, and a, at its nominal 8,
    # leaves none idle; the 8 idle GPUs of the cohort are b's own.
    found = verdict("b", 16, [admitted("a-8", 8, team="a")])

    assert isinstance(found, QuotaWait)
    told = _BORROW_WAIT.search(found.message)
    assert told is not None, found.message
    assert told.groups() == ("8", "0")


@settings(max_examples=300, deadline=None)
@given(cohorts(), hs.sampled_from((1, 2, 4, 8)), hs.integers(0, 3))
def test_reclaim_returns_a_teams_quota_with_whole_borrowed_gangs_only(
    state: tuple[dict[str, TeamQuota], list[Admitted]], size: int, which: int
) -> None:
    teams, running = state
    name = sorted(teams)[which % len(teams)]
    claimant = teams[name]
    usage = usage_by_team(running)
    want = {GPUS: size * G}
    assume(usage.get(name, {}).get(GPUS, 0) + want[GPUS] <= claimant.limits[GPUS].nominal)
    found = check_quota(claimant, want, usage, teams)
    assert isinstance(found, Fits | Reclaims)  # within nominal: it never simply waits
    if isinstance(found, Fits):
        return
    ordered = reclaim_candidates(claimant, want, running, usage, teams, protected=lambda _: False)
    victims = reclaim(claimant, want, ordered, usage, teams)
    assert victims is not None  # nothing protected: the owner always gets its quota back
    assert all(v.team != name for v in victims)
    assert all(
        usage[v.team][GPUS] > teams[v.team].limits[GPUS].nominal for v in victims if v.team
    )  # only teams that were borrowing
    assert isinstance(check_quota(claimant, want, without(usage, victims), teams), Fits | Borrows)
    left = without(usage, victims)
    for owner in {v.team for v in victims if v.team}:  # below nominal by less than one gang
        largest = max(v.usage[GPUS] for v in victims if v.team == owner)
        assert left[owner].get(GPUS, 0) > teams[owner].limits[GPUS].nominal - largest
    for victim in victims:  # and none of them could have stayed
        kept = [v for v in victims if v is not victim]
        assert not isinstance(
            check_quota(claimant, want, without(usage, kept), teams), Fits | Borrows
        )


@pytest.mark.parametrize(
    ("namespace", "closed"),
    [("ns-gone", True), ("ns-kept", False), ("ns-nobody", False)],
    ids=["team-being-deleted", "team-kept", "no-team"],
)
def test_a_team_whose_quota_is_being_deleted_admits_no_new_gang(
    namespace: str, closed: bool
) -> None:
    teams = {
        "gone": parsed_team("gone", 8, namespaces=["ns-gone"], deleting=True),
        "kept": parsed_team("kept", 8, namespaces=["ns-kept"]),
    }
    owner = {"ns-gone": "gone", "ns-kept": "kept"}
    waits = closed_to_new_gangs([(namespace, "j")], owner, teams)
    assert list(waits) == ([(namespace, "j")] if closed else [])
    assert all("TeamQuota gone is being deleted" in message for message in waits.values())


# ------------------------------------------------------------------ rule 6: lowered below usage

LOWERED = {
    t.name: t
    for t in (
        parsed_team("limited", 8, 0),  # lowered from 16: its two 8-GPU gangs hold 16
        parsed_team("open", 8, cohort="alone"),  # no borrowing limit, alone in its cohort
        parsed_team("lender", 8, cohort="lent"),  # lends open-lent its idle 8
        parsed_team("open-lent", 8, cohort="lent"),
        parsed_team("three", 8, 4, cohort="three"),
    )
}


@pytest.mark.parametrize(
    ("team_name", "gpus", "over"),
    [
        ("limited", [8, 8], {GPUS: 8 * G}),
        ("limited", [8], {}),
        ("three", [8, 8], {GPUS: 4 * G}),
        ("three", [8, 4], {}),
        ("open", [8, 8], {GPUS: 8 * G}),
        ("open-lent", [8, 8], {}),
    ],
    ids=[
        "over-nominal-plus-limit",
        "at-nominal",
        "over-by-part-of-a-gang",
        "borrowing-within-limit",
        "no-limit-nobody-lends",
        "no-limit-borrowing-idle-quota",
    ],
)
def test_a_team_is_over_its_quota_when_it_holds_more_than_it_may(
    team_name: str, gpus: list[int], over: dict[str, int]
) -> None:
    running = [admitted(f"{team_name}-{i}", n, team=team_name) for i, n in enumerate(gpus)]
    usage = usage_by_team(running)
    assert over_quota(LOWERED[team_name], usage, LOWERED) == over


def test_a_new_gang_of_a_team_over_its_quota_waits_and_is_told_so() -> None:
    running = [admitted("l-0", 8, team="limited"), admitted("l-1", 8, team="limited")]
    found = check_quota(LOWERED["limited"], {GPUS: 8 * G}, usage_by_team(running), LOWERED)
    assert isinstance(found, QuotaWait)
    assert found.message.startswith("team limited is over its quota (16/8 GPUs")

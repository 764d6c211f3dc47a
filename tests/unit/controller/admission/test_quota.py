"""Team quotas: nominal, borrowing within a limit and idle quota, reclaim of borrowed gangs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hs

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
    reclaim_candidates,
    still_borrowing,
    usage_by_team,
    without,
)
from torchgate.pytorchjob.pool import GPUS, Limit, TeamQuota

G = 1000  # one GPU in milli-units


def team(name: str, nominal: int, borrowing: int | None = None, cohort: str = "c") -> TeamQuota:
    return TeamQuota(
        name,
        (name,),
        {GPUS: Limit(nominal * G, None if borrowing is None else borrowing * G)},
        cohort,
    )


def gang(
    team_name: str | None, gpus: int, *, priority: int = 0, at: float = 0.0, name: str = ""
) -> Admitted:
    return Admitted(
        key=(team_name or "none", name or f"{team_name}-{gpus}-{priority}-{at}"),
        team=team_name,
        priority=priority,
        usage={GPUS: gpus * G},
        admitted_at=at,
    )


TEAMS = {t.name: t for t in (team("a", 8, 4), team("b", 8), team("c", 8, cohort="other"))}


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
        ("a", 4, [gang("a", 4)], Fits()),
        ("a", 4, [gang("a", 8)], Borrows({GPUS: 4 * G})),
        ("b", 16, [], Borrows({GPUS: 8 * G})),  # no borrowing limit: all of a's idle quota
        ("c", 8, [gang("c", 1)], None),  # c's cohort has nobody to lend
        ("a", 5, [gang("a", 8)], None),  # over the borrowing limit
        ("b", 8, [gang("b", 8), gang("a", 4)], None),  # a's idle quota is only 4
        ("a", 4, [gang("a", 4), gang("b", 12)], Reclaims()),  # a's own share is lent to b
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


def test_resources_without_a_quota_are_not_limited() -> None:
    owner = TEAMS["a"]
    assert check_quota(owner, {"cpu": 10**9}, {}, TEAMS) == Fits()


def test_reclaim_takes_the_cheapest_borrowed_gangs_only_as_many_as_needed() -> None:
    running = [
        gang("a", 4),
        gang("b", 8, priority=5, at=1.0, name="b-own"),
        gang("b", 2, priority=0, at=2.0, name="b-old"),
        gang("b", 2, priority=0, at=3.0, name="b-new"),
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
    running = [gang("a", 4), gang("b", 12, name="b-big")]
    usage = usage_by_team(running)
    claimant = TEAMS["a"]
    ordered = reclaim_candidates(
        claimant, {GPUS: 4 * G}, running, usage, TEAMS, protected=lambda _: True
    )
    assert ordered == []
    assert reclaim(claimant, {GPUS: 4 * G}, ordered, usage, TEAMS) is None


def test_a_team_within_its_nominal_is_never_a_reclaim_candidate() -> None:
    running = [gang("b", 8), gang("a", 8), gang("a", 2, name="a-borrowed")]
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
        f"t{i}": team(
            f"t{i}", draw(hs.integers(0, 16)), draw(hs.one_of(hs.none(), hs.integers(0, 8)))
        )
        for i in range(count)
    }
    running: list[Admitted] = []
    for index in range(draw(hs.integers(0, 12))):
        name = draw(hs.sampled_from(sorted(teams)))
        size = draw(hs.sampled_from((1, 2, 4, 8)))
        candidate = gang(
            name, size, priority=draw(hs.integers(0, 2)), at=float(index), name=f"g{index}"
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
    new = gang(name, size, name="new")
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

"""What the controller expects to happen: the pool service's answers, declared once.

Why here: the controller computes them (``controller.admission.forecasting`` over its live
snapshot), the webhook turns a forecast into the one admission warning, ``torchgate simulate`` and
``torchgate explain`` print them, and ``torchgate top`` reads the pool view. Four readers of one
wire format, so the format, the paths and the words are declared in the shared pure package, and
an agreement test round-trips what the controller builds through what the readers parse.

Rules (each one function):

1. ``Forecast`` / ``forecast_from_json``: what the controller would do with a job now: start it
   (``Start``, its pods' nodes, the domain, what it borrows), preempt gangs for it (``Preempt``,
   the victims with their GPUs and priority, then its nodes), or keep it waiting (``Wait``, the
   ``Queued`` reason and message, the place it would take in the queue; a suspended job waits
   for its resumption, with no place; a job another controller runs, ``runPolicy.managedBy``,
   waits for nothing of torchgate's: ``run_elsewhere`` says who runs it). JSON keys are camelCase.
2. ``forecast_warning``: the one ``torchgate:`` warning of an admission response: ``will start
   now on a100-0, a100-1``, ``will wait for 16 nvidia.com/gpu ...``, ``will wait: team vision is
   at its quota ...``, ``will preempt team-speech/low-3 (8 GPUs, priority 100)``, or for a job
   torchgate does not run, ``torchgate does not run it: ...`` (never ``will start``). At most
   ``MAX_NAMED`` nodes and victims are named (the apiserver truncates long warnings).
3. ``place_phrase``: a waiting job's place in the queue as the ``Queued`` condition, ``explain``
   and the warning say it: ``#3 of 7 in the pool (team vision #1 of 2, cohort h100 #2 of 4),
   2 jobs (24 GPUs) ahead``; ``queued_message`` puts it before the reason a job waits.
4. ``JobOutlook`` / ``outlook_from_json``: one job as the controller sees it (``torchgate
   explain``): waiting with its kind, reason, message, place and what must end for it to start
   (``must_end``, or, when none may be preempted for it, ``ending_lets_start``);
   or holding nodes (running, or reserved), with its nodes, domains and admission time; and
   whether the controller runs it at all (``runs``: ``reconciler.is_ours`` on the job it has
   cached, ``False`` for a job naming another manager or, without ``--manage-unowned``, none).
   ``None`` when not known: the controller has not seen the job, or is older and sends no
   ``runs``.
5. ``PoolView`` / ``pool_from_json``: the pool as a whole (``torchgate top``): per team quota,
   usage, borrowing, lending, waiting demand and the longest wait; per topology domain GPUs used
   and free; the nodes placement cannot use and why; the jobs waiting for the gangs preempted
   for them to terminate (``Preemptor``: out of the queue, their nodes held, yet waiting); the
   head of the queue with reasons. A view from an older controller has no preemptors.

Amounts on the wire are GPUs as numbers (``8``, ``0.5``), never milli-units. The readers take
any JSON value: an answer of another shape anywhere (a place's team without a name, GPUs past
what a float holds once counted in milli-units, a wait in seconds that is a string) is a
``MalformedAnswer`` naming the field, never another exception: the commands say it in one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from torchgate.pytorchjob import names, reasons

API_PREFIX: Final = "/v1"
FORECAST_PATH: Final = f"{API_PREFIX}/forecast"
JOBS_PATH: Final = f"{API_PREFIX}/jobs"
POOL_PATH: Final = f"{API_PREFIX}/pool"
TOKEN_HEADER: Final = "X-Torchgate-Authorization"
"""Carries the caller's bearer token through the apiserver's Service proxy, which strips
``Authorization`` once it has authenticated the caller itself."""

SERVICE_NAME: Final = "torchgate-controller"
SERVICE_PORT_NAME: Final = "https"
WARNING_PREFIX: Final = "torchgate: "
HOSTNAME_DOMAIN: Final = f"{names.HOSTNAME_LABEL}="
NODE_DOMAIN: Final = "node "
"""How a node's own domain is named at a level it has no label for (``topology.domain_name``):
``node real-0``."""
MAX_NAMED: Final = 6

# The virtual resources the pool service asks SubjectAccessReviews about (RBAC grants them).
RBAC_GROUP: Final = "torchgate.io"
FORECASTS: Final = "forecasts"  # verb create, namespaced: "what would happen to this job here"
POOLS: Final = "pools"  # verb get, cluster-scoped: the pool view

Verdict = Literal["Start", "Wait", "Preempt"]
VERDICTS: Final[tuple[Verdict, ...]] = ("Start", "Wait", "Preempt")


class MalformedAnswer(ValueError):
    """A pool service answer that does not have the declared shape."""


def _gpus(milli: int) -> int | float:
    whole, rest = divmod(milli, 1000)
    return whole if not rest else milli / 1000


def _milli(value: object, where: str) -> int:
    milli = _number(value, where, "a number of GPUs") * 1000
    if isinstance(milli, float) and not math.isfinite(milli):
        raise MalformedAnswer(f"{where}: expected a number of GPUs, not one this large")
    return round(milli)


def _number(value: object, where: str, what: str = "a number") -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedAnswer(f"{where}: expected {what}")
    return value


def _optional_seconds(value: object, where: str) -> float | None:
    if value is None:
        return None
    seconds = float(_number(value, where, "a number of seconds or null"))
    if not math.isfinite(seconds):
        raise MalformedAnswer(f"{where}: expected a number of seconds, not one this large")
    return seconds


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise MalformedAnswer(f"{where}: expected a string")
    return value


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MalformedAnswer(f"{where}: expected an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise MalformedAnswer(f"{where}: expected a list")
    return value


def _optional_int(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedAnswer(f"{where}: expected an integer or null")
    return value


def _nodes(value: object, where: str) -> dict[str, str]:
    return {str(pod): _text(node, f"{where}.{pod}") for pod, node in _mapping(value, where).items()}


def gpus_phrase(milli: int) -> str:
    """``8000`` -> ``8 GPUs``, ``1000`` -> ``1 GPU``, ``500`` -> ``0.5 GPUs``."""
    amount = _gpus(milli)
    return f"{amount} GPU" if amount == 1 else f"{amount} GPUs"


def named(items: Sequence[str], limit: int = MAX_NAMED) -> str:
    """``a, b, c`` with at most ``limit`` names, then ``and N more``."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


# ------------------------------------------------------------------ rule 3: a place in the queue


@dataclass(frozen=True, slots=True)
class Place:
    """A waiting job's place: 1-based positions in the pool's, its team's and its cohort's queue.

    ``ahead_jobs`` and ``ahead_gpus`` (milli) count the jobs before it in the pool's queue.
    """

    pool: int
    pool_size: int
    team: str | None = None
    team_position: int | None = None
    team_size: int | None = None
    cohort: str | None = None
    cohort_position: int | None = None
    cohort_size: int | None = None
    ahead_jobs: int = 0
    ahead_gpus: int = 0

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "pool": {"position": self.pool, "of": self.pool_size},
            "team": None
            if self.team is None
            else {"name": self.team, "position": self.team_position, "of": self.team_size},
            "cohort": None
            if self.cohort is None
            else {"name": self.cohort, "position": self.cohort_position, "of": self.cohort_size},
            "ahead": {"jobs": self.ahead_jobs, "gpus": _gpus(self.ahead_gpus)},
        }


def place_from_json(raw: object) -> Place | None:
    """A ``Place`` from its wire form (``None`` stays ``None``)."""
    if raw is None:
        return None
    body = _mapping(raw, "place")
    pool = _mapping(body.get("pool"), "place.pool")
    team = body.get("team")
    cohort = body.get("cohort")
    ahead = _mapping(body.get("ahead"), "place.ahead")
    team_body = _mapping(team, "place.team") if team is not None else {}
    cohort_body = _mapping(cohort, "place.cohort") if cohort is not None else {}
    return Place(
        pool=_optional_int(pool.get("position"), "place.pool.position") or 0,
        pool_size=_optional_int(pool.get("of"), "place.pool.of") or 0,
        team=_text(team_body.get("name"), "place.team.name") if team is not None else None,
        team_position=_optional_int(team_body.get("position"), "place.team.position"),
        team_size=_optional_int(team_body.get("of"), "place.team.of"),
        cohort=_text(cohort_body.get("name"), "place.cohort.name") if cohort is not None else None,
        cohort_position=_optional_int(cohort_body.get("position"), "place.cohort.position"),
        cohort_size=_optional_int(cohort_body.get("of"), "place.cohort.of"),
        ahead_jobs=_optional_int(ahead.get("jobs"), "place.ahead.jobs") or 0,
        ahead_gpus=_milli(ahead.get("gpus", 0), "place.ahead.gpus"),
    )


def place_phrase(place: Place) -> str:
    """``#3 of 7 in the pool (team vision #1 of 2, cohort h100 #2 of 4), 2 jobs (24 GPUs) ahead``.

    The ``Queued`` condition's message, ``explain`` and the warning all say it this way (rule 3).
    """
    inner = []
    if place.team is not None and place.team_position is not None:
        inner.append(f"team {place.team} #{place.team_position} of {place.team_size}")
    if place.cohort is not None and place.cohort_position is not None:
        inner.append(f"cohort {place.cohort} #{place.cohort_position} of {place.cohort_size}")
    where = f" ({', '.join(inner)})" if inner else ""
    if not place.ahead_jobs:
        ahead = "nothing ahead"
    else:
        jobs = "1 job" if place.ahead_jobs == 1 else f"{place.ahead_jobs} jobs"
        ahead = f"{jobs} ({gpus_phrase(place.ahead_gpus)}) ahead"
    return f"#{place.pool} of {place.pool_size} in the pool{where}, {ahead}"


def queued_message(place: Place | None, reason: str) -> str:
    """A waiting job's ``Queued`` message: its place, then why it waits (rule 3)."""
    return reason if place is None else f"{place_phrase(place)}: {reason}"


# ------------------------------------------------------------------ rules 1-2: the forecast


@dataclass(frozen=True, slots=True)
class Gang:
    """A running gang named in an answer: ``namespace/name``, its GPUs (milli) and priority."""

    job: str
    gpus: int
    priority: int
    team: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "job": self.job,
            "gpus": _gpus(self.gpus),
            "priority": self.priority,
            "team": self.team,
        }

    def phrase(self) -> str:
        """``team-speech/low-3 (8 GPUs, priority 100)``."""
        return f"{self.job} ({gpus_phrase(self.gpus)}, priority {self.priority})"


def gang_from_json(raw: object, where: str = "gang") -> Gang:
    """A ``Gang`` from its wire form."""
    body = _mapping(raw, where)
    team = body.get("team")
    priority = _optional_int(body.get("priority"), f"{where}.priority")
    return Gang(
        job=_text(body.get("job"), f"{where}.job"),
        gpus=_milli(body.get("gpus", 0), f"{where}.gpus"),
        priority=priority or 0,
        team=_text(team, f"{where}.team") if team is not None else None,
    )


@dataclass(frozen=True, slots=True)
class Forecast:
    """What the controller would do with a job if its next admission cycle ran now (rule 1).

    Attributes:
        verdict: ``Start``, ``Preempt`` (then start, once the victims are gone) or ``Wait``.
        nodes: Pod name -> node, in rank order (``Start`` and ``Preempt``).
        domain: The smallest topology domain holding the gang (``rack=r1``, ``the pool``).
        preempts: The gangs it would preempt (``Preempt``).
        borrows: Quota key -> milli-units over the team's nominal quota (``Start``).
        reason: The ``Queued`` reason it would get (``WaitingForQuota``, ...), or ``""``;
            ``PyTorchJobSuspended`` (its ``Suspended`` condition's) when it waits for its
            resumption, created with ``spec.runPolicy.suspend``; ``ManagedElsewhere`` when
            torchgate does not run it (``run_elsewhere``: ``runPolicy.managedBy`` names another
            controller), its message then the whole warning.
        message: Why it would wait (``Wait``), as its ``Queued`` condition would say.
        place: Where it would be in the queue (``Wait``).
        team: The team owning its namespace, if any.
        cohort: That team's cohort.
    """

    verdict: Verdict
    nodes: Mapping[str, str] = field(default_factory=dict)
    domain: str = ""
    preempts: tuple[Gang, ...] = ()
    borrows: Mapping[str, int] = field(default_factory=dict)
    reason: str = ""
    message: str = ""
    place: Place | None = None
    team: str | None = None
    cohort: str | None = None

    @property
    def starts_now(self) -> bool:
        """Whether its pods would be created now."""
        return self.verdict == "Start"

    def to_json(self) -> dict[str, Any]:
        """The wire form (rule 1)."""
        return {
            "verdict": self.verdict,
            "startsNow": self.starts_now,
            "nodes": dict(self.nodes),
            "domain": self.domain,
            "preempts": [gang.to_json() for gang in self.preempts],
            "borrows": {key: _gpus(amount) for key, amount in self.borrows.items()},
            "reason": self.reason,
            "message": self.message,
            "place": None if self.place is None else self.place.to_json(),
            "team": self.team,
            "cohort": self.cohort,
        }


def run_elsewhere(manager: str | None) -> str:
    """Why torchgate does nothing with a job it does not run (``runPolicy.managedBy``; rule 1)."""
    if manager is None:
        who = (
            "spec.runPolicy.managedBy is unset and its controller runs only jobs naming "
            f"{names.CONTROLLER_NAME} (--manage-unowned is off)"
        )
    else:
        who = f"spec.runPolicy.managedBy is {manager}: that controller runs it"
    return f"torchgate does not run it: {who}; torchgate neither queues it nor creates its pods"


def forecast_from_json(raw: object) -> Forecast:
    """A ``Forecast`` from its wire form; ``MalformedAnswer`` when it has another shape."""
    body = _mapping(raw, "forecast")
    verdict = body.get("verdict")
    if verdict not in VERDICTS:
        raise MalformedAnswer(f"forecast.verdict: expected one of {', '.join(VERDICTS)}")
    team, cohort = body.get("team"), body.get("cohort")
    return Forecast(
        verdict=verdict,
        nodes=_nodes(body.get("nodes", {}), "forecast.nodes"),
        domain=_text(body.get("domain", ""), "forecast.domain"),
        preempts=tuple(
            gang_from_json(item, f"forecast.preempts[{index}]")
            for index, item in enumerate(_list(body.get("preempts", []), "forecast.preempts"))
        ),
        borrows={
            str(key): _milli(value, f"forecast.borrows.{key}")
            for key, value in _mapping(body.get("borrows", {}), "forecast.borrows").items()
        },
        reason=_text(body.get("reason", ""), "forecast.reason"),
        message=_text(body.get("message", ""), "forecast.message"),
        place=place_from_json(body.get("place")),
        team=_text(team, "forecast.team") if team is not None else None,
        cohort=_text(cohort, "forecast.cohort") if cohort is not None else None,
    )


def distinct_nodes(nodes: Mapping[str, str]) -> list[str]:
    """The nodes of a placement, each once, in rank order."""
    return list(dict.fromkeys(nodes.values()))


def wait_phrase(message: str) -> str:
    """``waiting for 16 GPUs ...`` -> ``will wait for 16 GPUs ...``; else ``will wait: ...``."""
    if message.startswith("waiting for "):
        return "will wait for " + message.removeprefix("waiting for ")
    return f"will wait: {message}" if message else "will wait"


def names_a_group(domain: str) -> bool:
    """Whether a domain says more than the node list: not the whole pool, not a single host."""
    return (
        bool(domain)
        and domain != "the pool"
        and not domain.startswith(HOSTNAME_DOMAIN)
        and not domain.startswith(NODE_DOMAIN)
    )


def forecast_warning(forecast: Forecast) -> str:
    """The admission warning for ``forecast`` (rule 2)."""
    if forecast.reason == reasons.REASON_MANAGED_ELSEWHERE:
        return WARNING_PREFIX + forecast.message
    if forecast.verdict == "Wait":
        return WARNING_PREFIX + wait_phrase(forecast.message)
    nodes = named(distinct_nodes(forecast.nodes))
    where = f" ({forecast.domain})" if names_a_group(forecast.domain) else ""
    if forecast.verdict == "Preempt":
        victims = named([gang.phrase() for gang in forecast.preempts], limit=3)
        return f"{WARNING_PREFIX}will preempt {victims}, then start on {nodes}{where}"
    borrowed = forecast.borrows.get("gpus", 0)
    lends = ""
    if borrowed > 0:
        cohort = f"cohort {forecast.cohort}" if forecast.cohort else "its cohort"
        lends = f"; borrows {gpus_phrase(borrowed)} of {cohort}'s idle quota"
    return f"{WARNING_PREFIX}will start now on {nodes}{where}{lends}"


# ------------------------------------------------------------------ rule 4: one job


@dataclass(frozen=True, slots=True)
class JobOutlook:
    """One job as the controller sees it now (``torchgate explain``, rule 4).

    Attributes:
        job: ``namespace/name``.
        known: Whether the controller knows the job at all (queued, holding nodes or noted).
        waiting: Whether it waits for admission (in the queue, or its nodes held while it
            preempts).
        kind: What it waits for: ``Quota``, ``Capacity``, ``Topology``, ``Preempting``.
        reason: The ``Queued`` reason for ``kind``.
        message: Why it waits, live (its ``Queued`` condition is rewritten at most every 30 s).
        place: Its place in the queue (``None`` while its nodes are held, or not waiting).
        must_end: The running gangs whose end would let it start now (the cheapest set under the
            preemption rules, priority aside), when some set would.
        ending_lets_start: When no set may be preempted for it (``must_end`` empty: the gangs
            holding the room are other teams' within their nominal quota), the running gangs
            whose end would let it start; empty when no end would.
        preempting: The gangs being preempted for it.
        starts_next_cycle: Whether the next cycle would admit it (its wait is already over).
        placeable: ``False`` when no node admits one of its pods at all (its nodeSelector,
            affinity, tolerations or pinned hosts leave none): no job's end lets it start.
        starts_if_cleared: The nodes out of use for it (NotReady, cordoned, quarantined or
            tainted) whose return alone would let it start now, when it would.
        nodes: Pod -> node of the gang holding capacity (running, or reserved).
        domains: The topology domains those nodes are in, coarsest level first.
        admitted_at: When the controller admitted it (RFC 3339), if it did.
        team: The team owning its namespace.
        priority: The priority it is queued with.
        gpus: What its gang counts against quota (milli).
        runs: Whether the controller runs the job (``reconciler.is_ours``); ``None``: not known.
    """

    job: str
    known: bool = False
    waiting: bool = False
    kind: str = ""
    reason: str = ""
    message: str = ""
    place: Place | None = None
    must_end: tuple[Gang, ...] = ()
    ending_lets_start: tuple[Gang, ...] = ()
    preempting: tuple[str, ...] = ()
    starts_next_cycle: bool = False
    placeable: bool = True
    starts_if_cleared: tuple[str, ...] = ()
    nodes: Mapping[str, str] = field(default_factory=dict)
    domains: tuple[str, ...] = ()
    admitted_at: str | None = None
    team: str | None = None
    priority: int | None = None
    gpus: int = 0
    runs: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire form (rule 4)."""
        return {
            "job": self.job,
            "known": self.known,
            "waiting": self.waiting,
            "kind": self.kind,
            "reason": self.reason,
            "message": self.message,
            "place": None if self.place is None else self.place.to_json(),
            "mustEnd": [gang.to_json() for gang in self.must_end],
            "endingLetsStart": [gang.to_json() for gang in self.ending_lets_start],
            "preempting": list(self.preempting),
            "startsNextCycle": self.starts_next_cycle,
            "placeable": self.placeable,
            "startsIfCleared": list(self.starts_if_cleared),
            "nodes": dict(self.nodes),
            "domains": list(self.domains),
            "admittedAt": self.admitted_at,
            "team": self.team,
            "priority": self.priority,
            "gpus": _gpus(self.gpus),
            "runs": self.runs,
        }


def outlook_from_json(raw: object) -> JobOutlook:
    """A ``JobOutlook`` from its wire form; ``MalformedAnswer`` when it has another shape."""
    body = _mapping(raw, "outlook")
    team, admitted, runs = body.get("team"), body.get("admittedAt"), body.get("runs")
    if runs is not None and not isinstance(runs, bool):
        raise MalformedAnswer("outlook.runs: expected true, false or null")
    return JobOutlook(
        job=_text(body.get("job"), "outlook.job"),
        known=bool(body.get("known")),
        waiting=bool(body.get("waiting")),
        kind=_text(body.get("kind", ""), "outlook.kind"),
        reason=_text(body.get("reason", ""), "outlook.reason"),
        message=_text(body.get("message", ""), "outlook.message"),
        place=place_from_json(body.get("place")),
        must_end=tuple(
            gang_from_json(item, f"outlook.mustEnd[{index}]")
            for index, item in enumerate(_list(body.get("mustEnd", []), "outlook.mustEnd"))
        ),
        ending_lets_start=tuple(
            gang_from_json(item, f"outlook.endingLetsStart[{index}]")
            for index, item in enumerate(
                _list(body.get("endingLetsStart", []), "outlook.endingLetsStart")
            )
        ),
        preempting=tuple(
            _text(item, "outlook.preempting[]")
            for item in _list(body.get("preempting", []), "outlook.preempting")
        ),
        starts_next_cycle=bool(body.get("startsNextCycle")),
        placeable=body.get("placeable", True) is not False,
        starts_if_cleared=tuple(
            _text(item, "outlook.startsIfCleared[]")
            for item in _list(body.get("startsIfCleared", []), "outlook.startsIfCleared")
        ),
        nodes=_nodes(body.get("nodes", {}), "outlook.nodes"),
        domains=tuple(
            _text(item, "outlook.domains[]")
            for item in _list(body.get("domains", []), "outlook.domains")
        ),
        admitted_at=_text(admitted, "outlook.admittedAt") if admitted is not None else None,
        team=_text(team, "outlook.team") if team is not None else None,
        priority=_optional_int(body.get("priority"), "outlook.priority"),
        gpus=_milli(body.get("gpus", 0), "outlook.gpus"),
        runs=runs,
    )


# ------------------------------------------------------------------ rule 5: the pool


@dataclass(frozen=True, slots=True)
class TeamView:
    """One team's share of the pool (GPUs in milli-units; ``None`` limit: unlimited)."""

    name: str
    cohort: str
    nominal: int
    borrowing_limit: int | None
    used: int
    borrowed: int
    lent: int
    admitted_jobs: int
    waiting_jobs: int
    waiting_gpus: int
    longest_wait_seconds: float | None

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "name": self.name,
            "cohort": self.cohort,
            "nominalGPUs": _gpus(self.nominal),
            "borrowingLimitGPUs": None
            if self.borrowing_limit is None
            else _gpus(self.borrowing_limit),
            "usedGPUs": _gpus(self.used),
            "borrowedGPUs": _gpus(self.borrowed),
            "lentGPUs": _gpus(self.lent),
            "admittedJobs": self.admitted_jobs,
            "waitingJobs": self.waiting_jobs,
            "waitingGPUs": _gpus(self.waiting_gpus),
            "longestWaitSeconds": self.longest_wait_seconds,
        }


@dataclass(frozen=True, slots=True)
class DomainView:
    """GPUs of one topology domain (``level`` is the label key; milli-units)."""

    level: str
    name: str
    nodes: int
    gpus: int
    used: int
    free: int

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "level": self.level,
            "name": self.name,
            "nodes": self.nodes,
            "gpus": _gpus(self.gpus),
            "usedGPUs": _gpus(self.used),
            "freeGPUs": _gpus(self.free),
        }


@dataclass(frozen=True, slots=True)
class NodeProblem:
    """A node placement cannot use now, why, and since when (RFC 3339, empty: not known).

    Reasons: ``lost (Ready is Unknown)``, ``NotReady``, ``cordoned``, ``tainted key:NoSchedule``.
    """

    node: str
    reason: str
    since: str = ""

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {"node": self.node, "reason": self.reason, "since": self.since}


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One waiting job at the head of the queue."""

    job: str
    position: int
    team: str | None
    priority: int
    gpus: int
    kind: str
    reason: str
    message: str
    waiting_seconds: float

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "job": self.job,
            "position": self.position,
            "team": self.team,
            "priority": self.priority,
            "gpus": _gpus(self.gpus),
            "kind": self.kind,
            "reason": self.reason,
            "message": self.message,
            "waitingSeconds": round(self.waiting_seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class Preemptor:
    """A job whose nodes are held while the gangs preempted for it terminate (not queued)."""

    job: str
    team: str | None
    gpus: int
    victims: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "job": self.job,
            "team": self.team,
            "gpus": _gpus(self.gpus),
            "victims": list(self.victims),
        }


@dataclass(frozen=True, slots=True)
class PoolView:
    """The pool as a whole (``torchgate top``, rule 5); ``queue`` holds the head only.

    ``waiting_jobs`` counts the queued jobs and the ``preempting`` ones.
    """

    gpu_resource: str
    teams: tuple[TeamView, ...] = ()
    domains: tuple[DomainView, ...] = ()
    unusable_nodes: tuple[NodeProblem, ...] = ()
    queue: tuple[QueueEntry, ...] = ()
    waiting_jobs: int = 0
    total_gpus: int = 0
    used_gpus: int = 0
    preempting: tuple[Preemptor, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The wire form (rule 5)."""
        return {
            "gpuResource": self.gpu_resource,
            "gpus": _gpus(self.total_gpus),
            "usedGPUs": _gpus(self.used_gpus),
            "waitingJobs": self.waiting_jobs,
            "teams": [team.to_json() for team in self.teams],
            "domains": [domain.to_json() for domain in self.domains],
            "unusableNodes": [node.to_json() for node in self.unusable_nodes],
            "queue": [entry.to_json() for entry in self.queue],
            "preempting": [preemptor.to_json() for preemptor in self.preempting],
        }


def pool_from_json(raw: object) -> PoolView:
    """A ``PoolView`` from its wire form; ``MalformedAnswer`` when it has another shape."""
    body = _mapping(raw, "pool")

    def limit(value: object, where: str) -> int | None:
        return None if value is None else _milli(value, where)

    teams = tuple(
        TeamView(
            name=_text(team.get("name"), "pool.teams[].name"),
            cohort=_text(team.get("cohort"), "pool.teams[].cohort"),
            nominal=_milli(team.get("nominalGPUs", 0), "pool.teams[].nominalGPUs"),
            borrowing_limit=limit(team.get("borrowingLimitGPUs"), "pool.teams[].borrowingLimit"),
            used=_milli(team.get("usedGPUs", 0), "pool.teams[].usedGPUs"),
            borrowed=_milli(team.get("borrowedGPUs", 0), "pool.teams[].borrowedGPUs"),
            lent=_milli(team.get("lentGPUs", 0), "pool.teams[].lentGPUs"),
            admitted_jobs=_optional_int(team.get("admittedJobs"), "pool.teams[]") or 0,
            waiting_jobs=_optional_int(team.get("waitingJobs"), "pool.teams[]") or 0,
            waiting_gpus=_milli(team.get("waitingGPUs", 0), "pool.teams[].waitingGPUs"),
            longest_wait_seconds=_optional_seconds(
                team.get("longestWaitSeconds"), "pool.teams[].longestWaitSeconds"
            ),
        )
        for team in (_mapping(t, "pool.teams[]") for t in _list(body.get("teams", []), "teams"))
    )
    domains = tuple(
        DomainView(
            level=_text(domain.get("level"), "pool.domains[].level"),
            name=_text(domain.get("name"), "pool.domains[].name"),
            nodes=_optional_int(domain.get("nodes"), "pool.domains[].nodes") or 0,
            gpus=_milli(domain.get("gpus", 0), "pool.domains[].gpus"),
            used=_milli(domain.get("usedGPUs", 0), "pool.domains[].usedGPUs"),
            free=_milli(domain.get("freeGPUs", 0), "pool.domains[].freeGPUs"),
        )
        for domain in (
            _mapping(d, "pool.domains[]") for d in _list(body.get("domains", []), "domains")
        )
    )
    unusable = tuple(
        NodeProblem(
            node=_text(node.get("node"), "pool.unusableNodes[].node"),
            reason=_text(node.get("reason"), "pool.unusableNodes[].reason"),
            since=_text(node.get("since", ""), "pool.unusableNodes[].since"),
        )
        for node in (
            _mapping(n, "pool.unusableNodes[]")
            for n in _list(body.get("unusableNodes", []), "unusableNodes")
        )
    )
    queue = tuple(
        QueueEntry(
            job=_text(entry.get("job"), "pool.queue[].job"),
            position=_optional_int(entry.get("position"), "pool.queue[].position") or 0,
            team=entry.get("team") if isinstance(entry.get("team"), str) else None,
            priority=_optional_int(entry.get("priority"), "pool.queue[].priority") or 0,
            gpus=_milli(entry.get("gpus", 0), "pool.queue[].gpus"),
            kind=_text(entry.get("kind", ""), "pool.queue[].kind"),
            reason=_text(entry.get("reason", ""), "pool.queue[].reason"),
            message=_text(entry.get("message", ""), "pool.queue[].message"),
            waiting_seconds=_optional_seconds(
                entry.get("waitingSeconds"), "pool.queue[].waitingSeconds"
            )
            or 0.0,
        )
        for entry in (_mapping(e, "pool.queue[]") for e in _list(body.get("queue", []), "queue"))
    )
    preempting = tuple(
        Preemptor(
            job=_text(held.get("job"), "pool.preempting[].job"),
            team=held.get("team") if isinstance(held.get("team"), str) else None,
            gpus=_milli(held.get("gpus", 0), "pool.preempting[].gpus"),
            victims=tuple(
                _text(victim, "pool.preempting[].victims[]")
                for victim in _list(held.get("victims", []), "pool.preempting[].victims")
            ),
        )
        for held in (
            _mapping(p, "pool.preempting[]")
            for p in _list(body.get("preempting", []), "preempting")
        )
    )
    return PoolView(
        gpu_resource=_text(body.get("gpuResource", ""), "pool.gpuResource"),
        teams=teams,
        domains=domains,
        unusable_nodes=unusable,
        queue=queue,
        waiting_jobs=_optional_int(body.get("waitingJobs"), "pool.waitingJobs") or 0,
        total_gpus=_milli(body.get("gpus", 0), "pool.gpus"),
        used_gpus=_milli(body.get("usedGPUs", 0), "pool.usedGPUs"),
        preempting=preempting,
    )

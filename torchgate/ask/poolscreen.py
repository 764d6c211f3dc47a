"""The pool on one screen (``torchgate top``): the pool view as fixed-width text tables.

Why pure and apart from the command: what fits where is a set of rules worth testing with plain
data (a ``PoolView`` and a width), and the command only fetches, clears and repeats.

Invariants: every line is at most ``width`` characters (a person's terminal never wraps it) when
a width is given, and no line carries an escape sequence (the command adds those, on a TTY only).

Rules (each one function):

1. ``duration``: a span as ``45s``, ``5m12s``, ``2h03m``, ``3d04h`` (two units at most).
2. ``table``: columns as wide as their widest cell, two spaces apart; numbers right-aligned; the
   last column takes what is left of the width and is cut with ``…``.
3. ``render``: a title line with the pool's totals (then the time, which a narrow terminal cuts
   first), then per team quota (nominal), used, borrowed, lent, running and waiting jobs, the
   waiting jobs' GPUs and the longest wait; per topology domain GPUs used and free; the nodes
   placement cannot use, why and since when; the jobs preempting (their nodes held until the gangs
   preempted for them terminate: waiting, though out of the queue), with those gangs; the head of
   the queue, each job's reason under it, indented, with the controller's words, out of the queued
   jobs alone.
4. ``_shown``: on a terminal (a width given) the tables that grow with the pool rather than with
   what a person acts on (its topology domains, one per GPU node when it has no topology; its
   nodes out of use, a whole rack of them after a rack loss; the preemptors) show their first
   ``TERMINAL_ROWS`` rows and count the rest on one line, as the queue shows its head (the
   controller sends 20): a 500-node pool without topology would otherwise push the title, the
   teams and the queue off a redrawn screen. Piped, every row is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from torchgate.pytorchjob import moments
from torchgate.pytorchjob.outlook import PoolView

ELLIPSIS: Final = "…"
TERMINAL_ROWS: Final = 10


def duration(seconds: float) -> str:
    """A span for a person, two units at most (rule 1)."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _cut(text: str, room: int) -> str:
    if room <= 0:
        return ""
    return text if len(text) <= room else text[: room - 1] + ELLIPSIS


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    numeric: frozenset[int] = frozenset(),
    width: int | None = None,
) -> list[str]:
    """Rows under their headers, two spaces apart, cut to ``width`` (rule 2)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(cells[:-1])
        ]
        lead = "  ".join(parts) + ("  " if parts else "")
        last = cells[-1].rjust(widths[-1]) if len(cells) - 1 in numeric else cells[-1]
        if width is not None:
            last = _cut(last, width - len(lead))
            lead = lead[:width]
        return (lead + last).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _shown(rows: Sequence[Sequence[str]], width: int | None) -> tuple[list[Sequence[str]], str]:
    """The rows a screen shows and, when some are left out, the line counting them (rule 4)."""
    if width is None or len(rows) <= TERMINAL_ROWS:
        return list(rows), ""
    left = len(rows) - TERMINAL_ROWS
    return list(rows[:TERMINAL_ROWS]), _cut(
        f"{ELLIPSIS} and {left} more (piped, all are shown)", width
    )


def _amount(milli: int) -> str:
    whole, rest = divmod(milli, 1000)
    return str(whole) if not rest else f"{milli / 1000:g}"


def _since(moment: str, now: datetime) -> str:
    if not moment:
        return ""
    then = moments.parse_time(moment)
    if then is None:
        return moment
    return f"{then.strftime('%H:%M:%S')} ({duration((now - then).total_seconds())} ago)"


def render(view: PoolView, now: datetime, *, width: int | None = None) -> list[str]:
    """One screen of ``torchgate top`` (rule 3): title, teams, domains, nodes, queue."""
    free = view.total_gpus - view.used_gpus
    title = (  # the facts first: a narrow terminal cuts the time, not the count of waiting jobs
        f"torchgate top  {view.gpu_resource}: {_amount(view.used_gpus)} of "
        f"{_amount(view.total_gpus)} used, {_amount(free)} free; waiting jobs: "
        f"{view.waiting_jobs}  {now.strftime('%Y-%m-%d %H:%M:%S %Z')}"
    )
    return [
        _cut(title, width) if width is not None else title,
        "",
        *_teams(view, width),
        *_domains(view, width),
        "",
        *_unusable_nodes(view, now, width),
        "",
        *_preempting(view, width),
        *_queue(view, width),
    ]


def _teams(view: PoolView, width: int | None) -> list[str]:
    if not view.teams:
        return ["no TeamQuotas: every namespace shares the pool"]
    rows = [
        [
            team.name,
            team.cohort,
            _amount(team.nominal),
            _amount(team.used),
            _amount(team.borrowed),
            _amount(team.lent),
            str(team.admitted_jobs),
            str(team.waiting_jobs),
            _amount(team.waiting_gpus),
            "" if team.longest_wait_seconds is None else duration(team.longest_wait_seconds),
        ]
        for team in view.teams
    ]
    headers = ["TEAM", "COHORT", "QUOTA", "USED", "BORROWED", "LENT", "RUNNING", "WAITING"]
    headers += ["WAIT GPUS", "LONGEST WAIT"]
    return table(headers, rows, numeric=frozenset(range(2, 9)), width=width)


def _domains(view: PoolView, width: int | None) -> list[str]:
    if not view.domains:
        return []
    rows, more = _shown(
        [
            [d.level, d.name, str(d.nodes), _amount(d.gpus), _amount(d.used), _amount(d.free)]
            for d in view.domains
        ],
        width,
    )
    headers = ["LEVEL", "DOMAIN", "NODES", "GPUS", "USED", "FREE"]
    shown = table(headers, rows, numeric=frozenset({2, 3, 4, 5}), width=width)
    return ["", *shown, *([more] if more else [])]


def _unusable_nodes(view: PoolView, now: datetime, width: int | None) -> list[str]:
    if not view.unusable_nodes:
        return ["every node is usable"]
    rows, more = _shown(
        [[n.node, _since(n.since, now), n.reason] for n in view.unusable_nodes], width
    )
    return [*table(["UNUSABLE NODE", "SINCE", "WHY"], rows, width=width), *([more] if more else [])]


def _preempting(view: PoolView, width: int | None) -> list[str]:
    if not view.preempting:
        return []
    rows, more = _shown(
        [
            [held.job, held.team or "", _amount(held.gpus), ", ".join(held.victims)]
            for held in view.preempting
        ],
        width,
    )
    headers = ["PREEMPTING", "TEAM", "GPUS", "WAITING FOR THESE TO TERMINATE"]
    shown = table(headers, rows, numeric=frozenset({2}), width=width)
    return [*shown, *([more] if more else []), ""]


def _queue(view: PoolView, width: int | None) -> list[str]:
    if not view.queue:
        return ["no job is queued" if view.preempting else "no job is waiting"]
    rows = [
        [
            str(entry.position),
            entry.job,
            entry.team or "",
            _amount(entry.gpus),
            str(entry.priority),
            duration(entry.waiting_seconds),
            entry.reason or "-",
        ]
        for entry in view.queue
    ]
    shown = f"QUEUE (first {len(view.queue)} of {view.waiting_jobs - len(view.preempting)})"
    header, *entries = table(["#", shown, "TEAM", "GPUS", "PRIO", "WAITED", "REASON"], rows,
                             numeric=frozenset({0, 3, 4, 5}), width=width)  # fmt: skip
    lines = [header]
    for line, entry in zip(entries, view.queue, strict=True):
        why = f"   {entry.message}"
        lines += [line, _cut(why, width) if width is not None else why]
    return lines

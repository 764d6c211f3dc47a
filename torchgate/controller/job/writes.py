"""When a planned status is written: now, or after some seconds. One policy, one place.

``plan()`` computes the whole status a job should have, from the status written at the apiserver.
This module decides only *when* the reconciler writes it, from three things: the status written,
the status wanted, and ``WriteFacts`` (how long the job's status has differed from what is
written, how long ago it was last written, and how many pod and Service creates the controller
has waiting or in flight). The
reconciler applies the answer: it writes now, or writes nothing and looks at the job again after
the delay, when ``plan()`` derives the status afresh from what is written. A status that was not
written is never anything a later plan starts from, and a crash loses nothing a plan cannot
derive again.

Why hold a status back at all: a status patch costs the apiserver about twice what a pod create
costs (``benchmarks/apiserver_costs.py``), and a job's first seconds change its status several
times (``Created``; then ``Queued`` or ``startTime`` a few milliseconds later, once the admitter has
answered; ``Running``; the replica counts, as pods start one by one). Written one by one, while a
wave of gangs is being admitted, they take the apiserver's time from the pods that start those
gangs.

The rules, in order (the first that applies decides):

1. **News is written now.** News is any change that is not progress (``is_progress``):
   ``Restarting``, ``Succeeded``, ``Failed``, ``Suspended``, ``Running`` turning False,
   ``completionTime``, a ``startTime`` changed or dropped, anything this module does not know.
   Users, tools and the job's own timers wait for it.
2. **While creates are pending, progress waits** until it has been pending ``busy_hold_seconds``
   (the reconciler looks at the job again as soon as no create is pending, so the wait ends with
   the wave): the apiserver's time goes to the pods of admitted gangs first, and the job's
   changes of those seconds (``Created``, ``Queued`` or ``startTime``, ``Running``, counts)
   become one write.
3. **Counts alone are written at most once per** ``counts_interval_seconds``: a gang's pods turn
   Running one by one, and each would rewrite the job's ``replicaStatuses``.
4. Otherwise the status is written now: on a quiet cluster a condition shows up at once.

Progress is: ``Created`` or ``Queued`` appearing, changing or going; ``Running`` turning or staying
True; the replica counts; ``startTime`` appearing. A held write is bounded: a status waits at most
``busy_hold_seconds`` from when it was first wanted, or ``counts_interval_seconds`` from the last
write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Final

from torchgate.controller.job import status as st
from torchgate.pytorchjob import reasons
from torchgate.pytorchjob.conditions import conditions_of

# A wave of 500 gangs (4,000 pods) takes the scale benchmark's apiserver 30-35 s to create on
# 5,000 nodes (docs/scale.md): the statuses of the jobs that arrive with it (most of them waiting)
# go out after it, not inside it. A hold shorter than the wave ends inside it and lets every held
# status out at once, each patch costing the apiserver two pod creates.
BUSY_HOLD_SECONDS: Final = 60.0
# A gang's pods turn Running within a second or so of each other: one counts write for them.
COUNTS_INTERVAL_SECONDS: Final = 1.0
PROGRESS_FIELDS: Final = frozenset({"conditions", "replicaStatuses", "startTime"})


@dataclass(frozen=True, slots=True)
class WriteFacts:
    """What the reconciler knows besides the two statuses.

    Attributes:
        pending_seconds: How long the job's planned status has differed from the written one
            (0 the first time it does).
        since_last_write: Seconds since this controller last wrote the job's status (``None``:
            not since it started).
        creates_pending: Pod and Service creates the controller has waiting or in flight.
    """

    pending_seconds: float = 0.0
    since_last_write: float | None = None
    creates_pending: int = 0


def is_progress(written: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether ``wanted`` differs from ``written`` only by a job's ordinary progress (rule 1)."""
    before = dict(written or {})
    if before.get("startTime") is not None and before.get("startTime") != wanted.get("startTime"):
        return False
    if _without(before, PROGRESS_FIELDS) != _without(wanted, PROGRESS_FIELDS):
        return False
    return _news(conditions_of(before)) == _news(conditions_of(wanted))


def is_counts_only(written: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether ``wanted`` differs from ``written`` only by the replica counts (rule 3)."""
    return bool(written) and _without(written or {}, {"replicaStatuses"}) == _without(
        wanted, {"replicaStatuses"}
    )


def _without(status: Mapping[str, Any], fields: AbstractSet[str]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in fields}


def _news(conditions: Sequence[st.Condition]) -> list[tuple[Any, Any, Any]]:
    """The conditions that are not progress, as (type, status, reason), in order."""
    return [
        (c.get("type"), c.get("status"), c.get("reason"))
        for c in conditions
        if c.get("type") not in (reasons.CREATED, reasons.QUEUED)
        and not (c.get("type") == reasons.RUNNING and c.get("status") == st.TRUE)
    ]


@dataclass(frozen=True, slots=True)
class StatusWritePolicy:
    """The seconds to wait before writing a planned status (0: write it now); see the rules."""

    busy_hold_seconds: float = BUSY_HOLD_SECONDS
    counts_interval_seconds: float = COUNTS_INTERVAL_SECONDS

    def delay(
        self, written: Mapping[str, Any] | None, wanted: Mapping[str, Any], facts: WriteFacts
    ) -> float:
        """Seconds until ``wanted`` should be written over ``written`` (0.0: now)."""
        if not is_progress(written, wanted):
            return 0.0
        counts = self._counts_interval(facts) if is_counts_only(written, wanted) else 0.0
        return max(self._busy_hold(facts), counts)

    def _busy_hold(self, facts: WriteFacts) -> float:
        """Rule 2: what is left of the hold while creates are pending."""
        if facts.creates_pending <= 0:
            return 0.0
        return max(0.0, self.busy_hold_seconds - facts.pending_seconds)

    def _counts_interval(self, facts: WriteFacts) -> float:
        """Rule 3: what is left of the interval since the last write."""
        if facts.since_last_write is None:
            return 0.0
        return max(0.0, self.counts_interval_seconds - facts.since_last_write)

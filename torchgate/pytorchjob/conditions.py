"""When a condition began: the one ``lastTransitionTime`` rule for every condition torchgate writes.

Why one place: the controller writes a PyTorchJob's conditions (``controller.job.status``) and a
TeamQuota's (``controller.admission.poolsource``), the webhook a PlacementPolicy's
(``webhook.policysource``), and ``torchgate explain`` and users' alerts read
``lastTransitionTime`` as "in this state since". Kubernetes' convention (``metav1.Condition``)
is that it moves only when the condition's ``status`` moves: a new reason or message, or a status
rewritten as it was (every pass of a status writer, a restarted or newly elected controller),
keeps it. Each writer reads the stored conditions back (from its cache, so the time survives a
restart) and stamps what it writes here; a writer that finds the stored status already saying
it all writes nothing (rule 3), so a restart, or a second replica, costs no write.

Rules (each one function):

0. ``conditions_of``: the conditions of a status as stored, read defensively (anyone with access
   to the status subresource may have written anything there).
1. ``transition_time``: a condition of ``kind`` with ``status`` began when the previous
   condition of that type began if that one had the same status (and a time); otherwise now.
2. ``stamp_transitions``: conditions as they are written, each with its ``lastTransitionTime``
   by rule 1 (any time they carried is replaced).
3. ``status_to_write``: a status (its ``conditions`` and any other fields) as written over the
   previous one (the one stored, or the one this writer last wrote): its conditions stamped by
   rule 2 against the previous ones; ``None`` when the previous status already holds every field
   of it as is (fields it does not write are not compared).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def conditions_of(status: object) -> list[dict[str, Any]]:
    """Copies of the well-formed conditions of a raw status (entries with a string ``type``)."""
    raw = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(raw, list):
        return []
    return [dict(c) for c in raw if isinstance(c, Mapping) and isinstance(c.get("type"), str)]


def transition_time(
    previous: Iterable[Mapping[str, Any]], kind: str, status: str, *, now: str
) -> str:
    """When a condition of ``kind`` with ``status`` began, given the ``previous`` ones (rule 1)."""
    for condition in previous:
        if condition.get("type") != kind:
            continue
        began = condition.get("lastTransitionTime")
        if condition.get("status") == status and isinstance(began, str) and began:
            return began
        return now
    return now


def stamp_transitions(
    conditions: Sequence[Mapping[str, Any]],
    previous: Sequence[Mapping[str, Any]],
    *,
    now: str,
) -> list[dict[str, Any]]:
    """``conditions``, each with its ``lastTransitionTime`` by rule 1 (rule 2)."""
    return [
        {
            **condition,
            "lastTransitionTime": transition_time(
                previous, str(condition.get("type")), str(condition.get("status")), now=now
            ),
        }
        for condition in conditions
    ]


def status_to_write(
    status: Mapping[str, Any], previous: object, *, now: str
) -> dict[str, Any] | None:
    """``status`` stamped against ``previous``; ``None`` when that already says it all (rule 3).

    ``status``: what the writer computed, with a ``conditions`` list; ``previous``: the status
    stored (any shape: anyone may have written it) or the one the writer last wrote; ``now``:
    the time a condition whose status moved began.
    """
    before: Mapping[str, Any] = previous if isinstance(previous, Mapping) else {}
    stamped = stamp_transitions(status["conditions"], conditions_of(before), now=now)
    written = {**status, "conditions": stamped}
    if all(before.get(key) == value for key, value in written.items()):
        return None
    return written

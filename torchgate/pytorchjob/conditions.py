"""When a condition began: the one ``lastTransitionTime`` rule for every condition torchgate writes.

Why one place: the controller writes a PyTorchJob's conditions (``controller.job.status``) and a
TeamQuota's (``controller.admission.poolsource``), the webhook a PlacementPolicy's
(``webhook.policysource``), and ``torchgate explain`` and users' alerts read
``lastTransitionTime`` as "in this state since". Kubernetes' convention (``metav1.Condition``)
is that it moves only when the condition's ``status`` moves: a new reason or message, or a status
rewritten as it was (every pass of a status writer, a restarted or newly elected controller),
keeps it. Each writer reads the stored conditions back (from its cache, so the time survives a
restart) and stamps what it writes here.

Rules (each one function):

0. ``conditions_of``: the conditions of a status as stored, read defensively (anyone with access
   to the status subresource may have written anything there).
1. ``transition_time``: a condition of ``kind`` with ``status`` began when the previous
   condition of that type began if that one had the same status (and a time); otherwise now.
2. ``stamp_transitions``: conditions as they are written, each with its ``lastTransitionTime``
   by rule 1 (any time they carried is replaced).
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

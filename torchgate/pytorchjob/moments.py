"""Moments as Kubernetes writes them, read and written in one place.

Why one module: the controller, the webhook and the commands that ask the controller all read
times from API objects (``creationTimestamp``, condition and status times, a taint's
``timeAdded``, an Event's ``lastTimestamp``) and write them back (job status, TeamQuota
conditions, Events, the leader's Lease, the quarantine record and label). Kubernetes writes
``metav1.Time`` as RFC 3339 in UTC with a ``Z`` and whole seconds, and ``metav1.MicroTime``
(Leases, ``events.k8s.io`` Events) the same with six fractional digits. Written once here, every
reader accepts what every writer writes, and no reader crashes on what a person typed: a
hand-edited annotation or status is "no time", never an exception.

Rules (each one function):

1. ``parse_time``: text as RFC 3339 (Python's ``datetime.fromisoformat``: a ``Z`` or an offset,
   fractional seconds or none), the offset kept as written; a value without an offset reads as
   UTC, or as ``None`` when ``zone_required`` (a record torchgate writes itself always has one);
   anything else (not text, empty, unreadable) is ``None``, never an exception.
2. ``format_time``: ``metav1.Time``: UTC, whole seconds (a fraction is dropped), ``Z``.
3. ``format_micro_time``: ``metav1.MicroTime``: UTC, six fractional digits, ``Z``.
4. ``format_exact_time``: UTC with a ``Z`` and microseconds only when the moment has some: what
   torchgate writes for itself to read back equal (rule 1), as short as the moment allows.
5. ``format_label_time`` / ``parse_label_time``: a label value (which cannot hold ``:``): ISO
   8601 basic format, UTC, whole seconds, ``Z`` (``20260301T120000Z``); read back from exactly
   that form, else ``None``.

Every writer reads a moment without a time zone as UTC. Years are written with four digits.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, Literal

_LABEL_FORMAT: Final = "%Y%m%dT%H%M%SZ"  # how rule 5 reads a label value


def _utc(moment: datetime) -> datetime:
    """``moment`` in UTC, a naive one read as UTC already, without its time zone."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None)


def _rfc3339(moment: datetime, fraction: Literal["seconds", "microseconds", "auto"]) -> str:
    return _utc(moment).isoformat(timespec=fraction) + "Z"


def parse_time(value: object, *, zone_required: bool = False) -> datetime | None:
    """Rule 1: the timezone-aware moment ``value`` writes, ``None`` when it writes none."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        return moment
    return None if zone_required else moment.replace(tzinfo=UTC)


def format_time(moment: datetime) -> str:
    """Rule 2: ``moment`` as ``metav1.Time`` (``2026-03-01T12:00:00Z``)."""
    return _rfc3339(moment, "seconds")


def format_micro_time(moment: datetime) -> str:
    """Rule 3: ``moment`` as ``metav1.MicroTime`` (``2026-03-01T12:00:00.000000Z``)."""
    return _rfc3339(moment, "microseconds")


def format_exact_time(moment: datetime) -> str:
    """Rule 4: ``moment`` in RFC 3339 with all its microseconds, none written when it has none."""
    return _rfc3339(moment, "auto")


def format_label_time(moment: datetime) -> str:
    """Rule 5: ``moment`` as a label value (``20260301T120000Z``)."""
    utc = _utc(moment)
    return f"{utc.year:04d}{utc:%m%dT%H%M%S}Z"


def parse_label_time(value: object) -> datetime | None:
    """Rule 5: the moment a label value written by ``format_label_time`` names, else ``None``."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, _LABEL_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None

"""Integers written as text (annotations, ``nprocPerNode``, flag and label values), read safely.

Python refuses to turn more than 4300 digits into an ``int`` (a ``ValueError``: its guard against
quadratic-time parsing), and the text of a manifest or an annotation may hold any number of them.
No integer torchgate reads from text is larger than Kubernetes' own (an int64, 19 digits), so
text of more digits is not an integer here: a field error in the webhook, "not set" in the
controller, never an exception, and every integer read prints again.

The ranges of Kubernetes' integer types (``INT32``, ``INT64``) are declared here too, once, for
every rule that bounds an integer as the apiserver's Go types do.
"""

from __future__ import annotations

from typing import Final

INT32: Final = range(-(2**31), 2**31)
"""The integers an ``int32`` field holds (``replicas``, a container's ``containerPort``)."""

INT64: Final = range(-(2**63), 2**63)
"""The integers an ``int64`` holds; the apiserver decodes a JSON integer beyond it as a float64."""

MAX_DIGITS: Final = 19
"""Most digits of an integer read from text (an int64 has at most 19)."""


def parse_integer(text: str, *, signed: bool = False) -> int | None:
    """The integer ``text`` writes in ASCII digits (one leading sign when ``signed``), else None."""
    digits = text[1:] if signed and text[:1] in ("+", "-") else text
    if 0 < len(digits) <= MAX_DIGITS and digits.isascii() and digits.isdigit():
        return int(text)
    return None

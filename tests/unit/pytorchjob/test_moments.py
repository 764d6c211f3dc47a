"""``pytorchjob.moments``: Kubernetes time stamps read and written, per rule, and round trips.

The rows of the tables that ``controller.job.status`` and ``controller.quarantine.rules`` had for
their own copies (``format_time``/``parse_time``, ``format_until``/``parse_until``) are kept here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from torchgate.pytorchjob import moments

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PLUS_ONE = timezone(timedelta(hours=1))
MICRO = timedelta(microseconds=7)
HALF = timedelta(milliseconds=500)


# ------------------------------------------------------------------ rule 1: reading


@pytest.mark.parametrize(
    ("value", "expected", "zone_required"),
    [
        pytest.param("2026-03-01T12:00:00Z", NOW, NOW, id="metav1-time"),
        pytest.param("2026-03-01T12:00:00.000007Z", NOW + MICRO, NOW + MICRO, id="micro"),
        pytest.param("2026-03-01T12:00:00.5Z", NOW + HALF, NOW + HALF, id="fraction"),
        pytest.param("2026-03-01T13:00:00+01:00", NOW, NOW, id="offset"),
        pytest.param("2026-03-01T07:00:00-05:00", NOW, NOW, id="negative-offset"),
        pytest.param("2026-03-01T12:00:00", NOW, None, id="naive-is-utc-unless-zone-required"),
        pytest.param(None, None, None, id="none"),
        pytest.param("", None, None, id="empty"),
        pytest.param("yesterday", None, None, id="prose"),
        pytest.param(12, None, None, id="a-number"),
        pytest.param("2026-02-30T12:00:00Z", None, None, id="no-such-day"),
        pytest.param("2026-03-01T12:00:00+25:00", None, None, id="no-such-offset"),
        pytest.param("2026-03-01T12:00:00ZZ", None, None, id="twice-zoned"),
    ],
)
def test_parse_time_reads_rfc3339_and_nothing_else(
    value: object, expected: datetime | None, zone_required: datetime | None
) -> None:
    """``zone_required``: what is read when a zone is required."""
    moment = moments.parse_time(value)
    assert moment == expected
    assert moment is None or moment.tzinfo is not None
    assert moments.parse_time(value, zone_required=True) == zone_required


def test_parse_time_keeps_the_offset_as_written() -> None:
    moment = moments.parse_time("2026-03-01T13:00:00+01:00")
    assert moment is not None
    assert moment.utcoffset() == timedelta(hours=1)


# ------------------------------------------------------------------ rules 2-4: writing


@pytest.mark.parametrize(
    ("moment", "time", "micro_time", "exact"),
    [
        pytest.param(
            NOW + timedelta(microseconds=999),
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.000999Z",
            "2026-03-01T12:00:00.000999Z",
            id="utc",
        ),
        pytest.param(
            datetime(2026, 3, 1, 13, 0, tzinfo=PLUS_ONE),
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.000000Z",
            "2026-03-01T12:00:00Z",
            id="offset",
        ),
        pytest.param(
            datetime(2026, 3, 1, 12, 0),
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.000000Z",
            "2026-03-01T12:00:00Z",
            id="naive-is-utc",
        ),
        pytest.param(
            datetime(999, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
            "0999-01-02T03:04:05Z",
            "0999-01-02T03:04:05.600000Z",
            "0999-01-02T03:04:05.600000Z",
            id="four-digit-year",
        ),
    ],
)
def test_times_are_rfc3339_utc_with_z(
    moment: datetime, time: str, micro_time: str, exact: str
) -> None:
    assert moments.format_time(moment) == time
    assert moments.format_micro_time(moment) == micro_time
    assert moments.format_exact_time(moment) == exact


# ------------------------------------------------------------------ rule 5: label values


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        pytest.param(NOW + timedelta(microseconds=999), "20260301T120000Z", id="utc"),
        pytest.param(datetime(2026, 3, 1, 13, 0, tzinfo=PLUS_ONE), "20260301T120000Z", id="offset"),
        pytest.param(datetime(2026, 3, 1, 12, 0), "20260301T120000Z", id="naive-is-utc"),
        pytest.param(datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC), "09990102T030405Z", id="year"),
    ],
)
def test_label_times_are_iso8601_basic_utc_whole_seconds(moment: datetime, text: str) -> None:
    assert moments.format_label_time(moment) == text
    assert moments.parse_label_time(text) == moment.replace(
        microsecond=0, tzinfo=moment.tzinfo or UTC
    )


@pytest.mark.parametrize(
    "value", ["", "2026-03-01T12:30:00Z", "20261399T000000Z", "20260301T120000", None, 20260301]
)
def test_a_malformed_label_time_reads_as_unknown(value: object) -> None:
    assert moments.parse_label_time(value) is None


# ------------------------------------------------------------------ properties

# Offsets as RFC 3339 writes them: whole minutes, less than a day.
OFFSETS = hs.integers(-(24 * 60 - 1), 24 * 60 - 1).map(
    lambda minutes: timezone(timedelta(minutes=minutes)) if minutes else UTC
)
# Moments whose UTC time a ``datetime`` holds, whatever their offset.
MOMENTS = hs.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=OFFSETS
)


@given(MOMENTS)
def test_every_written_moment_reads_back(moment: datetime) -> None:
    whole = moment.astimezone(UTC).replace(microsecond=0)
    assert moments.parse_time(moments.format_time(moment)) == whole
    assert moments.parse_time(moments.format_micro_time(moment)) == moment
    assert moments.parse_time(moments.format_exact_time(moment), zone_required=True) == moment
    assert moments.parse_label_time(moments.format_label_time(moment)) == whole


@given(MOMENTS)
def test_a_naive_moment_is_written_as_utc(moment: datetime) -> None:
    utc = moment.astimezone(UTC)
    naive = utc.replace(tzinfo=None)
    for write in (
        moments.format_time,
        moments.format_micro_time,
        moments.format_exact_time,
        moments.format_label_time,
    ):
        assert write(naive) == write(moment)


@given(hs.one_of(hs.text(), hs.from_regex(r"\A[0-9T:.+Z-]{0,40}\Z"), hs.integers(), hs.none()))
def test_reading_never_raises(value: object) -> None:
    for moment in (
        moments.parse_time(value),
        moments.parse_time(value, zone_required=True),
        moments.parse_label_time(value),
    ):
        assert moment is None or moment.tzinfo is not None

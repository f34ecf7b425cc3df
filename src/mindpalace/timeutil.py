"""Timestamps: timezone-aware UTC everywhere; naive datetimes are refused."""

from __future__ import annotations

from datetime import UTC, datetime

from mindpalace.errors import ValidationError


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def require_aware(field: str, value: datetime) -> datetime:
    """Return `value` converted to UTC.

    Raises:
        ValidationError: `value` is not a datetime or is naive (no tzinfo) — a naive time is
            ambiguous, so it is refused rather than guessed.
    """
    if not isinstance(value, datetime):
        raise ValidationError(f"{field}: expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{field}: naive datetime {value.isoformat()} — pass a timezone-aware one")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
        raise ValidationError(f"{field}: {value.isoformat()} is out of range in UTC") from None


FIRST_YEAR = 2
LAST_YEAR = 9998


def require_stamp(field: str, value: datetime) -> datetime:
    """:func:`require_aware` for a timestamp given from outside (a message's): `value` in UTC,
    within the years ``FIRST_YEAR``–``LAST_YEAR``, so the date arithmetic done on it later
    (relative dates in recall and date notes, a week or a year either side) stays inside
    Python's calendar.

    Raises:
        ValidationError: as :func:`require_aware`; or the year is outside that range —
            ``datetime.min`` / ``datetime.max`` used as "no date" are refused (leave the
            timestamp out for "now").
    """
    utc = require_aware(field, value)
    if not FIRST_YEAR <= utc.year <= LAST_YEAR:
        raise ValidationError(f"{field}: {value.isoformat()} is out of range (UTC years "
                              f"{FIRST_YEAR}-{LAST_YEAR}; leave it out for now)")
    return utc


def to_iso(value: datetime) -> str:
    """ISO 8601 with offset, e.g. ``2026-11-30T20:01:02.123456+00:00``."""
    return require_aware("timestamp", value).isoformat()


def from_iso(text: str) -> datetime:
    """Parse an ISO 8601 timestamp written by :func:`to_iso` (naive input is read as UTC)."""
    dt = datetime.fromisoformat(text)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)

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
    return value.astimezone(UTC)


def to_iso(value: datetime) -> str:
    """ISO 8601 with offset, e.g. ``2026-11-30T20:01:02.123456+00:00``."""
    return require_aware("timestamp", value).isoformat()


def from_iso(text: str) -> datetime:
    """Parse an ISO 8601 timestamp written by :func:`to_iso` (naive input is read as UTC)."""
    dt = datetime.fromisoformat(text)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)

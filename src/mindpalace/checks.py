"""Argument checks shared by every layer: integers with a lower bound (budgets, counts, ids)."""

from __future__ import annotations

from typing import Any

from mindpalace.errors import ValidationError


def require_int(field: str, value: Any, *, minimum: int = 1) -> int:
    """Return `value` when it is an int ≥ `minimum` (a bool is not an int here), else raise.

    Used for every token budget, top-k, step id and count a caller passes in, so one rule and
    one message cover them all.

    Raises:
        ValidationError: naming `field`, the bound and the value received, e.g.
            ``budget_tokens must be an int >= 1, got '3'``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(f"{field} must be an int >= {minimum}, got {value!r}")
    return value


def require_session_id(session_id: Any) -> str:
    """`session_id` when it names a session: a string with some non-blank text.

    Raises:
        ValidationError: not a string, or empty / blank — ``""`` is the user-level scope
            (where user facts live), not a session, so a conversation must not be written
            there by an unset id.
    """
    if not isinstance(session_id, str):
        raise ValidationError(f"session id must be a string, got {type(session_id).__name__}")
    if not session_id.strip():
        raise ValidationError(f"session id must not be empty or blank, got {session_id!r}")
    return session_id

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

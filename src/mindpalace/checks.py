"""Argument checks shared by every layer: integers with a lower bound (budgets, counts, ids),
session ids and the other scope ids."""

from __future__ import annotations

import unicodedata
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
    """`session_id` when it names a session: printable text that is one path segment.

    The id is the ``{s}`` of the REST routes (``/v1/sessions/{s}/…``), a line of the CLI's and
    the inspector's output and the ``@<session>`` of a message reference, so every entry point
    (Python, async, REST, MCP, CLI) refuses the same ids here rather than storing a session
    that one of them cannot reach.

    Raises:
        ValidationError: naming the id — not a string; empty / blank (``""`` is the user-level
            scope, where user facts live, not a session, so a conversation must not be written
            there by an unset id); containing ``/`` or being ``.`` / ``..`` (HTTP clients and
            servers split or normalise those away, so the session would be unreachable over
            REST); or containing a control / line-separator character (newline, tab, DEL, C1,
            U+2028 / U+2029), which breaks the line it is printed on.
    """
    if not isinstance(session_id, str):
        raise ValidationError(f"session id must be a string, got {type(session_id).__name__}")
    if not session_id.strip():
        raise ValidationError(f"session id must not be empty or blank, got {session_id!r}")
    if "/" in session_id or session_id in (".", ".."):
        raise ValidationError(f"session id {session_id!r} must be one path segment: no '/', "
                              "not '.' or '..' (it would be unreachable over REST)")
    return require_scope_name("session id", session_id)


def require_scope_name(field: str, value: Any) -> Any:
    """`value` unchanged unless it is text holding a control / line-separator character.

    A tenant, user or agent id is printed on one line by the CLI and the inspector and sent as
    a query parameter, so a newline, tab, DEL, C1 control or U+2028 / U+2029 in it would split
    the line or the request; :func:`require_session_id` applies it to session ids too (the
    other scope checks — type, length, NUL, lone surrogates — are :class:`~mindpalace.scope.Scope`'s).
    Anything that is not a string (``ANY``) passes through.

    Raises:
        ValidationError: naming `field`, the id and the character's offset.
    """
    if isinstance(value, str):
        bad = next((c for c in value if _is_control(c)), None)
        if bad is not None:
            raise ValidationError(f"{field} {value!r} contains the control character "
                                  f"{bad!a} at offset {value.index(bad)}")
    return value


def _is_control(char: str) -> bool:
    """True for C0 / DEL / C1 controls and the Unicode line and paragraph separators."""
    return unicodedata.category(char) in ("Cc", "Zl", "Zp")

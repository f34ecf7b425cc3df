"""JSON text as every backend stores it (I/O-free)."""

from __future__ import annotations

import json
from typing import Any

from mindpalace.errors import ValidationError

# one encoder per option set, built once (json.dumps with options builds a new one per call)
_UTF8 = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_ASCII = json.JSONEncoder(ensure_ascii=True, allow_nan=False)


def dumps(value: Any) -> str:
    """JSON text that UTF-8 can store: lone surrogates fall back to \\u escapes (exact round
    trip)."""
    try:
        text = _UTF8.encode(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"value is not JSON-serialisable: {exc}") from exc
    except RecursionError as exc:  # hostile nesting: refused before anything is written
        raise ValidationError("value is nested too deep to store as JSON") from exc
    if text.isascii():  # nothing UTF-8 could refuse (and json escapes NUL)
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _ASCII.encode(value)
    if "\x00" in text:  # cannot happen with json.dumps (it escapes control chars); belt and braces
        raise ValidationError("JSON text contains NUL")
    return text

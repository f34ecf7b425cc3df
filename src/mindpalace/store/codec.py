"""JSON text as every backend stores it (I/O-free)."""

from __future__ import annotations

import json
from typing import Any

from mindpalace.errors import ValidationError


def dumps(value: Any) -> str:
    """JSON text that UTF-8 can store: lone surrogates fall back to \\u escapes (exact round
    trip)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"value is not JSON-serialisable: {exc}") from exc
    except RecursionError as exc:  # hostile nesting: refused before anything is written
        raise ValidationError("value is nested too deep to store as JSON") from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    if "\x00" in text:  # cannot happen with json.dumps (it escapes control chars); belt and braces
        raise ValidationError("JSON text contains NUL")
    return text

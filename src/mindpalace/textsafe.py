"""Text hygiene at the boundary: lone surrogates and NUL never reach a write half-done."""

from __future__ import annotations

import re
from typing import Any

from mindpalace.errors import InvalidTextError

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def require_text(field: str, value: Any, *, allow_empty: bool = True) -> str:
    """Return `value` if it is a storable string, else raise.

    Raises:
        InvalidTextError: not a str, contains NUL, contains a lone surrogate (which UTF-8
            cannot encode), or is empty when `allow_empty` is False. The message names the field
            and the offset of the first bad character.
    """
    if not isinstance(value, str):
        raise InvalidTextError(field, f"expected text, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise InvalidTextError(field, "must not be empty")
    nul = value.find("\x00")
    if nul >= 0:
        raise InvalidTextError(field, f"contains a NUL character at offset {nul}")
    if value.isascii():  # no surrogate can be in it: skip the scan
        return value
    m = _SURROGATE.search(value)
    if m:
        raise InvalidTextError(
            field, f"contains a lone surrogate {m.group()!a} at offset {m.start()}; "
            "decode the source with errors='replace' or pass it through clean_text()"
        )
    return value


def clean_text(value: str) -> str:
    """Escape what UTF-8 storage cannot hold: NUL → ``\\x00``, lone surrogates → ``\\udXXX``.

    Used for untrusted bulk content (tool outputs, transcripts) that must be kept rather than
    refused; the escape is visible and reversible by a reader, never silent data loss.
    """
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if value.isascii():  # no surrogate can be in it: skip the scan
        return value
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


MAX_JSON_DEPTH = 64  # an OpenAI message or a tool result nests < 20 deep; deeper is hostile


def clean_json(value: Any, _depth: int = 0) -> Any:
    """`clean_text` applied to every string (keys included) of a JSON-like structure.

    Raises:
        InvalidTextError: the structure nests deeper than MAX_JSON_DEPTH (64) levels — refused
            up front instead of a RecursionError halfway through a write; or two keys of one
            object are the same key as text (``1`` and ``"1"``), which would merge them.
    """
    kind = type(value)
    if kind is str:
        return clean_text(value)
    if kind is int or kind is float or kind is bool or value is None:  # the common leaves
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict | list | tuple) and _depth >= MAX_JSON_DEPTH:
        raise InvalidTextError("JSON value", f"nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, dict):
        out = {clean_text(str(k)): clean_json(v, _depth + 1) for k, v in value.items()}
        if len(out) != len(value):  # keys are written as text: 1 and "1" would become one
            seen: dict[str, Any] = {}
            for k in value:
                other = seen.setdefault(clean_text(str(k)), k)
                if other is not k:
                    raise InvalidTextError("JSON object", f"the keys {other!r} and {k!r} are the same "
                                           "key once written as text; one value would be lost")
        return out
    if isinstance(value, list | tuple):
        return [clean_json(v, _depth + 1) for v in value]
    return value


_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]*$")
MAX_NAME_CHARS = 128  # record names become file names in exports; keep them portable
_VALID_NAMES: set[str] = set()  # names that passed require_name (a str subclass is never cached)
_VALID_NAMES_MAX = 4096


def require_name(value: Any, *, field: str = "name") -> str:
    """Validate a record / file name: letters, digits and ``_ . : @ + -``, no path tricks.

    Raises:
        InvalidNameError: empty, longer than 128 characters, contains a path separator,
            ``..``, a leading dot, whitespace or other characters outside the allowed set.
    """
    if type(value) is str and value in _VALID_NAMES:  # checked before (the same few task ids)
        return value
    from mindpalace.errors import InvalidNameError

    if not isinstance(value, str) or not value:
        raise InvalidNameError(str(value), f"{field} must be a non-empty string")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidNameError(value[:40] + "…", f"longer than {MAX_NAME_CHARS} characters")
    if "/" in value or "\\" in value:
        raise InvalidNameError(value, "contains a path separator")
    if ".." in value:
        raise InvalidNameError(value, "contains '..'")
    if not _NAME_OK.match(value):
        raise InvalidNameError(
            value, "use letters, digits and _ . : @ + - only, starting with a letter or digit"
        )
    if type(value) is str:
        if len(_VALID_NAMES) >= _VALID_NAMES_MAX:
            _VALID_NAMES.clear()
        _VALID_NAMES.add(value)
    return value


class RepeatedKeyError(ValueError):
    """A key repeated inside one JSON object (raised by :func:`unique_keys`); `key` names it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r} in an object")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object, each key once.

    Raises:
        RepeatedKeyError: a key is repeated — ambiguous (Python keeps the last value, a proxy
            or a log may read the first).
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RepeatedKeyError(key)
        out[key] = value
    return out

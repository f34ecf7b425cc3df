"""Large texts stored once (I/O-free): content addresses, compressed chunks, JSON splices and
document-part views, shared by every backend.

A text of at least :data:`BLOB_MIN_CHARS` characters (a tool output of tens of MB) is kept
once per database in a content-addressed blob — key = SHA-256 of its UTF-8 bytes — cut into
chunks of :data:`CHUNK_CHARS` characters, each zlib-compressed only when that makes it
smaller. Every row that holds such a text refers to the blob instead of carrying a copy:

* a record's body: the key alone (:func:`blob_key`);
* an event's JSON data: the JSON text with the big string's literal cut out, plus where it
  was cut (:func:`split_json` / :func:`join_json`) — the same blob as a record holding the
  same text, so a tool output recorded as a step output and as a tool message is stored once;
* a search document part: a view = the part's own characters outside the blob, the position
  the blob's slice goes at, and the slice (offset, length) (:func:`part_views`); reading a
  part decodes the one or two chunks under it, never the whole text.

Everything here is deterministic (no seed): the same text always gives the same key, chunks
and views.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

BLOB_MIN_CHARS = 65_536
"""A text this long or longer (characters) is stored as a blob; shorter ones inline, as before."""

CHUNK_CHARS = 65_536
"""Characters per stored chunk: a read of a 16 KiB document part decodes one or two chunks."""

CODEC_UTF8 = 0
"""Chunk codec: the UTF-8 bytes as they are (compression would not have saved space)."""

CODEC_ZLIB = 1
"""Chunk codec: zlib (level :data:`ZLIB_LEVEL`) of the UTF-8 bytes."""

ZLIB_LEVEL = 1
"""zlib level: on log output level 1 keeps ~30% of the bytes at ~3× the speed of level 6."""

_UTF8 = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # as store.codec.dumps


def blob_key(text: str) -> str | None:
    """The content address of `text` (64 hex digits), or None when it is not storable as a
    blob: shorter than :data:`BLOB_MIN_CHARS`, or not encodable as UTF-8 (lone surrogates)."""
    if len(text) < BLOB_MIN_CHARS:
        return None
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return hashlib.sha256(data).hexdigest()


def encode_chunks(text: str, chunk_chars: int = CHUNK_CHARS) -> Iterator[tuple[int, int, bytes]]:
    """``(seq, codec, data)`` per chunk of `chunk_chars` characters of `text`, seq from 0.

    Raises:
        UnicodeEncodeError: `text` holds a lone surrogate (check :func:`blob_key` first).
    """
    for seq, start in enumerate(range(0, len(text), chunk_chars)):
        raw = text[start:start + chunk_chars].encode("utf-8")
        packed = zlib.compress(raw, ZLIB_LEVEL)
        if len(packed) < len(raw):
            yield seq, CODEC_ZLIB, packed
        else:
            yield seq, CODEC_UTF8, raw


def decode_chunk(codec: int, data: bytes) -> str:
    """The text of one stored chunk.

    Raises:
        ValueError: an unknown codec or damaged data (zlib.error and UnicodeDecodeError are
            ValueErrors; backends report it as a StoreError).
    """
    if codec == CODEC_UTF8:
        return bytes(data).decode("utf-8")
    if codec == CODEC_ZLIB:
        try:
            return zlib.decompress(data).decode("utf-8")
        except zlib.error as exc:
            raise ValueError(f"damaged blob chunk: {exc}") from exc
    raise ValueError(f"unknown blob chunk codec {codec}")


def chunk_span(start: int, length: int, chunk_chars: int) -> tuple[int, int]:
    """The first and last chunk seq holding characters [start, start + length) (length ≥ 1)."""
    return start // chunk_chars, (start + length - 1) // chunk_chars


# -- event data: JSON with the big string cut out ----------------------------------------------
@dataclass(frozen=True)
class SplitJson:
    """JSON text with every literal of one big string cut out (see :func:`split_json`)."""

    rest: str
    """The JSON text without the literals."""
    text: str
    """The big string."""
    key: str
    """Its blob key."""
    offsets: tuple[int, ...]
    """Where the literals were in `rest`, ascending (a position may repeat)."""


def split_json(value: Any, full: str) -> SplitJson | None:
    """`full` (= ``store.codec.dumps(value)``) with the literals of the longest string in
    `value` cut out, when that string is a blob (:func:`blob_key`); None otherwise (the JSON is
    stored inline, as before). :func:`join_json` gives back `full` exactly."""
    if len(full) < BLOB_MIN_CHARS:
        return None
    big = _longest_string(value)
    key = None if big is None else blob_key(big)
    if big is None or key is None:
        return None
    marker = uuid.uuid4().hex
    try:
        marked, count = _replace_string(value, big, marker)
        shown = _UTF8.encode(marked)
        literal = _UTF8.encode(big)
    except (RecursionError, TypeError, ValueError):
        return None
    token = f'"{marker}"'
    if shown.count(token) != count:  # the marker occurs elsewhere (never in practice): inline
        return None
    pieces = shown.split(token)
    offsets, at = [], 0
    for piece in pieces[:-1]:
        at += len(piece)
        offsets.append(at)
    rest = "".join(pieces)
    if len(rest) + count * len(literal) != len(full):  # not how dumps wrote it (ASCII fallback)
        return None
    split = SplitJson(rest, big, key, tuple(offsets))
    return split if join_json(rest, big, split.offsets) == full else None


def join_json(rest: str, text: str, offsets: tuple[int, ...] | list[int]) -> str:
    """The JSON text `rest` with the literal of `text` put back at each of `offsets`."""
    if not offsets:
        return rest
    literal = _UTF8.encode(text)
    out, last = [], 0
    for at in offsets:
        out.append(rest[last:at])
        out.append(literal)
        last = at
    out.append(rest[last:])
    return "".join(out)


def _longest_string(value: Any) -> str | None:
    best: str | None = None
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if best is None or len(v) > len(best):
                best = v
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return best


def _replace_string(value: Any, big: str, marker: str) -> tuple[Any, int]:
    """`value` with every string equal to `big` (dict values and list items) replaced by
    `marker`, and how many were replaced."""
    if isinstance(value, str):
        return (marker, 1) if value is big or value == big else (value, 0)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        n = 0
        for k, v in value.items():
            out[k], m = _replace_string(v, big, marker)
            n += m
        return out, n
    if isinstance(value, (list, tuple)):
        items = []
        n = 0
        for v in value:
            item, m = _replace_string(v, big, marker)
            items.append(item)
            n += m
        return items, n
    return value, 0


# -- search document parts as views of a blob -------------------------------------------------
@dataclass(frozen=True)
class PartView:
    """A document part's text as ``stored[:at] + blob[offset:offset + length] + stored[at:]``."""

    stored: str
    """The part's characters outside the blob (e.g. a record description's head)."""
    at: int
    """Where the blob's slice goes in `stored`."""
    offset: int
    """First character of the slice in the blob."""
    length: int
    """Characters of the slice (≥ 1)."""


def part_views(
    parts: list[str], blob_start: int, blob_chars: int
) -> list[PartView | None]:
    """Per consecutive part of a text in which a blob's text starts at `blob_start` and runs
    `blob_chars` characters: its view of the blob, or None when it holds none of it."""
    out: list[PartView | None] = []
    pos = 0
    blob_end = blob_start + blob_chars
    for part in parts:
        a, b = pos, pos + len(part)
        pos = b
        lo, hi = max(a, blob_start), min(b, blob_end)
        if lo >= hi:
            out.append(None)
            continue
        out.append(PartView(part[:lo - a] + part[hi - a:], lo - a, lo - blob_start, hi - lo))
    return out


def view_text(stored: str, at: int, piece: str) -> str:
    """A part's text from its stored characters and the blob slice it views."""
    return stored[:at] + piece + stored[at:]

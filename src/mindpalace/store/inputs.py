"""What every backend checks before it writes (I/O-free): one copy of the validate-whole-then-
store rule for events, records and embeddings, so SQLite and PostgreSQL refuse the same input
with the same message."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from mindpalace.errors import DimensionMismatchError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store.base import NewEvent, Record
from mindpalace.store.codec import dumps
from mindpalace.textsafe import require_name, require_text
from mindpalace.timeutil import utcnow


def event_payloads(scope: Scope, stream: str, events: Sequence[NewEvent]) -> list[tuple[str, str]]:
    """``(type, JSON data)`` per event, in order.

    Raises:
        ValidationError: the scope is not concrete, the stream or an event type is empty or not
            storable text, or event data is not JSON-serialisable.
    """
    scope.require_concrete()
    require_text("stream", stream, allow_empty=False)
    return [(require_text("event.type", e.type, allow_empty=False), dumps(e.data) if e.text is None else e.text)
            for e in events]


def record_fields(record: Record) -> tuple[Scope, datetime, str]:
    """The record's concrete scope, its creation time (now when unset) and its meta as JSON.

    Raises:
        ValidationError: the scope is not concrete, or the name, type, body, description or
            meta cannot be stored.
    """
    scope = record.scope.require_concrete()
    require_name(record.name, field="record name")
    require_text("record.type", record.type, allow_empty=False)
    require_text("record.body", record.body)
    require_text("record.description", record.description)
    return scope, record.created_at or utcnow(), dumps(record.meta)


def embedding_rows(
    doc_ids: Sequence[int], vectors: np.ndarray, model: str, rows: Sequence[int] | None
) -> tuple[np.ndarray, list[int]]:
    """The float32 matrix and the number of its rows (embedding windows) per document id.

    Raises:
        ValidationError: the model name is empty, a count is < 1 or the counts don't match the
            ids, or a vector holds NaN or infinity.
        DimensionMismatchError: the matrix does not have one row per window.
    """
    require_text("model", model, allow_empty=False)
    mat = np.asarray(vectors, dtype=np.float32)
    counts = [1] * len(doc_ids) if rows is None else [int(r) for r in rows]
    if len(counts) != len(doc_ids) or any(r < 1 for r in counts):
        raise ValidationError(
            f"put_embeddings rows must give a count >= 1 for each of the {len(doc_ids)} ids")
    if mat.ndim != 2 or mat.shape[0] != sum(counts):
        raise DimensionMismatchError(
            sum(counts), int(mat.shape[0]) if mat.ndim else 0, f"{model} (rows per id)")
    if not np.isfinite(mat).all():
        raise ValidationError(f"embeddings for model {model!r} contain NaN or infinity")
    return mat, counts


# -- bounded document parts ------------------------------------------------------------------
MAX_DOCUMENT_CHARS = 16_384  # one search document's text; ~4k tokens, a few embedding windows
EMBEDDED_PARTS = 1  # parts of one long text that get vectors; later parts: keyword only
HEAD_WINDOWS = 1  # embedding windows of that part: a long text's vector describes its head
PART_SEPARATOR = "#part"  # ref of part i >= 2: f"{ref}#part{i}" ('#' is never in a record name)
_CUT_LOOKBACK_CHARS = 1_024  # a part ends at the last line break / space in its final KiB


def document_parts(
    ref: str, text: str, meta: dict[str, Any] | None = None, *, max_chars: int = MAX_DOCUMENT_CHARS
) -> list[tuple[str, str, dict[str, Any]]]:
    """A search document's text as bounded parts: ``[(ref, text, meta), ...]``.

    A text of at most `max_chars` characters is one part, unchanged. A longer one (a tool
    output of tens of MB) is cut into consecutive parts of at most `max_chars` characters, at
    a line break or space where one is near the boundary; their concatenation is the text.
    Part 1 keeps `ref`; part i ≥ 2 is ``{ref}#part{i}``. Every part's meta is `meta` plus
    ``part``, ``parts`` and ``of`` (= `ref`), so each maps back to what was indexed (a record's
    meta names the record). Parts after :data:`EMBEDDED_PARTS` carry ``keyword_only: true``:
    the embedding sync skips them, and embeds the others' first :data:`HEAD_WINDOWS` windows
    only (:func:`embedding_windows`), so no recall embeds a huge text whole — the cost of
    its vectors is bounded whatever its size, and keyword search (FTS, BM25) still reaches
    its tail.

    Args:
        ref: the document's ref.
        text: its whole text.
        meta: its metadata (not modified).
        max_chars: part size bound (characters, ≥ 2 × the cut look-back).
    Returns:
        One entry per part, in order.
    """
    base = dict(meta or {})
    if len(text) <= max_chars:
        return [(ref, text, base)]
    pieces = _cut(text, max_chars)
    n = len(pieces)
    out = []
    for i, piece in enumerate(pieces, 1):
        part_meta = {**base, "part": i, "parts": n, "of": ref}
        if i > EMBEDDED_PARTS:
            part_meta["keyword_only"] = True
        out.append((ref if i == 1 else part_ref(ref, i), piece, part_meta))
    return out


def part_ref(ref: str, part: int) -> str:
    """The ref of part `part` (≥ 2) of document `ref`."""
    return f"{ref}{PART_SEPARATOR}{part}"


def _cut(text: str, max_chars: int) -> list[str]:
    pieces, start, size = [], 0, len(text)
    while start < size:
        end = min(start + max_chars, size)
        if end < size:
            window = text[max(start, end - _CUT_LOOKBACK_CHARS):end]
            brk = max(window.rfind("\n"), window.rfind(" "))
            if brk >= 0:
                end = end - len(window) + brk + 1
        pieces.append(text[start:end])
        start = end
    return pieces


def embedding_windows(windows: list[str], meta: dict[str, Any]) -> list[str]:
    """The embedding windows to embed for a document: all of them for a text that fits one
    part, the first :data:`HEAD_WINDOWS` for a part of a long text (its meta has ``of``)."""
    return windows[:HEAD_WINDOWS] if "of" in meta else windows


def stored_part_count(meta: dict[str, Any]) -> int:
    """How many parts the text behind a stored document's meta was cut into (1 when whole)."""
    return int(meta["parts"]) if "of" in meta else 1

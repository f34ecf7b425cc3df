"""What every backend checks before it writes (I/O-free): one copy of the validate-whole-then-
store rule for events, records and embeddings, so SQLite and PostgreSQL refuse the same input
with the same message."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

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
    return [(require_text("event.type", e.type, allow_empty=False), dumps(e.data)) for e in events]


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

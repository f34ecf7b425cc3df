"""Embedding sync: give every document a vector from the current embedder, then retire old models.

The model id and width are stored with every vector (``store.put_embeddings(..., model=)``), so
switching embedders (say ``use`` → ``e5``) is detected by comparing ``embedder.model_id`` with
``store.embedding_models()``. Searches always filter by one model, so dimensions never mix;
old vectors are dropped only once every document has a new one, so a crash or an error halfway
through leaves the old model fully searchable (nothing is silently lost).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mindpalace.errors import StoreError
from mindpalace.providers.embed.base import Embedder
from mindpalace.retrieval.chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS, chunk_text
from mindpalace.store.base import Store

DEFAULT_SYNC_BATCH = 256  # documents read and written per store round trip

Progress = Callable[[int, int], None]
"""progress(done, total): documents embedded so far and the total expected (may grow)."""


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one :func:`sync_embeddings` run did.

    Attributes:
        model: the embedder's model id the store is now in sync with.
        dim: its vector width.
        embedded: documents embedded in this run.
        retired_models: model ids whose vectors were dropped after the switch.
        dropped_vectors: how many old vectors were dropped.
        seconds: wall time of the run.
    """

    model: str
    dim: int
    embedded: int
    retired_models: list[str] = field(default_factory=list)
    dropped_vectors: int = 0
    seconds: float = 0.0


def sync_embeddings(
    store: Store,
    embedder: Embedder,
    *,
    batch: int = DEFAULT_SYNC_BATCH,
    progress: Progress | None = None,
    chunk_tokens: int = 0,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
) -> SyncReport:
    """Embed every document lacking a vector for ``embedder.model_id``; retire other models.

    Idempotent (I5): a second run on an unchanged store embeds nothing and drops nothing.

    Args:
        store: any backend of the store protocol (all scopes are synced).
        embedder: the current embedder.
        batch: documents per read / embed / write round (≥ 1).
        progress: called after each round with (done, total).
        chunk_tokens / overlap_tokens: a document longer than `chunk_tokens` tokens is
            embedded as overlapping windows (:mod:`mindpalace.retrieval.chunking`), all stored
            under the document (a vector hit returns the document once, best chunk's score);
            0 = the embedder's own window (``embedder.chunk_tokens``).
    Returns:
        A :class:`SyncReport`.
    Raises:
        ProviderError: the embedder failed; vectors written so far are kept, old models too.
        DimensionMismatchError: the store already holds vectors of this model id with another
            width (an endpoint changed its model without changing its name).
        StoreError: the store kept returning the same documents as missing.
    """
    start = time.perf_counter()
    model = embedder.model_id
    chunk_tokens = chunk_tokens or embedder.chunk_tokens or DEFAULT_CHUNK_TOKENS
    overlap_tokens = min(overlap_tokens, max(0, (chunk_tokens - 1) // 2))
    total = _missing_count(store, model)
    done = 0
    if progress:
        progress(0, total)
    while True:
        embedded = _embed_missing(
            store, embedder, batch, progress, done, total, chunk_tokens, overlap_tokens
        )
        done += embedded
        # Retire the old models only when nothing is missing, checked inside the same write
        # transaction as the delete, so a document indexed meanwhile is never left vectorless.
        with store.transaction():
            if store.documents_missing_embeddings(model, limit=1):
                total = max(total, done + _missing_count(store, model))
                continue
            retired = sorted(m for m in store.embedding_models() if m != model)
            dropped = store.delete_embeddings(keep_model=model) if retired else 0
        break
    return SyncReport(model, embedder.dim, done, retired, dropped, time.perf_counter() - start)


def _embed_missing(
    store: Store, embedder: Embedder, batch: int, progress: Progress | None, done: int, total: int,
    chunk_tokens: int, overlap_tokens: int,
) -> int:
    model, count, last_ids = embedder.model_id, 0, None
    while docs := store.documents_missing_embeddings(model, limit=max(1, batch)):
        ids = [d.id for d in docs]
        if ids == last_ids:  # a write that does not stick would loop forever
            raise StoreError(f"documents {ids[:5]} stay without {model!r} vectors after writing them")
        chunks = [chunk_text(d.text, chunk_tokens, overlap_tokens) for d in docs]
        vectors = embedder.embed([c for parts in chunks for c in parts])
        store.put_embeddings(ids, vectors, model, rows=[len(parts) for parts in chunks])
        last_ids, count = ids, count + len(ids)
        if progress:
            progress(done + count, max(total, done + count))
    return count


def _missing_count(store: Store, model: str) -> int:
    """Documents without a `model` vector, from counts (cheap; for the progress total only)."""
    have = store.embedding_models().get(model, (0, 0))[1]
    return max(0, store.stats().documents - have)

"""Embedding sync: give every document a vector from the current embedder, then retire old models.

The model id and width are stored with every vector (``store.put_embeddings(..., model=)``), so
switching embedders (say ``use`` → ``e5``) is detected by comparing ``embedder.model_id`` with
``store.embedding_models()``. Searches always filter by one model, so dimensions never mix;
old vectors are dropped only once every document has a new one, so a crash or an error halfway
through leaves the old model fully searchable (nothing is silently lost).

Contextual embedding (``embed.context_turns``): a session message can be embedded together
with the messages just before it in its session (contextual retrieval — a reply such as "Yes,
it was amazing!" is about what the previous turn asked). Only the embedded text changes; the
stored and keyword-indexed text is the message's own. The context is capped at
:data:`CONTEXT_MAX_TOKENS` tokens (its end, nearest the message), and such vectors are stored
under their own model id (``<model>+context<N>``, see
:func:`mindpalace.providers.embed.make_embedder`), so switching the setting re-embeds through
the model switch above and plain and contextual vectors never mix.

Sentence rows (``embed.sentence_vectors_min_chars``): a long message that states something is
also embedded sentence by sentence, each sentence one more vector row under the message
(:func:`sentence_rows`), so a vector search that matches one sentence — an update said in
passing inside a message about something else — finds the message by that sentence's score.
The rows are the model's own vectors of texts, stored under the plain model id: a store
embedded before the setting changed keeps its earlier messages' rows until they are re-embedded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mindpalace.errors import StoreError, ValidationError
from mindpalace.providers.embed.base import Embedder
from mindpalace.retrieval.chunking import (
    DEFAULT_CHUNK_TOKENS,
    DEFAULT_OVERLAP_TOKENS,
    chunk_text,
    tail_tokens,
)
from mindpalace.retrieval.fetch import MESSAGE_KIND, NOT_STATING_ROLES
from mindpalace.retrieval.supersession import sentences
from mindpalace.store.base import Document, Store
from mindpalace.store.inputs import embedding_windows

DEFAULT_SYNC_BATCH = 256  # documents read and written per store round trip
CONTEXT_MAX_TOKENS = 128  # preceding-turn context embedded with a message (its last tokens)
MAX_CONTEXT_TURNS = 8

Progress = Callable[[int, int], None]
"""progress(done, total): documents embedded so far and the total expected (may grow)."""
Embedded = Callable[[list[Document]], None]
"""embedded(documents): called with each batch of documents once their vectors are stored."""


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
    context_turns: int = 0,
    context_after_question: bool = False,
    embedded: Embedded | None = None,
    sentence_min_chars: int = 0,
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
        context_turns: a session message is embedded after the text of up to this many
            messages before it in its session (at most :data:`CONTEXT_MAX_TOKENS` tokens of
            them, prepended to its first window); 0 = each text alone. Pass the same value the
            embedder's model id was built with (``make_embedder``).
        context_after_question: give the context only to a message whose previous message
            asks (see :func:`preceding_context`).
        embedded: called with each batch of documents after their vectors are stored (the
            retriever embeds the sentences follow-ups compare there, see
            :meth:`~mindpalace.retrieval.hybrid.HybridRetriever.sync_embeddings`).
        sentence_min_chars: the :func:`sentence_rows` threshold (characters; 0 = no sentence
            rows).
    Returns:
        A :class:`SyncReport`.
    Raises:
        ProviderError: the embedder failed; vectors written so far are kept, old models too.
        DimensionMismatchError: the store already holds vectors of this model id with another
            width (an endpoint changed its model without changing its name).
        StoreError: the store kept returning the same documents as missing.
        ValidationError: `context_turns` outside 0 … :data:`MAX_CONTEXT_TURNS`.
    """
    _check_context_turns(context_turns)
    start = time.perf_counter()
    model = embedder.model_id
    chunk_tokens = chunk_tokens or embedder.chunk_tokens or DEFAULT_CHUNK_TOKENS
    overlap_tokens = min(overlap_tokens, max(0, (chunk_tokens - 1) // 2))
    total = _missing_count(store, model)
    done = 0
    if progress:
        progress(0, total)
    while True:
        count = _embed_missing(
            store, embedder, batch, progress, done, total, chunk_tokens, overlap_tokens,
            context_turns=context_turns, context_after_question=context_after_question,
            embedded=embedded, sentence_min_chars=sentence_min_chars,
        )
        done += count
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


def sync_new_embeddings(
    store: Store,
    embedder: Embedder,
    after_id: int,
    *,
    batch: int = DEFAULT_SYNC_BATCH,
    chunk_tokens: int = 0,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    context_turns: int = 0,
    context_after_question: bool = False,
    embedded: Embedded | None = None,
    sentence_min_chars: int = 0,
) -> tuple[int, int]:
    """Embed the documents above id `after_id` that lack a vector for ``embedder.model_id``
    (the incremental step of :func:`sync_embeddings`: no counting, no retiring of models).

    Only complete when nothing but appends happened since every document up to `after_id`
    had a vector (``store.append_only_generation()`` unchanged); the caller checks that.
    `embedded` / `sentence_min_chars`: as in :func:`sync_embeddings`.

    Returns:
        (documents embedded, the highest document id now known to have a vector, ≥ after_id).
    Raises:
        ProviderError / DimensionMismatchError / StoreError / ValidationError: as
        :func:`sync_embeddings`.
    """
    _check_context_turns(context_turns)
    chunk_tokens = chunk_tokens or embedder.chunk_tokens or DEFAULT_CHUNK_TOKENS
    overlap_tokens = min(overlap_tokens, max(0, (chunk_tokens - 1) // 2))
    count = 0
    while True:
        # Read the last id first: when nothing above after_id is missing afterwards, every
        # document up to it has a vector (later documents get higher ids).
        last = store.last_document_id()
        if not store.documents_missing_embeddings(embedder.model_id, limit=1, after_id=after_id):
            return count, max(after_id, last)
        count += _embed_missing(
            store, embedder, batch, None, 0, 0, chunk_tokens, overlap_tokens, after_id=after_id,
            context_turns=context_turns, context_after_question=context_after_question,
            embedded=embedded, sentence_min_chars=sentence_min_chars,
        )


def _embed_missing(
    store: Store, embedder: Embedder, batch: int, progress: Progress | None, done: int, total: int,
    chunk_tokens: int, overlap_tokens: int, *, after_id: int = 0, context_turns: int = 0,
    context_after_question: bool = False, embedded: Embedded | None = None, sentence_min_chars: int = 0,
) -> int:
    model, count, last_ids = embedder.model_id, 0, None
    while docs := store.documents_missing_embeddings(model, limit=max(1, batch), after_id=after_id):
        ids = [d.id for d in docs]
        if ids == last_ids:  # a write that does not stick would loop forever
            raise StoreError(f"documents {ids[:5]} stay without {model!r} vectors after writing them")
        # a part of a huge text is embedded by its head only (store.inputs.document_parts)
        chunks = [embedding_windows(chunk_text(d.text, chunk_tokens, overlap_tokens), d.meta)
                  for d in docs]
        if context_turns:
            contexts = preceding_context(
                store, docs, context_turns, after_question=context_after_question
            )
            for d, parts in zip(docs, chunks, strict=True):
                if d.id in contexts:
                    parts[0] = f"{contexts[d.id]}\n{parts[0]}"
        if sentence_min_chars:
            chunks = [[*parts, *sentence_rows(d, sentence_min_chars, len(parts))]
                      for d, parts in zip(docs, chunks, strict=True)]
        vectors = embedder.embed([c for parts in chunks for c in parts])
        store.put_embeddings(ids, vectors, model, rows=[len(parts) for parts in chunks])
        last_ids, count = ids, count + len(ids)
        if embedded is not None:
            embedded(docs)
        if progress:
            progress(done + count, max(total, done + count))
    return count


def sentence_rows(doc: Document, min_chars: int, windows: int) -> list[str]:
    """The sentences embedded as extra vector rows of `doc` (after its `windows` embedding
    windows): those of a message (:data:`~mindpalace.retrieval.fetch.MESSAGE_KIND`) that states
    something (its ``role`` not an assistant's, a tool's or the system's), fits one window
    (`windows` 1), has at least `min_chars` characters and holds several sentences
    (:func:`~mindpalace.retrieval.supersession.sentences`); [] for any other document or when
    `min_chars` is 0. A whole message's vector averages its sentences: an aside ("Can you
    help me plan a dinner? … By the way: I'll be working as a nurse.") is far from it, near
    its own sentence's vector."""
    if (not min_chars or windows != 1 or doc.kind != MESSAGE_KIND or len(doc.text) < min_chars
            or doc.meta.get("role") in NOT_STATING_ROLES):
        return []
    parts = sentences(doc.text)
    return parts if len(parts) > 1 else []


def preceding_context(
    store: Store, docs: list[Document], turns: int, *, after_question: bool = False
) -> dict[int, str]:
    """{document id: context} for the whole session messages among `docs` that have earlier
    messages in their session: the text of up to `turns` messages before each (oldest first,
    one per line; a message stored in parts, or deleted, is skipped), cut to its last
    :data:`CONTEXT_MAX_TOKENS` tokens. With `after_question`, only when the message just
    before asks (ends in a question mark): the message is then the answer, and a statement
    after a long reply keeps a vector of its own. One store read for the whole batch."""
    wanted = [d for d in docs if d.kind == MESSAGE_KIND and d.ref.isdigit() and "of" not in d.meta]
    keys = [(d.scope, str(i)) for d in wanted for i in range(max(1, int(d.ref) - turns), int(d.ref))]
    found = store.get_documents_by_refs(MESSAGE_KIND, keys) if keys else {}
    out: dict[int, str] = {}
    for d in wanted:
        near = (found.get((d.scope, str(i))) for i in range(max(1, int(d.ref) - turns), int(d.ref)))
        before = [p.text for p in near if p is not None and "of" not in p.meta]  # parts: no
        previous = found.get((d.scope, str(int(d.ref) - 1)))
        if after_question and (previous is None or not _asks(previous.text)):
            continue
        if before:
            out[d.id] = tail_tokens("\n".join(before), CONTEXT_MAX_TOKENS)
    return out


def _asks(text: str) -> bool:
    """Ends in a question mark of any script (as ``retrieval.hybrid.asks``; not imported: hybrid
    imports this module when it syncs)."""
    return text.rstrip().endswith(("?", "？", "؟"))


def _check_context_turns(turns: int) -> None:
    if not 0 <= turns <= MAX_CONTEXT_TURNS:
        raise ValidationError(f"context_turns must be 0 … {MAX_CONTEXT_TURNS}, got {turns}")


def _missing_count(store: Store, model: str) -> int:
    """Documents without a `model` vector, from counts (cheap; for the progress total only)."""
    have = store.embedding_models().get(model, (0, 0))[1]
    return max(0, store.stats().documents - have)

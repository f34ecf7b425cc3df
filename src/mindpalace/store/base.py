"""The store protocol: the one persistence interface every component writes through.

The protocol is the operations the components use, grouped by concern; :class:`Store` is all
of them. Every operation is filtered by :class:`~mindpalace.scope.Scope` (I10): a write needs
a concrete scope, a read may widen fields to ``ANY``.

* :class:`Transactions` — ``with store.transaction():`` groups writes atomically; nested
  blocks join the outermost one (a component can call another component's writes inside its
  own); ``stats``, ``close``.
* :class:`EventLog` — events and snapshots: append-only streams with per-stream versions
  starting at 1 and optimistic concurrency (`expected_version`), the basis of event sourcing
  (seed 004) and of durable session messages (seed 002).
* :class:`RecordStore` — named records (``step_12``, ``memory_snapshot_recent_step_8`` …,
  seed 000's RecordStore), unique per scope.
* :class:`KeyValueStore` — JSON values by (namespace, key): tiers, cursors, facts, ledger rows.
* :class:`DocumentIndex` — searchable documents: ranked keyword search and, once embedded,
  cosine vector search.
* :class:`Locks` — named exclusive locks across threads and processes (one consolidation per
  session, one dream per scope).

Backends: :class:`~mindpalace.store.sqlite.SQLiteStore` (one file, embedded) and
:class:`~mindpalace.store.postgres.PostgresStore` (a shared server, many workers); both pass
:mod:`mindpalace.testing.conformance`. Components never see SQL and never branch on the
backend. Errors (every operation): ``ValidationError`` (and ``InvalidTextError`` /
``InvalidNameError``) for bad input, raised before anything is written; ``StoreBusyError``
when the store stays busy past its bounded retries; ``StoreError`` otherwise (the enclosing
transaction is rolled back).
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from mindpalace.scope import Scope
from mindpalace.textsafe import require_text


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: a type name and a JSON-serialisable payload.

    ``text``: the payload's JSON exactly as :func:`mindpalace.store.codec.dumps` gives it, when
    the caller already encoded it (the task store does, to check it): the backend stores it
    instead of encoding `data` a second time. It must equal ``dumps(data)``.
    """

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    text: str | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An appended event. `version` is its 1-based position in its stream; `position` is the
    store-wide insertion order (monotonic, for cursors across streams)."""

    scope: Scope
    stream: str
    version: int
    type: str
    data: dict[str, Any]
    created_at: datetime
    position: int
    previous: int | None = None
    """Set by an append when the backend reports it: the store position of the stream's event
    just before this one, as the append found it (None for the first event of a stream, or
    when not reported). Lets a reader that folded the stream up to a known event tell whether
    an append went right after that very event."""


@dataclass(frozen=True, slots=True)
class Record:
    """A named raw record (seed 000): ``type`` is ``step`` / ``info`` / ``snapshot`` (or any
    component-defined type); ``step_id`` is the step it belongs to, if any."""

    scope: Scope
    name: str
    type: str
    body: str
    description: str = ""
    step_id: int | None = None
    created_at: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Document:
    """A searchable text: ``kind`` names its tier (``fact``, ``step``, ``snapshot``, ``message``,
    ``history`` …) and ``ref`` its id inside that tier; (scope, kind, ref) is unique."""

    id: int
    scope: Scope
    kind: str
    ref: str
    text: str
    meta: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result. ``score`` is higher-is-better (a BM25 score, an occurrence count, or
    cosine similarity); ``rank`` is 1-based; ``matched`` says how it was found: ``bm25``
    (words), ``trigram`` (a substring of 3+ characters), ``substring`` (a 1–2 character
    query), ``vector``."""

    doc: Document
    score: float
    rank: int
    matched: str


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Row counts and sizes of a store (``mindpalace status``)."""

    schema_version: int
    sessions: int
    events: int
    streams: int
    records: int
    kv_entries: int
    documents: int
    embeddings: dict[str, int]
    size_bytes: int


class Transactions(abc.ABC):
    """Lifecycle and atomicity. All methods of a store are thread-safe; a write outside an
    explicit transaction is its own transaction."""

    schema_version: int

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections (and held locks). Idempotent."""

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Atomic block: every write inside commits together or not at all. A nested block
        joins the outermost one; an exception leaving a nested block undoes only that block's
        writes, an exception leaving the outermost block undoes all of them. Reads inside see
        the block's own writes."""

    def in_transaction(self) -> bool:
        """True while the calling thread is inside :meth:`transaction` (its writes are not
        committed yet and may still roll back). In-process caches of committed state (the
        folded task state) keep nothing read or written here. The default, True, is the safe
        answer for a backend that cannot tell: such a backend is simply never cached."""
        return True

    @abc.abstractmethod
    def stats(self) -> StoreStats:
        """Counts over the whole store (all scopes); an admin view for ``status``."""


class EventLog(abc.ABC):
    """Events and snapshots: append-only streams, per (concrete scope, stream name)."""

    @abc.abstractmethod
    def append_events(
        self,
        scope: Scope,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int | None = None,
    ) -> list[StoredEvent]:
        """Append `events` atomically; their versions continue the stream's contiguously
        (1, 2, 3 … with no gap, even under concurrent appenders). ``position`` grows with
        every append across all streams. An empty list appends nothing.

        Args:
            expected_version: the version the caller last saw (0 = the stream must be new);
                None skips the check.
        Raises:
            ConcurrencyError: the stream's version is not `expected_version` (``.expected``,
                ``.actual``); nothing appended.
            ValidationError: a non-concrete scope, an empty stream or type, data that is not
                JSON (NaN, sets, hostile nesting); nothing appended.
        """

    @abc.abstractmethod
    def read_events(
        self,
        scope: Scope,
        stream: str,
        *,
        from_version: int = 1,
        to_version: int | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        """Events of `stream` with from_version ≤ version ≤ to_version, oldest first, at most
        `limit`. Stored data round-trips exactly (lone surrogates included)."""

    @abc.abstractmethod
    def stream_version(self, scope: Scope, stream: str) -> int:
        """Current version of `stream` in the concrete `scope` (0 when it has no events)."""

    def stream_head(self, scope: Scope, stream: str) -> tuple[int, int | None]:
        """``(version, position)`` of the last event of `stream` in the concrete `scope`;
        ``(0, None)`` when it has no events. A reader that folded the stream up to a known
        event learns from it whether anything changed since: a higher version (appended), or
        the same version at another position (the stream was deleted and written again).

        The default reads the version, then the event at it; backends answer with one
        indexed lookup."""
        version = self.stream_version(scope, stream)
        rows = self.read_events(scope, stream, from_version=version, limit=1) if version else []
        return (rows[0].version, rows[0].position) if rows else (0, None)

    @abc.abstractmethod
    def delete_stream(self, scope: Scope, stream: str) -> int:
        """Delete every event of `stream` in the concrete `scope`; returns how many were removed.

        Only for explicit user requests (e.g. ``clear_task(..., drop_events=True)``); logs are
        otherwise append-only."""

    @abc.abstractmethod
    def list_streams(self, scope: Scope, *, prefix: str = "") -> list[tuple[Scope, str, int]]:
        """(scope, stream, version) of the streams in `scope` (widened fields: every matching
        scope) whose name starts with `prefix`, by stream name."""


class RecordStore(abc.ABC):
    """Named records: unique per (concrete scope, name)."""

    @abc.abstractmethod
    def put_record(self, record: Record, *, overwrite: bool = False, index: bool = True) -> Record:
        """Store a named record and return it as stored (``created_at`` filled in). With
        `index`, its text (description and body) becomes a search document of kind
        ``record.type`` and ref ``record.name``; an overwrite replaces that document, and one
        with another type or ``index=False`` removes the old one.

        Raises:
            InvalidNameError: the name fails :func:`mindpalace.textsafe.require_name`.
            ValidationError: the name exists and `overwrite` is False (nothing changes).
        """

    @abc.abstractmethod
    def get_records(self, scope: Scope, names: Sequence[str]) -> dict[str, Record]:
        """The records among `names` that exist in `scope` (missing names are simply absent)."""

    def get_record(self, scope: Scope, name: str) -> Record:
        """One record by name. Raises NotFoundError naming it when it does not exist."""
        from mindpalace.errors import NotFoundError

        found = self.get_records(scope, [name]).get(name)
        if found is None:
            raise NotFoundError("record", name, scope)
        return found

    @abc.abstractmethod
    def list_records(
        self, scope: Scope, *, type: str | None = None, limit: int | None = None
    ) -> list[Record]:
        """Records newest first (by creation order), optionally of one type, at most `limit`."""

    @abc.abstractmethod
    def delete_records(self, scope: Scope, names: Sequence[str]) -> int:
        """Delete records by name in a concrete `scope`, with the search documents their bodies
        were indexed as; returns how many records were removed (unknown names are ignored).
        Used when a task ends (seed 004: short-term memory is cleared, the logs are kept)."""


class KeyValueStore(abc.ABC):
    """JSON values by (concrete scope, namespace, key)."""

    @abc.abstractmethod
    def kv_get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        """The JSON value at (namespace, key), or `default`."""

    @abc.abstractmethod
    def kv_put(self, scope: Scope, namespace: str, key: str, value: Any) -> None:
        """Set the JSON value at (namespace, key) (the last writer wins; for read-modify-write
        hold a :meth:`Transactions.transaction`, which serialises writers).

        Raises:
            ValidationError: the value is not JSON (NaN, sets, objects); nothing written.
        """

    @abc.abstractmethod
    def kv_delete(self, scope: Scope, namespace: str, key: str) -> bool:
        """Delete (namespace, key); True when something was deleted."""

    @abc.abstractmethod
    def kv_list(
        self, scope: Scope, namespace: str, *, prefix: str = ""
    ) -> list[tuple[Scope, str, Any]]:
        """(scope, key, value) in `namespace` whose key starts with `prefix`, ordered by key
        (code point order), then scope; `scope` may be widened."""


class DocumentIndex(abc.ABC):
    """Searchable documents, unique per (concrete scope, kind, ref): keyword search over their
    text and cosine search over their vectors (one or several per document and model)."""

    @abc.abstractmethod
    def index_document(
        self, scope: Scope, kind: str, ref: str, text: str, meta: dict[str, Any] | None = None
    ) -> int:
        """Insert or replace the searchable text of (scope, kind, ref); returns the document id
        (stable across replacements; never reused after a delete).

        Replacing the text with another drops the document's vectors (they described the old
        text); the same text keeps them. A text over
        :data:`~mindpalace.store.inputs.MAX_DOCUMENT_CHARS` is indexed as bounded parts (refs
        ``<ref>#part<i>`` for i ≥ 2, see :func:`~mindpalace.store.inputs.document_parts`);
        the id returned is part 1's, and deleting `ref` deletes its parts.
        """

    @abc.abstractmethod
    def delete_documents(self, scope: Scope, kind: str, refs: Sequence[str]) -> int:
        """Remove documents (and their vectors); returns how many were removed."""

    @abc.abstractmethod
    def get_documents_by_ref(
        self, scope: Scope, kind: str, refs: Sequence[str]
    ) -> dict[str, Document]:
        """Documents of `kind` by ref in a concrete `scope` (refs not found are absent).

        Used by recall to fetch a message's neighbours and by writers to find the document
        they just indexed."""

    def get_documents_by_refs(
        self, kind: str, keys: Sequence[tuple[Scope, str]]
    ) -> dict[tuple[Scope, str], Document]:
        """Documents of `kind` by (concrete scope, ref) across scopes, in one read where the
        backend can (keys not found are absent).

        Recall fetches the neighbours of matched messages from every session of a user at
        once with it. The default asks :meth:`get_documents_by_ref` once per scope."""
        by_scope: dict[Scope, list[str]] = {}
        for scope, ref in keys:
            by_scope.setdefault(scope, []).append(ref)
        out: dict[tuple[Scope, str], Document] = {}
        for scope, refs in by_scope.items():
            for ref, doc in self.get_documents_by_ref(scope, kind, refs).items():
                out[(scope, ref)] = doc
        return out

    @abc.abstractmethod
    def iter_documents(
        self, scope: Scope, *, kinds: Sequence[str] | None = None
    ) -> Iterator[Document]:
        """Every document in `scope` (optionally of some kinds), by id, read in pages."""

    def has_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> bool:
        """Whether `scope` (widened fields: any matching scope) holds a document (of `kinds`).

        Recall asks it before searching a scope: an empty scope (the knowledge files of a user
        who has none) can only answer with nothing, and searching it anyway costs a keyword
        fallback over the whole trigram index. Backends override it with one indexed read."""
        return next(iter(self.iter_documents(scope, kinds=kinds)), None) is not None

    @abc.abstractmethod
    def search_generation(self) -> object:
        """An opaque value that changes whenever a document is added, changed or removed, or
        a vector is written or dropped (any scope, any process), and never returns to an
        earlier value. Readers cache derived state ("nothing left to embed") until it moves."""

    @abc.abstractmethod
    def keyword_search(
        self,
        scope: Scope,
        query: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
        max_df_ratio: float | None = None,
    ) -> list[SearchHit]:
        """The best `k` documents for `query`, best first (ties: older document first).

        Matching, in order (the first that finds anything answers, ``SearchHit.matched``):

        1. ``bm25`` — words, case-insensitive, English inflections stemmed (booked ~ booking),
           CJK text as overlapping 2-character pairs (so 酒店预算 finds 用户说每晚酒店预算…);
           scored by Okapi BM25 whose statistics (document count, document frequency,
           average length) are those of the searched scope and kinds only — another tenant's
           writes never move a score (see :mod:`mindpalace.store.bm25`);
        2. ``trigram`` — any whitespace-separated query chunk of 3+ characters appearing
           inside a document (identifiers such as ``Q7Z9`` in ``XQ7Z9K2``);
        3. ``substring`` — a 1–2 character query (one ideograph, 猫), scored by occurrences.

        User text is never query syntax; an empty query → [].

        `max_df_ratio`: query terms found in more than this share of the scope's documents
        are left out while a rarer term remains; None keeps every term."""

    def keyword_search_many(
        self,
        scope: Scope,
        queries: Sequence[str],
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
        max_df_ratio: float | None = None,
    ) -> list[list[SearchHit]]:
        """:meth:`keyword_search` of each of `queries` (same scope, `k`, `kinds`,
        `max_df_ratio`): one hit list per query, in order, each exactly what
        :meth:`keyword_search` returns for it alone.

        Recall's follow-ups ask for a statement's every word at once (how often its speaker
        says it); a backend answers them from one snapshot, paying a query's fixed cost
        (transaction, freshness checks, document fetch) once. The default asks
        :meth:`keyword_search` once per query.

        Raises:
            InvalidTextError: a query is not storable text (nothing is searched)."""
        for i, query in enumerate(queries):
            require_text(f"queries[{i}]", query)
        return [
            self.keyword_search(scope, q, k=k, kinds=kinds, max_df_ratio=max_df_ratio)
            for q in queries
        ]

    @abc.abstractmethod
    def put_embeddings(
        self,
        doc_ids: Sequence[int],
        vectors: np.ndarray,
        model: str,
        *,
        rows: Sequence[int] | None = None,
    ) -> None:
        """Store the vectors of documents for `model` (replacing earlier ones): one per
        document (float32, shape (len(doc_ids), dim)), or ``rows[i]`` consecutive vectors
        for document ``doc_ids[i]`` (the chunks of a long text; shape (sum(rows), dim)).
        All or nothing.

        Raises:
            DimensionMismatchError: `vectors` is not 2-D with one row per id (or per chunk),
                or its width differs from vectors already stored for `model`.
            ValidationError: NaN or infinity; a ``rows`` entry below 1 or `rows` of another
                length.
            NotFoundError: a document id that does not exist.
        """

    @abc.abstractmethod
    def get_embeddings(self, doc_ids: Sequence[int], model: str) -> dict[int, np.ndarray]:
        """{doc id: float32 unit vector of shape (dim,)} for the documents that have `model`
        vectors (a chunked document: the normalised mean of its chunk vectors)."""

    @abc.abstractmethod
    def vector_search(
        self,
        scope: Scope,
        vector: np.ndarray,
        model: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        """Top-k documents of `scope` by cosine similarity to `vector` among those embedded
        with `model`, best first; ``score`` is the cosine similarity. A document with several
        chunk vectors appears once, scored by its best chunk. A backend may rank by an
        approximate index (it says so); the scores it returns are exact.

        Raises:
            DimensionMismatchError: `vector` width differs from the stored vectors of `model`.
            ValidationError: NaN or infinity in `vector`.
        """

    @abc.abstractmethod
    def documents_missing_embeddings(
        self, model: str, *, limit: int = 1000, after_id: int = 0
    ) -> list[Document]:
        """Documents (any scope) with no vector for `model`, by id — the embedding work queue;
        only ids above `after_id` (0 = all)."""

    @abc.abstractmethod
    def last_document_id(self) -> int:
        """The highest document id committed (0 when there is none)."""

    def append_only_generation(self) -> object:
        """An opaque value that stays put while documents are only added (and vectors written
        for documents that had none) and moves on anything else: a document's text changed, a
        vector replaced or dropped, a document deleted (a backend may leave it in place for
        deletions it can tell apart: they take no vector from a remaining document); it never
        returns to an earlier value.

        While it stays put and document ids are committed in increasing order, a reader that
        embedded every document up to id N only needs the documents above N
        (``documents_missing_embeddings(after_id=N)``). A backend whose ids may commit out of
        order returns :meth:`search_generation` (every change counts: full syncs)."""
        return self.search_generation()

    @abc.abstractmethod
    def embedding_models(self) -> dict[str, tuple[int, int]]:
        """{model: (dimension, vector count)} of stored embeddings."""

    @abc.abstractmethod
    def delete_embeddings(self, *, keep_model: str | None = None) -> int:
        """Drop vectors of every model except `keep_model` (all when None); returns rows removed."""


class Locks(abc.ABC):
    """Named exclusive locks shared by every thread and process using the same store."""

    @abc.abstractmethod
    def lock(self, scope: Scope, name: str, *, timeout_seconds: float) -> AbstractContextManager[None]:
        """Hold the lock `name` of the concrete `scope` for the block: while it is held no
        other thread or process gets it. Re-entrant within a thread (a nested hold of the same
        lock returns at once). A holder that dies releases it.

        Used for one consolidation per session (``session``) and one dream per scope.

        Raises:
            StoreBusyError: not acquired within `timeout_seconds` (0 = try once).
            ValidationError: a non-concrete scope or an empty name.
        """


class Store(Transactions, EventLog, RecordStore, KeyValueStore, DocumentIndex, Locks):
    """The whole persistence protocol (every concern above), as every component receives it."""



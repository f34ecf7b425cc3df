"""The store protocol: the one persistence interface every component writes through.

Five capabilities, each filtered by :class:`~mindpalace.scope.Scope` on every call (I10):

* **transactions** — ``with store.transaction():`` groups writes atomically; nested blocks join
  the outermost one (so a component can call another component's writes inside its own).
* **event log** — append-only streams with per-stream monotonic versions starting at 1 and
  optimistic concurrency (`expected_version`), the basis of event sourcing (seed 004) and of
  durable session messages (seed 002).
* **named records** — ``step_12``, ``memory_snapshot_recent_step_8`` … with type, step id,
  description, created_at and body (seed 000's RecordStore); unique per scope.
* **key/value state** — JSON values by (namespace, key): tiers, cursors, snapshots, facts.
* **search documents** — text indexed for BM25 keyword search (a word index with CJK bigram
  segmentation plus a trigram index) and, once embedded, exact cosine vector search.

Backends implement this ABC; components never see SQL and never branch on the backend.
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


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: a type name and a JSON-serialisable payload."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)


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
    """One search result. ``score`` is higher-is-better (BM25 negated, or cosine similarity);
    ``rank`` is 1-based; ``matched`` says which index found it (``bm25``, ``trigram``,
    ``substring``, ``vector``)."""

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


class Store(abc.ABC):
    """Persistence protocol. All methods are thread-safe; writes outside an explicit
    transaction are each their own transaction.

    Errors: ``ValidationError`` for bad input (nothing written), ``NotFoundError`` for unknown
    names, ``ConcurrencyError`` for a lost optimistic append, ``StoreError`` otherwise (the
    transaction is rolled back).
    """

    schema_version: int

    # -- lifecycle -------------------------------------------------------------------------
    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. Idempotent."""

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Atomic block; nested blocks join the outermost, which commits or rolls back."""

    @abc.abstractmethod
    def stats(self) -> StoreStats:
        """Counts over the whole store (all scopes); an admin view for ``status``."""

    # -- event log -------------------------------------------------------------------------
    @abc.abstractmethod
    def append_events(
        self,
        scope: Scope,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int | None = None,
    ) -> list[StoredEvent]:
        """Append `events` to `stream` in one transaction; versions continue from the current one.

        Args:
            expected_version: the version the caller last saw (0 = stream must be new);
                None skips the check.
        Raises:
            ConcurrencyError: the stream's version is not `expected_version`; nothing appended.
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
        """Events of `stream` with from_version ≤ version ≤ to_version, oldest first."""

    @abc.abstractmethod
    def stream_version(self, scope: Scope, stream: str) -> int:
        """Current version of `stream` (0 when it has no events)."""

    def delete_stream(self, scope: Scope, stream: str) -> int:
        """Delete every event of `stream` in the concrete `scope`; returns how many were removed.

        Only for explicit user requests (e.g. ``clear_task(..., drop_events=True)``); logs are
        otherwise append-only. Backends override this; the base raises NotImplementedError.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support delete_stream")

    @abc.abstractmethod
    def list_streams(self, scope: Scope, *, prefix: str = "") -> list[tuple[Scope, str, int]]:
        """(scope, stream, version) of streams whose name starts with `prefix`."""

    # -- records ---------------------------------------------------------------------------
    @abc.abstractmethod
    def put_record(self, record: Record, *, overwrite: bool = False, index: bool = True) -> Record:
        """Store a named record (and, with `index`, make its body searchable as kind=record.type).

        Raises:
            InvalidNameError: the name fails :func:`mindpalace.textsafe.require_name`.
            ValidationError: the name exists and `overwrite` is False.
        """

    @abc.abstractmethod
    def get_records(self, scope: Scope, names: Sequence[str]) -> dict[str, Record]:
        """The records among `names` that exist (missing names are simply absent)."""

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
        """Records newest first (by creation order), optionally of one type."""

    @abc.abstractmethod
    def delete_records(self, scope: Scope, names: Sequence[str]) -> int:
        """Delete records by name in a concrete `scope`, with the search documents their bodies
        were indexed as; returns how many records were removed (unknown names are ignored).
        Used when a task ends (seed 004: short-term memory is cleared, the logs are kept)."""

    # -- key/value -------------------------------------------------------------------------
    @abc.abstractmethod
    def kv_get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        """The JSON value at (namespace, key), or `default`."""

    @abc.abstractmethod
    def kv_put(self, scope: Scope, namespace: str, key: str, value: Any) -> None:
        """Set the JSON value at (namespace, key)."""

    @abc.abstractmethod
    def kv_delete(self, scope: Scope, namespace: str, key: str) -> bool:
        """Delete (namespace, key); True when something was deleted."""

    @abc.abstractmethod
    def kv_list(
        self, scope: Scope, namespace: str, *, prefix: str = ""
    ) -> list[tuple[Scope, str, Any]]:
        """(scope, key, value) in `namespace` whose key starts with `prefix`, by key."""

    # -- search documents ------------------------------------------------------------------
    @abc.abstractmethod
    def index_document(
        self, scope: Scope, kind: str, ref: str, text: str, meta: dict[str, Any] | None = None
    ) -> int:
        """Insert or replace the searchable text of (scope, kind, ref); returns the document id.

        Replacing text drops the document's embeddings (they described the old text).
        """

    @abc.abstractmethod
    def delete_documents(self, scope: Scope, kind: str, refs: Sequence[str]) -> int:
        """Remove documents (and their embeddings); returns how many were removed."""

    @abc.abstractmethod
    def get_documents(self, ids: Sequence[int]) -> dict[int, Document]:
        """Documents by id (ids not found are absent)."""

    def get_documents_by_ref(
        self, scope: Scope, kind: str, refs: Sequence[str]
    ) -> dict[str, Document]:
        """Documents of `kind` by ref in a concrete `scope` (refs not found are absent).

        Used by recall to fetch a message's neighbours and by writers to find the document
        they just indexed. The default pages through :meth:`iter_documents`; backends override
        it with an indexed lookup.
        """
        wanted = set(refs)
        if not wanted:
            return {}
        return {
            d.ref: d for d in self.iter_documents(scope.require_concrete(), kinds=[kind])
            if d.ref in wanted
        }

    def search_generation(self) -> object:
        """An opaque value that changes whenever a search document is added, changed or
        removed, or an embedding is written or dropped (any scope).

        Readers cache derived state (vector indexes, "nothing left to embed") until it changes.
        The default returns a fresh object every call, i.e. "always changed".
        """
        return object()

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
        """BM25 over the word index (CJK segmented into bigrams); falls back to the trigram
        index for substrings the word index cannot match, then — for a 1–2 character query
        such as one ideograph (猫) — to a scoped substring scan (score = occurrences).
        Empty query → [].

        `max_df_ratio`: query terms found in more than this share of all documents are left
        out while a rarer term remains (near-zero BM25 weight, but they make the index score
        most of the corpus); None keeps every term."""

    @abc.abstractmethod
    def put_embeddings(
        self,
        doc_ids: Sequence[int],
        vectors: np.ndarray,
        model: str,
        *,
        rows: Sequence[int] | None = None,
    ) -> None:
        """Store the vectors of documents for `model`: one per document (float32, shape
        (len(doc_ids), dim)), or ``rows[i]`` consecutive vectors for document ``doc_ids[i]``
        (the chunks of a long text; shape (sum(rows), dim)).

        Raises:
            DimensionMismatchError: `vectors` is not 2-D with one row per id (or per chunk),
                or its width differs from vectors already stored for `model`.
            ValidationError: a ``rows`` entry is below 1 or `rows` has another length.
        """

    @abc.abstractmethod
    def get_embeddings(self, doc_ids: Sequence[int], model: str) -> dict[int, np.ndarray]:
        """{doc id: float32 vector of shape (dim,)} for the documents that have `model`
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
        """Exact cosine top-k among documents embedded with `model` in `scope`. A document
        with several chunk vectors appears once, scored by its best chunk.

        Raises:
            DimensionMismatchError: `vector` width differs from the stored vectors of `model`.
        """

    @abc.abstractmethod
    def documents_missing_embeddings(self, model: str, *, limit: int = 1000) -> list[Document]:
        """Documents (any scope) with no vector for `model` — the re-embedding work queue."""

    @abc.abstractmethod
    def embedding_models(self) -> dict[str, tuple[int, int]]:
        """{model: (dimension, vector count)} of stored embeddings."""

    @abc.abstractmethod
    def delete_embeddings(self, *, keep_model: str | None = None) -> int:
        """Drop vectors of every model except `keep_model` (all when None); returns rows removed."""

    def iter_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> Iterator[Document]:
        """All documents in scope (optionally of some kinds); default pages via keyword-free ids."""
        raise NotImplementedError

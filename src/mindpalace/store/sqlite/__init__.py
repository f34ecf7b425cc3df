"""SQLite backend of the store protocol: WAL, busy retries, migrations, FTS5, numpy vectors.

:class:`SQLiteStore` is assembled from one part per capability, all over one connection base:

* :mod:`.connection` — per-thread connections, busy retries, transactions, stats;
* :mod:`.schema` — the numbered migrations and the too-new-schema check;
* :mod:`.events`, :mod:`.records` (records and key/value), :mod:`.documents`;
* :mod:`.blobstore` — long texts stored once, compressed, in content-addressed blobs that
  record bodies, event JSON and document parts refer to;
* :mod:`.fulltext` — keyword search (FTS5 and the in-process BM25 cache);
* :mod:`.embeddings` — vectors and vector search.
"""

from __future__ import annotations

from pathlib import Path

from mindpalace.settings import StoreSettings
from mindpalace.store.annfile import AnnFiles
from mindpalace.store.base import Store
from mindpalace.store.sqlite.documents import DocumentsMixin
from mindpalace.store.sqlite.embeddings import EmbeddingsMixin
from mindpalace.store.sqlite.errmap import translate_sqlite_errors
from mindpalace.store.sqlite.events import EventsMixin
from mindpalace.store.sqlite.fulltext import KeywordSearchMixin
from mindpalace.store.sqlite.records import RecordsMixin
from mindpalace.store.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from mindpalace.store.vectors import VectorIndexFactory, adaptive_factory

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore"]


@translate_sqlite_errors(Store)  # no raw sqlite3 error leaves the backend
class SQLiteStore(EventsMixin, RecordsMixin, DocumentsMixin, KeywordSearchMixin, EmbeddingsMixin):
    """The embedded default backend: one SQLite file in WAL mode.

    Args:
        path: database file (created with its folder); ``":memory:"`` is not supported because
            every thread gets its own connection.
        settings: busy timeout (ms), bounded busy retries, ``synchronous`` mode, FTS tokenizer.
        vector_index_factory: builds the per-scope vector index; None = exact cosine, an HNSW
            graph from ``settings.ann_min_vectors`` vectors on, built in a background thread while
            exact cosine answers (:class:`~mindpalace.store.vectors.AdaptiveIndex`), saved
            beside the database once built and loaded by the next process
            (``settings.ann_persist``, :mod:`~mindpalace.store.annfile`).
        in_process_bm25: score word-index queries in numpy from a cached copy of the index's
            postings (same ids, scores and order as FTS5's ``bm25()``; see
            :attr:`bm25_cache_generation`). False = always FTS5's ``bm25()`` in SQL.

    Raises:
        SchemaVersionError: the file's schema is newer than this code (checked read-only first,
            so nothing is written).
        DatabaseCorruptError: the file is damaged, empty (0 bytes) or truncated — it is never
            replaced by a new empty database (``mindpalace doctor`` checks and exports it).
        ReadOnlyWorkspaceError / DiskFullError / StoreBusyError / StoreError: every sqlite3
            error of every method is raised as one of these (see ``errmap``).
        StoreError: the file is not a SQLite database.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        settings: StoreSettings | None = None,
        vector_index_factory: VectorIndexFactory | None = None,
        in_process_bm25: bool = True,
    ) -> None:
        super().__init__(path, settings=settings)
        ann = None
        if vector_index_factory is None:
            vector_index_factory = adaptive_factory(  # the graph is built off the query path
                self.settings.ann_min_vectors, self.settings.hnsw_ef_search, background=True
            )
            if self.settings.ann_persist and self.settings.ann_min_vectors > 0:
                ann = AnnFiles(self.path, ef_search=self.settings.hnsw_ef_search)
        self._init_embeddings(vector_index_factory, ann)
        self._init_keyword_search(in_process_bm25)

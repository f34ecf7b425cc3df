"""PostgreSQL backend of the store protocol: many worker processes on one memory.

:class:`PostgresStore` is assembled from one part per concern over one connection base (the embeddings part builds on the
documents part), like
the SQLite backend:

* :mod:`.connection` — the psycopg connection pool, transactions, advisory locks, stats;
* :mod:`.schema` — numbered migrations in ``mp_schema_version``;
* :mod:`.events`, :mod:`.records` (records and key/value), :mod:`.documents` (with keyword
  search: ``tsvector`` + ``pg_trgm``), :mod:`.embeddings` (pgvector, HNSW, cosine);
* :mod:`.dev` — a local development server with pgvector, one command.

Needs the ``[postgres]`` extra (psycopg 3, psycopg-pool, pgvector) and a server with the
``vector`` and ``pg_trgm`` extensions available.
"""

from __future__ import annotations

from mindpalace.settings import StoreSettings
from mindpalace.store.base import Store
from mindpalace.store.postgres.connection import translate_pg_errors
from mindpalace.store.postgres.embeddings import EmbeddingsMixin
from mindpalace.store.postgres.events import EventsMixin
from mindpalace.store.postgres.records import RecordsMixin
from mindpalace.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresStore"]


@translate_pg_errors(Store)  # no raw psycopg error leaves the backend
class PostgresStore(EventsMixin, RecordsMixin, EmbeddingsMixin):
    """The shared backend: one PostgreSQL database (or one schema in it) for many processes.

    Args:
        url: a libpq URL, ``postgresql://user:password@host:port/database``.
        settings: pool size and wait (``[store]`` ``pool_max_size``,
            ``pool_timeout_seconds``), HNSW search breadth (``hnsw_ef_search``).
        schema: keep the tables in this schema (created when missing) instead of the
            user's default one — several memories in one database.

    Raises:
        StoreError: the server cannot be reached, or lacks the ``vector`` / ``pg_trgm``
            extensions (and the user may not create them).
        SchemaVersionError: the database was migrated by a newer mindpalace (nothing written).
    """

    def __init__(self, url: str, *, settings: StoreSettings | None = None,
                 schema: str | None = None) -> None:
        super().__init__(url, settings=settings, schema=schema)

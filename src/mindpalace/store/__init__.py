"""Persistence: the store protocol and its backends."""

from __future__ import annotations

from pathlib import Path

from mindpalace.settings import StoreSettings
from mindpalace.store.base import (
    Document,
    NewEvent,
    Record,
    SearchHit,
    Store,
    StoredEvent,
    StoreStats,
)
from mindpalace.store.sqlite import SQLiteStore

__all__ = [
    "Document",
    "NewEvent",
    "Record",
    "SQLiteStore",
    "SearchHit",
    "Store",
    "StoreStats",
    "StoredEvent",
    "is_database_url",
    "open_store",
]


def is_database_url(location: str | Path) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL."""
    return str(location).startswith(("postgres://", "postgresql://"))


def open_store(location: str | Path, settings: StoreSettings | None = None) -> Store:
    """Open the backend for `location`: a ``postgresql://`` URL → PostgreSQL (the ``[postgres]``
    extra), a path → SQLite.

    Raises:
        WorkspaceError: a PostgreSQL URL without the ``[postgres]`` extra installed.
        StoreError: the server cannot be reached or lacks pgvector / pg_trgm.
        SchemaVersionError: the database is newer than this code (nothing written).
    """
    if is_database_url(location):
        try:
            from mindpalace.store.postgres import PostgresStore
        except ImportError as exc:
            from mindpalace.errors import WorkspaceError

            raise WorkspaceError(
                f"a PostgreSQL URL needs the [postgres] extra: pip install 'mindpalace[postgres]' "
                f"({exc})") from exc
        return PostgresStore(str(location), settings=settings)
    return SQLiteStore(Path(location), settings=settings)

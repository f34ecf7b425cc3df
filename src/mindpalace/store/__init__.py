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
    "open_store",
]


def open_store(location: str | Path, settings: StoreSettings | None = None) -> Store:
    """Open the backend for `location`: a path → SQLite.

    Raises:
        WorkspaceError: a ``postgresql://`` URL (the PostgreSQL backend is not built yet).
    """
    text = str(location)
    if text.startswith(("postgres://", "postgresql://")):
        from mindpalace.errors import WorkspaceError

        raise WorkspaceError(
            "the PostgreSQL backend is not available yet; use a workspace folder (SQLite)"
        )
    return SQLiteStore(Path(location), settings=settings)

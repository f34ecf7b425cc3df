"""Row helpers shared by the SQLite store's parts: scope filters, JSON text, rows to objects."""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache

from mindpalace.errors import StoreError
from mindpalace.scope import ANY, SCOPE_FIELDS, Scope
from mindpalace.store.base import Document
from mindpalace.store.codec import dumps
from mindpalace.timeutil import from_iso


def scope_where(scope: Scope, alias: str = "") -> tuple[str, list[object]]:
    """The WHERE clauses filtering on `scope`'s concrete fields (ANY fields are left out) and
    their parameters; callers append their own parameters to the returned list."""
    prefix = f"{alias}." if alias else ""
    clauses: list[str] = []
    params: list[object] = []
    for name, value in zip(SCOPE_FIELDS, scope.values(), strict=True):
        if value is ANY:
            continue
        clauses.append(f"{prefix}{name} = ?")
        params.append(value)
    return " AND ".join(clauses), params


# The columns a Document is built from: ``search_text`` (the segmented copy the FTS5 indexes
# read) is never needed outside the index, so reads leave it in the file.
# A part that views a blob (``blob`` not NULL) holds only its characters outside the blob in
# ``text``: read it through SQLiteBase._doc.
DOC_COLS = (
    "id, tenant, user, agent, session, kind, ref, text, meta, created_at, "
    "blob, blob_at, blob_off, blob_len"
)


def scope_of(row: sqlite3.Row) -> Scope:
    return stored_scope(row["tenant"], row["user"], row["agent"], row["session"])


@lru_cache(maxsize=4096)
def stored_scope(tenant: str, user: str, agent: str, session: str) -> Scope:
    """The Scope of a stored row, shared between rows of the same scope.

    A recall materialises hundreds of rows from a handful of scopes; the fields were validated
    when the row was written, and a Scope is immutable, so one instance per scope serves all
    of them instead of re-validating every field of every row."""
    return Scope(tenant, user, agent, session)


def doc_of(row: sqlite3.Row, text: str | None = None) -> Document:
    """A `docs` row (at least :data:`DOC_COLS`) as a Document; `text` replaces the row's own
    (the whole text of a part that views a blob)."""
    return Document(
        int(row["id"]), scope_of(row), row["kind"], row["ref"],
        row["text"] if text is None else text,
        json.loads(row["meta"]), from_iso(row["created_at"]),
    )


def inserted_id(cursor: sqlite3.Cursor) -> int:
    """The rowid of the row an INSERT through `cursor` just wrote."""
    rowid = cursor.lastrowid
    if rowid is None:  # pragma: no cover - sqlite3 sets it after every successful INSERT
        raise StoreError("INSERT reported no row id")
    return rowid

__all__ = ["DOC_COLS", "doc_of", "dumps", "inserted_id", "scope_of", "scope_where", "stored_scope"]

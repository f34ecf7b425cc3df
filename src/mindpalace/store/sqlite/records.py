"""Named records and key/value state of the SQLite store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

from mindpalace.errors import ValidationError
from mindpalace.scope import Scope
from mindpalace.store.base import Record
from mindpalace.store.blobs import blob_key
from mindpalace.store.inputs import record_fields
from mindpalace.store.sqlite.blobstore import put_blob
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import dumps, scope_of, scope_where
from mindpalace.store.sqlite.schema import SCOPE_COLS
from mindpalace.textsafe import require_text
from mindpalace.timeutil import from_iso, to_iso, utcnow


class RecordsMixin(SQLiteBase):
    """The named-record and key/value parts of the store protocol (a record's body is indexed
    as a search document through the documents part)."""

    # -- records ---------------------------------------------------------------------------
    def put_record(self, record: Record, *, overwrite: bool = False, index: bool = True) -> Record:
        scope, created, meta = record_fields(record)
        with self.transaction():
            exists = self._execute(
                "SELECT type FROM records WHERE tenant = ? AND user = ? AND agent = ? "
                "AND session = ? AND name = ?",
                (*scope.values(), record.name),
            ).fetchone()
            if exists and not overwrite:
                raise ValidationError(f"record {record.name!r} already exists in scope {scope}")
            if exists and (not index or exists["type"] != record.type):
                # the old body's search document (kind = old type) must not outlive it
                self.delete_documents(scope, exists["type"], [record.name])
            if exists:  # first, so a blob it held is released before the new body is stored
                self._execute(
                    "DELETE FROM records WHERE tenant = ? AND user = ? AND agent = ? "
                    "AND session = ? AND name = ?", (*scope.values(), record.name),
                )
            key = blob_key(record.body)  # a long body: stored once, compressed (store.blobs)
            if key is not None:
                put_blob(self._conn(), key, record.body)
                self._remember_blob(key, record.body)
            self._execute(
                f"INSERT OR REPLACE INTO records ({SCOPE_COLS}, name, type, step_id, description, "
                "created_at, body, meta, body_blob) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*scope.values(), record.name, record.type, record.step_id, record.description,
                 to_iso(created), "" if key else record.body, meta, key),
            )
            if index:
                text = f"{record.description}\n{record.body}" if record.description else record.body
                self.index_document(
                    scope, record.type, record.name, text,
                    {"record": record.name, "step_id": record.step_id},
                )
        return Record(scope, record.name, record.type, record.body, record.description,
                      record.step_id, created, dict(record.meta))

    def get_records(self, scope: Scope, names: Sequence[str]) -> dict[str, Record]:
        if not names:
            return {}
        where, params = scope_where(scope)
        marks = ",".join("?" * len(names))
        rows = self._execute(
            f"SELECT * FROM records WHERE {where} AND name IN ({marks}) ORDER BY id",
            [*params, *names],
        ).fetchall()
        return {r["name"]: self._record_of(r) for r in rows}

    def list_records(
        self, scope: Scope, *, type: str | None = None, limit: int | None = None
    ) -> list[Record]:
        where, params = scope_where(scope)
        sql = f"SELECT * FROM records WHERE {where}"
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._record_of(r) for r in self._execute(sql, params).fetchall()]

    def _record_of(self, r: sqlite3.Row) -> Record:
        """A ``records`` row as a Record, its body read from its blob when it has one."""
        body = r["body"] if r["body_blob"] is None else self._blob_text(r["body_blob"])
        return Record(
            scope_of(r), r["name"], r["type"], body, r["description"], r["step_id"],
            from_iso(r["created_at"]), json.loads(r["meta"]),
        )

    def delete_records(self, scope: Scope, names: Sequence[str]) -> int:
        scope.require_concrete()
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return 0
        removed = 0
        with self.transaction():
            for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                chunk = wanted[start:start + 500]
                marks = ",".join("?" * len(chunk))
                where = (f"tenant = ? AND user = ? AND agent = ? AND session = ? "
                         f"AND name IN ({marks})")
                rows = self._execute(f"SELECT name, type FROM records WHERE {where}",
                                     (*scope.values(), *chunk)).fetchall()
                by_type: dict[str, list[str]] = {}
                for r in rows:
                    by_type.setdefault(r["type"], []).append(r["name"])
                for rtype, refs in by_type.items():  # the body's search document (kind = type)
                    self.delete_documents(scope, rtype, refs)
                removed += self._execute(f"DELETE FROM records WHERE {where}",
                                         (*scope.values(), *chunk)).rowcount
        return removed

    # -- key/value -------------------------------------------------------------------------
    def kv_get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        scope.require_concrete()
        row = self._execute(
            "SELECT value FROM kv WHERE tenant = ? AND user = ? AND agent = ? AND session = ? "
            "AND namespace = ? AND key = ?",
            (*scope.values(), namespace, key),
        ).fetchone()
        return default if row is None else json.loads(row[0])

    def kv_put(self, scope: Scope, namespace: str, key: str, value: Any) -> None:
        scope.require_concrete()
        require_text("kv.namespace", namespace, allow_empty=False)
        require_text("kv.key", key, allow_empty=False)
        data = dumps(value)
        # one statement is atomic by itself: inside a transaction no savepoint around it. An
        # existing row is updated in place (one table page); OR REPLACE deleted it and inserted
        # a new row at the table's end, writing the table and both indexes again (pages a
        # durable commit must log and fsync: the ledger rewrites its row on every tool call).
        with nullcontext() if self.in_transaction() else self.transaction():
            self._execute(
                f"INSERT INTO kv ({SCOPE_COLS}, namespace, key, value, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, user, agent, session, "
                "namespace, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                (*scope.values(), namespace, key, data, to_iso(utcnow())),
            )

    def kv_delete(self, scope: Scope, namespace: str, key: str) -> bool:
        scope.require_concrete()
        with self.transaction():
            cur = self._execute(
                "DELETE FROM kv WHERE tenant = ? AND user = ? AND agent = ? AND session = ? "
                "AND namespace = ? AND key = ?",
                (*scope.values(), namespace, key),
            )
            return cur.rowcount > 0

    def kv_list(
        self, scope: Scope, namespace: str, *, prefix: str = ""
    ) -> list[tuple[Scope, str, Any]]:
        where, params = scope_where(scope)
        sql = f"SELECT * FROM kv WHERE {where} AND namespace = ? AND substr(key, 1, ?) = ?"
        params += [namespace, len(prefix), prefix]
        upper = _prefix_upper_bound(prefix)
        if prefix:  # a key range the primary key index can seek (substr alone scans the namespace)
            sql += " AND key >= ?"
            params.append(prefix)
        if upper is not None:
            sql += " AND key < ?"
            params.append(upper)
        rows = self._execute(sql + " ORDER BY key", params)
        return [(scope_of(r), r["key"], json.loads(r["value"])) for r in rows]


def _prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string above every string starting with `prefix` (None: no bound needed).

    UTF-8 byte order (SQLite's BINARY collation) equals code point order, so incrementing the
    last code point gives an exact exclusive bound; surrogates are skipped (not storable).
    """
    if not prefix:
        return None
    last = ord(prefix[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:
        last = 0xE000
    if last > 0x10FFFF:
        return None
    return prefix[:-1] + chr(last)

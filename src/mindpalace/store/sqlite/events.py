"""Event log of the SQLite store: append-only streams with optimistic concurrency."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mindpalace.errors import ConcurrencyError, StoreError
from mindpalace.scope import Scope
from mindpalace.store.base import NewEvent, StoredEvent
from mindpalace.store.inputs import event_payloads
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import inserted_id, scope_of, scope_where
from mindpalace.store.sqlite.schema import SCOPE_COLS
from mindpalace.timeutil import from_iso, to_iso, utcnow

# Single-event append as one statement; an aggregate without GROUP BY always yields one row,
# so a new stream gets version 1. `WHERE v = ?` turns it into an optimistic append.
_APPEND_ONE = (
    f"INSERT INTO events ({SCOPE_COLS}, stream, version, type, data, created_at) "
    "SELECT ?, ?, ?, ?, ?, v + 1, ?, ?, ? FROM (SELECT coalesce(max(version), 0) AS v FROM events "
    "WHERE tenant = ? AND user = ? AND agent = ? AND session = ? AND stream = ?)"
)
_APPEND_RETURNING = " RETURNING version, position"


class EventsMixin(SQLiteBase):
    """The event-log part of the store protocol."""

    def append_events(
        self,
        scope: Scope,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int | None = None,
    ) -> list[StoredEvent]:
        payloads = event_payloads(scope, stream, events)
        now = utcnow()
        now_iso = to_iso(now)
        if len(payloads) == 1:  # one statement: atomic alone, in or outside a transaction
            return [self._append_one(scope, stream, events[0], *payloads[0], now, now_iso,
                                     expected_version)]
        with self.transaction():
            current = self.stream_version(scope, stream)
            if expected_version is not None and current != expected_version:
                raise ConcurrencyError(stream, expected_version, current)
            conn = self._conn()
            out: list[StoredEvent] = []
            for i, (etype, data) in enumerate(payloads, start=1):
                cur = conn.execute(
                    f"INSERT INTO events ({SCOPE_COLS}, stream, version, type, data, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*scope.values(), stream, current + i, etype, data, now_iso),
                )
                out.append(StoredEvent(
                    scope, stream, current + i, etype, events[i - 1].data, now, inserted_id(cur)
                ))
            return out

    def _append_one(
        self, scope: Scope, stream: str, event: NewEvent, etype: str, data: str,
        now: datetime, now_iso: str, expected_version: int | None,
    ) -> StoredEvent:
        """One event in one statement: reading the version and inserting are atomic (outside a
        transaction a stale WAL snapshot fails as SQLITE_BUSY and the whole statement is
        retried), so the common single append costs one statement instead of
        BEGIN/SELECT/INSERT/COMMIT — or, inside a transaction, SAVEPOINT/SELECT/INSERT/RELEASE."""
        sql = _APPEND_ONE if expected_version is None else _APPEND_ONE + " WHERE v = ?"
        params: list[Any] = [*scope.values(), stream, etype, data, now_iso, *scope.values(), stream]
        if expected_version is not None:
            params.append(expected_version)
        try:
            # fetchall() runs the statement to completion, which commits it.
            rows = self._retry(
                lambda: self._conn().execute(sql + _APPEND_RETURNING, params).fetchall()
            )
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: integrity error: {exc}") from exc
        if not rows:  # the WHERE guard failed: another writer appended first
            current = self.stream_version(scope, stream)
            raise ConcurrencyError(stream, expected_version or 0, current)
        version, position = rows[0]
        return StoredEvent(scope, stream, int(version), etype, event.data, now, int(position))

    def read_events(
        self,
        scope: Scope,
        stream: str,
        *,
        from_version: int = 1,
        to_version: int | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        where, params = scope_where(scope)
        sql = f"SELECT * FROM events WHERE {where} AND stream = ? AND version >= ?"
        params += [stream, from_version]
        if to_version is not None:
            sql += " AND version <= ?"
            params.append(to_version)
        sql += " ORDER BY version"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        same = scope if scope.concrete else None  # every row is in it: no Scope per row
        return [
            StoredEvent(
                same or scope_of(r), r["stream"], r["version"], r["type"], json.loads(r["data"]),
                from_iso(r["created_at"]), r["position"],
            )
            for r in self._execute(sql, params)
        ]

    def stream_version(self, scope: Scope, stream: str) -> int:
        scope.require_concrete()
        row = self._execute(
            "SELECT max(version) FROM events WHERE tenant = ? AND user = ? AND agent = ? "
            "AND session = ? AND stream = ?",
            (*scope.values(), stream),
        ).fetchone()
        return row[0] or 0

    def delete_stream(self, scope: Scope, stream: str) -> int:
        scope.require_concrete()
        with self.transaction():
            cur = self._execute(
                "DELETE FROM events WHERE tenant = ? AND user = ? AND agent = ? AND session = ? "
                "AND stream = ?",
                (*scope.values(), stream),
            )
            return cur.rowcount

    def list_streams(self, scope: Scope, *, prefix: str = "") -> list[tuple[Scope, str, int]]:
        where, params = scope_where(scope)
        rows = self._execute(
            f"SELECT {SCOPE_COLS}, stream, max(version) AS v FROM events WHERE {where} "
            "AND substr(stream, 1, ?) = ? GROUP BY tenant, user, agent, session, stream "
            "ORDER BY stream",
            [*params, len(prefix), prefix],
        )
        return [(scope_of(r), r["stream"], r["v"]) for r in rows]

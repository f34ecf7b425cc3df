"""Event log of the SQLite store: append-only streams with optimistic concurrency."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mindpalace.errors import ConcurrencyError, StoreError
from mindpalace.scope import Scope
from mindpalace.store.base import NewEvent, StoredEvent
from mindpalace.store.blobs import BLOB_MIN_CHARS, SplitJson, join_json, split_json
from mindpalace.store.inputs import event_payloads
from mindpalace.store.sqlite.blobstore import put_blob
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import scope_of, scope_where
from mindpalace.store.sqlite.schema import SCOPE_COLS
from mindpalace.timeutil import from_iso, utcnow

# Append as one statement. One event: the row is selected from the stream's current version
# (an aggregate without GROUP BY always yields one row, so a new stream gets version 1). More:
# the rows are a VALUES list numbered 1..n joined to that version. `WHERE v = ?` turns either
# into an optimistic append. Each row comes back with its version, its position and the
# position of the stream's event before it (an indexed lookup bound to the scope and stream).
_MAX_ONE_STATEMENT = 256  # events per single-statement append (2 bound parameters each)
# The max is a scalar subquery of its own: SQLite would push an outer `WHERE v = ?` into an
# aggregate subquery as a HAVING, which turns the one-row index lookup of max() into a scan of
# the whole stream (an optimistic append cost O(stream length)).
# The last position handed out (schema v5): the table's last one, or meta.event_position when
# higher (raised by delete_stream before it deletes), so no position is ever handed out twice.
_LAST_POSITION = (
    "max(coalesce((SELECT max(position) FROM events), 0), "
    "coalesce((SELECT value FROM meta WHERE key = 'event_position'), 0))"
)
_CURRENT = (
    "(SELECT coalesce((SELECT max(version) FROM events "
    "WHERE tenant = ? AND user = ? AND agent = ? AND session = ? AND stream = ?), 0) AS v, "
    f"{_LAST_POSITION} AS p)"
)
_APPEND_ONE = (
    f"INSERT INTO events (position, {SCOPE_COLS}, stream, version, type, data, created_at) "
    f"SELECT p + 1, ?, ?, ?, ?, ?, v + 1, ?, ?, ? FROM {_CURRENT}"
)
_RETURNING = (
    " RETURNING version, position, (SELECT e.position FROM events AS e WHERE e.tenant = ? AND "
    "e.user = ? AND e.agent = ? AND e.session = ? AND e.stream = ? AND e.version = events.version - 1)"
)


# The stream's last event: one backward step of the (scope, stream, version) index.
_HEAD = (
    "SELECT version, position FROM events WHERE tenant = ? AND user = ? AND agent = ? "
    "AND session = ? AND stream = ? ORDER BY version DESC LIMIT 1"
)


@functools.lru_cache(maxsize=64)
def _append_sql(n: int, expected: bool) -> str:
    guard = " WHERE v = ?" if expected else ""
    if n == 1:
        return _APPEND_ONE + guard + _RETURNING
    rows = ", ".join(["(?, ?, ?)"] * n)
    return (
        f"WITH new(k, type, data) AS (VALUES {rows}) "
        f"INSERT INTO events (position, {SCOPE_COLS}, stream, version, type, data, created_at) "
        f"SELECT p + k, ?, ?, ?, ?, ?, v + k, type, data, ? FROM {_CURRENT} JOIN new{guard} ORDER BY k"
        + _RETURNING
    )


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
        now_iso = now.isoformat()  # utcnow() is timezone-aware UTC: what to_iso would check
        # An event holding a long string (a tool message's output) keeps it in a blob, stored
        # once (store.blobs): such an append takes the transaction path below.
        splits = [
            split_json(e.data, data) if len(data) >= BLOB_MIN_CHARS else None
            for e, (_, data) in zip(events, payloads, strict=True)
        ]
        if any(splits):
            return self._append_with_blobs(scope, stream, events, payloads, splits, now,
                                           expected_version)
        if 0 < len(payloads) <= _MAX_ONE_STATEMENT:  # one statement: atomic alone, anywhere
            return self._append_statement(scope, stream, events, payloads, now, now_iso,
                                          expected_version)
        with self.transaction():
            current = self._checked_version(scope, stream, expected_version)
            conn = self._conn()
            last = self._last_position()
            out: list[StoredEvent] = []
            for i, (etype, data) in enumerate(payloads, start=1):
                conn.execute(
                    f"INSERT INTO events (position, {SCOPE_COLS}, stream, version, type, data, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (last + i, *scope.values(), stream, current + i, etype, data, now_iso),
                )
                out.append(StoredEvent(scope, stream, current + i, etype, events[i - 1].data, now, last + i))
            return out

    def _last_position(self) -> int:
        """The last event position handed out (inside the caller's write transaction)."""
        return int(self._conn().execute(f"SELECT {_LAST_POSITION}").fetchone()[0])

    def _checked_version(self, scope: Scope, stream: str, expected_version: int | None) -> int:
        """The stream's current version, inside the caller's transaction; ConcurrencyError when
        `expected_version` is given and differs (optimistic concurrency)."""
        current = self.stream_version(scope, stream)
        if expected_version is not None and current != expected_version:
            raise ConcurrencyError(stream, expected_version, current)
        return current

    def _append_with_blobs(
        self, scope: Scope, stream: str, events: Sequence[NewEvent],
        payloads: Sequence[tuple[str, str]], splits: Sequence[SplitJson | None], now: datetime,
        expected_version: int | None,
    ) -> list[StoredEvent]:
        """Append in one transaction, the long strings of `splits` as blobs (each event's
        ``data`` column holds its JSON without the string's literals, ``blob_at`` where they
        were)."""
        with self.transaction():
            current = self._checked_version(scope, stream, expected_version)
            conn = self._conn()
            last = self._last_position()
            out: list[StoredEvent] = []
            for i, ((etype, data), split) in enumerate(zip(payloads, splits, strict=True), 1):
                blob = at = None
                if split is not None:
                    put_blob(conn, split.key, split.text)
                    self._remember_blob(split.key, split.text)
                    data, blob, at = split.rest, split.key, json.dumps(list(split.offsets))
                conn.execute(
                    f"INSERT INTO events (position, {SCOPE_COLS}, stream, version, type, data, "
                    "created_at, blob, blob_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (last + i, *scope.values(), stream, current + i, etype, data, now.isoformat(),
                     blob, at),
                )
                out.append(StoredEvent(scope, stream, current + i, etype, events[i - 1].data, now, last + i))
            return out

    def _event_data(self, r: sqlite3.Row) -> Any:
        """An ``events`` row's data, its long string put back from its blob when it has one."""
        if r["blob"] is None:
            return json.loads(r["data"])
        text = self._blob_text(r["blob"])
        return json.loads(join_json(r["data"], text, json.loads(r["blob_at"])))

    def _append_statement(
        self, scope: Scope, stream: str, events: Sequence[NewEvent],
        payloads: Sequence[tuple[str, str]], now: datetime, now_iso: str,
        expected_version: int | None,
    ) -> list[StoredEvent]:
        """Up to :data:`_MAX_ONE_STATEMENT` events in ONE statement (each returned with the
        position of the event before it, :attr:`StoredEvent.previous`): reading the version and
        inserting every row are atomic (outside a transaction a stale WAL snapshot fails as
        SQLITE_BUSY and the whole statement is retried), so an append costs one statement
        instead of BEGIN/SELECT/INSERT…/COMMIT — or, inside a transaction, no savepoint
        (a statement that fails leaves nothing behind)."""
        sql = _append_sql(len(payloads), expected_version is not None)
        where = [*scope.values(), stream]
        params: list[Any] = []
        if len(payloads) == 1:
            params += (*where, payloads[0][0], payloads[0][1], now_iso, *where)
        else:
            for k, (etype, data) in enumerate(payloads, start=1):
                params += (k, etype, data)
            params += (*where, now_iso, *where)
        if expected_version is not None:
            params.append(expected_version)
        params += where  # the RETURNING lookup of the event before each row
        try:
            # fetchall() runs the statement to completion. Outside a transaction it is a member
            # of the group commit without a savepoint (the statement is atomic): alone it
            # commits itself, else it shares its batch's COMMIT — durable either way on return.
            if self.in_transaction():
                rows = self._retry(lambda: self._conn().execute(sql, params).fetchall())
            else:
                conn = self._write_conn()
                rows = self._group.atomic(conn, lambda: conn.execute(sql, params).fetchall())
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: integrity error: {exc}") from exc
        if not rows:  # the WHERE guard failed: another writer appended first
            current = self.stream_version(scope, stream)
            raise ConcurrencyError(stream, expected_version or 0, current)
        if len(rows) == 1:  # the common append: one event
            [(version, position, previous)] = rows
            return [StoredEvent(scope, stream, int(version), payloads[0][0], events[0].data, now,
                                int(position), None if previous is None else int(previous))]
        # RETURNING order is unspecified; versions ascend with the events
        rows = sorted((int(r[0]), int(r[1]), None if r[2] is None else int(r[2])) for r in rows)
        return [
            StoredEvent(scope, stream, version, etype, event.data, now, position, previous)
            for (version, position, previous), (etype, _), event in zip(rows, payloads, events, strict=True)
        ]

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
                same or scope_of(r), r["stream"], r["version"], r["type"], self._event_data(r),
                from_iso(r["created_at"]), r["position"],
            )
            for r in self._execute(sql, params).fetchall()
        ]

    def stream_version(self, scope: Scope, stream: str) -> int:
        scope.require_concrete()
        row = self._execute(
            "SELECT max(version) FROM events WHERE tenant = ? AND user = ? AND agent = ? "
            "AND session = ? AND stream = ?",
            (*scope.values(), stream),
        ).fetchone()
        return row[0] or 0

    def stream_head(self, scope: Scope, stream: str) -> tuple[int, int | None]:
        scope.require_concrete()
        row = self._execute(_HEAD, (*scope.values(), stream)).fetchone()
        return (0, None) if row is None else (int(row[0]), int(row[1]))

    def delete_stream(self, scope: Scope, stream: str) -> int:
        scope.require_concrete()
        with self.transaction():
            # positions of the deleted events are never handed out again (an append takes the
            # larger of the table's last position and this one)
            self._execute(
                f"UPDATE meta SET value = {_LAST_POSITION} WHERE key = 'event_position'"
            )
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

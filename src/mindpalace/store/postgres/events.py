"""Event log of the PostgreSQL store: per-stream versions under a per-stream advisory lock."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mindpalace.errors import ConcurrencyError
from mindpalace.scope import Scope
from mindpalace.store.base import NewEvent, StoredEvent
from mindpalace.store.blobs import BLOB_MIN_CHARS, join_json, split_json
from mindpalace.store.inputs import event_payloads
from mindpalace.store.postgres.blobstore import put_blob
from mindpalace.store.postgres.connection import PostgresBase, exact_scope, scope_of, scope_where
from mindpalace.store.postgres.schema import SCOPE_COLS
from mindpalace.timeutil import utcnow

_VERSION = ("SELECT coalesce(max(version), 0) FROM mp_events WHERE tenant = %s AND user_id = %s "
            "AND agent = %s AND session_id = %s AND stream = %s")
# The stream's last event (version, position), for an append; no row for a new stream.
_HEAD = ("SELECT version, position FROM mp_events WHERE tenant = %s AND user_id = %s "
         "AND agent = %s AND session_id = %s AND stream = %s ORDER BY version DESC LIMIT 1")
# One statement for the whole batch: versions, types and data arrive as three arrays.
_INSERT = (f"INSERT INTO mp_events ({SCOPE_COLS}, stream, version, type, data, created_at, "
           "blob, blob_at) SELECT %s, %s, %s, %s, %s, v, t, d, %s, b, c "
           "FROM unnest(%s::integer[], %s::text[], %s::text[], %s::text[], %s::text[]) "
           "AS x(v, t, d, b, c) "
           "RETURNING version, position")


class EventsMixin(PostgresBase):
    """The event-log part of the store protocol.

    An append reads the stream's version and inserts after it inside one short transaction
    holding the stream's advisory lock, so concurrent appenders (threads or processes) queue
    per stream and versions stay contiguous; the unique (scope, stream, version) constraint
    backs it up. ``position`` is a sequence: it grows with every append, but under concurrent
    writers an append may commit after one with a higher position.
    """

    def append_events(
        self,
        scope: Scope,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int | None = None,
    ) -> list[StoredEvent]:
        payloads = event_payloads(scope, stream, events)
        if not payloads:
            if expected_version is not None and self.stream_version(scope, stream) != expected_version:
                raise ConcurrencyError(stream, expected_version, self.stream_version(scope, stream))
            return []
        now = utcnow()
        with self._tx(serialize=False) as conn:
            self._xact_lock(conn, "stream", *scope.values(), stream)
            row = conn.execute(_HEAD, (*scope.values(), stream)).fetchone()
            current, head = (int(row[0]), int(row[1])) if row else (0, None)
            if expected_version is not None and current != expected_version:
                raise ConcurrencyError(stream, expected_version, current)
            versions = list(range(current + 1, current + 1 + len(payloads)))
            # An event holding a long string (a tool message's output) keeps it in a blob,
            # stored once (store.blobs): its data column holds the JSON without it.
            datas, blobs, cuts = [], [], []
            for e, (_, data) in zip(events, payloads, strict=True):
                split = split_json(e.data, data) if len(data) >= BLOB_MIN_CHARS else None
                if split is not None:
                    put_blob(conn, split.key, split.text)
                    data = split.rest
                datas.append(data)
                blobs.append(None if split is None else split.key)
                cuts.append(None if split is None else json.dumps(list(split.offsets)))
            rows = conn.execute(_INSERT, (
                *scope.values(), stream, now, versions, [t for t, _ in payloads],
                datas, blobs, cuts)).fetchall()
        position = {int(v): int(p) for v, p in rows}
        # previous: the head found under the stream's lock, then each new row's predecessor
        return [StoredEvent(scope, stream, v, t, e.data, now, position[v],
                            head if v == current + 1 else position[v - 1])
                for v, (t, _), e in zip(versions, payloads, events, strict=True)]

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
        sql = (f"SELECT {SCOPE_COLS}, stream, version, type, data, created_at, position, "
               "blob, blob_at "
               f"FROM mp_events WHERE {where} AND stream = %s AND version >= %s")
        params += [stream, from_version]
        if to_version is not None:
            sql += " AND version <= %s"
            params.append(to_version)
        sql += " ORDER BY version, position"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(limit, 0))
        return [StoredEvent(scope_of(r), r[4], int(r[5]), r[6], self._event_data(r), r[8],
                            int(r[9]))
                for r in self._all(sql, params)]

    def _event_data(self, r: Sequence[Any]) -> Any:
        """A read row's data, its long string put back from its blob when it has one."""
        if r[10] is None:
            return json.loads(r[7])
        return json.loads(join_json(r[7], self._blob_text(r[10]), json.loads(r[11])))

    def stream_version(self, scope: Scope, stream: str) -> int:
        scope.require_concrete()
        row = self._one(_VERSION, (*scope.values(), stream))
        return int(row[0]) if row else 0

    def stream_head(self, scope: Scope, stream: str) -> tuple[int, int | None]:
        scope.require_concrete()
        row = self._one(_HEAD, (*scope.values(), stream))
        return (0, None) if row is None else (int(row[0]), int(row[1]))

    def delete_stream(self, scope: Scope, stream: str) -> int:
        where, params = exact_scope(scope)
        return self._count(f"DELETE FROM mp_events WHERE {where} AND stream = %s",
                           [*params, stream])

    def list_streams(self, scope: Scope, *, prefix: str = "") -> list[tuple[Scope, str, int]]:
        where, params = scope_where(scope)
        rows = self._all(
            f"SELECT {SCOPE_COLS}, stream, max(version) FROM mp_events WHERE {where} "
            "AND left(stream, %s) = %s GROUP BY tenant, user_id, agent, session_id, stream "
            "ORDER BY stream, tenant, user_id, agent, session_id",
            [*params, len(prefix), prefix])
        return [(scope_of(r), r[4], int(r[5])) for r in rows]

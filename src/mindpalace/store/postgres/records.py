"""Named records and key/value state of the PostgreSQL store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mindpalace.errors import ValidationError
from mindpalace.scope import Scope
from mindpalace.store.base import Record
from mindpalace.store.blobs import blob_key
from mindpalace.store.codec import dumps
from mindpalace.store.inputs import record_fields
from mindpalace.store.postgres.blobstore import put_blob
from mindpalace.store.postgres.connection import PostgresBase, exact_scope, scope_of, scope_where
from mindpalace.store.postgres.schema import SCOPE_COLS
from mindpalace.textsafe import require_text
from mindpalace.timeutil import utcnow

_RECORD_COLS = f"{SCOPE_COLS}, name, type, body, description, step_id, created_at, meta"
_KV_PUT = (f"INSERT INTO mp_kv ({SCOPE_COLS}, namespace, key, value, updated_at) "
           "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, user_id, agent, "
           "session_id, namespace, key) DO UPDATE SET value = EXCLUDED.value, "
           "updated_at = EXCLUDED.updated_at")


class RecordsMixin(PostgresBase):
    """The named-record and key/value parts of the store protocol (a record's body is indexed
    as a search document through the documents part)."""

    # -- records ---------------------------------------------------------------------------
    def put_record(self, record: Record, *, overwrite: bool = False, index: bool = True) -> Record:
        scope, created, meta = record_fields(record)
        where, params = exact_scope(scope)
        with self._tx(serialize=False) as conn:
            self._xact_lock(conn, "record", *scope.values(), record.name)
            exists = conn.execute(f"SELECT type FROM mp_records WHERE {where} AND name = %s",
                                  [*params, record.name]).fetchone()
            if exists and not overwrite:
                raise ValidationError(f"record {record.name!r} already exists in scope {scope}")
            if exists:
                if not index or exists[0] != record.type:
                    # the old body's search document (kind = old type) must not outlive it
                    self.delete_documents(scope, exists[0], [record.name])
                # replaced, not updated: an overwritten record is the newest (as on SQLite)
                conn.execute(f"DELETE FROM mp_records WHERE {where} AND name = %s",
                             [*params, record.name])
            key = blob_key(record.body)  # a long body: stored once, compressed (store.blobs)
            if key is not None:
                put_blob(conn, key, record.body)
            conn.execute(
                f"INSERT INTO mp_records ({_RECORD_COLS}, body_blob) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (*scope.values(), record.name, record.type, "" if key else record.body,
                 record.description, record.step_id, created, meta, key))
            if index:
                text = f"{record.description}\n{record.body}" if record.description else record.body
                self.index_document(scope, record.type, record.name, text,
                                    {"record": record.name, "step_id": record.step_id})
        return Record(scope, record.name, record.type, record.body, record.description,
                      record.step_id, created, dict(record.meta))

    def get_records(self, scope: Scope, names: Sequence[str]) -> dict[str, Record]:
        if not names:
            return {}
        where, params = scope_where(scope)
        rows = self._all(f"SELECT {_RECORD_COLS}, body_blob FROM mp_records WHERE {where} "
                         "AND name = ANY(%s) ORDER BY id", [*params, list(names)])
        return {r[4]: self._record_of(r) for r in rows}

    def list_records(
        self, scope: Scope, *, type: str | None = None, limit: int | None = None
    ) -> list[Record]:
        where, params = scope_where(scope)
        sql = f"SELECT {_RECORD_COLS}, body_blob FROM mp_records WHERE {where}"
        if type is not None:
            sql += " AND type = %s"
            params.append(type)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(max(limit, 0))
        return [self._record_of(r) for r in self._all(sql, params)]

    def _record_of(self, r: Sequence[Any]) -> Record:
        """A row of :data:`_RECORD_COLS` + ``body_blob`` as a Record, its body read from its
        blob when it has one."""
        body = r[6] if r[11] is None else self._blob_text(r[11])
        return Record(scope_of(r), r[4], r[5], body, r[7], r[8], r[9], json.loads(r[10]))

    def delete_records(self, scope: Scope, names: Sequence[str]) -> int:
        where, params = exact_scope(scope)
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return 0
        with self._tx(serialize=False) as conn:
            rows = conn.execute(f"DELETE FROM mp_records WHERE {where} AND name = ANY(%s) "
                                "RETURNING name, type", [*params, wanted]).fetchall()
            by_type: dict[str, list[str]] = {}
            for name, rtype in rows:
                by_type.setdefault(rtype, []).append(name)
            for rtype, refs in by_type.items():  # the body's search document (kind = type)
                self.delete_documents(scope, rtype, refs)
        return len(rows)

    # -- key/value -------------------------------------------------------------------------
    def kv_get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        where, params = exact_scope(scope)
        row = self._one(f"SELECT value FROM mp_kv WHERE {where} AND namespace = %s AND key = %s",
                        [*params, namespace, key])
        return default if row is None else json.loads(row[0])

    def kv_put(self, scope: Scope, namespace: str, key: str, value: Any) -> None:
        scope.require_concrete()
        require_text("kv.namespace", namespace, allow_empty=False)
        require_text("kv.key", key, allow_empty=False)
        data = dumps(value)
        self._run(lambda c: c.execute(_KV_PUT, (*scope.values(), namespace, key, data, utcnow())))

    def kv_delete(self, scope: Scope, namespace: str, key: str) -> bool:
        where, params = exact_scope(scope)
        return self._count(f"DELETE FROM mp_kv WHERE {where} AND namespace = %s AND key = %s",
                           [*params, namespace, key]) > 0

    def kv_list(
        self, scope: Scope, namespace: str, *, prefix: str = ""
    ) -> list[tuple[Scope, str, Any]]:
        where, params = scope_where(scope)
        sql = f"SELECT {SCOPE_COLS}, key, value FROM mp_kv WHERE {where} AND namespace = %s"
        params.append(namespace)
        if prefix:  # a key range the primary key can seek, then the exact prefix test
            sql += " AND key >= %s AND left(key, %s) = %s"
            params += [prefix, len(prefix), prefix]
        rows = self._all(sql + " ORDER BY key, tenant, user_id, agent, session_id", params)
        return [(scope_of(r), r[4], json.loads(r[5])) for r in rows]


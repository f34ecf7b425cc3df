"""SQLite backend of the store protocol: WAL, busy retries, numbered migrations, FTS5, numpy vectors."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from mindpalace.errors import (
    ConcurrencyError,
    DimensionMismatchError,
    NotFoundError,
    SchemaVersionError,
    StoreBusyError,
    StoreError,
    ValidationError,
)
from mindpalace.scope import ANY, SCOPE_FIELDS, Scope
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
from mindpalace.store.bm25 import PostingIndex
from mindpalace.store.textindex import build_match_query, build_trigram_query, segment_for_index
from mindpalace.store.vectors import ExactCosineIndex, VectorIndex, VectorIndexFactory
from mindpalace.textsafe import require_name, require_text
from mindpalace.timeutil import from_iso, to_iso, utcnow

_SCOPE_COLS = "tenant, user, agent, session"

# Position in this list = schema version. Never edit a shipped entry; append a new one.
MIGRATIONS: list[str] = [
    # v1: the whole protocol.
    f"""
    CREATE TABLE events (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        {_SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        stream TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,
        data TEXT NOT NULL, created_at TEXT NOT NULL,
        UNIQUE (tenant, user, agent, session, stream, version)
    );
    CREATE TABLE records (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {_SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        name TEXT NOT NULL, type TEXT NOT NULL, step_id INTEGER, description TEXT NOT NULL,
        created_at TEXT NOT NULL, body TEXT NOT NULL, meta TEXT NOT NULL,
        UNIQUE (tenant, user, agent, session, name)
    );
    CREATE INDEX records_type ON records (tenant, user, agent, session, type);
    CREATE TABLE kv (
        {_SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated_at TEXT NOT NULL,
        PRIMARY KEY (tenant, user, agent, session, namespace, key)
    );
    CREATE INDEX kv_namespace ON kv (namespace, key);
    CREATE TABLE docs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {_SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        kind TEXT NOT NULL, ref TEXT NOT NULL, text TEXT NOT NULL, search_text TEXT NOT NULL,
        meta TEXT NOT NULL, created_at TEXT NOT NULL,
        UNIQUE (tenant, user, agent, session, kind, ref)
    );
    CREATE INDEX docs_tenant_user ON docs (tenant, user);
    CREATE VIRTUAL TABLE docs_fts USING fts5(
        search_text, content='docs', content_rowid='id', tokenize='{{fts_tokenizer}}'
    );
    CREATE VIRTUAL TABLE docs_tri USING fts5(
        text, content='docs', content_rowid='id', tokenize='trigram'
    );
    CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN
        INSERT INTO docs_fts (rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO docs_tri (rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER docs_ad AFTER DELETE ON docs BEGIN
        INSERT INTO docs_fts (docs_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO docs_tri (docs_tri, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN
        INSERT INTO docs_fts (docs_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO docs_tri (docs_tri, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO docs_fts (rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO docs_tri (rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TABLE embeddings (
        doc_id INTEGER NOT NULL REFERENCES docs (id) ON DELETE CASCADE,
        model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY (doc_id, model)
    );
    CREATE INDEX embeddings_model ON embeddings (model);
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    INSERT INTO meta (key, value) VALUES ('embedding_generation', 0);
    """,
    # v2: the word index's postings, read by the in-process BM25 scorer (mindpalace.store.bm25).
    """
    CREATE VIRTUAL TABLE docs_fts_v USING fts5vocab(docs_fts, 'instance');
    CREATE VIRTUAL TABLE docs_fts_r USING fts5vocab(docs_fts, 'row');
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)

# Single-event append as one statement; an aggregate without GROUP BY always yields one row,
# so a new stream gets version 1. `WHERE v = ?` turns it into an optimistic append.
_APPEND_ONE = (
    f"INSERT INTO events ({_SCOPE_COLS}, stream, version, type, data, created_at) "
    "SELECT ?, ?, ?, ?, ?, v + 1, ?, ?, ? FROM (SELECT coalesce(max(version), 0) AS v FROM events "
    "WHERE tenant = ? AND user = ? AND agent = ? AND session = ? AND stream = ?)"
)
_APPEND_RETURNING = " RETURNING version, position"


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


def _dumps(value: Any) -> str:
    """JSON text that UTF-8 can store: lone surrogates fall back to \\u escapes (exact round trip)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"value is not JSON-serialisable: {exc}") from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    if "\x00" in text:  # cannot happen with json.dumps (it escapes control chars); belt and braces
        raise ValidationError("JSON text contains NUL")
    return text


def _scope_where(scope: Scope, alias: str = "") -> tuple[str, list[str]]:
    prefix = f"{alias}." if alias else ""
    clauses, params = [], []
    for name, value in zip(SCOPE_FIELDS, scope.values(), strict=True):
        if value is ANY:
            continue
        clauses.append(f"{prefix}{name} = ?")
        params.append(value)
    return " AND ".join(clauses), params


def _scope_of(row: sqlite3.Row) -> Scope:
    return Scope(row["tenant"], row["user"], row["agent"], row["session"])


class SQLiteStore(Store):
    """The embedded default backend: one SQLite file in WAL mode.

    Args:
        path: database file (created with its folder); ``":memory:"`` is not supported because
            every thread gets its own connection.
        settings: busy timeout (ms), bounded busy retries, ``synchronous`` mode, FTS tokenizer.
        vector_index_factory: builds the per-scope vector index (exact cosine by default).

    Raises:
        SchemaVersionError: the file's schema is newer than this code (checked read-only first,
            so nothing is written).
        StoreError: the file is not a SQLite database.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        settings: StoreSettings | None = None,
        vector_index_factory: VectorIndexFactory = ExactCosineIndex,
    ) -> None:
        self.path = Path(path)
        self.settings = settings or StoreSettings()
        self._index_factory = vector_index_factory
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._vec_cache: dict[tuple[Any, ...], tuple[int, VectorIndex]] = {}
        self._vec_lock = threading.Lock()
        self._bm25: PostingIndex | None = None
        self._bm25_lock = threading.Lock()
        self._bm25_build = (0.0, 0.0)  # (finished at, seconds taken) of the last build
        self._token_cache: dict[str, tuple[str, ...]] = {}
        self._refuse_newer_schema()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._migrate()
        self.schema_version = SCHEMA_VERSION
        sql = self._execute("SELECT sql FROM sqlite_master WHERE name = 'docs_fts'").fetchone()[0]
        found = re.search(r"tokenize\s*=\s*'([^']*)'", sql)
        self._fts_tokenizer = found.group(1) if found else "unicode61"

    # -- connections & transactions --------------------------------------------------------
    def _refuse_newer_schema(self) -> None:
        if not self.path.exists():
            return
        # Read-only, and `immutable` when no -wal file exists (the last writer closed cleanly):
        # a plain read-only open of a WAL database would still create -wal/-shm files. A racing
        # writer that creates the WAL right now is caught by the re-check inside _migrate.
        wal = Path(f"{self.path}-wal").exists()
        uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("" if wal else "&immutable=1")
        try:
            ro = sqlite3.connect(uri, uri=True)
            try:
                has = ro.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'schema_version'"
                ).fetchone()
                found = ro.execute("SELECT max(version) FROM schema_version").fetchone()[0] if has else 0
            finally:
                ro.close()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a mindpalace SQLite database ({exc})") from exc
        if (found or 0) > SCHEMA_VERSION:
            raise SchemaVersionError(str(self.path), found, SCHEMA_VERSION)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, timeout=self.settings.busy_timeout_ms / 1000,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute(f"PRAGMA busy_timeout={int(self.settings.busy_timeout_ms)}")
            conn.execute(f"PRAGMA synchronous={self.settings.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA recursive_triggers=ON")
            self._local.conn = conn
            self._local.depth = 0
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _retry(self, fn: Any) -> Any:
        """Run `fn`, retrying SQLITE_BUSY with bounded exponential backoff."""
        try:  # fast path: building a tenacity loop costs more than an uncontended commit
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise StoreError(f"{self.path}: {exc}") from exc
            if self.settings.busy_retries == 0:
                raise StoreBusyError(f"{self.path}: database is locked (busy_retries = 0)") from exc
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_is_busy),
                stop=stop_after_attempt(self.settings.busy_retries),
                wait=wait_exponential(multiplier=0.01, max=0.5),
                reraise=True,
            ):
                with attempt:
                    return fn()
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise StoreBusyError(
                    f"{self.path}: database stayed locked through {self.settings.busy_retries} "
                    "retries; another process holds a long write transaction"
                ) from exc
            raise StoreError(f"{self.path}: {exc}") from exc
        return None  # pragma: no cover - Retrying always returns or raises

    @contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self._conn()
        depth = self._local.depth
        if depth:  # nested: a savepoint, so an inner failure rolls back only the inner block
            name = f"sp{depth}"
            conn.execute(f"SAVEPOINT {name}")
            self._local.depth = depth + 1
            try:
                yield
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
                raise
            else:
                conn.execute(f"RELEASE {name}")
            finally:
                self._local.depth = depth
            return
        # BEGIN IMMEDIATE takes the write lock up front: no deadlocking read→write upgrades.
        self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        self._local.depth = 1
        try:
            yield
        except BaseException:
            conn.rollback()
            raise
        else:
            try:
                self._retry(lambda: conn.execute("COMMIT"))
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
        finally:
            self._local.depth = 0

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._retry(lambda: self._conn().execute(sql, params))
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: integrity error: {exc}") from exc

    def _migrate(self) -> None:
        conn = self._conn()
        with self.transaction():
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            current = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0
            if current > SCHEMA_VERSION:  # a newer mindpalace migrated since the read-only check
                raise SchemaVersionError(str(self.path), current, SCHEMA_VERSION)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                script = MIGRATIONS[version - 1].replace(
                    "{fts_tokenizer}", self.settings.fts_tokenizer.replace("'", "")
                )
                for statement in _split_sql(script):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    def close(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                with suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()
        self._local = threading.local()

    def stats(self) -> StoreStats:
        q = lambda sql: self._execute(sql).fetchone()[0]  # noqa: E731
        models = {
            r["model"]: r["n"]
            for r in self._execute("SELECT model, count(*) AS n FROM embeddings GROUP BY model")
        }
        size = sum(
            p.stat().st_size
            for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
            if p.exists()
        )
        sessions = q(
            "SELECT count(*) FROM (SELECT tenant, user, agent, session FROM events WHERE session != ''"
            " UNION SELECT tenant, user, agent, session FROM kv WHERE session != ''"
            " UNION SELECT tenant, user, agent, session FROM records WHERE session != '')"
        )
        return StoreStats(
            schema_version=q("SELECT max(version) FROM schema_version"),
            sessions=sessions,
            events=q("SELECT count(*) FROM events"),
            streams=q("SELECT count(*) FROM (SELECT DISTINCT tenant, user, agent, session, stream FROM events)"),
            records=q("SELECT count(*) FROM records"),
            kv_entries=q("SELECT count(*) FROM kv"),
            documents=q("SELECT count(*) FROM docs"),
            embeddings=models,
            size_bytes=size,
        )

    # -- events ----------------------------------------------------------------------------
    def append_events(
        self,
        scope: Scope,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int | None = None,
    ) -> list[StoredEvent]:
        scope.require_concrete()
        require_text("stream", stream, allow_empty=False)
        payloads = [(require_text("event.type", e.type, allow_empty=False), _dumps(e.data)) for e in events]
        now = utcnow()
        now_iso = to_iso(now)
        if len(payloads) == 1 and not getattr(self._local, "depth", 0):
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
                    f"INSERT INTO events ({_SCOPE_COLS}, stream, version, type, data, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*scope.values(), stream, current + i, etype, data, now_iso),
                )
                out.append(
                    StoredEvent(scope, stream, current + i, etype, events[i - 1].data, now, cur.lastrowid)
                )
            return out

    def _append_one(
        self, scope: Scope, stream: str, event: NewEvent, etype: str, data: str,
        now: datetime, now_iso: str, expected_version: int | None,
    ) -> StoredEvent:
        """One event in one autocommit statement: reading the version and inserting are atomic
        (a stale WAL snapshot fails as SQLITE_BUSY and the whole statement is retried), so the
        common single append costs one statement instead of BEGIN/SELECT/INSERT/COMMIT."""
        sql = _APPEND_ONE if expected_version is None else _APPEND_ONE + " WHERE v = ?"
        params: list[Any] = [*scope.values(), stream, etype, data, now_iso, *scope.values(), stream]
        if expected_version is not None:
            params.append(expected_version)
        try:
            # fetchall() runs the statement to completion, which commits it.
            rows = self._retry(lambda: self._conn().execute(sql + _APPEND_RETURNING, params).fetchall())
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.path}: integrity error: {exc}") from exc
        if not rows:  # the WHERE guard failed: another writer appended first
            raise ConcurrencyError(stream, expected_version or 0, self.stream_version(scope, stream))
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
        where, params = _scope_where(scope)
        sql = f"SELECT * FROM events WHERE {where} AND stream = ? AND version >= ?"
        params += [stream, from_version]
        if to_version is not None:
            sql += " AND version <= ?"
            params.append(to_version)
        sql += " ORDER BY version"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            StoredEvent(
                _scope_of(r), r["stream"], r["version"], r["type"], json.loads(r["data"]),
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
        where, params = _scope_where(scope)
        rows = self._execute(
            f"SELECT {_SCOPE_COLS}, stream, max(version) AS v FROM events WHERE {where} "
            "AND substr(stream, 1, ?) = ? GROUP BY tenant, user, agent, session, stream "
            "ORDER BY stream",
            [*params, len(prefix), prefix],
        )
        return [(_scope_of(r), r["stream"], r["v"]) for r in rows]

    # -- records ---------------------------------------------------------------------------
    def put_record(self, record: Record, *, overwrite: bool = False, index: bool = True) -> Record:
        scope = record.scope.require_concrete()
        require_name(record.name, field="record name")
        require_text("record.type", record.type, allow_empty=False)
        require_text("record.body", record.body)
        require_text("record.description", record.description)
        created = record.created_at or utcnow()
        meta = _dumps(record.meta)
        with self.transaction():
            exists = self._execute(
                "SELECT type FROM records WHERE tenant = ? AND user = ? AND agent = ? AND session = ? "
                "AND name = ?",
                (*scope.values(), record.name),
            ).fetchone()
            if exists and not overwrite:
                raise ValidationError(f"record {record.name!r} already exists in scope {scope}")
            if exists and (not index or exists["type"] != record.type):
                # the old body's search document (kind = old type) must not outlive it
                self.delete_documents(scope, exists["type"], [record.name])
            self._execute(
                f"INSERT OR REPLACE INTO records ({_SCOPE_COLS}, name, type, step_id, description, "
                "created_at, body, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*scope.values(), record.name, record.type, record.step_id, record.description,
                 to_iso(created), record.body, meta),
            )
            if index:
                text = f"{record.description}\n{record.body}" if record.description else record.body
                self.index_document(
                    scope, record.type, record.name, text,
                    {"record": record.name, "step_id": record.step_id},
                )
        return Record(scope, record.name, record.type, record.body, record.description,
                      record.step_id, created, dict(record.meta))

    def _record(self, r: sqlite3.Row) -> Record:
        return Record(
            _scope_of(r), r["name"], r["type"], r["body"], r["description"], r["step_id"],
            from_iso(r["created_at"]), json.loads(r["meta"]),
        )

    def get_records(self, scope: Scope, names: Sequence[str]) -> dict[str, Record]:
        if not names:
            return {}
        where, params = _scope_where(scope)
        marks = ",".join("?" * len(names))
        rows = self._execute(
            f"SELECT * FROM records WHERE {where} AND name IN ({marks}) ORDER BY id",
            [*params, *names],
        )
        return {r["name"]: self._record(r) for r in rows}

    def list_records(
        self, scope: Scope, *, type: str | None = None, limit: int | None = None
    ) -> list[Record]:
        where, params = _scope_where(scope)
        sql = f"SELECT * FROM records WHERE {where}"
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._record(r) for r in self._execute(sql, params)]

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
        data = _dumps(value)
        with self.transaction():
            self._execute(
                f"INSERT OR REPLACE INTO kv ({_SCOPE_COLS}, namespace, key, value, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
        where, params = _scope_where(scope)
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
        return [(_scope_of(r), r["key"], json.loads(r["value"])) for r in rows]

    # -- documents & search ----------------------------------------------------------------
    def index_document(
        self, scope: Scope, kind: str, ref: str, text: str, meta: dict[str, Any] | None = None
    ) -> int:
        scope.require_concrete()
        require_text("document.kind", kind, allow_empty=False)
        require_text("document.ref", ref, allow_empty=False)
        require_text("document.text", text)
        meta_json = _dumps(meta or {})
        with self.transaction():
            row = self._execute(
                "SELECT id, text FROM docs WHERE tenant = ? AND user = ? AND agent = ? "
                "AND session = ? AND kind = ? AND ref = ?",
                (*scope.values(), kind, ref),
            ).fetchone()
            if row is not None:
                if row["text"] != text:
                    self._execute("DELETE FROM embeddings WHERE doc_id = ?", (row["id"],))
                    self._bump_generation()
                self._execute(
                    "UPDATE docs SET text = ?, search_text = ?, meta = ? WHERE id = ?",
                    (text, segment_for_index(text), meta_json, row["id"]),
                )
                return int(row["id"])
            cur = self._execute(
                f"INSERT INTO docs ({_SCOPE_COLS}, kind, ref, text, search_text, meta, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*scope.values(), kind, ref, text, segment_for_index(text), meta_json,
                 to_iso(utcnow())),
            )
            return int(cur.lastrowid)

    def delete_documents(self, scope: Scope, kind: str, refs: Sequence[str]) -> int:
        scope.require_concrete()
        if not refs:
            return 0
        marks = ",".join("?" * len(refs))
        with self.transaction():
            cur = self._execute(
                "DELETE FROM docs WHERE tenant = ? AND user = ? AND agent = ? AND session = ? "
                f"AND kind = ? AND ref IN ({marks})",
                (*scope.values(), kind, *refs),
            )
            self._bump_generation()
            return cur.rowcount

    def _doc(self, r: sqlite3.Row) -> Document:
        return Document(
            int(r["id"]), _scope_of(r), r["kind"], r["ref"], r["text"], json.loads(r["meta"]),
            from_iso(r["created_at"]),
        )

    def get_documents(self, ids: Sequence[int]) -> dict[int, Document]:
        out: dict[int, Document] = {}
        ids = list(ids)
        for i in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for r in self._execute(f"SELECT * FROM docs WHERE id IN ({marks})", chunk):
                out[int(r["id"])] = self._doc(r)
        return out

    def get_documents_by_ref(
        self, scope: Scope, kind: str, refs: Sequence[str]
    ) -> dict[str, Document]:
        scope.require_concrete()
        out: dict[str, Document] = {}
        refs = list(refs)
        for i in range(0, len(refs), 500):  # stay under SQLite's bound-parameter limit
            chunk = refs[i : i + 500]
            rows = self._execute(
                "SELECT * FROM docs WHERE tenant = ? AND user = ? AND agent = ? AND session = ? "
                f"AND kind = ? AND ref IN ({','.join('?' * len(chunk))})",
                (*scope.values(), kind, *chunk),
            )
            for r in rows:
                out[r["ref"]] = self._doc(r)
        return out

    def search_generation(self) -> object:
        # AUTOINCREMENT ids never repeat, so (max id, embedding generation) moves on every
        # insert, text change, delete (which bumps the generation) and embedding write/drop.
        row = self._execute(
            "SELECT (SELECT max(id) FROM docs), "
            "(SELECT value FROM meta WHERE key = 'embedding_generation')"
        ).fetchone()
        return (row[0] or 0, int(row[1]))

    def iter_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> Iterator[Document]:
        where, params = _scope_where(scope)
        sql = f"SELECT * FROM docs WHERE {where}"
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        last = 0
        while True:
            rows = self._execute(sql + " AND id > ? ORDER BY id LIMIT 1000", [*params, last]).fetchall()
            if not rows:
                return
            for r in rows:
                yield self._doc(r)
            last = rows[-1]["id"]

    def keyword_search(
        self,
        scope: Scope,
        query: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
        max_df_ratio: float | None = None,
    ) -> list[SearchHit]:
        require_text("query", query)
        match = build_match_query(query)
        if max_df_ratio is not None and " OR " in match:
            match = self._drop_common_terms(match, max_df_ratio)
        hits = self._fast_bm25(scope, match, k, kinds)
        if hits is None:
            hits = self._fts(scope, "docs_fts", match, k, kinds, "bm25")
        if not hits:  # identifiers/substrings the word index cannot split the same way
            hits = self._fts(scope, "docs_tri", build_trigram_query(query), k, kinds, "trigram")
        if not hits and 0 < len(query.strip()) < 3:  # e.g. one ideograph: below bigram/trigram
            hits = self._substring(scope, query.strip(), k, kinds)
        return hits

    # -- in-process BM25 (mindpalace.store.bm25) ------------------------------------------------
    def _fast_bm25(
        self, scope: Scope, match: str, k: int, kinds: Sequence[str] | None
    ) -> list[SearchHit] | None:
        """The word-index search scored in numpy; None = use the SQL path (inside a write
        transaction, a term that is not exactly one index token, or a rebuild not yet due)."""
        if not match or k <= 0:
            return []
        conn = self._conn()
        if conn.in_transaction:  # uncommitted rows could be rolled back under the same generation
            return None
        try:
            self._retry(lambda: conn.execute("BEGIN"))  # one snapshot for generation + data
            try:
                return self._fast_bm25_in_snapshot(conn, scope, match, k, kinds)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return None
            raise StoreError(f"{self.path}: {exc}") from exc

    def _fast_bm25_in_snapshot(
        self, conn: sqlite3.Connection, scope: Scope, match: str, k: int,
        kinds: Sequence[str] | None,
    ) -> list[SearchHit] | None:
        phrases = self._phrase_tokens(conn, [t[1:-1].replace('""', '"') for t in match.split(" OR ")])
        if phrases is None:
            return None
        generation = self.search_generation()
        index = self._bm25
        if index is None or index.generation != generation:
            built_at, took = self._bm25_build
            # Amortise: a store written between every query serves from SQL instead of
            # rebuilding each time (rebuilds take at most ~1/4 of the wall time).
            if index is not None and time.monotonic() - built_at < 4 * took:
                return None
            t0 = time.monotonic()
            doc_ids = np.fromiter(
                (r[0] for r in conn.execute("SELECT id FROM docs ORDER BY id")), dtype=np.int64
            )
            try:
                vocab = [(r[0], int(r[1])) for r in conn.execute("SELECT term, cnt FROM docs_fts_r")]
                occurrences = np.fromiter(
                    (r[0] for r in conn.execute("SELECT doc FROM docs_fts_v")), dtype=np.int64
                )
                index = PostingIndex.build(generation, doc_ids, vocab, occurrences)
            except LookupError:
                return None
            with self._bm25_lock:
                self._bm25 = index
                self._bm25_build = (time.monotonic(), time.monotonic() - t0)
        mask_key = (scope.values(), tuple(sorted(kinds)) if kinds else None)
        mask = index.masks.get(mask_key)
        if mask is None:
            where, params = _scope_where(scope)
            sql = f"SELECT id FROM docs WHERE {where or '1'}"
            if kinds:
                sql += f" AND kind IN ({','.join('?' * len(kinds))})"
                params += list(kinds)
            ids = np.fromiter((r[0] for r in conn.execute(sql, params)), dtype=np.int64)
            mask = np.zeros(index.n_docs, dtype=bool)
            mask[np.searchsorted(index.doc_ids, ids)] = True
            if len(index.masks) > 64:  # bounded: scopes come and go
                index.masks.clear()
            index.masks[mask_key] = mask
        top = index.top(phrases, mask, k)
        docs = self.get_documents([i for i, _ in top])
        return [SearchHit(docs[i], score, rank, "bm25") for rank, (i, score) in enumerate(top, 1)]

    def _phrase_tokens(self, conn: sqlite3.Connection, terms: list[str]) -> list[str] | None:
        """The index token of each query term, tokenized by the word index's own tokenizer
        (a scratch FTS5 table in the connection's temp schema); None when a term is not
        exactly one token (a multi-token phrase needs positions: the SQL path handles it)."""
        cache = self._token_cache
        missing = [t for t in dict.fromkeys(terms) if t not in cache]
        resolved: dict[str, tuple[str, ...]] = {}
        if missing:
            if not getattr(self._local, "qtok", False):
                tok = self._fts_tokenizer.replace("'", "")
                conn.execute(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.mp_qtok USING fts5(x, tokenize='{tok}')"
                )
                conn.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mp_qtok_v "
                    "USING fts5vocab(temp, mp_qtok, 'instance')"
                )
                self._local.qtok = True
            conn.execute("DELETE FROM temp.mp_qtok")
            conn.executemany(
                "INSERT INTO temp.mp_qtok (rowid, x) VALUES (?, ?)",
                [(i, t) for i, t in enumerate(missing, 1)],
            )
            found: dict[int, list[tuple[int, str]]] = {}
            for term, doc, offset in conn.execute("SELECT term, doc, offset FROM temp.mp_qtok_v"):
                found.setdefault(int(doc), []).append((int(offset), term))
            conn.execute("DELETE FROM temp.mp_qtok")
            if len(cache) > 10_000:
                cache.clear()
            for i, t in enumerate(missing, 1):
                resolved[t] = cache[t] = tuple(term for _, term in sorted(found.get(i, [])))
        out = []
        for t in terms:
            tokens = resolved[t] if t in resolved else cache.get(t, ())
            if len(tokens) != 1:
                return None
            out.append(tokens[0])
        return out

    def _drop_common_terms(self, match: str, max_df_ratio: float) -> str:
        """Keep the OR-terms of `match` in at most max_df_ratio of all documents (the rarest
        term always stays). Document frequencies come from the index itself (one count per
        term, tokenized exactly as indexed); max(id) stands in for the document count."""
        terms = match.split(" OR ")
        total = self._execute("SELECT max(id) FROM docs").fetchone()[0] or 0
        counts = [
            (self._execute("SELECT count(*) FROM docs_fts WHERE docs_fts MATCH ?", (t,)).fetchone()[0], t)
            for t in terms
        ]
        keep = [t for n, t in counts if n <= max_df_ratio * total]
        return " OR ".join(keep) if keep else min(counts)[1]

    def _substring(
        self, scope: Scope, needle: str, k: int, kinds: Sequence[str] | None
    ) -> list[SearchHit]:
        """Scoped scan for a 1–2 character needle, most occurrences first (the last fallback)."""
        if k <= 0:
            return []
        where, params = _scope_where(scope, "d")
        sql = (
            "SELECT d.*, (length(d.text) - length(replace(d.text, ?, ''))) / length(?) AS score "
            f"FROM docs d WHERE instr(d.text, ?) > 0 AND {where}"
        )
        params = [needle, needle, needle, *params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        sql += " ORDER BY score DESC, d.id DESC LIMIT ?"
        params.append(k)
        rows = self._execute(sql, params).fetchall()
        return [SearchHit(self._doc(r), float(r["score"]), i, "substring") for i, r in enumerate(rows, 1)]

    def _fts(
        self, scope: Scope, table: str, match: str, k: int, kinds: Sequence[str] | None, label: str
    ) -> list[SearchHit]:
        if not match or k <= 0:
            return []
        where, params = _scope_where(scope, "d")
        sql = (
            f"SELECT d.*, bm25({table}) AS score FROM {table} JOIN docs d ON d.id = {table}.rowid "
            f"WHERE {table} MATCH ? AND {where}"
        )
        params = [match, *params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        sql += " ORDER BY score, d.id LIMIT ?"
        params.append(k)
        try:
            rows = self._execute(sql, params).fetchall()
        except StoreError:
            raise
        except sqlite3.OperationalError as exc:  # malformed MATCH can only come from a bug
            raise StoreError(f"full-text query {match!r} failed: {exc}") from exc
        return [
            SearchHit(self._doc(r), -float(r["score"]), i, label) for i, r in enumerate(rows, 1)
        ]

    def _bump_generation(self) -> None:
        self._execute("UPDATE meta SET value = value + 1 WHERE key = 'embedding_generation'")

    def _generation(self) -> int:
        return int(
            self._execute("SELECT value FROM meta WHERE key = 'embedding_generation'").fetchone()[0]
        )

    def put_embeddings(self, doc_ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        require_text("model", model, allow_empty=False)
        mat = np.asarray(vectors, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] != len(doc_ids):
            raise DimensionMismatchError(
                len(doc_ids), int(mat.shape[0]) if mat.ndim else 0, f"{model} (rows per id)"
            )
        if not np.isfinite(mat).all():
            raise ValidationError(f"embeddings for model {model!r} contain NaN or infinity")
        dim = int(mat.shape[1])
        with self.transaction():
            existing = self._execute(
                "SELECT dim FROM embeddings WHERE model = ? LIMIT 1", (model,)
            ).fetchone()
            if existing is not None and existing[0] != dim:
                raise DimensionMismatchError(existing[0], dim, model)
            try:
                self._conn().executemany(
                    "INSERT OR REPLACE INTO embeddings (doc_id, model, dim, vector) VALUES (?, ?, ?, ?)",
                    [(int(i), model, dim, mat[j].tobytes()) for j, i in enumerate(doc_ids)],
                )
            except sqlite3.IntegrityError as exc:  # a doc id that does not exist (foreign key)
                known = self.get_documents([int(i) for i in doc_ids])
                missing = [int(i) for i in doc_ids if int(i) not in known]
                raise NotFoundError("document", missing[:10]) from exc
            self._bump_generation()

    def vector_search(
        self,
        scope: Scope,
        vector: np.ndarray,
        model: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        index = self._vector_index(scope, model, kinds)
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(q).all():
            raise ValidationError(f"query vector for model {model!r} contains NaN or infinity")
        if index.dim and q.shape[0] != index.dim:
            raise DimensionMismatchError(index.dim, int(q.shape[0]), model)
        ids, sims = index.search(q, k)
        docs = self.get_documents(ids.tolist())
        return [
            SearchHit(docs[int(i)], float(s), rank, "vector")
            for rank, (i, s) in enumerate(zip(ids, sims, strict=True), 1)
            if int(i) in docs
        ]

    def _vector_index(self, scope: Scope, model: str, kinds: Sequence[str] | None) -> VectorIndex:
        key = (scope.values(), model, tuple(sorted(kinds)) if kinds else None)
        generation = self._generation()
        with self._vec_lock:
            cached = self._vec_cache.get(key)
            if cached is not None and cached[0] == generation:
                return cached[1]
        where, params = _scope_where(scope, "d")
        sql = (
            "SELECT e.doc_id, e.dim, e.vector FROM embeddings e JOIN docs d ON d.id = e.doc_id "
            f"WHERE e.model = ? AND {where}"
        )
        params = [model, *params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        rows = self._execute(sql, params).fetchall()
        if rows:
            dim = rows[0]["dim"]
            ids = np.fromiter((r["doc_id"] for r in rows), dtype=np.int64, count=len(rows))
            matrix = np.frombuffer(b"".join(r["vector"] for r in rows), dtype=np.float32)
            matrix = matrix.reshape(len(rows), dim)
        else:
            ids, matrix = np.empty(0, np.int64), np.empty((0, 0), np.float32)
        index = self._index_factory(ids, matrix)
        with self._vec_lock:
            if len(self._vec_cache) > 64:  # bounded: scopes come and go
                self._vec_cache.clear()
            self._vec_cache[key] = (generation, index)
        return index

    def documents_missing_embeddings(self, model: str, *, limit: int = 1000) -> list[Document]:
        rows = self._execute(
            "SELECT d.* FROM docs d WHERE NOT EXISTS (SELECT 1 FROM embeddings e "
            "WHERE e.doc_id = d.id AND e.model = ?) ORDER BY d.id LIMIT ?",
            (model, limit),
        )
        return [self._doc(r) for r in rows]

    def embedding_models(self) -> dict[str, tuple[int, int]]:
        rows = self._execute("SELECT model, max(dim) AS dim, count(*) AS n FROM embeddings GROUP BY model")
        return {r["model"]: (int(r["dim"]), int(r["n"])) for r in rows}

    def delete_embeddings(self, *, keep_model: str | None = None) -> int:
        with self.transaction():
            if keep_model is None:
                cur = self._execute("DELETE FROM embeddings")
            else:
                cur = self._execute("DELETE FROM embeddings WHERE model != ?", (keep_model,))
            self._bump_generation()
            return cur.rowcount


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


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN … END;) whole."""
    statements, buf = [], []
    for line in script.splitlines():
        if not line.strip():
            continue
        buf.append(line)
        joined = "\n".join(buf)
        if line.rstrip().endswith(";") and sqlite3.complete_statement(joined):
            statements.append(joined.strip())
            buf = []
    if buf and "\n".join(buf).strip():
        statements.append("\n".join(buf).strip())
    return statements

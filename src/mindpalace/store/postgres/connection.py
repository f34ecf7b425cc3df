"""Connection base of the PostgreSQL store: a psycopg connection pool, transactions (savepoints
when nested), advisory locks, the search generation, error translation and :meth:`stats`."""

from __future__ import annotations

import functools
import hashlib
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import ConnectionPool, PoolTimeout

from mindpalace.errors import MindPalaceError, StoreBusyError, StoreError, ValidationError
from mindpalace.scope import ANY, SCOPE_FIELDS, Scope
from mindpalace.settings import StoreSettings
from mindpalace.store.base import Store, StoreStats
from mindpalace.store.postgres.schema import SCHEMA_VERSION, migrate
from mindpalace.textsafe import require_text

T = TypeVar("T")
_COLUMNS = dict(zip(SCOPE_FIELDS, ("tenant", "user_id", "agent", "session_id"), strict=True))
_TABLES = ("mp_events", "mp_records", "mp_kv", "mp_docs", "mp_embeddings", "mp_models", "mp_meta",
           "mp_schema_version")


class PostgresBase(Store):
    """What every part of :class:`~mindpalace.store.postgres.PostgresStore` builds on.

    Transactions: the outermost :meth:`transaction` holds one pooled connection for the block
    and first takes a transaction-level advisory lock of the store, so explicit transactions
    run one at a time across every process — the same guarantee as SQLite's write lock,
    which the components' read-modify-write blocks rely on (a re-read ledger row, a chosen
    guard name). Single operations outside a transaction run concurrently; the multi-statement
    ones take a narrower advisory lock of what they change (a stream, a record name, a
    document) for their own short transaction.
    """

    def __init__(self, url: str, *, settings: StoreSettings | None = None,
                 schema: str | None = None) -> None:
        self.url = url
        self.settings = settings or StoreSettings()
        self.schema = schema
        self._where = _redact(url) + (f" (schema {schema})" if schema else "")
        self._local = threading.local()
        self._lock_conns: list[psycopg.Connection[Any]] = []
        self._lock_conns_guard = threading.Lock()
        self._closed = False
        with self._connect() as conn, _translated(self._where):
            if schema:
                require_text("schema", schema, allow_empty=False)
                conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    psycopg.sql.Identifier(schema)))
            self._configure_session(conn, vectors=False)
            migrate(conn, self._where)
            self._namespace = conn.execute("SELECT current_database() || '.' || current_schema()"
                                           ).fetchone()[0]  # type: ignore[index]
        self._pool = self._open_pool()
        self.schema_version = SCHEMA_VERSION

    def _open_pool(self) -> ConnectionPool[Any]:
        return ConnectionPool(
            self.url, min_size=1, max_size=self.settings.pool_max_size, open=True,
            kwargs={"autocommit": True, "prepare_threshold": None},
            configure=lambda c: self._configure_session(c, vectors=True),
            timeout=self.settings.pool_timeout_seconds, name="mindpalace",
        )

    # -- connections -----------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, prepare_threshold=None,
                                   connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self._where}: {exc}") from exc

    def _configure_session(self, conn: psycopg.Connection[Any], *, vectors: bool) -> None:
        if self.schema:
            conn.execute(psycopg.sql.SQL("SET search_path TO {}, public").format(
                psycopg.sql.Identifier(self.schema)))
        conn.execute("SET TIME ZONE 'UTC'")
        if vectors:
            from pgvector.psycopg import register_vector

            # An approximate (HNSW) scan filtered by scope keeps scanning until it has k rows.
            conn.execute("SET hnsw.iterative_scan = strict_order")
            conn.execute(f"SET hnsw.ef_search = {int(self.settings.hnsw_ef_search)}")
            register_vector(conn)

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`fn` on the thread's transaction connection, or on a pooled one (autocommit)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return fn(conn)
        with self._pool.connection() as pooled:
            return fn(pooled)

    def _all(self, sql: Any, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        return self._run(lambda c: c.execute(sql, params).fetchall())

    def _one(self, sql: Any, params: Sequence[Any] | dict[str, Any] = ()) -> tuple[Any, ...] | None:
        return self._run(lambda c: c.execute(sql, params).fetchone())

    def _count(self, sql: Any, params: Sequence[Any] = ()) -> int:
        return self._run(lambda c: c.execute(sql, params).rowcount)

    # -- transactions ----------------------------------------------------------------------
    def in_transaction(self) -> bool:
        return getattr(self._local, "conn", None) is not None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._tx(serialize=True):
            yield

    @contextmanager
    def _tx(self, *, serialize: bool) -> Iterator[psycopg.Connection[Any]]:
        """A transaction on one connection; nested → a savepoint of the outer one."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with _translated(self._where), conn.transaction():
                yield conn
            return
        try:
            with self._pool.connection() as pooled:
                self._local.conn = pooled
                self._local.bump = False
                try:
                    with _translated(self._where), pooled.transaction():
                        if serialize:
                            pooled.execute("SELECT pg_advisory_xact_lock(%s)",
                                           (self._key("transaction"),))
                        yield pooled
                        if self._local.bump:  # last, see _bump_generation
                            pooled.execute("UPDATE mp_meta SET value = value + 1 "
                                           "WHERE key = 'search_generation'")
                finally:
                    self._local.conn = None
                    self._local.bump = False
        except PoolTimeout as exc:
            raise StoreBusyError(f"{self._where}: no free connection within "
                                 f"{self.settings.pool_timeout_seconds:g}s") from exc

    def _blob_text(self, key: str) -> str:
        """The whole text of blob `key` (:mod:`.blobstore`).

        Raises:
            StoreError: the blob is missing or cannot be decoded (a damaged database).
        """
        from mindpalace.store.postgres.blobstore import read_text

        try:
            return self._run(lambda c: read_text(c, key))
        except (LookupError, ValueError) as exc:
            raise StoreError(f"{self._where}: stored text is damaged: {exc}") from exc

    def _xact_lock(self, conn: psycopg.Connection[Any], *parts: object) -> None:
        """A transaction-level advisory lock on what `parts` name (released at commit)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key(*parts),))

    def _key(self, *parts: object) -> int:
        """A signed 64-bit advisory lock key for `parts` within this database and schema."""
        text = "\x1f".join([self._namespace, *map(str, parts)])
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big",
                              signed=True)

    # -- locks -----------------------------------------------------------------------------
    @contextmanager
    def lock(self, scope: Scope, name: str, *, timeout_seconds: float) -> Iterator[None]:
        """A session-level advisory lock on a connection of this thread kept for locks only:
        PostgreSQL counts a session's holds of one lock, which gives re-entrancy per thread;
        a holder that dies loses its connection and with it the lock."""
        scope.require_concrete()
        require_text("lock name", name, allow_empty=False)
        key = self._key("lock", *scope.values(), name)
        conn = self._lock_conn()
        try:
            if timeout_seconds <= 0:
                got = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                if not (got and got[0]):
                    raise pgerrors.LockNotAvailable("lock held")
            else:
                conn.execute(f"SET lock_timeout = {max(1, int(timeout_seconds * 1000))}")
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except pgerrors.LockNotAvailable as exc:
            raise StoreBusyError(
                f"lock {name!r} of {scope} not acquired within {timeout_seconds:g}s; another "
                "holder has it (e.g. a consolidation of this session in another process) — "
                "retry later") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self._where}: cannot take the lock {name!r}: {exc}") from exc
        try:
            yield
        finally:
            with suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def _lock_conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "lock_conn", None)
        if conn is None or conn.closed:
            conn = self._connect()
            self._local.lock_conn = conn
            with self._lock_conns_guard:
                self._lock_conns.append(conn)
        return conn

    # -- search generation -----------------------------------------------------------------
    def _bump_generation(self, conn: psycopg.Connection[Any]) -> None:
        """Move the search generation when the enclosing transaction commits. The counter row
        is updated as the transaction's last statement: its row lock is then taken after
        every advisory lock of the transaction and held only until the commit, so it can
        never be part of a deadlock (taken midway, it was: one writer held the row and
        waited for a document lock another writer held while waiting for the row)."""
        self._local.bump = True

    def search_generation(self) -> object:
        row = self._one("SELECT value FROM mp_meta WHERE key = 'search_generation'")
        return int(row[0]) if row else 0

    def last_document_id(self) -> int:
        row = self._one("SELECT coalesce(max(id), 0) FROM mp_docs")
        return int(row[0]) if row else 0

    # -- lifecycle & admin -----------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with suppress(Exception):
            self._pool.close()
        with self._lock_conns_guard:
            for conn in self._lock_conns:
                with suppress(psycopg.Error):
                    conn.close()
            self._lock_conns.clear()

    def stats(self) -> StoreStats:
        def one(sql: str) -> int:
            row = self._one(sql)
            return int(row[0] or 0) if row else 0

        models = {m: int(n) for m, n in self._all(
            "SELECT model, count(DISTINCT doc_id) FROM mp_embeddings GROUP BY model")}
        size = one("SELECT " + " + ".join(
            f"pg_total_relation_size('{t}')" for t in _TABLES))
        return StoreStats(
            schema_version=one("SELECT max(version) FROM mp_schema_version"),
            sessions=one(
                "SELECT count(*) FROM (SELECT tenant, user_id, agent, session_id FROM mp_events "
                "WHERE session_id != '' UNION SELECT tenant, user_id, agent, session_id FROM mp_kv "
                "WHERE session_id != '' UNION SELECT tenant, user_id, agent, session_id "
                "FROM mp_records WHERE session_id != '') s"),
            events=one("SELECT count(*) FROM mp_events"),
            streams=one("SELECT count(*) FROM (SELECT DISTINCT tenant, user_id, agent, "
                        "session_id, stream FROM mp_events) s"),
            records=one("SELECT count(*) FROM mp_records"),
            kv_entries=one("SELECT count(*) FROM mp_kv"),
            documents=one("SELECT count(*) FROM mp_docs"),
            embeddings=models,
            size_bytes=size,
        )


# -- scope filters (I/O-free) ------------------------------------------------------------------
def scope_where(scope: Scope, alias: str = "") -> tuple[str, list[Any]]:
    """``col = %s AND …`` for `scope`'s concrete fields (ANY fields left out) and the params."""
    prefix = f"{alias}." if alias else ""
    clauses: list[str] = []
    params: list[Any] = []
    for name, value in zip(SCOPE_FIELDS, scope.values(), strict=True):
        if value is ANY:
            continue
        clauses.append(f"{prefix}{_COLUMNS[name]} = %s")
        params.append(value)
    return " AND ".join(clauses), params


def exact_scope(scope: Scope, alias: str = "") -> tuple[str, list[Any]]:
    """The filter of a concrete `scope` (writes, per-scope reads).

    Raises:
        ValidationError: a field is ANY.
    """
    return scope_where(scope.require_concrete(), alias)


def scope_of(row: Sequence[Any], start: int = 0) -> Scope:
    return stored_scope(row[start], row[start + 1], row[start + 2], row[start + 3])


@functools.lru_cache(maxsize=4096)
def stored_scope(tenant: str, user: str, agent: str, session: str) -> Scope:
    """The Scope of a stored row, one instance per scope: the fields were validated when the
    row was written and a Scope is immutable, so a recall materialising hundreds of rows does
    not re-validate every field of every row."""
    return Scope(tenant, user, agent, session)


# -- errors ------------------------------------------------------------------------------------
_BUSY = (pgerrors.DeadlockDetected, pgerrors.SerializationFailure, pgerrors.LockNotAvailable,
         pgerrors.QueryCanceled)


def store_error(where: str, exc: BaseException) -> MindPalaceError:
    """The mindpalace error for a psycopg / pool error raised on the store at `where`."""
    if isinstance(exc, (*_BUSY, PoolTimeout)):
        return StoreBusyError(f"{where}: busy ({type(exc).__name__}: {exc}); retry later")
    if isinstance(exc, pgerrors.DataError | pgerrors.UntranslatableCharacter):
        return ValidationError(f"{where}: the value cannot be stored: {exc}")
    return StoreError(f"{where}: {type(exc).__name__}: {exc}")


@contextmanager
def _translated(where: str) -> Iterator[None]:
    try:
        yield
    except (psycopg.Error, PoolTimeout) as exc:
        raise store_error(where, exc) from exc


C = TypeVar("C", bound=type)


def translate_pg_errors(protocol: type) -> Callable[[C], C]:
    """Class decorator: every public method of `protocol` raises mindpalace errors, never
    psycopg ones (generators and context managers translate inside)."""

    def decorate(cls: C) -> C:
        names = {n for n in dir(protocol) if not n.startswith("_")
                 and n not in ("transaction", "lock")}
        for name in sorted(names):
            attr = inspect.getattr_static(cls, name, None)
            if callable(attr) and not isinstance(attr, staticmethod | classmethod | type):
                setattr(cls, name, _guard(attr))
        return cls

    return decorate


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            with _translated(self._where):
                yield from fn(self, *args, **kwargs)

        return gen

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _translated(self._where):
            return fn(self, *args, **kwargs)

    return method


def _redact(url: str) -> str:
    """The URL without its password (it is shown in error messages)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "postgresql://…"
    host, port, db = info.get("host", ""), info.get("port", ""), info.get("dbname", "")
    return f"postgresql://{info.get('user', '')}@{host}{':' + str(port) if port else ''}/{db}"

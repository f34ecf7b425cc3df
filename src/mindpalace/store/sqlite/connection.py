"""Connection base of the SQLite store: per-thread connections, busy retries, transactions."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from mindpalace.errors import StoreBusyError, StoreError
from mindpalace.settings import StoreSettings
from mindpalace.store.base import Store, StoreStats
from mindpalace.store.sqlite.schema import SCHEMA_VERSION, migrate, refuse_newer_schema


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "database is locked/busy" (worth retrying)."""
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


class SQLiteBase(Store):
    """What every part of :class:`~mindpalace.store.sqlite.SQLiteStore` builds on: one
    connection per thread to a migrated WAL database, bounded busy retries, transactions
    (savepoints when nested), the search-generation counter and :meth:`stats`.

    Raises:
        SchemaVersionError: the file's schema is newer than this code (checked read-only first,
            so nothing is written).
        StoreError: the file is not a SQLite database.
    """

    def __init__(self, path: str | Path, *, settings: StoreSettings | None = None) -> None:
        self.path = Path(path)
        self.settings = settings or StoreSettings()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        refuse_newer_schema(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._migrate()
        self.schema_version = SCHEMA_VERSION

    # -- connections & transactions --------------------------------------------------------
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
            if not is_busy(exc):
                raise StoreError(f"{self.path}: {exc}") from exc
            if self.settings.busy_retries == 0:
                raise StoreBusyError(f"{self.path}: database is locked (busy_retries = 0)") from exc
        try:
            for attempt in Retrying(
                retry=retry_if_exception(is_busy),
                stop=stop_after_attempt(self.settings.busy_retries),
                wait=wait_exponential(multiplier=0.01, max=0.5),
                reraise=True,
            ):
                with attempt:
                    return fn()
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
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
            migrate(conn, self.path, self.settings.fts_tokenizer)

    def close(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                with suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()
        self._local = threading.local()

    # -- search generation -----------------------------------------------------------------
    def _bump_generation(self) -> None:
        self._execute("UPDATE meta SET value = value + 1 WHERE key = 'embedding_generation'")

    def _generation(self) -> int:
        return int(
            self._execute("SELECT value FROM meta WHERE key = 'embedding_generation'").fetchone()[0]
        )

    # -- admin -----------------------------------------------------------------------------
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
            "SELECT count(*) FROM "
            "(SELECT tenant, user, agent, session FROM events WHERE session != ''"
            " UNION SELECT tenant, user, agent, session FROM kv WHERE session != ''"
            " UNION SELECT tenant, user, agent, session FROM records WHERE session != '')"
        )
        return StoreStats(
            schema_version=q("SELECT max(version) FROM schema_version"),
            sessions=sessions,
            events=q("SELECT count(*) FROM events"),
            streams=q(
                "SELECT count(*) FROM "
                "(SELECT DISTINCT tenant, user, agent, session, stream FROM events)"
            ),
            records=q("SELECT count(*) FROM records"),
            kv_entries=q("SELECT count(*) FROM kv"),
            documents=q("SELECT count(*) FROM docs"),
            embeddings=models,
            size_bytes=size,
        )

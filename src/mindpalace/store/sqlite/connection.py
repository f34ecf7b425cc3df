"""Connection base of the SQLite store: per-thread connections, busy retries, transactions,
and the open-time checks (a new file is created whole; an empty or truncated one is refused)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from filelock import FileLock
from filelock import Timeout as LockTimeout
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from mindpalace.errors import DatabaseCorruptError, StoreBusyError, StoreError, WorkspaceError
from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store.base import Document, Store, StoreStats
from mindpalace.store.blobs import view_text
from mindpalace.store.sqlite.blobstore import ChunkCache, read_slice
from mindpalace.store.sqlite.errmap import is_busy, store_error
from mindpalace.store.sqlite.group import GroupCommit
from mindpalace.store.sqlite.rows import DOC_COLS, doc_of, stored_scope
from mindpalace.store.sqlite.schema import SCHEMA_VERSION, migrate, refuse_newer_schema
from mindpalace.textsafe import require_text
from mindpalace.timeutil import from_iso

__all__ = ["SQLiteBase", "check_file", "create_database", "is_busy"]

_CURRENT_VERSION = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'schema_version') "
    "THEN (SELECT max(version) FROM schema_version) END"
)
CREATING_SUFFIX = ".creating"  # a database being created under a temporary name
_HEADER = b"SQLite format 3\x00"


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
        self._write: sqlite3.Connection | None = None
        self._group = GroupCommit(self._retry, self._wait_seconds())
        self.removals = RemovalLog()
        self._doc_cache = DocumentCache()
        self._chunk_cache = ChunkCache()
        remove_stale_creations(self.path)
        if not self.path.exists():
            create_database(self.path, self.settings.fts_tokenizer)
        check_file(self.path)
        refuse_newer_schema(self.path)
        self._migrate()
        self.schema_version = SCHEMA_VERSION

    # -- connections & transactions --------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        # Inside a top-level transaction the thread works on the shared write connection of
        # the group commit (see transaction); everywhere else on its own connection.
        write = getattr(self._local, "write", None)
        if write is not None:
            return write
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            self._local.depth = 0
        return conn

    def _connect(self) -> sqlite3.Connection:
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
        with self._conns_lock:
            self._conns.append(conn)
        return conn

    def _retry(self, fn: Any) -> Any:
        """Run `fn`, retrying SQLITE_BUSY with bounded exponential backoff."""
        try:  # fast path: building a tenacity loop costs more than an uncontended commit
            return fn()
        except sqlite3.Error as exc:
            if not is_busy(exc):
                raise store_error(self.path, exc) from exc
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
        except sqlite3.Error as exc:
            raise store_error(self.path, exc, retries=self.settings.busy_retries) from exc
        return None  # pragma: no cover - Retrying always returns or raises

    def in_transaction(self) -> bool:
        return bool(getattr(self._local, "depth", 0))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._local, "depth", 0):
            with self._savepoint():
                yield
            return
        with self._group.member(self._write_conn()) as conn:
            self._local.write, self._local.depth = conn, 1
            try:
                yield
            finally:
                self._local.write, self._local.depth = None, 0
                self._local.blob_texts = None  # drop this transaction's big texts

    def _remember_blob(self, key: str, text: str) -> None:
        """A blob written (or found) by this thread's current transaction: a long document
        text indexed later in it that holds `text` views the blob instead of storing it again
        (a record body in its own search document, a tool message's content in the message's)."""
        held = getattr(self._local, "blob_texts", None)
        if held is None:
            held = self._local.blob_texts = {}
        held[key] = text

    def _blob_candidates(self) -> list[tuple[str, str]]:
        """(key, text) of the blobs this thread's current transaction wrote or found."""
        return list((getattr(self._local, "blob_texts", None) or {}).items())

    def _blob_text(self, key: str, start: int = 0, length: int = -1) -> str:
        """Characters [start, start + length) of blob `key` (-1: to its end).

        Raises:
            StoreError: the blob or one of its chunks is missing or cannot be decoded.
        """
        try:
            return self._retry(
                lambda: read_slice(self._conn(), key, start, length, self._chunk_cache)
            )
        except (LookupError, ValueError) as exc:
            raise StoreError(f"{self.path}: stored text is damaged: {exc}") from exc

    def _doc(self, row: sqlite3.Row) -> Document:
        """A ``docs`` row (:data:`DOC_COLS`) as a Document, its text read through its view of
        a blob when it has one."""
        if row["blob"] is None:
            return doc_of(row)
        piece = self._blob_text(row["blob"], int(row["blob_off"]), int(row["blob_len"]))
        return doc_of(row, view_text(row["text"], int(row["blob_at"]), piece))

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        """A nested block: a savepoint, so an inner failure rolls back only the inner block."""
        conn = self._conn()
        depth = self._local.depth
        name = f"sp{depth}"
        self._retry(lambda: conn.execute(f"SAVEPOINT {name}"))
        self._local.depth = depth + 1
        try:
            yield
        except BaseException:
            with suppress(sqlite3.Error):  # the outer transaction rolls back in any case
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
            raise
        else:
            self._retry(lambda: conn.execute(f"RELEASE {name}"))
        finally:
            self._local.depth = depth

    def _write_conn(self) -> sqlite3.Connection:
        """The one connection every top-level transaction of this store object runs on."""
        with self._conns_lock:
            conn = self._write
        if conn is None:
            fresh = self._connect()
            with self._conns_lock:
                if self._write is None:
                    self._write = fresh
                conn = self._write
        return conn

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._retry(lambda: self._conn().execute(sql, params))

    def _wait_seconds(self) -> float:
        """How long a transaction waits for the write connection before StoreBusyError: as
        long as SQLite's own busy handling would have let it wait for the write lock."""
        return self.settings.busy_timeout_ms / 1000 * max(1, self.settings.busy_retries)

    def _migrate(self) -> None:
        conn = self._conn()
        # Up to date (the common open): read only, so a read-only workspace still opens for reading.
        if self._retry(lambda: conn.execute(_CURRENT_VERSION).fetchone()[0]) == SCHEMA_VERSION:
            return
        with self.transaction():
            migrate(self._conn(), self.path, self.settings.fts_tokenizer)

    def close(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                with suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()
            self._write = None
        self._local = threading.local()

    def get_documents(self, ids: Sequence[int]) -> dict[int, Document]:
        """Documents by id (ids not found are absent); the search parts use it for hits.

        Served from :class:`DocumentCache` when the documents were read before and none was
        changed or deleted since (by any process): a recall materialises the same few hundred
        candidates again and again on a long conversation, and documents added meanwhile (a
        write before every query) leave the cached ones valid. Inside a write transaction
        the rows are read and nothing is cached (they may be rolled back); a read snapshot
        (the keyword search's) is served like any read."""
        ids = list(ids)
        if not ids:
            return {}
        if self.in_transaction():  # this thread's writes, uncommitted: never cached
            return self._read_documents(ids)
        row = self._execute(
            "SELECT (SELECT value FROM meta WHERE key = 'index_generation'), "
            "(SELECT value FROM meta WHERE key = 'doc_generation')"
        ).fetchone()
        state = (row[0], row[1])  # read before the rows: a later change moves it past them
        out = self._doc_cache.get(state, ids)
        if len(out) < len(ids):
            fetched = self._read_documents([i for i in ids if i not in out])
            self._doc_cache.put(state, fetched)
            out.update(fetched)
        return out

    def _bump_doc_generation(self) -> None:
        """A document's metadata changed in place (inside the caller's write transaction):
        document caches must not serve the old one. A random value (like
        ``index_generation``), so a rolled back one never comes back; the row is created on
        first use. Text changes and deletions move ``index_generation`` instead."""
        self._execute(
            "INSERT INTO meta (key, value) VALUES ('doc_generation', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (secrets.randbits(62) + 1,),
        )

    def _read_documents(self, ids: Sequence[int]) -> dict[int, Document]:
        """Documents by id, read as plain tuples (a recall materialises ~170 candidates: the
        named-column rows cost a quarter of that) in :data:`DOC_COLS` order."""
        out: dict[int, Document] = {}
        for i in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = list(ids[i : i + 500])
            sql = f"SELECT {DOC_COLS} FROM docs WHERE id IN ({','.join('?' * len(chunk))})"
            for r in self._retry(lambda sql=sql, chunk=chunk: self._tuples(sql, chunk)):
                text = r[7]
                if r[10] is not None:  # a part viewing a blob: its text through the view
                    text = view_text(text, int(r[11]), self._blob_text(r[10], int(r[12]), int(r[13])))
                out[r[0]] = Document(
                    r[0], stored_scope(r[1], r[2], r[3], r[4]), r[5], r[6], text,
                    json.loads(r[8]), from_iso(r[9]),
                )
        return out

    def _tuples(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """All rows of `sql` as plain tuples (the connection's rows are named ones)."""
        cursor = self._conn().cursor()
        cursor.row_factory = None
        return cursor.execute(sql, params).fetchall()

    # -- locks -----------------------------------------------------------------------------
    @contextmanager
    def lock(self, scope: Scope, name: str, *, timeout_seconds: float) -> Iterator[None]:
        """A file lock per (scope, name) in ``.locks/`` beside the database file (created on
        first use; nothing is written until a lock is taken). The operating system releases
        it when the holder dies."""
        lock = _file_lock(self.path.parent / LOCKS_DIRNAME, scope, name)
        try:
            lock.acquire(timeout=max(timeout_seconds, 0.0))
        except LockTimeout as exc:
            raise StoreBusyError(
                f"lock {name!r} of {scope} not acquired within {timeout_seconds:g}s; another "
                "holder has it (e.g. a consolidation of this session in another process) — "
                "retry later") from exc
        except OSError as exc:
            raise StoreError(f"cannot take the lock {name!r} of {scope}: {exc}") from exc
        try:
            yield
        finally:
            lock.release()

    # -- search generation -----------------------------------------------------------------
    def _bump_generation(self) -> None:
        self._execute("UPDATE meta SET value = value + 1 WHERE key = 'embedding_generation'")

    def _generation(self) -> int:
        return int(
            self._execute("SELECT value FROM meta WHERE key = 'embedding_generation'").fetchone()[0]
        )

    def _bump_index_generation(self, removed_docs: Sequence[int] | None = None) -> None:
        """Move ``index_generation`` to a fresh random value (inside the caller's write
        transaction): the in-process indexes can no longer just append. `removed_docs`: the
        change only deleted these documents (and their vectors), so this process's indexes
        drop them instead of rebuilding (see :class:`RemovalLog`); None = rebuild."""
        old = self._index_generation()
        new = secrets.randbits(62) + 1  # random, so an uncommitted value never comes back
        self._execute("UPDATE meta SET value = ? WHERE key = 'index_generation'", (new,))
        if removed_docs is not None:
            self.removals.record(old, new, removed_docs)

    def _index_generation(self) -> int:
        return int(
            self._execute("SELECT value FROM meta WHERE key = 'index_generation'").fetchone()[0]
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


LOCKS_DIRNAME = ".locks"


class DocumentCache:
    """Documents read by id, kept while the database's (index generation, document generation)
    stays: those move whenever a document's text or metadata changes or a document is deleted,
    by any process; adding documents or vectors moves neither (ids are never reused).

    Bounded: at most `max_entries` documents (about 1 KB each, ~2.5 KB of resident memory with
    what recall derives from them), cleared when full.
    """

    def __init__(self, max_entries: int = 5_000) -> None:
        self.max_entries = max_entries
        self._state: object = None
        self._docs: dict[int, Document] = {}
        self._lock = threading.Lock()

    def get(self, state: object, ids: Sequence[int]) -> dict[int, Document]:
        """{id: document} of the `ids` held for `state` (a new state empties the cache)."""
        with self._lock:
            if state != self._state:
                self._docs, self._state = {}, state
            docs = self._docs
            return {i: docs[i] for i in ids if i in docs}

    def put(self, state: object, docs: dict[int, Document]) -> None:
        """Remember `docs`, read after `state` was (unless the state moved on meanwhile)."""
        with self._lock:
            if state != self._state:
                return
            if len(self._docs) + len(docs) > self.max_entries:
                self._docs = {}
            self._docs.update(docs)


class RemovalLog:
    """Deletions this process committed, by ``index_generation`` step (old → new value).

    The in-process indexes remember the generation they were built at; when the database has
    moved on only through steps recorded here, the documents of those steps are dropped from
    the index instead of rebuilding it. A step of another process (or one rolled back: its
    random value is never seen) is not here, so the index is rebuilt: always correct, fast
    for this process's own deletions (a superseded fact).
    """

    _MAX = 4096  # steps kept; older ones only mean a rebuild

    def __init__(self) -> None:
        self._steps: dict[int, tuple[int, frozenset[int]]] = {}
        self._lock = threading.Lock()

    def record(self, old: int, new: int, doc_ids: Sequence[int]) -> None:
        with self._lock:
            if len(self._steps) >= self._MAX:
                self._steps.clear()
            self._steps[new] = (old, frozenset(int(i) for i in doc_ids))

    def origin(self, generation: int) -> int:
        """The generation before the run of this process's deletions that led to
        `generation` (`generation` itself when the last step was not one)."""
        with self._lock:
            for _ in range(len(self._steps)):
                step = self._steps.get(generation)
                if step is None:
                    break
                generation = step[0]
        return generation

    def removed_between(self, old: int, new: int) -> frozenset[int] | None:
        """Documents deleted from generation `old` to `new`; None when a step is unknown."""
        removed: set[int] = set()
        with self._lock:
            current = new
            for _ in range(len(self._steps) + 1):
                if current == old:
                    return frozenset(removed)
                step = self._steps.get(current)
                if step is None:
                    return None
                current = step[0]
                removed |= step[1]
        return None


def _file_lock(folder: Path, scope: Scope, name: str) -> FileLock:
    """The same lock object for the same (scope, name) in a process (re-entrant per thread)."""
    scope.require_concrete()
    require_text("lock name", name, allow_empty=False)
    digest = hashlib.sha1("\x1f".join([*map(str, scope.values()), name]).encode()).hexdigest()[:20]
    safe = "".join(c if c.isalnum() else "-" for c in name)[:40]
    return FileLock(str(folder / f"{safe}-{digest}.lock"), is_singleton=True)


# -- open-time checks and creation ---------------------------------------------------------------
def check_file(path: Path) -> None:
    """Refuse a database file that is empty or shorter than its own header says — never start a
    new empty memory over it, never let SQLite "repair" it silently.

    The header check runs only when no write-ahead log is pending (a ``-wal`` file with data may
    legitimately hold pages the main file does not have yet).

    Raises:
        DatabaseCorruptError: 0 bytes, a damaged header, or a truncated file.
    """
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return
    size = path.stat().st_size
    if size == 0:
        raise DatabaseCorruptError(
            str(path), "the file is empty (0 bytes): it was truncated, or replaced by an empty "
            "file; if this workspace never held anything, delete memory.db to start afresh")
    with open(path, "rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(_HEADER):
        return  # not SQLite at all: refuse_newer_schema names it
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65_536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]  # the in-header page count is trustworthy
    if valid and pages and size < pages * page_size:
        raise DatabaseCorruptError(
            str(path), f"the file is truncated: {size} bytes, its header says {pages} pages of "
            f"{page_size} bytes")


def create_database(path: Path, fts_tokenizer: str) -> None:
    """Create a migrated database at `path` whole: it is built under a temporary name and
    renamed into place, so a kill during creation never leaves an empty ``memory.db`` (which
    :func:`check_file` would rightly refuse). Two processes creating it at once: one builds it,
    the other finds it made.

    Raises:
        StoreError (and subclasses): the folder cannot be written.
        WorkspaceError: a non-empty ``-wal`` of an earlier database lies beside the missing
            file (nothing is created).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(_creation_lock(path))):
            if path.exists():
                return
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise WorkspaceError(
                    f"{path} is missing but {wal.name} ({wal.stat().st_size} bytes) of an earlier "
                    "database is beside it: it holds that database's latest writes, and a new "
                    f"database would take them as its own pages; restore {path.name} from a "
                    f"backup, or move {wal.name} and {path.name}-shm aside to start afresh")
            _remove_creations(path)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}{CREATING_SUFFIX}")
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("BEGIN IMMEDIATE")
                migrate(conn, tmp, fts_tokenizer)
                conn.execute("COMMIT")
            finally:
                conn.close()  # checkpoints and removes the -wal: the file is whole
            os.replace(tmp, path)
            _fsync_dir(path.parent)
    except sqlite3.Error as exc:
        raise store_error(path, exc) from exc
    except OSError as exc:
        raise StoreError(f"cannot create the database {path}: {exc}") from exc


def remove_stale_creations(path: Path) -> None:
    """Delete temporary files of a creation that was killed (cheap when there are none)."""
    if not any(path.parent.glob(f".{path.name}.*{CREATING_SUFFIX}*")):
        return
    try:
        with FileLock(str(_creation_lock(path)), timeout=0):  # a live creator holds it: skip
            _remove_creations(path)
    except (LockTimeout, OSError):
        pass


def _remove_creations(path: Path) -> None:
    for stale in path.parent.glob(f".{path.name}.*{CREATING_SUFFIX}*"):
        with suppress(OSError):
            stale.unlink()


def _creation_lock(path: Path) -> Path:
    return path.with_name(f".{path.name}.create.lock")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

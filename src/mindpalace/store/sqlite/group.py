"""Group commit of the SQLite store: concurrent top-level transactions share one COMMIT.

At ``synchronous=FULL`` every SQLite COMMIT in WAL mode ends with one fsync of the log, and the
write lock is held across it, so N threads committing one after another pay N fsyncs. Here the
top-level transactions of one store object run, one at a time, on one shared write connection
inside one open SQLite transaction (a *batch*); each block is a savepoint of it (the first one
needs none), so a block that raises undoes only its own writes. The thread that finishes a
block while no other thread is waiting to start one commits the batch — one COMMIT, one fsync —
and every block of the batch returns only after that COMMIT returned: nothing is acknowledged
before it is durable, and a failed COMMIT raises in every block of the batch (all of it rolled
back). A single thread pays exactly what a plain BEGIN IMMEDIATE … COMMIT costs.

A write that is ONE atomic SQL statement (an event append outside a transaction) is a member
without a savepoint (:meth:`GroupCommit.atomic`): a statement that fails leaves nothing behind,
so there is nothing of its own to undo. Alone — no batch open, nobody waiting — it runs as its
own implicit transaction, committed (and at FULL fsynced) before ``execute`` returns: the same
one commit, without the BEGIN and COMMIT statements.

Readers on other connections see a batch only after its COMMIT (SQLite publishes a WAL commit
after its fsync at FULL), so nobody can act on a write that may still be lost.

Wake-ups are targeted (with the interpreter lock, every needless wake-up is CPU taken from the
agents' steps): a thread waiting for its turn on the write connection is woken alone when the
connection is handed on (one at a time, oldest first), and a block waiting for its batch's
COMMIT only when that batch is done.
"""

from __future__ import annotations

import copy
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from mindpalace.errors import StoreBusyError, StoreError

MAX_BATCH = 64  # blocks per COMMIT: bounds how long the first block of a batch waits for it
_SAVEPOINT = "group_member"
T = TypeVar("T")


@dataclass
class _Batch:
    """One open SQLite transaction shared by `size` blocks."""

    size: int = 0
    done: bool = False
    error: BaseException | None = None
    poisoned: BaseException | None = None
    """Set when a block's writes could not be undone: the batch must not commit."""


class GroupCommit:
    """Serialises the top-level transactions of one store object and commits them in batches.

    Args:
        retry: runs a statement with the store's bounded SQLITE_BUSY retries (errors translated).
        wait_seconds: how long a block waits for the write connection before StoreBusyError.
        max_batch: most blocks per COMMIT.
    """

    def __init__(self, retry: Callable[[Callable[[], Any]], Any], wait_seconds: float,
                 max_batch: int = MAX_BATCH) -> None:
        self._retry = retry
        self._wait_seconds = wait_seconds
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        """Notified (one waiter at a time) when the write connection is handed on."""
        self._committed = threading.Condition(self._lock)
        """Notified (all) when a batch is done. Batches run one after another, so only the
        blocks of the batch just done wait on it."""
        self._busy = False  # a thread runs a block (or commits) on the write connection
        self._entering = 0  # threads waiting to start a block
        self._batch: _Batch | None = None
        self._solo = True
        """The last commit had one member: writes come one at a time, so a single statement
        commits by itself. After a shared commit it opens a batch instead (deciding alone up
        front would shut out the writers that arrive while it runs)."""
        self.commits = 0
        """COMMITs issued (successful or not)."""
        self.blocks = 0
        """Blocks that joined a batch."""

    @property
    def entering(self) -> int:
        """Threads waiting to start a block now (they will join the open batch)."""
        with self._lock:
            return self._entering

    def member(self, conn: sqlite3.Connection) -> _Member:
        """``with group.member(conn):`` runs the caller's block on `conn` as a member of the open
        batch (or a new one); the ``with`` returns once the batch is committed.

        Raises:
            StoreBusyError: the write connection stayed taken for ``wait_seconds``.
            The block's own exception (its writes undone), or the COMMIT's error (every
            block of the batch rolled back).
        """
        return _Member(self, conn)

    def atomic(self, conn: sqlite3.Connection, statement: Callable[[], T]) -> T:
        """Run `statement` — ONE SQL statement on `conn`, which writes all it writes or nothing —
        as a member of the open batch (or a new one), without the savepoint a block takes; its
        result is returned once it is durable.

        Alone (no batch open, no other thread waiting to write, and the last commit had one
        member) it runs as its own implicit transaction: SQLite commits it before ``execute``
        returns — the same one commit and one fsync as BEGIN IMMEDIATE … COMMIT, minus two
        statements. Otherwise it joins the batch (or opens one, so that writers arriving while
        it runs can share its COMMIT) and returns after the batch's COMMIT, like a block.

        Raises:
            StoreBusyError: the write connection stayed taken for ``wait_seconds``.
            The statement's own error (it wrote nothing; when SQLite rolled the whole batch back
            with it — a full disk, an I/O error — every block of the batch fails too), or the
            COMMIT's error.
        """
        with self._lock:
            self._wait_turn()
            batch = self._batch
            alone = batch is None and self._entering == 0 and self._solo
            self.blocks += 1
            if alone:
                self.commits += 1
        if alone:
            try:
                return self._retry(statement)
            finally:
                self._release()
        if batch is None:
            batch = self._open_batch(conn)
        with self._lock:
            batch.size += 1
        try:
            result = self._retry(statement)
        except BaseException as exc:
            if not conn.in_transaction:  # rolled back whole: the batch's other writes are gone
                batch.poisoned = StoreError(f"a write failed and took its transaction with it: {exc}")
            self._finish(conn, batch, wait=False)
            raise
        self._finish(conn, batch, wait=True)
        return result

    # -- steps -----------------------------------------------------------------------------
    def _wait_turn(self) -> None:
        """Under ``_lock``: wait until the write connection is free, then take it."""
        if not self._busy:  # free (always, for a single writer): no clock, no counting
            self._busy = True
            return
        self._entering += 1
        try:
            deadline = time.monotonic() + self._wait_seconds
            while self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._turn.notify()  # a hand-on meant for this thread goes to the next
                    raise StoreBusyError(
                        f"the store's write connection stayed busy for {self._wait_seconds:g}s "
                        "(another thread holds a long transaction); retry later")
                self._turn.wait(remaining)
        finally:
            self._entering -= 1
        self._busy = True

    def _open_batch(self, conn: sqlite3.Connection) -> _Batch:
        """With the write connection taken and no batch open: BEGIN IMMEDIATE and open one
        (the connection is released when BEGIN fails)."""
        try:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        except BaseException:
            self._release()
            raise
        batch = _Batch()
        with self._lock:
            self._batch = batch
        return batch

    def _join(self, conn: sqlite3.Connection) -> tuple[_Batch, bool]:
        with self._lock:
            self._wait_turn()
            batch = self._batch
        if batch is None:
            batch = self._open_batch(conn)
        else:
            try:
                self._retry(lambda: conn.execute(f"SAVEPOINT {_SAVEPOINT}"))
            except BaseException:
                self._finish(conn, batch, wait=False)
                raise
        with self._lock:
            batch.size += 1
            self.blocks += 1
        return batch, batch.size == 1

    def _undo(self, conn: sqlite3.Connection, batch: _Batch, first: bool) -> None:
        """Undo a failed block: the whole transaction when it is the batch's only block (blocks
        run one at a time, so nobody else joined it yet), else its savepoint."""
        if first:
            with suppress(sqlite3.Error):  # a failed rollback leaves the error being raised
                conn.rollback()
            with self._lock:
                batch.done = True
                self._batch = None
            self._release()
            return
        try:
            conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
            conn.execute(f"RELEASE {_SAVEPOINT}")
        except sqlite3.Error as exc:  # its writes may still be in the batch: commit none of it
            batch.poisoned = StoreError(f"a transaction could not be rolled back: {exc}")

    def _finish(self, conn: sqlite3.Connection, batch: _Batch, *, wait: bool) -> None:
        """Hand the write connection to a waiting thread, or commit the batch when none waits.
        With `wait`, return only once the batch is committed (raise its error if it failed)."""
        with self._lock:
            lead = (self._entering == 0 or batch.size >= self._max_batch
                    or batch.poisoned is not None)
            if not lead:
                self._busy = False
                self._turn.notify()
                if wait:
                    while not batch.done:
                        self._committed.wait()
                    if batch.error is not None:
                        raise _copy(batch.error) from batch.error
                return
        error = batch.poisoned
        if error is None:
            try:
                self._commit(conn)
            except BaseException as exc:
                error = exc
        if error is not None and conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.rollback()
        with self._lock:
            batch.done, batch.error = True, error
            self._batch = None
            self.commits += 1
            self._solo = batch.size == 1
            self._busy = False
            if batch.size > 1:  # the other blocks of the batch wait for its COMMIT
                self._committed.notify_all()
            if self._entering:
                self._turn.notify()
        if wait and error is not None:
            raise error

    def _commit(self, conn: sqlite3.Connection) -> None:
        """COMMIT the batch (one fsync of the log at synchronous=FULL)."""
        self._retry(lambda: conn.execute("COMMIT"))

    def _release(self) -> None:
        with self._lock:
            self._busy = False
            if self._entering:
                self._turn.notify()


class _Member:
    """One block of a batch (a plain context manager: it runs on every durable step)."""

    __slots__ = ("batch", "conn", "first", "group")

    def __init__(self, group: GroupCommit, conn: sqlite3.Connection) -> None:
        self.group, self.conn = group, conn

    def __enter__(self) -> sqlite3.Connection:
        self.batch, self.first = self.group._join(self.conn)
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        group, conn, batch, first = self.group, self.conn, self.batch, self.first
        if exc_type is None:
            try:
                if not first:
                    group._retry(lambda: conn.execute(f"RELEASE {_SAVEPOINT}"))
            except BaseException:
                group._undo(conn, batch, first)
                if not first:
                    group._finish(conn, batch, wait=False)
                raise
            group._finish(conn, batch, wait=True)
            return
        group._undo(conn, batch, first)  # the block's own exception propagates
        if not first:
            group._finish(conn, batch, wait=False)


def _copy(error: BaseException) -> BaseException:
    """A copy of the batch's error for each waiting block (one exception object is not raised
    in several threads at once: each raise rewrites its traceback)."""
    try:
        clone = copy.copy(error)
    except Exception:  # an exception whose constructor does not take its args back
        return StoreError(f"the group commit of this transaction failed: {error}")
    return clone if isinstance(clone, BaseException) else error

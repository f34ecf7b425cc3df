"""One error tree at the boundary (issue 11): no raw sqlite3 error reaches a caller. A damaged
page, a read-only workspace, an empty or truncated memory.db each raise a MindPalaceError that
says what happened and what to do; an empty memory.db is never silently replaced."""

from __future__ import annotations

import os
import pathlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import (
    DatabaseCorruptError,
    DiskFullError,
    MindPalaceError,
    ReadOnlyWorkspaceError,
    StoreBusyError,
    StoreError,
    WorkspaceError,
)
from mindpalace.store.sqlite import connection as sqlite_connection
from mindpalace.store.sqlite import errmap
from mindpalace.store.sqlite.errmap import store_error

PAGE = 4096
OPTS: dict[str, Any] = {"embed": {"provider": "none"}}


def build_workspace(root: Path) -> None:
    with Memory.open(root, **OPTS) as mem:
        s = mem.session("trip", user="u1")
        for i in range(120):
            s.add_message({"role": "user", "content": f"message {i} about the hotel budget " * 20})
        s.remember("user:home_city", "Lisbon", importance=0.9)
        s.task.checkpoint(artifacts={"ticket": "T-1"})


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "ws"
    build_workspace(root)
    assert not Path(f"{root}/memory.db-wal").exists()  # closed cleanly: one file holds it all
    return root


def copy_of(pristine: Path, dest: Path) -> Path:
    shutil.copytree(pristine, dest)
    return dest


def operations(root: Path) -> list[Callable[[], Any]]:
    """What a user does first with a workspace: open it, status, recall, read, the task."""

    def opened() -> Memory:
        return Memory.open(root, create=False, **OPTS)

    def with_mem(fn: Callable[[Memory], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with opened() as mem:
                return fn(mem)
        return run

    return [
        with_mem(lambda m: None),
        with_mem(lambda m: m.stats()),
        with_mem(lambda m: m.session("trip", user="u1").recall("hotel budget")),
        with_mem(lambda m: m.session("trip", user="u1").messages.list()),
        with_mem(lambda m: m.session("trip", user="u1").task.state()),
        with_mem(lambda m: m.session("trip", user="u1").context(4000)),
    ]


def outcomes(root: Path) -> list[str]:
    out = []
    for op in operations(root):
        try:
            op()
            out.append("ok")
        except MindPalaceError as exc:
            out.append(type(exc).__name__)
        # anything else (sqlite3.DatabaseError …) fails the test right here
    return out


class TestCorruptDatabase:
    def test_a_zeroed_page_is_reported_as_corrupt_with_the_doctor_hint(self, pristine: Path, tmp_path: Path) -> None:
        root = copy_of(pristine, tmp_path / "ws")
        # the issue's case: one zeroed 4 KiB page — the root of the events' (scope, stream,
        # version) index, which counting the events reads
        ro = sqlite3.connect(f"{(root / 'memory.db').as_uri()}?mode=ro", uri=True)
        try:
            [(root_page,)] = ro.execute(
                "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_events_1'").fetchall()
        finally:
            ro.close()
        with open(root / "memory.db", "r+b") as fh:
            fh.seek((root_page - 1) * PAGE)
            fh.write(bytes(PAGE))
        results = outcomes(root)
        assert "DatabaseCorruptError" in results
        with pytest.raises(DatabaseCorruptError, match=r"damaged .*malformed.*mindpalace doctor"):
            operations(root)[1]()

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(page=st.integers(min_value=0, max_value=400))
    def test_any_zeroed_page_gives_mindpalace_errors_only(self, pristine: Path, tmp_path: Path, page: int) -> None:
        root = tmp_path / f"ws-{page}"
        shutil.rmtree(root, ignore_errors=True)
        copy_of(pristine, root)
        size = (root / "memory.db").stat().st_size
        with open(root / "memory.db", "r+b") as fh:
            fh.seek((page * PAGE) % size)
            fh.write(bytes(PAGE))
        assert set(outcomes(root)) <= {"ok", "DatabaseCorruptError"}

    def test_a_zeroed_first_page_is_corrupt_not_another_application(self, pristine: Path, tmp_path: Path) -> None:
        root = copy_of(pristine, tmp_path / "ws")
        with open(root / "memory.db", "r+b") as fh:
            fh.write(bytes(PAGE))
        assert outcomes(root)[0] == "DatabaseCorruptError"


class TestEmptyOrTruncatedDatabase:
    def test_an_empty_memory_db_is_reported_and_left_as_it_is(self, pristine: Path, tmp_path: Path) -> None:
        root = copy_of(pristine, tmp_path / "ws")
        (root / "memory.db").write_bytes(b"")
        with pytest.raises(DatabaseCorruptError, match=r"empty \(0 bytes\)"):
            Memory.open(root, **OPTS)  # even with create=True: never a new empty memory
        assert (root / "memory.db").stat().st_size == 0

    def test_a_truncated_memory_db_is_reported(self, pristine: Path, tmp_path: Path) -> None:
        root = copy_of(pristine, tmp_path / "ws")
        db = root / "memory.db"
        os.truncate(db, db.stat().st_size // 2)
        with pytest.raises(DatabaseCorruptError, match="truncated"):
            Memory.open(root, create=False, **OPTS)

    def test_a_new_database_is_created_whole(self, tmp_path: Path) -> None:
        Memory.open(tmp_path / "ws", **OPTS).close()
        assert (tmp_path / "ws" / "memory.db").stat().st_size > 0
        assert not list((tmp_path / "ws").glob(".memory.db.*.creating*"))

    def test_a_missing_database_beside_a_leftover_wal_is_not_created_over_it(self, tmp_path: Path) -> None:
        # memory.db deleted (the empty-file error says "delete memory.db to start afresh") while
        # the -wal of a killed writer is still there: a new database would replay that log as
        # its own pages — a malformed database, and the log's writes gone with it
        root = tmp_path / "ws"
        Memory.open(root, **OPTS).close()
        db = root / "memory.db"
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("CREATE TABLE pending (x)")
        conn.executemany("INSERT INTO pending VALUES (?)", [(i,) for i in range(500)])
        conn.commit()
        wal = Path(f"{db}-wal").read_bytes()  # what a kill -9 leaves behind
        conn.close()
        db.unlink()
        Path(f"{db}-wal").write_bytes(wal)
        with pytest.raises(WorkspaceError, match=r"memory\.db-wal"):
            Memory.open(root, **OPTS)
        assert not db.exists() and Path(f"{db}-wal").read_bytes() == wal  # nothing touched

    def test_temporary_files_of_a_killed_creation_are_removed_on_open(self, tmp_path: Path) -> None:
        Memory.open(tmp_path / "ws", **OPTS).close()
        stale = tmp_path / "ws" / ".memory.db.0123abcd.creating"
        stale.write_bytes(b"half")
        Path(f"{stale}-journal").write_bytes(b"x")
        Memory.open(tmp_path / "ws", **OPTS).close()
        assert not list((tmp_path / "ws").glob(".memory.db.*.creating*"))


def read_only_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store connection opened read-only (SQLite's own mode=ro): what a chmod'ed workspace
    gives a non-root user — root ignores file modes, so the chmod test would prove nothing."""
    real = sqlite3.connect

    def connect(database: Any, *args: Any, uri: bool = False, **kwargs: Any) -> sqlite3.Connection:
        if uri:
            return real(database, *args, uri=True, **kwargs)
        return real(pathlib.Path(database).resolve().as_uri() + "?mode=ro", *args, uri=True, **kwargs)

    monkeypatch.setattr(sqlite_connection.sqlite3, "connect", connect)


class TestReadOnlyWorkspace:
    WRITES: ClassVar[list[tuple[str, Callable[[Any], Any]]]] = [
        ("add_message", lambda s: s.add_message({"role": "user", "content": "one more"})),
        ("remember", lambda s: s.remember("user:pet", "cat", importance=0.9)),
        ("checkpoint", lambda s: s.task.checkpoint(artifacts={"x": 1})),
        ("steps", lambda s: s.steps.begin("look something up")),
    ]

    @pytest.mark.parametrize("name,write", WRITES, ids=[w[0] for w in WRITES])
    def test_writes_raise_read_only_and_reads_still_work(
        self, pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        write: Callable[[Any], Any],
    ) -> None:
        root = copy_of(pristine, tmp_path / "ws")
        read_only_connections(monkeypatch)
        with Memory.open(root, create=False, **OPTS) as mem:
            s = mem.session("trip", user="u1")
            with pytest.raises(ReadOnlyWorkspaceError, match="read-only"):
                write(s)
            assert len(s.messages.list()) == 120 and mem.stats().store.events > 0

    @pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                        reason="root ignores file modes; the read-only URI test covers it")
    def test_a_chmod_read_only_workspace(self, pristine: Path, tmp_path: Path) -> None:
        root = copy_of(pristine, tmp_path / "ws")
        (root / "memory.db").chmod(0o444)
        root.chmod(0o555)
        try:
            with Memory.open(root, create=False, **OPTS) as mem, pytest.raises(ReadOnlyWorkspaceError):
                mem.session("trip", user="u1").add_message({"role": "user", "content": "x"})
        finally:
            root.chmod(0o755)


class TestErrorMapping:
    @pytest.mark.parametrize("exc,expected", [
        (sqlite3.DatabaseError("database disk image is malformed"), DatabaseCorruptError),
        (sqlite3.DatabaseError("file is not a database"), DatabaseCorruptError),
        (sqlite3.OperationalError("attempt to write a readonly database"), ReadOnlyWorkspaceError),
        (sqlite3.OperationalError("database or disk is full"), DiskFullError),
        (sqlite3.OperationalError("database is locked"), StoreBusyError),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), StoreError),
        (sqlite3.OperationalError("no such table: x"), StoreError),
    ])
    def test_sqlite_errors_map_to_the_tree(self, exc: sqlite3.Error, expected: type) -> None:
        mapped = store_error("/ws/memory.db", exc)
        assert type(mapped) is expected and "/ws/memory.db" in str(mapped)

    def test_a_database_that_cannot_be_opened_in_a_read_only_folder_is_read_only(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        exc = sqlite3.OperationalError("unable to open database file")
        exc.sqlite_errorcode = sqlite3.SQLITE_CANTOPEN  # type: ignore[attr-defined]
        db = str(tmp_path / "memory.db")
        assert type(store_error(db, exc)) is WorkspaceError  # a writable folder: something else
        monkeypatch.setattr(errmap.os, "access", lambda path, mode: False)  # a read-only mount
        mapped = store_error(db, exc)
        assert type(mapped) is ReadOnlyWorkspaceError and "read-only" in str(mapped)

    def test_disk_full_says_what_to_do(self) -> None:
        assert "free some space" in str(store_error("db", sqlite3.OperationalError("database or disk is full")))



def deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    cur = root
    for _ in range(depth):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    return root


class TestHostileNesting:
    """100,000-deep JSON through the API is a ValidationError before anything is written, and a
    hostile value already in the database reads as damage — never a raw RecursionError."""

    DEEP = deep_list(100_000)
    CALLS: ClassVar[list[tuple[str, Callable[[Any, Any], Any]]]] = [
        ("add_message", lambda s, d: s.add_message({"role": "user", "content": [{"type": "text", "text": "x", "d": d}]})),
        ("checkpoint", lambda s, d: s.checkpoint(artifacts={"d": d})),
        ("tool_call", lambda s, d: s.tool_call("t", {"d": d})),
        ("kv_put", lambda s, d: s.store.kv_put(s.scope, "ns", "k", d)),
        ("context", lambda s, d: s.context(messages=[{"role": "user", "content": [{"type": "text", "text": "x", "d": d}]}])),
    ]

    @pytest.mark.parametrize("name,call", CALLS, ids=[c[0] for c in CALLS])
    def test_deep_input_is_refused_before_anything_is_stored(self, tmp_path: Path, name: str,
                                                             call: Callable[[Any, Any], Any]) -> None:
        from mindpalace.errors import ValidationError

        with Memory.open(tmp_path / "ws", **OPTS) as mem:
            s = mem.session("a")
            with pytest.raises(ValidationError, match="nested"):
                call(s, self.DEEP)
            assert mem.stats().store.events == 0 and mem.stats().store.kv_entries == 0

    def test_a_hostile_stored_value_reads_as_damage(self, tmp_path: Path) -> None:
        Memory.open(tmp_path / "ws", **OPTS).close()
        conn = sqlite3.connect(tmp_path / "ws" / "memory.db")
        conn.execute("INSERT INTO kv VALUES ('default', '', '', 'a', 'ns', 'bad', ?, '2026-01-01T00:00:00+00:00')",
                     ("[" * 100_000 + "]" * 100_000,))
        conn.commit()
        conn.close()
        with Memory.open(tmp_path / "ws", **OPTS) as mem, \
                pytest.raises(DatabaseCorruptError, match="nested too deep to parse"):
            mem.store.kv_get(mem.session("a").scope, "ns", "bad")


class TestDiskFullAndLocked:
    def test_a_full_database_is_disk_full_and_nothing_half_written(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", **OPTS) as mem:
            s = mem.session("a")
            s.add_message({"role": "user", "content": "before the disk filled up"})
            store = mem.store
            pages = store._conn().execute("PRAGMA page_count").fetchone()[0]  # type: ignore[attr-defined]
            # SQLite's own SQLITE_FULL, on the thread's connection and on the write connection
            # every transaction runs on (group commit)
            for conn in (store._conn(), store._write_conn()):  # type: ignore[attr-defined]
                conn.execute(f"PRAGMA max_page_count = {pages + 2}")
            added = 1
            with pytest.raises(DiskFullError, match="free some space"):
                for i in range(200):
                    s.add_message({"role": "user", "content": f"message {i} " * 400})
                    added += 1
            stored = s.messages.list()  # the refused message is not half-written (no event, no doc)
            assert len(stored) == added == mem.store.stats().documents
            assert stored[0].message["content"] == "before the disk filled up"

    def test_a_lock_held_past_the_retry_budget_is_store_busy(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", store={"busy_timeout_ms": 10, "busy_retries": 2}, **OPTS) as mem:
            s = mem.session("a")
            s.add_message({"role": "user", "content": "x"})
            other = sqlite3.connect(tmp_path / "ws" / "memory.db", isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
                with pytest.raises(StoreBusyError, match="locked"):
                    s.add_message({"role": "user", "content": "y"})
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert s.messages.count() == 1

"""What an event append writes to the SQLite log, counted from the WAL file itself (never timed):
a checkpoint commit is the event's table page and its (scope, stream, version) index page — no
sqlite_sequence row (schema v5) — and the v4 → v5 rebuild of the events table keeps every event,
its position, and the never-reuse guarantee of the AUTOINCREMENT it replaces."""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from pathlib import Path

from mindpalace import Memory
from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store import NewEvent
from mindpalace.store.sqlite import MIGRATIONS, SQLiteStore
from mindpalace.store.sqlite.schema import SCOPE_COLS, split_sql


def wal_commits(wal: Path) -> list[list[int]]:
    """The page numbers of each commit in `wal`'s current generation (frames whose salts match
    the header's), oldest first."""
    data = wal.read_bytes()
    salts = struct.unpack(">II", data[16:24])
    page_size = struct.unpack(">I", data[8:12])[0]
    commits, frames, off = [], [], 32
    while off + 24 + page_size <= len(data):
        page, db_size, s1, s2 = struct.unpack(">IIII", data[off:off + 16])
        if (s1, s2) != salts:
            break
        frames.append(page)
        if db_size:  # a commit frame
            commits.append(frames)
            frames = []
        off += 24 + page_size
    return commits


def btree_of_pages(db: Path) -> dict[int, str]:
    conn = sqlite3.connect(db)
    try:
        return {page: name for name, page in conn.execute("SELECT name, pageno FROM dbstat")}
    finally:
        conn.close()


def test_a_checkpoint_commit_writes_the_event_table_page_and_its_index_page(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    # NORMAL writes the same pages as FULL (it only skips the fsync)
    with Memory.open(root, embed={"provider": "none"}, store={"synchronous": "NORMAL"},
                     tasks={"snapshot_every_events": 10_000}) as mem:
        s = mem.session("agent")
        s.checkpoint(step=0)  # connections open, the task's first event written
        for conn in mem.store._conns:
            conn.execute("PRAGMA wal_autocheckpoint=0")  # keep every frame in the log
        mem.store._write_conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        steps = 60
        for i in range(1, steps + 1):
            s.checkpoint(step=i, artifacts={"last": i, "note": f"step {i} done"})
        commits = wal_commits(root / "memory.db-wal")
        names = btree_of_pages(root / "memory.db")
    assert len(commits) == steps  # one commit per step
    for frames in commits:  # each commit: the table's last page and the index's page
        assert {names.get(p) for p in frames} >= {"events", "sqlite_autoindex_events_1"}
    written = Counter(names.get(page, "free") for frames in commits for page in frames)
    # nothing else but, when a page fills, its split (a new page, the parent) and page 1
    # (sqlite_schema: its header holds the file's page count)
    assert set(written) <= {"events", "sqlite_autoindex_events_1", "sqlite_schema"}, written
    assert sum(written.values()) <= 2 * steps + steps // 10, written


def _v4_database(path: Path) -> None:
    """A database as schema v4 wrote it: AUTOINCREMENT positions, a deleted stream at the end
    (so sqlite_sequence is past the table's last position)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for version, script in enumerate(MIGRATIONS[:4], 1):
        for statement in split_sql(script.replace("{fts_tokenizer}", StoreSettings().fts_tokenizer)):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    for stream, n in (("kept", 3), ("gone", 4)):
        for v in range(1, n + 1):
            conn.execute(f"INSERT INTO events ({SCOPE_COLS}, stream, version, type, data, created_at) "
                         "VALUES ('t', 'u', 'a', 's', ?, ?, 'e', ?, '2026-01-01T00:00:00+00:00')",
                         (stream, v, f'{{"v": {v}}}'))
    conn.execute("DELETE FROM events WHERE stream = 'gone'")
    conn.close()


def test_the_v5_rebuild_keeps_events_and_positions_and_never_reuses_one(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _v4_database(db)
    store = SQLiteStore(db)
    try:
        scope = Scope(tenant="t", user="u", agent="a", session="s")
        kept = store.read_events(scope, "kept")
        assert [(e.version, e.position, e.data) for e in kept] == [(v, v, {"v": v}) for v in (1, 2, 3)]
        # positions 4–7 were handed out (and deleted) under v4: the next append goes past them
        [new] = store.append_events(scope, "gone", [NewEvent("e")])
        assert new.version == 1 and new.position == 8
        conn = sqlite3.connect(db)
        try:
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
            assert "AUTOINCREMENT" not in sql
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
            assert {"events_blob_gc", "records_blob_gc", "docs_blob_gc"} <= triggers
        finally:
            conn.close()
    finally:
        store.close()

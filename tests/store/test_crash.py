"""A writer killed with SIGKILL mid-transaction: on reopen nothing is half-written or lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mindpalace.scope import Scope
from mindpalace.store import NewEvent, SQLiteStore

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")

SCOPE = Scope("t", "u", "a", "s")

# Commits 50 events and a record, then opens a transaction with many writes (big enough for
# SQLite to spill uncommitted pages into the WAL), says "ready" and waits to be killed.
WRITER_MID_TRANSACTION = r"""
import sys
from pathlib import Path
from mindpalace.scope import Scope
from mindpalace.store import NewEvent, Record, SQLiteStore

st = SQLiteStore(Path(sys.argv[1]))
scope = Scope("t", "u", "a", "s")
for i in range(50):
    st.append_events(scope, "log", [NewEvent("committed", {"i": i})])
st.put_record(Record(scope, "kept", "info", "committed record about zebras"))
with st.transaction():
    st.append_events(scope, "log", [NewEvent("doomed", {"i": i}) for i in range(500)])
    st.put_record(Record(scope, "doomed", "info", "half written giraffe"))
    for i in range(200):
        st.index_document(scope, "note", f"doomed-{i}", "half written giraffe " * 200)
    st.kv_put(scope, "ns", "cursor", 999)
    print("ready", flush=True)
    sys.stdin.readline()  # never returns: the parent kills us here
"""

# Appends transactions of 10 events forever, reporting each commit.
WRITER_LOOP = r"""
import sys
from pathlib import Path
from mindpalace.scope import Scope
from mindpalace.store import NewEvent, SQLiteStore

st = SQLiteStore(Path(sys.argv[1]))
scope = Scope("t", "u", "a", "s")
n = 0
while True:
    with st.transaction():
        st.append_events(scope, "loop", [NewEvent("e", {"batch": n, "k": k}) for k in range(10)])
        st.kv_put(scope, "ns", "batches", n + 1)
    n += 1
    print(n, flush=True)
"""


def spawn(code: str, db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def integrity(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO docs_fts (docs_fts) VALUES ('integrity-check')")
        conn.execute("INSERT INTO docs_tri (docs_tri) VALUES ('integrity-check')")
    finally:
        conn.close()


class TestKilledWriter:
    def test_open_transaction_leaves_no_trace_and_commits_survive(self, tmp_path: Path) -> None:
        db = tmp_path / "memory.db"
        proc = spawn(WRITER_MID_TRANSACTION, db)
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
        kill(proc)

        integrity(db)
        st = SQLiteStore(db)
        try:
            events = st.read_events(SCOPE, "log")
            assert [(e.version, e.type, e.data["i"]) for e in events] == [
                (i + 1, "committed", i) for i in range(50)]
            assert [r.name for r in st.list_records(SCOPE)] == ["kept"]
            assert st.keyword_search(SCOPE, "giraffe") == []
            assert st.keyword_search(SCOPE, "iraff") == []  # trigram index clean too
            assert [h.doc.ref for h in st.keyword_search(SCOPE, "zebras")] == ["kept"]
            assert st.kv_get(SCOPE, "ns", "cursor") is None
            # The lock died with the process: a new writer continues the stream.
            st.append_events(SCOPE, "log", [NewEvent("after")], expected_version=50)
            assert st.stream_version(SCOPE, "log") == 51
        finally:
            st.close()

    def test_killed_loop_keeps_whole_transactions_only(self, tmp_path: Path) -> None:
        db = tmp_path / "memory.db"
        proc = spawn(WRITER_LOOP, db)
        reported = 0
        while reported < 30 and proc.stdout is not None:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            reported = int(line)
        kill(proc)  # somewhere inside a later transaction, or between two

        integrity(db)
        st = SQLiteStore(db)
        try:
            events = st.read_events(SCOPE, "loop")
            batches = st.kv_get(SCOPE, "ns", "batches")
            assert batches >= reported  # every reported commit is durable
            assert len(events) == 10 * batches  # events and cursor moved together
            assert [e.version for e in events] == list(range(1, len(events) + 1))
        finally:
            st.close()

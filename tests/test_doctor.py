"""`mindpalace doctor`: integrity_check read-only, damaged history lines, and an export of what
is readable — the way out a DatabaseCorruptError points to (issue 11)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.workspace import doctor

PAGE = 4096


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    with Memory.open(root, embed={"provider": "none"}) as mem:
        s = mem.session("trip", user="u1")
        for i in range(150):
            s.add_message({"role": "user", "content": f"message {i} " + "about the hotel budget " * 10})
        mem.history.append(s.scope, "- the user keeps a 2000 CNY budget per night")
    return root


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["doctor", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_a_healthy_workspace_is_ok_and_unchanged(workspace: Path) -> None:
    before = digest(workspace / "memory.db")
    code, data = run(str(workspace))
    assert code == 0 and data["ok"] and data["database"]["problems"] == []
    assert data["history_entries"] == 1 and data["database"]["schema_version"] >= 1
    assert digest(workspace / "memory.db") == before


def test_a_damaged_page_is_reported_and_the_readable_messages_exported(workspace: Path, tmp_path: Path) -> None:
    db = workspace / "memory.db"
    pages = db.stat().st_size // PAGE
    with open(db, "r+b") as fh:  # damage a page in the middle of the messages
        fh.seek((pages // 2) * PAGE)
        fh.write(bytes(PAGE))
    before = digest(db)
    code, data = run(str(workspace), "--export", str(tmp_path / "out"))
    assert code == 1 and not data["ok"] and data["database"]["problems"]
    assert digest(db) == before  # read-only: nothing written
    exported = data["database"]["exported"]
    messages = [json.loads(line) for line in (tmp_path / "out" / "messages.jsonl").read_text().splitlines()]
    assert exported["messages.jsonl"] == len(messages) > 0
    assert all(m["session"] == "trip" and m["message"]["role"] == "user" for m in messages)
    assert exported["history.jsonl"] == 1


def test_an_empty_database_is_reported(workspace: Path) -> None:
    (workspace / "memory.db").write_bytes(b"")
    report = doctor(workspace)
    assert not report.ok and "empty" in report.database.problems[0]


def test_damaged_history_lines_and_stray_files_are_listed(workspace: Path) -> None:
    with open(workspace / "history" / "history.jsonl", "ab") as fh:
        fh.write(b"[" * 100_000 + b"\n")
    (workspace / "history" / ".history.jsonl.abc.tmp").write_text("x")
    result = CliRunner().invoke(app, ["doctor", str(workspace)])
    assert result.exit_code == 1
    assert "1 damaged lines" in result.stdout and "line 2: JSON nested too deep" in result.stdout
    assert "history/.history.jsonl.abc.tmp" in result.stdout


def test_a_folder_that_is_not_a_workspace_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["doctor", str(tmp_path)])
    assert result.exit_code == 1 and "not a mindpalace workspace" in str(result.exception or result.output)


@pytest.mark.parametrize("damage", ["empty", "not a database"])
def test_export_of_a_database_that_cannot_be_opened_still_saves_the_history(
        workspace: Path, tmp_path: Path, damage: str) -> None:
    db = workspace / "memory.db"
    if damage == "empty":
        db.write_bytes(b"")
    else:
        with open(db, "r+b") as fh:
            fh.write(b"garbage!" * 8)  # the SQLite header is gone: the file cannot be opened
    code, data = run(str(workspace), "--export", str(tmp_path / "out"))
    assert code == 1 and not data["ok"]
    assert data["database"]["exported"]["history.jsonl"] == 1
    assert len((tmp_path / "out" / "history.jsonl").read_text().splitlines()) == 1


def test_export_keeps_a_hostile_stored_value_as_text(workspace: Path, tmp_path: Path) -> None:
    # the value DatabaseCorruptError ("a stored value is nested too deep") sends the user here for
    deep = "[" * 100_000
    with closing(sqlite3.connect(workspace / "memory.db")) as conn, conn:
        conn.execute("UPDATE events SET data = ? WHERE rowid = (SELECT min(rowid) FROM events)", (deep,))
    _, data = run(str(workspace), "--export", str(tmp_path / "out"))
    assert data["database"]["exported"]["events.jsonl"] == 150
    rows = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    assert deep in [r["data"] for r in rows]


@pytest.mark.parametrize(("table", "column", "bad"), [("kv", "value", "[" * 100_000),
                                                       ("events", "data", "{not json")])
def test_a_stored_value_the_store_cannot_read_is_reported(
    workspace: Path, table: str, column: str, bad: str
) -> None:
    # the store raises DatabaseCorruptError for it and points here: doctor must not say "ok"
    with Memory.open(workspace, embed={"provider": "none"}) as mem:
        mem.session("trip", user="u1").remember("user:home_city", "Lisbon", importance=0.9)
    with closing(sqlite3.connect(workspace / "memory.db")) as conn, conn:
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM {table})", (bad,))
    code, data = run(str(workspace))
    assert code == 1 and not data["ok"]
    assert any(p.startswith(f"{table} row ") and column in p for p in data["database"]["problems"])

"""Check a SQLite memory.db read-only (``PRAGMA integrity_check``) and export what is readable.

Used by ``mindpalace doctor`` when a :class:`~mindpalace.errors.DatabaseCorruptError` sent the
user here. Nothing in the database is written: it is opened with SQLite's ``mode=ro`` (and
``immutable`` when no write-ahead log is pending, so not even ``-shm`` is created). The export
walks each table by rowid in chunks and steps over damaged pages row by row, so one bad page
costs the rows on it, not the table.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mindpalace.store.blobs import join_json, view_text
from mindpalace.store.sqlite.blobstore import read_slice

EXPORT_TABLES = ("events", "records", "kv", "docs")
"""Tables exported, as ``<table>.jsonl``; vectors are not (``mindpalace embed sync`` rebuilds them)."""
_JSON_COLUMNS = frozenset({"data", "value", "meta"})
_CHUNK_ROWS = 500
_GIVE_UP_AFTER_CHUNKS = 20  # unreadable chunks in a row past the last known rowid: stop


@dataclass
class DatabaseCheck:
    """What :func:`check_database` found.

    Attributes:
        ok: the file opened, ``integrity_check`` said ``ok`` and every stored JSON value
            (event data, kv values, record and document metadata) parses.
        problems: ``integrity_check`` lines, or why the file could not be checked.
        exported: rows written per file (``events.jsonl`` …, ``messages.jsonl``), when exporting.
        unreadable: rows (rowids) per table that could not be read, when exporting.
    """

    path: Path
    size_bytes: int
    ok: bool = False
    schema_version: int | None = None
    problems: list[str] = field(default_factory=list)
    exported: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "size_bytes": self.size_bytes, "ok": self.ok,
                "schema_version": self.schema_version, "problems": self.problems,
                "exported": self.exported, "unreadable": self.unreadable}


def check_database(path: Path, *, export: Path | None = None, max_problems: int = 100) -> DatabaseCheck:
    """Run ``PRAGMA integrity_check`` on `path` read-only and, with `export`, write every
    readable row of the store's tables as JSONL into that folder (plus ``messages.jsonl``: the
    chat messages of every session, in order). Never raises for a damaged file: what went
    wrong is in ``problems``.

    Args:
        path: the database file (memory.db).
        export: a folder to write ``<table>.jsonl`` files into (created); None = check only.
        max_problems: cap on the integrity_check lines reported.
    """
    check = DatabaseCheck(path, path.stat().st_size if path.exists() else 0)
    if not path.exists():
        check.problems.append("the file does not exist")
        return check
    if check.size_bytes == 0:
        check.problems.append("the file is empty (0 bytes): nothing to check or export")
        return check
    try:
        conn = _open_read_only(path)
    except sqlite3.Error as exc:
        check.problems.append(f"cannot open it: {exc}")
        return check
    try:
        try:
            lines = [r[0] for r in conn.execute(f"PRAGMA integrity_check({int(max_problems)})")]
            check.ok = lines == ["ok"]
            if not check.ok:
                check.problems.extend(lines)
        except sqlite3.Error as exc:
            check.problems.append(f"integrity_check failed: {exc}")
        bad = _unparseable_values(conn, max_problems)
        if bad:  # the store reads these as DatabaseCorruptError: the file is damaged for it too
            check.ok = False
            check.problems.extend(bad)
        try:
            check.schema_version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        except sqlite3.Error as exc:
            check.problems.append(f"schema version unreadable: {exc}")
        if export is not None:
            _export(conn, export, check)
    finally:
        conn.close()
    return check


def _unparseable_values(conn: sqlite3.Connection, cap: int) -> list[str]:
    """``<table> row <rowid>: <column> …`` for stored JSON the store cannot read (hostile
    nesting, not JSON), at most `cap` lines; tables whose pages cannot be read are left to
    ``integrity_check``."""
    out: list[str] = []
    for table in EXPORT_TABLES:
        try:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            json_cols = [c for c in columns if c in _JSON_COLUMNS]
            if not json_cols:
                continue
            blob = table == "events" and "blob" in columns  # schema v4: data may be cut
            extra = ", blob, blob_at" if blob else ""
            rows = conn.execute(f"SELECT rowid, {', '.join(json_cols)}{extra} FROM {table}")
            for rowid, *values in rows:
                if blob:
                    key, cuts = values[-2:]
                    values = values[:-2]
                    if key is not None:
                        try:
                            values[json_cols.index("data")] = _joined(conn, values[json_cols.index("data")], key, cuts)
                        except (LookupError, ValueError, sqlite3.Error) as exc:
                            out.append(f"{table} row {rowid}: its stored text is unreadable ({exc})")
                            continue
                for col, value in zip(json_cols, values, strict=True):
                    if not isinstance(value, str):
                        continue
                    try:
                        json.loads(value)
                    except RecursionError:
                        out.append(f"{table} row {rowid}: {col} is nested too deep to parse")
                    except ValueError as exc:
                        out.append(f"{table} row {rowid}: {col} is not valid JSON ({exc})")
                    if len(out) >= cap:
                        return out
        except sqlite3.Error:
            continue
    return out


def _open_read_only(path: Path) -> sqlite3.Connection:
    wal = Path(f"{path}-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    uri = f"{path.resolve().as_uri()}?mode=ro" + ("" if pending else "&immutable=1")
    conn = sqlite3.connect(uri, uri=True)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return conn


def _export(conn: sqlite3.Connection, folder: Path, check: DatabaseCheck) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    messages = 0
    with open(folder / "messages.jsonl", "w", encoding="utf-8") as msg_out:
        for table in EXPORT_TABLES:
            written = 0
            with open(folder / f"{table}.jsonl", "w", encoding="utf-8") as out:
                for row in _readable_rows(conn, table, check):
                    row = _with_blob_text(conn, table, row, check)
                    out.write(json.dumps(row, ensure_ascii=False, default=repr) + "\n")
                    written += 1
                    if table == "events" and row.get("stream") == "messages" and isinstance(row.get("data"), dict):
                        data = row["data"]
                        msg_out.write(json.dumps({
                            "tenant": row.get("tenant"), "user": row.get("user"),
                            "agent": row.get("agent"), "session": row.get("session"),
                            "index": row.get("version"), "timestamp": data.get("timestamp"),
                            "message": data.get("message"),
                        }, ensure_ascii=False, default=repr) + "\n")
                        messages += 1
            check.exported[f"{table}.jsonl"] = written
    check.exported["messages.jsonl"] = messages


def _readable_rows(conn: sqlite3.Connection, table: str, check: DatabaseCheck) -> Any:
    """Every row of `table` that can be read, by rowid; damaged chunks row by row."""
    try:
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    except sqlite3.Error as exc:
        check.problems.append(f"{table}: unreadable schema ({exc})")
        return
    if not columns:
        return
    try:
        top: int | None = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
    except sqlite3.Error:
        top = None  # the damage is on the way to the last row: walk until reads stop
    select = f"SELECT rowid, * FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT {_CHUNK_ROWS}"
    last, failing = 0, 0
    while top is None or last < top:
        try:
            rows = conn.execute(select, (last,)).fetchall()
        except sqlite3.Error:
            rows = None
        if rows:
            failing = 0
            for r in rows:
                yield _row(columns, r[1:])
            last = rows[-1][0]
            continue
        if rows is not None:  # an empty chunk: the end of the table
            return
        for rowid in range(last + 1, last + _CHUNK_ROWS + 1):  # step over the damage
            try:
                one = conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.Error:
                check.unreadable[table] = check.unreadable.get(table, 0) + 1
                continue
            if one is not None:
                yield _row(columns, one)
        last += _CHUNK_ROWS
        failing += 1
        if top is None and failing >= _GIVE_UP_AFTER_CHUNKS:
            return


def _row(columns: list[str], values: Any) -> dict[str, Any]:
    row = dict(zip(columns, values, strict=False))
    for col in _JSON_COLUMNS & row.keys():
        if isinstance(row[col], str):
            with suppress(ValueError, RecursionError):  # not JSON (or hostile nesting): kept as text
                row[col] = json.loads(row[col])
    return row


def _joined(conn: sqlite3.Connection, data: str, key: str, cuts: str) -> str:
    """An event's JSON text with its long string put back from blob `key` (schema v4)."""
    return join_json(data, read_slice(conn, key, 0, -1), json.loads(cuts))


def _with_blob_text(
    conn: sqlite3.Connection, table: str, row: dict[str, Any], check: DatabaseCheck
) -> dict[str, Any]:
    """`row` with the long text it keeps in a blob (schema v4) put back: a record's body, an
    event's data, a document part's text. An unreadable blob is a problem; the row is
    exported as stored."""
    try:
        if table == "records" and row.get("body_blob"):
            row["body"] = read_slice(conn, row["body_blob"], 0, -1)
        elif table == "events" and row.get("blob"):
            data = row["data"] if isinstance(row["data"], str) else json.dumps(row["data"])
            row["data"] = json.loads(_joined(conn, data, row["blob"], row["blob_at"]))
        elif table == "docs" and row.get("blob"):
            piece = read_slice(conn, row["blob"], int(row["blob_off"]), int(row["blob_len"]))
            row["text"] = view_text(row["text"], int(row["blob_at"]), piece)
    except (LookupError, ValueError, RecursionError, sqlite3.Error) as exc:
        check.problems.append(f"{table}: a row's stored text is unreadable ({exc})")
    return row

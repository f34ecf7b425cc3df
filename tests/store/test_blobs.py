"""Large texts stored once (mindpalace.store.blobs, issue 16 build 6): byte-identical reads,
one blob for two references, collection with the last reference, the migration of an
existing database, and keyword search unchanged on normal documents — on both backends."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store.base import NewEvent, Record, Store
from mindpalace.store.blobs import (
    BLOB_MIN_CHARS,
    CHUNK_CHARS,
    blob_key,
    join_json,
    part_views,
    split_json,
    view_text,
)
from mindpalace.store.codec import dumps
from mindpalace.store.inputs import document_parts
from mindpalace.store.sqlite import MIGRATIONS, SQLiteStore
from mindpalace.store.sqlite.schema import SCOPE_COLS, split_sql
from mindpalace.store.textindex import segment_for_index
from mindpalace.testing.workload import TAIL_PHRASE, log_output

SCOPE = Scope("t", "u", "a", "s")
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


def big_text(seed: str, size: int) -> str:
    return (seed * (size // len(seed) + 1))[:size]


def blob_rows(store: Store) -> tuple[int, int]:
    """(blobs, chunk bytes) stored."""
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path)
        try:
            row = conn.execute("SELECT (SELECT count(*) FROM blobs), "
                               "(SELECT coalesce(sum(length(data)), 0) FROM blob_chunks)").fetchone()
        finally:
            conn.close()
    else:
        row = store._one("SELECT (SELECT count(*) FROM mp_blobs), "  # type: ignore[attr-defined]
                         "(SELECT coalesce(sum(length(data)), 0) FROM mp_blob_chunks)")
    return int(row[0]), int(row[1])


def parts_text(store: Store, scope: Scope, kind: str, ref: str) -> str:
    docs = [d for d in store.iter_documents(scope, kinds=[kind])
            if d.ref == ref or d.meta.get("of") == ref]
    return "".join(d.text for d in sorted(docs, key=lambda d: d.meta.get("part", 1)))


# -- I/O-free ---------------------------------------------------------------------------------
@given(seed=st.text(CHARS, min_size=1, max_size=40), extra=st.integers(0, 3 * CHUNK_CHARS))
@settings(max_examples=40, deadline=None)
def test_json_split_puts_back_exactly_what_dumps_wrote(seed: str, extra: int) -> None:
    text = big_text(seed, BLOB_MIN_CHARS + extra)
    value: dict[str, Any] = {"message": {"role": "tool", "content": text, "name": seed},
                             "also": [text, 1, None], "timestamp": "x"}
    full = dumps(value)
    split = split_json(value, full)
    assert split is not None and split.text == text and len(split.offsets) == 2
    assert len(split.rest) < 200 + 2 * len(seed)  # no copy of the text left in the JSON
    assert join_json(split.rest, split.text, split.offsets) == full
    assert json.loads(join_json(split.rest, split.text, list(split.offsets))) == value


def test_json_split_leaves_short_or_unencodable_json_inline() -> None:
    assert split_json({"a": "x" * 10}, dumps({"a": "x" * 10})) is None
    lone = {"a": "\ud800" + "x" * BLOB_MIN_CHARS}  # lone surrogate: dumps escapes it as ASCII
    assert split_json(lone, dumps(lone)) is None
    assert blob_key("x" * (BLOB_MIN_CHARS - 1)) is None


@given(head=st.text(CHARS, max_size=30), tail=st.text(CHARS, max_size=30),
       size=st.integers(BLOB_MIN_CHARS, BLOB_MIN_CHARS + 40_000), seed=st.text(CHARS, min_size=1, max_size=9))
@settings(max_examples=30, deadline=None)
def test_part_views_rebuild_every_part(head: str, tail: str, size: int, seed: str) -> None:
    blob = big_text(seed, size)
    text = head + blob + tail
    parts = [t for _, t, _ in document_parts("r", text)]
    for part, view in zip(parts, part_views(parts, len(head), len(blob)), strict=True):
        if view is None:
            continue
        assert len(view.stored) < len(head) + len(tail) + 1
        assert view_text(view.stored, view.at, blob[view.offset:view.offset + view.length]) == part


# -- both backends ----------------------------------------------------------------------------
@given(seed=st.text(CHARS, min_size=1, max_size=30), size=st.integers(BLOB_MIN_CHARS - 2, 2 * CHUNK_CHARS + 17))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_is_byte_identical(store: Store, seed: str, size: int) -> None:
    """Record body, event JSON and a long document's parts read back exactly, whatever the
    characters (non-ASCII, quotes, backslashes, newlines) and the size around the thresholds."""
    text = big_text(seed, size)
    name = f"out-{uuid.uuid4().hex[:8]}"
    stream = f"messages-{name}"
    store.put_record(Record(SCOPE, name, "output", text, "a tool output"))
    data = {"message": {"role": "tool", "tool_call_id": "c1", "content": text}, "timestamp": "t"}
    store.append_events(SCOPE, stream, [NewEvent("message", data)])
    assert store.get_records(SCOPE, [name])[name].body == text
    assert [r.body for r in store.list_records(SCOPE, type="output") if r.name == name] == [text]
    (event,) = store.read_events(SCOPE, stream)
    assert event.data == data and dumps(event.data) == dumps(data)
    assert parts_text(store, SCOPE, "output", name) == f"a tool output\n{text}"
    store.delete_records(SCOPE, [name])
    store.delete_stream(SCOPE, stream)
    assert blob_rows(store)[0] == 0


def test_a_step_output_and_a_tool_message_share_one_blob(store: Store) -> None:
    """The same output recorded as a record and as a tool message (with its search documents)
    is stored once, compressed; it goes when its last reference goes, not before."""
    text = log_output(400_000) + " — ünïcødé ✓ 日本語"
    store.put_record(Record(SCOPE, "step_1.output_1", "output", text, "Step 1: tool output 1"))
    with store.transaction():
        (ev,) = store.append_events(SCOPE, "messages", [NewEvent("message", {
            "message": {"role": "tool", "content": text}})])
        store.index_document(SCOPE, "message", str(ev.version), f"tool: {text}")
    blobs, stored = blob_rows(store)
    assert blobs == 1 and stored < len(text.encode()) / 2
    if isinstance(store, SQLiteStore):  # no document part keeps a copy of the output
        conn = sqlite3.connect(store.path)
        try:
            inline = conn.execute("SELECT sum(length(text) + length(search_text)) FROM docs").fetchone()[0]
        finally:
            conn.close()
        assert inline < 2_000
    assert parts_text(store, SCOPE, "message", "1") == f"tool: {text}"
    hits = store.keyword_search(SCOPE, TAIL_PHRASE, k=5)
    assert {h.doc.kind for h in hits} == {"output", "message"}
    assert all(TAIL_PHRASE in h.doc.text for h in hits)
    store.delete_records(SCOPE, ["step_1.output_1"])
    assert blob_rows(store)[0] == 1  # the message still holds it
    assert store.read_events(SCOPE, "messages")[0].data["message"]["content"] == text
    store.delete_stream(SCOPE, "messages")
    store.delete_documents(SCOPE, "message", ["1"])
    assert blob_rows(store) == (0, 0)
    assert store.keyword_search(SCOPE, TAIL_PHRASE, k=5) == []


def test_overwriting_a_record_with_the_same_long_body_keeps_its_blob(store: Store) -> None:
    text = log_output(100_000)
    for index in (True, False, True):
        store.put_record(Record(SCOPE, "r", "output", text, "d"), overwrite=True, index=index)
        assert store.get_records(SCOPE, ["r"])["r"].body == text
        assert blob_rows(store)[0] == 1
    store.put_record(Record(SCOPE, "r", "output", "short now", "d"), overwrite=True)
    assert blob_rows(store) == (0, 0)


def test_reindexing_a_long_document_keeps_the_index_exact(tmp_path: Path) -> None:
    """Parts that view a blob are indexed by the store: a changed text leaves no stale term."""
    store = SQLiteStore(tmp_path / "m.db")
    try:
        store.index_document(SCOPE, "note", "n", big_text("alpha beta ", 90_000) + " omega")
        assert [h.doc.ref for h in store.keyword_search(SCOPE, "omega")] == ["n#part6"]
        store.index_document(SCOPE, "note", "n", big_text("gamma delta ", 90_000))
        assert store.keyword_search(SCOPE, "omega") == []
        assert store.keyword_search(SCOPE, "alpha") == []
        assert {h.doc.ref for h in store.keyword_search(SCOPE, "gamma", k=20)} >= {"n"}
        conn = sqlite3.connect(store.path)
        try:
            conn.execute("INSERT INTO docs_fts (docs_fts) VALUES ('integrity-check')")
            conn.execute("INSERT INTO docs_tri (docs_tri) VALUES ('integrity-check')")
            assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
        finally:
            conn.close()
    finally:
        store.close()


# -- migration of a database made by the code before blobs (schema v3) ---------------------------
NORMAL = ["the hotel in paris has a pool", "flight UA100 to tokyo on monday",
          "budget 2000 CNY a night near the station", "paris museum tickets booked",
          "日本語のテスト 東京 ホテル", "pool party at the hotel in tokyo"]
QUERIES = ["hotel", "paris pool", "tokyo", "ホテル", "UA100", "ticket", "statio", "東京"]


def _v3_database(path: Path, output: str) -> None:
    """A database as schema v3 wrote it: migrations 1–3 only, rows inserted the way that code
    inserted them (text inline, FTS5 rows by the v1 triggers)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for version, script in enumerate(MIGRATIONS[:3], 1):
        for statement in split_sql(script.replace("{fts_tokenizer}", StoreSettings().fts_tokenizer)):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    scope = tuple(SCOPE.values())
    now = "2026-01-01T00:00:00+00:00"

    def doc(kind: str, ref: str, text: str, meta: dict[str, Any]) -> None:
        for r, t, m in document_parts(ref, text, meta):
            conn.execute(f"INSERT INTO docs ({SCOPE_COLS}, kind, ref, text, search_text, meta, "
                         "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (*scope, kind, r, t, segment_for_index(t), dumps(m), now))

    for i, text in enumerate(NORMAL):
        doc("note", f"n{i}", text, {})
    conn.execute(f"INSERT INTO records ({SCOPE_COLS}, name, type, step_id, description, "
                 "created_at, body, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (*scope, "step_1.output_1", "output", 1, "Step 1: output", now, output, "{}"))
    doc("output", "step_1.output_1", f"Step 1: output\n{output}", {"record": "step_1.output_1"})
    data = dumps({"message": {"role": "tool", "content": output}, "timestamp": now})
    conn.execute(f"INSERT INTO events ({SCOPE_COLS}, stream, version, type, data, created_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (*scope, "messages", 1, "message", data, now))
    doc("message", "1", f"tool: {output}", {"index": 1})
    conn.close()


def _results(store: SQLiteStore, query: str) -> list[tuple[str, float, int, str]]:
    return [(h.doc.ref, round(h.score, 9), h.rank, h.doc.text)
            for h in store.keyword_search(SCOPE, query, k=8, kinds=["note"])]


def test_migration_converts_a_v3_database_and_keeps_keyword_results(tmp_path: Path) -> None:
    output = log_output(300_000) + " — ünïcødé ✓"
    old_db = tmp_path / "old" / "memory.db"
    old_db.parent.mkdir()
    _v3_database(old_db, output)
    before = sqlite3.connect(old_db)
    v3_results = {  # FTS5's own bm25() over the v3 index (what that code's SQL path returned)
        q: [r[0] for r in before.execute(
            "SELECT d.ref FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid WHERE docs_fts MATCH ? "
            "AND d.kind = 'note' ORDER BY bm25(docs_fts), d.id", (f'"{q}"',))]
        for q in ("hotel", "paris", "tokyo", "pool")
    }
    before.close()
    migrated = SQLiteStore(old_db)
    fresh = SQLiteStore(tmp_path / "fresh.db")
    try:
        assert migrated.schema_version == fresh.schema_version == len(MIGRATIONS)
        record = migrated.get_records(SCOPE, ["step_1.output_1"])["step_1.output_1"]
        assert record.body == output
        assert migrated.read_events(SCOPE, "messages")[0].data["message"]["content"] == output
        assert parts_text(migrated, SCOPE, "output", "step_1.output_1") == f"Step 1: output\n{output}"
        assert parts_text(migrated, SCOPE, "message", "1") == f"tool: {output}"
        blobs, stored = blob_rows(migrated)
        assert blobs == 1 and stored < len(output) / 2
        conn = sqlite3.connect(old_db)
        try:
            assert conn.execute("SELECT max(length(data)) FROM events").fetchone()[0] < 500
            assert conn.execute("SELECT max(length(body)) FROM records").fetchone()[0] == 0
            conn.execute("INSERT INTO docs_fts (docs_fts) VALUES ('integrity-check')")
            conn.execute("INSERT INTO docs_tri (docs_tri) VALUES ('integrity-check')")
        finally:
            conn.close()
        # the same documents written by today's code: identical keyword results (ids aside)
        for i, text in enumerate(NORMAL):
            fresh.index_document(SCOPE, "note", f"n{i}", text)
        fresh.put_record(Record(SCOPE, "step_1.output_1", "output", output, "Step 1: output"))
        fresh.index_document(SCOPE, "message", "1", f"tool: {output}")
        for query in QUERIES:
            assert _results(migrated, query) == _results(fresh, query), query
        for query, refs in v3_results.items():
            assert [r for r, *_ in _results(migrated, query)] == refs, query
        tail = [h.doc.kind for h in migrated.keyword_search(SCOPE, TAIL_PHRASE, k=5)]
        assert sorted(tail) == ["message", "output"]
        # converted parts leave the indexes exactly (their entries are rebuilt from the view)
        migrated.delete_records(SCOPE, ["step_1.output_1"])
        migrated.delete_documents(SCOPE, "message", ["1"])
        migrated.delete_stream(SCOPE, "messages")
        assert migrated.keyword_search(SCOPE, TAIL_PHRASE, k=5) == []
        assert blob_rows(migrated) == (0, 0)
        conn = sqlite3.connect(old_db)
        try:
            conn.execute("INSERT INTO docs_fts (docs_fts) VALUES ('integrity-check')")
            conn.execute("INSERT INTO docs_tri (docs_tri) VALUES ('integrity-check')")
            assert conn.execute("SELECT count(*) FROM docs_fts_r WHERE term = 'sha'").fetchone()[0] == 0
        finally:
            conn.close()
    finally:
        migrated.close()
        fresh.close()


@pytest.mark.parametrize("seed", ["plain ascii log line\n", "ünïcødé \"quoted\" \\ 日本語 ✓\n"])
def test_postgres_migration_converts_large_rows(pg_url: str, seed: str) -> None:
    """A schema-v1 PostgreSQL database (before blobs) with a large record body and event:
    opening it migrates them into one blob, read back byte for byte."""
    import psycopg

    from mindpalace.store.postgres import PostgresStore
    from mindpalace.store.postgres.schema import MIGRATIONS as PG_MIGRATIONS

    text = big_text(seed, 150_000)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for ext in ("vector", "pg_trgm"):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        conn.execute("CREATE TABLE mp_schema_version "
                     "(version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        conn.execute(PG_MIGRATIONS[0])
        conn.execute("INSERT INTO mp_schema_version (version) VALUES (1)")
        conn.execute("INSERT INTO mp_records (tenant, user_id, agent, session_id, name, type, "
                     "description, created_at, body, meta) VALUES "
                     "('t', 'u', 'a', 's', 'out', 'output', 'd', now(), %s, '{}')", (text,))
        data = dumps({"message": {"role": "tool", "content": text}})
        conn.execute("INSERT INTO mp_events (tenant, user_id, agent, session_id, stream, version, "
                     "type, data, created_at) VALUES ('t', 'u', 'a', 's', 'messages', 1, "
                     "'message', %s, now())", (data,))
    store = PostgresStore(pg_url)
    try:
        assert store.get_records(SCOPE, ["out"])["out"].body == text
        assert store.read_events(SCOPE, "messages")[0].data["message"]["content"] == text
        assert blob_rows(store)[0] == 1
        store.delete_records(SCOPE, ["out"])
        store.delete_stream(SCOPE, "messages")
        assert blob_rows(store) == (0, 0)
    finally:
        store.close()


def test_doctor_checks_and_exports_blob_rows_whole(tmp_path: Path) -> None:
    """A healthy database with blobs checks ok (an event's cut JSON is not 'invalid'), and
    the export holds the long texts whole."""
    from mindpalace.store.sqlite.doctor import check_database

    text = log_output(200_000) + " ünïcødé"
    store = SQLiteStore(tmp_path / "memory.db")
    try:
        store.put_record(Record(SCOPE, "out", "output", text, "d"))
        with store.transaction():
            store.append_events(SCOPE, "messages", [NewEvent("message", {
                "message": {"role": "tool", "content": text}})])
            store.index_document(SCOPE, "message", "1", f"tool: {text}")
    finally:
        store.close()
    check = check_database(tmp_path / "memory.db", export=tmp_path / "export")
    assert check.ok and not check.problems
    rows = {t: [json.loads(line) for line in (tmp_path / "export" / f"{t}.jsonl").read_text().splitlines()]
            for t in ("records", "events", "docs", "messages")}
    assert [r["body"] for r in rows["records"]] == [text]
    assert [r["data"]["message"]["content"] for r in rows["events"]] == [text]
    assert [m["message"]["content"] for m in rows["messages"]] == [text]
    parts = sorted((r for r in rows["docs"] if r["kind"] == "message"), key=lambda r: r["meta"]["part"])
    assert "".join(r["text"] for r in parts) == f"tool: {text}"

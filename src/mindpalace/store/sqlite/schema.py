"""Schema of the SQLite store: numbered migrations, the too-new-schema check, migrating."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mindpalace.errors import SchemaVersionError, StoreError
from mindpalace.store.sqlite.errmap import store_error

SCOPE_COLS = "tenant, user, agent, session"

# Position in this list = schema version. Never edit a shipped entry; append a new one.
MIGRATIONS: list[str] = [
    # v1: the whole protocol.
    f"""
    CREATE TABLE events (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        {SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        stream TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,
        data TEXT NOT NULL, created_at TEXT NOT NULL,
        UNIQUE (tenant, user, agent, session, stream, version)
    );
    CREATE TABLE records (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        name TEXT NOT NULL, type TEXT NOT NULL, step_id INTEGER, description TEXT NOT NULL,
        created_at TEXT NOT NULL, body TEXT NOT NULL, meta TEXT NOT NULL,
        UNIQUE (tenant, user, agent, session, name)
    );
    CREATE INDEX records_type ON records (tenant, user, agent, session, type);
    CREATE TABLE kv (
        {SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated_at TEXT NOT NULL,
        PRIMARY KEY (tenant, user, agent, session, namespace, key)
    );
    CREATE INDEX kv_namespace ON kv (namespace, key);
    CREATE TABLE docs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {SCOPE_COLS.replace(",", " TEXT NOT NULL,")} TEXT NOT NULL,
        kind TEXT NOT NULL, ref TEXT NOT NULL, text TEXT NOT NULL, search_text TEXT NOT NULL,
        meta TEXT NOT NULL, created_at TEXT NOT NULL,
        UNIQUE (tenant, user, agent, session, kind, ref)
    );
    CREATE INDEX docs_tenant_user ON docs (tenant, user);
    CREATE VIRTUAL TABLE docs_fts USING fts5(
        search_text, content='docs', content_rowid='id', tokenize='{{fts_tokenizer}}'
    );
    CREATE VIRTUAL TABLE docs_tri USING fts5(
        text, content='docs', content_rowid='id', tokenize='trigram'
    );
    CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN
        INSERT INTO docs_fts (rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO docs_tri (rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER docs_ad AFTER DELETE ON docs BEGIN
        INSERT INTO docs_fts (docs_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO docs_tri (docs_tri, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN
        INSERT INTO docs_fts (docs_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO docs_tri (docs_tri, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO docs_fts (rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO docs_tri (rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TABLE embeddings (
        doc_id INTEGER NOT NULL REFERENCES docs (id) ON DELETE CASCADE,
        model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY (doc_id, model)
    );
    CREATE INDEX embeddings_model ON embeddings (model);
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    INSERT INTO meta (key, value) VALUES ('embedding_generation', 0);
    """,
    # v2: the word index's postings, read by the in-process BM25 scorer (mindpalace.store.bm25).
    """
    CREATE VIRTUAL TABLE docs_fts_v USING fts5vocab(docs_fts, 'instance');
    CREATE VIRTUAL TABLE docs_fts_r USING fts5vocab(docs_fts, 'row');
    """,
    # v3: incremental in-process indexes (mindpalace.store.sqlite.incremental). index_generation
    # moves (to a random value, never repeating) on every change other than appending documents
    # and vectors of new documents; embedding_rowid is the high-water mark of embeddings rowids,
    # so a rowid is never reused and "rows above the last one seen" is exactly the new rows.
    """
    INSERT INTO meta (key, value) VALUES ('index_generation', 0);
    INSERT INTO meta (key, value) VALUES ('embedding_rowid', (SELECT coalesce(max(rowid), 0) FROM embeddings));
    """,
    # v4: large texts stored once (mindpalace.store.blobs, .sqlite.blobstore): a record body,
    # an event's big JSON string and a long document's parts refer to one compressed,
    # content-addressed blob. The docs triggers index only rows without a blob (a part that
    # views a blob is indexed by the store, which holds its text); a blob goes with the
    # statement that removes its last reference (recursive_triggers is on, so REPLACE counts).
    # Existing large rows are converted after this script (blobstore.convert_existing).
    """
    CREATE TABLE blobs (hash TEXT PRIMARY KEY, chars INTEGER NOT NULL, chunk_chars INTEGER NOT NULL);
    CREATE TABLE blob_chunks (
        hash TEXT NOT NULL, seq INTEGER NOT NULL, codec INTEGER NOT NULL, data BLOB NOT NULL,
        PRIMARY KEY (hash, seq)
    );
    ALTER TABLE records ADD COLUMN body_blob TEXT;
    ALTER TABLE events ADD COLUMN blob TEXT;
    ALTER TABLE events ADD COLUMN blob_at TEXT;
    ALTER TABLE docs ADD COLUMN blob TEXT;
    ALTER TABLE docs ADD COLUMN blob_at INTEGER;
    ALTER TABLE docs ADD COLUMN blob_off INTEGER;
    ALTER TABLE docs ADD COLUMN blob_len INTEGER;
    CREATE INDEX records_blob ON records (body_blob) WHERE body_blob IS NOT NULL;
    CREATE INDEX events_blob ON events (blob) WHERE blob IS NOT NULL;
    CREATE INDEX docs_blob ON docs (blob) WHERE blob IS NOT NULL;
    DROP TRIGGER docs_ai;
    DROP TRIGGER docs_ad;
    DROP TRIGGER docs_au;
    CREATE TRIGGER docs_ai AFTER INSERT ON docs WHEN new.blob IS NULL BEGIN
        INSERT INTO docs_fts (rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO docs_tri (rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER docs_ad AFTER DELETE ON docs WHEN old.blob IS NULL BEGIN
        INSERT INTO docs_fts (docs_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO docs_tri (docs_tri, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN
        INSERT INTO docs_fts (docs_fts, rowid, search_text)
            SELECT 'delete', old.id, old.search_text WHERE old.blob IS NULL;
        INSERT INTO docs_tri (docs_tri, rowid, text)
            SELECT 'delete', old.id, old.text WHERE old.blob IS NULL;
        INSERT INTO docs_fts (rowid, search_text) SELECT new.id, new.search_text WHERE new.blob IS NULL;
        INSERT INTO docs_tri (rowid, text) SELECT new.id, new.text WHERE new.blob IS NULL;
    END;
    CREATE TRIGGER records_blob_gc AFTER DELETE ON records WHEN old.body_blob IS NOT NULL BEGIN
        DELETE FROM blobs WHERE hash = old.body_blob
            AND NOT EXISTS (SELECT 1 FROM records WHERE body_blob = old.body_blob)
            AND NOT EXISTS (SELECT 1 FROM events WHERE blob = old.body_blob)
            AND NOT EXISTS (SELECT 1 FROM docs WHERE blob = old.body_blob);
    END;
    CREATE TRIGGER events_blob_gc AFTER DELETE ON events WHEN old.blob IS NOT NULL BEGIN
        DELETE FROM blobs WHERE hash = old.blob
            AND NOT EXISTS (SELECT 1 FROM records WHERE body_blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM events WHERE blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM docs WHERE blob = old.blob);
    END;
    CREATE TRIGGER docs_blob_gc AFTER DELETE ON docs WHEN old.blob IS NOT NULL BEGIN
        DELETE FROM blobs WHERE hash = old.blob
            AND NOT EXISTS (SELECT 1 FROM records WHERE body_blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM events WHERE blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM docs WHERE blob = old.blob);
    END;
    CREATE TRIGGER docs_blob_gc_update AFTER UPDATE OF blob ON docs
        WHEN old.blob IS NOT NULL AND old.blob IS NOT new.blob BEGIN
        DELETE FROM blobs WHERE hash = old.blob
            AND NOT EXISTS (SELECT 1 FROM records WHERE body_blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM events WHERE blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM docs WHERE blob = old.blob);
    END;
    CREATE TRIGGER blobs_ad AFTER DELETE ON blobs BEGIN
        DELETE FROM blob_chunks WHERE hash = old.hash;
    END;
    """,
    # v5: an event's position is allocated by the append (one past the table's last position, or
    # past meta.event_position when higher) instead of AUTOINCREMENT, whose sqlite_sequence row
    # was a third page written and fsynced by every append (the event's table page, its
    # (scope, stream, version) index page, sqlite_sequence). The guarantee stays: a position is
    # never handed out twice — ``delete_stream`` raises meta.event_position to the table's last
    # position before it deletes (positions key the task-state cache and are cursors). The table
    # is rebuilt (SQLite cannot drop AUTOINCREMENT in place); legacy_alter_table keeps the
    # RENAME from re-checking the other tables' triggers that name ``events`` while it is gone.
    """
    PRAGMA legacy_alter_table = ON;
    CREATE TABLE events_v5 (
        position INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL, user TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
        stream TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL,
        data TEXT NOT NULL, created_at TEXT NOT NULL, blob TEXT, blob_at TEXT,
        UNIQUE (tenant, user, agent, session, stream, version)
    );
    INSERT INTO events_v5 (position, tenant, user, agent, session, stream, version, type, data,
        created_at, blob, blob_at)
        SELECT position, tenant, user, agent, session, stream, version, type, data, created_at,
        blob, blob_at FROM events;
    INSERT INTO meta (key, value) VALUES ('event_position',
        coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0));
    DROP TABLE events;
    ALTER TABLE events_v5 RENAME TO events;
    CREATE INDEX events_blob ON events (blob) WHERE blob IS NOT NULL;
    CREATE TRIGGER events_blob_gc AFTER DELETE ON events WHEN old.blob IS NOT NULL BEGIN
        DELETE FROM blobs WHERE hash = old.blob
            AND NOT EXISTS (SELECT 1 FROM records WHERE body_blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM events WHERE blob = old.blob)
            AND NOT EXISTS (SELECT 1 FROM docs WHERE blob = old.blob);
    END;
    PRAGMA legacy_alter_table = OFF;
    """,
]

# Data steps run after a migration's script, inside the same transaction (by version).
DATA_STEPS: dict[int, str] = {4: "convert_existing"}

SCHEMA_VERSION = len(MIGRATIONS)


def refuse_newer_schema(path: Path) -> None:
    """Raise SchemaVersionError when the database at `path` has a schema newer than this code.

    Raises:
        SchemaVersionError: the file was migrated by a newer mindpalace (nothing is written).
        StoreError: the file is not a SQLite database, or is another application's (tables but
            no mindpalace schema version; nothing is written).
    """
    if not path.exists():
        return
    # Read-only, and `immutable` when no -wal file exists (the last writer closed cleanly):
    # a plain read-only open of a WAL database would still create -wal/-shm files. A racing
    # writer that creates the WAL right now is caught by the re-check inside migrate().
    wal = Path(f"{path}-wal").exists()
    uri = f"{path.resolve().as_uri()}?mode=ro" + ("" if wal else "&immutable=1")
    try:
        ro = sqlite3.connect(uri, uri=True)
        try:
            names = {r[0] for r in ro.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            found = (
                ro.execute("SELECT max(version) FROM schema_version").fetchone()[0]
                if "schema_version" in names else 0
            )
        finally:
            ro.close()
    except sqlite3.DatabaseError as exc:
        with open(path, "rb") as fh:
            head = fh.read(16)
        if head == b"SQLite format 3\x00" or head == bytes(len(head)):  # ours, damaged / zeroed
            raise store_error(path, exc) from exc  # our format, damaged inside: corrupt
        raise StoreError(f"{path}: not a mindpalace SQLite database ({exc})") from exc
    if names and "schema_version" not in names:  # another application's database: never migrate it
        raise StoreError(
            f"{path}: a SQLite database of another application (tables "
            f"{', '.join(sorted(names)[:5])}); nothing was changed — use another folder"
        )
    if (found or 0) > SCHEMA_VERSION:
        raise SchemaVersionError(str(path), found, SCHEMA_VERSION)


def migrate(conn: sqlite3.Connection, path: Path, fts_tokenizer: str) -> None:
    """Apply the migrations `conn`'s database lacks; the caller holds a write transaction.

    Raises:
        SchemaVersionError: a newer mindpalace migrated the file since the read-only check.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    current = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] or 0
    if current > SCHEMA_VERSION:  # a newer mindpalace migrated since the read-only check
        raise SchemaVersionError(str(path), current, SCHEMA_VERSION)
    for version in range(current + 1, SCHEMA_VERSION + 1):
        script = MIGRATIONS[version - 1].replace("{fts_tokenizer}", fts_tokenizer.replace("'", ""))
        for statement in split_sql(script):
            conn.execute(statement)
        if version in DATA_STEPS:
            from mindpalace.store.sqlite import blobstore  # the data step's code

            getattr(blobstore, DATA_STEPS[version])(conn)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))


def split_sql(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies (BEGIN … END;) whole."""
    statements: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        if not line.strip():
            continue
        buf.append(line)
        joined = "\n".join(buf)
        if line.rstrip().endswith(";") and sqlite3.complete_statement(joined):
            statements.append(joined.strip())
            buf = []
    if buf and "\n".join(buf).strip():
        statements.append("\n".join(buf).strip())
    return statements

"""Schema of the PostgreSQL store: numbered migrations in a version table, applied under an
advisory lock so that many workers starting at once migrate exactly once (I/O-free SQL here,
the applying in :func:`migrate`)."""

from __future__ import annotations

from typing import Any

from mindpalace.errors import SchemaVersionError

SCOPE_COLS = "tenant, user_id, agent, session_id"
_SCOPE_DDL = ('tenant text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, '
              'agent text COLLATE "C" NOT NULL, session_id text COLLATE "C" NOT NULL')

# Position in this list = schema version. Never edit a shipped entry; append a new one.
# Keys and names are COLLATE "C" so that ordering and prefix ranges are code point order on
# any database locale (the protocol orders keys that way).
MIGRATIONS: list[str] = [
    # v1: the whole protocol.
    f"""
    CREATE TEXT SEARCH DICTIONARY mp_english_stem (TEMPLATE = snowball, Language = english);
    CREATE TEXT SEARCH CONFIGURATION mp_english (COPY = english);
    ALTER TEXT SEARCH CONFIGURATION mp_english ALTER MAPPING FOR asciiword, asciihword,
        hword_asciipart, word, hword, hword_part, numword, numhword, hword_numpart
        WITH mp_english_stem;
    CREATE FUNCTION mp_tsv_len(tsvector) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT coalesce(sum(array_length(positions, 1)), 0)::integer FROM unnest($1) $$;
    CREATE TABLE mp_events (
        position bigserial PRIMARY KEY, {_SCOPE_DDL},
        stream text COLLATE "C" NOT NULL, version integer NOT NULL, type text NOT NULL,
        data text NOT NULL, created_at timestamptz NOT NULL,
        UNIQUE (tenant, user_id, agent, session_id, stream, version)
    );
    CREATE TABLE mp_records (
        id bigserial PRIMARY KEY, {_SCOPE_DDL},
        name text COLLATE "C" NOT NULL, type text NOT NULL, step_id integer,
        description text NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL,
        meta text NOT NULL,
        UNIQUE (tenant, user_id, agent, session_id, name)
    );
    CREATE INDEX mp_records_type ON mp_records (tenant, user_id, agent, session_id, type);
    CREATE TABLE mp_kv (
        {_SCOPE_DDL}, namespace text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
        value text NOT NULL, updated_at timestamptz NOT NULL,
        PRIMARY KEY (tenant, user_id, agent, session_id, namespace, key)
    );
    CREATE INDEX mp_kv_namespace ON mp_kv (tenant, namespace, key);
    CREATE TABLE mp_docs (
        id bigserial PRIMARY KEY, {_SCOPE_DDL},
        kind text COLLATE "C" NOT NULL, ref text COLLATE "C" NOT NULL, text text NOT NULL,
        search_text text NOT NULL, meta text NOT NULL, created_at timestamptz NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('mp_english', search_text)) STORED,
        doc_len integer GENERATED ALWAYS AS
            (mp_tsv_len(to_tsvector('mp_english', search_text))) STORED,
        UNIQUE (tenant, user_id, agent, session_id, kind, ref)
    );
    CREATE INDEX mp_docs_tenant_user ON mp_docs (tenant, user_id, kind);
    CREATE INDEX mp_docs_tsv ON mp_docs USING gin (tsv);
    CREATE INDEX mp_docs_trgm ON mp_docs USING gin (text gin_trgm_ops);
    CREATE TABLE mp_models (model text COLLATE "C" PRIMARY KEY, dim integer NOT NULL);
    CREATE TABLE mp_embeddings (
        doc_id bigint NOT NULL REFERENCES mp_docs (id) ON DELETE CASCADE,
        model text COLLATE "C" NOT NULL REFERENCES mp_models (model) ON DELETE CASCADE,
        chunk integer NOT NULL, vector vector NOT NULL,
        PRIMARY KEY (model, doc_id, chunk)
    );
    CREATE INDEX mp_embeddings_doc ON mp_embeddings (doc_id);
    CREATE TABLE mp_meta (key text PRIMARY KEY, value bigint NOT NULL);
    INSERT INTO mp_meta (key, value) VALUES ('search_generation', 0);
    """,
    # v2: large texts stored once (mindpalace.store.blobs, .postgres.blobstore): a record body
    # and an event's big JSON string refer to one compressed, content-addressed blob, deleted
    # with its last reference. Existing large rows are converted by the migration's data step.
    """
    CREATE TABLE mp_blobs (
        hash text COLLATE "C" PRIMARY KEY, chars bigint NOT NULL, chunk_chars integer NOT NULL
    );
    CREATE TABLE mp_blob_chunks (
        hash text COLLATE "C" NOT NULL REFERENCES mp_blobs (hash) ON DELETE CASCADE,
        seq integer NOT NULL, codec smallint NOT NULL, data bytea NOT NULL,
        PRIMARY KEY (hash, seq)
    );
    ALTER TABLE mp_blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
    ALTER TABLE mp_records ADD COLUMN body_blob text COLLATE "C" REFERENCES mp_blobs (hash);
    ALTER TABLE mp_events ADD COLUMN blob text COLLATE "C" REFERENCES mp_blobs (hash);
    ALTER TABLE mp_events ADD COLUMN blob_at text;
    CREATE INDEX mp_records_blob ON mp_records (body_blob) WHERE body_blob IS NOT NULL;
    CREATE INDEX mp_events_blob ON mp_events (blob) WHERE blob IS NOT NULL;
    CREATE FUNCTION mp_blob_release(h text) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock(hashtext(current_schema() || ':mp_blob:' || h));
        DELETE FROM mp_blobs WHERE hash = h
            AND NOT EXISTS (SELECT 1 FROM mp_records WHERE body_blob = h)
            AND NOT EXISTS (SELECT 1 FROM mp_events WHERE blob = h);
    END $$;
    CREATE FUNCTION mp_records_blob_gc() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.body_blob IS NOT NULL THEN PERFORM mp_blob_release(OLD.body_blob); END IF;
        RETURN NULL;
    END $$;
    CREATE FUNCTION mp_events_blob_gc() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.blob IS NOT NULL THEN PERFORM mp_blob_release(OLD.blob); END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER mp_records_blob_gc AFTER DELETE OR UPDATE OF body_blob ON mp_records
        FOR EACH ROW EXECUTE FUNCTION mp_records_blob_gc();
    CREATE TRIGGER mp_events_blob_gc AFTER DELETE OR UPDATE OF blob ON mp_events
        FOR EACH ROW EXECUTE FUNCTION mp_events_blob_gc();
    """,
]

# Data steps run after a migration's script, in the same transaction (by version).
DATA_STEPS: dict[int, str] = {2: "convert_existing"}

SCHEMA_VERSION = len(MIGRATIONS)

EXTENSIONS = ("vector", "pg_trgm")


def hnsw_index_sql(index: str, model_literal: str, dim: int) -> str:
    """The HNSW cosine index of one model's vectors: pgvector indexes a fixed width, so each
    model gets a partial expression index at its own width, made on its first vectors."""
    return (f"CREATE INDEX IF NOT EXISTS {index} ON mp_embeddings USING hnsw "
            f"((vector::vector({int(dim)})) vector_cosine_ops) WHERE model = {model_literal}")


def migrate(conn: Any, where: str) -> None:
    """Apply the migrations the database lacks, in one transaction under an advisory lock
    (a second worker waits, then finds them applied).

    Raises:
        SchemaVersionError: the database was migrated by a newer mindpalace (nothing written).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':migrate'))")
        for ext in EXTENSIONS:
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = %s", (ext,)).fetchone() is None:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        conn.execute("CREATE TABLE IF NOT EXISTS mp_schema_version "
                     "(version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        current = conn.execute("SELECT max(version) FROM mp_schema_version").fetchone()[0] or 0
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(where, current, SCHEMA_VERSION)
        for version in range(current + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[version - 1])
            if version in DATA_STEPS:
                from mindpalace.store.postgres import blobstore  # the data step's code

                getattr(blobstore, DATA_STEPS[version])(conn)
            conn.execute("INSERT INTO mp_schema_version (version) VALUES (%s)", (version,))

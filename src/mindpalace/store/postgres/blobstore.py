"""Large texts of the PostgreSQL store, stored once (see :mod:`mindpalace.store.blobs`).

Tables (schema v2): ``mp_blobs (hash, chars, chunk_chars)`` and ``mp_blob_chunks (hash, seq,
codec, data bytea)``, chunks compressed by :mod:`mindpalace.store.blobs` (zlib where it saves
space) and stored ``EXTERNAL`` (TOAST does not compress them again). A record body refers to
its blob by ``mp_records.body_blob``; an event's JSON by ``mp_events.blob`` (+ ``blob_at``, the
cut offsets). A blob is deleted, in the same transaction, by the trigger of the statement that
removes its last reference (``mp_blob_gc``). Writer and collector take the blob's advisory
lock, so a concurrent transaction adding a reference to the blob never sees it collected.

Search documents keep their bounded parts' text inline here (PostgreSQL compresses each
part's TOASTed text itself; the ``tsv`` column and both GIN indexes are built from it).
"""

from __future__ import annotations

from typing import Any

from mindpalace.store.blobs import CHUNK_CHARS, decode_chunk, encode_chunks

LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':mp_blob:' || %s))"
"""The blob's advisory lock (taken by :func:`put_blob` and by the collecting trigger)."""


def put_blob(conn: Any, key: str, text: str) -> None:
    """Store `text` under `key` (= :func:`~mindpalace.store.blobs.blob_key`) unless it is
    there (inside the caller's transaction, holding the blob's lock until it ends)."""
    conn.execute(LOCK, (key,))
    made = conn.execute(
        "INSERT INTO mp_blobs (hash, chars, chunk_chars) VALUES (%s, %s, %s) "
        "ON CONFLICT (hash) DO NOTHING RETURNING hash", (key, len(text), CHUNK_CHARS),
    ).fetchone()
    if made is None:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO mp_blob_chunks (hash, seq, codec, data) VALUES (%s, %s, %s, %s)",
            [(key, seq, codec, data) for seq, codec, data in encode_chunks(text, CHUNK_CHARS)],
        )


def read_text(conn: Any, key: str) -> str:
    """The whole text of blob `key`.

    Raises:
        LookupError: the blob or a chunk is missing (a damaged database).
        ValueError: a chunk cannot be decoded.
    """
    row = conn.execute("SELECT chars, chunk_chars FROM mp_blobs WHERE hash = %s", (key,)).fetchone()
    if row is None:
        raise LookupError(f"blob {key} is missing")
    chunks = conn.execute(
        "SELECT seq, codec, data FROM mp_blob_chunks WHERE hash = %s ORDER BY seq", (key,)
    ).fetchall()
    expected = -(-int(row[0]) // int(row[1]))
    if [int(c[0]) for c in chunks] != list(range(expected)):
        raise LookupError(f"blob {key} is missing chunks")
    return "".join(decode_chunk(int(c[1]), bytes(c[2])) for c in chunks)


def convert_existing(conn: Any) -> None:
    """Move every existing large record body and event JSON into blobs (schema v2's data
    step, inside the migration's transaction)."""
    import json

    from mindpalace.store.blobs import BLOB_MIN_CHARS, blob_key, split_json

    for rid, body in conn.execute(
        "SELECT id, body FROM mp_records WHERE length(body) >= %s", (BLOB_MIN_CHARS,)
    ).fetchall():
        key = blob_key(body)
        if key is not None:
            put_blob(conn, key, body)
            conn.execute("UPDATE mp_records SET body = '', body_blob = %s WHERE id = %s",
                         (key, rid))
    for position, data in conn.execute(
        "SELECT position, data FROM mp_events WHERE length(data) >= %s", (BLOB_MIN_CHARS,)
    ).fetchall():
        split = split_json(json.loads(data), data)
        if split is not None:
            put_blob(conn, split.key, split.text)
            conn.execute(
                "UPDATE mp_events SET data = %s, blob = %s, blob_at = %s WHERE position = %s",
                (split.rest, split.key, json.dumps(list(split.offsets)), position),
            )

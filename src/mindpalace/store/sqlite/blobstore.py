"""Large texts of the SQLite store, stored once (see :mod:`mindpalace.store.blobs`).

Tables (schema v4): ``blobs (hash, chars, chunk_chars)`` and ``blob_chunks (hash, seq, codec,
data)``. Rows refer to a blob by its hash: ``records.body_blob``, ``events.blob`` (with
``events.blob_at``, the JSON offsets) and ``docs.blob`` (with ``blob_at``, ``blob_off``,
``blob_len``, the part's view). A blob is deleted, in the same transaction, by the trigger of
the statement that removes its last reference (schema v4's ``*_blob_gc`` triggers).

The FTS5 indexes of a part that views a blob are written here, not by the ``docs`` triggers
(those skip rows with a blob: the row does not hold the text they would index).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from mindpalace.store.blobs import (
    BLOB_MIN_CHARS,
    CHUNK_CHARS,
    PartView,
    blob_key,
    chunk_span,
    decode_chunk,
    encode_chunks,
    part_views,
    view_text,
)
from mindpalace.store.textindex import segment_for_index

VIEW_COLS = "blob, blob_at, blob_off, blob_len"
"""The ``docs`` columns of a part's view of a blob (all NULL for a part stored inline)."""


class ChunkCache:
    """Decoded chunks, least recently used first out. Content-addressed, so an entry is never
    stale: a hash names one text forever."""

    def __init__(self, max_chunks: int = 64) -> None:
        self._max = max_chunks
        self._items: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> str | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, int], text: str) -> None:
        with self._lock:
            self._items[key] = text
            self._items.move_to_end(key)
            while len(self._items) > self._max:
                self._items.popitem(last=False)


def put_blob(conn: sqlite3.Connection, key: str, text: str) -> None:
    """Store `text` under `key` (= :func:`blob_key`) unless it is there already (inside the
    caller's write transaction)."""
    if conn.execute("SELECT 1 FROM blobs WHERE hash = ?", (key,)).fetchone() is not None:
        return
    conn.execute(
        "INSERT INTO blobs (hash, chars, chunk_chars) VALUES (?, ?, ?)",
        (key, len(text), CHUNK_CHARS),
    )
    conn.executemany(
        "INSERT INTO blob_chunks (hash, seq, codec, data) VALUES (?, ?, ?, ?)",
        ((key, seq, codec, data) for seq, codec, data in encode_chunks(text, CHUNK_CHARS)),
    )


def read_slice(
    conn: sqlite3.Connection, key: str, start: int, length: int, cache: ChunkCache | None = None
) -> str:
    """Characters [start, start + length) of blob `key`; the whole text with start = 0 and
    length = -1.

    Raises:
        LookupError: no such blob (a dangling reference: the database is damaged).
        ValueError: a chunk cannot be decoded.
    """
    row = conn.execute("SELECT chars, chunk_chars FROM blobs WHERE hash = ?", (key,)).fetchone()
    if row is None:
        raise LookupError(f"blob {key} is missing")
    chars, chunk_chars = int(row[0]), int(row[1])
    if length < 0:
        length = chars - start
    if length <= 0:
        return ""
    first, last = chunk_span(start, length, chunk_chars)
    texts: dict[int, str] = {}
    missing = []
    for seq in range(first, last + 1):
        hit = cache.get((key, seq)) if cache is not None else None
        if hit is None:
            missing.append(seq)
        else:
            texts[seq] = hit
    if missing:
        for seq, codec, data in conn.execute(
            "SELECT seq, codec, data FROM blob_chunks WHERE hash = ? AND seq BETWEEN ? AND ?",
            (key, missing[0], missing[-1]),
        ):
            if seq in texts:
                continue
            texts[seq] = text = decode_chunk(int(codec), data)
            if cache is not None and last - first < 8:  # a part's read, not a whole text's
                cache.put((key, seq), text)
    if len(texts) != last - first + 1:
        raise LookupError(f"blob {key} is missing chunks")
    joined = "".join(texts[s] for s in range(first, last + 1))
    offset = start - first * chunk_chars
    return joined[offset:offset + length]


def find_blob(text: str, candidates: Iterable[tuple[str, str]]) -> tuple[str, str, int] | None:
    """The longest of `candidates` ((key, text) of blobs written in this transaction) that
    occurs in `text`: (key, its text, position); None when none does."""
    best: tuple[str, str, int] | None = None
    for key, big in candidates:
        if len(big) > len(text) or (best is not None and len(big) <= len(best[1])):
            continue
        at = text.find(big)
        if at >= 0:
            best = (key, big, at)
    return best


def document_views(
    conn: sqlite3.Connection, text: str, parts: Sequence[str],
    candidates: Iterable[tuple[str, str]],
) -> tuple[list[PartView | None], tuple[str, str] | None]:
    """The views of a document's `parts` (consecutive pieces of `text`) on a blob, storing the
    blob first when it is new: a blob written in this transaction that `text` holds (a record
    body, a message's content), else `text` itself when it is long enough; ``([None, …],
    None)`` when `text` stays inline. Also returns (key, blob text) of the blob used."""
    if len(text) < BLOB_MIN_CHARS:
        return [None] * len(parts), None
    found = find_blob(text, candidates)
    if found is None:
        key = blob_key(text)
        if key is None:
            return [None] * len(parts), None
        put_blob(conn, key, text)
        found = (key, text, 0)
    key, big, at = found
    return part_views(list(parts), at, len(big)), (key, big)


def index_view_part(conn: sqlite3.Connection, doc_id: int, text: str) -> None:
    """Add a blob-viewing part's text to the FTS5 indexes (the ``docs`` triggers skip it)."""
    conn.execute(
        "INSERT INTO docs_fts (rowid, search_text) VALUES (?, ?)", (doc_id, segment_for_index(text))
    )
    conn.execute("INSERT INTO docs_tri (rowid, text) VALUES (?, ?)", (doc_id, text))


def unindex_view_part(conn: sqlite3.Connection, doc_id: int, text: str) -> None:
    """Remove a blob-viewing part's text from the FTS5 indexes (external-content 'delete':
    the exact values that were indexed)."""
    conn.execute(
        "INSERT INTO docs_fts (docs_fts, rowid, search_text) VALUES ('delete', ?, ?)",
        (doc_id, segment_for_index(text)),
    )
    conn.execute(
        "INSERT INTO docs_tri (docs_tri, rowid, text) VALUES ('delete', ?, ?)", (doc_id, text)
    )


def row_text(
    conn: sqlite3.Connection, row: sqlite3.Row, cache: ChunkCache | None = None
) -> str:
    """The text of a ``docs`` row that has :data:`VIEW_COLS` (its own text when inline)."""
    if row["blob"] is None:
        return str(row["text"])
    piece = read_slice(conn, row["blob"], int(row["blob_off"]), int(row["blob_len"]), cache)
    return view_text(row["text"], int(row["blob_at"]), piece)


# -- migration v4: existing large rows become blobs --------------------------------------------
def convert_existing(conn: sqlite3.Connection) -> None:
    """Move every existing large record body, event JSON and document text into blobs (the
    schema-v4 migration's data step, inside its transaction). Long document texts are
    reassembled from their parts; a part viewing a record's or event's blob of the same scope
    shares it. Reads every large row once; the FTS5 entries of converted parts stay as they
    are (their text does not change).

    Search text: a converted part's ``search_text`` column is emptied like a new part's; its
    FTS5 rows were built from the segmented text, which :func:`unindex_view_part` rebuilds
    from the view when the part is deleted or changed."""
    previous = conn.row_factory
    conn.row_factory = sqlite3.Row
    try:
        _convert(conn)
    finally:
        conn.row_factory = previous


def _convert(conn: sqlite3.Connection) -> None:
    from mindpalace.store.blobs import split_json  # local: only the migration needs it

    by_scope: dict[tuple[str, ...], dict[str, str]] = {}
    rows = conn.execute(
        "SELECT id, tenant, user, agent, session, body FROM records WHERE length(body) >= ?",
        (BLOB_MIN_CHARS,),
    ).fetchall()
    for r in rows:
        key = blob_key(r["body"])
        if key is None:
            continue
        put_blob(conn, key, r["body"])
        conn.execute("UPDATE records SET body = '', body_blob = ? WHERE id = ?", (key, r["id"]))
        by_scope.setdefault(tuple(r)[1:5], {})[key] = r["body"]
    rows = conn.execute(
        "SELECT position, tenant, user, agent, session, data FROM events WHERE length(data) >= ?",
        (BLOB_MIN_CHARS,),
    ).fetchall()
    for r in rows:
        split = split_json(json.loads(r["data"]), r["data"])
        if split is None:
            continue
        put_blob(conn, split.key, split.text)
        conn.execute(
            "UPDATE events SET data = ?, blob = ?, blob_at = ? WHERE position = ?",
            (split.rest, split.key, json.dumps(list(split.offsets)), r["position"]),
        )
        by_scope.setdefault(tuple(r)[1:5], {})[split.key] = split.text
    _convert_documents(conn, by_scope)


def _convert_documents(
    conn: sqlite3.Connection, by_scope: dict[tuple[str, ...], dict[str, str]]
) -> None:
    # The text of a converted part does not change, so its FTS5 entries stay as they are:
    # the update trigger (which would delete them, leaving delete markers in the indexes) is
    # set aside while the rows are rewritten, and made again from its own SQL.
    trigger = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                           "AND name = 'docs_au'").fetchone()[0]
    conn.execute("DROP TRIGGER docs_au")
    try:
        _convert_parts(conn, by_scope)
    finally:
        conn.execute(trigger)


def _convert_parts(
    conn: sqlite3.Connection, by_scope: dict[tuple[str, ...], dict[str, str]]
) -> None:
    heads = conn.execute(
        "SELECT id, tenant, user, agent, session, kind, ref, text, meta FROM docs "
        "WHERE json_extract(meta, '$.part') = 1 OR length(text) >= ?",
        (BLOB_MIN_CHARS,),
    ).fetchall()
    for head in heads:
        meta = json.loads(head["meta"])
        scope = tuple(head)[1:5]
        ids, texts = [int(head["id"])], [str(head["text"])]
        parts = int(meta.get("parts", 1)) if "of" in meta else 1
        if parts > 1:
            refs = [f"{head['ref']}#part{i}" for i in range(2, parts + 1)]
            found = {}
            for i in range(0, len(refs), 500):
                chunk = refs[i:i + 500]
                for r in conn.execute(
                    "SELECT id, ref, text FROM docs WHERE tenant = ? AND user = ? AND agent = ? "
                    f"AND session = ? AND kind = ? AND ref IN ({','.join('?' * len(chunk))})",
                    (*scope, head["kind"], *chunk),
                ):
                    found[r["ref"]] = (int(r["id"]), str(r["text"]))
            if len(found) != len(refs):  # an incomplete set of parts: leave it as it is
                continue
            for ref in refs:
                ids.append(found[ref][0])
                texts.append(found[ref][1])
        text = "".join(texts)
        views, used = document_views(conn, text, texts, by_scope.get(scope, {}).items())
        if used is None:
            continue
        for doc_id, view in zip(ids, views, strict=True):
            if view is None:
                continue
            conn.execute(
                f"UPDATE docs SET text = ?, search_text = '', ({VIEW_COLS}) = (?, ?, ?, ?) "
                "WHERE id = ?",
                (view.stored, *view_values(used[0], view), doc_id),
            )


def view_values(key: str, view: PartView | None) -> tuple[str | None, int | None, int | None,
                                                         int | None]:
    """The :data:`VIEW_COLS` values of a part (all None when it is stored inline)."""
    if view is None:
        return None, None, None, None
    return key, view.at, view.offset, view.length

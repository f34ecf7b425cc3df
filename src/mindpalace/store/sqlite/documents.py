"""Search documents of the SQLite store: writing, reading and the search generation."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from mindpalace.scope import Scope
from mindpalace.store.base import Document
from mindpalace.store.blobs import PartView
from mindpalace.store.inputs import (
    PART_SEPARATOR,
    document_parts,
    part_ref,
    stored_part_count,
)
from mindpalace.store.sqlite.blobstore import (
    VIEW_COLS,
    document_views,
    index_view_part,
    row_text,
    unindex_view_part,
    view_values,
)
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import DOC_COLS, dumps, inserted_id, scope_where
from mindpalace.store.sqlite.schema import SCOPE_COLS
from mindpalace.store.textindex import segment_for_index
from mindpalace.textsafe import require_text
from mindpalace.timeutil import to_iso, utcnow

_PART_END = PART_SEPARATOR[:-1] + chr(ord(PART_SEPARATOR[-1]) + 1)  # just above every part ref


class DocumentsMixin(SQLiteBase):
    """The search-document part of the store protocol (triggers keep the FTS5 indexes in step;
    searching is in the keyword-search and embeddings parts)."""

    def index_document(
        self, scope: Scope, kind: str, ref: str, text: str, meta: dict[str, Any] | None = None
    ) -> int:
        scope.require_concrete()
        require_text("document.kind", kind, allow_empty=False)
        require_text("document.ref", ref, allow_empty=False)
        require_text("document.text", text)
        parts = document_parts(ref, text, meta)
        with self.transaction():
            # A long text is stored once: its parts view a blob (one this transaction wrote
            # that the text holds — a record body, a message's content — or the text's own).
            views, used = document_views(
                self._conn(), text, [t for _, t, _ in parts], self._blob_candidates()
            )
            key = used[0] if used is not None else ""
            done = [
                self._index_part(scope, kind, r, t, dumps(m), key, view)
                for (r, t, m), view in zip(parts, views, strict=True)
            ]
            if done[0][1] > len(parts):  # parts of a longer earlier text, past the new count
                stale = [part_ref(ref, i) for i in range(len(parts) + 1, done[0][1] + 1)]
                gone: list[int] = []
                for i in range(0, len(stale), 500):  # SQLite's bound-parameter limit
                    chunk = stale[i:i + 500]
                    where = (
                        "tenant = ? AND user = ? AND agent = ? AND session = ? AND kind = ? "
                        f"AND ref IN ({','.join('?' * len(chunk))})"
                    )
                    gone += self._delete_docs(where, (*scope.values(), kind, *chunk))
                self._bump_generation()
                if gone:  # the in-process indexes of this process drop them (no rebuild)
                    self._bump_index_generation(removed_docs=gone)
            return done[0][0]

    def _index_part(
        self, scope: Scope, kind: str, ref: str, text: str, meta_json: str,
        key: str = "", view: PartView | None = None,
    ) -> tuple[int, int]:
        """One part (inside the caller's transaction): (document id, how many parts the text
        it replaces had; 1 for a new document). With `view`, the row holds only the part's
        characters outside blob `key` and the FTS5 entries are written here (the triggers
        skip rows with a blob)."""
        row = self._execute(
            f"SELECT id, text, meta, {VIEW_COLS} FROM docs WHERE tenant = ? AND user = ? "
            "AND agent = ? AND session = ? AND kind = ? AND ref = ?",
            (*scope.values(), kind, ref),
        ).fetchone()
        stored = (text, segment_for_index(text)) if view is None else (view.stored, "")
        cols = view_values(key, view)
        conn = self._conn()
        if row is not None:
            old = row_text(conn, row, self._chunk_cache)
            if old != text:
                self._execute("DELETE FROM embeddings WHERE doc_id = ?", (row["id"],))
                self._bump_generation()
                self._bump_index_generation()  # postings change in place: rebuild
            elif row["meta"] != meta_json:  # a changed document: readers' caches must see it
                self._bump_generation()
                self._bump_doc_generation()
            same_view = row["blob"] is not None and tuple(row[c] for c in (
                "blob", "blob_at", "blob_off", "blob_len")) == cols and row["text"] == stored[0]
            if row["blob"] is not None and not same_view:
                unindex_view_part(conn, int(row["id"]), old)
            self._execute(
                f"UPDATE docs SET text = ?, search_text = ?, meta = ?, ({VIEW_COLS}) = "
                "(?, ?, ?, ?) WHERE id = ?",
                (*stored, meta_json, *cols, row["id"]),
            )
            if view is not None and not same_view:
                index_view_part(conn, int(row["id"]), text)
            return int(row["id"]), stored_part_count(json.loads(row["meta"]))
        cur = self._execute(
            f"INSERT INTO docs ({SCOPE_COLS}, kind, ref, text, search_text, meta, created_at, "
            f"{VIEW_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*scope.values(), kind, ref, *stored, meta_json, to_iso(utcnow()), *cols),
        )
        doc_id = inserted_id(cur)
        if view is not None:
            index_view_part(conn, doc_id, text)
        return doc_id, 1

    def delete_documents(self, scope: Scope, kind: str, refs: Sequence[str]) -> int:
        scope.require_concrete()
        if not refs:
            return 0
        marks = ",".join("?" * len(refs))
        where = (
            "tenant = ? AND user = ? AND agent = ? AND session = ? "
            f"AND kind = ? AND ref IN ({marks})"
        )
        params = (*scope.values(), kind, *refs)
        with self.transaction():
            # the bounded parts 2..n of a long text (inputs.document_parts) go with it
            # one ref's parts sort between "ref#part" and "ref#paru": a range of the unique
            # (scope, kind, ref) index per ref, not a scan of every document of the kind
            parts_where = (
                "tenant = ? AND user = ? AND agent = ? AND session = ? AND kind = ? "
                "AND ref > ? AND ref < ? AND instr(ref, ?) > 0 "
                "AND substr(ref, 1, instr(ref, ?) - 1) = ?"
            )
            deleted = self._delete_docs(where, params)
            gone = list(deleted)
            for ref in dict.fromkeys(refs):
                gone += self._delete_docs(parts_where, (
                    *scope.values(), kind, ref + PART_SEPARATOR, ref + _PART_END,
                    PART_SEPARATOR, PART_SEPARATOR, ref,
                ))
            self._bump_generation()
            if gone:  # the in-process indexes of this process drop them (no rebuild)
                self._bump_index_generation(removed_docs=gone)
            return len(deleted)

    def _delete_docs(self, where: str, params: Sequence[object]) -> list[int]:
        """Delete the documents matching `where` (inside the caller's transaction) and return
        their ids, read by the DELETE itself, for the in-process indexes to drop. The FTS5
        entries of parts that view a blob are removed here (the triggers skip them)."""
        conn = self._conn()
        for row in self._execute(
            f"SELECT id, text, {VIEW_COLS} FROM docs WHERE ({where}) AND blob IS NOT NULL", params
        ).fetchall():
            unindex_view_part(conn, int(row["id"]), row_text(conn, row, self._chunk_cache))
        return [r[0] for r in self._execute(f"DELETE FROM docs WHERE {where} RETURNING id", params)]

    def get_documents_by_ref(
        self, scope: Scope, kind: str, refs: Sequence[str]
    ) -> dict[str, Document]:
        scope.require_concrete()
        out: dict[str, Document] = {}
        refs = list(refs)
        for i in range(0, len(refs), 500):  # stay under SQLite's bound-parameter limit
            chunk = refs[i : i + 500]
            rows = self._execute(
                f"SELECT {DOC_COLS} FROM docs WHERE tenant = ? AND user = ? AND agent = ? "
                f"AND session = ? AND kind = ? AND ref IN ({','.join('?' * len(chunk))})",
                (*scope.values(), kind, *chunk),
            )
            for r in rows:
                out[r["ref"]] = self._doc(r)
        return out

    def get_documents_by_refs(
        self, kind: str, keys: Sequence[tuple[Scope, str]]
    ) -> dict[tuple[Scope, str], Document]:
        # One statement for every scope: the keys travel as one JSON array and each is looked
        # up through the (scope, kind, ref) unique index.
        rows = [[*s.require_concrete().values(), ref] for s, ref in keys]
        if not rows:
            return {}
        cols = ", ".join(f"d.{c.strip()}" for c in DOC_COLS.split(","))
        found = self._execute(
            "WITH k(t, u, a, s, r) AS (SELECT json_extract(value, '$[0]'), "
            "json_extract(value, '$[1]'), json_extract(value, '$[2]'), "
            "json_extract(value, '$[3]'), json_extract(value, '$[4]') FROM json_each(?)) "
            f"SELECT {cols} FROM k JOIN docs d ON d.tenant = k.t AND d.user = k.u "
            "AND d.agent = k.a AND d.session = k.s AND d.kind = ? AND d.ref = k.r",
            (dumps(rows), kind),
        )
        out: dict[tuple[Scope, str], Document] = {}
        for r in found:
            doc = self._doc(r)
            out[(doc.scope, doc.ref)] = doc
        return out

    def has_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> bool:
        where, params = scope_where(scope)
        sql = f"SELECT 1 FROM docs WHERE {where or '1'}"
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        return self._execute(sql + " LIMIT 1", params).fetchone() is not None

    def search_generation(self) -> object:
        # AUTOINCREMENT ids never repeat, so (max id, embedding generation) moves on every
        # insert, text change, delete (which bumps the generation) and embedding write/drop.
        row = self._execute(
            "SELECT (SELECT max(id) FROM docs), "
            "(SELECT value FROM meta WHERE key = 'embedding_generation')"
        ).fetchone()
        return (row[0] or 0, int(row[1]))

    def last_document_id(self) -> int:
        return int(self._execute("SELECT coalesce(max(id), 0) FROM docs").fetchone()[0])

    def append_only_generation(self) -> object:
        # Writers are serialised, so AUTOINCREMENT ids commit in increasing order. This
        # process's deletions (the removal log's steps) leave every remaining document its
        # vectors, so they do not count: a superseded fact no longer makes the next recall
        # scan every document for missing vectors (0.6 s at 100k facts).
        return self.removals.origin(self._index_generation())

    def iter_documents(
        self, scope: Scope, *, kinds: Sequence[str] | None = None
    ) -> Iterator[Document]:
        where, params = scope_where(scope)
        sql = f"SELECT {DOC_COLS} FROM docs WHERE {where}"
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        last = 0
        while True:
            rows = self._execute(
                sql + " AND id > ? ORDER BY id LIMIT 1000", [*params, last]
            ).fetchall()
            if not rows:
                return
            for r in rows:
                yield self._doc(r)
            last = rows[-1]["id"]

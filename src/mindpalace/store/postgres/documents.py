"""Search documents of the PostgreSQL store: writing, reading and keyword search.

The word index is a ``tsvector`` column (text search configuration ``mp_english``: the
default parser, the English Snowball stemmer, no stop words — like FTS5's ``porter
unicode61``) over the text with CJK runs as overlapping bigrams
(:func:`~mindpalace.store.textindex.segment_for_index`, the same segmentation as SQLite), under
a GIN index. BM25 is scored in numpy (:func:`~mindpalace.store.bm25.score_postings`) from the
postings PostgreSQL returns for the query's lexemes — term frequencies from the tsvector's
positions, document lengths from a stored column, N and the average length counted over the
searched scope only — so scores follow the same formula and scope rule as SQLite's. Tokens
differ in details (Snowball's Porter2 against FTS5's Porter; a hyphenated word also yields
its parts), so scores may differ slightly between backends; the order rules of the
conformance suite hold on both. Substrings of 3+ characters use ``pg_trgm``'s GIN index
(``ILIKE``), a 1–2 character query a scoped ``strpos`` scan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mindpalace.scope import Scope
from mindpalace.store.base import Document, SearchHit
from mindpalace.store.bm25 import score_postings, top_k
from mindpalace.store.codec import dumps
from mindpalace.store.inputs import (
    PART_SEPARATOR,
    document_parts,
    part_ref,
    stored_part_count,
)
from mindpalace.store.postgres.connection import PostgresBase, exact_scope, scope_of, scope_where
from mindpalace.store.postgres.schema import SCOPE_COLS
from mindpalace.store.textindex import query_terms, segment_for_index
from mindpalace.textsafe import require_text
from mindpalace.timeutil import utcnow

DOC_COLS = f"id, {SCOPE_COLS}, kind, ref, text, meta, created_at"
_DOC_COLS_D = ", ".join(f"d.{c.strip()}" for c in DOC_COLS.split(","))
_LEXEMES = ("SELECT q.i, u.lexeme FROM unnest(%s::text[]) WITH ORDINALITY AS q(t, i), "
            "LATERAL unnest(to_tsvector('mp_english', q.t)) AS u "
            "ORDER BY q.i, u.positions[1]")


def doc_of(r: Sequence[Any]) -> Document:
    return Document(int(r[0]), scope_of(r, 1), r[5], r[6], r[7], json.loads(r[8]), r[9])


def _tsquery(lexemes: Sequence[str]) -> str:
    """An OR tsquery of exact lexemes (quoted: user text is never query syntax)."""
    return " | ".join("'" + lx.replace("\\", "\\\\").replace("'", "''") + "'" for lx in lexemes)


def _like(chunk: str) -> str:
    return "%" + re.sub(r"([\\%_])", r"\\\1", chunk) + "%"


class DocumentsMixin(PostgresBase):
    """The search-document part of the store protocol (vectors are in the embeddings part)."""

    _lexeme_cache: dict[str, tuple[str, ...]]

    def index_document(
        self, scope: Scope, kind: str, ref: str, text: str, meta: dict[str, Any] | None = None
    ) -> int:
        where, params = exact_scope(scope)
        require_text("document.kind", kind, allow_empty=False)
        require_text("document.ref", ref, allow_empty=False)
        require_text("document.text", text)
        parts = document_parts(ref, text, meta)
        with self._tx(serialize=False) as conn:
            self._xact_lock(conn, "doc", *scope.values(), kind, ref)
            done = [self._index_part(conn, scope, kind, r, t, dumps(m)) for r, t, m in parts]
            if done[0][1] > len(parts):  # parts of a longer earlier text, past the new count
                stale = [part_ref(ref, i) for i in range(len(parts) + 1, done[0][1] + 1)]
                conn.execute(f"DELETE FROM mp_docs WHERE {where} AND kind = %s AND ref = ANY(%s)",
                             [*params, kind, stale])
            self._bump_generation(conn)
            return done[0][0]

    def _index_part(
        self, conn: Any, scope: Scope, kind: str, ref: str, text: str, meta_json: str
    ) -> tuple[int, int]:
        """One part (inside the caller's transaction): (document id, how many parts the text
        it replaces had; 1 for a new document)."""
        where, params = exact_scope(scope)
        row = conn.execute(f"SELECT id, text, meta FROM mp_docs WHERE {where} AND kind = %s "
                           "AND ref = %s", [*params, kind, ref]).fetchone()
        if row is not None:
            if row[1] != text:
                conn.execute("DELETE FROM mp_embeddings WHERE doc_id = %s", (row[0],))
            conn.execute("UPDATE mp_docs SET text = %s, search_text = %s, meta = %s "
                         "WHERE id = %s", (text, segment_for_index(text), meta_json, row[0]))
            return int(row[0]), stored_part_count(json.loads(row[2]))
        new = conn.execute(
            f"INSERT INTO mp_docs ({SCOPE_COLS}, kind, ref, text, search_text, meta, "
            "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (*scope.values(), kind, ref, text, segment_for_index(text), meta_json, utcnow()),
        ).fetchone()
        assert new is not None
        return int(new[0]), 1

    def delete_documents(self, scope: Scope, kind: str, refs: Sequence[str]) -> int:
        where, params = exact_scope(scope)
        if not refs:
            return 0
        with self._tx(serialize=False) as conn:
            n = conn.execute(f"DELETE FROM mp_docs WHERE {where} AND kind = %s AND ref = ANY(%s)",
                             [*params, kind, list(refs)]).rowcount
            # the bounded parts 2..n of a long text (inputs.document_parts) go with it
            conn.execute(f"DELETE FROM mp_docs WHERE {where} AND kind = %s AND strpos(ref, %s) > 0 "
                         "AND split_part(ref, %s, 1) = ANY(%s)",
                         [*params, kind, PART_SEPARATOR, PART_SEPARATOR, list(refs)])
            self._bump_generation(conn)
        return n

    def get_documents(self, ids: Sequence[int]) -> dict[int, Document]:
        """Documents by id (ids not found are absent); the search parts use it for hits."""
        if not ids:
            return {}
        rows = self._all(f"SELECT {DOC_COLS} FROM mp_docs WHERE id = ANY(%s)",
                         ([int(i) for i in ids],))
        return {int(r[0]): doc_of(r) for r in rows}

    def get_documents_by_ref(
        self, scope: Scope, kind: str, refs: Sequence[str]
    ) -> dict[str, Document]:
        where, params = exact_scope(scope)
        if not refs:
            return {}
        rows = self._all(f"SELECT {DOC_COLS} FROM mp_docs WHERE {where} AND kind = %s "
                         "AND ref = ANY(%s)", [*params, kind, list(refs)])
        return {r[6]: doc_of(r) for r in rows}

    def get_documents_by_refs(
        self, kind: str, keys: Sequence[tuple[Scope, str]]
    ) -> dict[tuple[Scope, str], Document]:
        # One statement for every scope: one array per key column, joined on the
        # (scope, kind, ref) unique index.
        cols: list[list[str]] = [[], [], [], [], []]
        for scope, ref in keys:
            for col, value in zip(cols, (*scope.require_concrete().values(), ref), strict=True):
                col.append(str(value))
        if not keys:
            return {}
        rows = self._all(
            f"SELECT {_DOC_COLS_D} FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::text[]) AS k(t, u, a, s, r) JOIN mp_docs d ON d.tenant = k.t "
            "AND d.user_id = k.u AND d.agent = k.a AND d.session_id = k.s AND d.kind = %s "
            "AND d.ref = k.r",
            [*cols, kind],
        )
        out: dict[tuple[Scope, str], Document] = {}
        for r in rows:
            doc = doc_of(r)
            out[(doc.scope, doc.ref)] = doc
        return out

    def has_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> bool:
        where, params = scope_where(scope)
        sql = f"SELECT 1 FROM mp_docs WHERE {where}"
        if kinds:
            sql += " AND kind = ANY(%s)"
            params.append(list(kinds))
        return self._one(sql + " LIMIT 1", params) is not None

    def iter_documents(
        self, scope: Scope, *, kinds: Sequence[str] | None = None
    ) -> Iterator[Document]:
        where, params = scope_where(scope)
        sql = f"SELECT {DOC_COLS} FROM mp_docs WHERE {where}"
        if kinds:
            sql += " AND kind = ANY(%s)"
            params.append(list(kinds))
        last = 0
        while True:
            rows = self._all(sql + " AND id > %s ORDER BY id LIMIT 1000", [*params, last])
            if not rows:
                return
            for r in rows:
                yield doc_of(r)
            last = int(rows[-1][0])

    # -- keyword search ----------------------------------------------------------------------
    def keyword_search(
        self,
        scope: Scope,
        query: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
        max_df_ratio: float | None = None,
    ) -> list[SearchHit]:
        require_text("query", query)
        if k <= 0:
            return []
        terms = query_terms(query) or query_terms(query, drop_stop_words=False)
        hits = self._word_bm25(scope, terms, k, kinds, max_df_ratio) if terms else []
        if not hits:  # identifiers/substrings the word index cannot split the same way
            chunks = [c for c in re.split(r"\s+", query.strip()) if len(c) >= 3]
            hits = self._trigram(scope, chunks, k, kinds) if chunks else []
        if not hits and 0 < len(query.strip()) < 3:  # e.g. one ideograph: below bigrams
            hits = self._substring(scope, query.strip(), k, kinds)
        return hits

    def _lexemes(self, terms: list[str]) -> list[str]:
        """The index lexemes of the query terms, by the index's own configuration (a term the
        parser splits contributes each part; a repeated term counts twice)."""
        cache = self.__dict__.setdefault("_lexeme_cache", {})
        missing = [t for t in dict.fromkeys(terms) if t not in cache]
        if missing:
            found: dict[int, list[str]] = {}
            for i, lexeme in self._all(_LEXEMES, (missing,)):
                found.setdefault(int(i), []).append(lexeme)
            if len(cache) > 10_000:
                cache.clear()
            for i, t in enumerate(missing, 1):
                cache[t] = tuple(found.get(i, ()))
        return [lx for t in terms for lx in cache.get(t, ())]

    def _word_bm25(self, scope: Scope, terms: list[str], k: int, kinds: Sequence[str] | None,
                   max_df_ratio: float | None) -> list[SearchHit]:
        tokens = self._lexemes(terms)
        if not tokens:
            return []
        where, params = scope_where(scope, "d")
        kind_sql = " AND d.kind = ANY(%s)" if kinds else ""
        kind_params: list[Any] = [list(kinds)] if kinds else []
        distinct = list(dict.fromkeys(tokens))

        def read(conn: Any) -> tuple[Any, list[tuple[Any, ...]]]:
            stats = conn.execute(
                f"SELECT count(*), coalesce(avg(d.doc_len), 0) FROM mp_docs d WHERE {where}"
                + kind_sql, [*params, *kind_params]).fetchone()
            rows = conn.execute(
                f"SELECT d.id, u.lexeme, array_length(u.positions, 1), d.doc_len "
                f"FROM mp_docs d, LATERAL unnest(d.tsv) AS u WHERE {where}{kind_sql} "
                "AND d.tsv @@ %s::tsquery AND u.lexeme = ANY(%s)",
                [*params, *kind_params, _tsquery(distinct), distinct]).fetchall()
            return stats, rows

        if getattr(self._local, "conn", None) is not None:
            stats, rows = read(self._local.conn)
        else:  # statistics and postings from one snapshot
            with self._tx(serialize=False) as conn:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                stats, rows = read(conn)
        n_docs, avgdl = int(stats[0]), float(stats[1])
        if not rows or n_docs == 0:
            return []
        cand_ids = np.array(sorted({int(r[0]) for r in rows}), dtype=np.int64)
        pos_of = {int(i): p for p, i in enumerate(cand_ids)}
        doc_len = np.zeros(cand_ids.shape[0], dtype=np.float64)
        by_lexeme: dict[str, tuple[list[int], list[float]]] = {}
        for doc_id, lexeme, tf, length in rows:
            p = pos_of[int(doc_id)]
            doc_len[p] = float(length)
            positions, tfs = by_lexeme.setdefault(lexeme, ([], []))
            positions.append(p)
            tfs.append(float(tf or 1))
        postings = [(np.asarray(by_lexeme.get(t, ([], []))[0], dtype=np.int64),
                     np.asarray(by_lexeme.get(t, ([], []))[1], dtype=np.float64)) for t in tokens]
        # score_postings sizes its result by N (idf needs the scope's N); only the candidates'
        # positions are ever touched, so the array is cut back to them.
        score = score_postings(postings, doc_len, avgdl, n_docs, max_df_ratio=max_df_ratio)
        top = top_k(score[: cand_ids.shape[0]], cand_ids, k)
        docs = self.get_documents([i for i, _ in top])
        return [SearchHit(docs[i], s, rank, "bm25") for rank, (i, s) in enumerate(top, 1)
                if i in docs]

    def _trigram(self, scope: Scope, chunks: list[str], k: int,
                 kinds: Sequence[str] | None) -> list[SearchHit]:
        """Documents holding any chunk (case-insensitive), most chunk occurrences first."""
        where, params = scope_where(scope, "d")
        occurrences = " + ".join(
            "(length(lower(d.text)) - length(replace(lower(d.text), lower(%s), ''))) "
            "/ length(%s)" for _ in chunks)
        occ_params = [p for c in chunks for p in (c, c)]
        sql = (f"SELECT {_DOC_COLS_D}, ({occurrences})::float8 AS score FROM mp_docs d "
               f"WHERE ({' OR '.join('d.text ILIKE %s' for _ in chunks)}) AND {where}")
        all_params = [*occ_params, *(_like(c) for c in chunks), *params]
        if kinds:
            sql += " AND d.kind = ANY(%s)"
            all_params.append(list(kinds))
        sql += " ORDER BY score DESC, d.id LIMIT %s"
        rows = self._all(sql, [*all_params, k])
        return [SearchHit(doc_of(r), float(r[10]), i, "trigram") for i, r in enumerate(rows, 1)]

    def _substring(self, scope: Scope, needle: str, k: int,
                   kinds: Sequence[str] | None) -> list[SearchHit]:
        """Scoped scan for a 1–2 character needle, most occurrences first (the last fallback)."""
        where, params = scope_where(scope, "d")
        sql = (f"SELECT {_DOC_COLS_D}, ((length(d.text) - length(replace(d.text, %s, ''))) "
               f"/ length(%s))::float8 AS score FROM mp_docs d WHERE strpos(d.text, %s) > 0 "
               f"AND {where}")
        all_params: list[Any] = [needle, needle, needle, *params]
        if kinds:
            sql += " AND d.kind = ANY(%s)"
            all_params.append(list(kinds))
        sql += " ORDER BY score DESC, d.id DESC LIMIT %s"
        rows = self._all(sql, [*all_params, k])
        return [SearchHit(doc_of(r), float(r[10]), i, "substring") for i, r in enumerate(rows, 1)]

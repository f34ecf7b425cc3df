"""Keyword search of the SQLite store: FTS5 word/trigram indexes and the in-process BM25 cache."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Sequence

import numpy as np

from mindpalace.errors import StoreError
from mindpalace.scope import Scope
from mindpalace.store.base import SearchHit
from mindpalace.store.bm25 import PostingIndex
from mindpalace.store.sqlite.connection import SQLiteBase, is_busy
from mindpalace.store.sqlite.rows import doc_of, scope_where
from mindpalace.store.textindex import build_match_query, build_trigram_query
from mindpalace.textsafe import require_text


class KeywordSearchMixin(SQLiteBase):
    """:meth:`keyword_search`: BM25 over the word index, then trigram, then substring.

    The word-index BM25 is scored in-process (:mod:`mindpalace.store.bm25`, bit-identical to
    FTS5's ``bm25()``) from a posting cache of the whole index, built at one search generation.
    When the cache is stale the query is served by SQL; the cache is rebuilt only once a second
    query sees the same generation (no write in between), so a store written between every
    query never pays for a rebuild per query. The choice depends on data state only.
    """

    _in_process_bm25: bool
    _fts_tokenizer: str
    _bm25: PostingIndex | None
    _bm25_stale_seen: object | None
    _bm25_lock: threading.Lock
    _token_cache: dict[str, tuple[str, ...]]

    def _init_keyword_search(self, in_process_bm25: bool) -> None:
        self._in_process_bm25 = in_process_bm25
        self._bm25 = None
        self._bm25_stale_seen = None  # a generation a query found the cache stale at
        self._bm25_lock = threading.Lock()
        self._token_cache = {}
        sql = self._execute("SELECT sql FROM sqlite_master WHERE name = 'docs_fts'").fetchone()[0]
        found = re.search(r"tokenize\s*=\s*'([^']*)'", sql)
        self._fts_tokenizer = found.group(1) if found else "unicode61"

    @property
    def bm25_cache_generation(self) -> object | None:
        """The :meth:`search_generation` the in-process BM25 posting cache was built at; None
        before the first build, and always with ``in_process_bm25=False``.

        Read-only, for tests and diagnostics: when it equals :meth:`search_generation`, word
        index queries are scored in-process; otherwise they go through FTS5's ``bm25()``.
        """
        index = self._bm25
        return None if index is None else index.generation

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
        match = build_match_query(query)
        if max_df_ratio is not None and " OR " in match:
            match = self._drop_common_terms(match, max_df_ratio)
        hits = self._fast_bm25(scope, match, k, kinds) if self._in_process_bm25 else None
        if hits is None:
            hits = self._fts(scope, "docs_fts", match, k, kinds, "bm25")
        if not hits:  # identifiers/substrings the word index cannot split the same way
            hits = self._fts(scope, "docs_tri", build_trigram_query(query), k, kinds, "trigram")
        if not hits and 0 < len(query.strip()) < 3:  # e.g. one ideograph: below bigram/trigram
            hits = self._substring(scope, query.strip(), k, kinds)
        return hits

    # -- in-process BM25 (mindpalace.store.bm25) ------------------------------------------------
    def _fast_bm25(
        self, scope: Scope, match: str, k: int, kinds: Sequence[str] | None
    ) -> list[SearchHit] | None:
        """The word-index search scored in numpy; None = use the SQL path (inside a write
        transaction, a term that is not exactly one index token, or a stale cache whose
        rebuild is not yet due)."""
        if not match or k <= 0:
            return []
        conn = self._conn()
        if conn.in_transaction:  # uncommitted rows could be rolled back under the same generation
            return None
        try:
            self._retry(lambda: conn.execute("BEGIN"))  # one snapshot for generation + data
            try:
                return self._fast_bm25_in_snapshot(conn, scope, match, k, kinds)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return None
            raise StoreError(f"{self.path}: {exc}") from exc

    def _fast_bm25_in_snapshot(
        self, conn: sqlite3.Connection, scope: Scope, match: str, k: int,
        kinds: Sequence[str] | None,
    ) -> list[SearchHit] | None:
        terms = [t[1:-1].replace('""', '"') for t in match.split(" OR ")]
        phrases = self._phrase_tokens(conn, terms)
        if phrases is None:
            return None
        generation = self.search_generation()
        index = self._bm25
        if index is None or index.generation != generation:
            if index is not None and not self._bm25_rebuild_due(generation):
                return None
            doc_ids = np.fromiter(
                (r[0] for r in conn.execute("SELECT id FROM docs ORDER BY id")), dtype=np.int64
            )
            try:
                vocab = [
                    (r[0], int(r[1])) for r in conn.execute("SELECT term, cnt FROM docs_fts_r")
                ]
                occurrences = np.fromiter(
                    (r[0] for r in conn.execute("SELECT doc FROM docs_fts_v")), dtype=np.int64
                )
                index = PostingIndex.build(generation, doc_ids, vocab, occurrences)
            except LookupError:
                return None
            with self._bm25_lock:
                self._bm25 = index
        mask_key = (scope.values(), tuple(sorted(kinds)) if kinds else None)
        mask = index.masks.get(mask_key)
        if mask is None:
            where, params = scope_where(scope)
            sql = f"SELECT id FROM docs WHERE {where or '1'}"
            if kinds:
                sql += f" AND kind IN ({','.join('?' * len(kinds))})"
                params += list(kinds)
            ids = np.fromiter((r[0] for r in conn.execute(sql, params)), dtype=np.int64)
            mask = np.zeros(index.n_docs, dtype=bool)
            mask[np.searchsorted(index.doc_ids, ids)] = True
            if len(index.masks) > 64:  # bounded: scopes come and go
                index.masks.clear()
            index.masks[mask_key] = mask
        top = index.top(phrases, mask, k)
        docs = self.get_documents([i for i, _ in top])
        return [SearchHit(docs[i], score, rank, "bm25") for rank, (i, score) in enumerate(top, 1)]

    def _bm25_rebuild_due(self, generation: object) -> bool:
        """Whether to rebuild the stale cache for `generation`: only when an earlier query
        (served by SQL) already found it stale at this same generation. Amortises by data
        state, not by the clock: a store written between every query keeps the SQL path
        instead of rebuilding each time, and a store that stops changing gets the cache back
        on its second query. Generations never repeat (see search_generation)."""
        with self._bm25_lock:
            if self._bm25_stale_seen == generation:
                return True
            self._bm25_stale_seen = generation
            return False

    def _phrase_tokens(self, conn: sqlite3.Connection, terms: list[str]) -> list[str] | None:
        """The index token of each query term, tokenized by the word index's own tokenizer
        (a scratch FTS5 table in the connection's temp schema); None when a term is not
        exactly one token (a multi-token phrase needs positions: the SQL path handles it)."""
        cache = self._token_cache
        missing = [t for t in dict.fromkeys(terms) if t not in cache]
        resolved: dict[str, tuple[str, ...]] = {}
        if missing:
            if not getattr(self._local, "qtok", False):
                tok = self._fts_tokenizer.replace("'", "")
                conn.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mp_qtok "
                    f"USING fts5(x, tokenize='{tok}')"
                )
                conn.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mp_qtok_v "
                    "USING fts5vocab(temp, mp_qtok, 'instance')"
                )
                self._local.qtok = True
            conn.execute("DELETE FROM temp.mp_qtok")
            conn.executemany(
                "INSERT INTO temp.mp_qtok (rowid, x) VALUES (?, ?)",
                [(i, t) for i, t in enumerate(missing, 1)],
            )
            found: dict[int, list[tuple[int, str]]] = {}
            for term, doc, offset in conn.execute("SELECT term, doc, offset FROM temp.mp_qtok_v"):
                found.setdefault(int(doc), []).append((int(offset), term))
            conn.execute("DELETE FROM temp.mp_qtok")
            if len(cache) > 10_000:
                cache.clear()
            for i, t in enumerate(missing, 1):
                resolved[t] = cache[t] = tuple(term for _, term in sorted(found.get(i, [])))
        out = []
        for t in terms:
            tokens = resolved[t] if t in resolved else cache.get(t, ())
            if len(tokens) != 1:
                return None
            out.append(tokens[0])
        return out

    # -- SQL paths ---------------------------------------------------------------------------
    def _drop_common_terms(self, match: str, max_df_ratio: float) -> str:
        """Keep the OR-terms of `match` in at most max_df_ratio of all documents (the rarest
        term always stays). Document frequencies come from the index itself (one count per
        term, tokenized exactly as indexed); max(id) stands in for the document count."""
        terms = match.split(" OR ")
        total = self._execute("SELECT max(id) FROM docs").fetchone()[0] or 0
        counts = [
            (
                self._execute(
                    "SELECT count(*) FROM docs_fts WHERE docs_fts MATCH ?", (t,)
                ).fetchone()[0],
                t,
            )
            for t in terms
        ]
        keep = [t for n, t in counts if n <= max_df_ratio * total]
        return " OR ".join(keep) if keep else min(counts)[1]

    def _substring(
        self, scope: Scope, needle: str, k: int, kinds: Sequence[str] | None
    ) -> list[SearchHit]:
        """Scoped scan for a 1–2 character needle, most occurrences first (the last fallback)."""
        if k <= 0:
            return []
        where, scope_params = scope_where(scope, "d")
        sql = (
            "SELECT d.*, (length(d.text) - length(replace(d.text, ?, ''))) / length(?) AS score "
            f"FROM docs d WHERE instr(d.text, ?) > 0 AND {where}"
        )
        params = [needle, needle, needle, *scope_params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        sql += " ORDER BY score DESC, d.id DESC LIMIT ?"
        params.append(k)
        rows = self._execute(sql, params).fetchall()
        return [
            SearchHit(doc_of(r), float(r["score"]), i, "substring") for i, r in enumerate(rows, 1)
        ]

    def _fts(
        self, scope: Scope, table: str, match: str, k: int, kinds: Sequence[str] | None, label: str
    ) -> list[SearchHit]:
        if not match or k <= 0:
            return []
        where, scope_params = scope_where(scope, "d")
        sql = (
            f"SELECT d.*, bm25({table}) AS score FROM {table} JOIN docs d ON d.id = {table}.rowid "
            f"WHERE {table} MATCH ? AND {where}"
        )
        params = [match, *scope_params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        sql += " ORDER BY score, d.id LIMIT ?"
        params.append(k)
        try:
            rows = self._execute(sql, params).fetchall()
        except StoreError:
            raise
        except sqlite3.OperationalError as exc:  # malformed MATCH can only come from a bug
            raise StoreError(f"full-text query {match!r} failed: {exc}") from exc
        return [
            SearchHit(doc_of(r), -float(r["score"]), i, label) for i, r in enumerate(rows, 1)
        ]

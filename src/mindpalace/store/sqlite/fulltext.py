"""Keyword search of the SQLite store: FTS5 word/trigram indexes and the in-process BM25 cache."""

from __future__ import annotations

import re
import sqlite3
import threading
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

import numpy as np

from mindpalace.errors import StoreError
from mindpalace.scope import Scope
from mindpalace.store.base import SearchHit
from mindpalace.store.bm25 import PostingIndex, score_postings, top_k
from mindpalace.store.heap import release_free_heap
from mindpalace.store.sqlite.blobstore import row_text
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import scope_where
from mindpalace.store.textindex import build_match_query, build_trigram_query, segment_for_index
from mindpalace.textsafe import require_text

EXTERNAL_TOKENS = 20_000
"""Word-index tokens (about 100 KB of text) the posting cache tokenizes in one catch-up; the
largest new documents beyond it keep their postings in the store, read per query (see
KeywordSearchMixin)."""

FEW_DOCS = 5_000
"""A build holding external documents tokenizes the others itself when they are at most this
many (instead of scanning every instance of the word index)."""

EXTERNAL_DOC_TOKENS = 1_000
"""Word-index tokens above which a document counts as a long one for a build: a bounded part
of a huge output holds 2–4k, a fact or message rarely 1k."""

# Empty the contentless scratch tokenizer tables (see KeywordSearchMixin._scratch_tables).
_EMPTY_QTOK = "INSERT INTO temp.mp_qtok (mp_qtok) VALUES ('delete-all')"
_EMPTY_NTOK = "INSERT INTO temp.mp_ntok (mp_ntok) VALUES ('delete-all')"


class KeywordSearchMixin(SQLiteBase):
    """:meth:`keyword_search`: BM25 over the word index, then trigram, then substring.

    Word-index BM25 uses the statistics of the searched scope and kinds
    (:mod:`mindpalace.store.bm25`): document count, document frequencies and average length
    are counted over those documents only, so another tenant's writes never move a score.
    Scores come from a posting cache of the whole index (:class:`PostingIndex`), kept up to
    date in place: documents added by any process are appended (tokenized by the index's own
    tokenizer), documents this process deleted are masked out — the scores are those of a
    fresh build. A change the cache cannot follow (another process's deletion, a text change)
    leaves it stale: then postings are read per query term through SQL (identical scores),
    and the cache is rebuilt only once a second query sees the same database state (no write
    in between), so a store changed that way between every query never pays for a rebuild
    per query. The choice depends on data state only.

    When the documents appended since the last query hold more than
    :attr:`bm25_external_tokens` tokens (a huge tool output, stored as thousands of bounded
    parts), the largest of them are held in the cache without their postings: following them
    costs a size lookup each, not a pass over their tokens, and a query reads their postings
    for the query's tokens from the word index (``fts5vocab``, counted in SQLite) — the same
    scores as if they were cached. A build from scratch (reopening the store) does the same
    for the documents of more than :attr:`bm25_external_doc_tokens` tokens when they hold more
    than :attr:`bm25_external_tokens` together.
    """

    bm25_external_tokens: int
    """Token budget of one catch-up: the new documents beyond it (largest first) are appended
    without their postings (read per query instead); default :data:`EXTERNAL_TOKENS`."""

    bm25_external_doc_tokens: int
    """A build (first query, reopening) holds the documents of more than this many tokens
    external when together they exceed :attr:`bm25_external_tokens`; default
    :data:`EXTERNAL_DOC_TOKENS`."""

    _in_process_bm25: bool
    _fts_tokenizer: str
    _bm25: PostingIndex | None
    _bm25_stale_seen: object | None
    _bm25_lock: threading.Lock
    _bm25_use: threading.Lock
    _token_cache: dict[str, tuple[str, ...]]
    _scope_docs: dict[object, tuple[np.ndarray, np.ndarray]]

    def _init_keyword_search(self, in_process_bm25: bool) -> None:
        self._in_process_bm25 = in_process_bm25
        self.bm25_external_tokens = EXTERNAL_TOKENS
        self.bm25_external_doc_tokens = EXTERNAL_DOC_TOKENS
        self._bm25 = None
        self._bm25_stale_seen = None  # a generation a query found the cache stale at
        self._bm25_lock = threading.Lock()
        self._bm25_use = threading.Lock()
        self._token_cache = {}
        self._scope_docs = {}
        sql = self._execute("SELECT sql FROM sqlite_master WHERE name = 'docs_fts'").fetchone()[0]
        found = re.search(r"tokenize\s*=\s*'([^']*)'", sql)
        self._fts_tokenizer = found.group(1) if found else "unicode61"

    @property
    def bm25_cache_generation(self) -> object | None:
        """The :meth:`search_generation` the in-process BM25 posting cache was last brought up
        to date at; None before the first build, and always with ``in_process_bm25=False``.

        Read-only, for tests and diagnostics: when it equals :meth:`search_generation`, word
        index queries are scored from the cache; otherwise from postings read through SQL.
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
        hits = self._word_bm25(scope, build_match_query(query), k, kinds, max_df_ratio)
        return hits or self._keyword_fallback(scope, query, k, kinds)

    def keyword_search_many(
        self,
        scope: Scope,
        queries: Sequence[str],
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
        max_df_ratio: float | None = None,
    ) -> list[list[SearchHit]]:
        """:meth:`keyword_search` per query, the word-index parts scored in one snapshot
        (one transaction, one freshness check, one document fetch for every query's hits);
        a query the word index finds nothing for takes the fallbacks on its own."""
        for i, query in enumerate(queries):
            require_text(f"queries[{i}]", query)
        found = self._word_bm25_many(scope, [build_match_query(q) for q in queries], k, kinds, max_df_ratio)
        return [
            hits or self._keyword_fallback(scope, q, k, kinds)
            for q, hits in zip(queries, found, strict=True)
        ]

    def _keyword_fallback(
        self, scope: Scope, query: str, k: int, kinds: Sequence[str] | None
    ) -> list[SearchHit]:
        """The word index found nothing: trigram, then (1–2 characters) substring."""
        hits = self._fts(scope, "docs_tri", build_trigram_query(query), k, kinds, "trigram")
        if not hits and 0 < len(query.strip()) < 3:  # e.g. one ideograph: below bigram/trigram
            hits = self._substring(scope, query.strip(), k, kinds)
        return hits

    # -- word-index BM25 with per-scope statistics (mindpalace.store.bm25) ---------------------
    def _word_bm25(
        self, scope: Scope, match: str, k: int, kinds: Sequence[str] | None,
        max_df_ratio: float | None,
    ) -> list[SearchHit]:
        return self._word_bm25_many(scope, [match], k, kinds, max_df_ratio)[0]

    def _word_bm25_many(
        self, scope: Scope, matches: Sequence[str], k: int, kinds: Sequence[str] | None,
        max_df_ratio: float | None,
    ) -> list[list[SearchHit]]:
        """:meth:`_word_bm25` of each MATCH string (empty: no hits), in one read snapshot."""
        wanted = [i for i, m in enumerate(matches) if m] if k > 0 else []
        out: list[list[SearchHit]] = [[] for _ in matches]
        if not wanted:
            return out
        conn = self._conn()
        terms = [[t[1:-1].replace('""', '"') for t in matches[i].split(" OR ")] for i in wanted]
        try:
            if conn.in_transaction:  # uncommitted rows are seen; nothing is cached from them
                found = self._hits_many(
                    [self._scored_by_sql(conn, scope, t, k, kinds, max_df_ratio, cache=False) for t in terms]
                )
            else:
                self._retry(lambda: conn.execute("BEGIN"))  # one snapshot for generation + data
                try:
                    fast = None
                    if self._in_process_bm25:
                        fast = self._fast_bm25_in_snapshot(conn, scope, terms, k, kinds, max_df_ratio)
                    found = self._hits_many(fast if fast is not None else [
                        self._scored_by_sql(conn, scope, t, k, kinds, max_df_ratio, cache=True) for t in terms
                    ])
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{self.path}: keyword search failed: {exc}") from exc
        for i, hits in zip(wanted, found, strict=True):
            out[i] = hits
        return out

    def _scope_ids(
        self, conn: sqlite3.Connection, scope: Scope, kinds: Sequence[str] | None,
        *, after: int = 0,
    ) -> np.ndarray:
        """Ids (ascending) of the scope's documents above id `after`."""
        where, params = scope_where(scope)
        sql = f"SELECT id FROM docs WHERE id > {int(after)} AND {where or '1'}"
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        ids = np.fromiter((r[0] for r in conn.execute(sql + " ORDER BY id", params)), dtype=np.int64)
        return ids

    def _fast_bm25_in_snapshot(
        self, conn: sqlite3.Connection, scope: Scope, terms: list[list[str]], k: int,
        kinds: Sequence[str] | None, max_df_ratio: float | None,
    ) -> list[list[tuple[int, float]]] | None:
        """(doc id, score) best first of each query's `terms`, scored from the posting cache,
        brought up to this snapshot in place; None = the cache cannot follow (another
        process deleted or changed documents) and its rebuild is not due yet."""
        self._index_tokens(conn, [t for query in terms for t in query])  # one tokenizer pass
        tokens = [self._index_tokens(conn, query) for query in terms]
        row = conn.execute(
            "SELECT (SELECT value FROM meta WHERE key = 'index_generation'), "
            "(SELECT coalesce(max(id), 0) FROM docs)"
        ).fetchone()
        state = (int(row[0]), int(row[1]))
        generation = self.search_generation()
        with self._bm25_use:  # the cache changes in place: one user at a time
            index = self._bm25
            if index is None or not self._bm25_catch_up(conn, index, state):
                if index is not None and not self._bm25_rebuild_due(state):
                    return None
                index = self._bm25_build(conn, state)
                if index is None:
                    return None
                with self._bm25_lock:
                    self._bm25 = index
                release_free_heap(index.n_docs)  # the build's temporaries: back to the OS
            index.generation = generation
            key = (scope.values(), tuple(sorted(kinds)) if kinds else None)
            view = index.views.get(key)
            if view is None:
                view = index.view(key, self._scope_ids(conn, scope, kinds))
            elif view.upto < index.n_docs:
                after = int(index.doc_ids[view.upto - 1]) if view.upto else 0
                index.extend_view(view, self._scope_ids(conn, scope, kinds, after=after))
            extra: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            if index.external_ids(view).size:
                extra = self._external_postings(conn, index, [t for query in tokens for t in query])
            return [index.top(query, view, k, max_df_ratio=max_df_ratio, extra=extra) for query in tokens]

    def _external_postings(
        self, conn: sqlite3.Connection, index: PostingIndex, tokens: list[str]
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per token, (doc ids, term frequencies) of its occurrences in the external documents
        of `index` (all scopes: the scope mask applies later), counted by SQLite from the word
        index's instance table — the instances of the token are scanned in C, only one row per
        external document holding it reaches Python. Kept per token in the index while its
        external set is unchanged (documents deleted since simply leave the scope masks;
        the caller holds ``_bm25_use``)."""
        held = index.external.view()
        cache = index.external_postings
        missing = [t for t in dict.fromkeys(tokens) if t not in cache]
        if missing:
            marks = ",".join(str(int(i)) for i in index.doc_ids[held])
            if len(cache) > 4096:
                cache.clear()
            for token in missing:
                rows = conn.execute(
                    f"SELECT doc, count(*) FROM docs_fts_v WHERE term = ? AND doc IN ({marks}) "
                    "GROUP BY doc ORDER BY doc", (token,),
                ).fetchall()
                cache[token] = (
                    np.fromiter((r[0] for r in rows), np.int64, count=len(rows)),
                    np.fromiter((r[1] for r in rows), np.float64, count=len(rows)),
                )
        return {t: cache[t] for t in dict.fromkeys(tokens)}

    def _bm25_build(self, conn: sqlite3.Connection, state: tuple[int, int]) -> PostingIndex | None:
        """The posting cache from the whole word index (None: a torn read)."""
        doc_ids = np.fromiter(
            (r[0] for r in conn.execute("SELECT id FROM docs ORDER BY id")), dtype=np.int64
        )
        external = self._build_external(conn)
        if external and doc_ids.shape[0] - len(external) <= FEW_DOCS:
            # A huge output beside a few other documents: tokenize those few (as a catch-up
            # does) instead of scanning the whole word index for their instances.
            index = PostingIndex.build(
                None, np.empty(0, np.int64), [], np.empty(0, np.int64), state=state
            )
            tokens, tok, docs = self._tokenize_docs(conn, 0, external)
            try:
                index.append(doc_ids, tokens, tok, docs, external=external)
            except ValueError:  # the docs table and its docsize rows disagree: no cache
                return None
            return index
        vocab: Sequence[tuple[str, int]]
        if external:  # their instances are skipped in C; the rest grouped by term here
            grouped: list[tuple[str, int]] = []
            found: list[int] = []
            last, count = None, 0
            marks = ",".join(str(i) for i in sorted(external))
            for term, doc in conn.execute(
                f"SELECT term, doc FROM docs_fts_v WHERE doc NOT IN ({marks})"
            ):
                if term != last:
                    if last is not None:
                        grouped.append((last, count))
                    last, count = term, 0
                count += 1
                found.append(doc)
            if last is not None:
                grouped.append((last, count))
            vocab = grouped
            occurrences = np.asarray(found, np.int64)
        else:
            vocab = _Terms(conn.execute("SELECT term, cnt FROM docs_fts_r"))
            # Sized up front (no regrowth) and int32 while ids allow: the build's peak memory.
            fits = not doc_ids.size or int(doc_ids[-1]) < 2**31
            rows = conn.execute("SELECT doc FROM docs_fts_v")
            try:
                occurrences = np.fromiter(
                    (r[0] for r in rows), dtype=np.int32 if fits else np.int64,
                    count=sum(c for _, c in vocab),
                )
            except ValueError:  # fewer instances than the vocabulary counts: a torn read
                return None
            if rows.fetchone() is not None:  # more: torn as well
                return None
        try:
            return PostingIndex.build(
                None, doc_ids, vocab, occurrences, state=state, external=external
            )
        except LookupError:
            return None

    def _build_external(self, conn: sqlite3.Connection) -> dict[int, int]:
        """The documents a build holds external (doc id → tokens): those of more than
        :attr:`bm25_external_doc_tokens` tokens, when together they hold more than
        :attr:`bm25_external_tokens` (the parts of a huge output); else none. Only documents
        of ≥ 128 tokens (a docsize record of more than one byte) are read."""
        sizes = {
            int(doc): _varint(size)
            for doc, size in conn.execute(
                "SELECT id, sz FROM docs_fts_docsize WHERE length(sz) > 1"
            )
        }
        big = {d: n for d, n in sizes.items() if n > self.bm25_external_doc_tokens}
        return big if sum(big.values()) > self.bm25_external_tokens else {}

    def _bm25_catch_up(
        self, conn: sqlite3.Connection, index: PostingIndex, state: tuple[int, int]
    ) -> bool:
        """Bring `index` to `state` = (index generation, last document id) by dropping the
        documents this process deleted and appending the new ones; False when it cannot (a
        step it does not know, or the cache is ahead of this snapshot) — nothing changed."""
        generation, last = state
        held_generation, held_last = index.state
        if (generation, last) == (held_generation, held_last):
            return True
        removed: frozenset[int] | None = frozenset()
        if generation != held_generation:
            removed = self.removals.removed_between(held_generation, generation)
        if removed is None or last < held_last:
            return False
        if last - held_last > max(10_000, index.n_docs // 2):
            return False  # a bulk load: reading the whole index is cheaper
        if removed:
            index.remove(np.fromiter(removed, dtype=np.int64, count=len(removed)))
        if last > held_last:
            ids, tokens, tok, docs, external = self._tokenized_since(conn, held_last)
            index.append(ids, tokens, tok, docs, external=external)
        index.state = state
        return True

    def _tokenized_since(
        self, conn: sqlite3.Connection, after: int
    ) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, dict[int, int]]:
        """The documents above id `after` and their word-index tokens, tokenized by the
        index's own tokenizer in a scratch FTS5 table (exactly the index's tokens): (ids
        ascending, tokens, token index per occurrence, document id per occurrence, external
        documents: id → token count). When the new documents hold more than
        :attr:`bm25_external_tokens` tokens in all (sizes from the index's ``docsize`` table),
        the largest are held external until the rest fit: those are neither read nor
        tokenized."""
        # The word index has a docsize row per document (the docs triggers, same snapshot):
        # reading it, not the docs rows, keeps a huge output's 16 KB parts off the disk.
        sizes = conn.execute(
            "SELECT id, sz FROM docs_fts_docsize WHERE id > ? ORDER BY id", (after,)
        ).fetchall()
        ids = np.fromiter((r[0] for r in sizes), dtype=np.int64, count=len(sizes))
        external = _over_budget(
            [(int(d), _varint(z)) for d, z in sizes], self.bm25_external_tokens
        )
        return (ids, *self._tokenize_docs(conn, after, external), external)

    def _tokenize_docs(
        self, conn: sqlite3.Connection, after: int, external: Mapping[int, int]
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The word-index tokens of the documents above id `after` but those in `external`:
        (tokens, token index per occurrence, document id per occurrence)."""
        sql = "SELECT id, search_text, text, blob, blob_at, blob_off, blob_len FROM docs WHERE id > ?"
        if external:
            sql += f" AND id NOT IN ({','.join(str(i) for i in external)})"
        rows = [  # a part that views a blob: its indexed text is made from the blob's slice
            (r["id"], r["search_text"] if r["blob"] is None
             else segment_for_index(row_text(conn, r, self._chunk_cache)))
            for r in conn.execute(sql + " ORDER BY id", (after,))
        ]
        self._scratch_tables(conn)
        conn.execute(_EMPTY_NTOK)
        conn.executemany("INSERT INTO temp.mp_ntok (rowid, x) VALUES (?, ?)", rows)
        index: dict[str, int] = {}
        tok: list[int] = []
        docs: list[int] = []
        for term, doc in conn.execute("SELECT term, doc FROM temp.mp_ntok_v"):
            tok.append(index.setdefault(term, len(index)))
            docs.append(doc)
        conn.execute(_EMPTY_NTOK)
        return list(index), np.asarray(tok, np.int64), np.asarray(docs, np.int64)

    def _scratch_tables(self, conn: sqlite3.Connection) -> None:
        """Scratch FTS5 tables with the word index's tokenizer in this connection's temp
        schema: ``mp_qtok`` for query terms, ``mp_ntok`` for new documents. Contentless
        (only the index the tokenizer fills, which the ``instance`` vocabulary reads) and
        emptied by ``delete-all``: a round of tokenizing a few query words is about half the
        SQLite work of a content table's row inserts and deletes (same tokens)."""
        made = getattr(self._local, "qtok", ())  # connections of this thread that have them
        if conn in made:  # per connection: group commit hands threads a shared one
            return
        tok = self._fts_tokenizer.replace("'", "")
        for name in ("mp_qtok", "mp_ntok"):
            conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} "
                f"USING fts5(x, tokenize='{tok}', content='', columnsize=0)"
            )
            conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name}_v "
                f"USING fts5vocab(temp, {name}, 'instance')"
            )
        self._local.qtok = (*made, conn)

    def _scored_by_sql(
        self, conn: sqlite3.Connection, scope: Scope, terms: list[str], k: int,
        kinds: Sequence[str] | None, max_df_ratio: float | None, *, cache: bool,
    ) -> list[tuple[int, float]]:
        """The same (doc id, score) best first from postings read per token (``fts5vocab`` instance rows) and the
        scope's document lengths (``docs_fts_docsize``)."""
        tokens = self._index_tokens(conn, terms)
        if not tokens:
            return []
        ids, lengths = self._scope_lengths(conn, scope, kinds, cache=cache)
        if ids.size == 0:
            return []
        postings = []
        for token in tokens:
            occ = np.fromiter(
                (r[0] for r in conn.execute("SELECT doc FROM docs_fts_v WHERE term = ?", (token,))),
                dtype=np.int64,
            )
            docs, tf = np.unique(occ, return_counts=True)
            pos = np.searchsorted(ids, docs)
            pos_ok = pos < ids.shape[0]
            inside = np.zeros(docs.shape[0], dtype=bool)
            inside[pos_ok] = ids[pos[pos_ok]] == docs[pos_ok]
            postings.append((pos[inside], tf[inside].astype(np.float64)))
        avgdl = float(lengths.mean())
        score = score_postings(postings, lengths, avgdl, int(ids.shape[0]), max_df_ratio=max_df_ratio)
        return top_k(score, ids, k)

    def _scope_lengths(
        self, conn: sqlite3.Connection, scope: Scope, kinds: Sequence[str] | None, *, cache: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids ascending, token lengths) of the scope's documents, from FTS5's own
        per-document sizes; cached per generation outside write transactions."""
        key = (scope.values(), tuple(sorted(kinds)) if kinds else None, self.search_generation())
        found = self._scope_docs.get(key) if cache else None
        if found is not None:
            return found
        where, params = scope_where(scope, "d")
        sql = f"SELECT d.id, s.sz FROM docs d JOIN docs_fts_docsize s ON s.id = d.id WHERE {where or '1'}"
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        rows = conn.execute(sql + " ORDER BY d.id", params).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        lengths = np.fromiter((_varint(r[1]) for r in rows), dtype=np.float64, count=len(rows))
        if cache:
            with self._bm25_lock:
                if len(self._scope_docs) > 64:
                    self._scope_docs.clear()
                self._scope_docs[key] = (ids, lengths)
        return ids, lengths

    def _hits_many(self, tops: Sequence[list[tuple[int, float]]]) -> list[list[SearchHit]]:
        """The hits of each (doc id, score) list, their documents read in one fetch."""
        ids = [i for i, _ in tops[0]] if len(tops) == 1 else list({i: None for top in tops for i, _ in top})
        docs = self.get_documents(ids)
        return [
            [SearchHit(docs[i], score, rank, "bm25") for rank, (i, score) in enumerate(top, 1)]
            for top in tops
        ]

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

    def _index_tokens(self, conn: sqlite3.Connection, terms: list[str]) -> list[str]:
        """The index tokens of the query terms, tokenized by the word index's own tokenizer
        (a scratch FTS5 table in the connection's temp schema). A term the index splits into
        several tokens contributes each of them (scored as separate terms)."""
        cache = self._token_cache
        missing = [t for t in dict.fromkeys(terms) if t not in cache]
        resolved: dict[str, tuple[str, ...]] = {}
        if missing:
            self._scratch_tables(conn)
            conn.execute(_EMPTY_QTOK)
            conn.executemany(
                "INSERT INTO temp.mp_qtok (rowid, x) VALUES (?, ?)",
                [(i, t) for i, t in enumerate(missing, 1)],
            )
            found: dict[int, list[tuple[int, str]]] = {}
            for term, doc, offset in conn.execute("SELECT term, doc, offset FROM temp.mp_qtok_v"):
                found.setdefault(int(doc), []).append((int(offset), term))
            conn.execute(_EMPTY_QTOK)
            if len(cache) > 10_000:
                cache.clear()
            for i, t in enumerate(missing, 1):
                resolved[t] = cache[t] = tuple(term for _, term in sorted(found.get(i, [])))
        out: list[str] = []
        for t in terms:
            out.extend(resolved[t] if t in resolved else cache.get(t, ()))
        return out

    # -- SQL paths ---------------------------------------------------------------------------
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
            SearchHit(self._doc(r), float(r["score"]), i, "substring") for i, r in enumerate(rows, 1)
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
            SearchHit(self._doc(r), -float(r["score"]), i, label) for i, r in enumerate(rows, 1)
        ]


class _Terms(Sequence[tuple[str, int]]):
    """(term, occurrences) rows of the word index's vocabulary as the posting cache's build
    reads them, held as a list of terms and an array of counts: a list of ~180k (str, int)
    tuples (100k facts) held ~12 MB more at the build's peak."""

    def __init__(self, rows: Iterable[tuple[str, int]]) -> None:
        self.terms: list[str] = []
        self.counts = array("q")
        for term, count in rows:
            self.terms.append(term)
            self.counts.append(int(count))

    def __len__(self) -> int:
        return len(self.terms)

    @overload
    def __getitem__(self, i: int) -> tuple[str, int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, int]]: ...
    def __getitem__(self, i: int | slice) -> tuple[str, int] | list[tuple[str, int]]:
        if isinstance(i, slice):
            return list(zip(self.terms[i], self.counts[i], strict=True))
        return self.terms[i], self.counts[i]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return zip(self.terms, self.counts, strict=True)


def _over_budget(sizes: list[tuple[int, int]], budget: int) -> dict[int, int]:
    """The documents to hold external: of (doc id, tokens), the largest (ties: the later id)
    until the others hold at most `budget` tokens; doc id → tokens."""
    total = sum(n for _, n in sizes)
    external: dict[int, int] = {}
    for doc, n in sorted(sizes, key=lambda dn: (-dn[1], -dn[0])):
        if total <= budget:
            break
        external[doc] = n
        total -= n
    return external


def _varint(blob: bytes) -> int:
    """The first SQLite varint of `blob` (FTS5's docsize record: tokens of column 0)."""
    value = 0
    for i, byte in enumerate(blob[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value

"""The in-process BM25 scorer returns exactly what FTS5's bm25() returns (ids, scores, order).
Its posting cache follows appends (any process) and this process's deletions in place; a
change it cannot follow (another process's deletion) makes it stale, and a stale cache is
rebuilt by data state alone: only when a second query sees the same state (no write in
between)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store import SearchHit, SQLiteStore

WORDS = [
    "hotel", "budget", "running", "runs", "ran", "book", "booked", "booking", "paris", "london",
    "trip", "dinner", "the", "a", "of", "cafe", "résumé", "naïve", "酒店", "预算", "Q7Z9", "zebra",
    "giraffe", "don't", "e-mail",
]
QUERIES = [
    "hotel budget", "running", "runs paris trip", "the", "résumé", "naive", "酒店预算",
    "booked hotel london", "zebra zebra", "Q7Z9", "e-mail", "nothing matches this",
]
SCOPE = Scope("t", "u", "a", "s")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    """The same database opened twice: in-process BM25 (default) and the FTS5 SQL path only."""
    fast = SQLiteStore(tmp_path / "bm25.db")
    sql = SQLiteStore(tmp_path / "bm25.db", in_process_bm25=False)
    try:
        yield fast, sql
    finally:
        fast.close()
        sql.close()


def _key(hits: list[SearchHit]) -> list[tuple[int, float, int, str]]:
    return [(h.doc.id, h.score, h.rank, h.matched) for h in hits]


def _fresh(store: SQLiteStore) -> bool:
    """Whether the next word-index query is scored in-process (the cache is current)."""
    return store.bm25_cache_generation == store.search_generation()


def _refs(store: SQLiteStore, query: str) -> list[str]:
    return [h.doc.ref for h in store.keyword_search(SCOPE, query)]


def test_matches_the_sql_path_exactly(stores: tuple[SQLiteStore, SQLiteStore]) -> None:
    fast, sql = stores
    rng = random.Random(7)
    a, b = Scope("t", "a", "ag", "s"), Scope("t", "b", "ag", "s")
    for i in range(600):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        fast.index_document(a if i % 3 else b, rng.choice(["fact", "message"]), f"r{i}", text)
    fast.index_document(a, "fact", "empty", "")
    fast.delete_documents(a, "fact", ["r1", "r2"])
    for query in QUERIES:
        for scope in (a, b, Scope("t", "a", "ag", "other")):
            for kinds in (None, ["fact"]):
                for k in (1, 5, 500):
                    hits = fast.keyword_search(scope, query, k=k, kinds=kinds)
                    assert _key(hits) == _key(sql.keyword_search(scope, query, k=k, kinds=kinds))
                    assert all(h.doc.scope == scope for h in hits)
    assert _fresh(fast)  # the in-process path did serve (no write since the first query)
    assert sql.bm25_cache_generation is None  # in_process_bm25=False never builds a cache


def test_a_stale_cache_is_rebuilt_on_the_second_query_of_a_generation(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    fast, other = stores  # `other`: the same file opened by another store (another process)
    fast.index_document(SCOPE, "note", "1", "giraffe zebra")
    fast.index_document(SCOPE, "note", "3", "zebra")
    assert fast.bm25_cache_generation is None
    assert _refs(fast, "giraffe") == ["1"]  # no cache yet: the first query builds it
    assert _fresh(fast)

    fast.index_document(SCOPE, "note", "2", "zebra okapi")
    assert _refs(fast, "okapi") == ["2"]  # an append is followed in place
    assert _fresh(fast)

    other.delete_documents(SCOPE, "note", ["3"])  # a deletion this process cannot follow
    before = fast.bm25_cache_generation
    first = fast.keyword_search(SCOPE, "zebra")  # stale: served by SQL, nothing rebuilt
    assert fast.bm25_cache_generation == before
    assert not _fresh(fast)
    second = fast.keyword_search(SCOPE, "zebra")  # same state again: rebuild
    assert _fresh(fast)
    assert _key(first) == _key(second) == _key(other.keyword_search(SCOPE, "zebra"))
    assert {h.doc.ref for h in first} == {"1", "2"}


def test_appends_and_own_deletions_are_followed_in_place(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    fast, sql = stores
    fast.index_document(SCOPE, "note", "0", "okapi")
    _refs(fast, "okapi")  # first build
    for i in range(1, 6):  # each query sees a write: the cache follows it, never stale
        fast.index_document(SCOPE, "note", str(i), f"okapi number{i}")
        if i % 2 == 0:
            fast.delete_documents(SCOPE, "note", [str(i - 1)])
        hits = fast.keyword_search(SCOPE, "okapi", k=20)
        assert _fresh(fast)
        assert _key(hits) == _key(sql.keyword_search(SCOPE, "okapi", k=20))


def test_other_processes_deletions_between_queries_keep_the_sql_path(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    fast, other = stores
    for i in range(8):
        fast.index_document(SCOPE, "note", str(i), f"okapi number{i}")
    _refs(fast, "okapi")  # first build
    built = fast.bm25_cache_generation
    for i in range(1, 6):  # each query sees a new state: never a rebuild
        other.delete_documents(SCOPE, "note", [str(i)])
        hits = fast.keyword_search(SCOPE, "okapi", k=20)
        assert _key(hits) == _key(other.keyword_search(SCOPE, "okapi", k=20))
        assert len(hits) == 8 - i
        assert fast.bm25_cache_generation == built
    fast.keyword_search(SCOPE, "okapi")  # writes stop: the second sighting rebuilds
    assert _fresh(fast)


def test_write_transactions_do_not_count_and_split_terms_are_served(tmp_path: Path) -> None:
    # "x" separates tokens in this word index, so the query term "boxer" is the two tokens
    # "bo" and "er": each is scored as a term of its own (no positions needed).
    settings = StoreSettings(fts_tokenizer="unicode61 separators x")
    store = SQLiteStore(tmp_path / "bm25.db", settings=settings)
    try:
        store.index_document(SCOPE, "note", "1", "giraffe")
        assert _refs(store, "giraffe") == ["1"]
        store.index_document(SCOPE, "note", "2", "giraffe boxer")
        with store.transaction():  # inside a write transaction: always SQL, not counted
            assert sorted(_refs(store, "giraffe")) == ["1", "2"]
            assert sorted(_refs(store, "giraffe")) == ["1", "2"]
        assert not _fresh(store)
        assert _refs(store, "boxer") == ["2"]  # the append is followed in place
        assert _fresh(store)
    finally:
        store.close()


def test_follows_writes_and_rollbacks(stores: tuple[SQLiteStore, SQLiteStore]) -> None:
    fast, sql = stores

    def check(query: str, expected: list[str]) -> None:
        for _ in range(2):  # after a write: once from SQL, then rebuilt and in-process
            hits = fast.keyword_search(SCOPE, query)
            assert [h.doc.ref for h in hits] == expected
            assert _key(hits) == _key(sql.keyword_search(SCOPE, query))
        assert _fresh(fast)

    fast.index_document(SCOPE, "note", "1", "giraffe")
    check("giraffe", ["1"])
    with pytest.raises(RuntimeError), fast.transaction():
        fast.index_document(SCOPE, "note", "2", "zebra")
        assert _refs(fast, "zebra") == ["2"]  # uncommitted rows are seen (SQL path)
        raise RuntimeError
    assert _fresh(fast)  # the rollback left the generation where the cache is
    check("zebra", [])
    fast.index_document(SCOPE, "note", "3", "zebra")
    check("zebra", ["3"])
    fast.index_document(SCOPE, "note", "3", "okapi")  # text change
    check("zebra", [])
    check("okapi", ["3"])
    fast.delete_documents(SCOPE, "note", ["1"])
    check("giraffe", [])


def test_new_documents_over_the_token_budget_are_scored_from_the_word_index(
    stores: tuple[SQLiteStore, SQLiteStore],
) -> None:
    """New documents beyond the catch-up budget (``bm25_external_tokens``, largest first) are
    appended without their postings (no pass over their tokens) and scored from the word index
    per query: the scores, ranks and order are still exactly those of the SQL path, in and
    out of the documents' scopes, after a deletion too."""
    fast, sql = stores
    fast.bm25_external_tokens = 70
    rng = random.Random(3)
    other = Scope("t", "u", "a", "other")
    for i in range(40):
        fast.index_document(SCOPE if i % 2 else other, "note", f"s{i}",
                            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))))
    assert _refs(fast, "hotel") is not None  # the first query builds the cache
    big = []
    for i in range(6):  # 6 × 30 tokens + 2 appended after the build: 4 held external
        words = [rng.choice(["hotel", "paris", "zebra", "trip"]) for _ in range(30)]
        big.append(fast.index_document(SCOPE if i % 2 else other, "note", f"big{i}", " ".join(words)))
    fast.index_document(SCOPE, "note", "small", "hotel zebra")
    for scope in (SCOPE, other):
        for query in QUERIES:
            for kinds in (None, ["note"]):
                hits = fast.keyword_search(scope, query, k=5, kinds=kinds)
                assert _key(hits) == _key(sql.keyword_search(scope, query, k=5, kinds=kinds))
    index = fast._bm25
    assert index is not None and _fresh(fast)
    assert index.doc_ids[index.external.view()].tolist() == big[2:]  # ties: later ids first
    fast.delete_documents(SCOPE, "note", ["big3", "big5"])
    for query in QUERIES:
        assert _key(fast.keyword_search(SCOPE, query, k=50)) == _key(sql.keyword_search(SCOPE, query, k=50))
    assert _fresh(fast)


@pytest.mark.parametrize("few_docs", [5_000, 0])
def test_a_build_holds_a_huge_outputs_parts_external(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few_docs: int
) -> None:
    """A store reopened with long documents totalling more than the budget builds its cache
    without their postings (the few other documents tokenized alone, or — with more than
    FEW_DOCS of them — the long ones' instances skipped in SQLite): same scores as the SQL
    path, and the short documents' postings are cached as usual."""
    monkeypatch.setattr("mindpalace.store.sqlite.fulltext.FEW_DOCS", few_docs)
    path = tmp_path / "bm25.db"
    writer = SQLiteStore(path)
    rng = random.Random(5)
    for i in range(30):
        writer.index_document(SCOPE, "note", f"s{i}", " ".join(rng.choice(WORDS) for _ in range(3)))
    long_ids = [
        writer.index_document(SCOPE, "output", f"o{i}", " ".join(rng.choice(WORDS) for _ in range(200)))
        for i in range(4)
    ]
    writer.close()
    fast = SQLiteStore(path)
    sql = SQLiteStore(path, in_process_bm25=False)
    try:
        fast.bm25_external_doc_tokens, fast.bm25_external_tokens = 150, 500
        for query in QUERIES:
            for kinds in (None, ["note"], ["output"]):
                hits = fast.keyword_search(SCOPE, query, k=8, kinds=kinds)
                assert _key(hits) == _key(sql.keyword_search(SCOPE, query, k=8, kinds=kinds))
        index = fast._bm25
        assert index is not None and _fresh(fast)
        assert index.doc_ids[index.external.view()].tolist() == long_ids
    finally:
        fast.close()
        sql.close()


class TestManyQueries:
    """``keyword_search_many``: each query's hits exactly as alone, on every scoring path, the
    word-index parts read in one snapshot."""

    def _fill(self, store: SQLiteStore) -> None:
        rng = random.Random(11)
        for i in range(200):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10)))
            store.index_document(SCOPE, rng.choice(["fact", "message"]), f"r{i}", text)

    def test_each_query_as_alone_fresh_stale_and_in_a_write_transaction(
        self, stores: tuple[SQLiteStore, SQLiteStore]
    ) -> None:
        fast, other = stores
        self._fill(fast)

        def same() -> None:
            for kinds in (None, ["message"]):
                alone = [_key(fast.keyword_search(SCOPE, q, k=7, kinds=kinds)) for q in QUERIES]
                assert [_key(h) for h in fast.keyword_search_many(SCOPE, QUERIES, k=7, kinds=kinds)] == alone

        same()
        assert _fresh(fast)
        other.delete_documents(SCOPE, "fact", ["r3", "r4"])  # stale: the SQL path serves
        assert [_key(h) for h in fast.keyword_search_many(SCOPE, QUERIES, k=7)] == [
            _key(other.keyword_search(SCOPE, q, k=7)) for q in QUERIES
        ]
        with fast.transaction():
            fast.index_document(SCOPE, "fact", "new", "hotel zebra")
            same()
        same()

    def test_the_word_index_is_read_in_one_snapshot(
        self, stores: tuple[SQLiteStore, SQLiteStore]
    ) -> None:
        fast, _ = stores
        self._fill(fast)
        words = ["hotel", "budget", "paris", "zebra", "dinner", "london"]
        fast.keyword_search_many(SCOPE, words)  # builds the cache, tokenizes the words
        statements: list[str] = []
        fast._conn().set_trace_callback(statements.append)
        try:
            got = fast.keyword_search_many(SCOPE, words, k=24)
        finally:
            fast._conn().set_trace_callback(None)
        assert all(got)
        assert statements.count("BEGIN") == 1
        assert sum("FROM docs WHERE id IN" in s for s in statements) <= 1

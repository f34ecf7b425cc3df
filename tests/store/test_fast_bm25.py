"""The in-process BM25 scorer returns exactly what FTS5's bm25() returns (ids, scores, order)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore

WORDS = ["hotel", "budget", "running", "runs", "ran", "book", "booked", "booking", "paris", "london", "trip", "dinner", "the", "a", "of", "cafe", "résumé", "naïve", "酒店", "预算", "Q7Z9", "zebra", "giraffe", "don't", "e-mail"]
QUERIES = [
    "hotel budget", "running", "runs paris trip", "the", "résumé", "naive", "酒店预算",
    "booked hotel london", "zebra zebra", "Q7Z9", "e-mail", "nothing matches this",
]


def _sql_only(store: SQLiteStore, *args, **kwargs):  # type: ignore[no-untyped-def]
    fast = store._fast_bm25
    store._fast_bm25 = lambda *a, **kw: None  # type: ignore[method-assign]
    try:
        return store.keyword_search(*args, **kwargs)
    finally:
        store._fast_bm25 = fast  # type: ignore[method-assign]


def _key(hits):  # type: ignore[no-untyped-def]
    return [(h.doc.id, h.score, h.rank, h.matched) for h in hits]


def test_matches_the_sql_path_exactly(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = SQLiteStore(tmp_path / "bm25.db")
    try:
        a, b = Scope("t", "a", "ag", "s"), Scope("t", "b", "ag", "s")
        for i in range(600):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
            store.index_document(a if i % 3 else b, rng.choice(["fact", "message"]), f"r{i}", text)
        store.index_document(a, "fact", "empty", "")
        store.delete_documents(a, "fact", ["r1", "r2"])
        for query in QUERIES:
            for scope in (a, b, Scope("t", "a", "ag", "other")):
                for kinds in (None, ["fact"]):
                    for k in (1, 5, 500):
                        fast = store.keyword_search(scope, query, k=k, kinds=kinds)
                        assert _key(fast) == _key(_sql_only(store, scope, query, k=k, kinds=kinds))
                        assert all(h.doc.scope == scope for h in fast)
        assert store._bm25 is not None  # the fast path did serve
    finally:
        store.close()


def test_follows_writes_and_rollbacks(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "bm25.db")
    try:
        scope = Scope("t", "u", "a", "s")
        store.index_document(scope, "note", "1", "giraffe")
        assert [h.doc.ref for h in store.keyword_search(scope, "giraffe")] == ["1"]
        with pytest.raises(RuntimeError), store.transaction():
            store.index_document(scope, "note", "2", "zebra")
            assert [h.doc.ref for h in store.keyword_search(scope, "zebra")] == ["2"]
            raise RuntimeError
        store._bm25_build = (0.0, 0.0)  # rebuild on the next stale query
        assert store.keyword_search(scope, "zebra") == []
        store.index_document(scope, "note", "3", "zebra")
        store._bm25_build = (0.0, 0.0)
        assert [h.doc.ref for h in store.keyword_search(scope, "zebra")] == ["3"]
        store.index_document(scope, "note", "3", "okapi")  # text change
        store._bm25_build = (0.0, 0.0)
        assert store.keyword_search(scope, "zebra") == []
        assert [h.doc.ref for h in store.keyword_search(scope, "okapi")] == ["3"]
        store.delete_documents(scope, "note", ["1"])
        assert store.keyword_search(scope, "giraffe") == []
    finally:
        store.close()

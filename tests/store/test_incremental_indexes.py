"""The SQLite store's in-process indexes (BM25 postings, vector matrices) are updated in place
after writes; every query must return exactly what an index built from scratch returns.

A hypothesis state machine interleaves appends, deletions, supersedes (delete + add, as a
changed fact does), text changes, vector writes, writes by a second store object on the same
file (another process: its deletions cannot be followed in place) and queries; each query is
compared with a freshly opened store (which builds every index from scratch) — ids, scores,
ranks and match kinds identical. A real subprocess's write is seen by the next query, and the
retriever's incremental embedding sync leaves no document without a vector.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mindpalace.providers.embed.hashing import HashingEmbedder
from mindpalace.retrieval.hybrid import HybridRetriever
from mindpalace.scope import ANY, Scope
from mindpalace.store import SearchHit, SQLiteStore

WORDS = ["hotel", "budget", "paris", "booked", "booking", "trip", "zebra", "the", "酒店", "预算"]
SCOPES = [Scope("t", "u1", "a", "s1"), Scope("t", "u1", "a", "s2"), Scope("t", "u2", "a", "s1")]
SEARCHED = [*SCOPES, Scope("t", "u1", ANY, ANY), Scope("t", ANY, ANY, ANY)]
KINDS = ["fact", "message"]
# A few fixed directions, so equal vectors (ties) are common: ties must rank the same way.
DIRECTIONS = np.array(
    [[1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1]], dtype=np.float32
)
MODEL = "m4"

texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)


def _key(hits: list[SearchHit]) -> list[tuple[int, float, int, str]]:
    return [(h.doc.id, h.score, h.rank, h.matched) for h in hits]


class IncrementalIndexes(RuleBasedStateMachine):
    """`live` keeps its caches across steps; a fresh store object per check is the oracle."""

    @initialize()
    def open(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "m.db"
        self.live = SQLiteStore(self.path)
        self.other = SQLiteStore(self.path)  # the same file: another process's writes
        self.docs: dict[tuple[int, str, str], int] = {}  # (scope, kind, ref) -> id
        self.next_ref = 0

    def teardown(self) -> None:
        self.live.close()
        self.other.close()
        self.dir.cleanup()

    def _writer(self, by_other: bool) -> SQLiteStore:
        return self.other if by_other else self.live

    def _add(self, store: SQLiteStore, scope: int, kind: str, text: str) -> int:
        self.next_ref += 1
        ref = f"r{self.next_ref}"
        doc = store.index_document(SCOPES[scope], kind, ref, text)
        self.docs[(scope, kind, ref)] = doc
        return doc

    @rule(scope=st.integers(0, 2), kind=st.sampled_from(KINDS), text=texts,
          direction=st.none() | st.integers(0, 4), chunks=st.integers(1, 2),
          by_other=st.sampled_from([False, False, False, True]))
    def add(self, scope: int, kind: str, text: str, direction: int | None, chunks: int,
            by_other: bool) -> None:
        store = self._writer(by_other)
        doc = self._add(store, scope, kind, text)
        if direction is not None:
            vectors = np.repeat(DIRECTIONS[direction : direction + 1], chunks, axis=0)
            vectors[-1, 3] += 0.5 * (chunks - 1)  # a second chunk points elsewhere
            store.put_embeddings([doc], vectors, MODEL, rows=[chunks])

    @precondition(lambda self: bool(self.docs))
    @rule(pick=st.integers(0, 10_000), by_other=st.sampled_from([False, False, False, True]))
    def delete(self, pick: int, by_other: bool) -> None:
        key = sorted(self.docs)[pick % len(self.docs)]
        scope, kind, ref = key
        assert self._writer(by_other).delete_documents(SCOPES[scope], kind, [ref]) == 1
        del self.docs[key]

    @precondition(lambda self: bool(self.docs))
    @rule(pick=st.integers(0, 10_000), text=texts, direction=st.integers(0, 4))
    def supersede(self, pick: int, text: str, direction: int) -> None:
        """A changed fact: the old document deleted, the new one added with its vector."""
        key = sorted(self.docs)[pick % len(self.docs)]
        scope, kind, ref = key
        with self.live.transaction():
            self.live.delete_documents(SCOPES[scope], kind, [ref])
            del self.docs[key]
            doc = self._add(self.live, scope, kind, text)
            self.live.put_embeddings([doc], DIRECTIONS[direction : direction + 1], MODEL)

    @precondition(lambda self: bool(self.docs))
    @rule(pick=st.integers(0, 10_000), text=texts, by_other=st.booleans())
    def change_text(self, pick: int, text: str, by_other: bool) -> None:
        scope, kind, ref = sorted(self.docs)[pick % len(self.docs)]
        self._writer(by_other).index_document(SCOPES[scope], kind, ref, text)

    @precondition(lambda self: bool(self.docs))
    @rule(pick=st.integers(0, 10_000), direction=st.integers(0, 4))
    def replace_vector(self, pick: int, direction: int) -> None:
        doc = self.docs[sorted(self.docs)[pick % len(self.docs)]]
        self.live.put_embeddings([doc], DIRECTIONS[direction : direction + 1], MODEL)

    @rule(where=st.integers(0, len(SEARCHED) - 1), words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
          kinds=st.none() | st.just(["fact"]), k=st.sampled_from([1, 3, 50]),
          direction=st.integers(0, 4))
    def query(self, where: int, words: list[str], kinds: list[str] | None, k: int,
              direction: int) -> None:
        scope, q = SEARCHED[where], " ".join(words)
        qvec = DIRECTIONS[direction] + np.float32(0.1)
        fresh = SQLiteStore(self.path)  # builds every index from scratch
        try:
            expected_kw = _key(fresh.keyword_search(scope, q, k=k, kinds=kinds))
            expected_vec = _key(fresh.vector_search(scope, qvec, MODEL, k=k, kinds=kinds))
        finally:
            fresh.close()
        # Twice: a stale posting cache answers through SQL once, then is rebuilt, so the
        # following writes are followed in place.
        for _ in range(2):
            assert _key(self.live.keyword_search(scope, q, k=k, kinds=kinds)) == expected_kw
            assert _key(self.live.vector_search(scope, qvec, MODEL, k=k, kinds=kinds)) == expected_vec

    @invariant()
    def every_step_queries_equal_a_fresh_build(self) -> None:
        """After every step (so each write is followed by a query, as in real use)."""
        if not hasattr(self, "live"):
            return
        ids = {d.id for s in SCOPES for d in self.live.iter_documents(s)}
        assert ids == set(self.docs.values())
        self.steps = getattr(self, "steps", 0) + 1
        fresh = SQLiteStore(self.path)  # builds every index from scratch
        try:
            for scope in SEARCHED:  # every scope: a cached view left stale would show
                for kinds in (None, ["fact"]):
                    for store in (fresh, self.live):
                        got = _key(store.keyword_search(scope, "hotel paris 酒店", k=50, kinds=kinds))
                        if store is fresh:
                            expected = got
                        assert got == expected
                        qvec = DIRECTIONS[self.steps % 5]
                        got = _key(store.vector_search(scope, qvec, MODEL, k=7, kinds=kinds))
                        if store is fresh:
                            expected_vec = got
                        assert got == expected_vec
        finally:
            fresh.close()


IncrementalIndexes.TestCase.settings = settings(
    max_examples=25, stateful_step_count=15, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_incremental_indexes_equal_a_fresh_build = IncrementalIndexes.TestCase


class ExternalPostings(IncrementalIndexes):
    """The same machine with `live` holding documents without their postings (as a huge tool
    output's parts are held): appended ones beyond a 2-token catch-up budget, and on its
    rebuilds those of more than 1 token; their scores are read per query from the word
    index, and must still equal a fresh build's (which caches every posting)."""

    @initialize()
    def open(self) -> None:
        super().open()
        self.live.bm25_external_tokens = 2
        self.live.bm25_external_doc_tokens = 1


ExternalPostings.TestCase.settings = IncrementalIndexes.TestCase.settings
test_external_postings_equal_a_fresh_build = ExternalPostings.TestCase


def test_the_cache_follows_in_place_without_a_rebuild(tmp_path: Path) -> None:
    """Appends and this process's deletions never rebuild: the same index objects serve."""
    store = SQLiteStore(tmp_path / "m.db")
    scope = SCOPES[0]
    try:
        a = store.index_document(scope, "fact", "a", "hotel paris")
        store.put_embeddings([a], DIRECTIONS[:1], MODEL)
        store.keyword_search(scope, "hotel")
        store.vector_search(scope, DIRECTIONS[0], MODEL)
        postings, vectors = store._bm25, dict(store._vec_cache)
        b = store.index_document(scope, "fact", "b", "hotel budget")
        store.put_embeddings([b], DIRECTIONS[1:2], MODEL)
        store.delete_documents(scope, "fact", ["a"])
        assert [h.doc.ref for h in store.keyword_search(scope, "hotel")] == ["b"]
        assert [h.doc.ref for h in store.vector_search(scope, DIRECTIONS[0], MODEL)] == ["b"]
        assert store._bm25 is postings
        assert dict(store._vec_cache) == vectors
    finally:
        store.close()


_WRITER = """
import sys
import numpy as np
from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore
store = SQLiteStore(sys.argv[1])
scope = Scope("t", "u1", "a", "s1")
doc = store.index_document(scope, "fact", "from-child", "zebra crossing in paris")
store.put_embeddings([doc], np.array([[0, 0, 1, 1]], np.float32), "m4")
store.delete_documents(scope, "fact", ["gone"])
store.close()
"""


def test_a_second_process_write_is_seen_by_the_next_query(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    scope = SCOPES[0]
    try:
        for ref, text, direction in (("stay", "zebra hotel", 0), ("gone", "zebra paris", 4)):
            doc = store.index_document(scope, "fact", ref, text)
            store.put_embeddings([doc], DIRECTIONS[direction : direction + 1], MODEL)
        assert [h.doc.ref for h in store.keyword_search(scope, "zebra")] == ["stay", "gone"]
        assert store.vector_search(scope, DIRECTIONS[4], MODEL)[0].doc.ref == "gone"
        subprocess.run([sys.executable, "-c", _WRITER, str(path)], check=True, timeout=120)
        assert {h.doc.ref for h in store.keyword_search(scope, "zebra")} == {"stay", "from-child"}
        assert [h.doc.ref for h in store.vector_search(scope, DIRECTIONS[4], MODEL)] == [
            "from-child", "stay",
        ]
        for _ in range(2):  # stale once (another process deleted), then rebuilt: same answer
            assert store.keyword_search(scope, "paris")[0].doc.ref == "from-child"
    finally:
        store.close()


@pytest.mark.parametrize("by_other", [False, True])
def test_incremental_embedding_sync_leaves_nothing_unembedded(tmp_path: Path, by_other: bool) -> None:
    """The retriever embeds only documents above the last synced id while nothing but appends
    happened, and falls back to a full sync after a text change (its vector was dropped)."""
    path = tmp_path / "m.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    embedder = HashingEmbedder(16)
    retriever = HybridRetriever(store, embedder)
    writer = other if by_other else store
    scope = SCOPES[0]
    try:
        writer.index_document(scope, "fact", "a", "hotel paris")
        assert retriever.sync_embeddings() == 1
        writer.index_document(scope, "fact", "b", "budget trip")
        writer.index_document(scope, "fact", "c", "zebra")
        assert retriever.sync_embeddings() == 2  # only the new ones
        assert retriever.sync_embeddings() == 0
        writer.index_document(scope, "fact", "a", "hotel london")  # text change: vector dropped
        writer.index_document(scope, "fact", "d", "booked")
        assert retriever.sync_embeddings() == 2
        assert store.documents_missing_embeddings(embedder.model_id) == []
        assert [h.ref for h in retriever.search(scope, "hotel london", k=1)] == ["a"]
    finally:
        store.close()
        other.close()


def test_a_write_of_each_kind_costs_the_next_recall_no_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``Session.recall`` (the product path): after a remember, an add_message or a
    step, the next recall appends to the BM25 postings and the vector index and embeds only
    the new documents — no index is built again and no full embedding sync runs."""
    import mindpalace.retrieval.embedding_sync as embedding_sync
    from mindpalace import Memory

    counts = {"bm25 builds": 0, "vector builds": 0, "full syncs": 0}

    def counted(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(SQLiteStore, "_bm25_build", counted("bm25 builds", SQLiteStore._bm25_build))
    monkeypatch.setattr(
        SQLiteStore, "_open_vector_index", counted("vector builds", SQLiteStore._open_vector_index)
    )
    monkeypatch.setattr(
        embedding_sync, "sync_embeddings", counted("full syncs", embedding_sync.sync_embeddings)
    )
    with Memory.open(tmp_path / "ws", embed={"provider": "hashing"}) as memory:
        session = memory.session("s", user="u", agent="a")
        for i in range(5):
            session.remember(f"trip{i}:hotel", f"booked hotel number {i} in paris")
        session.add_message({"role": "user", "content": "which hotel did I book in paris?"})
        assert session.recall("hotel paris", k=3)
        first = dict(counts)
        assert first["bm25 builds"] >= 1 and first["vector builds"] >= 1 and first["full syncs"] == 1
        for i in range(3):
            session.remember(f"note{i}:budget", f"the budget for trip {i} is {100 * i} euros")
            session.add_message({"role": "user", "content": f"budget question number {i}"})
            step = session.steps.begin(goal=f"plan budget {i}")
            session.steps.evaluate(step, "success", analysis=f"budget {i} planned")
            hits = session.recall(f"budget trip {i}", k=3)
            assert any(f"trip {i}" in h.text for h in hits)  # the new fact is found at once
        assert counts == first, f"a write made the next recall rebuild: {first} -> {counts}"

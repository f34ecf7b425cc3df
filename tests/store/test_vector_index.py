"""Vector indexes behind the store's seam: exact cosine updated in place ranks exactly as a
fresh one (ties by id); the HNSW index returns exact scores, follows adds and removals, and
finds nearly every exact neighbour; the adaptive index switches at its size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store import SQLiteStore
from mindpalace.store.vectors import AdaptiveIndex, ExactCosineIndex, HnswIndex

DIRECTIONS = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 1, 1]], dtype=np.float32)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=6),
    removals=st.lists(st.integers(0, 40), max_size=8),
    query=st.integers(0, 3), k=st.integers(1, 12),
)
def test_exact_index_updated_in_place_ranks_as_a_fresh_one(
    batches: list[list[int]], removals: list[int], query: int, k: int
) -> None:
    live = ExactCosineIndex(np.empty(0, np.int64), np.empty((0, 0), np.float32))
    ids: list[int] = []
    rows: list[int] = []
    for batch in batches:
        new_ids = np.arange(len(ids), len(ids) + len(batch), dtype=np.int64) * 7 % 41
        live.add(new_ids, DIRECTIONS[batch])
        ids += new_ids.tolist()
        rows += batch
    gone = set(removals)
    live.remove(np.asarray(sorted(gone), np.int64))
    keep = [i for i, doc in enumerate(ids) if doc not in gone]
    fresh = ExactCosineIndex(np.asarray(ids, np.int64)[keep], DIRECTIONS[np.asarray(rows)[keep]])
    q = DIRECTIONS[query] + 0.05
    got, want = live.search(q, k), fresh.search(q, k)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()
    assert len(live) == len(keep)


def test_hnsw_recall_exact_scores_and_removal() -> None:
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((3000, 32)).astype(np.float32)
    ids = np.arange(3000, dtype=np.int64) + 10
    ann = HnswIndex(ids[:2000], matrix[:2000], ef_search=64)
    ann.add(ids[2000:], matrix[2000:])
    exact = ExactCosineIndex(ids, matrix)
    queries = rng.standard_normal((50, 32)).astype(np.float32)
    found = 0
    for q in queries:
        got_ids, got_sims = ann.search(q, 10)
        want_ids, _ = exact.search(q, 10)
        found += len(set(got_ids.tolist()) & set(want_ids.tolist()))
        unit = matrix[got_ids - 10] / np.linalg.norm(matrix[got_ids - 10], axis=1, keepdims=True)
        np.testing.assert_allclose(got_sims, unit @ (q / np.linalg.norm(q)), rtol=1e-5, atol=1e-6)
        assert np.all(np.diff(got_sims) <= 0)  # best first
    assert found / (10 * len(queries)) >= 0.95
    top = int(ann.search(queries[0], 1)[0][0])
    assert ann.remove(np.array([top])) == 1
    assert top not in ann.search(queries[0], 10)[0].tolist()
    assert len(ann) == 2999


def test_adaptive_index_switches_at_its_size() -> None:
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((300, 8)).astype(np.float32)
    ids = np.arange(300, dtype=np.int64)
    index = AdaptiveIndex(ids[:200], matrix[:200], min_ann_rows=250)
    assert not index.approximate
    index.add(ids[200:], matrix[200:])
    assert index.approximate and len(index) == 300
    assert index.search(matrix[5], 1)[0].tolist() == [5]
    assert not AdaptiveIndex(ids, matrix, min_ann_rows=0).approximate  # 0 = always exact


def test_background_build_answers_exactly_until_the_graph_is_taken_into_use() -> None:
    rng = np.random.default_rng(2)
    matrix = rng.standard_normal((400, 8)).astype(np.float32)
    ids = np.arange(400, dtype=np.int64)
    index = AdaptiveIndex(ids[:300], matrix[:300], min_ann_rows=250, background=True)
    assert index.building and not index.approximate  # the query path never builds the graph
    # changes while the graph builds reach it when it is taken into use
    index.add(ids[300:], matrix[300:])
    assert index.remove(np.array([7, 350])) == 2
    assert index.wait_built(timeout=60)
    assert not index.building and len(index) == 398
    assert index.search(matrix[399], 1)[0].tolist() == [399]
    for gone in (7, 350):
        assert gone not in index.search(matrix[gone], 10)[0].tolist()
    assert index.search(matrix[5], 1)[0].tolist() == [5]


def test_a_store_above_the_size_answers_while_its_graph_builds(tmp_path: Path) -> None:
    scope = Scope("t", "u", "a", "s")
    store = SQLiteStore(tmp_path / "memory.db", settings=StoreSettings(ann_min_vectors=50))
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((80, 8)).astype(np.float32)
    doc_ids = [store.index_document(scope, "note", f"n{i}", f"note {i}") for i in range(80)]
    store.put_embeddings(doc_ids, matrix, "m8")
    hits = store.vector_search(scope, matrix[3], "m8", k=3)  # exact while the graph builds
    assert hits[0].doc.id == doc_ids[3]
    index = next(iter(store._vec_cache.values())).index
    assert isinstance(index, AdaptiveIndex) and index.wait_built(timeout=60)
    assert store.vector_search(scope, matrix[3], "m8", k=3)[0].doc.id == doc_ids[3]


def test_a_handed_over_matrix_is_normalised_in_place_and_ranks_as_a_copied_one() -> None:
    rng = np.random.default_rng(3)
    matrix = (rng.standard_normal((5000, 16)) * 3).astype(np.float32)
    ids = np.arange(5000, dtype=np.int64) * 3
    copied = ExactCosineIndex(ids, matrix)  # copy=True never changes its input
    assert np.array_equal(copied.matrix, matrix / np.linalg.norm(matrix, axis=1, keepdims=True))
    owned = matrix.copy()
    handed = AdaptiveIndex(ids, owned, min_ann_rows=0, copy=False)
    assert isinstance(handed.inner, ExactCosineIndex)
    assert np.array_equal(owned, copied.matrix)  # normalised in place: the copy's values, bit for bit
    for q in rng.standard_normal((20, 16)).astype(np.float32):
        got, want = handed.search(q, 10), copied.search(q, 10)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    handed.add(ids[:3] + 1, matrix[:3])  # grows past the handed-over buffer
    assert len(handed) == 5003 and handed.search(matrix[1], 2)[0].tolist() == [3, 4]


def test_building_an_index_holds_no_second_matrix() -> None:
    """Peak memory of the build (numpy reports its buffers to tracemalloc): a handed-over
    matrix adds no copy of itself; normalising a copied one adds one matrix, not two (the
    norms are computed a bounded block of rows at a time)."""
    import tracemalloc

    rng = np.random.default_rng(4)
    matrix = rng.standard_normal((100_000, 64)).astype(np.float32)  # 25.6 MB
    ids = np.arange(100_000, dtype=np.int64)
    size = matrix.nbytes
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        ExactCosineIndex(ids, matrix, copy=False)
        handed_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        ExactCosineIndex(ids, matrix.copy())
        copied_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert handed_peak < 0.25 * size
    assert copied_peak < 2.25 * size  # the argument's copy + the unit rows, no 16 MB squares


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_release_free_heap_returns_freed_heap_pages_after_large_builds() -> None:
    import pytest

    from mindpalace.store.heap import TRIM_MIN_ROWS, _malloc_trim, release_free_heap

    assert release_free_heap(TRIM_MIN_ROWS - 1) is False  # small builds: no call at all
    if _malloc_trim() is None:
        pytest.skip("no glibc malloc_trim here")
    # 80 MB of 2 KB blocks from the C heap, every 64th kept: the rest is freed in holes that
    # free() alone leaves resident
    blocks = [bytes(2048) for _ in range(40_000)]
    kept = blocks[::64]
    del blocks
    before = _rss_kib()
    assert release_free_heap(TRIM_MIN_ROWS)
    assert _rss_kib() < before - 40_000  # most of the 80 MB went back
    assert len(kept) == 625


@settings(max_examples=40, deadline=None)
@given(parts=st.lists(st.binary(min_size=0, max_size=3000).map(lambda b: b[: len(b) // 4 * 4]), max_size=40),
       capacity=st.sampled_from([1, 4096, 10_000]))
def test_growing_buffer_holds_exactly_the_bytes_appended(parts: list[bytes], capacity: int) -> None:
    from mindpalace.store.heap import GrowingBuffer

    buf = GrowingBuffer(capacity)
    for part in parts:
        buf.extend(part)
    assert len(buf) == sum(map(len, parts))
    got = buf.array(np.float32)
    want = np.frombuffer(b"".join(parts), np.float32)
    assert got.tobytes() == want.tobytes() and got.flags.writeable


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 3_000), k=st.integers(1, 40), levels=st.integers(1, 50),
    dead=st.floats(0.0, 0.9), seed=st.integers(0, 2**32 - 1),
)
def test_kth_largest_by_block_maxima_equals_a_full_partition(
    n: int, k: int, levels: int, dead: float, seed: int
) -> None:
    """The block-bounded k-th largest similarity is exactly the full partition's, with many ties
    (few distinct values) and dropped rows (−inf); and the search built on it ranks as a full
    sort of (−similarity, id, row) does."""
    from mindpalace.store.vectors import _best, _kth_largest

    rng = np.random.default_rng(seed)
    sims = (rng.integers(0, levels, n) / levels).astype(np.float32)
    sims[rng.random(n) < dead] = -np.inf
    live = int(np.isfinite(sims).sum())
    k = min(k, n)
    assert _kth_largest(sims, k) == np.partition(sims, n - k)[n - k]
    ids = rng.integers(1, 50, n).astype(np.int64)
    want = min(k, live)
    order = np.lexsort((np.arange(n), ids, -sims))[:want]
    assert _best(sims, ids, k, live).tolist() == order.tolist()


def test_appends_go_into_the_handed_over_room_without_copying_the_matrix() -> None:
    """A handed-over matrix with room after it (an array whose first rows are the matrix):
    appends up to the room are written in place — the buffer is never copied — and the index
    ranks as one built from all the rows; past the room it grows as before. Room that does
    not start at the matrix is ignored."""
    rng = np.random.default_rng(5)
    rows = (rng.standard_normal((1400, 8)) * 2).astype(np.float32)
    room = np.zeros((1300, 8), np.float32)
    room[:1000] = rows[:1000]
    ids = np.arange(1400, dtype=np.int64) + 1
    index = ExactCosineIndex(ids[:1000], room[:1000], copy=False, room=room)
    start = room.__array_interface__["data"][0]
    for at in range(1000, 1300, 60):
        index.add(ids[at : at + 60], rows[at : at + 60])
        assert index._buf.__array_interface__["data"][0] == start  # written in place
    fresh = ExactCosineIndex(ids[:1300], rows[:1300])
    for q in rng.standard_normal((10, 8)).astype(np.float32):
        got, want = index.search(q, 7), fresh.search(q, 7)
        assert got[0].tolist() == want[0].tolist() and np.allclose(got[1], want[1])
    index.add(ids[1300:], rows[1300:])  # past the room: grown (copied) as before
    assert len(index) == 1400 and index._buf.__array_interface__["data"][0] != start
    other = np.zeros((1300, 8), np.float32)
    elsewhere = ExactCosineIndex(ids[:1000], rows[:1000].copy(), copy=False, room=other)
    assert elsewhere._buf.shape[0] == 1000  # not the matrix's own memory: no room taken


def test_a_store_index_build_keeps_room_so_a_write_copies_no_matrix(tmp_path: Path) -> None:
    scope = Scope("t", "u", "a", "s")
    store = SQLiteStore(tmp_path / "m.db")
    try:
        rng = np.random.default_rng(6)
        with store.transaction():
            docs = [store.index_document(scope, "fact", str(i), f"fact {i}") for i in range(400)]
            store.put_embeddings(docs, rng.standard_normal((400, 16)).astype(np.float32), "m16")
        store.vector_search(scope, np.ones(16, np.float32), "m16", k=3)
        (cached,) = store._vec_cache.values()
        inner = cached.index.inner
        assert isinstance(inner, ExactCosineIndex) and inner._buf.shape[0] == 500  # 25% room
        start = inner._buf.__array_interface__["data"][0]
        new = store.index_document(scope, "fact", "new", "the new fact")
        store.put_embeddings([new], np.ones((1, 16), np.float32), "m16")
        assert store.vector_search(scope, np.ones(16, np.float32), "m16", k=1)[0].doc.id == new
        assert inner._buf.__array_interface__["data"][0] == start and len(inner) == 401
    finally:
        store.close()

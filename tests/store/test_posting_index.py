"""PostingIndex unit behaviour: appends (with external documents), folds and removals give the
scores of an index built from scratch over the same postings."""

from __future__ import annotations

import random
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace.store import bm25, topk
from mindpalace.store.bm25 import PostingIndex, _Starts, _Vocab

VOCAB = [f"w{i}" for i in range(40)]


def _docs(rng: random.Random, first: int, n: int) -> dict[int, list[str]]:
    return {first + i: [rng.choice(VOCAB[: rng.randint(3, 40)]) for _ in range(rng.randint(1, 15))]
            for i in range(n)}


def _occurrences(docs: dict[int, list[str]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens, token index, doc id) per occurrence, in index order (token, then doc)."""
    pairs = sorted((t, d) for d, words in docs.items() for t in words)
    tokens = sorted({t for t, _ in pairs})
    at = {t: i for i, t in enumerate(tokens)}
    return (tokens, np.array([at[t] for t, _ in pairs], np.int64),
            np.array([d for _, d in pairs], np.int64))


def _build(docs: dict[int, list[str]]) -> PostingIndex:
    tokens, tok, occ = _occurrences(docs)
    vocab = [(t, int(c)) for t, c in zip(tokens, np.bincount(tok, minlength=len(tokens)), strict=True)]
    return PostingIndex.build(None, np.array(sorted(docs), np.int64), vocab, occ)


def _extra(docs: dict[int, list[str]], external: set[int], token: str) -> tuple[np.ndarray, np.ndarray]:
    held = sorted(d for d in external if token in docs[d])
    return np.array(held, np.int64), np.array([docs[d].count(token) for d in held], np.float64)


@pytest.mark.parametrize("seed", range(6))
def test_appends_folds_and_externals_score_as_a_fresh_build(seed: int) -> None:
    rng = random.Random(seed)
    docs = _docs(rng, 1, 30)
    index = _build(docs)
    external: set[int] = set()
    for batch in range(4):
        new = _docs(rng, max(docs) + 1 + rng.randint(0, 3), rng.randint(1, 12))
        held = {d: len(w) for d, w in new.items() if rng.random() < 0.4}
        kept = {d: w for d, w in new.items() if d not in held}
        tokens, tok, occ = _occurrences(kept) if kept else ([], np.empty(0, np.int64), np.empty(0, np.int64))
        index.append(np.array(sorted(new), np.int64), tokens, tok, occ, external=held)
        docs.update(new)
        external |= set(held)
        if batch == 2:
            index._fold()  # what a large side segment triggers
            assert not index.delta
    gone = rng.sample(sorted(docs), 5)
    index.remove(np.array(gone, np.int64))
    for d in gone:
        del docs[d]
    external -= set(gone)
    fresh = _build(docs)
    live = np.array(sorted(docs), np.int64)
    for query in (["w0"], ["w1", "w2"], ["w3", "w3", "w39"], VOCAB[:10]):
        got_view = index.view("all", live)
        extra = {t: _extra(docs, external, t) for t in query}
        got = index.top(query, got_view, 10, extra=extra)
        want = fresh.top(query, fresh.view("all", live), 10)
        assert got == want
        assert set(index.external_ids(got_view).tolist()) == external


def test_bad_external_appends_are_refused() -> None:
    index = _build({1: ["a", "b"], 2: ["b"]})
    with pytest.raises(ValueError, match="among the appended"):
        index.append(np.array([3], np.int64), [], np.empty(0, np.int64), np.empty(0, np.int64),
                     external={4: 2})
    with pytest.raises(ValueError, match="without occurrences"):
        index.append(np.array([3], np.int64), ["a"], np.array([0]), np.array([3]), external={3: 1})


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 10_000), n=st.integers(5, 400), k=st.integers(1, 30),
    query=st.lists(st.integers(0, 39), min_size=1, max_size=5),
    ratio=st.sampled_from([None, 0.3, 0.8]), scoped=st.booleans(), appended=st.booleans(),
    long_postings=st.sampled_from([0, 8, 40, 4096]), first_read=st.sampled_from([1, 16, 2048]),
    long_docs=st.booleans(),
)
def test_pruned_top_k_is_the_dense_top_k(
    seed: int, n: int, k: int, query: list[int], ratio: float | None, scoped: bool,
    appended: bool, long_postings: int, first_read: int, long_docs: bool,
) -> None:
    """Reading long lists by impact (large scopes) returns exactly the dense pass's ids,
    scores and order: Zipf-like words (a few in most documents), repeated query and document
    words (term frequencies above 1, so impact runs of several tiers), some long documents, a
    scope of part of the index, removed documents, a side segment of appended documents, the
    df filter; lists read whole or by impact, first reads from 1 posting up."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(VOCAB))]
    docs = {d: rng.choices(VOCAB, weights, k=rng.randint(1, 60 if long_docs and d % 7 == 0 else 12))
            for d in range(1, n + 1)}
    cut = n // 2 if appended else n
    index = _build({d: w for d, w in docs.items() if d <= cut})
    if appended:
        tokens, tok, occ = _occurrences({d: w for d, w in docs.items() if d > cut})
        index.append(np.array(range(cut + 1, n + 1), np.int64), tokens, tok, occ)
    index.remove(np.array(rng.sample(sorted(docs), n // 10), np.int64))
    in_scope = [d for d in docs if not scoped or d % 3]
    view = index.view("s", np.array(in_scope, np.int64))
    tokens = [VOCAB[q] for q in query]
    dense = index.top(tokens, view, k, max_df_ratio=ratio)
    assert n < bm25.PRUNE_MIN_DOCS
    with (patch.object(bm25, "PRUNE_MIN_DOCS", 0), patch.object(topk, "LONG_POSTINGS", long_postings),
          patch.object(topk, "FIRST_READ_POSTINGS", first_read)):
        pruned = index.top(tokens, view, k, max_df_ratio=ratio)
        took = index._top_pruned(tokens, view, k, ratio)
    assert pruned == dense
    assert took is None or took == dense


def test_common_words_alone_are_read_by_impact() -> None:
    """A query made only of words found in most documents is answered from the impact read
    (not the dense fallback), reading a small part of the lists, with the dense answer."""
    rng = random.Random(7)
    docs = {d: ["common"] * rng.randint(1, 2) + (["often"] if d % 3 else []) + [f"u{d}"] * rng.randint(0, 9)
            for d in range(1, 6000)}
    index = _build(docs)
    view = index.view("s", np.array(sorted(docs), np.int64))
    query = ["common", "often"]
    read: list[int] = []
    lookup = topk._lookup

    def counted(idx: np.ndarray, tf: np.ndarray, cand: np.ndarray) -> np.ndarray:
        read.append(int(cand.shape[0]))
        return lookup(idx, tf, cand)

    with (patch.object(topk, "LONG_POSTINGS", 64), patch.object(topk, "FIRST_READ_POSTINGS", 32),
          patch.object(topk, "_lookup", counted)):
        took = index._top_pruned(query, view, 10, None)
    assert took is not None and took == index.top(query, view, 10)
    assert max(read) < len(docs) // 4  # the candidates scored: a fraction of the postings


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 300)), max_size=200),
       avgdl=st.floats(0.5, 400.0))
def test_impact_order_runs_never_rise_within_a_term_frequency(
    pairs: list[tuple[int, int]], avgdl: float
) -> None:
    """Runs list every posting once, hold one (tf, length) each, go by tf descending then
    length ascending, so within a tf the impact only falls, whatever the average length."""
    tf = np.array([p[0] for p in pairs], np.float32)
    lengths = np.array([p[1] for p in pairs], np.float64)
    order = topk.ImpactOrder.of(tf, lengths)
    assert sorted(order.perm.tolist()) == list(range(len(pairs)))
    for r in range(order.run_tf.shape[0]):
        inside = order.perm[order.run_start[r] : order.run_start[r + 1]]
        assert inside.size and np.all(tf[inside] == order.run_tf[r])
        assert np.all(lengths[inside] == order.run_len[r])
        assert list(inside) == sorted(inside)
    keys = list(zip(-order.run_tf, order.run_len, strict=True))
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    unit = order.run_tf * 2.2 / (order.run_tf + bm25.length_norm(order.run_len, avgdl))
    same_tf = order.run_tf[1:] == order.run_tf[:-1]
    assert np.all(unit[1:][same_tf] <= unit[:-1][same_tf])


def test_impact_order_refuses_unaligned_or_fractional_input() -> None:
    with pytest.raises(ValueError, match="aligned"):
        topk.ImpactOrder.of(np.ones(3, np.float32), np.ones(2))
    with pytest.raises(ValueError, match="whole numbers"):
        topk.ImpactOrder.of(np.ones(2, np.float32), np.array([1.0, 2.5]))


def test_pruning_answers_a_query_with_a_rare_and_a_common_word() -> None:
    """The pruned path is taken (not only fallen back from) where it is meant to: a rare word
    and words in most documents."""
    docs = {d: ["common", "often"] + (["rare"] if d % 97 == 0 else []) + [f"u{d}"]
            for d in range(1, 3000)}
    index = _build(docs)
    view = index.view("s", np.array(sorted(docs), np.int64))
    took = index._top_pruned(["rare", "common", "often"], view, 10, None)
    assert took is not None and took == index.top(["rare", "common", "often"], view, 10)
    assert {d for d, _ in took} <= {d for d in docs if d % 97 == 0}


@pytest.mark.parametrize("seed", range(8))
def test_a_view_extended_by_appends_scores_as_a_fresh_view(seed: int) -> None:
    """The scope statistics extended in place after appends (no removal) are bit-identical
    to a view computed from scratch, removals in between included; so are the document
    frequencies the pruned path keeps per view."""
    rng = random.Random(seed)
    docs = _docs(rng, 1, 60)
    index = _build(docs)
    scoped = lambda ids: np.array([d for d in ids if d % 4], np.int64)  # noqa: E731
    view = index.view("s", scoped(sorted(docs)))
    query = [rng.choice(VOCAB) for _ in range(3)]
    for step in range(5):
        with patch.object(bm25, "PRUNE_MIN_DOCS", 0):
            index.top(query, view, 10)  # refreshes the statistics, counts the frequencies
        new = _docs(rng, max(docs) + 1, rng.randint(1, 9))
        tokens, tok, occ = _occurrences(new)
        index.append(np.array(sorted(new), np.int64), tokens, tok, occ)
        docs.update(new)
        if step == 3:
            index.remove(np.array(rng.sample(sorted(docs), 3), np.int64))
        index.extend_view(view, scoped(sorted(new)))
        live = [d for d in sorted(docs) if index.alive.a[int(np.searchsorted(index.doc_ids, d))]]
        fresh = index.view("fresh", scoped(live))
        assert index.top(query, view, 10) == index.top(query, fresh, 10)
        assert view.avgdl == fresh.avgdl and np.array_equal(view.norm, fresh.norm)
        assert np.array_equal(view.local, fresh.local)
        with patch.object(bm25, "PRUNE_MIN_DOCS", 0):  # document frequencies kept per view
            assert index.top(query, view, 10) == index.top(query, fresh, 10)
        for token in query:
            if token in fresh.dfs:
                assert view.dfs[token][0] == fresh.dfs[token][0]


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=40),
    probes=st.lists(st.text(max_size=6), max_size=20),
    data=st.data(),
)
def test_compact_token_table_looks_up_like_a_dict(
    tokens: list[str], probes: list[str], data: st.DataObject
) -> None:
    # Tokens in any order (a fold appends new ones at the end), any script, some without postings.
    counts = [data.draw(st.integers(0, 3)) for _ in tokens]
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    starts = _Starts(_Vocab(tokens), bounds)
    expected = {t: (int(bounds[i]), int(bounds[i + 1])) for i, t in enumerate(tokens) if counts[i]}
    assert list(_Vocab(tokens)) == tokens
    assert dict(starts) == expected
    assert [(t, s, e) for t, s, e in starts.spans()] == [(t, *expected[t]) for t in expected]
    for probe in [*tokens, *probes]:
        assert starts.get(probe) == expected.get(probe)
    for probe in [*probes, *tokens]:  # asked again: answered from the memo, the same
        assert starts.get(probe, (0, 0)) == expected.get(probe, (0, 0))


def test_the_token_memo_is_bounded_and_answers_the_same_after_it_is_cleared() -> None:
    tokens = [f"t{i:05d}" for i in range(300)]
    bounds = np.arange(len(tokens) + 1, dtype=np.int64)
    starts = _Starts(_Vocab(tokens), bounds)
    with patch.object(bm25, "_SPAN_MEMO", 16):
        for _ in range(2):
            for i, t in enumerate(tokens):
                assert starts.get(t) == (i, i + 1)
                assert len(starts._asked) <= 16
        assert starts.get("absent", "none") == "none"


@settings(max_examples=300)
@given(
    scores=st.lists(st.sampled_from([0.0, -1.0, 0.5, 1.0, 1.5, 2.25, 7.0]), max_size=60),
    k=st.integers(0, 25),
    sort_all=st.sampled_from([0, 3, 2_048]),
    seed=st.integers(0, 2**16),
)
def test_top_k_is_the_best_k_by_score_then_id_whichever_way_it_cuts(
    scores: list[float], k: int, sort_all: int, seed: int
) -> None:
    # ties everywhere (few distinct scores), ids distinct and in any order; the whole-sort path
    # (up to _SORT_ALL positive scores) and the partition path give the same list
    from mindpalace.store import okapi

    ids = np.random.default_rng(seed).permutation(len(scores) * 3)[: len(scores)].astype(np.int64)
    expected = sorted(((int(i), s) for i, s in zip(ids, scores, strict=True) if s > 0), key=lambda h: (-h[1], h[0]))
    with patch.object(okapi, "_SORT_ALL", sort_all):
        got = okapi.top_k(np.array(scores, dtype=np.float64), ids, k)
    assert got == (expected[:k] if k > 0 else [])


@pytest.mark.parametrize("seed", range(6))
def test_a_small_append_holds_what_a_batch_append_holds(seed: int) -> None:
    """The few-occurrence append (counted in Python) leaves exactly the side segment, lengths
    and scores of the batch append (sorted segment), and folds to the same main segment."""
    rng = random.Random(seed)
    docs = _docs(rng, 1, 40)
    small, batch = _build(docs), _build(docs)
    for _ in range(5):
        new = _docs(rng, max(docs) + 1 + rng.randint(0, 3), rng.randint(1, 4))
        tokens, tok, occ = _occurrences(new)
        order = list(range(len(tok)))
        rng.shuffle(order)  # an append may list its occurrences in any order
        args = (np.array(sorted(new), np.int64), tokens, tok[order], occ[order])
        small.append(*args)
        with patch.object(bm25, "_SMALL_APPEND", -1):
            batch.append(*args)
        docs.update(new)
    assert small.delta == batch.delta and small.delta_postings == batch.delta_postings
    assert np.array_equal(small.doc_len, batch.doc_len) and np.array_equal(small.doc_ids, batch.doc_ids)
    live = np.array(sorted(docs), np.int64)
    for query in (["w0"], ["w1", "w2"], ["w3", "w3", "w39"], VOCAB[:10]):
        assert small.top(query, small.view("all", live), 10) == batch.top(query, batch.view("all", live), 10)
    small._fold()
    batch._fold()
    assert list(small.main.tokens) == list(batch.main.tokens)
    assert np.array_equal(small.main.post_doc, batch.main.post_doc)
    assert np.array_equal(small.main.post_tf, batch.main.post_tf)

"""PostingIndex unit behaviour: appends (with external documents), folds and removals give the
scores of an index built from scratch over the same postings."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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

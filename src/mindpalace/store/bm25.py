"""BM25 over the FTS5 word index with statistics of the searched scope, in numpy.

Okapi BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N − n + 0.5)/(n + 0.5))) where N, n (documents
holding the term) and the average document length are counted **over the documents of the
searched scope and kinds only**: one tenant's (or user's) documents never change another's
scores, and a long reply is length-normalised against the documents it competes with, not
against the whole workspace. Tokens and document lengths are exactly the word index's (read
through its ``fts5vocab`` tables and its ``docsize`` table), so stemming and CJK bigrams are
the index's own.

Two ways to get the postings, same scores:

* :class:`PostingIndex` — the whole index's postings cached in numpy at one search
  generation; a query restricts them to the scope with a boolean mask (fast path, ~ms at
  100k documents);
* :func:`score_postings` over postings read per query term from SQL (used while the cache is
  stale or inside a write transaction).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

K1 = 1.2
B = 0.75


def idf(n_docs: int, n_hit: int) -> float:
    """ln(1 + (N − n + 0.5)/(n + 0.5)): positive for every n ≤ N (no common-term cliff)."""
    return math.log(1.0 + (n_docs - n_hit + 0.5) / (n_hit + 0.5))


def score_postings(
    postings: Sequence[tuple[np.ndarray, np.ndarray]],
    doc_len: np.ndarray,
    avgdl: float,
    n_docs: int,
    *,
    max_df_ratio: float | None = None,
) -> np.ndarray:
    """BM25 scores of `n_docs` documents (positions 0…n_docs−1) for one query.

    Args:
        postings: per query term, (document positions, term frequencies) restricted to the
            scope; a repeated term is a repeated entry (it counts twice, as in FTS5).
        doc_len: tokens per document, aligned with positions (float64).
        avgdl: mean document length of the scope (tokens).
        n_docs: documents in the scope (N).
        max_df_ratio: drop terms found in more than this share of the scope's documents
            while a rarer term remains (the rarest term always stays); None keeps all.
    Returns:
        float64 array of shape (n_docs,), 0 for documents holding no term.
    """
    score = np.zeros(n_docs, dtype=np.float64)
    if n_docs == 0:
        return score
    terms = list(postings)
    if max_df_ratio is not None and len(terms) > 1:
        dfs = [int(p.shape[0]) for p, _ in terms]
        keep = [t for t, df in zip(terms, dfs, strict=True) if df <= max_df_ratio * n_docs]
        terms = keep or [terms[int(np.argmin(dfs))]]
    norm = K1 * (1.0 - B + B * doc_len / max(avgdl, 1e-9))
    for pos, tf in terms:
        if pos.size == 0:
            continue
        weight = idf(n_docs, int(pos.shape[0]))
        score[pos] += weight * (tf * (K1 + 1.0)) / (tf + norm[pos])
    return score


def top_k(score: np.ndarray, ids: np.ndarray, k: int) -> list[tuple[int, float]]:
    """(doc id, score) of the best `k` positive scores, ties broken by smaller doc id."""
    cand = np.flatnonzero(score > 0.0)
    if cand.size == 0 or k <= 0:
        return []
    s = score[cand]
    if cand.size > k:
        kth = np.partition(s, cand.size - k)[cand.size - k]  # k-th largest
        keep = s >= kth  # every tie of the k-th score stays, so id order decides
        cand, s = cand[keep], s[keep]
    found = ids[cand]
    order = np.lexsort((found, -s))[:k]
    return [(int(found[i]), float(s[i])) for i in order]


@dataclass
class _ScopeView:
    mask: np.ndarray  # bool over index positions
    positions: np.ndarray  # index positions of the scope's documents, ascending
    local: np.ndarray  # index position -> position within the scope (valid where mask)
    n_docs: int
    avgdl: float


@dataclass
class PostingIndex:
    """Postings of the whole word index at one search generation."""

    generation: object
    doc_ids: np.ndarray  # sorted docs.id of every document (int64)
    doc_len: np.ndarray  # tokens per document (float64), aligned with doc_ids
    starts: dict[str, tuple[int, int]]  # token -> [start, end) into post_doc / post_tf
    post_doc: np.ndarray  # document positions (into doc_ids), int32
    post_tf: np.ndarray  # term frequency in that document, float64
    views: dict[object, _ScopeView] = field(default_factory=dict)

    @property
    def n_docs(self) -> int:
        return int(self.doc_ids.shape[0])

    @classmethod
    def build(
        cls, generation: object, doc_ids: np.ndarray, vocab: list[tuple[str, int]], docs: np.ndarray
    ) -> PostingIndex:
        """`vocab`: (token, occurrences) in index order (the ``fts5vocab`` row table); `docs`:
        the document id of every occurrence in the same order (the ``instance`` table), both
        read in one snapshot.

        Raises:
            LookupError: the two tables and the docs table disagree (a torn read).
        """
        n = int(doc_ids.shape[0])
        tokens = [t for t, _ in vocab]
        counts = np.fromiter((c for _, c in vocab), dtype=np.int64, count=len(vocab))
        if int(counts.sum()) != int(docs.shape[0]):
            raise LookupError("word index vocabulary and instances disagree")
        tok = np.repeat(np.arange(len(tokens), dtype=np.int64), counts)
        pos = np.searchsorted(doc_ids, docs)
        if docs.size and (pos.max() >= n or not np.array_equal(doc_ids[pos], docs)):
            raise LookupError("word index and docs table disagree")
        # one key per (token, document): occurrences collapse into a term frequency
        key = tok * max(n, 1) + pos
        uniq, tf = np.unique(key, return_counts=True)
        post_tok = uniq // max(n, 1)
        post_doc = (uniq % max(n, 1)).astype(np.int32)
        post_tf = tf.astype(np.float64)
        doc_len = np.bincount(post_doc, weights=post_tf, minlength=n).astype(np.float64)
        bounds = np.searchsorted(post_tok, np.arange(len(tokens) + 1))
        starts = {t: (int(bounds[i]), int(bounds[i + 1])) for i, t in enumerate(tokens)}
        return cls(generation, doc_ids, doc_len, starts, post_doc, post_tf)

    def view(self, key: object, ids_in_scope: np.ndarray) -> _ScopeView:
        """The scope's mask and statistics (cached under `key`, bounded)."""
        found = self.views.get(key)
        if found is None:
            mask = np.zeros(self.n_docs, dtype=bool)
            mask[np.searchsorted(self.doc_ids, ids_in_scope)] = True  # same snapshot: all found
            positions = np.flatnonzero(mask)
            n = int(positions.shape[0])
            avgdl = float(self.doc_len[positions].mean()) if n else 0.0
            found = _ScopeView(mask, positions, np.cumsum(mask) - 1, n, avgdl)
            if len(self.views) > 64:  # bounded: scopes come and go
                self.views.clear()
            self.views[key] = found
        return found

    def top(
        self, tokens: Sequence[str], view: _ScopeView, k: int, *, max_df_ratio: float | None = None
    ) -> list[tuple[int, float]]:
        """(doc id, score) best first, ties by doc id, statistics of `view`'s scope; `tokens`
        are index tokens, one per query term (a repeated token counts twice)."""
        if view.n_docs == 0 or k <= 0:
            return []
        # Scope-local positions: scores are computed over the scope's documents only.
        local = view.local
        postings = []
        for token in tokens:
            start, end = self.starts.get(token, (0, 0))
            idx = self.post_doc[start:end]
            inside = view.mask[idx]
            postings.append((local[idx[inside]], self.post_tf[start:end][inside]))
        scope_pos = view.positions
        score = score_postings(
            postings, self.doc_len[scope_pos], view.avgdl, view.n_docs, max_df_ratio=max_df_ratio
        )
        return top_k(score, self.doc_ids[scope_pos], k)

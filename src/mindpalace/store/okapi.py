"""Okapi BM25's formula and the top-k selection every BM25 path shares.

k1 = 1.2, b = 0.75 and idf = ln(1 + (N − n + 0.5)/(n + 0.5)) (N documents in the searched
scope, n of them holding the term): a document scores
Σ idf·tf·(k1 + 1)/(tf + k1·(1 − b + b·len/avgdl)) over the query terms.
"""

from __future__ import annotations

import math

import numpy as np

K1 = 1.2
B = 0.75


def idf(n_docs: int, n_hit: int) -> float:
    """ln(1 + (N − n + 0.5)/(n + 0.5)): positive for every n ≤ N (no common-term cliff)."""
    return math.log(1.0 + (n_docs - n_hit + 0.5) / (n_hit + 0.5))


def length_norm(doc_len: np.ndarray, avgdl: float) -> np.ndarray:
    """BM25's per-document length normalisation K1·(1 − B + B·len/avgdl) (float64)."""
    return K1 * (1.0 - B + B * doc_len / max(avgdl, 1e-9))


_SORT_ALL = 2_048  # up to this many positive scores are sorted whole: one lexsort, no partition


def top_k(score: np.ndarray, ids: np.ndarray, k: int) -> list[tuple[int, float]]:
    """(doc id, score) of the best `k` positive scores, ties broken by smaller doc id.

    `score`, `ids`: same length (ids distinct). Up to ``_SORT_ALL`` positive scores are
    ordered by one ``lexsort`` on (−score, id) and cut at k; more are first cut to the k-th
    score's neighbourhood by ``partition``. Both give the k first of the same total order."""
    cand = np.flatnonzero(score > 0.0)
    if cand.size == 0 or k <= 0:
        return []
    s = score[cand]
    if cand.size > max(k, _SORT_ALL):
        kth = np.partition(s, cand.size - k)[cand.size - k]  # k-th largest
        greater = np.flatnonzero(s > kth)
        ties = np.flatnonzero(s == kth)
        need = k - greater.size
        if ties.size > need:  # of the k-th score's ties only the smallest ids can make it
            ties = ties[np.argpartition(ids[cand[ties]], need - 1)[:need]]
        keep = np.concatenate([greater, ties])
        cand, s = cand[keep], s[keep]
    found = ids[cand]
    order = np.lexsort((found, -s))[:k]
    # one conversion per array, not two numpy scalars per hit: the same ints and doubles
    return list(zip(found[order].tolist(), s[order].tolist(), strict=True))

"""In-process BM25 over the FTS5 word index: the same scores as FTS5's ``bm25()``, in numpy.

FTS5 answers ``ORDER BY bm25(docs_fts) LIMIT k`` by scoring *every* row that contains any
query term, then joining each to ``docs`` for the scope filter; a common term makes that
O(matching rows) in SQLite's VM (~100 ms at 100k documents). This module reads the index's
own postings once (through the ``fts5vocab`` ``instance`` table, so tokens are exactly the
indexed tokens), keeps them as numpy arrays and scores a query with vectorised arithmetic
that mirrors ``fts5Bm25Function`` operation by operation (k1 = 1.2, b = 0.75, IDF floor
1e-6, statistics over the whole index, phrases summed in query order), so the scores are
bit-identical to SQLite's and ties are broken by document id, like the SQL path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

K1 = 1.2
B = 0.75


@dataclass
class PostingIndex:
    """Postings of the whole word index at one search generation."""

    generation: object
    doc_ids: np.ndarray  # sorted docs.id of every document (int64)
    doc_len: np.ndarray  # tokens per document (float64), aligned with doc_ids
    avgdl: float
    starts: dict[str, tuple[int, int]]  # token -> [start, end) into post_doc / post_tf
    post_doc: np.ndarray  # document positions (into doc_ids), int32
    post_tf: np.ndarray  # term frequency in that document, float64
    masks: dict[object, np.ndarray] = field(default_factory=dict)

    @property
    def n_docs(self) -> int:
        return int(self.doc_ids.shape[0])

    @classmethod
    def build(
        cls, generation: object, doc_ids: np.ndarray, vocab: list[tuple[str, int]], docs: np.ndarray
    ) -> PostingIndex:
        """`vocab`: (token, occurrences) in index order (the ``fts5vocab`` row table); `docs`:
        the document id of every occurrence in the same order (the ``instance`` table), both
        read in one snapshot."""
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
        total = int(tf.sum())
        bounds = np.searchsorted(post_tok, np.arange(len(tokens) + 1))
        starts = {t: (int(bounds[i]), int(bounds[i + 1])) for i, t in enumerate(tokens)}
        avgdl = float(total) / float(n) if n else 0.0
        return cls(generation, doc_ids, doc_len, avgdl, starts, post_doc, post_tf)

    def top(self, phrases: Sequence[str], mask: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(doc id, score) best first, ties by doc id; `phrases` are single index tokens, one
        per FTS5 phrase (a repeated token is a repeated phrase, as in FTS5)."""
        n = self.n_docs
        if n == 0 or k <= 0:
            return []
        score = np.zeros(n, dtype=np.float64)
        for token in phrases:
            start, end = self.starts.get(token, (0, 0))
            n_hit = end - start
            idf = math.log((n - n_hit + 0.5) / (n_hit + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            if not n_hit:
                continue
            idx = self.post_doc[start:end]
            f = self.post_tf[start:end]
            d = self.doc_len[idx]
            score[idx] += idf * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * d / self.avgdl)))
        cand = np.flatnonzero((score > 0.0) & mask)
        if cand.size == 0:
            return []
        s = score[cand]
        if cand.size > k:
            kth = np.partition(s, cand.size - k)[cand.size - k]  # k-th largest
            keep = s >= kth  # every tie of the k-th score stays, so id order decides
            cand, s = cand[keep], s[keep]
        ids = self.doc_ids[cand]
        order = np.lexsort((ids, -s))[:k]
        return [(int(ids[i]), float(s[i])) for i in order]

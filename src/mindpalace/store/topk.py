"""Exact BM25 top k over long posting lists, reading them by impact instead of whole.

A query made only of common words touches hundreds of thousands of postings at 1M documents;
scoring all of them is what made the keyword path slow. Here a long list is read in the order
of what a posting can add to a score — its *impact* — and only as deep as the answer needs:

* :class:`ImpactOrder` sorts one token's postings by (term frequency descending, document
  length ascending). Within one term frequency a posting's impact
  w·tf·(K1+1)/(tf + K1·(1 − B + B·len/avgdl)) falls as the length grows, whatever the scope's
  average length, so the order holds for every scope and is computed once per token (it
  changes only when the postings do). Equal (tf, length) postings form a *run*, all with the
  same impact.
* :func:`exact_top_k` takes, from each long list, the runs whose impact reaches a threshold,
  and every posting of the short lists; scores those candidates exactly; and stops when the
  k-th best of them scores above the sum, over the long lists, of the best impact left
  unread (a document read nowhere scores at most that sum). A first small read gives a k-th
  score; a second read, as deep as that score requires, settles it. Same ids, scores (the
  same float64 additions in query order as the dense pass) and order as scoring every
  document.

This is the impact-ordered, score-at-a-time family (Anh & Moffat's impact-sorted indexes, and
the threshold algorithm's stopping rule), vectorised with numpy; it generalises MaxScore
(a short list is a rare term, read whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mindpalace.store.okapi import K1, length_norm, top_k

LONG_POSTINGS = 4096
"""A list with at least this many postings is read by impact (:class:`ImpactOrder`); shorter
ones are read whole (ordering them costs more than it saves)."""

FIRST_READ_POSTINGS = 1024
"""Postings of the long lists the first read takes at least (else 1/64 of them; ×8 while fewer
than k of its candidates are in the scope and score)."""

FIRST_READ_SHARE = 64  # 1/64 of the long lists: ~8k postings for 3 common words at 1M documents

_SLACK = 1e-9  # relative: float sums of the same terms in another order differ by a few ulps


@dataclass(frozen=True)
class ImpactOrder:
    """One token's postings in impact order, grouped in runs of equal (tf, length).

    ``perm[run_start[r] : run_start[r + 1]]`` are the offsets (into the token's postings) of
    run r, which holds term frequency ``run_tf[r]`` and document length ``run_len[r]``; runs
    go by tf descending, then length ascending (offsets ascending inside a run).
    """

    perm: np.ndarray  # int32 offsets, len = postings
    run_start: np.ndarray  # int64, len = runs + 1
    run_tf: np.ndarray  # float64, len = runs
    run_len: np.ndarray  # float64, len = runs

    @classmethod
    def of(cls, tf: np.ndarray, lengths: np.ndarray) -> ImpactOrder:
        """From a token's term frequencies and its documents' lengths (aligned; both hold
        whole numbers ≥ 0, as the word index counts them).

        Raises:
            ValueError: the arrays differ in length or hold a non-integral value.
        """
        if tf.shape != lengths.shape:
            raise ValueError("term frequencies and lengths must be aligned")
        t = tf.astype(np.int64)
        n = lengths.astype(np.int64)
        if not (np.array_equal(t, tf) and np.array_equal(n, lengths)):
            raise ValueError("term frequencies and lengths must be whole numbers")
        if t.size == 0:
            empty = np.empty(0)
            return cls(np.empty(0, np.int32), np.zeros(1, np.int64), empty, empty)
        top, low = int(t.max()), int(n.min())
        span = int(n.max()) - low + 1
        key = (top - t) * span + (n - low)
        # A small key range sorts by radix (linear time): the common case of short documents.
        sortable = key.astype(np.uint16) if int(key.max()) < 1 << 16 else key
        perm = np.argsort(sortable, kind="stable").astype(np.int32)
        ordered = key[perm]
        starts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        run_start = np.concatenate(([0], starts, [ordered.shape[0]])).astype(np.int64)
        first = ordered[run_start[:-1]]
        return cls(perm, run_start, (top - first // span).astype(np.float64),
                   (first % span + low).astype(np.float64))

    @property
    def nbytes(self) -> int:
        return int(self.perm.nbytes + self.run_start.nbytes + 2 * self.run_tf.nbytes)


@dataclass(frozen=True)
class TermPostings:
    """One query term's postings over the whole index (every scope, deleted documents too).

    `idx`/`tf`: the main segment's document positions (ascending int32) and term frequencies
    (float32); `side_idx`/`side_tf`: postings appended since (ascending, above every main
    position); `order`: the impact order of the main postings, None to read them whole.
    """

    weight: float  # idf over the searched scope
    idx: np.ndarray
    tf: np.ndarray
    side_idx: np.ndarray
    side_tf: np.ndarray
    order: ImpactOrder | None


@dataclass(frozen=True)
class ScopeStats:
    """What scores a document of the searched scope: membership by index position (bool, may
    be longer than the index), tokens per position (float64) and the scope's average length."""

    mask: np.ndarray
    doc_len: np.ndarray
    avgdl: float


def exact_top_k(
    terms: Sequence[TermPostings], scope: ScopeStats, ids: np.ndarray, k: int,
    *, max_candidates: int,
) -> list[tuple[int, float]] | None:
    """The BM25 top `k` of the scope: (doc id, score) best first, ties by smaller doc id —
    exactly what scoring every scope document would give.

    Args:
        terms: one entry per query term in query order (a repeated term twice); every term
            counts, with the weight given.
        scope: the scope's membership and statistics.
        ids: doc id by index position (int64).
        k: how many to return (≥ 1).
        max_candidates: give up (None) rather than score more documents than this.
    Returns:
        The top k, or None when reading by impact would not save work (the caller scores
        densely).
    """
    long = [i for i, t in enumerate(terms) if t.order is not None]
    whole = sum(t.idx.shape[0] + t.side_idx.shape[0] for t in terms)
    whole -= sum(terms[i].idx.shape[0] for i in long)
    if whole > max_candidates:
        return None
    plan = _Plan([terms[i] for i in long], scope.avgdl)
    budget = max(FIRST_READ_POSTINGS, plan.postings // FIRST_READ_SHARE)
    while True:  # first read: a k-th score from a small candidate set
        read = plan.upto_postings(budget)
        cand, score, kth = _scored(terms, plan, read, scope, k)
        if plan.all_read(read) or _above(kth, plan.left(read)):
            return top_k(score, ids[cand], k)  # everything read, or nothing unread can reach
        if kth > 0.0:
            break
        budget *= 8  # fewer than k candidates in the scope score: read deeper
        if whole + budget > max_candidates:
            return None
    # Second read: enough runs that no document read nowhere can reach the k-th score.
    read = plan.upto_bound(kth, read)
    if whole + plan.taken(read) > max_candidates:
        return None
    cand, score, kth = _scored(terms, plan, read, scope, k)
    return top_k(score, ids[cand], k) if _above(kth, plan.left(read)) else None


def _above(kth: float, bound: float) -> bool:
    """Whether the k-th score beats every unread document's bound (the sums may round
    differently: a small relative margin)."""
    return kth > bound * (1.0 + _SLACK) + _SLACK


class _Plan:
    """How deep to read each long term: its runs by what a posting of the run adds to a
    score (most first), grouped by equal additions, and a read = how many groups of each
    term. A document a read reaches in no list adds at most, per term, what the term's first
    unread group adds."""

    def __init__(self, long: Sequence[TermPostings], avgdl: float) -> None:
        self.orders: list[ImpactOrder] = []
        self.runs: list[np.ndarray] = []  # per term: run indices, most added first
        self.added: list[np.ndarray] = []  # per term and group: what a posting adds; then 0
        self.groups: list[np.ndarray] = []  # per term: runs read after g groups (len G + 1)
        self.reach: list[np.ndarray] = []  # per term: postings read after g groups (len G + 1)
        for term in long:
            order = term.order
            assert order is not None
            tf = order.run_tf
            # exactly as a posting's own addition is computed: all of a run's postings add it
            added = term.weight * (tf * (K1 + 1.0)) / (tf + length_norm(order.run_len, avgdl))
            by = np.argsort(-added, kind="stable")
            value = added[by]
            ends = np.concatenate((np.flatnonzero(value[1:] != value[:-1]) + 1, [value.shape[0]]))
            counts = np.cumsum(np.diff(order.run_start)[by])
            self.orders.append(order)
            self.runs.append(by)
            self.added.append(np.concatenate((value[ends - 1], [0.0])))
            self.groups.append(np.concatenate(([0], ends)))
            self.reach.append(np.concatenate(([0], counts[ends - 1])))
        self.postings = sum(int(r[-1]) for r in self.reach)

    def all_read(self, read: list[int]) -> bool:
        return all(g == a.shape[0] - 1 for g, a in zip(read, self.added, strict=True))

    def upto_postings(self, budget: int) -> list[int]:
        """Groups to read of each term for about `budget` postings in all, shared evenly: the
        first groups of every term (at least one each), so documents holding several of the
        terms — the likely top — are among the read."""
        share = budget / max(len(self.reach), 1)
        return [min(int(np.searchsorted(r, share)), r.shape[0] - 1) or min(1, r.shape[0] - 1)
                for r in self.reach]

    def upto_bound(self, kth: float, read: list[int]) -> list[int]:
        """Deeper reads than `read` until no document read nowhere can reach `kth`: each step
        reads the next group of the term that lowers the bound most per posting read."""
        read = list(read)
        while not _above(kth, self.left(read)):
            best, gain = -1, -1.0
            for i, g in enumerate(read):
                added = self.added[i]
                if g < added.shape[0] - 1:
                    per = (added[g] - added[g + 1]) / max(int(self.reach[i][g + 1] - self.reach[i][g]), 1)
                    if per > gain:
                        best, gain = i, per
            if best < 0:
                break  # everything read
            read[best] += 1
        return read

    def taken(self, read: list[int]) -> int:
        """Postings `read` takes."""
        return sum(int(r[g]) for r, g in zip(self.reach, read, strict=True))

    def left(self, read: list[int]) -> float:
        """The most a document `read` reaches in no list can score."""
        return float(sum(float(a[g]) for a, g in zip(self.added, read, strict=True)))

    def offsets(self, i: int, groups: int) -> np.ndarray:
        """Offsets (into long term `i`'s main postings) of its first `groups` groups."""
        runs = self.runs[i][: int(self.groups[i][groups])]
        if runs.size == 0:
            return np.empty(0, np.int32)
        order = self.orders[i]
        lo, counts = order.run_start[runs], order.run_start[runs + 1] - order.run_start[runs]
        # one gather for all the runs: each run's start repeated, plus 0, 1, … inside it
        shift = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        return order.perm[shift + np.arange(int(counts.sum()))]


def _scored(
    terms: Sequence[TermPostings], plan: _Plan, read: list[int], scope: ScopeStats, k: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(candidate positions ascending, their exact scores, the k-th best score — 0 when
    fewer than k candidates score above 0) of the short lists, the appended postings and the
    groups `read` of each long list."""
    mark = np.zeros(scope.mask.shape[0], dtype=bool)
    long = 0
    for term in terms:
        if term.order is None:
            mark[term.idx] = True
        else:
            mark[term.idx[plan.offsets(long, read[long])]] = True
            long += 1
        mark[term.side_idx] = True
    cand = np.flatnonzero(mark)
    cand = cand[scope.mask[cand]]
    norm = length_norm(scope.doc_len[cand], scope.avgdl)  # elementwise: the dense pass's floats
    score = np.zeros(cand.shape[0], dtype=np.float64)
    for term in terms:  # query order: the dense pass's order of additions
        tf = _lookup(term.idx, term.tf, cand)
        if term.side_idx.size:
            side = _lookup(term.side_idx, term.side_tf, cand)
            tf = np.where(tf > 0.0, tf, side)
        hit = np.flatnonzero(tf > 0.0)
        held = tf[hit]
        score[hit] += term.weight * (held * (K1 + 1.0)) / (held + norm[hit])
    positive = score[score > 0.0]
    if positive.shape[0] < k:
        return cand, score, 0.0
    kth = float(np.partition(positive, positive.shape[0] - k)[positive.shape[0] - k])
    return cand, score, kth


def _lookup(idx: np.ndarray, tf: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Term frequency (float64, 0 where absent) of each of `cand` (ascending) in a posting
    list (`idx` ascending)."""
    out = np.zeros(cand.shape[0], dtype=np.float64)
    if idx.size == 0 or cand.size == 0:
        return out
    # in the list's own type: a wider needle would make numpy copy the whole list per call
    at = np.minimum(np.searchsorted(idx, cand.astype(idx.dtype, copy=False)), idx.shape[0] - 1)
    hit = idx[at] == cand
    out[hit] = tf[at[hit]]
    return out

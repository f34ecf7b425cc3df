"""Learned reranking of the best fused candidates (``facts.rerank``): a linear ranker.

The hybrid retriever's candidates carry what fusion already computed — each list's score and
rank, the dense cosine to the query, the neighbour credit, the speaker and date boosts. A
linear model over those features (:data:`FEATURES`, one row per candidate) scores the best
``facts.rerank_depth`` candidates; they are then reordered by that score, each taking the fused
``final`` score of the position it lands on (so the candidates below keep their place and the
scores the later stages compare — supersession's score ratio — stay on the fused scale).

The weights ship as package data (``rerank.json``, written by
``benchmarks/train_rerank.py`` from LoCoMo's dev conversations only: pairwise logistic
regression, deterministic); inference is one matrix-vector product in numpy.

:func:`recording` collects the feature rows the retriever computes (with the stage on or off),
which is how the training script builds its data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources

import numpy as np

from mindpalace.errors import ValidationError
from mindpalace.store.base import Document

# The feature columns, in order. Every one is scale-free (normalised within the query's
# candidates, a rank's reciprocal, a cosine, or a 0/1 flag); text length is deliberately absent
# (it would favour long assistant replies over the short statements holding a fact), and so is
# the reciprocal of the fused rank: beside final_norm it only bent the top of the fused list flat
# (a negative weight), which on the knowledge-update analysis seeds put an older value above a
# correction the fused order had first (16 seeds: 8 cases lost, 5 won with it; 2 lost, 5 won
# without; LoCoMo dev unchanged).
FEATURES: tuple[str, ...] = (
    "keyword_norm",   # BM25 score / the best BM25 score of the candidates (0: not in the list)
    "keyword_rr",     # 1 / BM25 rank (0: not in the list)
    "cosine",         # stored vector · query vector (0: no embedder / no vector)
    "vector_rr",      # 1 / vector-list rank (0: not in the list)
    "fused_norm",     # fused score / the best final score of the reranked candidates
    "final_norm",     # final score / the best final score (after context credit and boosts)
    "credit_norm",    # max(final − fused, 0) / the best final score: credit and boosts received
    "lifted",         # 1 when a neighbour (or, statement_above_reply, the reply after it) lifted it
    "coverage",       # share of the query's stems in the text
    "idf_coverage",   # the same, each stem weighted by its idf over the candidates
    "speaker_named",  # 1 for a message by the one speaker the query names
    "dated",          # 1 when its timestamp falls in a period the query names
    "asks",           # 1 when the text ends in a question mark
    "recency",        # rank of its timestamp among the reranked candidates, 0 oldest … 1 newest
)
WEIGHTS_FILE = "rerank.json"


@dataclass(frozen=True, slots=True)
class Ranker:
    """A linear ranker: score = features @ weights.

    Attributes:
        weights: (len(FEATURES),) float64, in :data:`FEATURES` order.
        depth: candidates it was trained to reorder (the default ``facts.rerank_depth``).
        trained_on: a description of the training data (for the record).
    """

    weights: np.ndarray
    depth: int
    trained_on: str = ""

    def scores(self, rows: np.ndarray) -> np.ndarray:
        """(n,) scores of (n, len(FEATURES)) feature rows; higher ranks first.

        Raises:
            ValidationError: `rows` has another number of columns.
        """
        if rows.ndim != 2 or rows.shape[1] != len(self.weights):
            raise ValidationError(f"rerank features must be (n, {len(self.weights)}), got {rows.shape}")
        return rows @ self.weights

    def order(self, rows: np.ndarray) -> np.ndarray:
        """(n,) indexes of `rows` best first; ties keep the incoming order (a stable sort)."""
        return np.argsort(-self.scores(rows), kind="stable")


def ranker_from_json(data: dict[str, object]) -> Ranker:
    """A :class:`Ranker` of a weights document ``{"features": [...], "weights": [...],
    "depth": n, "trained_on": "..."}``.

    Raises:
        ValidationError: the features are not :data:`FEATURES` (in order), a weight is not a
            finite number, or the depth is not a positive integer.
    """
    names = data.get("features")
    if not isinstance(names, list) or tuple(names) != FEATURES:
        raise ValidationError(f"rerank weights are for features {names!r}, expected {list(FEATURES)}")
    raw = data.get("weights")
    if not isinstance(raw, list) or len(raw) != len(FEATURES):
        raise ValidationError(f"rerank weights must be a list of {len(FEATURES)} numbers")
    weights = np.array(raw, dtype=np.float64)
    if not np.isfinite(weights).all():
        raise ValidationError("rerank weights must be finite")
    depth = data.get("depth")
    if not isinstance(depth, int) or depth < 1:
        raise ValidationError(f"rerank depth must be a positive integer, got {depth!r}")
    return Ranker(weights, depth, str(data.get("trained_on", "")))


@lru_cache(maxsize=1)
def shipped_ranker() -> Ranker:
    """The ranker shipped with the package (``mindpalace/retrieval/rerank.json``), read once."""
    text = resources.files("mindpalace.retrieval").joinpath(WEIGHTS_FILE).read_text(encoding="utf-8")
    return ranker_from_json(json.loads(text))


@dataclass(frozen=True, slots=True)
class Recorded:
    """One query's reranked candidates, as :func:`recording` collects them.

    Attributes:
        query: the query text.
        docs: the candidates, best first by fused ``final`` score (before the reorder).
        rows: (len(docs), len(FEATURES)) their features.
    """

    query: str
    docs: tuple[Document, ...]
    rows: np.ndarray


_SINK: ContextVar[list[Recorded] | None] = ContextVar("mindpalace_rerank_sink", default=None)


@contextmanager
def recording() -> Iterator[list[Recorded]]:
    """Collect, in this context (thread / task), the feature rows of every search: the list
    yielded fills with one :class:`Recorded` per search (rows are computed even with
    ``facts.rerank`` off, and then not applied). Used to build training data."""
    rows: list[Recorded] = []
    token = _SINK.set(rows)
    try:
        yield rows
    finally:
        _SINK.reset(token)


def is_recording() -> bool:
    """True inside :func:`recording`."""
    return _SINK.get() is not None


def record(query: str, docs: Sequence[Document], rows: np.ndarray) -> None:
    """Append one search's rows to the active :func:`recording` (no-op outside one)."""
    sink = _SINK.get()
    if sink is not None:
        sink.append(Recorded(query, tuple(docs), rows.copy()))


def idf_coverage(query_stems: Sequence[str], doc_stems: Sequence[frozenset[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(plain, idf-weighted) share of `query_stems` in each document, both (n,) in [0, 1].

    The idf is ln(1 + n / (1 + df)) over the n documents given (the candidates): a query word
    every candidate holds (the speaker's name, the topic) counts less than the one that picks
    out the answer. No query stems: zeros.
    """
    n = len(doc_stems)
    if not query_stems or n == 0:
        return np.zeros(n), np.zeros(n)
    has = np.array([[s in d for s in query_stems] for d in doc_stems], dtype=np.float64)
    idf = np.log1p(n / (1.0 + has.sum(axis=0)))
    return has.mean(axis=1), has @ idf / max(float(idf.sum()), 1e-12)


def recency(stamps: Sequence[datetime | None]) -> np.ndarray:
    """(n,) rank of each timestamp among `stamps`, 0 the oldest … 1 the newest (equal stamps
    share their lowest rank); 0.5 for a missing one (None) and when fewer than two are known."""
    n = len(stamps)
    out = np.full(n, 0.5)
    known = [(s, i) for i, s in enumerate(stamps) if s is not None]
    if len(known) < 2:
        return out
    ordered = sorted({s for s, _ in known})
    place = {s: r for r, s in enumerate(ordered)}
    top = max(len(ordered) - 1, 1)
    for s, i in known:
        out[i] = place[s] / top
    return out

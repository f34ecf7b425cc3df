"""Supersession: which later statement of a speaker corrects an earlier one, for one query.

Pure functions over one speaker's candidate statements (oldest first): their pairwise cosine
similarities, their cosine to the query and how well each matches the query (the score the
result list ranks by). :class:`~mindpalace.retrieval.hybrid.HybridRetriever` gathers those
from a result list and applies the answer (the correction ranks directly above what it
corrects, which is marked ``superseded_by``).

A later statement B corrects an earlier A when

* A and B are the same subject (:func:`same_subject`): alike on their own (cosine at least
  ``similarity``), or both among the speaker's best answers to the query and alike at the
  lower ``answer_similarity``;
* B matches the query nearly as well as A (``min_score_ratio`` × A's score);
* of several such B: the one closest to A — or a later update of that one (alike on its
  own to both A and the closest: a chain A → B → C points at C). "The newest wins" picked
  a later statement on another subject ("We just settled in Osaka" taking over "We meet in
  room 4B every week": short statements of one user that the query half matches; "I'm
  training for a 10k" taking over "I go to the gym at lunchtime" and its correction).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def same_subject(
    sims: np.ndarray,
    query_sims: Sequence[float],
    *,
    similarity: float,
    answer_similarity: float,
    answers: int,
) -> np.ndarray:
    """Which pairs of one speaker's statements are about the same subject (bool matrix).

    Two statements are the same subject when their vectors' cosine is at least `similarity`,
    or — relative to the query — when both are among the speaker's `answers` statements
    closest to the query and their cosine is at least `answer_similarity` ("Home for me is
    Osaka" and "We moved, I live in Perth now" are only 0.45 alike, but they are this user's
    two best answers to "Which city do I live in?").

    Args:
        sims: (n, n) cosine similarities of the statements' vectors.
        query_sims: length n, each statement's cosine to the query (-inf when unknown).
        similarity / answer_similarity: the two cosine thresholds (answer_similarity ≤ 1).
        answers: how many of the best answers to the query are compared with the lower one.
    Returns:
        (n, n) bool matrix, symmetric, diagonal False.
    """
    n = sims.shape[0]
    same = sims >= similarity
    order = np.argsort(-np.asarray(query_sims, dtype=np.float64), kind="stable")[:answers]
    best = np.zeros(n, dtype=bool)
    best[[i for i in order if np.isfinite(query_sims[i])]] = True
    same |= np.outer(best, best) & (sims >= answer_similarity)
    np.fill_diagonal(same, False)
    return same


def choose_corrections(
    sims: np.ndarray,
    query_sims: Sequence[float],
    scores: Sequence[float],
    *,
    similarity: float,
    answer_similarity: float,
    answers: int,
    min_score_ratio: float,
) -> dict[int, int]:
    """For each of one speaker's statements, the later statement that corrects it, if any.

    Args:
        sims: (n, n) cosine similarities of the statements' vectors, statements ordered oldest
            first.
        query_sims: length n, each statement's cosine to the query (-inf when unknown).
        scores: length n, how well each statement matches the query (≥ 0, higher is better).
        similarity / answer_similarity / answers: the thresholds of :func:`same_subject`.
        min_score_ratio: a correction's score must be at least this share of the score of the
            statement it corrects (≥ 0).
    Returns:
        ``{older index: newer index}`` (newer > older); statements corrected by nothing are
        absent.
    Raises:
        ValueError: the lengths disagree or `min_score_ratio` is negative.
    """
    n = sims.shape[0]
    if sims.shape != (n, n) or len(query_sims) != n or len(scores) != n:
        raise ValueError(
            f"sims must be (n, n) with n = len(query_sims) = len(scores); got {sims.shape}, "
            f"{len(query_sims)}, {len(scores)}"
        )
    if min_score_ratio < 0:
        raise ValueError(f"min_score_ratio must be >= 0, got {min_score_ratio}")
    same = same_subject(
        sims, query_sims, similarity=similarity, answer_similarity=answer_similarity, answers=answers
    )
    out: dict[int, int] = {}
    for i in range(n - 1):
        later = [j for j in range(i + 1, n) if same[i, j] and scores[j] >= min_score_ratio * scores[i]]
        if not later:
            continue
        closest = max(later, key=lambda j: (float(sims[i, j]), j))
        # a later update of the closest one (alike to both) is the current value: A → B → C
        # points at C; a later statement alike to A only is not (another subject that
        # happens to pass the threshold)
        chain = [j for j in later if j > closest and sims[i, j] >= similarity and sims[closest, j] >= similarity]
        out[i] = chain[-1] if chain else closest
    return out

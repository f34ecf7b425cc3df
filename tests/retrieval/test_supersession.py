"""Which later statement corrects an earlier one (pure scoring, no store)."""

from __future__ import annotations

import numpy as np
import pytest

from mindpalace.retrieval.supersession import choose_corrections

INF = float("-inf")


def _choose(sims: list[list[float]], query_sims: list[float], scores: list[float], **kw: float) -> dict[int, int]:
    opts: dict[str, float] = {"similarity": 0.5, "answer_similarity": 0.3, "answers": 3, "min_score_ratio": 0.4}
    opts.update(kw)
    return choose_corrections(
        np.array(sims), query_sims, scores, similarity=opts["similarity"],
        answer_similarity=opts["answer_similarity"], answers=int(opts["answers"]),
        min_score_ratio=opts["min_score_ratio"],
    )


class TestChooseCorrections:
    def test_among_best_answers_the_closest_later_statement_wins_not_the_newest(self) -> None:
        # 0 = statement, 1 = its correction, 2 = a later statement on another subject that is
        # also among the speaker's best answers to the query
        sims = [[1, 0.45, 0.35], [0.45, 1, 0.25], [0.35, 0.25, 1]]
        assert _choose(sims, [0.6, 0.5, 0.2], [5.0, 4.0, 3.0]) == {0: 1}

    def test_statements_alike_on_their_own_point_at_the_newest(self) -> None:
        sims = [[1, 0.7, 0.6], [0.7, 1, 0.7], [0.6, 0.7, 1]]
        assert _choose(sims, [0.5, 0.5, 0.5], [3.0, 3.0, 3.0]) == {0: 2, 1: 2}

    def test_a_later_statement_alike_to_the_first_only_does_not_take_over(self) -> None:
        # "I go to the gym at lunchtime" (0), "Gym is mornings at 6 now" (1), "I'm training for
        # a 10k" (2): 2 is alike to 0 but not to its closest correction 1
        sims = [[1, 0.64, 0.52], [0.64, 1, 0.4], [0.52, 0.4, 1]]
        assert _choose(sims, [0.46, 0.35, 0.2], [8.0, 6.0, 6.0], answers=0) == {0: 1}

    def test_a_later_statement_that_barely_matches_the_query_corrects_nothing(self) -> None:
        # "Good morning!" is close to everything short the user said, but answers nothing
        sims = [[1, 0.6], [0.6, 1]]
        assert _choose(sims, [0.5, 0.1], [5.0, 0.5]) == {}
        assert _choose(sims, [0.5, 0.1], [5.0, 0.5], min_score_ratio=0.0) == {0: 1}

    def test_an_earlier_statement_never_corrects_a_later_one(self) -> None:
        sims = [[1, 0.9], [0.9, 1]]
        assert _choose(sims, [0.1, 0.9], [0.5, 9.0]) == {0: 1}
        assert all(j > i for i, j in _choose(sims, [0.9, 0.1], [9.0, 9.0]).items())

    def test_best_answers_match_at_the_lower_cosine(self) -> None:
        sims = [[1, 0.4, 0.35], [0.4, 1, 0.35], [0.35, 0.35, 1]]
        assert _choose(sims, [0.5, 0.45, INF], [4.0, 4.0, 4.0], answers=2) == {0: 1}
        assert _choose(sims, [0.5, 0.45, INF], [4.0, 4.0, 4.0], answers=0) == {}

    def test_bad_shapes_and_ratio_are_refused(self) -> None:
        with pytest.raises(ValueError, match="len"):
            _choose([[1, 0.5], [0.5, 1]], [0.1], [1.0, 1.0])
        with pytest.raises(ValueError, match="min_score_ratio"):
            _choose([[1.0]], [0.1], [1.0], min_score_ratio=-1)

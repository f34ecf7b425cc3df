"""Scoring helpers of hybrid recall: query-relative subject matching for supersession and the
speaker-free dense query."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mindpalace.retrieval.hybrid import as_statement, dense_query, speaker_names, without_speakers
from mindpalace.retrieval.supersession import same_subject
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings
from mindpalace.store.base import Document


def _doc(text: str, kind: str = "message", **meta: object) -> Document:
    return Document(
        id=1, kind=kind, ref="1", text=text, scope=Scope(tenant="t", user="u", agent="a", session="s"),
        meta=dict(meta), created_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


class TestSameSubject:
    def test_best_answers_match_at_the_lower_cosine_only(self) -> None:
        sims = np.array([[1.0, 0.45, 0.45], [0.45, 1.0, 0.45], [0.45, 0.45, 1.0]])
        same = same_subject(sims, [0.3, 0.25, 0.05], similarity=0.6, answer_similarity=0.4, answers=2)
        assert same[0, 1] and same[1, 0]  # the two best answers to the query
        assert not same[0, 2] and not same[1, 2]  # the third is not among them
        off = same_subject(sims, [0.3, 0.25, 0.05], similarity=0.6, answer_similarity=0.4, answers=0)
        assert not off.any()

    def test_unknown_query_similarity_is_never_a_best_answer(self) -> None:
        sims = np.full((2, 2), 0.5)
        same = same_subject(sims, [float("-inf"), 0.4], similarity=0.9, answer_similarity=0.3, answers=3)
        assert not same.any()

    @given(st.integers(1, 6), st.integers(0, 6), st.floats(0.1, 1.0), st.floats(0.1, 1.0))
    def test_symmetric_without_diagonal_and_monotone(self, n: int, answers: int, hi: float, lo: float) -> None:
        rng = np.random.default_rng(n * 7 + answers)
        v = rng.normal(size=(n, 8))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        sims = v @ v.T
        q = list(rng.normal(size=n))
        same = same_subject(sims, q, similarity=hi, answer_similarity=lo, answers=answers)
        assert (same == same.T).all() and not same.diagonal().any()
        assert (same_subject(sims, q, similarity=hi, answer_similarity=lo, answers=0) <= same).all()
        # pairs at or above the high threshold are always the same subject
        assert (same | np.eye(n, dtype=bool))[sims >= hi].all()


class TestSpeakers:
    def test_names_are_removed_with_possessives(self) -> None:
        assert without_speakers("What did Caroline's sister tell Melanie?", {"Caroline", "Melanie"}) == \
            "What did sister tell ?"
        assert without_speakers("what is caroline painting", {"Caroline"}) == "what is painting"

    def test_a_query_of_names_only_is_kept(self) -> None:
        assert without_speakers("Caroline", {"Caroline"}) == "Caroline"

    def test_names_inside_words_stay(self) -> None:
        assert without_speakers("Annabel and Ann", {"Ann"}) == "Annabel and"

    def test_speaker_names_come_from_messages_only(self) -> None:
        docs = [_doc("Caroline: hi", name="Caroline"), _doc("fact", kind="fact", name="Bob"),
                _doc("user: hi", role="user")]
        assert speaker_names(docs) == {"Caroline"}


class TestStatementForm:
    def test_the_interrogative_opening_and_question_mark_go(self) -> None:
        assert as_statement("When did Melanie go camping in June?") == "Melanie go camping in June"
        assert as_statement("Where has Melanie camped?") == "Melanie camped"
        assert as_statement("Would Caroline pursue writing?") == "Caroline pursue writing"

    def test_the_asked_noun_stays(self) -> None:
        assert as_statement("What activities has Melanie done?") == "activities Melanie done"
        assert as_statement("Which city did he move to?") == "city he move to"

    def test_a_statement_or_other_language_is_unchanged(self) -> None:
        assert as_statement("my manager is Dana") == "my manager is Dana"
        assert as_statement("¿Dónde vive Ana?") == "¿Dónde vive Ana"

    def test_nothing_left_keeps_the_query(self) -> None:
        assert as_statement("What is it?") == "What is it?"
        assert as_statement("?") == "?"

    @given(st.text(max_size=60))
    def test_never_empty_of_terms_when_the_query_had_some(self, query: str) -> None:
        from mindpalace.store.textindex import query_terms
        out = as_statement(query)
        assert out == query or query_terms(out)
        assert len(out) <= len(query)


class TestDenseQuery:
    def test_settings_choose_the_steps(self) -> None:
        q = "When did Caroline go to the support group?"
        both = FactSettings(dense_without_speakers=True, dense_as_statement=True)
        assert dense_query(q, {"Caroline"}, both) == "go to the support group"
        names_only = FactSettings(dense_without_speakers=True, dense_as_statement=False)
        assert dense_query(q, {"Caroline"}, names_only) == "When did go to the support group?"
        neither = FactSettings(dense_without_speakers=False, dense_as_statement=False)
        assert dense_query(q, {"Caroline"}, neither) == q

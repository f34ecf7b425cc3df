"""The learned rerank (``facts.rerank``): shipped weights, features, and the reorder itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.retrieval import hybrid, rerank
from mindpalace.retrieval.hybrid import HybridRetriever
from mindpalace.retrieval.rerank import (
    FEATURES,
    Ranker,
    ranker_from_json,
    recording,
    shipped_ranker,
)
from mindpalace.scope import ANY, Scope
from mindpalace.settings import FactSettings


def _ranker(depth: int = 30, **weights: float) -> Ranker:
    return Ranker(np.array([weights.get(name, 0.0) for name in FEATURES]), depth)


@pytest.fixture
def use_ranker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Ranker], None]]:
    """Replace the shipped ranker for one test."""

    def use(ranker: Ranker) -> None:
        monkeypatch.setattr(rerank, "shipped_ranker", lambda: ranker)

    yield use


def _scope(memory: Memory, uid: str) -> Scope:
    return memory.scope(user=uid, agent="a").with_(session=ANY)


def _texts(memory: Memory, uid: str, query: str, settings: FactSettings, k: int = 5) -> list[str]:
    retriever = HybridRetriever(memory.store, None, settings)  # keyword only: no supersession
    return [h.text for h in retriever.search(_scope(memory, uid), query, k=k, kinds=["message"])]


CHAT = [
    {"role": "user", "name": "Ann", "content": "Which car do you drive, the red Mazda or the blue Mazda?"},
    {"role": "user", "name": "Bo", "content": "I drive the red Mazda to work."},
    {"role": "user", "name": "Ann", "content": "Lovely weather for a walk today."},
]


class TestShippedWeights:
    def test_the_shipped_ranker_loads_for_every_feature(self) -> None:
        ranker = shipped_ranker()
        assert ranker.weights.shape == (len(FEATURES),) and np.isfinite(ranker.weights).all()
        assert ranker.depth == FactSettings(rerank=False).rerank_depth
        assert "conv-26" in ranker.trained_on  # trained on the dev conversations only

    def test_a_document_for_other_features_or_with_bad_values_is_refused(self) -> None:
        good: dict[str, object] = {"features": list(FEATURES), "weights": [0.0] * len(FEATURES), "depth": 30}
        assert ranker_from_json(good).depth == 30
        for bad in (
            {**good, "features": list(reversed(FEATURES))},
            {**good, "weights": [0.0] * (len(FEATURES) - 1)},
            {**good, "weights": [float("nan")] + [0.0] * (len(FEATURES) - 1)},
            {**good, "depth": 0},
        ):
            with pytest.raises(ValidationError):
                ranker_from_json(bad)

    def test_rows_of_another_width_are_refused(self) -> None:
        with pytest.raises(ValidationError):
            _ranker().scores(np.zeros((3, len(FEATURES) + 1)))


class TestFeatures:
    def test_coverage_weighs_the_rarer_query_word_more(self) -> None:
        docs = [frozenset({"mazda", "red"}), frozenset({"red"}), frozenset({"red", "walk"}), frozenset()]
        plain, weighted = rerank.idf_coverage(["mazda", "red"], docs)
        assert plain.tolist() == [1.0, 0.5, 0.5, 0.0]
        assert weighted[0] == pytest.approx(1.0) and weighted[1] < 0.5 and weighted[3] == 0.0

    def test_recency_ranks_timestamps_oldest_to_newest(self) -> None:
        t = datetime(2025, 1, 1, tzinfo=UTC)
        assert rerank.recency([t + timedelta(days=2), None, t, t + timedelta(days=1)]).tolist() == [1.0, 0.5, 0.0, 0.5]
        assert rerank.recency([t, None]).tolist() == [0.5, 0.5]  # one known stamp orders nothing

    def test_recording_collects_the_rows_without_changing_the_ranking(self, memory: Memory, uid: str) -> None:
        memory.session("s1", user=uid, agent="a").messages.add_many(CHAT)
        plain = _texts(memory, uid, "Which car does Bo drive?", FactSettings(rerank=False))
        with recording() as seen:
            recorded = _texts(memory, uid, "Which car does Bo drive?", FactSettings(rerank=False))
        assert recorded == plain
        (row,) = seen
        assert row.query == "Which car does Bo drive?"
        assert row.rows.shape == (len(row.docs), len(FEATURES))
        assert [d.text for d in row.docs][: len(plain)] == plain  # best first, as ranked
        named = row.rows[:, FEATURES.index("speaker_named")]
        asks = row.rows[:, FEATURES.index("asks")]
        for doc, is_named, is_question in zip(row.docs, named, asks, strict=True):
            assert is_named == float(doc.meta.get("name") == "Bo")
            assert is_question == float(doc.text.endswith("?"))
        assert _texts(memory, uid, "Which car does Bo drive?", FactSettings(rerank=False)) == plain  # recording ended

    def test_recording_does_not_read_the_weights(self, memory: Memory, uid: str, monkeypatch: pytest.MonkeyPatch) -> None:
        # training records rows when the shipped weights are for another feature list
        def stale() -> Ranker:
            raise ValidationError("rerank weights are for other features")

        monkeypatch.setattr(rerank, "shipped_ranker", stale)
        memory.session("s1", user=uid, agent="a").messages.add_many(CHAT)
        with recording() as seen:
            _texts(memory, uid, "Which car does Bo drive?", FactSettings(rerank=False))
        assert len(seen) == 1
        with pytest.raises(ValidationError):
            _texts(memory, uid, "Which car does Bo drive?", FactSettings(rerank=True))


class TestReorder:
    def test_the_ranker_reorders_the_best_candidates(
        self, memory: Memory, uid: str, use_ranker: Callable[[Ranker], None]
    ) -> None:
        memory.session("s1", user=uid, agent="a").messages.add_many(CHAT)
        use_ranker(_ranker(final_norm=1.0, asks=-10.0))  # a question never outranks a statement
        off = _texts(memory, uid, "which car do you drive red mazda", FactSettings(neighbor_weights=[], rerank=False))
        assert off[0] == "Ann: " + CHAT[0]["content"]  # the question matches best: the case the stage changes
        on = _texts(memory, uid, "which car do you drive red mazda", FactSettings(neighbor_weights=[], rerank=True))
        assert on[:2] == ["Bo: " + CHAT[1]["content"], "Ann: " + CHAT[0]["content"]]

    def test_candidates_below_the_depth_and_the_scores_stay(
        self, memory: Memory, uid: str, use_ranker: Callable[[Ranker], None]
    ) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.messages.add_many([{"role": "user", "content": "mazda " * n + "car"} for n in (4, 3, 2, 1)])
        retriever = HybridRetriever(memory.store, None, FactSettings(neighbor_weights=[], rerank=False))
        before = retriever.search(_scope(memory, uid), "mazda", k=4, kinds=["message"])
        use_ranker(_ranker(final_norm=-1.0))  # reverses the order of what it reranks
        retriever.settings = FactSettings(neighbor_weights=[], rerank=True, rerank_depth=2)
        after = retriever.search(_scope(memory, uid), "mazda", k=4, kinds=["message"])
        assert [h.ref for h in after] == [before[1].ref, before[0].ref, before[2].ref, before[3].ref]
        assert [h.score for h in after] == [h.score for h in before]  # each takes its place's score


class TestSupersessionAfterRerank:
    def test_a_correction_stays_above_what_it_corrects(
        self, memory: Memory, uid: str, use_ranker: Callable[[Ranker], None]
    ) -> None:
        start = datetime(2025, 3, 1, tzinfo=UTC)
        texts = [("s1", "my dentist appointment is on tuesday afternoon at the city clinic"),
                 ("s1", "I like hiking on weekends"),
                 ("s2", "update my dentist appointment is on thursday afternoon at the city clinic")]
        for n, (session, text) in enumerate(texts):
            memory.session(session, user=uid, agent="a").add_message(
                {"role": "user", "content": text}, timestamp=start + timedelta(days=n))
        use_ranker(_ranker(final_norm=1.0, recency=-100.0))  # the oldest first, whatever it scores
        query = "when is my dentist appointment at the city clinic"

        def order(**overrides: object) -> list[str]:
            settings = FactSettings(rerank=True, **overrides)  # type: ignore[arg-type]
            hits = HybridRetriever(memory.store, memory.embedder, settings).search(
                _scope(memory, uid), query, k=3, kinds=["message"])
            return [h.text.removeprefix("user: ") for h in hits]

        no_supersession = order(supersede_similarity=1.0)
        assert no_supersession.index(texts[0][1]) < no_supersession.index(texts[2][1])  # the ranker's order
        ranked = order()
        assert ranked.index(texts[2][1]) < ranked.index(texts[0][1])  # supersession still places it

    def test_supersession_compares_what_each_matched_not_the_place_it_was_given(
        self, memory: Memory, uid: str, use_ranker: Callable[[Ranker], None], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # the ranker hands a weak match the score of the place it lifts it to; the score ratio
        # of supersession ("the later statement answers the query too") must not read that one
        start = datetime(2025, 3, 1, tzinfo=UTC)
        for n, text in enumerate(["my dentist appointment is on tuesday afternoon at the city clinic",
                                  "remind me to call the bank about the clinic bill",
                                  "update my dentist appointment is on thursday afternoon at the city clinic"]):
            memory.session("s1", user=uid, agent="a").add_message(
                {"role": "user", "content": text}, timestamp=start + timedelta(days=n))
        seen: list[list[float]] = []
        real = hybrid._group_corrections

        def spy(compared: Any, sims: Any, asked: Any, scores: list[float], *rest: Any) -> Any:
            seen.append(sorted(scores))
            return real(compared, sims, asked, scores, *rest)

        monkeypatch.setattr(hybrid, "_group_corrections", spy)
        query = "when is my dentist appointment at the city clinic"
        for on in (False, True):
            use_ranker(_ranker(final_norm=-1.0))  # reverses the order: every score moves
            HybridRetriever(memory.store, memory.embedder, FactSettings(rerank=on)).search(
                _scope(memory, uid), query, k=3, kinds=["message"])
        off, on_ = seen
        assert on_ == off

"""The supersession evidence a query computes for one speaker's statements at once (value
kinds, stated changes, shared subject words, sentence splits) gives, pair by pair, exactly
what the pairwise definitions in :mod:`mindpalace.retrieval.supersession` give: the matrix
forms are a speed-up of the same answer, never another answer."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace.retrieval import supersession
from mindpalace.retrieval.fetch import stem_words
from mindpalace.retrieval.hybrid import (
    _answer_links,
    _gives_values,
    _group_corrections,
    _marked_evidence,
    _share_words,
    _typed_values,
    _values_on_subject,
)
from mindpalace.retrieval.supersession import (
    answer_link,
    choose_corrections,
    gives_new_value,
    gives_typed_value,
    gives_value_on_subject,
    holder,
    sentences,
    subject_terms,
)
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings
from mindpalace.store.base import Document
from mindpalace.store.textindex import query_terms

# words that make every kind of evidence: numbers (digits and words), names, weekdays and
# months, change words, stop words, openers, repeated subject words, a speaker's own name
_WORDS = [
    "I", "i", "we", "my", "Our", "the", "The", "cat", "dog", "bike", "bikes", "3", "4B", "another",
    "two", "Tuesday", "tuesday", "May", "Osaka", "Perth", "now", "moved", "instead", "new", "New",
    "no", "longer", "Caroline", "caroline", "Dr.", "Okafor", "lives", "in", "is", "Update:", "user:",
    "Oh,", "own", "own.", "now.", "today!", "[shares", "a", "photo]", "Mr.", "Lee.", "?",
    "$1515", "16", "km", "at", "6", "pm", "weeks", "and", "me", "Bob's",
]
_texts = st.lists(st.sampled_from(_WORDS), min_size=0, max_size=9).map(" ".join)
_statements = st.lists(_texts, min_size=0, max_size=9)


def _doc(name: str) -> Document:
    return Document(
        id=1, scope=Scope(tenant="t", user="u", session="s"), kind="message", ref="1", text="x",
        meta={"role": "user", "name": name}, created_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


def _marks(texts: list[str], data: st.DataObject) -> tuple[list[bool], np.ndarray]:
    """A drawn `among` mask (n) and `shared` matrix (n, n) for `texts`."""
    n = len(texts)
    among = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    flat = data.draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    return among, np.array(flat, dtype=bool).reshape(n, n)


def _pairwise(texts: list[str], among: list[bool], fill: bool, pair: Callable[[int, int], bool]) -> np.ndarray:
    """(n, n): `pair(i, j)` for each i < j both marked in `among`, `fill` elsewhere."""
    n = len(texts)
    want = np.full((n, n), fill, dtype=bool)
    for i in range(n):
        for j in range(i + 1, n):
            if among[i] and among[j]:
                want[i, j] = pair(i, j)
    return want


class TestPairwiseEquivalence:
    @settings(max_examples=300)
    @given(_statements, st.data())
    def test_gives_values_is_gives_new_value_on_each_marked_pair(self, texts: list[str], data: st.DataObject) -> None:
        among = data.draw(st.lists(st.booleans(), min_size=len(texts), max_size=len(texts)))
        got = _gives_values(texts, among)
        want = _pairwise(texts, among, True, lambda i, j: gives_new_value(texts[i], texts[j]))
        assert got.shape == want.shape and (got == want).all()

    @settings(max_examples=300)
    @given(_statements, st.data())
    def test_answer_links_is_answer_link_on_each_marked_pair(self, texts: list[str], data: st.DataObject) -> None:
        among, shared = _marks(texts, data)
        got = _answer_links(texts, shared, among)
        want = _pairwise(texts, among, True, lambda i, j: answer_link(texts[i], texts[j], bool(shared[i, j])))
        want = np.where(np.triu(np.ones_like(want), 1), want, want.T)  # symmetric
        assert got.shape == want.shape and (got == want).all()

    @settings(max_examples=300)
    @given(_statements, st.data())
    def test_values_on_subject_is_gives_value_on_subject_on_each_marked_pair(
        self, texts: list[str], data: st.DataObject
    ) -> None:
        among, shared = _marks(texts, data)
        got = _values_on_subject(texts, shared, among)
        want = _pairwise(texts, among, False, lambda i, j: gives_value_on_subject(texts[i], texts[j], bool(shared[i, j])))
        assert got.shape == want.shape and (got == want).all()

    @settings(max_examples=300)
    @given(_statements, st.data())
    def test_typed_values_is_gives_typed_value_on_each_marked_pair(
        self, texts: list[str], data: st.DataObject
    ) -> None:
        among, _ = _marks(texts, data)
        got = _typed_values(len(texts), _marked_evidence(texts, among))
        want = _pairwise(texts, among, False, lambda i, j: gives_typed_value(texts[i], texts[j]))
        assert got.shape == want.shape and (got == want).all()

    @settings(max_examples=300)
    @given(_statements, st.data(), st.sampled_from(["Caroline", "user", ""]))
    def test_share_words_is_a_set_intersection_per_pair(
        self, texts: list[str], data: st.DataObject, speaker: str
    ) -> None:
        among = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=len(texts), max_size=len(texts))))
        got = _share_words(texts, _doc(speaker), among)
        label = frozenset(stem_words(query_terms(speaker or "user")))  # no name: the role
        terms = [subject_terms(t) - label if among is None or among[i] else frozenset() for i, t in enumerate(texts)]
        want = np.array([[bool(a & b) for b in terms] for a in terms], dtype=bool).reshape(len(texts), len(texts))
        assert got.shape == want.shape and (got == want).all()


class TestSentences:
    @settings(max_examples=300)
    @given(_texts)
    def test_a_remembered_split_is_the_split(self, text: str) -> None:
        assert sentences(text) == list(supersession._split_sentences(text))

    def test_each_call_gives_its_own_list(self) -> None:
        text = "I live in Osaka. We moved to Perth now."
        first = sentences(text)
        first.append("changed by the caller")
        assert sentences(text) == ["I live in Osaka.", "We moved to Perth now."]

    def test_a_long_text_is_split_the_same_without_being_remembered(self) -> None:
        text = "I own 3 bikes. " * 1_000  # longer than what is remembered
        before = supersession._remembered_split.cache_info().currsize
        assert sentences(text) == ["I own 3 bikes."] * 1_000
        assert supersession._remembered_split.cache_info().currsize == before

    def test_titles_do_not_end_a_sentence(self) -> None:
        assert sentences("I see Dr. Okafor now. Mrs. Lee too!") == ["I see Dr. Okafor now.", "Mrs. Lee too!"]


class TestEvidenceOnlyWhereItCanMatter:
    """_group_corrections reads the evidence of the statements that can be one subject on their
    cosines alone; the corrections are those of the evidence of every statement."""

    @settings(max_examples=300)
    @given(
        _statements.filter(lambda t: len(t) >= 2), st.data(),
        st.sampled_from([(0.5, 0.3, 6, 0.0), (0.6, 0.2, 3, 0.5), (0.3, 0.3, 0, 0.0), (0.9, 0.1, 9, 0.9)]),
    )
    def test_the_corrections_of_every_statements_evidence(
        self, texts: list[str], data: st.DataObject, thresholds: tuple[float, float, int, float]
    ) -> None:
        n = len(texts)
        # cosines on the thresholds too, where one side off by the last bits changes the answer
        cosine = st.one_of(st.floats(-0.2, 1.0, allow_nan=False), st.sampled_from([0.1, 0.2, 0.3, 0.5, 0.6, 0.9]))
        upper = np.array(data.draw(st.lists(cosine, min_size=n * n, max_size=n * n))).reshape(n, n)
        sims = np.triu(upper, 1) + np.triu(upper, 1).T + np.eye(n)
        # a product of float vectors need not be symmetric to the last bit: sometimes one side off
        jitter = np.array(data.draw(st.lists(st.sampled_from([0.0, 1e-12, -1e-12]), min_size=n * n, max_size=n * n)))
        sims = sims + np.tril(jitter.reshape(n, n), -1)
        query_sims = data.draw(st.lists(st.one_of(cosine, st.just(float("-inf"))), min_size=n, max_size=n))
        scores = data.draw(st.lists(st.floats(0.0, 3.0, allow_nan=False), min_size=n, max_size=n))
        similarity, answer_similarity, answers, share = thresholds
        fs = FactSettings(
            supersede_similarity=similarity, supersede_answer_similarity=answer_similarity,
            supersede_answers=answers, supersede_answer_share=share,
        )
        doc = _doc("Caroline")
        every = [True] * n
        shared = _share_words(texts, doc, every)
        want = choose_corrections(
            sims, query_sims, scores, similarity=similarity, answer_similarity=answer_similarity,
            answers=answers, min_score_ratio=fs.supersede_min_score_ratio, answer_share=share,
            holders=[holder(t) for t in texts], shared=shared, values=_gives_values(texts, every),
            answer_evidence=_answer_links(texts, shared, every),
            strong=_values_on_subject(texts, shared, every), typed=_typed_values(len(texts), _marked_evidence(texts, every)),
        )
        assert _group_corrections(texts, sims, query_sims, scores, doc, fs) == want


def _value_kinds_one_reading(sentence: str, generous: bool) -> frozenset[str]:
    """value_kinds as it was written before both readings were made in one pass (the reference)."""
    text = supersession._LABEL.sub("", sentence, count=1)
    raw = supersession._WORD.findall(text)
    exclaimed = supersession._content_free(text, raw)  # "Haha, true.": no name first
    kinds: set[str] = set()
    for at, word in enumerate(raw):
        low = word.lower().replace("’", "'")
        if low in supersession._TRAVEL_WORDS:  # a means of travel is that kind and nothing else
            kinds.add(supersession.TRAVEL)
            continue
        digits = any(ch.isdigit() for ch in word)
        if digits or (generous and low in supersession._NUMBER_WORDS):
            kinds.add(supersession.NUMBER)
            if digits and any(ch.isalpha() for ch in word):
                kinds.add(supersession.NAME)
        elif low in supersession._CALENDAR_WORDS and (at > 0 or generous):
            kinds.add(supersession.CALENDAR)
        elif word[:1].isupper() and low not in supersession.STOP_WORDS and low not in supersession._OPENERS \
                and low not in supersession._SELF and not low.startswith("i'") \
                and (at > 0 or (generous and not exclaimed) or supersession._named_first(raw)):
            kinds.add(supersession.NAME)
    return frozenset(kinds)


_KIND_WORDS = [
    *_WORDS, "Monday", "monday", "March", "two", "Two", "another", "Another", "second", "3rd", "x²", "²",
    "٣", "Pixel", "7", "6:30", "$1955", "S21", "I'm", "I’m", "The", "Oh", "Update:", "Correction", "Bob's",
    "and", "me", "Hannah", "Monday's", "bus", "Train", "bikes", "Haha,", "Wow!", "true.", "Mei,",
]


class TestValueKindsInOnePass:
    @settings(max_examples=1000)
    @given(st.lists(st.sampled_from(_KIND_WORDS), max_size=10).map(" ".join), st.booleans())
    def test_both_readings_are_the_one_reading_each(self, sentence: str, generous: bool) -> None:
        assert supersession.value_kinds(sentence, generous=generous) == _value_kinds_one_reading(sentence, generous)

    @settings(max_examples=300)
    @given(st.text(max_size=40), st.booleans())
    def test_any_text(self, sentence: str, generous: bool) -> None:
        assert supersession.value_kinds(sentence, generous=generous) == _value_kinds_one_reading(sentence, generous)

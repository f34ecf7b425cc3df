"""What follow-ups cost a recall (issue 16, LoCoMo query latency): the sentences they compare
are embedded in one call per phase and, for stored statements, at sync time; an anchor's
answer is remembered while the store is unchanged. None of it may change an answer."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.retrieval.hybrid import HybridRetriever, RetrievalHit
from mindpalace.retrieval.supersession import (
    find_followups,
    followup_texts,
    sentences,
)
from mindpalace.scope import ANY, Scope
from mindpalace.settings import FactSettings
from mindpalace.store.base import Document

from ._embedders import bag_of_words

WORDS = ["sister", "denver", "austin", "moved", "lives", "boss", "priya", "olumide", "yoga",
         "tuesday", "friday", "garden", "tomatoes", "violin", "lessons", "now", "my", "the"]


def _bag_of_words(texts: list[str]) -> np.ndarray:
    return bag_of_words(texts, 64)


def _search(corpus: list[Document], terms: str) -> list[Document]:
    wanted = set(terms.split())
    return [d for d in corpus if wanted & set(re.findall(r"\w+", d.text.lower()))][:10]


def _corpus(texts: list[str]) -> list[Document]:
    """One message document per text, one day apart, ids and refs from 1."""
    scope = Scope(tenant="t", user="u", agent="a", session="s")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    return [Document(i + 1, scope, "message", str(i + 1), t, {}, start + timedelta(days=i))
            for i, t in enumerate(texts)]


def _later(a: Document, b: Document) -> bool:
    return a.id < b.id


_sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(lambda ws: " ".join(ws) + ".")
_text = st.lists(_sentence, min_size=1, max_size=3).map(" ".join)


class TestBatchedFollowups:
    @settings(max_examples=60, deadline=None)
    @given(texts=st.lists(_text, min_size=2, max_size=12), query=_sentence,
           n_anchors=st.integers(1, 5), similarity=st.sampled_from([0.2, 0.4, 0.6]),
           depth=st.integers(1, 3))
    def test_remembered_answers_and_batched_anchor_sentences_change_no_answer(
        self, texts: list[str], query: str, n_anchors: int, similarity: float, depth: int
    ) -> None:
        corpus = _corpus(texts)
        anchors = corpus[:n_anchors]
        qvec = _bag_of_words([query])[0]
        calls: list[list[str]] = []

        def embed(batch: list[str]) -> np.ndarray:
            calls.append(list(batch))
            return _bag_of_words(batch)

        kw = {"search": lambda a, terms: _search(corpus, terms), "same_speaker": lambda a, b: True,
              "later": _later, "states": lambda d: True, "similarity": similarity, "depth": depth}
        plain = find_followups(anchors, qvec, embed=_bag_of_words, **kw)  # type: ignore[arg-type]
        answers: dict = {}
        first = find_followups(anchors, qvec, embed=embed, answers=answers, **kw)  # type: ignore[arg-type]
        again = find_followups(anchors, qvec, embed=_bag_of_words, answers=answers, **kw)  # type: ignore[arg-type]
        ids = {k: v.id for k, v in plain.items()}
        assert {k: v.id for k, v in first.items()} == ids == {k: v.id for k, v in again.items()}
        several = [p for a in anchors if len(ps := sentences(a.text)) > 1 for p in ps]
        if several:  # every anchor's sentences come in the first call, each text embedded once
            assert set(several) <= set(calls[0])
        flat = [t for c in calls for t in c]
        assert len(flat) == len(set(flat))

    @settings(max_examples=40, deadline=None)
    @given(texts=st.lists(_text, min_size=2, max_size=12), query=_sentence, n_anchors=st.integers(1, 5))
    def test_prefetch_is_told_each_first_search_and_changes_no_answer(
        self, texts: list[str], query: str, n_anchors: int
    ) -> None:
        corpus = _corpus(texts)
        anchors = corpus[:n_anchors]
        qvec = _bag_of_words([query])[0]
        searches: list[tuple[int, str]] = []
        told: list[tuple[int, str]] = []
        counted: list[tuple[int, tuple[str, ...]]] = []
        told_uses: list[tuple[int, tuple[str, ...]]] = []

        def search(a: Document, terms: str) -> list[Document]:
            searches.append((a.id, terms))
            return _search(corpus, terms)

        def uses(a: Document, words: Sequence[str]) -> list[int]:
            counted.append((a.id, tuple(words)))
            return [sum(w in d.text.lower() for d in corpus) for w in words]

        kw = {"same_speaker": lambda a, b: True, "later": _later, "states": lambda d: True,
              "similarity": 0.4, "embed": _bag_of_words, "uses": uses, "max_uses": 3}
        plain = find_followups(anchors, qvec, search=lambda a, t: _search(corpus, t), **kw)  # type: ignore[arg-type]
        counted.clear()
        got = find_followups(
            anchors, qvec, search=search,
            prefetch_uses=lambda asked: told_uses.extend((a.id, tuple(w)) for a, w in asked),
            prefetch_search=lambda queries: told.extend((a.id, t) for a, t in queries), **kw,  # type: ignore[arg-type]
        )
        assert {k: v.id for k, v in got.items()} == {k: v.id for k, v in plain.items()}
        # what the prefetch was told is what the steps then ask: read once, used
        assert set(told_uses) <= set(counted) and set(told) <= set(searches)
        assert len(set(told)) == len(told) and {a for a, _ in told} <= {a.id for a in anchors}
        if searches:  # the first search is the first anchor's first step: told beforehand
            assert searches[0] in told

    def test_a_known_answer_is_not_searched_again_and_none_is_remembered(self) -> None:
        texts = ["My sister lives in Denver.", "I like the garden.", "My sister moved to Austin now."]
        corpus = _corpus(texts)
        searched: list[str] = []

        def search(anchor: Document, terms: str) -> list[Document]:
            searched.append(terms)
            return _search(corpus, terms)

        answers: dict = {}
        qvec = _bag_of_words(["where does my sister live"])[0]
        kw = {"same_speaker": lambda a, b: True, "later": _later, "states": lambda d: True,
              "embed": _bag_of_words, "similarity": 0.3}
        first = find_followups(corpus[:2], qvec, search=search, answers=answers, **kw)  # type: ignore[arg-type]
        assert {k: v.id for k, v in first.items()} == {1: 3}
        # the key: (statement, its sentence compared, the extra candidate, the retrieved read)
        got = answers[(1, texts[0], None, ())]
        assert got is not None and got[0] is corpus[2] and answers[(2, texts[1], None, ())] is None
        n = len(searched)
        again = find_followups(corpus[:2], qvec, search=search, answers=answers, **kw)  # type: ignore[arg-type]
        assert again == first and len(searched) == n

    def test_followup_texts_are_the_sentences_or_the_whole_text(self) -> None:
        assert followup_texts("Hi there. My sister moved!") == ["Hi there.", "My sister moved!"]
        assert followup_texts("one sentence ") == ["one sentence ", "one sentence"]
        assert followup_texts("one sentence") == ["one sentence"]


class _Counting:
    """Counts the texts a retriever's embedder is asked to embed (queries apart)."""

    def __init__(self, retriever: HybridRetriever) -> None:
        assert retriever.embedder is not None
        self.texts: list[str] = []
        inner = retriever.embedder.embed

        def embed(texts: list[str]) -> np.ndarray:
            self.texts += list(texts)
            return inner(texts)

        retriever.embedder.embed = embed  # type: ignore[method-assign]


def _statements(memory: Memory, uid: str, texts: Sequence[str], first_day: int = 0) -> None:
    start = datetime(2025, 3, 1, tzinfo=UTC)
    s = memory.session("s1", user=uid, agent="a")
    for n, text in enumerate(texts, start=first_day):
        s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))


class TestSentencesAtSync:
    TEXTS = ("My manager is Olumide.", "I like hiking on weekends. The hills are lovely.",
             "The printer is broken again.", "Is the printer fixed?",
             "My boss is Priya since Olumide left the company. She starts on Monday.")
    QUERIES = ("Who is my manager?", "what about hiking", "is the printer broken", "who left the company")

    def _scope(self, memory: Memory, uid: str) -> Scope:
        return memory.scope(user=uid, agent="a").with_(session=ANY)

    def test_a_recall_embeds_only_its_query_and_answers_as_without_the_warm_up(
        self, memory: Memory, uid: str
    ) -> None:
        _statements(memory, uid, self.TEXTS)
        warm = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=5))
        count = _Counting(warm)
        warm.sync_embeddings()
        # the statements' sentences were embedded by the sync; the question's were not
        model = memory.embedder.model_id  # type: ignore[union-attr]
        memo = warm._sentence_vectors
        assert (model, "The hills are lovely.") in memo and (model, "user: My manager is Olumide.") in memo
        assert (model, "user: Is the printer fixed?") not in memo
        count.texts.clear()
        scope = self._scope(memory, uid)
        got = [[(h.ref, h.score, h.meta.get("superseded_by")) for h in warm.search(scope, q, k=4)]
               for q in self.QUERIES]
        assert count.texts == []  # follow-ups found every sentence they compare in the memo

        cold = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=5))
        cold._warm_sentences = lambda docs: None  # type: ignore[method-assign]
        want = [[(h.ref, h.score, h.meta.get("superseded_by")) for h in cold.search(scope, q, k=4)]
                for q in self.QUERIES]
        assert got == want
        assert any(sup for hits in got for _, _, sup in hits)  # the fixture has a follow-up

    def test_a_later_statement_written_after_a_recall_is_its_followup_at_the_next(
        self, memory: Memory, uid: str
    ) -> None:
        _statements(memory, uid, self.TEXTS[:3])
        r = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=5))
        scope = self._scope(memory, uid)
        q = "Who is my manager?"

        def answers(hits: list[RetrievalHit]) -> list[tuple[str, object, object]]:
            return [(h.ref, h.meta.get("superseded_by"), h.meta.get("supersedes")) for h in hits]

        before = answers(r.search(scope, q, k=4))
        _statements(memory, uid, [self.TEXTS[4]], first_day=10)  # moves the search generation
        after = answers(r.search(scope, q, k=4))
        fresh = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=5))
        assert after == answers(fresh.search(scope, q, k=4))  # nothing remembered was reused
        assert after != before and any(by == "s1/4" for _, by, _ in after)

    @pytest.mark.parametrize("settings", [
        FactSettings(supersede_followups=0),
        FactSettings(supersede_followups=5, supersede_followup_sentences_at_sync=False),
    ], ids=["follow-ups off", "sentences at sync off"])
    def test_off_no_sentences_are_embedded_at_sync(
        self, memory: Memory, uid: str, settings: FactSettings
    ) -> None:
        _statements(memory, uid, self.TEXTS)
        r = HybridRetriever(memory.store, memory.embedder, settings)
        count = _Counting(r)
        r.sync_embeddings()
        assert count.texts  # the documents were embedded
        assert "The hills are lovely." not in count.texts and not r._sentence_vectors


class TestStoredVectorsInSupersession:
    """Supersession compares a one-sentence statement on its stored vector when that vector is
    the embedder's vector of exactly its text: nothing is embedded again at recall, and the
    answers are those of embedding every compared sentence."""

    FACTS = (("home:city", "I live in Lisbon with my cat"), ("flat:size", "My flat in Lisbon is small"),
             ("move:city", "We moved and I live in Porto now"), ("work:office", "The office is in Porto"),
             ("cat:name", "My cat is called Miso"))
    QUERIES = ("where do I live", "which city do I live in now", "what is my cat called", "Porto office")

    def _hits(self, r: HybridRetriever, scope: Scope) -> list[list[tuple[str, float, object, object]]]:
        return [[(h.ref, h.score, h.meta.get("superseded_by"), h.meta.get("supersedes"))
                 for h in r.search(scope, q, k=4)] for q in self.QUERIES]

    def test_facts_compared_on_their_stored_vectors_answer_as_when_embedded(
        self, memory: Memory, uid: str
    ) -> None:
        s = memory.session("s1", user=uid, agent="a")
        for key, text in self.FACTS:
            s.remember(key, text, importance=0.9)  # long-term: fact documents
        scope = s.facts.fact_scope
        settings = FactSettings(supersede_followups=0)
        reusing = HybridRetriever(memory.store, memory.embedder, settings)
        reusing.sync_embeddings()
        count = _Counting(reusing)
        got = self._hits(reusing, scope)
        assert count.texts == []  # every compared statement had its stored vector
        embedding = HybridRetriever(memory.store, memory.embedder, settings)
        embedding._stored_is_text_vector = lambda doc: False  # type: ignore[method-assign]
        embedded = _Counting(embedding)
        assert self._hits(embedding, scope) == got
        assert embedded.texts  # the same comparisons, with the statements embedded again
        assert any(sup for hits in got for _, _, sup, _ in hits)  # the fixture supersedes

    def test_context_embedded_or_long_statements_are_embedded_again(self, memory: Memory) -> None:
        assert memory.embedder is not None
        scope = Scope(tenant="t", user="u", agent="a", session="s")
        stamp = datetime(2025, 1, 1, tzinfo=UTC)
        short = Document(1, scope, "message", "1", "user: I live in Porto", {"role": "user"}, stamp)
        fact = Document(2, scope, "fact", "f", "x" * 300, {}, stamp)
        plain = HybridRetriever(memory.store, memory.embedder, FactSettings(), chunk_tokens=256)
        assert plain._stored_is_text_vector(short)
        assert not plain._stored_is_text_vector(fact)  # may have been cut into windows
        contextual = HybridRetriever(memory.store, memory.embedder, FactSettings(), context_turns=2)
        assert not contextual._stored_is_text_vector(short)  # embedded after its preceding turns

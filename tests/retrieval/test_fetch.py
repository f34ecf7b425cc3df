"""Recall's cheap reads (mindpalace.retrieval.fetch) return what the plain reads return.

The plain path searches every scope, reads neighbours one scope at a time and never caches;
the fast path skips scopes without documents, reads every session's neighbours in one query
and keeps them until the store is written. Ranked hits (ids, scores, explanations) must be
identical.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.facts.recall import Recall
from mindpalace.retrieval import hybrid
from mindpalace.retrieval.fetch import (
    DocFacts,
    VectorCache,
    doc_facts,
    matched_terms,
    matched_terms_of,
)
from mindpalace.retrieval.hybrid import (
    MESSAGE_KIND,
    HybridRetriever,
    RetrievalHit,
    _best_first,
    _Candidate,
    _rerank,
    stems,
)
from mindpalace.scope import ANY, Scope
from mindpalace.settings import FactSettings
from mindpalace.store.base import Document, SearchHit, Store
from mindpalace.store.textindex import query_terms


class PlainStore:
    """The store, read the plain way: every scope searched, neighbours read per scope through
    get_documents_by_ref, and a search generation that never repeats (so nothing is cached)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._ticks = itertools.count()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def has_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> bool:
        return True

    def get_documents_by_refs(
        self, kind: str, keys: Sequence[tuple[Scope, str]]
    ) -> dict[tuple[Scope, str], Document]:
        return Store.get_documents_by_refs(cast(Store, self), kind, keys)

    def search_generation(self) -> object:
        return ("plain", next(self._ticks))


TURNS = [
    ("Caroline", "I went to the LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "That sounds amazing! What did you learn there?"),
    ("Caroline", "Mostly that transgender stories are all different. I want to study counseling."),
    ("Melanie", "You would be a great counselor. Are you going to apply this year?"),
    ("Caroline", "Yes, I sent the application to the university in May."),
    ("Melanie", "I painted a sunrise over the lake last week, my kids loved it."),
    ("Caroline", "Which lake was it?"),
    ("Melanie", "Lake Tahoe, we camped there for three nights with the family."),
]
QUERIES = [
    "What did Caroline research?", "When did Caroline apply to the university?",
    "What did Melanie paint?", "Where did Melanie camp with her family?", "hotel budget",
    "support group", "lake", "counseling application", "budget per night in CNY",
]


def fill(memory: Memory, uid: str) -> Scope:
    start = datetime(2023, 5, 1, tzinfo=UTC)
    for n in range(3):
        s = memory.session(f"session_{n}", user=uid, agent="a")
        for i, (who, text) in enumerate(TURNS[n:] + TURNS[:n]):
            s.add_message({"role": "user", "name": who, "content": f"{text} ({n})"},
                          timestamp=start + timedelta(days=7 * n, minutes=i))
    s = memory.session("qa", user=uid, agent="a")
    s.remember("trip:budget", "hotel budget 2000 CNY per night", importance=0.9)
    # a user-level document (as a knowledge file is indexed): a second, non-empty scope
    memory.store.index_document(Scope(s.scope.tenant, uid, "", ""), "knowledge",
                                "USER.md#1", "Caroline prefers a quiet lake hotel")
    return s.scope


def ranked(hits: list[RetrievalHit]) -> list[tuple[Any, ...]]:
    return [(h.tier, h.scope, h.ref, h.score, h.why, h.meta, h.text) for h in hits]


class TestSameHits:
    def test_fast_reads_rank_exactly_like_plain_reads(self, memory: Memory, uid: str) -> None:
        scope = fill(memory, uid)
        scopes = [scope.with_(session=ANY), Scope(scope.tenant, uid, "", ""),
                  Scope(scope.tenant, "", "a", "")]  # the last one is empty
        fast = memory.retriever
        plain = HybridRetriever(cast(Store, PlainStore(memory.store)), memory.embedder,
                                memory.settings.facts)
        for query in QUERIES:
            for _ in range(2):  # the second round is served from the neighbour cache
                want = ranked(plain.search(scopes, query, k=8))
                assert ranked(fast.search(scopes, query, k=8)) == want, query

    def test_session_recall_unchanged_with_neighbour_credit(self, memory: Memory, uid: str) -> None:
        fill(memory, uid)
        s = memory.session("qa", user=uid, agent="a")
        lifted = 0
        for query in QUERIES:
            hits = s.search(query, k=6)
            plain = HybridRetriever(cast(Store, PlainStore(memory.store)), memory.embedder,
                                    memory.settings.facts)
            want = Recall(s.facts, plain, memory.settings.facts,
                          extra_scopes=[k.store_scope for k in s.knowledge.scopes])(query, 6)
            assert [(h.tier, h.ref, h.score, h.why) for h in hits] == [
                (h.tier, h.ref, h.score, h.why) for h in want]
            lifted += sum(h.why.neighbor is not None for h in hits)
        assert lifted > 0  # the corpus exercises neighbour credit


class TestNeighbourCache:
    def test_a_write_by_another_store_object_is_seen_next_query(
        self, memory: Memory, uid: str, workspace_dir: Path
    ) -> None:
        scope = fill(memory, uid)
        where = scope.with_(session=ANY)
        retriever = memory.retriever
        before = retriever.search(where, "support group", k=8)
        lifted = [h for h in before if h.why.neighbor is not None and h.tier == MESSAGE_KIND]
        assert lifted
        target = lifted[0]
        # a second store object on the same database, as another process would write
        other = Memory.open(workspace_dir, embed={"provider": "hashing"})
        try:
            other.store.index_document(target.scope, MESSAGE_KIND, target.ref, "edited elsewhere",
                                       {"role": "user", "name": "Melanie"})
        finally:
            other.close()
        after = {(h.scope, h.ref): h for h in retriever.search(where, "support group", k=8)}
        if (target.scope, target.ref) in after:
            assert after[(target.scope, target.ref)].text == "edited elsewhere"
        plain = HybridRetriever(cast(Store, PlainStore(memory.store)), memory.embedder,
                                memory.settings.facts)
        assert ranked(retriever.search(where, "support group", k=8)) == ranked(
            plain.search(where, "support group", k=8))


class CountingStore:
    """The store, counting its ``search_generation()`` reads."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.generation_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def search_generation(self) -> object:
        self.generation_reads += 1
        return self._store.search_generation()


class TestOneGenerationRead:
    def test_a_query_reads_the_generation_once_and_still_sees_a_write(
        self, memory: Memory, uid: str
    ) -> None:
        scope = fill(memory, uid)
        where = scope.with_(session=ANY)
        counting = CountingStore(memory.store)
        settings = memory.settings.facts
        assert settings.supersede_similarity < 1.0 and settings.neighbor_weights  # all 3 users
        retriever = HybridRetriever(cast(Store, counting), memory.embedder, settings)
        plain = HybridRetriever(cast(Store, PlainStore(memory.store)), memory.embedder, settings)
        retriever.search(where, "support group", k=8)  # the first sync embeds
        for query in QUERIES:
            counting.generation_reads = 0
            assert ranked(retriever.search(where, query, k=8)) == ranked(plain.search(where, query, k=8))
            assert counting.generation_reads == 1, query
        memory.session("session_1", user=uid, agent="a").add_message(
            {"role": "user", "name": "Melanie", "content": "The support group met at the lake (new)."})
        assert ranked(retriever.search(where, "support group lake", k=8)) == ranked(
            plain.search(where, "support group lake", k=8))


class _BuildsEveryNeighbour(HybridRetriever):
    """Every fetched neighbour becomes a candidate (no bound), as before the cut."""

    def _add_message_context(
        self, cands: dict[int, _Candidate], generation: object = None, keep: int | None = None
    ) -> list[tuple[DocFacts, float]]:
        assert keep is not None
        return super()._add_message_context(cands, generation, None)


class TestNeighboursLeftOut:
    QUERIES: ClassVar[list[str]] = [*QUERIES, "What did Melanie paint in May 2023?", "Caroline lake last week",
               "What did Caroline send in May?", "family nights", "Melanie"]

    @pytest.mark.parametrize("rerank_depth", [None, 2, 4])  # None: the learned rerank off
    @pytest.mark.parametrize(("speaker", "date", "weights"), [
        (0.2, 0.3, [0.6, 0.3, 0.1]), (5.0, 0.0, [1.0, 1.0]), (0.0, 4.0, [0.6]), (0.0, 0.0, [2.0, 0.5]),
    ])
    def test_same_hits_as_building_every_neighbour(
        self, memory: Memory, uid: str, monkeypatch: pytest.MonkeyPatch,
        speaker: float, date: float, weights: list[float], rerank_depth: int | None,
    ) -> None:
        """With the learned rerank on, a neighbour that could enter the candidates it reorders
        is built (any of them may be placed first): the cut is exact at any depth."""
        scope = fill(memory, uid).with_(session=ANY)
        left_out = 0
        bound = hybrid._cannot_reach

        def counting(*args: Any) -> list[bool] | None:
            nonlocal left_out
            out = bound(*args)
            left_out += sum(out or [])
            return out

        monkeypatch.setattr(hybrid, "_cannot_reach", counting)
        for window, lists in ((1, 3), (2, 3), (2, 6), (30, 100)):  # few hits: many neighbours
            settings = memory.settings.facts.model_copy(update={
                "speaker_boost": speaker, "date_boost": date, "neighbor_weights": weights,
                "supersede_window": window, "recall_candidates": lists,
                "rerank": rerank_depth is not None, "rerank_depth": rerank_depth or 0})
            fast = HybridRetriever(memory.store, memory.embedder, settings)
            full = _BuildsEveryNeighbour(memory.store, memory.embedder, settings)
            for query in self.QUERIES:
                for k in (1, 3):
                    assert ranked(fast.search(scope, query, k=k)) == ranked(full.search(scope, query, k=k)), (
                        query, k, window)
        assert left_out > 0  # the bound does leave neighbours out here


class _Conversation:
    """A keyword-only store over one synthetic session: `hits` {message index: score} is what
    every keyword search returns, the other messages are read as neighbours."""

    def __init__(self, speakers: list[str], months: list[int], hits: dict[int, float]) -> None:
        scope = Scope("t", "u", "a", "s")
        self.docs = {
            str(i): Document(i, scope, MESSAGE_KIND, str(i), f"turn {i}",
                             {"name": who, "timestamp": f"2023-{month:02d}-10T10:00:00"},
                             datetime(2024, 1, 1, tzinfo=UTC))
            for i, (who, month) in enumerate(zip(speakers, months, strict=True), start=1)
        }
        ordered = sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))
        self.hits = [SearchHit(self.docs[str(i)], score, r, "bm25")
                     for r, (i, score) in enumerate(ordered, start=1) if str(i) in self.docs]

    def has_documents(self, scope: Scope, *, kinds: Sequence[str] | None = None) -> bool:
        return True

    def keyword_search(self, scope: Scope, query: str, **_: Any) -> list[SearchHit]:
        return list(self.hits)

    def search_generation(self) -> object:
        return 0

    def get_documents_by_refs(self, kind: str, keys: Sequence[tuple[Scope, str]]) -> dict[Any, Any]:
        return {(scope, ref): self.docs[ref] for scope, ref in keys if ref in self.docs}


class TestNeighbourBound:
    @settings(max_examples=150, deadline=None)
    @given(st.data(), st.integers(4, 30), st.sampled_from([0.0, 0.2, 3.0]),
           st.sampled_from([0.0, 0.3, 3.0]), st.sampled_from([[0.6, 0.3, 0.1], [1.0, 1.0], [0.9]]),
           st.integers(1, 4), st.integers(1, 5),
           st.sampled_from(["What did Ann do in May 2023?", "Bob in June 2023", "Ann", "paint",
                            "Did Ann meet Bob in May 2023?", "What did Ann do last month?"]),
           st.sampled_from([None, 1, 3, 8]))
    def test_hits_as_if_every_neighbour_were_built(
        self, data: Any, n: int, speaker: float, date: float, weights: list[float],
        k: int, window: int, query: str, rerank_depth: int | None,
    ) -> None:
        speakers = data.draw(st.lists(st.sampled_from(["Ann", "Bob", "Cy"]), min_size=n, max_size=n))
        months = data.draw(st.lists(st.integers(4, 7), min_size=n, max_size=n))
        hits = data.draw(st.dictionaries(st.integers(1, n), st.sampled_from([1.0, 2.0, 2.5, 4.0, 9.0]),
                                         min_size=1, max_size=max(1, n // 3)))
        store = cast(Store, _Conversation(speakers, months, hits))
        settings = FactSettings(speaker_boost=speaker, date_boost=date, neighbor_weights=weights,
                                supersede_window=window, fusion="zscore",
                                rerank=rerank_depth is not None, rerank_depth=rerank_depth or 0)
        got = HybridRetriever(store, None, settings).search(Scope("t", "u", "a", "s"), query, k=k)
        want = _BuildsEveryNeighbour(store, None, settings).search(Scope("t", "u", "a", "s"), query, k=k)
        assert ranked(got) == ranked(want)

    def test_left_out_neighbours_count_in_the_query_wide_reads(self) -> None:
        scope = Scope("t", "u", "a", "s")

        def message(i: int, who: str, month: int, final: float) -> _Candidate:
            doc = Document(i, scope, MESSAGE_KIND, str(i), f"turn {i}",
                           {"name": who, "timestamp": f"2023-{month:02d}-10T10:00:00"},
                           datetime(2024, 1, 1, tzinfo=UTC))
            return _Candidate(doc, final=final)

        ann, bob = message(1, "Ann", 6, 1.0), message(2, "Bob", 7, 0.5)
        left_out = [(bob.info, bob.final)]
        # two speakers named (one of them left out): no speaker boost
        hybrid._boost_named_speaker({1: ann}, "Did Ann meet Bob?", 1.0, left_out)
        assert ann.final == 1.0
        hybrid._boost_named_speaker({1: ann}, "Did Ann meet Bob?", 1.0)
        assert ann.final == 2.0  # (without it Ann alone would be named)
        # "last month" from the newest timestamp, the left-out one's (July): June
        ann = message(1, "Ann", 6, 1.0)
        assert not hybrid._boost_named_dates({1: ann}, "What happened last month?", 1.0, 0.0, left_out)
        assert ann.date and ann.final == 2.0
        ann = message(1, "Ann", 6, 1.0)
        hybrid._boost_named_dates({1: ann}, "What happened last month?", 1.0, 0.0)
        assert not ann.date  # (from June alone: May)
        # a left-out neighbour in the named period is reported (it makes the query "about then")
        assert hybrid._boost_named_dates({1: ann}, "in July 2023", 1.0, 0.0, left_out)
        assert not hybrid._boost_named_dates({1: ann}, "in July 2023", 1.0, 0.0, [(bob.info, 0.0)])


WORDS = ["booked", "booking", "hotel", "hotels", "the", "a", "running", "ran", "酒店预算",
         "Budget", "budgets", "night", "x", "études", "naïve"]


class TestMatchedTerms:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(WORDS), max_size=12), st.lists(st.sampled_from(WORDS), max_size=5))
    def test_same_as_stemming_the_whole_text(self, text_words: list[str], query_words: list[str]) -> None:
        text, query = " ".join(text_words), " ".join(query_words)
        terms = stems(query_terms(query))
        text_stems = set(stems(query_terms(text, drop_stop_words=False)))
        assert matched_terms(terms, text) == tuple(t for s, t in terms.items() if s in text_stems)


def reference_context(cands: dict[int, _Candidate], weights: list[float]) -> None:
    """The neighbour rule as first written (one Scope-keyed dict, max over both sides)."""
    by_pos = {(c.doc.scope, int(c.doc.ref)): c for c in cands.values()}
    for (scope, index), c in by_pos.items():
        lift, source = 0.0, None
        for d, w in enumerate(weights, start=1):
            before, after = by_pos.get((scope, index - d)), by_pos.get((scope, index + d))
            best = max((n for n in (before, after) if n is not None),
                       key=lambda n: n.fused, default=None)
            if best is not None and best.fused > 0:
                lift += w * best.fused
                if source is None:
                    source = best.doc.ref
        c.final = c.fused + lift
        c.neighbor = source if lift > 0 and c.fused < lift else None


class _NoFetch:
    """A store whose neighbour reads find nothing: every position is already a candidate."""

    def search_generation(self) -> object:
        return 0

    def get_documents_by_refs(self, kind: str, keys: Sequence[tuple[Scope, str]]) -> dict[Any, Any]:
        return {}


class TestContextRule:
    @settings(max_examples=150, deadline=None)
    @given(st.dictionaries(st.tuples(st.integers(0, 2), st.integers(1, 12)),
                           st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.0, 2.5]), min_size=1, max_size=30),
           st.lists(st.sampled_from([0.6, 0.3, 0.1, 1.0]), min_size=1, max_size=3))
    def test_lifts_equal_the_reference_rule(self, fused: dict[tuple[int, int], float], weights: list[float]) -> None:
        now = datetime(2024, 1, 1, tzinfo=UTC)

        def cands() -> dict[int, _Candidate]:
            out = {}
            for i, ((session, ref), score) in enumerate(sorted(fused.items())):
                doc = Document(i, Scope("t", "u", "a", f"s{session}"), MESSAGE_KIND, str(ref), "x", {}, now)
                out[i] = _Candidate(doc, fused=score)
            return out

        retriever = HybridRetriever(cast(Store, _NoFetch()), None, FactSettings(neighbor_weights=weights))
        fast, ref = cands(), cands()
        retriever._add_message_context(fast)
        reference_context(ref, weights)
        got = {i: (c.final, c.neighbor) for i, c in fast.items()}
        assert got == {i: (c.final, c.neighbor) for i, c in ref.items()}


    @settings(max_examples=150, deadline=None)
    @given(st.dictionaries(st.tuples(st.integers(0, 2), st.integers(1, 15)),
                           st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=30),
           st.integers(1, 4))
    def test_missing_positions_are_the_unheld_ones_near_a_lender(
        self, fused: dict[tuple[int, int], float], reach: int
    ) -> None:
        now = datetime(2024, 1, 1, tzinfo=UTC)
        placed = [_Candidate(Document(i, Scope("t", "u", "a", f"s{sid}"), MESSAGE_KIND, str(j), "x", {}, now),
                             fused=score) for i, ((sid, j), score) in enumerate(fused.items())]
        lenders = hybrid._Lenders(placed, [sid for sid, _ in fused], [j for _, j in fused], False)
        want = sorted({(sid, j + o) for (sid, j), score in fused.items() if score > 0
                       for d in range(1, reach + 1) for o in (-d, d) if j + o >= 1} - set(fused))
        assert lenders.missing(reach) == want


class TestDocFacts:
    NOW = datetime(2024, 1, 1, tzinfo=UTC)

    @settings(max_examples=200, deadline=None)
    @given(st.sampled_from([MESSAGE_KIND, "fact", "step"]),
           st.sampled_from(["12", "0", "x1", "²", "1234567890123", ""]),
           st.sampled_from(["Caroline", "MELANIE", "", None, 7]),
           st.sampled_from(["Is it?", "It is.", "Budget booked at the hotels"]),
           st.sampled_from(["2023-05-08T13:56:00", "2023-05-08T13:56:00+02:00", "not a date", "", None]))
    def test_facts_are_what_the_ranking_steps_read_of_the_document(
        self, kind: str, ref: str, name: object, text: str, stamp: object
    ) -> None:
        meta: dict[str, Any] = {}
        if name is not None:
            meta["name"] = name
        if stamp is not None:
            meta["timestamp"] = stamp
        doc = Document(1, Scope("t", "u", "a", "s"), kind, ref, text, meta, self.NOW)
        f = DocFacts(doc)
        message = kind == MESSAGE_KIND
        assert f.message == message and f.scope_key == ("t", "u", "a", "s")
        assert f.position == (int(ref) if message and ref.isascii() and ref.isdigit() and len(ref) <= 12 else -1)
        spoken = meta.get("name", "") if message else ""
        assert f.speaker == str(spoken).lower() and f.named == (message and bool(spoken))
        assert f.question == ("?" in text)
        if stamp:
            when = datetime.fromisoformat(str(stamp)) if stamp != "not a date" else None
            assert f.stamp == (when if when is None or when.tzinfo else when.replace(tzinfo=UTC))
        else:
            assert f.stamp is None
        terms = stems(query_terms("budget hotel booking is"))
        assert matched_terms_of(terms, f) == matched_terms(terms, text)

    def test_an_equal_read_reuses_them_and_a_changed_document_derives_them_again(self) -> None:
        scope = Scope("t", "u", "a", "s")
        doc = Document(987_654_321, scope, MESSAGE_KIND, "3", "Where is it?", {"name": "Ann"}, self.NOW)
        first = doc_facts(doc)
        assert doc_facts(doc) is first
        again = Document(987_654_321, Scope("t", "u", "a", "s"), MESSAGE_KIND, "3", "Where is it?",
                         {"name": "Ann"}, self.NOW)  # the same row read again: another object
        assert doc_facts(again) is first
        changed = Document(987_654_321, scope, MESSAGE_KIND, "3", "It is here.", {"name": "Bob"}, self.NOW)
        facts = doc_facts(changed)
        assert facts is not first and not facts.question and facts.speaker == "bob"


class TestVectorCache:
    def test_serves_what_the_store_holds_after_a_text_change(self, memory: Memory, uid: str) -> None:
        scope = fill(memory, uid)
        retriever, store, model = memory.retriever, memory.store, memory.embedder.model_id
        retriever.sync_embeddings()
        docs = [h.doc for h in store.keyword_search(scope.with_(session=ANY), "lake", k=5)]
        ids = [d.id for d in docs]
        cache = VectorCache()
        first = cache.get(store, ids, model)
        assert first.keys() == store.get_embeddings(ids, model).keys() == set(ids)
        assert all(np.array_equal(cache.get(store, ids, model)[i], first[i]) for i in ids)
        store.index_document(docs[0].scope, docs[0].kind, docs[0].ref, "a different text on volcanoes")
        assert ids[0] not in cache.get(store, ids, model)  # its vector was dropped with its text
        retriever.sync_embeddings()
        now = cache.get(store, ids, model)
        want = store.get_embeddings(ids, model)
        assert all(np.array_equal(now[i], want[i]) for i in ids)
        assert not np.array_equal(now[ids[0]], first[ids[0]])


class TestRerank:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from([3.0, 2.5, 1.0, 1.0, 0.0, -1.0, float("nan")]),
                              st.integers(1, 6)), max_size=8), st.booleans())
    def test_same_list_as_sorting_and_renumbering(self, rows: list[tuple[float, int]], numbered: bool) -> None:
        now = datetime(2024, 1, 1, tzinfo=UTC)
        if numbered:  # one scope's list: best first, ranks 1..n
            rows = [(score, i) for i, (score, _) in enumerate(sorted(rows, key=lambda r: -r[0]), start=1)]
        hits = [SearchHit(Document(i, Scope("t", "u", "a", "s"), "fact", str(i), "x", {}, now), score, rank, "bm25")
                for i, (score, rank) in enumerate(rows)]
        want = [(h.doc.id, h.score, i) for i, h in enumerate(sorted(hits, key=lambda h: -h.score), start=1)]
        got = [(h.doc.id, h.score, h.rank) for h in _rerank(hits)]
        assert len(got) == len(want)
        for (gid, gs, gr), (wid, ws, wr) in zip(got, want, strict=True):
            assert (gid, gr) == (wid, wr) and (gs == ws or (gs != gs and ws != ws))


class TestBestFirst:
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from([2.0, 1.5, 0.0, -0.0, 0.25, 1e-300, float("nan")]), max_size=12),
           st.integers(0, 14), st.randoms(use_true_random=False))
    def test_is_sorting_by_score_then_id_cut_to_n(self, finals: list[float], n: int, rnd: Any) -> None:
        now = datetime(2024, 1, 1, tzinfo=UTC)
        ids = rnd.sample(range(1000), len(finals))
        cands = [_Candidate(Document(i, Scope("t", "u", "a", "s"), "fact", str(i), "x", {}, now), final=f)
                 for i, f in zip(ids, finals, strict=True)]
        want = sorted(cands, key=lambda c: (-c.final, c.doc.id))[:n]
        assert [c.doc.id for c in _best_first(cands, n)] == [c.doc.id for c in want]

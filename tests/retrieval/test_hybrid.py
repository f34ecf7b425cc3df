"""Hybrid retrieval: every tier, scope isolation on both paths, CJK, explanations, context, fusion."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.retrieval.hybrid import HybridRetriever
from mindpalace.scope import ANY, Scope
from mindpalace.settings import FactSettings
from mindpalace.store import Record

from ._embedders import Recording


def user_scope(memory: Memory, uid: str) -> Scope:
    return memory.scope(user=uid, agent="a").with_(session=ANY)


class TestTiers:
    def test_finds_facts_messages_steps_snapshots_and_history(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.remember("trip:hotel_budget", "2000 CNY per night", importance=0.9)
        s.add_message({"role": "user", "content": "the hotel must be near Senso-ji"})
        for rtype in ("step", "snapshot"):
            memory.store.put_record(Record(s.scope, f"{rtype}_1", rtype, f"{rtype}: compared hotel prices"))
        memory.store.index_document(s.scope, "history", "7", "[2026-01-01] booked the hotel in Asakusa")
        hits = memory.retriever.search(user_scope(memory, uid), "hotel", k=10)
        assert {h.tier for h in hits} == {"fact", "message", "step", "snapshot", "history"}

    def test_kinds_restrict_tiers(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.remember("trip:hotel", "Asakusa", importance=0.9)
        s.add_message({"role": "user", "content": "hotel in Asakusa please"})
        hits = memory.retriever.search(user_scope(memory, uid), "Asakusa hotel", k=5, kinds=["fact"])
        assert [h.tier for h in hits] == ["fact"]


class TestScopeIsolation:
    @pytest.fixture
    def two_users(self, memory: Memory, uid: str) -> tuple[str, str]:
        a, b = uid + "-a", uid + "-b"
        memory.session("s", user=a, agent="a").add_message({"role": "user", "content": "I like green tea"})
        memory.session("s", user=b, agent="a").add_message(
            {"role": "user", "content": "hotel budget 2000, hotel near the station"}
        )
        memory.session("s", user=b, agent="a").remember("trip:hotel_budget", "2000", importance=0.9)
        return a, b

    def test_keyword_path_never_returns_another_users_items(self, memory: Memory, two_users: tuple[str, str]) -> None:
        a, b = two_users
        assert memory.retriever.search(user_scope(memory, b), "hotel budget", k=5)
        retriever = HybridRetriever(memory.store, None, memory.settings.facts)
        assert retriever.search(user_scope(memory, a), "hotel budget", k=5) == []

    def test_vector_path_never_returns_another_users_items(self, memory: Memory, two_users: tuple[str, str]) -> None:
        a, _ = two_users
        # Misspelt: no keyword match anywhere, so every hit can only come from the vector path.
        query = "hoteel budgett"
        assert memory.store.keyword_search(memory.scope(user=ANY, agent=ANY, session=ANY), query) == []
        hits = memory.retriever.search(user_scope(memory, a), query, k=5)
        assert hits and all(h.scope.user == a for h in hits)
        assert all(h.why.vector_rank is not None for h in hits)

    def test_session_recall_stays_in_the_user(self, memory: Memory, two_users: tuple[str, str]) -> None:
        a, _ = two_users
        hits = memory.session("s", user=a, agent="a").recall("hotel budget 2000", k=5)
        assert all(h.scope.user == a for h in hits)


class TestLanguagesAndExplanations:
    def test_chinese_query_finds_chinese_fact(self, memory: Memory, uid: str) -> None:
        memory.session("s1", user=uid, agent="a").remember("用户:预算", "每晚酒店预算两千元人民币", importance=0.9)
        memory.session("s1", user=uid, agent="a").remember("user:food", "likes ramen", importance=0.9)
        hits = memory.session("s2", user=uid, agent="a").recall("酒店预算是多少", k=1)
        assert hits[0].tier == "fact" and hits[0].fact.key == "用户:预算"
        assert "预算" in hits[0].why.terms

    def test_hits_explain_terms_and_ranks(self, memory: Memory, uid: str) -> None:
        memory.session("s1", user=uid, agent="a").add_message({"role": "user", "content": "the budget is 2000 per night"})
        (hit,) = memory.retriever.search(user_scope(memory, uid), "what budget per night", k=1)
        assert set(hit.why.terms) == {"budget", "per", "night"}
        assert hit.why.keyword_rank == 1 and hit.why.vector_rank == 1
        assert "bm25 #1" in str(hit.why) and "cosine #1" in str(hit.why)

    def test_keyword_search_works_without_an_embedder(self, tmp_path: Path, uid: str) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
            mem.session("s", user=uid).remember("user:city", "Lisbon", importance=0.9)
            (hit,) = mem.session("s", user=uid).recall("city", k=1)
            assert hit.text.endswith("Lisbon")
            assert mem.store.embedding_models() == {}


def conversation(memory: Memory, uid: str) -> None:
    s = memory.session("s1", user=uid, agent="a")
    s.messages.add_many([
        {"role": "user", "name": "Caroline", "content": "What did you paint last weekend?"},
        {"role": "user", "name": "Melanie", "content": "A sunrise over the lake, my favourite so far."},
        {"role": "user", "name": "Caroline", "content": "I went to a support group meeting yesterday."},
        {"role": "user", "name": "Melanie", "content": "That sounds meaningful for you."},
    ])


class TestContextAndFusion:
    def test_a_reply_is_lifted_by_the_turn_it_answers(self, memory: Memory, uid: str) -> None:
        conversation(memory, uid)
        plain = HybridRetriever(memory.store, None, FactSettings(neighbor_weights=[], speaker_boost=0))
        with_context = HybridRetriever(memory.store, None, FactSettings(speaker_boost=0))
        scope = user_scope(memory, uid)
        assert "2" not in [h.ref for h in plain.search(scope, "paint last weekend", k=5)]
        hits = with_context.search(scope, "paint last weekend", k=2)
        assert [h.ref for h in hits] == ["1", "2"]
        assert hits[1].why.neighbor == "1" and "next to message 1" in str(hits[1].why)

    @pytest.mark.parametrize("reply_weight", [None, 1.0, 1.5])
    def test_the_reply_to_a_matching_question_earns_the_reply_weight(
        self, memory: Memory, uid: str, reply_weight: float | None
    ) -> None:
        conversation(memory, uid)  # "What did you paint last weekend?" -> "A sunrise over the lake …"
        settings = FactSettings(neighbor_weights=[0.6], neighbor_reply_weight=reply_weight, speaker_boost=0)
        hits = HybridRetriever(memory.store, None, settings).search(user_scope(memory, uid), "paint last weekend", k=2)
        question, reply = sorted(hits, key=lambda h: h.ref)
        assert (question.ref, reply.ref) == ("1", "2")
        expected = 0.6 if reply_weight is None else reply_weight  # None: the plain d = 1 weight
        assert reply.score == pytest.approx(expected * question.score)
        assert reply.why.neighbor == "1"

    @staticmethod
    def _three_turns(memory: Memory, uid: str, middle: str, query: str) -> dict[str, float]:
        """Scores by ref of Melanie / Caroline (`middle`) / Melanie, reply weight 1.5."""
        memory.session("s1", user=uid, agent="a").messages.add_many([
            {"role": "user", "name": "Melanie", "content": "Busy week at home."},
            {"role": "user", "name": "Caroline", "content": middle},
            {"role": "user", "name": "Melanie", "content": "Lovely colours."},
        ])
        settings = FactSettings(neighbor_weights=[0.6], neighbor_reply_weight=1.5, speaker_boost=0)
        hits = HybridRetriever(memory.store, None, settings).search(user_scope(memory, uid), query, k=3)
        return {h.ref: h.score for h in hits}

    def test_reply_weight_lifts_only_the_turn_after_a_question(self, memory: Memory, uid: str) -> None:
        by_ref = self._three_turns(memory, uid, "I painted a sunrise last weekend.", "painted sunrise")
        # a statement lends neighbor_weights[0] to both sides, never the reply weight
        assert by_ref["1"] == pytest.approx(0.6 * by_ref["2"])
        assert by_ref["3"] == pytest.approx(0.6 * by_ref["2"])

    def test_the_turn_before_a_question_keeps_the_plain_weight(self, memory: Memory, uid: str) -> None:
        by_ref = self._three_turns(memory, uid, "What did you paint last weekend?", "paint last weekend")
        assert by_ref["3"] == pytest.approx(1.5 * by_ref["2"])  # the reply
        assert by_ref["1"] == pytest.approx(0.6 * by_ref["2"])  # the turn before the question

    def test_named_speaker_is_boosted(self, memory: Memory, uid: str) -> None:
        conversation(memory, uid)
        scope = user_scope(memory, uid)
        settings = FactSettings(neighbor_weights=[], speaker_boost=5.0)
        hits = HybridRetriever(memory.store, None, settings).search(scope, "Melanie meeting sounds", k=1)
        assert hits[0].meta["name"] == "Melanie"

    @pytest.mark.parametrize("fusion", ["rrf", "zscore", "adaptive"])
    def test_every_fusion_ranks_the_obvious_document_first(self, memory: Memory, uid: str, fusion: str) -> None:
        conversation(memory, uid)
        retriever = HybridRetriever(memory.store, memory.embedder, FactSettings(fusion=fusion))
        hits = retriever.search(user_scope(memory, uid), "support group meeting", k=3)
        assert hits[0].ref == "3"
        assert hits == sorted(hits, key=lambda h: -h.score)

    def test_empty_query_and_zero_k_return_nothing(self, memory: Memory, uid: str) -> None:
        conversation(memory, uid)
        assert memory.retriever.search(user_scope(memory, uid), "   ", k=5) == []
        assert memory.retriever.search(user_scope(memory, uid), "paint", k=0) == []


def test_changing_the_embedder_re_embeds(tmp_path: Path, uid: str) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "hashing", "dimensions": 64}) as mem:
        mem.session("s", user=uid).remember("user:food", "likes ramen noodles", importance=0.9)
        mem.session("s", user=uid).add_message({"role": "user", "content": "ramen tonight?"})
        mem.session("s", user=uid).recall("ramen")
        assert set(mem.store.embedding_models()) == {"hashing-64"}
    with Memory.open(tmp_path / "ws", embed={"provider": "hashing", "dimensions": 32}) as mem:
        hits = mem.session("s2", user=uid).recall("ramenn noodle", k=2)
        assert mem.store.embedding_models() == {"hashing-32": (32, 2)}
        assert any(h.why.vector_rank is not None for h in hits)


def test_a_read_only_twin_keeps_the_layout_and_never_embeds(tmp_path: Path, uid: str) -> None:
    """``read_only()``: the same embedding layout (what a stored vector is), no vector computed:
    a document written after the last sync is found by keyword only, and stays unembedded."""
    embedder = Recording()
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
        scope = mem.scope(user=uid, agent="a", session="s")
        writer = HybridRetriever(mem.store, embedder, chunk_tokens=64, chunk_overlap_tokens=8, context_turns=2,
                                 context_after_question=True, sentence_min_chars=100)
        mem.store.index_document(scope, "note", "n1", "the ferry leaves at nine")
        writer.sync_embeddings()
        reader = writer.read_only()
        assert type(reader) is not HybridRetriever
        assert (reader.store, reader.embedder, reader.settings) == (writer.store, writer.embedder, writer.settings)
        assert (reader.chunk_tokens, reader.chunk_overlap_tokens, reader.context_turns,
                reader.context_after_question, reader.sentence_min_chars) == (64, 8, 2, True, 100)
        mem.store.index_document(scope, "note", "n2", "the ferry is late again")
        seen = len(embedder.seen)
        hits = reader.search(scope, "ferry", k=5, kinds=["note"])
        assert reader.sync_embeddings() == 0 and len(embedder.seen) == seen
        assert {h.text for h in hits} == {"the ferry leaves at nine", "the ferry is late again"}
        late = next(h for h in hits if h.text == "the ferry is late again")
        assert late.why.vector_rank is None
        writer.sync_embeddings()
        assert embedder.seen[seen:] == ["the ferry is late again"]


class TestSearchableScopes:
    def test_empty_scopes_are_asked_once_per_store_state_and_a_write_is_seen(
        self, memory: Memory, uid: str
    ) -> None:
        # a recall searches the user's sessions and knowledge scopes, most of them empty: which
        # hold documents is read once while the store is unchanged, and read again after a write
        sessions = user_scope(memory, uid)
        notes = memory.scope(user=uid, agent="")  # empty until the write below
        memory.session("s1", user=uid, agent="a").add_message({"role": "user", "content": "the hotel in Asakusa"})
        r = HybridRetriever(memory.store, memory.embedder, memory.settings.facts)
        asked: list[Scope] = []
        inner = memory.store.has_documents

        def has_documents(scope: Scope, *, kinds: object = None) -> bool:
            asked.append(scope)
            return inner(scope, kinds=kinds)  # type: ignore[arg-type]

        memory.store.has_documents = has_documents  # type: ignore[method-assign]
        first = r.search([sessions, notes], "hotel", k=5)
        assert {h.scope.agent for h in first} == {"a"} and len(asked) == 2
        assert r.search([sessions, notes], "hotel", k=5) == first and len(asked) == 2  # remembered
        memory.store.index_document(notes, "note", "n1", "hotel note for the user")
        assert {h.scope.agent for h in r.search([sessions, notes], "hotel", k=5)} == {"a", ""}
        assert len(asked) == 4


class TestStatementScale:
    """``search(statement_scale=True)``: each list's scale is that of its statements, so
    questions worded like the query do not flatten the statements' scores; ``skip`` leaves
    documents out before fusion."""

    QUESTIONS = ("when did Mia go camping in July?", "when did Mia go camping in June?",
                 "where has Mia gone camping?", "did Mia go camping with her kids?")
    STATEMENTS = ("Mia: we went camping in the forest in July", "Mia: the kids loved the campfire",
                  "Mia: I bought a new tent for camping", "Mia: pottery class was fun")

    @pytest.fixture
    def notes(self, memory: Memory, uid: str) -> Scope:
        scope = memory.scope(user=uid, agent="a", session="s")
        for i, text in enumerate(self.QUESTIONS + self.STATEMENTS):
            memory.store.index_document(scope, "note", f"n{i}", text)
        memory.retriever.sync_embeddings()
        return scope

    def scores(self, memory: Memory, scope: Scope, **kw: object) -> dict[str, float]:
        # fused scores compared: the learned rerank would give candidates other places' scores
        memory.retriever.settings = memory.retriever.settings.model_copy(update={"rerank": False})
        hits = memory.retriever.search(scope, "when did Mia go camping in July?", k=20, kinds=["note"], **kw)  # type: ignore[arg-type]
        return {h.text: h.score for h in hits}

    def test_statements_score_as_if_the_questions_were_not_in_the_lists(self, memory: Memory, notes: Scope) -> None:
        from mindpalace.retrieval.hybrid import asks

        scaled = self.scores(memory, notes, statement_scale=True)
        without = self.scores(memory, notes, skip=lambda doc: asks(doc.text))
        assert set(without) <= set(self.STATEMENTS) and without
        for text, score in without.items():
            assert scaled[text] == pytest.approx(score)
        assert all(scaled[q] >= 0 for q in self.QUESTIONS if q in scaled)  # still candidates (they lend credit)
        plain = self.scores(memory, notes)
        best = max(without, key=without.__getitem__)
        assert plain[best] != pytest.approx(scaled[best])  # without it the questions set the scale

    def test_skip_leaves_documents_out(self, memory: Memory, notes: Scope) -> None:
        hits = self.scores(memory, notes, skip=lambda doc: doc.text == self.QUESTIONS[0])
        assert self.QUESTIONS[0] not in hits and self.QUESTIONS[1] in hits


class TestDenseQueryForm:
    """The vector list searches the question as a statement; supersession compares with the
    question as asked (``facts.dense_as_statement``)."""

    class _Recording:
        def __init__(self, inner: object) -> None:
            self.inner, self.texts = inner, []

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def embed_query(self, text: str) -> object:
            self.texts.append([text])
            return self.inner.embed_query(text)  # type: ignore[attr-defined]

        def embed_queries(self, texts: list[str]) -> object:
            self.texts.append(list(texts))
            return self.inner.embed_queries(texts)  # type: ignore[attr-defined]

    def _embedded(self, memory: Memory, uid: str, query: str, statement: bool) -> list[list[str]]:
        memory.session("s", user=uid, agent="a").add_message(
            {"role": "user", "name": "Ann", "content": "I moved to Oslo in May"}
        )
        rec = self._Recording(memory.embedder)
        r = HybridRetriever(memory.store, rec, FactSettings(dense_as_statement=statement))  # type: ignore[arg-type]
        assert r.search(user_scope(memory, uid), query, k=3)
        return rec.texts

    def test_a_question_embeds_both_forms_in_one_call(self, memory: Memory, uid: str) -> None:
        texts = self._embedded(memory, uid, "When did Ann move to Oslo?", statement=True)
        assert texts[-1] == ["When did move to Oslo?", "move to Oslo"]

    def test_off_or_no_question_embeds_once(self, memory: Memory, uid: str) -> None:
        assert self._embedded(memory, uid, "When did Ann move to Oslo?", statement=False)[-1] == [
            "When did move to Oslo?"
        ]
        assert self._embedded(memory, uid, "Ann Oslo move", statement=True)[-1] == ["Oslo move"]

    def test_embed_queries_matches_embed_query(self, memory: Memory) -> None:
        assert memory.embedder is not None
        both = memory.embedder.embed_queries(["move to Oslo", "Oslo"])
        assert both.shape == (2, memory.embedder.dim)
        for row, text in zip(both, ["move to Oslo", "Oslo"], strict=True):
            assert (row == memory.embedder.embed_query(text)).all()

"""Contextual embedding (embed.context_turns): a session message is embedded after the turns
before it; its stored and keyword-indexed text stay its own, and the vectors get their own model id."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.providers.embed import HashingEmbedder, make_embedder
from mindpalace.retrieval.chunking import tail_tokens
from mindpalace.retrieval.embedding_sync import CONTEXT_MAX_TOKENS, sync_embeddings
from mindpalace.scope import Scope
from mindpalace.settings import EmbedSettings
from mindpalace.store import SQLiteStore

from ._embedders import Recording

SESSION = Scope("t", "u", "a", "s1")


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    st = SQLiteStore(tmp_path / "memory.db")
    yield st
    st.close()


def add_messages(store: SQLiteStore, scope: Scope, texts: list[str]) -> None:
    for i, text in enumerate(texts, start=1):
        store.index_document(scope, "message", str(i), text, {"index": i})


class TestEmbeddedText:
    def test_a_message_is_embedded_after_the_turns_before_it(self, store: SQLiteStore) -> None:
        add_messages(store, SESSION, ["Ann: hi", "Bob: Did you visit the aquarium?", "Ann: Yes, it was amazing!"])
        store.index_document(SESSION, "note", "n1", "a note has no turns")
        emb = Recording()
        sync_embeddings(store, emb, context_turns=1)
        assert sorted(emb.seen) == sorted([
            "Ann: hi",
            "Ann: hi\nBob: Did you visit the aquarium?",
            "Bob: Did you visit the aquarium?\nAnn: Yes, it was amazing!",
            "a note has no turns",
        ])
        stored = store.get_documents_by_ref(SESSION, "message", ["3"])["3"]
        assert stored.text == "Ann: Yes, it was amazing!"  # only the embedded text changes

    def test_two_turns_oldest_first_and_sessions_never_mix(self, store: SQLiteStore) -> None:
        add_messages(store, SESSION, ["A: one", "B: two", "A: three"])
        add_messages(store, SESSION.with_(session="s2"), ["C: other session"])
        emb = Recording()
        sync_embeddings(store, emb, context_turns=2)
        assert "A: one\nB: two\nA: three" in emb.seen
        assert "C: other session" in emb.seen  # first of its session: no context

    def test_after_question_only_an_answer_gets_context(self, store: SQLiteStore) -> None:
        add_messages(store, SESSION, ["Bob: Did you visit the aquarium?", "Ann: Yes, it was amazing!",
                                      "Bob: I moved to Lyon last week.", "Ann: Lovely city"])
        emb = Recording()
        sync_embeddings(store, emb, context_turns=1, context_after_question=True)
        assert sorted(emb.seen) == sorted([
            "Bob: Did you visit the aquarium?",
            "Bob: Did you visit the aquarium?\nAnn: Yes, it was amazing!",
            "Bob: I moved to Lyon last week.",  # after a statement: its own text only
            "Ann: Lovely city",
        ])

    def test_off_embeds_each_text_alone(self, store: SQLiteStore) -> None:
        add_messages(store, SESSION, ["A: one", "B: two"])
        emb = Recording()
        sync_embeddings(store, emb)
        assert sorted(emb.seen) == ["A: one", "B: two"]

    def test_long_context_keeps_its_last_tokens(self, store: SQLiteStore) -> None:
        long_turn = "A: " + " ".join(f"word{i}" for i in range(1000))  # one part (< 16k chars)
        add_messages(store, SESSION, [long_turn, "B: short reply"])
        emb = Recording()
        sync_embeddings(store, emb, context_turns=1)
        (embedded,) = [t for t in emb.seen if t.endswith("B: short reply")]
        context = embedded.removesuffix("\nB: short reply")
        assert long_turn.endswith(context) and context != long_turn
        assert "word999" in context and "word0 " not in context
        assert len(context) < len(long_turn) / 4

    def test_the_reply_is_found_by_what_it_answers(self, store: SQLiteStore) -> None:
        add_messages(store, SESSION, ["Bob: Did you visit the aquarium?", "Ann: Yes, it was amazing!",
                                      "Bob: The weather is nice today."])
        plain, contextual = HashingEmbedder(64), HashingEmbedder(64, seed=1)
        sync_embeddings(store, plain)
        q = "aquarium"
        before = {h.doc.ref: h.score for h in store.vector_search(SESSION, plain.embed_query(q), plain.model_id, k=3)}
        sync_embeddings(store, contextual, context_turns=1)
        after = {h.doc.ref: h.score for h in
                 store.vector_search(SESSION, contextual.embed_query(q), contextual.model_id, k=3)}
        assert before["2"] <= 0 < after["2"]
        assert after["2"] > after["3"]

    def test_a_huge_message_stored_in_parts_lends_no_context(self, store: SQLiteStore) -> None:
        add_messages(store, SESSION, ["A: " + "tool output line\n" * 2000, "B: short reply"])
        emb = Recording()
        sync_embeddings(store, emb, context_turns=1)
        assert "B: short reply" in emb.seen

    @pytest.mark.parametrize("turns", [-1, 9])
    def test_out_of_range_is_refused_before_embedding(self, store: SQLiteStore, turns: int) -> None:
        add_messages(store, SESSION, ["A: one"])
        emb = Recording()
        with pytest.raises(ValidationError, match="context_turns"):
            sync_embeddings(store, emb, context_turns=turns)
        assert emb.seen == [] and store.embedding_models() == {}


class TestModelId:
    def test_contextual_vectors_have_their_own_model_id(self) -> None:
        plain = make_embedder(EmbedSettings(provider="hashing", dimensions=32))
        ctx = make_embedder(EmbedSettings(provider="hashing", dimensions=32, context_turns=1))
        every = make_embedder(EmbedSettings(provider="hashing", dimensions=32, context_turns=2, context_after="any"))
        assert plain is not None and ctx is not None and every is not None
        assert (plain.model_id, ctx.model_id, every.model_id) == (
            "hashing-32", "hashing-32+context1q", "hashing-32+context2")

    def test_setting_range(self) -> None:
        with pytest.raises(ValueError):
            EmbedSettings(context_turns=9)

    def test_switching_the_setting_re_embeds_everything(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "hashing"}) as mem:
            session = mem.session("s", user="u", agent="a")
            session.messages.add_many([{"role": "user", "content": "the aquarium?"},
                                       {"role": "assistant", "content": "it was amazing"}])
            mem.sync_embeddings()
            assert mem.store.embedding_models() == {"hashing-256": (256, 2)}
        with Memory.open(tmp_path / "ws", embed={"provider": "hashing", "context_turns": 1}) as mem:
            assert (mem.retriever.context_turns, mem.retriever.context_after_question) == (1, True)
            report = mem.sync_embeddings()
            assert report is not None and report.embedded == 2
            assert report.retired_models == ["hashing-256"]
            assert mem.store.embedding_models() == {"hashing-256+context1q": (256, 2)}
            hits = mem.session("s", user="u", agent="a").recall("aquarium", k=2)
            assert [h.ref for h in hits][:1] == ["1"]


def test_tail_tokens() -> None:
    assert tail_tokens("short text", 5) == "short text"
    text = " ".join(f"w{i}" for i in range(500))
    tail = tail_tokens(text, 10)
    assert text.endswith(tail) and 0 < len(tail) < 60
    assert CONTEXT_MAX_TOKENS >= 16
    with pytest.raises(ValidationError):
        tail_tokens(text, 0)

"""Sentence rows (embed.sentence_vectors_min_chars): a long message that states something is also
embedded sentence by sentence, so a vector search matching one of its sentences — an update said
in passing inside a message about something else — finds it by that sentence's score."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.providers.embed import HashingEmbedder
from mindpalace.retrieval.embedding_sync import sentence_rows, sync_embeddings
from mindpalace.retrieval.supersession import sentences
from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore
from mindpalace.store.base import Document

from ._embedders import Recording

SESSION = Scope("t", "u", "a", "s1")
LONG = ("Can you help me plan a dinner for Saturday? I'm thinking of six guests and a big lasagna. "
        "By the way: I'll be working as a nurse.")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    st_ = SQLiteStore(tmp_path / "memory.db")
    yield st_
    st_.close()


def _doc(text: str, role: str | None = "user", kind: str = "message") -> Document:
    meta = {"role": role} if role is not None else {}
    return Document(id=1, scope=SESSION, kind=kind, ref="1", text=text, meta=meta,
                    created_at=datetime(2025, 1, 1, tzinfo=UTC))


class TestWhichDocumentsGetRows:
    def test_a_long_stated_message_is_embedded_whole_and_sentence_by_sentence(self, store: SQLiteStore) -> None:
        store.index_document(SESSION, "message", "1", LONG, {"role": "user"})
        store.index_document(SESSION, "message", "2", "Short. Two sentences.", {"role": "user"})
        store.index_document(SESSION, "message", "3", LONG.replace("nurse", "pilot"), {"role": "assistant"})
        store.index_document(SESSION, "note", "n1", LONG.replace("nurse", "baker"))
        emb = Recording()
        sync_embeddings(store, emb, sentence_min_chars=100)
        assert sorted(emb.seen) == sorted([
            LONG, *sentences(LONG),  # the stated long message: its text, then each sentence
            "Short. Two sentences.",  # below the length
            LONG.replace("nurse", "pilot"),  # an assistant reply states no speaker's fact
            LONG.replace("nurse", "baker"),  # not a message
        ])

    def test_off_embeds_each_text_once(self, store: SQLiteStore) -> None:
        store.index_document(SESSION, "message", "1", LONG, {"role": "user"})
        emb = Recording()
        sync_embeddings(store, emb)
        assert emb.seen == [LONG]

    @settings(max_examples=200, deadline=None)
    @given(
        words=st.lists(st.sampled_from(["I", "moved", "to", "Lyon.", "Why?", "Yes!", "[shares", "a", "photo]",
                                        "Dr.", "Okafor", "ok", "By the way:", "nurse."]), max_size=30),
        role=st.sampled_from([None, "user", "assistant", "tool", "system", "Caroline"]),
        min_chars=st.integers(0, 120),
        windows=st.integers(1, 3),
    )
    def test_rows_are_sentences_of_a_long_stated_message(
        self, words: list[str], role: str | None, min_chars: int, windows: int
    ) -> None:
        text = " ".join(words)
        rows = sentence_rows(_doc(text, role), min_chars, windows)
        assert rows == [] or (len(rows) >= 2 and rows == sentences(text))
        if rows:
            assert min_chars > 0 and len(text) >= min_chars and windows == 1
            assert role not in ("assistant", "tool", "system")
        assert sentence_rows(_doc(text, role, kind="note"), min_chars, windows) == []


@settings(max_examples=25, deadline=None)
@given(query=st.sampled_from(["nurse", "lasagna guests", "dinner Saturday", "working as", "plan"]))
def test_a_vector_hit_scores_the_best_of_the_text_and_its_sentences(query: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever the query: the message's vector score is its best row's cosine (its text's or one
    sentence's), so never below the whole text's own."""
    st_ = SQLiteStore(tmp_path_factory.mktemp("rows") / "memory.db")
    try:
        st_.index_document(SESSION, "message", "1", LONG, {"role": "user"})
        emb = HashingEmbedder(64)
        sync_embeddings(st_, emb, sentence_min_chars=100)
        q = emb.embed_query(query)
        hit = st_.vector_search(SESSION, q, emb.model_id, k=1)[0]
        rows = emb.embed([LONG, *sentences(LONG)])
        assert hit.score == pytest.approx(float(np.max(rows @ q)), abs=1e-5)
        assert hit.score >= float(rows[0] @ q) - 1e-6
    finally:
        st_.close()


_AT = datetime(2025, 3, 3, 9, tzinfo=UTC)
_ASIDES = [  # (stated first, the update said in passing inside a long message, question)
    ("My job is an architect at a logistics firm.",
     "Could you suggest a packing list for a three-day conference? It's a mix of talks and evening "
     "dinners, and I only want to bring a carry-on bag. By the way: Got the offer! I'll be working as a nurse.",
     "What is my current occupation?"),
]


@pytest.fixture(scope="module")
def aside_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    mem = Memory.open(Path(tmp_path_factory.mktemp("asides")) / "ws", embed={"provider": "use", "sentence_vectors_min_chars": 100})
    reply = "Noted. Let me know if anything else about that changes and I will keep it in mind."
    for n, (first, update, _) in enumerate(_ASIDES):
        for day, text in ((0, first), (10, update)):
            s = mem.session(f"s{n}-{day}", user=f"u{n}", agent="a")
            s.add_message({"role": "user", "content": text}, timestamp=_AT + timedelta(days=day))
            s.add_message({"role": "assistant", "content": reply}, timestamp=_AT + timedelta(days=day, minutes=1))
    try:
        yield mem
    finally:
        mem.close()


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(_ASIDES)))
def test_an_update_said_in_passing_ranks_above_what_it_updates(aside_memory: Memory, case: int) -> None:
    first, update, question = _ASIDES[case]
    hits = aside_memory.session("ask", user=f"u{case}", agent="a").recall(question, k=10)
    said = [h.text for h in hits]  # "user: <content>"
    at = next(i for i, t in enumerate(said) if t.endswith(update))
    assert not any(t.endswith(first) for t in said[:at])

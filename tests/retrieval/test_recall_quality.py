"""Recall that generalizes: chunked embeddings map back to one message, newer statements on the
same subject rank above what they correct (and the old hit is marked), dates named in a
query favour messages from that period, and fusion is never worse than its best single list
on a small fixture."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.retrieval.chunking import chunk_text
from mindpalace.retrieval.hybrid import HybridRetriever
from mindpalace.retrieval.temporal import query_periods
from mindpalace.scope import ANY, Scope
from mindpalace.settings import FactSettings

FILLER = "The committee discussed budgets, schedules and staffing for the next quarter. "


def user_scope(memory: Memory, uid: str) -> Scope:
    return memory.scope(user=uid, agent="a").with_(session=ANY)


class TestChunking:
    def test_short_text_is_one_chunk_and_long_text_is_bounded(self) -> None:
        assert chunk_text("short note", 64, 8) == ["short note"]
        long = " ".join(f"word{i}" for i in range(2000))
        chunks = chunk_text(long, 64, 8)
        assert len(chunks) > 10
        assert all(len(c) < len(long) // 5 for c in chunks)
        assert chunks[0].startswith("word0") and "word1999" in chunks[-1]

    def test_sizes_are_validated(self) -> None:
        with pytest.raises(ValidationError):
            chunk_text("x", 4, 0)
        with pytest.raises(ValidationError):
            chunk_text("x", 64, 32)

    @settings(max_examples=20, deadline=None)
    @given(n=st.integers(1, 3000), size=st.integers(16, 200))
    def test_every_word_is_in_some_chunk(self, n: int, size: int) -> None:
        words = [f"w{i}" for i in range(n)]
        chunks = chunk_text(" ".join(words), size, size // 4)
        seen = {w for c in chunks for w in c.split()}
        assert set(words) <= seen | {w for w in words if any(w in c for c in chunks)}

    def test_a_hit_on_any_chunk_returns_the_message_once(self, tmp_path: object, uid: str) -> None:
        mem = Memory.open(tmp_path / "ws", embed={"provider": "hashing", "chunk_tokens": 32,  # type: ignore[operator]
                                                   "chunk_overlap_tokens": 4})
        try:
            s = mem.session("s1", user=uid, agent="a")
            tail = "the zeppelin hangar lease expires in october"
            s.add_message({"role": "assistant", "content": FILLER * 20 + tail})
            s.add_message({"role": "user", "content": "short unrelated note about lunch"})
            mem.retriever.sync_embeddings()
            vectors = mem.store.get_embeddings([1], mem.embedder.model_id)  # type: ignore[union-attr]
            assert set(vectors) <= {1, 2}
            hits = mem.store.vector_search(user_scope(mem, uid), mem.embedder.embed_query(tail),  # type: ignore[union-attr]
                                           mem.embedder.model_id, k=10)  # type: ignore[union-attr]
            refs = [h.doc.ref for h in hits]
            assert refs[0] == "1" and len(refs) == len(set(refs)) == 2
            # the best chunk (the tail) scores higher than the whole text would
            whole = mem.embedder.embed([FILLER * 20 + tail])[0]  # type: ignore[union-attr]
            assert hits[0].score > float(whole @ mem.embedder.embed_query(tail)) + 0.1  # type: ignore[union-attr]
            row = mem.store._execute("SELECT length(vector) AS n, dim FROM embeddings WHERE doc_id = 1").fetchone()  # type: ignore[attr-defined]
            assert row["n"] // (4 * row["dim"]) > 3  # several chunk vectors under one document
        finally:
            mem.close()

    def test_put_embeddings_checks_rows(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.add_message({"role": "user", "content": "x"})
        doc = next(iter(memory.store.iter_documents(s.scope)))
        with pytest.raises(ValidationError):
            memory.store.put_embeddings([doc.id], np.ones((2, 8), np.float32), "m", rows=[0])


class TestSupersession:
    def _say(self, memory: Memory, uid: str, texts: list[tuple[str, str]], start: datetime) -> None:
        for n, (session, text) in enumerate(texts):
            s = memory.session(session, user=uid, agent="a")
            s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
            s.add_message({"role": "assistant", "content": FILLER * 3}, timestamp=start + timedelta(days=n, minutes=1))

    def test_a_later_correction_ranks_above_the_statement_and_marks_it(self, memory: Memory, uid: str) -> None:
        start = datetime(2025, 3, 1, tzinfo=UTC)
        others = [("s1", f"note {i}: the {w} needs attention this week")
                  for i, w in enumerate(["garden", "car", "roof", "printer", "bike", "fridge", "laptop",
                                         "kettle", "clinic parking", "city tram pass"])]
        self._say(memory, uid, [
            ("s1", "my dentist appointment is on tuesday afternoon at the city clinic"),
            ("s1", "I like hiking on weekends"),
            *others,
            ("s2", "update my dentist appointment is on thursday afternoon at the city clinic"),
        ], start)
        hits = memory.session("q", user=uid, agent="a").recall("when is my dentist appointment at the city clinic", k=5)
        texts = [h.text for h in hits if h.tier == "message"]
        assert texts.index(next(t for t in texts if "thursday" in t)) < texts.index(
            next(t for t in texts if "tuesday" in t))
        old = next(h for h in hits if "tuesday" in h.text)
        new = next(h for h in hits if "thursday" in h.text)
        assert old.meta["superseded_by"] == f"{new.scope.session}/{new.ref}"
        assert not old.why.current and new.why.current  # type: ignore[attr-defined]
        assert "superseded by" in str(old.why)  # type: ignore[attr-defined]

    def test_another_speaker_or_user_does_not_supersede(self, memory: Memory, uid: str) -> None:
        start = datetime(2025, 3, 1, tzinfo=UTC)
        s = memory.session("s1", user=uid, agent="a")
        s.add_message({"role": "user", "content": "my dentist appointment is on tuesday at the clinic"},
                      timestamp=start)
        s.add_message({"role": "assistant", "content": "my dentist appointment is on tuesday at the clinic too"},
                      timestamp=start + timedelta(days=1))
        other = memory.session("s1", user=uid + "x", agent="a")
        other.add_message({"role": "user", "content": "my dentist appointment is on friday at the clinic"},
                          timestamp=start + timedelta(days=2))
        hits = memory.retriever.search(user_scope(memory, uid), "dentist appointment", k=5)
        assert all("superseded_by" not in h.meta for h in hits)
        assert all(h.scope.user == uid for h in hits)

    def test_off_when_similarity_is_one(self, memory: Memory, uid: str) -> None:
        start = datetime(2025, 3, 1, tzinfo=UTC)
        self._say(memory, uid, [("s1", "my dentist appointment is on tuesday at the city clinic"),
                                ("s2", "my dentist appointment is on thursday at the city clinic")], start)
        r = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_similarity=1.0))
        assert all("superseded_by" not in h.meta for h in r.search(user_scope(memory, uid), "dentist", k=5))


class TestDates:
    def test_periods(self) -> None:
        now = datetime(2023, 10, 20, tzinfo=UTC)
        (p,) = query_periods("What did she paint on October 13, 2023?", now)
        assert p.start == datetime(2023, 10, 13, tzinfo=UTC) and p.end == datetime(2023, 10, 14, tzinfo=UTC)
        (p,) = query_periods("what happened in May 2023", now)
        assert p.start == datetime(2023, 5, 1, tzinfo=UTC) and p.end == datetime(2023, 6, 1, tzinfo=UTC)
        (p,) = query_periods("camping in June", now)
        assert p.month == 6
        (p,) = query_periods("what did we do last month", now)
        assert p.start == datetime(2023, 9, 1, tzinfo=UTC)
        assert query_periods("what is my favourite colour", now) == []
        assert query_periods("may I ask something", now) == []

    def test_a_named_month_favours_messages_from_it(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.add_message({"role": "user", "content": "we went camping by the lake"},
                      timestamp=datetime(2023, 3, 10, tzinfo=UTC))
        s.add_message({"role": "user", "content": "we went camping in the mountains"},
                      timestamp=datetime(2023, 7, 2, tzinfo=UTC))
        plain = memory.retriever.search(user_scope(memory, uid), "went camping", k=2)
        dated = memory.retriever.search(user_scope(memory, uid), "where did we go camping in March 2023", k=2)
        assert dated[0].text.endswith("lake") and dated[0].why.date
        assert {h.ref for h in plain} == {h.ref for h in dated}


def start_next_week(memory: Memory, uid: str) -> tuple[list[str], dict[str, int]]:
    """Eight short user statements that all end "start next week", each followed by a long
    assistant reply repeating its topic: (topics, the statement's message id per topic)."""
    rng = np.random.default_rng(3)
    topics = ["violin lessons", "garden tomatoes", "marathon training", "tax return", "kitchen tiles",
              "piano recital", "car insurance", "bird watching"]
    s = memory.session("s1", user=uid, agent="a")
    answers = {}
    for t in topics:
        answers[t] = s.add_message({"role": "user", "content": f"my {t} start next week"})
        words = " ".join(rng.choice(["plan", "maybe", "time", "week", "next", "start", t]) for _ in range(150))
        s.add_message({"role": "assistant", "content": f"About {t}: {words}"})
    return topics, answers


class TestFusionNeverWorse:
    def test_fused_recall_at_least_the_best_single_list(self, memory: Memory, uid: str) -> None:
        """A small fixture of short statements and long replies: recall@3 of the fused list is
        at least that of the keyword-only and the vector-only list."""
        topics, answers = start_next_week(memory, uid)
        scope = user_scope(memory, uid)

        def recall_at(settings: FactSettings) -> float:
            r = HybridRetriever(memory.store, memory.embedder, settings)
            found = 0
            for t in topics:
                refs = [h.ref for h in r.search(scope, f"when do my {t} start", k=3, kinds=["message"])]
                found += str(answers[t]) in refs
            return found / len(topics)

        fused = recall_at(FactSettings())
        kw = recall_at(FactSettings(vector_weight=0.0, neighbor_weights=[]))
        vec = recall_at(FactSettings(keyword_weight=0.0, neighbor_weights=[]))
        assert fused >= max(kw, vec)


class TestFollowups:
    """A correction that shares no word with the question (issue 10, failure class 1) is found
    from the statement it corrects (``facts.supersede_followups``), within the query's scope."""

    def _conversation(self, memory: Memory, uid: str, texts: list[str]) -> None:
        start = datetime(2025, 3, 1, tzinfo=UTC)
        for n, text in enumerate(texts):
            s = memory.session(f"s{n // 4}", user=uid, agent="a")
            s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
            s.add_message({"role": "assistant", "content": "Noted about your manager and your team at work. " + FILLER * 2},
                          timestamp=start + timedelta(days=n, minutes=1))

    def _texts(self, drift: bool = False) -> list[str]:
        texts = ["My manager is Olumide.", "I like hiking on weekends.", "The printer is broken again.",
                 "Lunch was great today.", "I bought new running shoes.", "My flat needs painting."]
        texts.append("My boss is Priya since Olumide left the company.")
        if drift:  # newer than the correction, same person, another attribute
            texts.append("Olumide is running a marathon in May.")
        return [*texts, "The garden looks lovely."]

    def test_a_correction_without_the_questions_words_ranks_above_the_statement(self, memory: Memory, uid: str) -> None:
        self._conversation(memory, uid, self._texts(drift=False))
        off = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=0))
        before = [h.text for h in off.search(user_scope(memory, uid), "Who is my manager?", k=4)]
        assert any(t.endswith("My manager is Olumide.") for t in before)
        assert not any("Priya" in t for t in before)
        on = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=5))
        hits = on.search(user_scope(memory, uid), "Who is my manager?", k=4)
        texts = [h.text for h in hits]
        new = next(i for i, t in enumerate(texts) if "Priya" in t)
        old = next(i for i, t in enumerate(texts) if t.endswith("My manager is Olumide."))
        assert new == old - 1  # directly above what it corrects
        assert hits[old].meta["superseded_by"] == f"{hits[new].scope.session}/{hits[new].ref}"
        assert hits[new].meta["supersedes"] == f"{hits[old].scope.session}/{hits[old].ref}"
        assert "superseded by" in str(hits[old].why)

    def test_a_shared_predicate_is_no_subject(self, memory: Memory, uid: str) -> None:
        """The fusion fixture: every statement ends "start next week". Words the speaker says
        in more than ``supersede_followup_max_uses`` statements name no subject, so no later
        statement is taken as the update of the one asked about (with every content word a
        subject word, one is, and the answer drops out of the top 3)."""
        topics, answers = start_next_week(memory, uid)
        scope = user_scope(memory, uid)

        def found(max_uses: int) -> int:
            r = HybridRetriever(memory.store, memory.embedder,
                                FactSettings(supersede_followups=5, supersede_followup_max_uses=max_uses))
            return sum(str(answers[t]) in [h.ref for h in r.search(scope, f"when do my {t} start", k=3, kinds=["message"])]
                       for t in topics)

        assert found(0) < found(5) == len(topics)

    def test_the_question_scope_bounds_the_search(self, memory: Memory, uid: str) -> None:
        self._conversation(memory, uid, self._texts(drift=False)[:-2])
        other = memory.session("s9", user=uid + "x", agent="a")
        other.add_message({"role": "user", "content": "My boss is Priya since Olumide left the company."},
                          timestamp=datetime(2026, 1, 1, tzinfo=UTC))
        on = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_followups=5))
        hits = on.search(user_scope(memory, uid), "Who is my manager?", k=4)
        assert all(h.scope.user == uid for h in hits)
        assert all("superseded_by" not in h.meta for h in hits)


class TestCorrectionChains:
    """A value stated, corrected, and corrected again in three sessions: the newest ranks above
    both older values and is the current one, whichever step (supersession among the hits or
    a follow-up) made each link."""

    TEXTS = (
        ("s1", "my dentist appointment is on tuesday at the city clinic"),
        ("s1", "I like hiking on weekends"),
        ("s2", "the dentist rebooked me for wednesday, same city clinic"),
        ("s3", "rebooked for wednesday? no, the dentist rebooked me for friday, same city clinic"),
    )

    def test_the_newest_of_a_chain_ranks_first_and_is_current(self, memory: Memory, uid: str) -> None:
        start = datetime(2025, 3, 1, tzinfo=UTC)
        for n, (session, text) in enumerate(self.TEXTS):
            s = memory.session(session, user=uid, agent="a")
            s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
            s.add_message({"role": "assistant", "content": FILLER * 3}, timestamp=start + timedelta(days=n, minutes=1))
        # the follow-up links tuesday → wednesday, supersession among the hits wednesday → friday
        r = HybridRetriever(memory.store, memory.embedder, FactSettings(supersede_answers=0, supersede_followups=5))
        hits = r.search(user_scope(memory, uid), "when is my dentist appointment at the city clinic", k=4,
                        kinds=["message"])
        texts = [h.text for h in hits]
        first = next(i for i, t in enumerate(texts) if "tuesday at" in t)
        middle = next(i for i, t in enumerate(texts) if t.endswith("wednesday, same city clinic"))
        newest = next(i for i, t in enumerate(texts) if "friday" in t)
        assert newest < min(middle, first)
        assert hits[newest].why.current  # type: ignore[attr-defined]
        assert not hits[middle].why.current and not hits[first].why.current  # type: ignore[attr-defined]
        assert hits[middle].meta["superseded_by"] == f"{hits[newest].scope.session}/{hits[newest].ref}"


class TestAttachmentNotes:
    """LoCoMo turns end in "[shares a photo: a photo of …]": compared whole, two unrelated turns
    of one speaker looked alike for the note alone, and the later one was taken as the update
    of the earlier (chains of unrelated turns marked superseded)."""

    TURNS = (
        ("Melanie", "I finished my first pottery class today and made a bowl. "
                    "[shares a photo: a photo of a bowl with a colorful design on it]"),
        ("Caroline", "That looks lovely, you should be proud of it!"),
        ("Caroline", "I went to a support group meeting yesterday, it was very moving."),
        ("Melanie", "Thanks! The kids want to try it too."),
        ("Caroline", "My friends threw me a small party for my birthday."),
        ("Melanie", "We took the kids camping at the lake last weekend. "
                    "[shares a photo: a photo of a tent next to a lake with trees]"),
        ("Caroline", "Camping sounds like fun, I love the outdoors."),
        ("Melanie", "I'm reading a great book about painting landscapes."),
    )

    def test_a_shared_photo_note_does_not_make_a_later_turn_the_update(self, memory: Memory, uid: str) -> None:
        start = datetime(2023, 5, 1, tzinfo=UTC)
        s = memory.session("session_1", user=uid, agent="a")
        for n, (who, text) in enumerate(self.TURNS):
            s.add_message({"role": "user", "name": who, "content": text}, timestamp=start + timedelta(days=n))
        hits = memory.session("q", user=uid, agent="a").recall(
            "Which photo shows what Melanie makes in her pottery class?", k=6)
        pottery = next(h for h in hits if "pottery" in h.text)
        camping = next(h for h in hits if "camping at the lake" in h.text)  # a hit: it could supersede
        assert "superseded_by" not in pottery.meta
        assert "supersedes" not in camping.meta
        assert hits[0] is pottery

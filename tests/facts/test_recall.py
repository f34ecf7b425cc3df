"""Session.recall: working memory first, promotion of fact hits, no stale values, arguments."""

from __future__ import annotations

import sqlite3

import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError


class TestRecall:
    def test_working_memory_comes_first(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.add_message({"role": "user", "content": "my user id is u_10086, remember the user id"})
        s.remember("user:id", "u_10086", importance=0.9)
        hits = s.recall("user id", k=3)
        assert hits[0].tier == "working" and hits[0].why.working
        assert hits[0].fact.content == "u_10086"
        assert [h.tier for h in hits[1:]] == ["message"]  # the fact is not returned twice

    def test_a_working_only_fact_sharing_few_query_terms_is_still_found(self, memory: Memory, uid: str) -> None:
        # a new user's finding: a working-only fact (low importance: no long-term copy, so the
        # retriever cannot see it) needed half the query's terms, so a natural question missed it
        s = memory.session("s1", user=uid, agent="a")
        for i in range(6):
            s.add_message({"role": "user", "content": f"small talk about the weather, day {i}"})
        s.remember("note:dentist", "dentist on Friday at 10am", importance=0.1)
        hits = s.recall("what time did we agree for the dentist appointment next week", k=3)
        assert [h.fact.content for h in hits if h.tier == "working"] == ["dentist on Friday at 10am"]
        assert hits[0].tier == "working"  # the messages share none of the query's terms

    def test_a_weak_working_match_ranks_below_hits_sharing_more_terms(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.add_message({"role": "user", "content": "the dentist appointment moved to next week, same time"})
        s.remember("note:dentist", "dentist on Friday at 10am", importance=0.1)
        hits = s.recall("what time did we agree for the dentist appointment next week", k=2)
        assert [h.tier for h in hits] == ["message", "working"]

    def test_exact_key_query_hits_working_memory(self, memory: Memory, uid: str) -> None:
        s = memory.session("s1", user=uid, agent="a")
        s.remember("task:critical_fact", "v_1_5", importance=0.9)
        (hit,) = s.recall("task:critical_fact", k=1)
        assert hit.tier == "working" and hit.fact.content == "v_1_5"

    def test_long_term_hits_are_promoted_with_access_stats(self, memory: Memory, uid: str) -> None:
        memory.session("old", user=uid, agent="a").remember("user:city", "Lisbon", importance=0.9)
        s = memory.session("new", user=uid, agent="a")
        (hit,) = s.recall("which city", k=1)
        assert hit.tier == "fact" and hit.fact.content == "Lisbon"
        assert "user:city" in s.facts.working
        assert s.facts.longterm.current("user:city").access_count == 1

    def test_corrected_fact_is_not_recalled_as_current(self, memory: Memory, uid: str) -> None:
        memory.session("s1", user=uid, agent="a").remember("user:city", "Paris", importance=0.9)
        memory.session("s1", user=uid, agent="a").remember("user:city", "Lisbon", importance=0.9)
        hits = memory.session("s2", user=uid, agent="a").recall("city Paris Lisbon", k=5)
        facts = [h.fact.content for h in hits if h.fact is not None]
        assert facts == ["Lisbon"]

    @pytest.mark.parametrize("query", ["user:city", "which city does the user live in"])
    def test_a_correction_made_in_another_session_is_recalled_as_current(
        self, memory: Memory, uid: str, query: str
    ) -> None:
        a = memory.session("s1", user=uid, agent="a")
        a.remember("user:city", "Paris")  # default importance: A's working memory only
        memory.session("s2", user=uid, agent="a").remember("user:city", "Berlin", importance=0.9)
        facts = [h for h in a.recall(query, k=5) if h.fact is not None]
        assert [h.fact.content for h in facts] == ["Berlin"]
        assert facts[0].meta["current"] is True
        assert a.facts.get("user:city").content == "Berlin"

    def test_session_scope_setting_limits_messages_to_the_session(self, workspace_dir, uid: str) -> None:
        with Memory.open(workspace_dir, embed={"provider": "hashing"}, facts={"recall_scope": "session"}) as mem:
            mem.session("s1", user=uid).add_message({"role": "user", "content": "ramen in s1"})
            mem.session("s2", user=uid).add_message({"role": "user", "content": "ramen in s2"})
            mem.session("s1", user=uid).remember("user:food", "ramen", importance=0.9)
            hits = mem.session("s2", user=uid).recall("ramen", k=5)
            assert {(h.tier, h.scope.session) for h in hits} == {("message", "s2"), ("fact", "")}


@pytest.mark.parametrize("bad_k", [0, -1, "3", 2.5, True])
def test_recall_k_must_be_a_positive_int(memory: Memory, uid: str, bad_k: object) -> None:
    with pytest.raises(ValidationError, match="recall k"):
        memory.session(uid).recall("anything", k=bad_k)  # type: ignore[arg-type]


@pytest.mark.sqlite_only
def test_a_recall_with_no_hits_writes_nothing(memory: Memory, uid: str) -> None:
    s = memory.session(uid, user=uid)
    s.remember("user:city", "Lisbon", importance=0.2)  # working memory only

    def rows() -> list[tuple[str, str]]:
        with sqlite3.connect(memory.workspace.db_path) as conn:
            return conn.execute("SELECT value, updated_at FROM kv WHERE namespace = "
                                "'working_memory' ORDER BY key").fetchall()

    before = rows()
    assert s.recall("zzzz qqqq", k=3) == []
    assert rows() == before  # not even rewritten with the same value


class TestOneCommitPerRecall:
    """A recall's writes — the hit counted, the fact promoted, the ``recalled`` lineage event —
    are one transaction: they commit together, or none does."""

    def _outer_transactions(self, memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[int]:
        opened: list[int] = []
        store = memory.store
        inner = store.transaction

        def transaction():  # type: ignore[no-untyped-def]
            if not store.in_transaction():
                opened.append(1)
            return inner()

        monkeypatch.setattr(store, "transaction", transaction)
        return opened

    def test_promotion_and_lineage_event_commit_in_one_transaction(
        self, memory: Memory, uid: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        memory.session("old", user=uid, agent="a").remember("user:city", "Lisbon", importance=0.9)
        s = memory.session("new", user=uid, agent="a")
        memory.retriever.sync_embeddings()  # index work, done by the first query after a write
        s.steps.state  # noqa: B018 - the step state is read (one transaction) on first use
        opened = self._outer_transactions(memory, monkeypatch)
        (hit,) = s.recall("which city", k=1)
        assert hit.tier == "fact" and "user:city" in s.facts.working
        assert len(opened) == 1
        recalled = [e for e in s.lineage.events() if e.type == "recalled"]
        assert len(recalled) == 1 and s.facts.longterm.current("user:city").access_count == 1

    def test_a_failed_lineage_write_undoes_the_promotion(
        self, memory: Memory, uid: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        memory.session("old", user=uid, agent="a").remember("user:city", "Lisbon", importance=0.9)
        s = memory.session("new", user=uid, agent="a")

        def fail(events: object) -> None:
            raise RuntimeError("lineage write failed")

        monkeypatch.setattr(s.lineage, "record_many", fail)
        with pytest.raises(RuntimeError, match="lineage write failed"):
            s.recall("which city", k=1)
        monkeypatch.undo()
        fresh = memory.session("new", user=uid, agent="a")
        assert "user:city" not in fresh.facts.working  # the promotion was rolled back
        assert fresh.facts.longterm.current("user:city").access_count == 0

    def test_an_observer_search_records_no_event(self, memory: Memory, uid: str) -> None:
        memory.session("old", user=uid, agent="a").remember("user:city", "Lisbon", importance=0.9)
        s = memory.session("new", user=uid, agent="a")
        assert [h.tier for h in s.search("which city", k=1)] == ["fact"]
        assert not [e for e in s.lineage.events() if e.type == "recalled"]


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_an_empty_or_blank_query_is_refused_by_name_and_records_nothing(
    memory: Memory, uid: str, query: str,
) -> None:
    # a new user's finding: recall("") silently answered [] (and wrote a `recalled` lineage
    # event for a query that asked nothing), so a caller's unset variable looked like "no memory"
    s = memory.session("s1", user=uid, agent="a")
    s.add_message({"role": "user", "content": "my home city is Lyon"})
    with pytest.raises(ValidationError, match="query"):
        s.recall(query)
    with pytest.raises(ValidationError, match="query"):
        s.search(query)
    assert [e for e in s.lineage.events() if e.type == "recalled"] == []

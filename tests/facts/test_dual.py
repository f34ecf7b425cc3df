"""Dual memory (Session.facts): write, archive, recall by key, promotion, forget, persistence."""

from __future__ import annotations

from mindpalace import Memory


def session(memory: Memory, uid: str, sid: str = "s1"):
    return memory.session(sid, user=uid, agent="a")


class TestRemember:
    def test_important_fact_survives_a_full_working_memory(self, memory: Memory, uid: str) -> None:
        s = session(memory, uid)
        s.remember("user:uid", "u_10086", importance=0.9)
        for i in range(20):
            s.remember(f"noise:n{i}", f"tmp {i}", importance=0.9)
        assert "user:uid" not in s.facts.working
        assert s.facts.get("user:uid").content == "u_10086"
        assert "user:uid" in s.facts.working  # promoted back on the hit

    def test_unimportant_fact_lives_only_in_working_memory(self, memory: Memory, uid: str) -> None:
        s = session(memory, uid)
        kept = s.remember("scratch:note", "temp", importance=0.1)
        assert kept.id == "" and s.facts.longterm.current("scratch:note") is None
        assert s.facts.get("scratch:note").content == "temp"

    def test_low_importance_correction_still_supersedes_long_term(self, memory: Memory, uid: str) -> None:
        s = session(memory, uid)
        s.remember("user:city", "Paris", importance=0.9)
        s.remember("user:city", "Lisbon", importance=0.2)
        for i in range(10):  # push the correction out of working memory
            s.remember(f"noise:n{i}", "x", importance=0.5)
        assert s.facts.get("user:city").content == "Lisbon"

    def test_facts_are_shared_across_sessions_of_the_user(self, memory: Memory, uid: str) -> None:
        session(memory, uid, "s1").remember("user:uid", "u1", importance=0.9)
        assert session(memory, uid, "s2").facts.get("user:uid").content == "u1"
        assert memory.session("s1", user=uid + "x", agent="a").facts.get("user:uid") is None

    def test_working_memory_survives_a_new_session_object(self, memory: Memory, uid: str) -> None:
        session(memory, uid).remember("scratch:note", "temp", importance=0.1)
        again = session(memory, uid)
        assert again.facts.get("scratch:note").content == "temp"


class TestForget:
    def test_forget_removes_everywhere_and_never_resurrects(self, memory: Memory, uid: str) -> None:
        s = session(memory, uid)
        first = s.remember("user:city", "Paris", importance=0.9)
        assert s.forget("user:city") is True
        assert s.facts.get("user:city") is None
        assert s.recall("Paris") == []
        again = s.remember("user:city", "Paris", importance=0.9)
        assert again.id != first.id
        assert s.forget("user:nothing") is False

    def test_stale_working_copy_is_dropped_after_a_correction_elsewhere(self, memory: Memory, uid: str) -> None:
        a, b = session(memory, uid, "s1"), session(memory, uid, "s2")
        a.remember("user:city", "Paris", importance=0.9)
        b.remember("user:city", "Lisbon", importance=0.9)  # another session corrects it
        assert a.facts.get("user:city").content == "Lisbon"

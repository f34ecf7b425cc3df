"""Dual memory (Session.facts): write, archive, recall by key, promotion, forget, persistence."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.facts import Fact, FactMemory
from mindpalace.providers.embed.hashing import HashingEmbedder
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings


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
        kept = s.remember("scratch:note", "temp", importance=0.1).fact
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


class TestStoredLayout:
    def test_a_working_memory_saved_as_one_list_is_read_and_migrated_on_the_next_write(
        self, memory: Memory, uid: str
    ) -> None:
        scope = Scope("t", uid, "a", "s1")
        old = [Fact("note:a", "1", importance=0.3).to_json(), Fact("note:b", "2", importance=0.3).to_json()]
        memory.store.kv_put(scope, "working_memory", "items", old)  # the layout before one row per item
        facts = FactMemory(memory.store, scope)
        assert [f.key for f in facts.working_items()] == ["note:a", "note:b"]
        facts.remember("note:c", "3", importance=0.3)
        rows = {key for _, key, _ in memory.store.kv_list(scope, "working_memory")}
        assert rows == {"note:a", "note:b", "note:c"}
        assert [f.key for f in FactMemory(memory.store, scope).working_items()] == ["note:a", "note:b", "note:c"]

    def test_reads_write_nothing_and_a_repeated_value_rewrites_only_its_row(self, memory: Memory, uid: str) -> None:
        facts = FactMemory(memory.store, Scope("t", uid, "a", "s1"))
        for key in ("note:a", "note:b", "note:c"):
            facts.remember(key, "v", importance=0.3)
        before = {k: v for _, k, v in memory.store.kv_list(facts.scope, "working_memory")}
        facts.peek("note:a"), facts.working_items(), facts.list()
        facts.remember("note:a", "w", importance=0.3)  # a new value moves to the end
        after = {k: v for _, k, v in memory.store.kv_list(facts.scope, "working_memory")}
        assert {k for k in after if after[k] != before[k]} == {"note:a"}
        assert [f.key for f in facts.working_items()] == ["note:b", "note:c", "note:a"]


class LockProbingEmbedder(HashingEmbedder):
    """Records, for every embed call, whether another connection could take the database's
    write lock at that moment (timeout 0: no waiting, no timing)."""

    def __init__(self, db: Path) -> None:
        super().__init__(32)
        self.db, self.calls = db, []  # type: ignore[var-annotated]

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        other = sqlite3.connect(self.db, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            self.calls.append("free")
        except sqlite3.OperationalError:
            self.calls.append("locked")
        finally:
            other.close()
        return super()._embed_batch(texts, query=query)


class TestEmbeddingOutsideTheWriteLock:
    @pytest.mark.sqlite_only
    def test_remember_embeds_before_it_takes_the_write_lock(self, memory: Memory, uid: str) -> None:
        embedder = LockProbingEmbedder(memory.store.path)
        facts = FactMemory(memory.store, Scope("t", uid, "a", "s1"), embedder=embedder)
        facts.remember("user:city", "Lisbon", importance=0.9)  # long-term: embedded
        facts.remember("user:city", "Porto", importance=0.2)  # a correction: long-term too
        facts.remember("note:x", "y", importance=0.2)  # working memory only: not embedded
        assert embedder.calls == ["free", "free"]
        assert memory.store.vector_search(facts.fact_scope, embedder.embed_query("user:city: Porto"),
                                          embedder.model_id, k=1)[0].doc.text == "user:city: Porto"


class TestForget:
    def test_forget_removes_everywhere_and_never_resurrects(self, memory: Memory, uid: str) -> None:
        s = session(memory, uid)
        first = s.remember("user:city", "Paris", importance=0.9).fact
        assert s.forget("user:city") is True
        assert s.facts.get("user:city") is None
        assert s.recall("Paris") == []
        again = s.remember("user:city", "Paris", importance=0.9).fact
        assert again.id != first.id
        assert s.forget("user:nothing") is False

    def test_stale_working_copy_is_dropped_after_a_correction_elsewhere(self, memory: Memory, uid: str) -> None:
        a, b = session(memory, uid, "s1"), session(memory, uid, "s2")
        a.remember("user:city", "Paris", importance=0.9)
        b.remember("user:city", "Lisbon", importance=0.9)  # another session corrects it
        assert a.facts.get("user:city").content == "Lisbon"


class TestCorrectionAcrossSessions:
    """Issue 10: a value noted in session A and corrected in session B is the value A sees."""

    def test_get_in_the_first_session_returns_the_correction(self, memory: Memory, uid: str) -> None:
        a, b = session(memory, uid, "s1"), session(memory, uid, "s2")
        a.remember("user:city", "Paris")  # default importance: working memory of A only
        b.remember("user:city", "Berlin", importance=0.9)
        assert a.facts.get("user:city").content == "Berlin"
        assert a.facts.get("user:city").id  # the long-term value, promoted into A
        assert [f.content for f in a.facts.working_items() if f.key == "user:city"] == ["Berlin"]

    def test_peek_and_listing_show_the_correction_and_write_nothing(self, memory: Memory, uid: str) -> None:
        a, b = session(memory, uid, "s1"), session(memory, uid, "s2")
        a.remember("user:city", "Paris")
        b.remember("user:city", "Berlin", importance=0.9)
        before = memory.store.kv_list(a.scope, "working_memory")
        assert a.facts.peek("user:city").content == "Berlin"
        assert {f.key: f.content for f in a.facts.list()}["user:city"] == "Berlin"
        assert memory.store.kv_list(a.scope, "working_memory") == before  # nothing counted or promoted

    def test_forgotten_elsewhere_is_gone_from_the_listing(self, memory: Memory, uid: str) -> None:
        a, b = session(memory, uid, "s1"), session(memory, uid, "s2")
        a.remember("user:city", "Paris", importance=0.9)
        b.forget("user:city")
        assert a.facts.peek("user:city") is None
        assert a.facts.working_items() == []


class TestRememberNeverEvictsItself:
    """Issue 10: the newest fact (0 accesses, low importance) was its own eviction victim."""

    def test_the_fact_just_written_stays_and_the_result_names_the_victim(self, memory: Memory, uid: str) -> None:
        s = session(memory, uid)
        for i in range(5):  # fill working memory (capacity 5) with items read once each
            s.remember(f"note:n{i}", f"v{i}", importance=0.5)
            s.facts.get(f"note:n{i}")
        done = s.remember("note:new", "fresh", importance=0.1)
        assert done.fact.content == "fresh" and done.archived == ()
        assert [f.key for f in done.evicted] == ["note:n0"]
        assert s.facts.get("note:new").content == "fresh"
        assert [h.fact.content for h in s.recall("note:new", k=1)] == ["fresh"]

    def test_an_important_victim_is_reported_archived_and_evicted(self, memory: Memory, uid: str) -> None:
        facts = FactMemory(memory.store, Scope("t", uid, "a", "s1"),
                           settings=FactSettings(working_capacity=1))
        first = facts.remember("user:uid", "u1", importance=0.9)
        assert [f.key for f in first.archived] == ["user:uid"] and first.evicted == ()
        second = facts.remember("note:x", "y", importance=0.1)
        assert [f.id for f in second.evicted] == [first.fact.id]
        assert facts.get("user:uid").content == "u1"  # still long-term


    def test_a_recall_promotion_never_evicts_a_fact_just_written(self, memory: Memory, uid: str) -> None:
        # a new user's finding: recall promoted an old important fact and that read evicted
        # the low-importance note written just before (no long-term copy: gone for good)
        facts = FactMemory(memory.store, Scope("t", uid, "a", "s1"),
                           settings=FactSettings(working_capacity=1))
        old = facts.remember("user:city", "Lisbon", importance=0.9)
        facts.remember("note:new", "call the bank", importance=0.1)  # displaces user:city (archived)
        assert facts.promote(old.fact) is not None  # a hit on the long-term fact
        assert facts.get("note:new").content == "call the bank"
        assert facts.get("user:city").content == "Lisbon"  # still there, long-term


# A worker holding one session's facts open in its own process: reads one JSON command per line
# from stdin and answers one JSON line, so the parent orders the two processes' operations
# exactly (no sleeps).
WORKER = r"""
import json, sys
from mindpalace import Memory

mem = Memory.open(sys.argv[1], embed={"provider": "hashing"}, facts={"working_capacity": 100})
facts = mem.session(sys.argv[3], user=sys.argv[2], agent="a").facts  # loads working memory now
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    op, *args = json.loads(line)
    if op == "remember":
        out = facts.remember(args[0], args[1], importance=args[2]).fact.content
    elif op == "forget":
        out = facts.forget(args[0])
    elif op == "burst":  # many writes while the other process writes too
        out = [facts.remember(f"{args[0]}:n{i}", str(i), importance=args[2]).fact.key
               for i in range(args[1])]
    elif op == "corrections":  # many values of one key, long-term, while the other writes too
        out = [facts.remember(args[0], f"{args[1]} {i}", importance=0.9).fact.id for i in range(args[2])]
    elif op == "get":
        got = facts.get(args[0])
        out = None if got is None else got.content
    else:
        break
    print(json.dumps(out), flush=True)
mem.close()
"""


class Worker:
    def __init__(self, ws: Path, uid: str, sid: str = "s1") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(ws), uid, sid],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.ask() == "ready", self.proc.stderr.read() if self.proc.stderr else ""

    def ask(self, *command: object) -> object:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if command:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else ""
        return json.loads(line)

    def close(self) -> None:
        _, err = self.proc.communicate(json.dumps(["quit"]) + "\n", timeout=60)
        assert self.proc.returncode == 0, err


class TestSharedBetweenProcesses:
    """Issue 11: two processes on one session's working memory — an acknowledged remember was
    lost and a forget undone, because each wrote back its own stale copy of the whole list."""

    def test_no_acknowledged_remember_is_lost(self, memory: Memory, workspace_dir: Path, uid: str) -> None:
        a, b = Worker(workspace_dir, uid), Worker(workspace_dir, uid)
        try:
            assert a.ask("remember", "note:a", "from A", 0.3) == "from A"
            assert b.ask("remember", "note:b", "from B", 0.3) == "from B"
            assert b.ask("get", "note:a") == "from A"  # B reads A's committed write
        finally:
            a.close()
            b.close()
        facts = session(memory, uid).facts
        assert {f.key: f.content for f in facts.working_items()} == {"note:a": "from A", "note:b": "from B"}

    def test_no_forget_is_undone(self, memory: Memory, workspace_dir: Path, uid: str) -> None:
        session(memory, uid).remember("note:x", "old", importance=0.3)
        a, b = Worker(workspace_dir, uid), Worker(workspace_dir, uid)  # both have loaded note:x
        try:
            assert a.ask("forget", "note:x") is True
            assert b.ask("remember", "note:y", "new", 0.3) == "new"
            assert b.ask("get", "note:x") is None
        finally:
            a.close()
            b.close()
        assert session(memory, uid).facts.peek("note:x") is None
        assert session(memory, uid).facts.peek("note:y").content == "new"

    def test_concurrent_writers_keep_every_acknowledged_write(self, workspace_dir: Path, uid: str) -> None:
        workers = [Worker(workspace_dir, uid) for _ in range(2)]
        try:
            for w, name in zip(workers, ("a", "b"), strict=True):  # both start before either reads
                assert w.proc.stdin is not None
                w.proc.stdin.write(json.dumps(["burst", name, 40, 0.3]) + "\n")
                w.proc.stdin.flush()
            acked = {key for w in workers for key in w.ask()}  # type: ignore[union-attr]
        finally:
            for w in workers:
                w.close()
        assert len(acked) == 80
        with Memory.open(workspace_dir, embed={"provider": "hashing"}, facts={"working_capacity": 100}) as mem:
            stored = {f.key for f in mem.session("s1", user=uid, agent="a").facts.working_items()}
        assert stored == acked

    def test_concurrent_corrections_of_one_key_get_contiguous_versions_and_one_current(
        self, memory: Memory, workspace_dir: Path, uid: str
    ) -> None:
        workers = [Worker(workspace_dir, uid, sid) for sid in ("s1", "s2")]
        try:
            for w, name in zip(workers, ("a", "b"), strict=True):
                assert w.proc.stdin is not None
                w.proc.stdin.write(json.dumps(["corrections", "user:city", name, 25]) + "\n")
                w.proc.stdin.flush()
            ids = [i for w in workers for i in w.ask()]  # type: ignore[union-attr]
        finally:
            for w in workers:
                w.close()
        versions = session(memory, uid).facts.history("user:city")
        assert sorted(ids) == [v.id for v in versions] and len(versions) == 50
        assert sum(v.current for v in versions) == 1


def _value(step: int) -> str:
    return f"value {step}"


handle_ops = st.lists(
    st.tuples(
        st.sampled_from(["remember", "forget", "get"]),
        st.integers(0, 1),  # which handle
        st.integers(0, 5),  # key id
        st.sampled_from([0.1, 0.5, 0.9]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=handle_ops, capacity=st.integers(1, 8))
def test_two_handles_on_one_working_memory_behave_as_one(
    memory: Memory, operations: list[tuple[str, int, int, float]], capacity: int
) -> None:
    """Interleaved operations through two handles (each with its own cached copy) never lose an
    acknowledged write, never bring back a forgotten value, never return a stale one, and the
    fact just written is always in working memory."""
    scope = Scope("t", uuid.uuid4().hex[:12], "a", "s1")
    handles = [FactMemory(memory.store, scope, settings=FactSettings(working_capacity=capacity))
               for _ in range(2)]
    model: dict[str, tuple[str, bool]] = {}  # key → (latest value, ever held long-term)
    for step, (op, h, key_id, importance) in enumerate(operations):
        facts, key = handles[h], f"k{key_id}:v"
        if op == "remember":
            done = facts.remember(key, _value(step), importance=importance)
            long_term = importance >= 0.6 or (key in model and model[key][1])
            model[key] = (_value(step), long_term)
            assert done.fact.key in {f.key for f in facts.working_items()}
            assert len(facts.working_items()) <= capacity
        elif op == "forget":
            facts.forget(key)
            model.pop(key, None)
        got = handles[1 - h].peek(key)  # the other handle sees it at once
        if key not in model:
            assert got is None  # forgotten (or never written) stays gone
        elif model[key][1]:
            assert got is not None and got.content == model[key][0]  # never lost, never stale
        else:
            assert got is None or got.content == model[key][0]  # may be evicted, never stale

"""Group commit of the SQLite store: one COMMIT for concurrent transactions, none acknowledged
before it, a failed COMMIT fails every member, per-stream order kept, nothing lost or doubled."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mindpalace.errors import StoreError
from mindpalace.scope import Scope
from mindpalace.store import NewEvent
from mindpalace.store.sqlite import SQLiteStore

SCOPE = Scope(tenant="t", user="u", agent="a", session="s")


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "gc.db")
    yield s
    s.close()


def _wait_for(cond: Callable[[], bool]) -> None:
    """Wait for a state of the other threads (not for time to pass): a bounded poll."""
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "the other threads never got there"
        time.sleep(0.001)


def one_batch(store: SQLiteStore, bodies: list[Callable[[], None]],
              returned: Callable[[int], None] = lambda k: None, *, plain: bool = False,
              ) -> list[BaseException | None]:
    """Run each body in its own thread inside ``store.transaction()`` so that they all join ONE
    batch: the first holds its block open until every other thread waits to start its own.
    `returned(k)` is called in thread k as soon as its transaction returned. With `plain`, the
    bodies after the first run outside any transaction (a single-statement append there joins
    the batch as a savepoint-free member)."""
    group = store._group
    outcome: list[BaseException | None] = [None] * len(bodies)
    release = threading.Event()

    def run(k: int) -> None:
        try:
            if plain and k:
                bodies[k]()
            else:
                with store.transaction():
                    if k == 0:
                        release.wait()
                    bodies[k]()
            returned(k)
        except BaseException as exc:
            outcome[k] = exc

    first = threading.Thread(target=run, args=(0,))
    first.start()
    _wait_for(lambda: group.blocks >= 1)
    others = [threading.Thread(target=run, args=(k,)) for k in range(1, len(bodies))]
    for t in others:
        t.start()
    _wait_for(lambda: group.entering == len(others))
    release.set()
    for t in (first, *others):
        t.join()
    return outcome


def append(store: SQLiteStore, stream: str, n: int) -> Callable[[], None]:
    return lambda: store.append_events(SCOPE, stream, [NewEvent("e", {"n": n})])


class TestOneCommitForMany:
    def test_concurrent_transactions_share_one_commit_and_all_are_stored(self, store: SQLiteStore) -> None:
        before = store._group.commits
        outcome = one_batch(store, [append(store, f"s{k}", k) for k in range(6)])
        assert outcome == [None] * 6
        assert store._group.commits - before == 1
        assert [store.stream_version(SCOPE, f"s{k}") for k in range(6)] == [1] * 6

    def test_nobody_is_acknowledged_before_the_commit(self, store: SQLiteStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        acked: list[int] = []
        seen_at_commit: list[int] = []
        group = store._group
        real = group._commit

        def commit(conn: object) -> None:
            seen_at_commit.append(len(acked))
            real(conn)  # type: ignore[arg-type]

        monkeypatch.setattr(group, "_commit", commit)

        def body(k: int) -> Callable[[], None]:
            return append(store, "shared", k)

        outcome = one_batch(store, [body(k) for k in range(5)], returned=acked.append)
        assert outcome == [None] * 5 and seen_at_commit == [0] and sorted(acked) == list(range(5))

    def test_a_failed_commit_fails_every_member_and_stores_nothing(
        self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def broken(conn: object) -> None:
            raise StoreError("injected: the disk went away during COMMIT")

        monkeypatch.setattr(store._group, "_commit", broken)
        outcome = one_batch(store, [append(store, f"s{k}", k) for k in range(5)])
        assert all(isinstance(e, StoreError) and "injected" in str(e) for e in outcome)
        monkeypatch.undo()
        assert [store.stream_version(SCOPE, f"s{k}") for k in range(5)] == [0] * 5
        store.append_events(SCOPE, "after", [NewEvent("e", {})])  # the store works on
        assert store.stream_version(SCOPE, "after") == 1

    def test_a_failing_member_undoes_only_its_own_writes(self, store: SQLiteStore) -> None:
        def failing() -> None:
            store.append_events(SCOPE, "bad", [NewEvent("e", {})])
            raise ValueError("the agent's own error")

        outcome = one_batch(store, [append(store, "a", 0), failing, append(store, "c", 2)])
        assert outcome[0] is None and outcome[2] is None
        assert isinstance(outcome[1], ValueError)
        assert [store.stream_version(SCOPE, s) for s in ("a", "bad", "c")] == [1, 0, 1]

    def test_a_failing_first_member_leaves_the_next_batch_clean(self, store: SQLiteStore) -> None:
        def failing() -> None:
            store.append_events(SCOPE, "bad", [NewEvent("e", {})])
            raise ValueError("first fails")

        outcome = one_batch(store, [failing, append(store, "b", 1)])
        assert isinstance(outcome[0], ValueError) and outcome[1] is None
        assert store.stream_version(SCOPE, "bad") == 0 and store.stream_version(SCOPE, "b") == 1


class TestSingleStatementMembers:
    """An append outside a transaction is one atomic statement: it joins the batch without a
    savepoint, or commits by itself when it is alone."""

    def test_appends_outside_a_transaction_share_the_batch_commit_and_none_is_acked_before_it(
        self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        acked: list[int] = []
        seen_at_commit: list[int] = []
        group = store._group
        real = group._commit

        def commit(conn: object) -> None:
            seen_at_commit.append(len(acked))
            real(conn)  # type: ignore[arg-type]

        monkeypatch.setattr(group, "_commit", commit)
        before = group.commits
        outcome = one_batch(store, [append(store, f"s{k}", k) for k in range(6)], returned=acked.append,
                            plain=True)
        assert outcome == [None] * 6
        assert group.commits - before == 1 and seen_at_commit == [0] and sorted(acked) == list(range(6))
        assert [store.stream_version(SCOPE, f"s{k}") for k in range(6)] == [1] * 6

    def test_a_failed_commit_fails_the_single_statement_members_too(
        self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def broken(conn: object) -> None:
            raise StoreError("injected: the disk went away during COMMIT")

        monkeypatch.setattr(store._group, "_commit", broken)
        outcome = one_batch(store, [append(store, f"s{k}", k) for k in range(4)], plain=True)
        assert all(isinstance(e, StoreError) and "injected" in str(e) for e in outcome)
        monkeypatch.undo()
        assert [store.stream_version(SCOPE, f"s{k}") for k in range(4)] == [0] * 4

    def test_a_failing_statement_undoes_only_itself(self, store: SQLiteStore) -> None:
        conn = store._write_conn()

        def duplicate() -> None:  # a UNIQUE violation: SQLite undoes the statement, not the batch
            store._group.atomic(conn, lambda: conn.execute(
                "INSERT INTO meta (key, value) VALUES ('embedding_generation', 7)"))

        outcome = one_batch(store, [append(store, "a", 0), duplicate, append(store, "c", 2)], plain=True)
        assert outcome[0] is None and outcome[2] is None
        assert isinstance(outcome[1], StoreError) and "UNIQUE" in str(outcome[1])
        assert [store.stream_version(SCOPE, s) for s in ("a", "c")] == [1, 1]
        assert not conn.in_transaction

    def test_an_append_alone_commits_by_itself(self, store: SQLiteStore) -> None:
        statements: list[str] = []
        conn = store._write_conn()
        conn.set_trace_callback(statements.append)
        before = store._group.commits
        store.append_events(SCOPE, "alone", [NewEvent("e", {})])
        conn.set_trace_callback(None)
        assert [s.split()[0] for s in statements] == ["INSERT"]
        assert store._group.commits - before == 1 and not conn.in_transaction
        other = SQLiteStore(store.path)  # committed: another store object reads it
        try:
            assert other.stream_version(SCOPE, "alone") == 1
        finally:
            other.close()


class TestConcurrentAppends:
    def test_order_per_stream_kept_and_nothing_lost_or_doubled(self, store: SQLiteStore) -> None:
        threads, per_thread = 8, 40

        def agent(k: int) -> None:
            for i in range(per_thread):
                with store.transaction():  # own stream and a shared one, atomically
                    store.append_events(SCOPE, f"own{k}", [NewEvent("e", {"k": k, "i": i})])
                    store.append_events(SCOPE, "shared", [NewEvent("e", {"k": k, "i": i})])

        workers = [threading.Thread(target=agent, args=(k,)) for k in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        for k in range(threads):
            own = store.read_events(SCOPE, f"own{k}")
            assert [e.version for e in own] == list(range(1, per_thread + 1))
            assert [e.data["i"] for e in own] == list(range(per_thread))
        shared = store.read_events(SCOPE, "shared")
        assert [e.version for e in shared] == list(range(1, threads * per_thread + 1))
        pairs = [(e.data["k"], e.data["i"]) for e in shared]
        assert len(set(pairs)) == len(pairs) == threads * per_thread
        for k in range(threads):  # each agent's events in its own order
            assert [i for kk, i in pairs if kk == k] == list(range(per_thread))


def test_single_statement_appends_and_blocks_mixed_lose_nothing(store: SQLiteStore) -> None:
    # appends outside a transaction (alone, or savepoint-free members of a batch) and
    # transaction blocks from the same threads: every acknowledged event stored once, in order
    threads, per_thread = 8, 60

    def agent(k: int) -> None:
        for i in range(per_thread):
            if i % 5 == 4:
                with store.transaction():
                    store.append_events(SCOPE, f"own{k}", [NewEvent("e", {"k": k, "i": i})])
            else:
                store.append_events(SCOPE, f"own{k}", [NewEvent("e", {"k": k, "i": i})])
            store.append_events(SCOPE, "shared", [NewEvent("e", {"k": k, "i": i})])

    workers = [threading.Thread(target=agent, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    for k in range(threads):
        own = store.read_events(SCOPE, f"own{k}")
        assert [e.data["i"] for e in own] == list(range(per_thread))
    shared = store.read_events(SCOPE, "shared")
    assert [e.version for e in shared] == list(range(1, threads * per_thread + 1))
    assert len({(e.data["k"], e.data["i"]) for e in shared}) == threads * per_thread
    assert not store._write_conn().in_transaction

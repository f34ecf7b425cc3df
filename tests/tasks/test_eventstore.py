"""TaskEventStore: optimistic concurrency, snapshots in the append's transaction, exact recovery."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import ConcurrencyError, InvalidNameError, NotFoundError, ValidationError
from mindpalace.memory import Session
from mindpalace.tasks import TaskEventStore
from mindpalace.tasks.events import Checkpoint, StepFinished, StepStarted
from mindpalace.tasks.eventstore import LEDGER_NS, SNAPSHOT_NS, WORKING_NS


def steps(n: int, start: int = 0) -> list:
    return [e for i in range(start, start + n) for e in (StepStarted(index=i), StepFinished(index=i, output=i))]


class TestConcurrency:
    def test_two_writers_one_wins_other_retries(self, tmemory: Memory, session: Session) -> None:
        a = TaskEventStore(tmemory.store, session.scope)
        other = Memory.open(tmemory.workspace.root, embed={"provider": "none"})  # a second handle
        try:
            b = TaskEventStore(other.store, session.scope)
            a.append("t", steps(1), expected_version=0)
            seen_a, seen_b = a.version("t"), b.version("t")
            a.append("t", [Checkpoint(artifacts={"who": "a"})], expected_version=seen_a)
            with pytest.raises(ConcurrencyError, match="re-read and retry"):
                b.append("t", [Checkpoint(artifacts={"who": "b"})], expected_version=seen_b)
            assert a.recover("t").artifacts == {"who": "a"}  # the loser wrote nothing
            b.append("t", [Checkpoint(artifacts={"who": "b"})], expected_version=b.version("t"))
            assert [r.version for r in a.read("t")] == [1, 2, 3, 4]
            assert a.recover("t").artifacts == {"who": "b"}
        finally:
            other.close()

    def test_update_retries_a_lost_race(self, session: Session) -> None:
        ev = session.tasks.events
        ev.append("t", steps(1))
        raced = []

        def decide(state):  # the first time, someone else appends in between
            if not raced:
                raced.append(1)
                ev.append("t", [Checkpoint(artifacts={"other": 1})])
            return [Checkpoint(artifacts={"mine": state.version})]

        state, records = ev.update("t", decide)
        assert len(raced) == 1 and records[0].version == 4
        assert state.artifacts == {"other": 1, "mine": 3} == ev.recover("t").artifacts


class TestSnapshots:
    def test_crossing_the_interval_writes_a_snapshot(self, session: Session) -> None:
        ev = session.tasks.events  # snapshot_every_events = 5
        ev.append("t", steps(2))
        assert ev.latest_snapshot("t") is None
        ev.append("t", steps(1, 2))
        assert ev.latest_snapshot("t").version == 6

    def test_snapshot_rolls_back_with_the_append(self, session: Session) -> None:
        ev = session.tasks.events
        ev.append("t", steps(2))
        with pytest.raises(RuntimeError), session.store.transaction():
            ev.append("t", steps(1, 2))
            raise RuntimeError("crash inside the transaction")
        assert ev.version("t") == 4 and ev.latest_snapshot("t") is None

    def test_on_demand_snapshot(self, session: Session) -> None:
        ev = session.tasks.events
        ev.append("t", steps(1))
        assert ev.snapshot("t") == 2 and ev.latest_snapshot("t") == ev.recover("t", use_snapshot=False)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.integers(1, 7), min_size=1, max_size=8))
    def test_recovery_equals_full_replay(self, session: Session, batches: list[int]) -> None:
        ev = session.tasks.events
        task = f"t-{uuid.uuid4().hex[:8]}"  # a fresh task per example (the fixture is shared)
        start = 0
        for n in batches:
            ev.append(task, [*steps(n, start), Checkpoint(artifacts={f"k{start}": start})])
            start += n
        assert ev.recover(task) == ev.recover(task, use_snapshot=False)
        assert ev.recover(task).version == sum(2 * n + 1 for n in batches)


class TestReads:
    def test_read_from_version(self, session: Session) -> None:
        ev = session.tasks.events
        ev.append("t", steps(3))
        assert [r.version for r in ev.read("t", from_version=5)] == [5, 6]
        assert [r.type for r in ev.read("t", 5)] == ["step_started", "step_finished"]

    def test_history_of_unknown_task(self, session: Session) -> None:
        with pytest.raises(NotFoundError, match="task"):
            session.tasks.events.history("nope")

    def test_bad_task_id(self, session: Session) -> None:
        with pytest.raises(InvalidNameError):
            session.tasks.events.append("../x", steps(1))

    def test_bad_event_writes_nothing(self, session: Session) -> None:
        ev = session.tasks.events
        with pytest.raises(ValidationError):
            ev.append("t", [StepStarted(index=0), ("step_finished", {"index": "x"})])
        assert ev.version("t") == 0

    def test_scopes_do_not_see_each_other(self, tmemory: Memory, session: Session) -> None:
        session.tasks.events.append("t", steps(1))
        other = tmemory.session(session.id, user="u2", agent="planner")
        assert other.tasks.events.version("t") == 0


class TestClearTask:
    def test_clear_keeps_the_log(self, session: Session) -> None:
        ev = session.tasks.events
        ev.append("t", steps(3))
        with session.tool_call("lookup", {"q": 1}, idempotent=True) as call:
            call.run(lambda q: q)
        session.store.kv_put(session.scope, WORKING_NS, "t/scratch", 1)
        before = ev.recover("t")
        removed = ev.clear_task("t")
        assert removed == {"snapshots": 1, "ledger_rows": 0, "working_rows": 1, "events": 0}
        assert ev.recover("t") == before
        assert session.store.kv_get(session.scope, SNAPSHOT_NS, "t") is None

    def test_clear_drops_events_when_asked(self, session: Session) -> None:
        session.task.checkpoint(artifacts={"a": 1})
        with session.tool_call("book", {"x": 1}) as call:
            call.run(lambda x: x)
        removed = session.task.clear(drop_events=True)
        assert removed["ledger_rows"] == 1 and removed["events"] == 3
        assert session.task.version == 0
        assert session.store.kv_list(session.scope, LEDGER_NS) == []


def test_unreadable_snapshot_falls_back_to_full_replay(session: Session) -> None:
    ev = session.tasks.events
    ev.append("t", steps(3))
    session.store.kv_put(session.scope, SNAPSHOT_NS, "t", {"version": 6, "state": {"task": "t", "from_the_future": 1}})
    assert ev.recover("t") == ev.recover("t", use_snapshot=False) and ev.recover("t").version == 6

"""The in-process cache of folded task state: always equal to a fresh fold from event 1."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import StoreBusyError
from mindpalace.tasks import TaskEventStore
from mindpalace.tasks.events import Checkpoint, ConstraintSet, StepFinished, StepStarted

OPS = st.lists(
    st.sampled_from([
        "append_a", "append_b", "append_a_batch", "append_in_committed_tx",
        "append_then_rollback", "snapshot_a", "drop_b", "recover_a", "recover_b",
        "append_in_own_tx", "own_tx_then_rollback",
    ]),
    min_size=1, max_size=14,
)


def _event(i: int) -> list:
    match i % 3:
        case 0:
            return [Checkpoint(step=i, artifacts={f"k{i % 4}": i})]
        case 1:
            return [StepStarted(index=i), StepFinished(index=i, output={"i": i})]
        case _:
            return [ConstraintSet(name=f"c{i % 2}", value=i, source="user")]


class _Rollback(Exception):
    pass


def _check(a: TaskEventStore, fresh: TaskEventStore, task: str) -> None:
    expected = fresh.recover(task, use_snapshot=False)
    assert a.recover(task) == expected
    assert a.recover(task) == expected  # a second, unchanged read (cache hit) too


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS)
def test_cached_fold_equals_a_fresh_fold_after_any_interleaving(
    memory: Memory, workspace_dir: Path, ops: list[str]
) -> None:
    scope = memory.scope(user="u", session=f"s-{uuid.uuid4().hex[:8]}")
    task = "t"
    a = TaskEventStore(memory.store, scope, memory.settings.tasks)  # the cached handle
    with Memory.open(workspace_dir, embed={"provider": "hashing"},
                     tasks={"snapshot_every_events": 3}) as other:
        b = TaskEventStore(other.store, scope, other.settings.tasks)  # a second store object
        fresh = TaskEventStore(other.store, scope, other.settings.tasks)
        for i, op in enumerate(ops):
            match op:
                case "append_a":
                    a.append(task, _event(i))
                case "append_b":
                    b.append(task, _event(i))
                case "append_a_batch":
                    a.append(task, _event(i) + _event(i + 1))
                case "append_in_committed_tx":
                    with memory.store.transaction():
                        a.append(task, _event(i))
                        a.recover(task)
                case "append_then_rollback":
                    # read inside the transaction (its uncommitted event), then roll back and
                    # let another writer take that version with a different event
                    with pytest.raises(_Rollback), memory.store.transaction():
                        a.append(task, [Checkpoint(artifacts={"rolled": "back"})])
                        assert a.recover(task).artifacts.get("rolled") == "back"
                        raise _Rollback
                    b.append(task, [Checkpoint(artifacts={"rolled": "no"})])
                case "append_in_own_tx":  # the ledger's block: folds join the cache on commit
                    with a._transaction():
                        a.append(task, _event(i))
                        a.append(task, _event(i + 1))
                case "own_tx_then_rollback":
                    # a fold made in a block that rolls back is never remembered, even when
                    # another writer then takes that version (and maybe the same position)
                    with pytest.raises(_Rollback), a._transaction():
                        a.append(task, [Checkpoint(artifacts={"rolled": "back"})])
                        raise _Rollback
                    b.append(task, [Checkpoint(artifacts={"rolled": "no"})])
                case "snapshot_a":
                    a.snapshot(task)
                case "drop_b":
                    b.clear_task(task, drop_events=True)
                case "recover_a":
                    a.recover(task)
                case "recover_b":
                    b.recover(task)
            _check(a, fresh, task)


class TestIncrementalFold:
    def test_an_unchanged_stream_folds_nothing(self, memory: Memory, uid: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        ev = TaskEventStore(memory.store, memory.scope(user="u", session=uid))
        ev.append("t", [Checkpoint(artifacts={"a": i}) for i in range(7)])
        first = ev.recover("t")
        parsed: list[str] = []
        real = ev.registry.parse_stored
        monkeypatch.setattr(ev.registry, "parse_stored",
                            lambda t, d: parsed.append(t) or real(t, d))  # type: ignore[func-returns-value]
        assert ev.recover("t") == first and parsed == []
        ev.append("t", [Checkpoint(artifacts={"b": 1})])
        assert ev.recover("t").artifacts == {**first.artifacts, "b": 1}
        assert parsed == ["checkpoint"]  # only the new event was folded

    def test_a_dropped_and_rewritten_stream_is_not_mistaken_for_the_old_one(
        self, memory: Memory, workspace_dir: Path, uid: str
    ) -> None:
        scope = memory.scope(user="u", session=uid)
        a = TaskEventStore(memory.store, scope)
        a.append("t", [Checkpoint(artifacts={"old": 1}), Checkpoint(artifacts={"old": 2})])
        assert a.recover("t").artifacts == {"old": 2}
        with Memory.open(workspace_dir, embed={"provider": "hashing"}) as other:
            b = TaskEventStore(other.store, scope)
            b.clear_task("t", drop_events=True)
            b.append("t", [Checkpoint(artifacts={"new": 1}), Checkpoint(artifacts={"new": 2})])
        state = a.recover("t")  # same version (2) as the cached one, different events
        assert state.version == 2 and state.artifacts == {"new": 2}


class TestFoldOnAppend:
    def test_a_tool_call_leaves_nothing_to_fold(self, memory: Memory, uid: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
        s = memory.session(uid)
        s.checkpoint(step=0)
        with s.tool_call("book", {"n": 1}) as call:
            call.run(lambda n: {"ok": n}, checkpoint={"step": 1, "artifacts": {"booked": 1}})
        ev = s.tasks.events
        parsed: list[str] = []
        real = ev.registry.parse_stored
        monkeypatch.setattr(ev.registry, "parse_stored",
                            lambda t, d: parsed.append(t) or real(t, d))  # type: ignore[func-returns-value]
        state = ev.recover(s.task.id)
        assert parsed == []  # the appends kept the cached fold current
        assert state == ev.recover(s.task.id, use_snapshot=False)
        assert state.artifacts == {"booked": 1} and state.calls["completed"] == 1

    def test_an_append_after_another_writer_rewrote_the_stream_is_not_folded_on_the_old_state(
        self, memory: Memory, workspace_dir: Path, uid: str
    ) -> None:
        scope = memory.scope(user="u", session=uid)
        a = TaskEventStore(memory.store, scope)
        a.append("t", [Checkpoint(artifacts={"old": 1}), Checkpoint(artifacts={"old": 2})])
        with Memory.open(workspace_dir, embed={"provider": "hashing"}) as other:
            b = TaskEventStore(other.store, scope)
            b.clear_task("t", drop_events=True)
            b.append("t", [Checkpoint(artifacts={"new": 1}), Checkpoint(artifacts={"new": 2})])
        a.append("t", [Checkpoint(artifacts={"more": 3})])  # version 3, right after b's event
        state = a.recover("t")
        assert state == a.recover("t", use_snapshot=False)
        assert state.artifacts == {"new": 2, "more": 3}


def test_an_append_by_another_process_is_seen(memory: Memory, workspace_dir: Path, uid: str) -> None:
    scope = memory.scope(user="u", session=uid)
    ev = TaskEventStore(memory.store, scope)
    ev.append("t", [Checkpoint(artifacts={"here": 1})])
    assert ev.recover("t").version == 1  # cached now
    code = textwrap.dedent(f"""
        from mindpalace import Memory
        from mindpalace.tasks import TaskEventStore
        from mindpalace.tasks.events import Checkpoint
        with Memory.open({str(workspace_dir)!r}, embed={{"provider": "hashing"}}) as mem:
            scope = mem.scope(user="u", session={uid!r})
            TaskEventStore(mem.store, scope).append("t", [Checkpoint(artifacts={{"there": 2}})])
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    state = ev.recover("t")
    assert state.version == 2 and state.artifacts == {"here": 1, "there": 2}


def _after_another_writer(
    memory: Memory, workspace_dir: Path, uid: str, theirs: list[Checkpoint]
) -> TaskEventStore:
    """A task store that appended to task "t" (and cached its state), then `theirs` appended
    by a second Memory on the same workspace."""
    scope = memory.scope(user="u", session=uid)
    a = TaskEventStore(memory.store, scope, memory.settings.tasks)
    a.append("t", [Checkpoint(artifacts={"a": 0})])
    with Memory.open(workspace_dir, embed={"provider": "hashing"}) as other:
        TaskEventStore(other.store, scope).append("t", theirs)
    return a


def test_an_append_after_another_writers_events_catches_the_cache_up(
    memory: Memory, workspace_dir: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the cache must not stay behind after a second writer: else every later append finds it
    # stale and every snapshot due folds all the events since it
    a = _after_another_writer(memory, workspace_dir, uid, [Checkpoint(artifacts={"b": i}) for i in range(5)])
    a.append("t", [Checkpoint(artifacts={"a": 1})])  # version 7, after the other writer's 6
    parsed: list[str] = []
    real = a.registry.parse_stored
    monkeypatch.setattr(a.registry, "parse_stored",
                        lambda t, d: parsed.append(t) or real(t, d))  # type: ignore[func-returns-value]
    a.append("t", [Checkpoint(artifacts={"a": 2})])
    state = a.recover("t")
    assert parsed == ["checkpoint"]  # only the new event: the cache was current before it
    assert state == a.recover("t", use_snapshot=False)
    assert state.version == 8 and state.artifacts == {"a": 2, "b": 4}


def test_a_failed_catch_up_read_does_not_fail_the_committed_append(
    memory: Memory, workspace_dir: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the append is durable when the catch-up read runs: an error there must not report it as
    # failed (a retry would append it twice); the cache is dropped and rebuilt on next recover
    a = _after_another_writer(memory, workspace_dir, uid, [Checkpoint(artifacts={"b": 1})])

    def fail(task: str, *, use_snapshot: bool = True) -> None:
        raise StoreBusyError("busy")

    monkeypatch.setattr(a, "recover", fail)
    [record] = a.append("t", [Checkpoint(artifacts={"a": 2})])
    assert record.version == 3
    monkeypatch.undo()
    assert a._folded.get("t") is None
    assert a.recover("t").artifacts == {"a": 2, "b": 1}

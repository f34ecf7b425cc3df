"""What one durable step costs the SQLite store, counted exactly (statements, commits, VM
instructions), never timed: a checkpoint is one commit of one INSERT, a ledger tool step two
commits with the ``started`` row committed before the tool runs, and an optimistic append does
not read the whole stream. Plus the shortcut of an event's payload cleaning (same result)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import InvalidTextError
from mindpalace.memory import Session
from mindpalace.store import NewEvent
from mindpalace.tasks import ledger_key
from mindpalace.tasks.events import Checkpoint, payload_of
from mindpalace.textsafe import MAX_JSON_DEPTH, clean_json


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    # no snapshot falls inside the counted steps (a snapshot step writes one more row)
    m = Memory.open(tmp_path / "ws", embed={"provider": "none"}, tasks={"snapshot_every_events": 10_000})
    try:
        yield m
    finally:
        m.close()


class Statements:
    """Every SQL statement any connection of the store runs while active."""

    def __init__(self, mem: Memory) -> None:
        self.store = mem.store
        self.sql: list[str] = []

    def __enter__(self) -> Statements:
        self.store._write_conn()  # the group-commit connection exists before tracing starts
        self.store._conn()
        for conn in self.store._conns:
            conn.set_trace_callback(self.sql.append)
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self.store._conns:
            conn.set_trace_callback(None)

    def verbs(self) -> list[str]:
        """Each statement's first word, with the table of an INSERT ("INSERT kv")."""
        out = []
        for sql in self.sql:
            words = sql.split()
            if words[0] == "BEGIN":
                out.append(" ".join(words[:2]))
            elif words[0] == "INSERT":
                out.append(f"INSERT {words[words.index('INTO') + 1]}")
            else:
                out.append(words[0])
        return out


def tool_step(s: Session, i: int, seen: list[list[str]] | None = None, st: Statements | None = None) -> None:
    def book(i: int) -> dict:
        if seen is not None and st is not None:
            seen.append(st.verbs())
        return {"booking": f"B{i}"}

    with s.tool_call("book", {"i": i}) as call:
        if not call.done:
            call.run(book, checkpoint={"step": i, "artifacts": {"booked": i}})


def test_a_checkpoint_is_one_insert_that_commits_itself(mem: Memory, tmp_path: Path) -> None:
    # no snapshot due: the INSERT alone, its own implicit transaction (SQLite commits it before
    # execute returns) — no BEGIN / COMMIT statements around it
    s = mem.session("agent")
    s.checkpoint(step=0)  # connections opened, the task's fold cached
    with Statements(mem) as st:
        s.checkpoint(step=1, artifacts={"last": 1})
    assert st.verbs() == ["INSERT events"]
    assert not mem.store._write_conn().in_transaction
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as other:  # committed: seen
        assert other.session("agent").task.state().artifacts == {"last": 1}


def test_a_checkpoint_that_is_due_a_snapshot_writes_it_in_the_same_commit(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}, tasks={"snapshot_every_events": 4}) as mem:
        s = mem.session("agent")
        for i in range(3):
            s.checkpoint(step=i)
        with Statements(mem) as st:
            s.checkpoint(step=3)  # event 4
        assert st.verbs() == ["BEGIN IMMEDIATE", "INSERT events", "INSERT kv", "COMMIT"]
        assert s.task.events.latest_snapshot(s.task.id).version == 4  # type: ignore[union-attr]


def test_a_snapshot_made_due_by_another_writers_events_is_written_right_after(tmp_path: Path) -> None:
    # the cached state said no snapshot was due; another writer's events moved the stream on
    # so that this append crossed the multiple after all: the snapshot follows in its own commit
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}, tasks={"snapshot_every_events": 4}) as mem, \
            Memory.open(tmp_path / "ws", embed={"provider": "none"}, tasks={"snapshot_every_events": 1000}) as other:
        s = mem.session("agent")
        s.checkpoint(step=0)  # version 1, cached
        other.session("agent").checkpoint(step=1)  # version 2
        other.session("agent").checkpoint(step=2)  # version 3
        with Statements(mem) as st:
            s.checkpoint(step=3)  # version 4: this process thought it wrote version 2
        assert st.verbs()[0] == "INSERT events" and "INSERT kv" in st.verbs()
        snap = s.task.events.latest_snapshot(s.task.id)
        assert snap is not None and snap.version == 4 and snap.step == 3
        assert s.task.state() == s.task.events.recover(s.task.id, use_snapshot=False)


def test_a_ledger_tool_step_is_two_commits_and_started_is_committed_before_the_tool_runs(mem: Memory) -> None:
    s = mem.session("agent")
    tool_step(s, 0)
    seen: list[list[str]] = []
    with Statements(mem) as st:
        tool_step(s, 1, seen, st)
    # before the tool: the ledger row and the task head are read, then `started` (its event and
    # its ledger row) is committed — no savepoint, no read-back of the event
    before = ["SELECT", "SELECT", "BEGIN IMMEDIATE", "SELECT", "INSERT events", "INSERT kv", "COMMIT"]
    assert seen == [before]
    # after: the outcome and the checkpoint in one INSERT, the ledger row, one commit; the row is
    # not read again (nothing was appended to the task since `started`)
    assert st.verbs() == [*before, "BEGIN IMMEDIATE", "WITH", "INSERT kv", "COMMIT"]
    assert not mem.store._write_conn().in_transaction
    entry = s.tasks.ledger.get(s.task.id, ledger_key("book", {"i": 1}))
    assert entry is not None and entry.status == "completed" and entry.result == {"booking": "B1"}
    assert s.task.state().artifacts["booked"] == 1


def test_an_event_appended_while_the_tool_runs_makes_the_outcome_read_the_row_first(
    mem: Memory, tmp_path: Path
) -> None:
    s = mem.session("agent")
    other = Memory.open(tmp_path / "ws", embed={"provider": "none"})  # another process, in effect
    try:
        def book(i: int) -> dict:
            other.session("agent").checkpoint(step=99)  # the task moved on meanwhile
            return {"booking": f"B{i}"}

        with Statements(mem) as st, s.tool_call("book", {"i": 7}) as call:
            call.run(book, checkpoint={"step": 7, "artifacts": {"booked": 7}})
        after = st.verbs()[st.verbs().index("COMMIT") + 1:]
        assert after[:2] == ["BEGIN IMMEDIATE", "WITH"]  # the optimistic append finds a newer head…
        assert "SELECT" in after[2:]  # …and the row is read back before the outcome is written
        assert s.tasks.ledger.get(s.task.id, ledger_key("book", {"i": 7})).status == "completed"  # type: ignore[union-attr]
        types = [type(r.event).__name__ for r in s.task.read()]
        assert types[-4:] == ["ToolCallRecorded", "Checkpoint", "ToolCallCompleted", "Checkpoint"]
        assert s.task.state().artifacts == {"booked": 7}
    finally:
        other.close()


def test_a_call_settled_while_the_tool_ran_keeps_the_first_outcome(mem: Memory) -> None:
    s = mem.session("agent")
    ledger = s.tasks.ledger

    def book(i: int) -> dict:  # another writer settles the row while the tool still runs
        # (resolve refuses a running call: this is the ledger's own write, as a second
        # process's finish of the same row would be)
        row = ledger.get(s.task.id, ledger_key("book", {"i": 3}))
        assert row is not None
        ledger.finish(row, result={"booking": "by hand"}, reconciled=True)
        return {"booking": "late"}

    with s.tool_call("book", {"i": 3}) as call:
        assert call.run(book, checkpoint={"step": 3}) == {"booking": "by hand"}
    assert ledger.get(s.task.id, ledger_key("book", {"i": 3})).result == {"booking": "by hand"}  # type: ignore[union-attr]
    completions = [r for r in s.task.read() if type(r.event).__name__ == "ToolCallCompleted"]
    assert len(completions) == 1


def test_a_checkpoint_written_with_a_tool_outcome_is_encoded_once(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # checked before the tool runs (a checkpoint the store would refuse must not be found only
    # after the side effect) and written with the outcome: one JSON encode serves both (there
    # were four: the check, the payload check twice, the store's)
    s = mem.session("agent")
    tool_step(s, 0)
    encodes: list[str] = []
    real = json.JSONEncoder.encode

    def counted(self: json.JSONEncoder, o: object) -> str:
        text = real(self, o)
        if "marker-ck" in text:
            encodes.append(text)
        return text

    monkeypatch.setattr(json.JSONEncoder, "encode", counted)
    with s.tool_call("book", {"i": 1}) as call:
        call.run(lambda i: {"booking": i}, checkpoint={"step": 1, "artifacts": {"marker-ck": 1}})
    assert len(encodes) == 1, encodes
    monkeypatch.undo()
    assert s.task.state().artifacts["marker-ck"] == 1
    assert [r.data for r in s.task.read()][-1] == {"step": 1, "artifacts": {"marker-ck": 1}, "pending": None}


def _vm_steps(mem: Memory, fn) -> int:  # type: ignore[no-untyped-def]
    """SQLite virtual-machine instructions `fn` runs on the store's connections (an append
    outside a transaction runs on the shared write connection)."""
    mem.store._write_conn()
    mem.store._conn()
    conns = list(mem.store._conns)
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    for conn in conns:
        conn.set_progress_handler(tick, 1)
    try:
        fn()
    finally:
        for conn in conns:
            conn.set_progress_handler(None, 0)
    return count[0]


@pytest.mark.parametrize("n", [1, 3])
def test_an_optimistic_append_does_not_scan_the_stream(mem: Memory, n: int) -> None:
    store, scope = mem.store, mem.session("agent").scope
    version = 0

    def append() -> None:
        nonlocal version
        version = store.append_events(scope, "s", [NewEvent("x", {"i": version})] * n,
                                       expected_version=version)[-1].version

    append()
    short = _vm_steps(mem, append)
    for _ in range(600):
        append()
    long = _vm_steps(mem, append)
    plain = _vm_steps(mem, lambda: store.append_events(scope, "s", [NewEvent("x", {})] * n))
    # a scan of the stream would cost ~600× more instructions; an index lookup a few more
    # (a deeper b-tree)
    assert long < short * 1.5 and long < plain * 1.5, (short, long, plain)


JSON_LEAVES = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
               | st.lists(st.sampled_from(["a", "\x00", "é", "\u2028", "{", "[", "\\", "u0000", '"']), max_size=5)
               .map("".join))
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="ab\x00é", max_size=3), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES)
def test_an_event_payload_is_cleaned_exactly_as_a_walk_of_it_would(value: object) -> None:
    # payload_of skips clean_json's walk when the JSON text proves it would change nothing (lone
    # surrogates never reach a model: the task API cleans its inputs, and pydantic's json-mode
    # dump cannot encode them)
    event = Checkpoint(artifacts={"v": value})
    assert payload_of(event) == clean_json(event.model_dump(mode="json", exclude={"type"}))


def test_an_event_payload_nested_past_the_limit_is_still_refused() -> None:
    deep: object = 1
    for _ in range(MAX_JSON_DEPTH + 2):
        deep = [deep]
    with pytest.raises(InvalidTextError, match="nested deeper"):
        payload_of(Checkpoint(artifacts={"v": deep}))


def test_a_kv_rewrite_updates_the_row_in_place(mem: Memory) -> None:
    # the ledger rewrites its row on every outcome: in place (one table page to log and fsync),
    # not deleted and inserted again at the table's end (the table and both indexes)
    s = mem.session("agent")
    tool_step(s, 0)
    tool_step(s, 1)
    key = f"{s.task.id}/{ledger_key('book', {'i': 1})}"
    conn = mem.store._conn()
    rowids = {r[0]: r[1] for r in conn.execute("SELECT key, rowid FROM kv WHERE namespace = 'task_ledger'")}
    mem.store.kv_put(s.scope, "task_ledger", key, {"rewritten": True})
    after = {r[0]: r[1] for r in conn.execute("SELECT key, rowid FROM kv WHERE namespace = 'task_ledger'")}
    assert after == rowids and mem.store.kv_get(s.scope, "task_ledger", key) == {"rewritten": True}

"""TaskEventStore: append-only task event streams with snapshots and exact recovery (seed 004).

Each task is the event stream ``task:<id>`` in its session's scope. Appends go through
``Store.append_events`` in one transaction with optimistic concurrency; a snapshot of the folded
state is written to kv namespace ``task_snapshots`` **in the same transaction** as the append
that crosses a multiple of ``settings.tasks.snapshot_every_events`` (so a snapshot can never be
ahead of, or inconsistent with, the log). Recovery = latest snapshot + replay of later events.
An append after which the cached state says no snapshot is due is the store's append alone (one
atomic statement, one commit); if another writer's events made it cross a multiple after all,
the snapshot follows in a transaction of its own (read under its write lock: still exactly the
log's state).

The folded state of each task is cached in the process (per ``TaskEventStore`` object) with the
store position of the event it ends at. ``recover`` first looks up the stream's last event
(``Store.stream_head``, one indexed lookup): still that event, the cached state is the answer.
Otherwise it reads the stream from that event on and folds only the events after it; when the
event at the cached version is no longer the same one (the stream was deleted and written again)
it recovers from scratch. Only
committed state is cached: nothing read inside a transaction (it may still roll back), so a
second store object or process appending is seen on the next ``recover``.

An append keeps the cache current without reading anything: when the store reports that the
appended events went right after the cached event (:attr:`StoredEvent.previous` is its
position — or they start a new stream), the state after them is the cached state plus these
events, exactly; it is remembered once the append's transaction has committed (a snapshot due
in that append is written from it too, instead of re-reading the events since the last one).
When the append went after another writer's events instead, the cache is caught up by one read
of those events right away (else it would stay behind for every later append).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from mindpalace.checks import require_int
from mindpalace.errors import ConcurrencyError, NotFoundError, ValidationError
from mindpalace.scope import Scope
from mindpalace.settings import TaskSettings
from mindpalace.store import NewEvent, Store, StoredEvent
from mindpalace.store.codec import dumps
from mindpalace.tasks.events import DEFAULT_REGISTRY, EventRegistry, TaskEvent, encoded_payload
from mindpalace.tasks.state import TaskState, apply, initial_state
from mindpalace.textsafe import require_name

STREAM_PREFIX = "task:"
SNAPSHOT_NS = "task_snapshots"
LEDGER_NS = "task_ledger"
WORKING_NS = "task_working"
"""kv namespaces holding task-scoped working state (keys of the ledger/working ones: ``<task>/…``)."""

@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """An event validated and encoded ahead of its append (:meth:`TaskEventStore.prepare`):
    the append writes it as is — refused before a tool runs, never after."""

    event: TaskEvent
    new: NewEvent
    registry: EventRegistry


EventLike = TaskEvent | tuple[str, dict[str, Any]] | PreparedEvent


@dataclass(frozen=True, slots=True)
class TaskEventRecord:
    """One stored task event: its 1-based ``version`` in the task, the validated model, when."""

    task: str
    version: int
    type: str
    event: TaskEvent
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class _Folded:
    """A committed folded state and the store position of its last event (0 at version 0)."""

    state: TaskState
    position: int


def stream_of(task: str) -> str:
    """The event stream name of `task`. Raises InvalidNameError for unsafe task ids."""
    return STREAM_PREFIX + require_name(task, field="task id")


class TaskEventStore:
    """Event-sourced task state of one session scope.

    Args:
        store: the persistence protocol (any backend).
        scope: a concrete session scope; every read and write is filtered by it (I10).
        settings: ``snapshot_every_events`` (N).
        registry: event models and reducers (user-defined types).
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        settings: TaskSettings | None = None,
        registry: EventRegistry = DEFAULT_REGISTRY,
    ) -> None:
        self.store = store
        self.scope = scope.require_concrete()
        self.settings = settings or TaskSettings()
        self.registry = registry
        self._folded: dict[str, _Folded] = {}
        self._folded_lock = threading.Lock()
        self._local = threading.local()  # .pending: folds of the open _transaction() block

    # -- writes ----------------------------------------------------------------------------
    def append(
        self,
        task: str,
        events: Sequence[EventLike],
        *,
        expected_version: int | None = None,
        snapshot: bool = False,
    ) -> list[TaskEventRecord]:
        """Validate and append `events` to `task` atomically; returns them with their versions.

        Args:
            expected_version: the task version the caller decided on (0 = new task); None = no
                check. On mismatch nothing is written.
            snapshot: also write a snapshot now (it is written anyway when the append crosses a
                multiple of ``snapshot_every_events``), in the same transaction.
        Raises:
            ConcurrencyError: another writer appended first; re-read the state and retry.
            ValidationError: an event does not fit its model / is of an unregistered type.
        """
        stream = stream_of(task)
        prepared = [self._prepared(e) for e in events]
        if not prepared:
            return []
        models = [p.event for p in prepared]
        new = [p.new for p in prepared]
        every = self.settings.snapshot_every_events
        top_level = not self.store.in_transaction()
        pending: dict[str, _Folded] | None = getattr(self._local, "pending", None)
        after: _Folded | None = None
        known = self._folded.get(task) if top_level and pending is None and not snapshot else None
        if known is not None and (known.state.version + len(new)) // every == known.state.version // every:
            # No snapshot due after the cached state: the append alone (atomic by itself, one
            # commit — the store's own, group-committed with concurrent writers).
            stored = self.store.append_events(self.scope, stream, new, expected_version=expected_version)
            after = self._fold_appended(task, stored, None)
            if after is not None:
                self._remember(task, after)
            else:
                # another writer appended since the cached state (a second process or store
                # object): catch the cache up now — one read of the events it missed — or
                # every later append would find it stale again, and every snapshot due would
                # fold all the events since it under the write lock. Best effort: the append is
                # committed and must be reported as such; a read that fails here fails again
                # at the next recover, which rebuilds the cache from scratch
                try:
                    self.recover(task)
                except Exception:
                    self.forget(task)
            last = stored[-1].version
            if last // every > (last - len(stored)) // every:
                # another writer's events came in between, and this append crossed a multiple
                # of N after all: the snapshot in a transaction of its own, right after it
                self.snapshot(task)
            return self._records(task, stored, new, models)
        # Inside this object's own _transaction() block (the ledger's) every write fails
        # together (the block never goes on after one raised): no savepoint of its own.
        with nullcontext() if pending is not None else self.store.transaction():
            stored = self.store.append_events(self.scope, stream, new, expected_version=expected_version)
            after = self._fold_appended(task, stored, pending)
            last = stored[-1].version
            if snapshot or last // every > (last - len(stored)) // every:
                if after is None:  # read and folded under this transaction's write lock
                    after = _Folded(self.recover(task), stored[-1].position)
                self._write_snapshot(task, after.state)  # the exact state at `last`
        if after is not None:
            if top_level:  # committed now: the next recover folds only what comes after it
                self._remember(task, after)
            elif pending is not None:  # remembered when the _transaction() block commits
                pending[task] = after
        return self._records(task, stored, new, models)

    @staticmethod
    def _records(task: str, stored: Sequence[StoredEvent], new: Sequence[NewEvent],
                 models: Sequence[TaskEvent]) -> list[TaskEventRecord]:
        return [
            TaskEventRecord(task, s.version, s.type, m, n.data, s.created_at)
            for s, n, m in zip(stored, new, models, strict=True)
        ]

    def prepare(self, event: EventLike) -> PreparedEvent:
        """Validate `event` and encode its payload now, once: :meth:`append` then writes it
        without doing either again (e.g. a checkpoint checked before a tool runs and written
        with its outcome).

        Raises:
            ValidationError: the event does not fit its model, or a value is not JSON (an
                arbitrary object, NaN, ±inf) — as the append would.
        """
        p = self._prepared(event)
        if p.new.text is not None:
            return p
        try:  # the slow path (non-ASCII text, deep nesting): the store's own encoder, now
            text = dumps(p.new.data)
        except ValidationError as exc:
            raise ValidationError(f"task event {p.event.type!r}: {exc}") from exc
        return PreparedEvent(p.event, NewEvent(p.new.type, p.new.data, text), self.registry)

    def _prepared(self, event: EventLike) -> PreparedEvent:
        """`event` validated and with its payload (and, when one encode proves it, its stored
        text); a :class:`PreparedEvent` of this registry as is."""
        if isinstance(event, PreparedEvent) and event.registry is self.registry:
            return event
        model = self.registry.coerce(event.event if isinstance(event, PreparedEvent) else event)
        data, text = encoded_payload(model)
        return PreparedEvent(model, NewEvent(model.type, data, text), self.registry)

    def _fold_appended(
        self, task: str, stored: Sequence[StoredEvent], pending: dict[str, _Folded] | None
    ) -> _Folded | None:
        """The exact state after the events just appended, when the state right before them is
        known: a new stream (version 1 follows nothing), or the append went right after the
        cached (or this transaction's pending) fold's own last event. None otherwise."""
        first = stored[0]
        if first.version == 1:
            base = initial_state(task)
        else:
            known = (pending or {}).get(task) or self._folded.get(task)
            if (known is None or first.previous is None or first.previous != known.position
                    or known.state.version != first.version - 1):
                return None
            base = known.state
        # folded from the payloads as stored (what a later read would parse), not the models
        return _Folded(self._fold(base, stored), stored[-1].position)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """``store.transaction()`` for the task's own multi-step writes (the ledger): folds of
        appends made in the block join the cache once it commits at top level (nested in
        someone else's transaction nothing is remembered; a block that raises, nothing). The
        block must not catch an exception of a write inside it and go on (an append in the
        block takes no savepoint of its own) — except a ConcurrencyError of an append with
        `expected_version`, which is raised before anything is written."""
        if self.store.in_transaction() or getattr(self._local, "pending", None) is not None:
            with self.store.transaction():
                yield
            return
        pending: dict[str, _Folded] = {}
        self._local.pending = pending
        try:
            with self.store.transaction():
                yield
        finally:
            self._local.pending = None
        for task, folded in pending.items():
            self._remember(task, folded)

    def update(
        self,
        task: str,
        decide: Callable[[TaskState], Sequence[EventLike]],
        *,
        max_attempts: int = 5,
    ) -> tuple[TaskState, list[TaskEventRecord]]:
        """Read the state, let `decide` pick events, append them at that version; retry on conflict.

        `decide` must be pure (it may run more than once). Returns (state after, records).

        Raises:
            ConcurrencyError: still conflicting after `max_attempts` (heavy contention).
            Whatever `decide` raises (nothing is written then).
        """
        for attempt in range(1, max_attempts + 1):
            state = self.recover(task)
            events = list(decide(state))
            try:
                records = self.append(task, events, expected_version=state.version)
            except ConcurrencyError:
                if attempt == max_attempts:
                    raise
                continue
            for r in records:
                state = apply(state, r.event, self.registry)
            return state, records
        raise AssertionError("unreachable")  # pragma: no cover

    def snapshot(self, task: str) -> int:
        """Write a snapshot of the current state now; returns its version (0 for a new task)."""
        with self.store.transaction():
            state = self.recover(task)
            if state.version:
                self._write_snapshot(task, state)
        return state.version

    def _write_snapshot(self, task: str, state: TaskState) -> None:
        self.store.kv_put(self.scope, SNAPSHOT_NS, task, {"version": state.version, "state": state.to_json()})

    # -- reads -----------------------------------------------------------------------------
    def version(self, task: str) -> int:
        """Current version of `task` (0 = no events)."""
        return self.store.stream_version(self.scope, stream_of(task))

    def exists(self, task: str) -> bool:
        return self.version(task) > 0

    def read(self, task: str, from_version: int = 1, to_version: int | None = None) -> list[TaskEventRecord]:
        """Events with from_version ≤ version ≤ to_version, oldest first."""
        require_int("from_version", from_version)
        rows = self.store.read_events(
            self.scope, stream_of(task), from_version=from_version, to_version=to_version
        )
        return [
            TaskEventRecord(task, r.version, r.type, self.registry.parse_stored(r.type, r.data), r.data, r.created_at)
            for r in rows
        ]

    def history(self, task: str) -> list[TaskEventRecord]:
        """Every event of `task`, oldest first. Raises NotFoundError for a task with no events."""
        records = self.read(task)
        if not records:
            raise NotFoundError("task", task, self.scope)
        return records

    def latest_snapshot(self, task: str) -> TaskState | None:
        """The stored snapshot (any version ≤ the log's), or None — also when it no longer fits
        the current TaskState model (written by another version): the log is the source of
        truth, so recovery then simply replays from event 1."""
        raw = self.store.kv_get(self.scope, SNAPSHOT_NS, require_name(task, field="task id"))
        if raw is None:
            return None
        try:
            return TaskState.model_validate(raw["state"])
        except (PydanticValidationError, KeyError, TypeError):
            return None

    def recover(self, task: str, *, use_snapshot: bool = True) -> TaskState:
        """The exact current state: latest snapshot (if any) + replay of every later event.

        A task with no events recovers to its initial state (version 0). With `use_snapshot`
        the in-process cache is used (see the module docstring): unchanged stream → one
        one-row query and no fold; new events → only they are folded. ``use_snapshot=False``
        replays from event 1 and touches no cache (the reference the cache is tested against).
        """
        if not use_snapshot:
            return self._fold(initial_state(task), self._events(task, 1))
        cacheable = not self.store.in_transaction()
        cached = self._folded.get(require_name(task, field="task id"))
        if cached is not None:
            head = cached.state.version
            # the common case, nothing changed: one indexed lookup of the stream's last event
            # (no row read, parsed or folded)
            if self.store.stream_head(self.scope, stream_of(task)) == (
                    (head, cached.position) if head else (0, None)):
                return cached.state
            rows = self._events(task, max(head, 1))
            if head == 0 or (rows and rows[0].version == head and rows[0].position == cached.position):
                new = rows[1:] if head else rows
                state = self._fold(cached.state, new)
                if new and cacheable:
                    self._remember(task, _Folded(state, new[-1].position))
                return state
        return self._recover_cold(task, cacheable)

    def _recover_cold(self, task: str, cacheable: bool) -> TaskState:
        """Snapshot + replay, reading the snapshot's own last event too (its position keys the
        cache); a snapshot the log does not bear out is ignored (the log is the truth)."""
        snap = self.latest_snapshot(task)
        if snap is not None and snap.version > 0:
            rows = self._events(task, snap.version)
            if rows and rows[0].version == snap.version:
                state = self._fold(snap, rows[1:])
                if cacheable:
                    self._remember(task, _Folded(state, rows[-1].position))
                return state
        rows = self._events(task, 1)
        state = self._fold(initial_state(task), rows)
        if cacheable:
            self._remember(task, _Folded(state, rows[-1].position if rows else 0))
        return state

    def _events(self, task: str, from_version: int) -> list[StoredEvent]:
        return self.store.read_events(self.scope, stream_of(task), from_version=from_version)

    def _fold(self, state: TaskState, rows: Sequence[StoredEvent]) -> TaskState:
        for r in rows:
            state = apply(state, self.registry.parse_stored(r.type, r.data), self.registry)
        return state

    def _remember(self, task: str, folded: _Folded) -> None:
        with self._folded_lock:
            self._folded[task] = folded

    def forget(self, task: str | None = None) -> None:
        """Drop the cached folded state of `task` (None = every task); the next ``recover``
        rebuilds it from the snapshot and the log. Never needed for correctness."""
        with self._folded_lock:
            if task is None:
                self._folded.clear()
            else:
                self._folded.pop(task, None)

    def list_tasks(self) -> list[tuple[str, int]]:
        """(task id, version) of every task in this scope."""
        return [
            (stream[len(STREAM_PREFIX):], version)
            for _, stream, version in self.store.list_streams(self.scope, prefix=STREAM_PREFIX)
        ]

    # -- end of task -----------------------------------------------------------------------
    def clear_task(self, task: str, *, drop_events: bool = False) -> dict[str, int]:
        """Remove task-scoped working state (snapshot, ledger rows, working kv) in one transaction.

        The event log — the durable record of what happened — and long-term memory stay unless
        ``drop_events=True`` (seed 004 checklist 7 and 10: session memory is cleared at task end,
        long-term memory is kept). Returns counts of what was removed.
        """
        stream = stream_of(task)
        removed = {"snapshots": 0, "ledger_rows": 0, "working_rows": 0, "events": 0}
        with self.store.transaction():
            removed["snapshots"] = int(self.store.kv_delete(self.scope, SNAPSHOT_NS, task))
            for ns, field in ((LEDGER_NS, "ledger_rows"), (WORKING_NS, "working_rows")):
                for _, key, _ in self.store.kv_list(self.scope, ns, prefix=f"{task}/"):
                    removed[field] += int(self.store.kv_delete(self.scope, ns, key))
            if drop_events:
                removed["events"] = self.store.delete_stream(self.scope, stream)
        return removed

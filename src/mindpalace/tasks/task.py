"""The task handle: checkpoints, resume, exactly-once tool calls and constraints of one task.

``Tasks`` is a session's entry point (``session.tasks``); ``Task`` binds one task id. This is the
seed-004 agent loop's API: ``start_step`` → tool calls through the ledger → ``finish_step`` /
``checkpoint`` (atomic, one append) → after a crash ``resume()`` returns the exact state and the
step to run next.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mindpalace.errors import InvalidNameError, NotFoundError, OutcomeUnknownError, ValidationError
from mindpalace.scope import ANY, Scope
from mindpalace.settings import TaskSettings
from mindpalace.store import Store
from mindpalace.tasks.constraints import CallChecks, Constraints, render_feedback, render_state
from mindpalace.tasks.events import (
    DEFAULT_REGISTRY,
    EventRegistry,
)
from mindpalace.tasks.eventstore import EventLike, TaskEventRecord, TaskEventStore, stream_of
from mindpalace.tasks.ledger import UNSETTLED, Ledger, LedgerEntry, ToolCall
from mindpalace.tasks.state import TaskState
from mindpalace.textsafe import clean_json, require_name


@dataclass(frozen=True, slots=True)
class NextStep:
    """The step to run after a resume. ``retry`` = it was started and never finished."""

    index: int
    name: str
    retry: bool


@dataclass(frozen=True, slots=True)
class Resumption:
    """What ``resume`` found: the exact state, the next step (None when the plan is done or
    there is no plan), the ledger keys whose outcome is unknown (never re-run blindly) and those
    of calls running right now in a live owner (their outcome is not known *yet*; see
    :mod:`mindpalace.tasks.owner`) — non-idempotent calls only."""

    state: TaskState
    next_step: NextStep | None
    unknown_calls: list[str]
    running_calls: list[str] = field(default_factory=list)


class Task:
    """One task of a session (event-sourced; see :class:`TaskEventStore`)."""

    def __init__(self, events: TaskEventStore, ledger: Ledger, task_id: str) -> None:
        self.id = require_name(task_id, field="task id")
        self.events = events
        self.ledger = ledger

    @cached_property
    def constraints(self) -> Constraints:
        """Protected constraints, guards and user corrections of this task."""
        return Constraints(self.events, self.id)

    # -- reads -----------------------------------------------------------------------------
    def state(self) -> TaskState:
        """The exact current state (snapshot + replay)."""
        return self.events.recover(self.id)

    @property
    def version(self) -> int:
        return self.events.version(self.id)

    def history(self) -> list[TaskEventRecord]:
        return self.events.history(self.id)

    def read(self, from_version: int = 1, to_version: int | None = None) -> list[TaskEventRecord]:
        """This task's events with from_version ≤ version ≤ to_version, oldest first."""
        return self.events.read(self.id, from_version, to_version)

    def ledger_entries(self) -> list[LedgerEntry]:
        """This task's idempotency-ledger rows (one per keyed tool call), oldest first."""
        return self.ledger.entries(self.id)

    def resolve(self, key: str, *, result: Any = None, error: str | None = None, force: bool = False) -> LedgerEntry:
        """Settle a tool call whose outcome is unknown, after checking the external system:
        `result` if it happened, `error` if it did not (the call may then run again). `force`:
        the call's owner is on another host and you know it is gone (see :meth:`Ledger.resolve`).

        Raises:
            NotFoundError: no ledger row `key`. ValidationError: the row is not ``started``.
            ToolCallInFlightError: the call is running now; nothing is recorded.
        """
        return self.ledger.resolve(self.id, key, result=result, error=error, force=force)

    def resume(self) -> Resumption:
        """Recover the state and decide where to continue.

        The next step is the started-but-unfinished one (``retry=True``), else ``plan[state.step]``.
        """
        state = self.state()
        nxt: NextStep | None = None
        if state.current is not None:
            nxt = NextStep(state.current.index, state.current.name, True)
        elif state.status != "completed" and state.step < len(state.plan):
            nxt = NextStep(state.step, state.plan[state.step], False)
        unknown: list[str] = []
        running: list[str] = []
        for k, f in state.in_flight.items():
            if not f.idempotent:
                (running if f.running() else unknown).append(k)
        return Resumption(state, nxt, unknown, running)

    # -- writes ----------------------------------------------------------------------------
    def record(self, *events: EventLike, expected_version: int | None = None) -> list[TaskEventRecord]:
        """Append events (built-in or registered user types) atomically."""
        return self.events.append(self.id, events, expected_version=expected_version)

    def plan(self, steps: Sequence[str], *, plan_id: str | None = None) -> int:
        """Record the plan (ordered step names); returns the task version."""
        [r] = self.record(("plan_created", {"plan_id": plan_id or self.id, "steps": list(steps)}))
        return r.version

    def start_step(self, index: int, name: str = "") -> int:
        """Record ``step_started``; returns the task version."""
        [r] = self.record(("step_started", {"index": index, "name": name}))
        return r.version

    def finish_step(
        self,
        index: int,
        *,
        outcome: str = "success",
        output: Any = None,
        artifacts: dict[str, Any] | None = None,
        pending: list[str] | None = None,
    ) -> int:
        """Record ``step_finished`` + its checkpoint in ONE atomic append; returns the version.

        Raises:
            ValidationError: a negative index, an unknown outcome (success / failure / skipped),
                artifacts that are not JSON.
        """
        events: list[EventLike] = [("step_finished", {"index": index, "outcome": outcome, "output": clean_json(output)})]
        if artifacts or pending is not None:
            events.append(("checkpoint", {"artifacts": clean_json(artifacts or {}), "pending": pending}))
        return self.record(*events)[-1].version

    def checkpoint(
        self,
        *,
        step: int | None = None,
        artifacts: dict[str, Any] | None = None,
        pending: list[str] | None = None,
        snapshot: bool = False,
    ) -> int:
        """Persist working variables atomically (one event; a snapshot in the same transaction
        when due or when `snapshot`); cheap enough to call after every step. Returns the version.

        Raises:
            ValidationError: `step` is not a non-negative int (``True`` and ``"3"`` are refused,
                not read as 1 and 3), `artifacts` is not JSON, `pending` is not a list of text.
        """
        [r] = self.events.append(
            self.id,
            [("checkpoint", {"step": step, "artifacts": clean_json(artifacts or {}), "pending": pending})],
            snapshot=snapshot,
        )
        return r.version

    def error(self, message: str, *, code: str = "error", retryable: bool = False, tool: str | None = None) -> int:
        [r] = self.record(("error_occurred", {"message": message, "code": code, "retryable": retryable, "tool": tool}))
        return r.version

    def complete(self, summary: str = "") -> int:
        [r] = self.record(("task_completed", {"summary": summary}))
        return r.version

    def clear(self, *, drop_events: bool = False) -> dict[str, int]:
        """End of task: drop working state (see :meth:`TaskEventStore.clear_task`).

        Raises:
            ToolCallInFlightError: a non-idempotent call of the task is running now.
            OutcomeUnknownError: a non-idempotent call of the task is started or unknown —
                dropping its ledger row would let it run again (I8); settle it first with
                :meth:`resolve` or a reconcile hook. Nothing is removed.
        """
        with self.events.store.transaction():
            for entry in self.ledger.entries(self.id):
                if entry.status in UNSETTLED and not entry.idempotent:
                    now = self.ledger._unless_running(self.id, entry)
                    if now is not None and now.status in UNSETTLED:
                        raise OutcomeUnknownError(self.id, now.key, now.tool, now.attempt, now.error or "")
            return self.events.clear_task(self.id, drop_events=drop_events)

    def tool_call(
        self, name: str, args: dict[str, Any], *, idempotent: bool = False, key: str | None = None
    ) -> ToolCall:
        """An exactly-once tool call: guards run before it, its result is screened after.

        Example:
            >>> with task.tool_call("book_ticket", {"place": "Senso-ji"}) as call:  # doctest: +SKIP
            ...     result = call.result if call.done else call.run(book_ticket)

        Raises (from ``__enter__`` / ``run``):
            ToolCallInFlightError: the same call is running now in another thread or process.
            OutcomeUnknownError: an earlier attempt of this non-idempotent call never finished.
            ConstraintError: a guard blocked the call (recorded; the tool did not run).
        """
        checks = CallChecks(self.constraints)  # guards and screening share one fold
        return ToolCall(
            self.ledger, self.id, require_name(name, field="tool name"), clean_json(args),
            idempotent=idempotent, key=key,
            before_run=checks.enforce, after_run=checks.screen,
        )


class Tasks:
    """A session's tasks: ``tasks("trip")`` → :class:`Task`; ``tasks.current`` is the task named
    like the session. One shared event store and ledger (reconcile hooks, safe tools).

    Args:
        store: the store protocol.
        scope: the session scope; every read and write is filtered by it (I10).
        settings: ``[tasks]`` (snapshot interval, corrections shown in a prompt).
        registry: event models and reducers; default the frozen built-in registry.
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        settings: TaskSettings | None = None,
        registry: EventRegistry | None = None,
    ) -> None:
        self.events = TaskEventStore(store, scope, settings, registry or DEFAULT_REGISTRY)
        self.ledger = Ledger(self.events)
        self.settings = self.events.settings
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()
        self._current: Task | None = None

    def __call__(self, task_id: str) -> Task:
        """The task `task_id` of this session (created by its first event).

        Raises:
            InvalidNameError: `task_id` is not a task name (letters, digits, ``_ . : @ + -``).
        """
        require_name(task_id, field="task id")
        with self._lock:
            if task_id not in self._tasks:
                self._tasks[task_id] = Task(self.events, self.ledger, task_id)
            return self._tasks[task_id]

    @property
    def current(self) -> Task:
        """The session's default task: its id is the session id, or ``session-<sha1 prefix>``
        when the session id is not a valid task name (spaces, slashes …)."""
        current = self._current  # looked up once: every checkpoint of a session goes here
        if current is None:
            current = self._current = self(default_task_id(str(self.events.scope.session)))
        return current

    def list(self) -> list[tuple[str, int]]:
        """(task id, version) of the session's tasks."""
        return self.events.list_tasks()

    def prompt_blocks(self) -> tuple[str | None, str | None]:
        """(user corrections, protected constraints) of the current task as prompt text, from
        one recovery of its state; None for a part it does not have (seed 004, I7)."""
        state = self.current.state()
        return render_feedback(state, self.settings.corrections_in_prompt), render_state(state)


def default_task_id(session_id: str) -> str:
    """A valid task id for a session: the id itself when it passes ``require_name``."""
    try:
        return require_name(session_id, field="task id")
    except InvalidNameError:
        return "session-" + hashlib.sha1(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def find_task(
    store: Store,
    within: Scope,
    task_id: str,
    *,
    settings: TaskSettings | None = None,
    registry: EventRegistry | None = None,
) -> Task:
    """The one task named `task_id` among the scopes `within` covers (ANY fields widen it).

    A `task_id` that is not a valid task name (e.g. a Chinese session id) is read as a session
    id: that session's default task (``Session.task``), stored under :func:`default_task_id`.

    Raises:
        NotFoundError: no scope under `within` has the task.
        ValidationError: several scopes hold one; the message lists them so the caller can
            narrow `within` (session, user, agent).
    """
    if default_task_id(task_id) != task_id:
        if within.session is ANY:
            within = within.with_(session=task_id)
        task_id = default_task_id(task_id)
    stream = stream_of(task_id)
    found = [sc for sc, name, _ in store.list_streams(within, prefix=stream) if name == stream]
    if not found:
        raise NotFoundError("task", task_id, within)
    if len(found) > 1:
        where = "; ".join(f"session {s.session!r}, user {s.user!r}, agent {s.agent!r}" for s in found)
        raise ValidationError(f"task {task_id!r} exists in {len(found)} scopes ({where}); "
                              "name the session, user or agent")
    return Tasks(store, found[0], settings=settings, registry=registry)(task_id)

"""The asyncio twin of the facade: :class:`AsyncMemory` / :class:`AsyncSession` (DESIGN.md §2).

Servers (REST, MCP) and async agent loops use these; they hold no logic of their own. Every
method runs the same-named call of the sync facade (:class:`~mindpalace.memory.Memory`,
:class:`~mindpalace.memory.Session` and their components) in a worker thread, through one
bounded :class:`anyio.CapacityLimiter` per workspace handle — so the event loop never blocks on
SQLite, an embedder or a summary model, and at most ``max_threads`` calls touch the store at
once. The same names, arguments, return values and errors as the sync calls (the httpx
``Client`` / ``AsyncClient`` convention, STYLE.md §2).

Concurrency: many coroutines may use one workspace and one session at once. The SQLite store
gives every worker thread its own connection and serialises writers with ``BEGIN IMMEDIATE``
and bounded busy retries; components re-read their state inside the write transaction and
hold a lock per handle (I6). What this module adds is that one sync :class:`Session` is shared
by every :class:`AsyncSession` of the same scope, and that its lazily built components are
built once, under a lock, before the first call (``functools.cached_property`` stopped locking
in Python 3.12).

Example:
    >>> async with await AsyncMemory.open("./ws") as mem:          # doctest: +SKIP
    ...     s = mem.session("trip-42", user="u1", agent="planner")
    ...     await s.add_message({"role": "user", "content": "5 days in Tokyo"})
    ...     await s.remember("user:city", "Tokyo", importance=0.9)
    ...     hits = await s.recall("where does the user travel", k=5)
    ...     built = await s.prepare(budget_tokens=32_000)
"""

from __future__ import annotations

import builtins
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from mindpalace.blocks import Message, ToolSchema
from mindpalace.checks import require_session_id
from mindpalace.context import BuiltContext
from mindpalace.errors import ValidationError
from mindpalace.facts import Fact, FactMemory, RecallHit, Remembered
from mindpalace.memory import Memory, Session, SessionStatus, SettingsOverride, WorkspaceStats
from mindpalace.scope import Scope
from mindpalace.session.autocompact import CompactOutcome
from mindpalace.session.messages import MessageLog, StoredMessage
from mindpalace.steps import ReadResult, StepMemory
from mindpalace.steps.records import Record
from mindpalace.steps.tiers import TierState
from mindpalace.tasks import Constraints, Task, Tasks
from mindpalace.tasks.constraints import GuardViolation
from mindpalace.tasks.eventstore import EventLike, TaskEventRecord
from mindpalace.tasks.ledger import LedgerEntry
from mindpalace.tasks.state import TaskState
from mindpalace.tasks.task import Resumption

__all__ = [
    "DEFAULT_MAX_THREADS",
    "AsyncConstraints",
    "AsyncFacts",
    "AsyncMemory",
    "AsyncMessages",
    "AsyncSession",
    "AsyncSteps",
    "AsyncTask",
    "AsyncTasks",
]

T = TypeVar("T")

DEFAULT_MAX_THREADS: Final = 16  # concurrent store calls per workspace; SQLite has one writer anyway
SESSION_CACHE_SIZE: Final = 1_024  # sync sessions kept warm per handle (LRU; each holds a few objects)

# Components a sync Session builds lazily: built once under a lock before its first call.
_SESSION_PARTS: Final = ("messages", "facts", "consolidator", "steps", "refs", "tasks",
                         "context_builder")
# Shared services of a Memory (the LLM is left lazy: reading never builds a model client).
_MEMORY_PARTS: Final = ("tokens", "summarizer", "embedder", "retriever", "history")


class _Runner:
    """Runs sync calls in worker threads under one capacity limiter (shared by a handle)."""

    def __init__(self, max_threads: int) -> None:
        if not isinstance(max_threads, int) or isinstance(max_threads, bool) or max_threads < 1:
            raise ValidationError(f"max_threads must be an int ≥ 1, got {max_threads!r}")
        self.limiter = anyio.CapacityLimiter(max_threads)

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        # Cancellation waits for the thread (abandon_on_cancel=False): a write either happened
        # or did not, never "maybe, still running after the caller left".
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self.limiter)


class AsyncMemory:
    """One workspace, async: :class:`~mindpalace.memory.Memory` with awaitable calls.

    Args:
        memory: the sync handle this one runs on (its store, settings and tenant).
        max_threads: most calls running at once in worker threads (≥ 1).

    Raises:
        ValidationError: `max_threads` is not an int ≥ 1.
    """

    def __init__(self, memory: Memory, *, max_threads: int = DEFAULT_MAX_THREADS) -> None:
        self.memory = memory
        self._run = _Runner(max_threads)
        self._sessions: OrderedDict[Scope, Session] = OrderedDict()
        self._tenants: dict[str, AsyncMemory] = {}
        self._lock = threading.Lock()
        self._warm = False
        self._root = True  # closes the store on aclose (a for_tenant handle does not)

    @classmethod
    async def open(
        cls,
        location: str | os.PathLike[str],
        *,
        tenant: str = "default",
        create: bool = True,
        max_threads: int = DEFAULT_MAX_THREADS,
        **sections: SettingsOverride | None,
    ) -> AsyncMemory:
        """Open (by default, create) a workspace in a worker thread; the arguments and errors
        of :meth:`Memory.open` (``sections`` = its per-section overrides, e.g.
        ``steps={"budget_tokens": 500}``), plus `max_threads`."""
        runner = _Runner(max_threads)
        memory = await runner(Memory.open, location, tenant=tenant, create=create, **sections)
        return cls(memory, max_threads=max_threads)

    @property
    def tenant(self) -> str:
        return self.memory.tenant

    def for_tenant(self, tenant: str) -> AsyncMemory:
        """The handle of `tenant` on the same workspace: same store, services and thread
        limiter (:meth:`Memory.for_tenant`); one per tenant, kept. Closing it closes nothing —
        close this handle. Cheap once this handle's services are built (after its first
        awaited call); before that, the first call here builds them in the calling thread.

        Raises:
            ValidationError: `tenant` is not a valid scope field.
        """
        if tenant == self.tenant:
            return self
        with self._lock:
            handle = self._tenants.get(tenant)
            if handle is None:
                handle = AsyncMemory.__new__(AsyncMemory)
                handle.memory = self.memory.for_tenant(tenant)
                handle._run = self._run
                handle._sessions = OrderedDict()
                handle._tenants = {}
                handle._lock = threading.Lock()
                handle._warm = True  # Memory.for_tenant shared every built service
                handle._root = False
                self._tenants[tenant] = handle
            return handle

    def scope(self, *, user: str = "", agent: str = "", session: str = "") -> Scope:
        """A concrete scope in this handle's tenant (no I/O)."""
        return self.memory.scope(user=user, agent=agent, session=session)

    def session(self, session_id: str, *, user: str = "", agent: str = "") -> AsyncSession:
        """The session `session_id` of (`user`, `agent`) — no I/O; created on first write.

        Raises:
            ValidationError: `session_id` is empty or blank (the user-level scope, not a
                session), or a scope field is not storable text or over 200 characters.
        """
        scope = self.scope(user=user, agent=agent, session=require_session_id(session_id)).require_concrete()
        return AsyncSession(self, self._sync_session(scope))

    def _sync_session(self, scope: Scope) -> Session:
        with self._lock:
            sync = self._sessions.get(scope)
            if sync is None:
                sync = self._sessions[scope] = Session(self.memory, scope)
                if len(self._sessions) > SESSION_CACHE_SIZE:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(scope)
            return sync

    def _ready(self) -> None:
        """Build the shared services once (in a worker thread, under the handle's lock)."""
        if self._warm:
            return
        with self._lock:
            if not self._warm:
                for name in _MEMORY_PARTS:
                    getattr(self.memory, name)
                self._warm = True

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run any sync call (e.g. one on ``self.memory``) in the handle's worker threads,
        under its limiter: the escape hatch for what has no async twin here."""
        def call() -> T:
            self._ready()
            return fn(*args, **kwargs)
        return await self._run(call)

    async def stats(self) -> WorkspaceStats:
        """:meth:`Memory.stats`."""
        return await self.run(self.memory.stats)

    async def compact_idle(self) -> list[CompactOutcome]:
        """:meth:`Memory.compact_idle`."""
        return await self.run(self.memory.compact_idle)

    async def find_task(
        self, task_id: str, *, session: str | None = None, user: str | None = None,
        agent: str | None = None,
    ) -> AsyncTask:
        """:meth:`Memory.find_task` (raises NotFoundError / ValidationError the same way)."""
        task = await self.run(self.memory.find_task, task_id, session=session, user=user,
                              agent=agent)
        return AsyncTask(self, task)

    async def aclose(self) -> None:
        """Close the store and the LLM client (waits for no running call: close last); a
        :meth:`for_tenant` handle closes nothing."""
        with self._lock:
            self._sessions.clear()
            self._tenants.clear()
        if self._root:
            await self._run(self.memory.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSession:
    """One agent conversation, async: :class:`~mindpalace.memory.Session` with awaitable calls.

    Views: :attr:`messages`, :attr:`facts`, :attr:`steps`, :attr:`tasks` (:attr:`task`,
    :attr:`constraints`, the ledger through :meth:`AsyncTask.ledger_entries`). Every method
    has the arguments, return value and errors of the sync method of the same name.
    """

    def __init__(self, owner: AsyncMemory, sync: Session) -> None:
        self._owner = owner
        self.sync = sync
        self._lock = threading.Lock()
        self._warm = False

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def scope(self) -> Scope:
        return self.sync.scope

    async def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        def call() -> T:
            self._ready()
            return fn(*args, **kwargs)
        return await self._owner.run(call)

    def _ready(self) -> None:
        """Build the session's components once (worker thread, session lock)."""
        if self._warm:
            return
        with self._lock:
            if not self._warm:
                for name in _SESSION_PARTS:
                    getattr(self.sync, name)
                self._warm = True

    async def run(self, fn: Callable[[Session], T]) -> T:
        """``fn(session)`` in a worker thread — for sync calls without a twin here (e.g. a
        :meth:`Session.tool_call` block, :meth:`Session.lease`)."""
        return await self._call(fn, self.sync)

    # -- messages, facts, recall -------------------------------------------------------------
    @property
    def messages(self) -> AsyncMessages:
        return AsyncMessages(self)

    @property
    def facts(self) -> AsyncFacts:
        return AsyncFacts(self)

    async def add_message(self, message: Message, *, timestamp: datetime | None = None) -> int:
        """:meth:`Session.add_message`: append one OpenAI-format message; its 1-based index."""
        return await self._call(self.sync.add_message, message, timestamp=timestamp)

    async def remember(
        self, key: str, content: str, *, importance: float = 0.5, source: str = ""
    ) -> Remembered:
        """:meth:`Session.remember` (``entity:attribute`` = content)."""
        return await self._call(self.sync.remember, key, content, importance=importance,
                                source=source)

    async def forget(self, key: str) -> bool:
        """:meth:`Session.forget`: True when a current value was forgotten."""
        return await self._call(self.sync.forget, key)

    async def recall(self, query: str, k: int | None = None) -> list[RecallHit]:
        """:meth:`Session.recall`: working memory first, then hybrid search (scoped)."""
        return await self._call(self.sync.recall, query, k)

    async def read_records(self, names: Iterable[str]) -> ReadResult:
        """:meth:`Session.read_records` (read_files protocol; unknown names in ``.missing``)."""
        return await self._call(self.sync.read_records, list(names))

    # -- the prompt --------------------------------------------------------------------------
    async def context(
        self,
        budget_tokens: int | None = None,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        messages: Sequence[Message] | None = None,
        query: str | Sequence[str] | None = None,
    ) -> BuiltContext:
        """:meth:`Session.context`: the prompt, read-only."""
        return await self._call(self.sync.context, budget_tokens, system_prompt=system_prompt,
                                tools=tools, messages=messages, query=query)

    async def prepare(
        self,
        budget_tokens: int | None = None,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        query: str | Sequence[str] | None = None,
    ) -> BuiltContext:
        """:meth:`Session.prepare`: make room (consolidate), then build — the turn call."""
        return await self._call(self.sync.prepare, budget_tokens, system_prompt=system_prompt,
                                tools=tools, query=query)

    async def exists(self) -> bool:
        """:meth:`Session.exists` (read-only)."""
        return await self._call(self.sync.exists)

    async def status(self, *, live_messages: int = 10) -> SessionStatus:
        """:meth:`Session.status` (read-only)."""
        return await self._call(self.sync.status, live_messages=live_messages)

    async def compact(self) -> CompactOutcome:
        """:meth:`Session.compact`."""
        return await self._call(self.sync.compact)

    # -- steps and tasks ---------------------------------------------------------------------
    @property
    def steps(self) -> AsyncSteps:
        return AsyncSteps(self)

    @property
    def tasks(self) -> AsyncTasks:
        return AsyncTasks(self)

    @property
    def task(self) -> AsyncTask:
        """The session's default task (id = session id)."""
        return AsyncTask(self, None)

    @property
    def constraints(self) -> AsyncConstraints:
        """Protected constraints of the default task."""
        return AsyncConstraints(self.task)

    async def checkpoint(
        self,
        *,
        step: int | None = None,
        artifacts: dict[str, Any] | None = None,
        pending: list[str] | None = None,
        snapshot: bool = False,
    ) -> int:
        """:meth:`Session.checkpoint` of the default task; its version."""
        return await self._call(self.sync.checkpoint, step=step, artifacts=artifacts,
                                pending=pending, snapshot=snapshot)

    async def clear_task(self, task_id: str | None = None) -> dict[str, int]:
        """:meth:`Session.clear_task`."""
        return await self._call(self.sync.clear_task, task_id)

    def __repr__(self) -> str:
        return f"AsyncSession({self.scope})"


class _SessionView:
    """Base of a session's views: calls run through the session (components warm)."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await self._session._call(fn, *args, **kwargs)


class AsyncMessages(_SessionView):
    """:class:`~mindpalace.session.messages.MessageLog`, async."""

    @property
    def _log(self) -> MessageLog:
        return self._session.sync.messages

    async def add(self, message: Message, *, timestamp: datetime | None = None) -> int:
        return await self._call(lambda: self._log.add(message, timestamp=timestamp))

    async def list(
        self, *, from_index: int = 1, to_index: int | None = None
    ) -> builtins.list[StoredMessage]:
        return await self._call(lambda: self._log.list(from_index=from_index, to_index=to_index))

    async def count(self) -> int:
        return await self._call(lambda: self._log.count())


class AsyncFacts(_SessionView):
    """:class:`~mindpalace.facts.FactMemory` (working + long-term facts), async."""

    @property
    def _facts(self) -> FactMemory:
        return self._session.sync.facts

    async def remember(
        self, key: str, content: str, *, importance: float = 0.5, source: str = ""
    ) -> Remembered:
        return await self._call(lambda: self._facts.remember(key, content, importance=importance,
                                                             source=source))

    async def get(self, key: str) -> Fact | None:
        """The current value (working first, then long-term; a long-term hit is promoted)."""
        return await self._call(lambda: self._facts.get(key))

    async def peek(self, key: str) -> Fact | None:
        """The current value without promoting it."""
        return await self._call(lambda: self._facts.peek(key))

    async def forget(self, key: str) -> bool:
        return await self._call(lambda: self._facts.forget(key))

    async def list(self) -> builtins.list[Fact]:
        """Current long-term facts of the user and agent."""
        return await self._call(lambda: self._facts.list())

    async def working_items(self) -> builtins.list[Fact]:
        return await self._call(lambda: self._facts.working_items())

    async def history(self, key: str) -> builtins.list[Fact]:
        """Every stored version of `key`, oldest first."""
        return await self._call(lambda: self._facts.history(key))


class AsyncSteps(_SessionView):
    """:class:`~mindpalace.steps.StepMemory` (tiers, records, checkpoint), async."""

    @property
    def _steps(self) -> StepMemory:
        return self._session.sync.steps

    async def begin(self, goal: str, *, action: str = "") -> int:
        """A pending step line; its step number."""
        return await self._call(lambda: self._steps.begin(goal, action=action))

    async def evaluate(
        self, step: int, evaluation: str, *, analysis: str = "", tool_outputs: Sequence[str] = ()
    ) -> Record:
        """Evaluate a pending step (→ recent; record ``step_N`` saved)."""
        return await self._call(lambda: self._steps.evaluate(
            step, evaluation, analysis=analysis, tool_outputs=tool_outputs))

    async def state(self) -> TierState:
        return await self._call(lambda: self._steps.state)

    async def records(self, *, type: str | None = None, limit: int | None = None) -> list[Record]:
        """Stored records of the session (``type`` = step / info / snapshot)."""
        return await self._call(lambda: self._steps.records.list(type=type, limit=limit))


class AsyncTasks(_SessionView):
    """:class:`~mindpalace.tasks.Tasks`, async: ``tasks("trip")`` → :class:`AsyncTask`."""

    @property
    def _tasks(self) -> Tasks:
        return self._session.sync.tasks

    def __call__(self, task_id: str) -> AsyncTask:
        return AsyncTask(self._session, task_id)

    @property
    def current(self) -> AsyncTask:
        return AsyncTask(self._session, None)

    async def list(self) -> builtins.list[tuple[str, int]]:
        """(task id, version) of the session's tasks."""
        return await self._call(lambda: self._tasks.list())


class AsyncTask:
    """:class:`~mindpalace.tasks.Task` (events, checkpoint, ledger), async.

    Args:
        owner: the session (or, for :meth:`AsyncMemory.find_task`, the workspace handle).
        task: a task id of the session (None = its default task), or a found :class:`Task`.
    """

    def __init__(self, owner: AsyncSession | AsyncMemory, task: str | Task | None) -> None:
        self._owner = owner
        self._task = task

    def _resolve(self) -> Task:
        if isinstance(self._task, Task):
            return self._task
        assert isinstance(self._owner, AsyncSession)  # an id needs a session to name it in
        tasks = self._owner.sync.tasks
        return tasks.current if self._task is None else tasks(self._task)

    async def _call(self, fn: Callable[[Task], T]) -> T:
        if isinstance(self._owner, AsyncSession):
            return await self._owner._call(lambda: fn(self._resolve()))
        return await self._owner.run(lambda: fn(self._resolve()))

    @property
    def constraints(self) -> AsyncConstraints:
        return AsyncConstraints(self)

    async def id(self) -> str:
        """The task id (resolving the default task's name may need the session)."""
        return await self._call(lambda t: t.id)

    async def state(self) -> TaskState:
        """The exact current state (snapshot + replay)."""
        return await self._call(lambda t: t.state())

    async def version(self) -> int:
        return await self._call(lambda t: t.version)

    async def history(self) -> list[TaskEventRecord]:
        return await self._call(lambda t: t.history())

    async def read(self, from_version: int = 1, to_version: int | None = None) -> list[TaskEventRecord]:
        return await self._call(lambda t: t.read(from_version, to_version))

    async def ledger_entries(self) -> list[LedgerEntry]:
        """The task's idempotency-ledger rows, oldest first."""
        return await self._call(lambda t: t.ledger_entries())

    async def resolve(self, key: str, *, result: Any = None, error: str | None = None) -> LedgerEntry:
        return await self._call(lambda t: t.resolve(key, result=result, error=error))

    async def resume(self) -> Resumption:
        return await self._call(lambda t: t.resume())

    async def record(self, *events: EventLike, expected_version: int | None = None) -> list[TaskEventRecord]:
        return await self._call(lambda t: t.record(*events, expected_version=expected_version))

    async def plan(self, steps: Sequence[str], *, plan_id: str | None = None) -> int:
        return await self._call(lambda t: t.plan(steps, plan_id=plan_id))

    async def start_step(self, index: int, name: str = "") -> int:
        return await self._call(lambda t: t.start_step(index, name))

    async def finish_step(
        self, index: int, *, outcome: str = "success", output: Any = None,
        artifacts: dict[str, Any] | None = None, pending: list[str] | None = None,
    ) -> int:
        return await self._call(lambda t: t.finish_step(
            index, outcome=outcome, output=output, artifacts=artifacts, pending=pending))

    async def checkpoint(
        self, *, step: int | None = None, artifacts: dict[str, Any] | None = None,
        pending: list[str] | None = None, snapshot: bool = False,
    ) -> int:
        return await self._call(lambda t: t.checkpoint(step=step, artifacts=artifacts,
                                                       pending=pending, snapshot=snapshot))

    async def error(self, message: str, *, code: str = "error", retryable: bool = False,
                    tool: str | None = None) -> int:
        return await self._call(lambda t: t.error(message, code=code, retryable=retryable, tool=tool))

    async def complete(self, summary: str = "") -> int:
        return await self._call(lambda t: t.complete(summary))


class AsyncConstraints:
    """:class:`~mindpalace.tasks.Constraints` of a task (protected, never compressed; I7), async."""

    def __init__(self, task: AsyncTask) -> None:
        self._task = task

    async def _call(self, fn: Callable[[Constraints], T]) -> T:
        return await self._task._call(lambda t: fn(t.constraints))

    async def all(self) -> dict[str, Any]:
        return await self._call(lambda c: c.all())

    async def get(self, name: str, default: Any = None) -> Any:
        return await self._call(lambda c: c.get(name, default))

    async def set(self, name: str, value: Any, *, source: str = "user", note: str = "") -> Any:
        """Set a protected constraint (ConstraintError when `source` may not: I7)."""
        return await self._call(lambda c: c.set(name, value, source=source, note=note))

    async def remove(self, name: str, *, source: str = "user") -> None:
        await self._call(lambda c: c.remove(name, source=source))

    async def guard(self, tool: str, expr: str, *, name: str | None = None,
                    source: str = "developer") -> str:
        return await self._call(lambda c: c.guard(tool, expr, name=name, source=source))

    async def feedback(self, text: str, *, updates: dict[str, Any] | None = None) -> None:
        await self._call(lambda c: c.feedback(text, updates=updates))

    async def check(self, tool: str, args: dict[str, Any]) -> list[GuardViolation]:
        return await self._call(lambda c: c.check(tool, args))

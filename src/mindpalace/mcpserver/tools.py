"""The MCP tools: thin over the async facade (:mod:`mindpalace.aio`), one method per tool.

Tools and what they call:

==================  ==========================================================  =========
tool                facade call                                                 writes
==================  ==========================================================  =========
``remember``        ``Session.remember(key, content, importance, source)``     yes
``recall``          ``Session.recall(query, k)``                               no
``forget``          ``Session.forget(key)``                                    yes
``read_records``    ``Session.read_records(names)`` (read_files protocol)      no
``get_context``     ``Session.context(...)`` — the pure build                  no
``set_constraint``  ``Task.constraints.set(name, value, source)`` (I7)         yes
``record_step``     ``StepMemory.begin`` / ``evaluate``                        yes
``checkpoint``      ``Task.checkpoint(step, artifacts, pending)``              yes
``task_status``     ``Task.resume()`` + ledger rows                            no
==================  ==========================================================  =========

Every tool takes ``user_id`` / ``agent_id`` / ``session_id`` (mem0's names; defaults from the
server's options) and runs in the caller's tenant: the API key's on HTTP, the server's
``--tenant`` on stdio — never an argument (I10). Every write takes an optional
``idempotency_key`` (see :mod:`mindpalace.mcpserver.idempotency`). A refused input or a
:class:`~mindpalace.errors.MindPalaceError` comes back as a tool error naming what was wrong
(``isError: true``), never a crash.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, StrictFloat, StrictInt

from mindpalace.aio import AsyncMemory, AsyncSession
from mindpalace.errors import MindPalaceError, OutcomeUnknownError, ToolCallInFlightError
from mindpalace.mcpserver.idempotency import LEDGER_SESSION, run_once
from mindpalace.mcpserver.keys import caller_key
from mindpalace.mcpserver.models import (
    CheckpointResult,
    ConstraintResult,
    ContextResult,
    ForgetResult,
    MemoryHit,
    ReadRecordsResult,
    RecallResult,
    RememberResult,
    StepResult,
    TaskStatusResult,
)
from mindpalace.memory import Session
from mindpalace.steps.records import render_record

__all__ = ["TOOLS", "TOOL_NAMES", "WRITE_TOOLS", "MemoryTools", "ToolDefaults"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

MAX_TEXT_CHARS = 200_000  # one fact, goal or analysis, as on REST; the body limit caps the request
MAX_NAMES = 100  # records per read_records call

# -- argument types (the JSON schema of every tool's input) -----------------------------------
UserId = Annotated[str | None, Field(description="the user the memory belongs to (default: the "
                                     "server's --user)", max_length=200)]
AgentId = Annotated[str | None, Field(description="the agent (default: the server's --agent)",
                                      max_length=200)]
SessionId = Annotated[str | None, Field(description="the conversation / run (default: the "
                                        "server's --session)", max_length=200)]
IdempotencyKey = Annotated[str | None, Field(
    description="optional: a retry with the same key returns the first result and writes nothing",
    min_length=1, max_length=200)]
TaskId = Annotated[str | None, Field(description="the task (default: the session's own task)",
                                     max_length=200)]
JsonValue = str | int | float | bool | list[Any] | dict[str, Any]
# Counts and shares are JSON numbers (StrictInt, StrictFloat), as on REST (mindpalace.rest.models):
# pydantic's lax mode would take "0.9", true, "5" and 5.0 and store them.


@dataclass(frozen=True)
class ToolDefaults:
    """The scope a tool call gets when it names none (``mindpalace mcp --user/--agent/--session``)
    and the tenant of transports without keys (stdio, ``--no-auth``)."""

    tenant: str = "default"
    user_id: str = ""
    agent_id: str = ""
    session_id: str = "mcp"


class MemoryTools:
    """The nine memory tools over one workspace handle.

    Args:
        memory: the root handle (its tenant is used only when the transport has no keys).
        defaults: scope defaults for arguments left out.
    """

    def __init__(self, memory: AsyncMemory, defaults: ToolDefaults) -> None:
        self.memory = memory
        self.defaults = defaults

    # -- plumbing ----------------------------------------------------------------------------
    def _tenant(self, need: Literal["read", "write"]) -> AsyncMemory:
        """The caller's tenant handle: the API key's, else the server's (I10)."""
        key = caller_key(need)
        tenant = self.defaults.tenant if key is None else key[0]
        return self.memory.for_tenant(tenant)

    def _session(self, mem: AsyncMemory, user_id: str | None, agent_id: str | None,
                 session_id: str | None) -> AsyncSession:
        if session_id == LEDGER_SESSION:  # the idempotency ledger is not a tool's to touch
            raise ToolError(f"session_id {LEDGER_SESSION!r} is reserved for idempotency keys")
        d = self.defaults
        return mem.session(d.session_id if session_id is None else session_id,
                           user=d.user_id if user_id is None else user_id,
                           agent=d.agent_id if agent_id is None else agent_id)

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a tool body; the engine's errors become tool errors that name the problem."""
        try:
            return await call()
        except ToolError:
            raise
        except OutcomeUnknownError as exc:
            raise ToolError(f"OutcomeUnknownError: idempotency_key {exc.key.split(':', 1)[-1]!r}: "
                            "a call with this key was interrupted; nothing was written now "
                            f"({exc})") from exc
        except ToolCallInFlightError as exc:
            raise ToolError(f"ToolCallInFlightError: idempotency_key {exc.key.split(':', 1)[-1]!r}: "
                            "a call with this key is still running; nothing was written now — "
                            f"repeat it later for its result ({exc})") from exc
        except MindPalaceError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    async def _write(
        self, tool: str, args: dict[str, Any], key: str | None, model: type[M],
        scope: tuple[str | None, str | None, str | None], write: Callable[[Session], M],
    ) -> M:
        """One write tool call: `write(session)` in a worker thread, once per idempotency key."""
        mem = self._tenant("write")
        session = self._session(mem, *scope)
        if key is None:
            return await session.run(write)
        ledger = mem.session(LEDGER_SESSION).sync
        full = {**args, "user_id": session.scope.user, "agent_id": session.scope.agent,
                "session_id": session.id}
        data, replayed = await session.run(
            lambda s: run_once(ledger, tool, full, key, lambda: write(s).model_dump(mode="json"),
                               write_tools=WRITE_TOOLS))
        return model.model_validate({**data, "replayed": replayed})

    # -- facts and recall --------------------------------------------------------------------
    async def remember(
        self,
        key: Annotated[str, Field(description='what the fact is about, as "entity:attribute", '
                                  'e.g. "user:city"', min_length=3, max_length=200)],
        content: Annotated[str, Field(description="the value, as text", min_length=1,
                                      max_length=MAX_TEXT_CHARS)],
        importance: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False, description=(
            "0-1; at or above the workspace's threshold (default 0.7) it is kept long-term"))] = 0.5,
        source: Annotated[str, Field(description="where it came from (message, tool call …)",
                                     max_length=200)] = "",
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
        idempotency_key: IdempotencyKey = None,
    ) -> RememberResult:
        """Remember a fact (working memory; long-term when important). Same key again = the
        value is corrected, the old one kept in its history."""
        return await self._guard(lambda: self._write(
            "remember", {"key": key, "content": content, "importance": importance, "source": source},
            idempotency_key, RememberResult, (user_id, agent_id, session_id),
            lambda s: RememberResult.of(s.remember(key, content, importance=importance,
                                                   source=source))))

    async def recall(
        self,
        query: Annotated[str, Field(description="free text, or an entity:attribute key",
                                    min_length=1, max_length=MAX_TEXT_CHARS)],
        limit: Annotated[StrictInt | None, Field(ge=1, le=100, description=(
            "hits wanted (default: the workspace's recall_top_k)"))] = None,
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
    ) -> RecallResult:
        """Search memory: working memory first, then keyword + vector search over the user's
        facts, messages, step records and archived history. Each hit's ``id`` can be read in
        full with read_records."""
        async def body() -> RecallResult:
            s = self._session(self._tenant("read"), user_id, agent_id, session_id)
            hits = await s.recall(query, limit)
            return RecallResult(results=[MemoryHit.of(h, s.id) for h in hits])
        return await self._guard(body)

    async def forget(
        self,
        key: Annotated[str, Field(description='the fact to forget, "entity:attribute"',
                                  min_length=3, max_length=200)],
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
        idempotency_key: IdempotencyKey = None,
    ) -> ForgetResult:
        """Forget a fact for good (its history keeps a tombstone)."""
        return await self._guard(lambda: self._write(
            "forget", {"key": key}, idempotency_key, ForgetResult, (user_id, agent_id, session_id),
            lambda s: ForgetResult(key=key, forgotten=s.forget(key))))

    async def read_records(
        self,
        names: Annotated[list[Annotated[str, Field(max_length=500)]], Field(
            min_length=1, max_length=MAX_NAMES, description=(
                'records and references by name: "step_12", "message:17", "message:3@other-'
                'session", "history:5", "fact:user:city" (ids from recall)'))],
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
    ) -> ReadRecordsResult:
        """Read records in full by name (the read_files protocol): unknown names come back in
        ``missing``, never as an error."""
        async def body() -> ReadRecordsResult:
            s = self._session(self._tenant("read"), user_id, agent_id, session_id)
            return ReadRecordsResult.of(await s.read_records(names), render_record)
        return await self._guard(body)

    async def get_context(
        self,
        budget_tokens: Annotated[StrictInt | None, Field(ge=1, le=10_000_000, description=(
            "cap on the prompt in tokens (default: the workspace's input budget)"))] = None,
        query: Annotated[str | None, Field(max_length=MAX_TEXT_CHARS, description=(
            "what the recalled-memory block recalls for (default: the newest user message)"))] = None,
        system_prompt: Annotated[str | None, Field(max_length=MAX_TEXT_CHARS, description=(
            "default: the session's latest stored system message"))] = None,
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
    ) -> ContextResult:
        """The prompt for the next model call as the stored state gives it now, never over the
        budget. Read-only: nothing is consolidated or written."""
        async def body() -> ContextResult:
            s = self._session(self._tenant("read"), user_id, agent_id, session_id)
            built = await s.context(budget_tokens, system_prompt=system_prompt, query=query)
            r = built.report
            return ContextResult(messages=[dict(m) for m in built.messages],
                                 total_tokens=r.total_tokens, budget_tokens=r.budget_tokens,
                                 blocks=list(r.blocks), degradations=list(r.degradations),
                                 recalled=[item.ref for item in r.recalled])
        return await self._guard(body)

    # -- task state --------------------------------------------------------------------------
    async def set_constraint(
        self,
        name: Annotated[str, Field(description='e.g. "budget_per_night_cny"', min_length=1,
                                   max_length=200)],
        value: Annotated[JsonValue, Field(description="the value, kept verbatim (JSON)")],
        source: Annotated[Literal["user", "developer", "tool"], Field(description=(
            "who asked for it: the user or the developer; a constraint taken from tool "
            "output is refused and recorded (protected constraints, I7)"))] = "user",
        note: Annotated[str, Field(max_length=2_000)] = "",
        task_id: TaskId = None,
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
        idempotency_key: IdempotencyKey = None,
    ) -> ConstraintResult:
        """Set a protected constraint of the task: never compressed, shown verbatim in every
        prompt, checked by guards before side-effecting tool calls."""
        def write(s: Session) -> ConstraintResult:
            task = s.task if task_id is None else s.tasks(task_id)
            stored = task.constraints.set(name, value, source=source, note=note)
            return ConstraintResult(task_id=task.id, name=name, value=stored,
                                    constraints=task.constraints.all())
        return await self._guard(lambda: self._write(
            "set_constraint", {"name": name, "value": value, "source": source, "note": note,
                               "task_id": task_id},
            idempotency_key, ConstraintResult, (user_id, agent_id, session_id), write))

    async def record_step(
        self,
        goal: Annotated[str | None, Field(max_length=MAX_TEXT_CHARS, description=(
            "a new step's goal (leave out to evaluate an earlier pending step)"))] = None,
        step: Annotated[StrictInt | None, Field(ge=1, description=(
            "the pending step to evaluate (the number an earlier record_step returned)"))] = None,
        evaluation: Annotated[str | None, Field(max_length=MAX_TEXT_CHARS, description=(
            '"success", "failed" or free text; given with goal, the step is begun and '
            'evaluated at once'))] = None,
        analysis: Annotated[str, Field(max_length=MAX_TEXT_CHARS,
                                       description="what was learned")] = "",
        action: Annotated[str, Field(max_length=MAX_TEXT_CHARS,
                                     description="the tool call taken, e.g. search(q=…)")] = "",
        tool_outputs: Annotated[list[Annotated[str, Field(max_length=MAX_TEXT_CHARS)]], Field(
            max_length=50, description="raw tool results, kept in the step record")] = [],  # noqa: B006
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
        idempotency_key: IdempotencyKey = None,
    ) -> StepResult:
        """Record an agent step (tiered step memory): begin one with ``goal`` (a pending line),
        evaluate it with ``step`` + ``evaluation`` (its record ``step_N`` is saved and readable
        with read_records), or both at once."""
        if (goal is None) == (step is None):
            raise ToolError("record_step: give either goal (a new step) or step (evaluate a "
                            "pending one), not both and not neither")
        if step is not None and evaluation is None:
            raise ToolError(f"record_step: evaluating step {step} needs an evaluation")

        def write(s: Session) -> StepResult:
            number = s.steps.begin(goal, action=action) if goal is not None else step or 0
            if evaluation is None:
                return StepResult(step=number, status="pending")
            record = s.steps.evaluate(number, evaluation, analysis=analysis,
                                      tool_outputs=list(tool_outputs))
            return StepResult(step=number, status="evaluated", record=record.name)
        return await self._guard(lambda: self._write(
            "record_step", {"goal": goal, "step": step, "evaluation": evaluation,
                            "analysis": analysis, "action": action,
                            "tool_outputs": list(tool_outputs)},
            idempotency_key, StepResult, (user_id, agent_id, session_id), write))

    async def checkpoint(
        self,
        step: Annotated[StrictInt | None, Field(ge=0, description="the step index reached")] = None,
        artifacts: Annotated[dict[str, Any] | None, Field(
            description="working variables to keep (JSON), e.g. {\"hotel\": \"Hilton\"}")] = None,
        pending: Annotated[list[Annotated[str, Field(max_length=MAX_TEXT_CHARS)]] | None, Field(
            max_length=200, description="what is still to do")] = None,
        task_id: TaskId = None,
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
        idempotency_key: IdempotencyKey = None,
    ) -> CheckpointResult:
        """Persist the task's working state atomically (one event): a crashed agent resumes
        from it (see task_status)."""
        def write(s: Session) -> CheckpointResult:
            task = s.task if task_id is None else s.tasks(task_id)
            version = task.checkpoint(step=step, artifacts=artifacts, pending=pending)
            return CheckpointResult(task_id=task.id, version=version)
        return await self._guard(lambda: self._write(
            "checkpoint", {"step": step, "artifacts": artifacts, "pending": pending,
                           "task_id": task_id},
            idempotency_key, CheckpointResult, (user_id, agent_id, session_id), write))

    async def task_status(
        self,
        task_id: TaskId = None,
        user_id: UserId = None, agent_id: AgentId = None, session_id: SessionId = None,
    ) -> TaskStatusResult:
        """Where the task stands: plan, next step, artifacts, pending work, protected
        constraints and the ledger of side-effecting calls (outcomes never to re-run blindly)."""
        async def body() -> TaskStatusResult:
            s = self._session(self._tenant("read"), user_id, agent_id, session_id)
            task = s.task if task_id is None else s.tasks(task_id)
            return TaskStatusResult.of(await task.id(), await task.resume(),
                                       await task.ledger_entries())
        return await self._guard(body)

    def all(self) -> list[tuple[str, Callable[..., Awaitable[BaseModel]], bool]]:
        """(name, bound method, read-only) of every tool, in the order listed to clients."""
        return [(name, getattr(self, name), read_only) for name, read_only in TOOLS]


TOOLS: Final = (
    ("remember", False), ("recall", True), ("forget", False), ("read_records", True),
    ("get_context", True), ("set_constraint", False), ("record_step", False),
    ("checkpoint", False), ("task_status", True),
)
"""(name, read-only) of every tool in the order listed to clients: the one list that
:meth:`MemoryTools.all`, :data:`TOOL_NAMES` and :data:`WRITE_TOOLS` are made from."""
TOOL_NAMES: Final = tuple(name for name, _ in TOOLS)
WRITE_TOOLS: Final = tuple(name for name, read_only in TOOLS if not read_only)


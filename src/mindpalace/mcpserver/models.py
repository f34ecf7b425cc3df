"""Structured outputs of the MCP tools (pydantic models → each tool's ``outputSchema``).

Field names follow the memory MCP servers agents already know: mem0 / OpenMemory return
``{"results": [{"id", "memory", "score", …}]}`` from a search, Graphiti and Letta name records
and episodes by id; the mindpalace-specific parts (tiers, refs, ledger rows, the task state)
keep the facade's names. Every write result carries ``replayed``: True when an
``idempotency_key`` was seen before and the first result is returned without writing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from mindpalace.facts import Fact, RecallHit, Remembered
from mindpalace.steps.records import ReadResult
from mindpalace.store.base import Record
from mindpalace.tasks.ledger import LedgerEntry
from mindpalace.tasks.state import TaskState
from mindpalace.tasks.task import Resumption

__all__ = [
    "CheckpointResult",
    "ConstraintResult",
    "ContextResult",
    "FactOut",
    "ForgetResult",
    "LedgerRow",
    "MemoryHit",
    "ReadRecordsResult",
    "RecallResult",
    "RecordOut",
    "RememberResult",
    "StepResult",
    "TaskStatusResult",
    "WriteResult",
]


class WriteResult(BaseModel):
    """Base of every write tool's result."""

    replayed: bool = Field(False, description="True when this idempotency_key was used before: "
                           "the first call's result is returned and nothing was written now.")


class FactOut(BaseModel):
    """One fact: ``key`` (entity:attribute) = ``content``."""

    key: str
    content: str
    importance: float
    source: str = ""
    id: str = Field("", description='"<key>#<n>" when stored long-term; "" for a working-only item')
    created_at: datetime

    @classmethod
    def of(cls, fact: Fact) -> FactOut:
        return cls(key=fact.key, content=fact.content, importance=fact.importance,
                   source=fact.source, id=fact.id, created_at=fact.created_at)


class RememberResult(WriteResult):
    """What ``remember`` did: the fact as kept, what was archived long-term, what was evicted."""

    fact: FactOut
    archived: list[FactOut] = Field(default_factory=list)
    evicted: list[FactOut] = Field(default_factory=list)

    @classmethod
    def of(cls, done: Remembered) -> RememberResult:
        return cls(fact=FactOut.of(done.fact), archived=[FactOut.of(f) for f in done.archived],
                   evicted=[FactOut.of(f) for f in done.evicted])


class ForgetResult(WriteResult):
    key: str
    forgotten: bool = Field(description="False when the key held no current value")


class MemoryHit(BaseModel):
    """One recall result (mem0's ``id`` / ``memory`` / ``score``, plus where it came from)."""

    id: str = Field(description="a name read_records accepts: fact:<key>, message:<n>, step_<n>, "
                    "history:<cursor> …")
    memory: str = Field(description="the matched text")
    score: float
    tier: str = Field(description="working, fact, message, step, info, snapshot, history …")
    session_id: str = ""
    key: str | None = Field(None, description="the fact key for working / fact hits")
    matched_terms: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, hit: RecallHit, asking_session: str) -> MemoryHit:
        """`hit` as seen from the session `asking_session` (its ids resolve there)."""
        session = hit.scope.session if isinstance(hit.scope.session, str) else ""
        key = hit.fact.key if hit.fact is not None else None
        return cls(id=_ref_name(hit, key, session, asking_session), memory=hit.text,
                   score=hit.score, tier=hit.tier, session_id=session, key=key,
                   matched_terms=list(hit.why.terms))


def _ref_name(hit: RecallHit, key: str | None, session: str, asking: str) -> str:
    """The name read_records resolves for a hit (grammar in mindpalace.refs)."""
    if key is not None:
        return f"fact:{key}"
    if hit.tier == "message":
        return f"message:{hit.ref}" + ("" if session in ("", asking) else f"@{session}")
    if hit.tier == "history":
        return f"history:{hit.ref}"
    return hit.ref  # step / info / snapshot records are named by their record name


class RecallResult(BaseModel):
    results: list[MemoryHit]


class RecordOut(BaseModel):
    """One record or reference, rendered as markdown (YAML front matter + body)."""

    name: str
    type: str
    description: str = ""
    content: str

    @classmethod
    def of(cls, name: str, record: Record, rendered: str) -> RecordOut:
        return cls(name=name, type=record.type, description=record.description, content=rendered)


class ReadRecordsResult(BaseModel):
    records: list[RecordOut]
    missing: list[str] = Field(description="names unknown, malformed or out of scope (never an error)")
    problems: dict[str, str] = Field(
        default_factory=dict, description="for a missing name of a wrong form: the rule it broke")

    @classmethod
    def of(cls, result: ReadResult, render: Any) -> ReadRecordsResult:
        return cls(records=[RecordOut.of(n, r, render(r)) for n, r in result.found.items()],
                   missing=list(result.missing), problems=dict(result.problems))


class ContextResult(BaseModel):
    """The prompt the stored state gives now (a pure build: nothing was written)."""

    messages: list[dict[str, Any]] = Field(description="OpenAI chat format")
    total_tokens: int
    budget_tokens: int
    blocks: list[tuple[str, int]] = Field(description="(part, tokens) in prompt order")
    degradations: list[str] = Field(description="what did not fit and was dropped or cut")
    recalled: list[str] = Field(description="refs of the recalled-memory block, best first")


class ConstraintResult(WriteResult):
    task_id: str
    name: str
    value: Any
    constraints: dict[str, Any] = Field(description="every protected constraint of the task now")


class StepResult(WriteResult):
    step: int
    status: Literal["pending", "evaluated"]
    record: str | None = Field(None, description="the step record's name (read_records) once evaluated")


class CheckpointResult(WriteResult):
    task_id: str
    version: int = Field(description="the task version after the checkpoint event")


class LedgerRow(BaseModel):
    key: str
    tool: str
    status: str
    attempt: int
    error: str | None = None

    @classmethod
    def of(cls, entry: LedgerEntry) -> LedgerRow:
        return cls(key=entry.key, tool=entry.tool, status=entry.status, attempt=entry.attempt,
                   error=entry.error)


class TaskStatusResult(BaseModel):
    """Where a task stands (event-sourced state, seed 004) and where to resume."""

    task_id: str
    exists: bool = Field(description="False when the task has no events yet")
    version: int
    status: str
    plan: list[str]
    step: int = Field(description="index of the next step to run")
    current_step: str | None = Field(None, description="a started, unfinished step (retry it)")
    next_step: str | None = None
    artifacts: dict[str, Any]
    pending: list[str]
    constraints: dict[str, Any]
    unknown_outcomes: list[str] = Field(description="ledger keys never to re-run blindly (I8)")
    ledger: list[LedgerRow]
    summary: str = ""

    @classmethod
    def of(cls, task_id: str, resumption: Resumption, ledger: list[LedgerEntry]) -> TaskStatusResult:
        state: TaskState = resumption.state
        nxt = resumption.next_step
        return cls(
            task_id=task_id, exists=state.version > 0, version=state.version, status=state.status,
            plan=list(state.plan), step=state.step,
            current_step=None if state.current is None else state.current.name or str(state.current.index),
            next_step=None if nxt is None else nxt.name or str(nxt.index),
            artifacts=dict(state.artifacts), pending=list(state.pending),
            constraints={k: c.value for k, c in state.constraints.items()},
            unknown_outcomes=list(resumption.unknown_calls), ledger=[LedgerRow.of(e) for e in ledger],
            summary=state.summary,
        )

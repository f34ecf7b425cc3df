"""Task state and the PURE projection ``apply(state, event) -> state`` (seed 004's event sourcing).

State is never written directly: it is the fold of the task's events, so recovery after a crash
is ``apply`` over the log (from the latest snapshot on). ``apply`` does no I/O, reads no clock,
never mutates its inputs and returns a new state whose ``version`` is one higher — so the same
events always give the same state, whichever process replays them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mindpalace.tasks.events import (
    DEFAULT_REGISTRY,
    Checkpoint,
    ConstraintSet,
    ErrorOccurred,
    EventRegistry,
    GuardSet,
    PlanCreated,
    StepFinished,
    StepStarted,
    TaskCompleted,
    TaskEvent,
    ToolCallCompleted,
    ToolCallRecorded,
    UserFeedback,
)
from mindpalace.tasks.owner import CallOwner, owner_liveness

REFUSAL_CODES = frozenset({"constraint_refused", "guard_blocked"})
"""error_occurred codes that count as refusals (a protected constraint or guard said no)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepRef(_Frozen):
    index: int
    name: str = ""


class Constraint(_Frozen):
    """A protected constraint: verbatim value, who set it, at which task version."""

    value: Any
    source: str
    version: int
    note: str = ""


class Guard(_Frozen):
    """A declarative check on the arguments of `tool` (see :mod:`mindpalace.tasks.constraints`)."""

    tool: str
    expr: str
    source: str
    version: int


class Feedback(_Frozen):
    text: str
    version: int
    updates: dict[str, Any] = Field(default_factory=dict)


class InFlight(_Frozen):
    """A ledger row without a known outcome (``started``: running, or its process died; or
    ``unknown``: the tool raised after dispatch): the side effect may or may not have happened.
    ``owner`` is who runs a ``started`` call (see :mod:`mindpalace.tasks.owner`); None once
    its outcome is ``unknown`` (nobody runs it any more) or when not recorded."""

    tool: str
    attempt: int
    version: int
    idempotent: bool
    owner: dict[str, Any] | None = None

    def running(self) -> bool:
        """True while its owner provably runs it, or cannot be checked (another host): in
        flight, not an unknown outcome (:func:`~mindpalace.tasks.owner.owner_liveness`)."""
        return owner_liveness(CallOwner.from_json(self.owner)) != "gone"


class ErrorInfo(_Frozen):
    message: str
    code: str
    retryable: bool
    version: int


class TaskState(_Frozen):
    """Everything needed to resume a task (the seed's checklist item 5: step index, finished
    artifacts, pending queue), plus its protected constraints, guards and user corrections.

    ``version`` = number of events applied; ``step`` = index of the next step to run;
    ``current`` = a step started and not finished (a crash mid-step leaves it set).
    """

    task: str
    version: int = 0
    status: Literal["new", "running", "completed"] = "new"
    plan_id: str | None = None
    plan: list[str] = Field(default_factory=list)
    step: int = 0
    current: StepRef | None = None
    steps_finished: int = 0
    last_output: Any = None
    artifacts: dict[str, Any] = Field(default_factory=dict)
    pending: list[str] = Field(default_factory=list)
    constraints: dict[str, Constraint] = Field(default_factory=dict)
    guards: dict[str, Guard] = Field(default_factory=dict)
    feedback: list[Feedback] = Field(default_factory=list)
    in_flight: dict[str, InFlight] = Field(default_factory=dict)
    calls: dict[str, int] = Field(default_factory=lambda: {"started": 0, "completed": 0, "failed": 0})
    errors: int = 0
    refusals: int = 0
    last_error: ErrorInfo | None = None
    summary: str = ""
    custom: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON form (snapshots, CLI ``--json``); ``TaskState.model_validate`` reverses it."""
        return self.model_dump(mode="json")


def initial_state(task: str) -> TaskState:
    """The state of a task with no events."""
    return TaskState(task=task)


def apply(state: TaskState, event: TaskEvent, registry: EventRegistry = DEFAULT_REGISTRY) -> TaskState:
    """Fold one event into `state`; pure (no I/O, no clock, inputs untouched).

    Args:
        state: the state before the event (version v).
        event: a validated event model (see :class:`~mindpalace.tasks.events.EventRegistry`).
        registry: where reducers of user-defined event types are looked up.
    Returns:
        A new state with version v + 1. Unregistered user types only advance the version.
    """
    v = state.version + 1
    upd: dict[str, Any] = {"version": v}
    running = "running" if state.status == "new" else state.status
    match event:
        case PlanCreated():
            upd.update(plan_id=event.plan_id, plan=list(event.steps), status=running)
        case StepStarted():
            upd.update(current=StepRef(index=event.index, name=event.name), status=running)
        case StepFinished():
            upd.update(
                current=None,
                step=max(state.step, event.index + 1),
                steps_finished=state.steps_finished + 1,
                last_output=event.output,
            )
        case Checkpoint():
            upd["artifacts"] = {**state.artifacts, **event.artifacts}
            if event.step is not None:
                upd["step"] = event.step
            if event.pending is not None:
                upd["pending"] = list(event.pending)
        case ToolCallRecorded():
            upd["in_flight"] = {
                **state.in_flight,
                event.key: InFlight(tool=event.tool, attempt=event.attempt, version=v,
                                    idempotent=event.idempotent, owner=event.owner),
            }
            upd["calls"] = {**state.calls, "started": state.calls.get("started", 0) + 1}
        case ToolCallCompleted():
            if event.status != "unknown":
                upd["in_flight"] = {k: f for k, f in state.in_flight.items() if k != event.key}
            elif event.key in state.in_flight:  # stays in flight until settled (I8); nobody runs it
                upd["in_flight"] = {**state.in_flight,
                                    event.key: state.in_flight[event.key].model_copy(update={"owner": None})}
            upd["calls"] = {**state.calls, event.status: state.calls.get(event.status, 0) + 1}
        case ConstraintSet():
            if event.removed:
                upd["constraints"] = {k: c for k, c in state.constraints.items() if k != event.name}
            else:
                upd["constraints"] = {
                    **state.constraints,
                    event.name: Constraint(value=event.value, source=event.source, version=v, note=event.note),
                }
        case GuardSet():
            upd["guards"] = {
                **state.guards,
                event.name: Guard(tool=event.tool, expr=event.expr, source=event.source, version=v),
            }
        case UserFeedback():
            upd["feedback"] = [*state.feedback, Feedback(text=event.text, version=v, updates=dict(event.updates))]
            if event.updates:
                upd["constraints"] = {
                    **state.constraints,
                    **{
                        name: Constraint(value=value, source="user", version=v, note=event.text)
                        for name, value in event.updates.items()
                    },
                }
        case ErrorOccurred():
            upd.update(
                errors=state.errors + 1,
                last_error=ErrorInfo(message=event.message, code=event.code, retryable=event.retryable, version=v),
            )
            if event.code in REFUSAL_CODES:
                upd["refusals"] = state.refusals + 1
        case TaskCompleted():
            upd.update(status="completed", summary=event.summary, current=None)
        case _:
            reducer = registry.reducer_for(event.type)
            if reducer is not None:
                return reducer(state, event).model_copy(update={"version": v})
            if registry.model_for(event.type) is not None:
                upd["custom"] = {**state.custom, event.type: event.model_dump(mode="json", exclude={"type"})}
    return _updated(state, upd)


_set_attr = object.__setattr__


def _updated(state: TaskState, upd: dict[str, Any]) -> TaskState:
    """``state.model_copy(update=upd)`` — a shallow copy with `upd` set, unvalidated, the
    updated fields marked as set — in half its time: every event of every step is folded
    through here. TaskState has no private attributes and refuses extra fields; a subclass
    (which might have either) gets ``model_copy`` itself."""
    if type(state) is not TaskState:
        return state.model_copy(update=upd)
    new = object.__new__(TaskState)
    fields = state.__dict__.copy()
    fields.update(upd)
    _set_attr(new, "__dict__", fields)
    _set_attr(new, "__pydantic_fields_set__", state.__pydantic_fields_set__ | upd.keys())
    _set_attr(new, "__pydantic_extra__", None)
    _set_attr(new, "__pydantic_private__", None)
    return new


def replay(state: TaskState, events: list[TaskEvent], registry: EventRegistry = DEFAULT_REGISTRY) -> TaskState:
    """``apply`` over `events` in order."""
    for event in events:
        state = apply(state, event, registry)
    return state

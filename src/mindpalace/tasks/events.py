"""Typed task events (seed 004): every decision of a task is an immutable, validated event.

Built-in types (the seed's skeleton plus what the ledger, constraints and checkpoints need):

============================  =============================================================
``plan_created``              the task's plan: a plan id and the ordered step names
``step_started``              step ``index`` (0-based) named ``name`` began
``step_finished``             step ``index`` ended with ``outcome`` (and an ``output``)
``checkpoint``                working variables after a step: artifacts, pending queue
``tool_call_recorded``        ledger ``started`` row: written *before* a side effect runs
``tool_call_completed``       ledger outcome: ``completed`` (with result) or ``failed``
``constraint_set``            a protected constraint set / removed by the user or developer
``guard_set``                 a declarative check on a tool's arguments, e.g. ``price <= budget``
``user_feedback``             a user correction (optionally updating constraints) — top of prompt
``error_occurred``            an error, incl. refused constraint writes and blocked calls
``task_completed``            the task is done
============================  =============================================================

User-defined types are registered with a pydantic model (and optionally a pure reducer, see
:mod:`mindpalace.tasks.state`) on an :class:`EventRegistry`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticSerializationError

from mindpalace.errors import ValidationError
from mindpalace.textsafe import MAX_JSON_DEPTH, clean_json

ConstraintSource = Literal["user", "developer"]
"""Who may set a protected constraint (I7): never a tool, never the model."""


class TaskEvent(BaseModel):
    """Base of every event payload; unknown fields are refused so typos fail loudly."""

    # ser_json_inf_nan: keep NaN / ±inf as floats so the store refuses them; pydantic's default
    # would silently store them as null (a changed value).
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")
    type: str = ""


class PlanCreated(TaskEvent):
    type: Literal["plan_created"] = "plan_created"
    plan_id: str
    steps: list[str] = Field(default_factory=list, description="Ordered step names.")


class StepStarted(TaskEvent):
    type: Literal["step_started"] = "step_started"
    index: StrictInt = Field(ge=0, description="0-based step index.")
    name: str = ""


class StepFinished(TaskEvent):
    type: Literal["step_finished"] = "step_finished"
    index: StrictInt = Field(ge=0)
    outcome: Literal["success", "failure", "skipped"] = "success"
    output: Any = None


class Checkpoint(TaskEvent):
    type: Literal["checkpoint"] = "checkpoint"
    step: StrictInt | None = Field(None, ge=0, description="Index of the next step to run, if known.")
    artifacts: dict[str, Any] = Field(default_factory=dict, description="Merged into state.artifacts.")
    pending: list[str] | None = Field(None, description="Replaces the pending-actions queue when given.")


class ToolCallRecorded(TaskEvent):
    type: Literal["tool_call_recorded"] = "tool_call_recorded"
    key: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    idempotent: bool = False
    attempt: StrictInt = Field(1, ge=1)
    owner: dict[str, Any] | None = Field(
        None, description="Who runs the call (host, node, pid, start, call): tells in flight from crashed.")


class ToolCallCompleted(TaskEvent):
    type: Literal["tool_call_completed"] = "tool_call_completed"
    key: str
    tool: str
    status: Literal["completed", "failed", "unknown"]
    result: Any = None
    error: str | None = None
    reconciled: bool = Field(False, description="Outcome found by a reconcile hook, not by running.")


class ConstraintSet(TaskEvent):
    type: Literal["constraint_set"] = "constraint_set"
    name: str
    value: Any = None
    removed: bool = False
    source: ConstraintSource
    note: str = ""


class GuardSet(TaskEvent):
    type: Literal["guard_set"] = "guard_set"
    name: str
    tool: str
    expr: str
    source: ConstraintSource = "developer"


class UserFeedback(TaskEvent):
    type: Literal["user_feedback"] = "user_feedback"
    text: str
    updates: dict[str, Any] = Field(
        default_factory=dict, description="Constraint values this correction sets (source user)."
    )


class ErrorOccurred(TaskEvent):
    type: Literal["error_occurred"] = "error_occurred"
    message: str
    code: str = "error"
    retryable: bool = False
    tool: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class TaskCompleted(TaskEvent):
    type: Literal["task_completed"] = "task_completed"
    summary: str = ""


BUILTIN_EVENTS: dict[str, type[TaskEvent]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        PlanCreated, StepStarted, StepFinished, Checkpoint, ToolCallRecorded, ToolCallCompleted,
        ConstraintSet, GuardSet, UserFeedback, ErrorOccurred, TaskCompleted,
    )
}

class UnregisteredEvent(TaskEvent):
    """A stored event whose type this process's registry does not know (it was recorded by a
    process with a richer :class:`EventRegistry`). Reading keeps it, with its raw ``payload``;
    folding it only advances the task version. It can never be appended."""

    payload: dict[str, Any] = Field(default_factory=dict)


Reducer = Callable[[Any, TaskEvent], Any]
"""A pure ``(TaskState, event) -> TaskState`` for a user-defined event type."""


class EventRegistry:
    """Event type name → pydantic model (and reducer for user-defined types).

    Example:
        >>> class HotelSelected(TaskEvent):
        ...     type: Literal["hotel_selected"] = "hotel_selected"
        ...     hotel_id: str
        >>> registry = EventRegistry()
        >>> registry.register(HotelSelected)
        >>> mem = Memory.open("./ws", event_registry=registry)  # doctest: +SKIP

    Args:
        frozen: refuse :meth:`register` (the shared :data:`DEFAULT_REGISTRY` is frozen, so no
            process-wide state changes behind a caller's back).
    """

    def __init__(self, *, frozen: bool = False) -> None:
        self._models: dict[str, type[TaskEvent]] = dict(BUILTIN_EVENTS)
        self._reducers: dict[str, Reducer] = {}
        self._lock = threading.Lock()
        self._frozen = frozen

    @property
    def frozen(self) -> bool:
        """True when :meth:`register` is refused (fixed at construction)."""
        return self._frozen

    def register(self, model: type[TaskEvent], reducer: Reducer | None = None) -> None:
        """Register a user-defined event model; its ``type`` field default is the type name.

        Without a reducer, the latest payload of the type is kept in ``state.custom[type]``.

        Raises:
            ValidationError: the registry is frozen (:data:`DEFAULT_REGISTRY`), no ``type``
                default, or the name is a built-in / already taken by another model.
        """
        if self._frozen:
            raise ValidationError(
                "this event registry is frozen (built-in events only); create EventRegistry(), "
                "register your types on it and pass it to Memory.open(event_registry=...) or "
                "Tasks(..., registry=...)"
            )
        name = model.model_fields["type"].default if "type" in model.model_fields else ""
        if not isinstance(name, str) or not name:
            raise ValidationError(f"event model {model.__name__} needs a default for its 'type' field")
        with self._lock:
            existing = self._models.get(name)
            if existing is not None and existing is not model:
                raise ValidationError(f"event type {name!r} is already registered ({existing.__name__})")
            self._models[name] = model
            if reducer is not None:
                self._reducers[name] = reducer

    def model_for(self, type_name: str) -> type[TaskEvent] | None:
        return self._models.get(type_name)

    def reducer_for(self, type_name: str) -> Reducer | None:
        return self._reducers.get(type_name)

    def parse(self, type_name: str, data: dict[str, Any]) -> TaskEvent:
        """Validate a stored payload into its model.

        Raises:
            ValidationError: unknown type or a payload that does not fit the model; the
                message names the type and the field.
        """
        model = self._models.get(type_name)
        if model is None:
            raise ValidationError(
                f"unknown task event type {type_name!r}; register its model with EventRegistry.register"
            )
        try:
            return model.model_validate({**data, "type": type_name})
        except PydanticValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "<payload>"
            raise ValidationError(f"task event {type_name!r}: field {where}: {err['msg']}") from exc

    def parse_stored(self, type_name: str, data: dict[str, Any]) -> TaskEvent:
        """:meth:`parse` for an event read back from the store: a type this registry does not
        know becomes an :class:`UnregisteredEvent` (reads of a task never fail because another
        process registered more types); a known type must still fit its model.

        Raises:
            ValidationError: a known type whose stored payload does not fit its model.
        """
        if type_name not in self._models:
            return UnregisteredEvent(type=type_name, payload=dict(data))
        return self.parse(type_name, data)

    def coerce(self, event: TaskEvent | tuple[str, dict[str, Any]]) -> TaskEvent:
        """Accept a model instance or a ``(type, payload)`` pair; always returns a validated model."""
        if isinstance(event, TaskEvent):
            return self.parse(event.type, event.model_dump(exclude={"type"}))
        if isinstance(event, tuple) and len(event) == 2 and isinstance(event[1], dict):
            return self.parse(event[0], event[1])
        raise ValidationError(f"a task event must be a TaskEvent or (type, payload), got {event!r}")


def payload_of(event: TaskEvent) -> dict[str, Any]:
    """The JSON payload stored for `event` (its type lives in the stream row, not the payload).

    Raises:
        ValidationError: a value is not JSON (an arbitrary object); NaN / ±inf are refused by
            the store when written.
    """
    return encoded_payload(event)[0]


def encoded_payload(event: TaskEvent) -> tuple[dict[str, Any], str | None]:
    """:func:`payload_of` and, when this one encode proves it, the payload's JSON text exactly
    as the store would write it (:func:`mindpalace.store.codec.dumps`; same encoder settings,
    pure ASCII); None otherwise (the store encodes it then, and refuses NaN / ±inf).

    Raises:
        ValidationError: as :func:`payload_of`.
    """
    try:
        data = event.model_dump(mode="json")  # then dropping `type`: cheaper than exclude=
    except PydanticSerializationError as exc:
        raise ValidationError(f"task event {event.type!r}: a value is not JSON-serialisable: {exc}") from exc
    data.pop("type", None)
    # A json-mode dump is plain JSON data (str keys, lists). When its text is ASCII (no lone
    # surrogate), holds no NUL escape and has fewer brackets than clean_json's depth limit,
    # clean_json would return it unchanged: one C-speed encode instead of a Python walk — and
    # that text is what the store writes.
    try:
        text = _PLAIN_JSON.encode(data)
    except (TypeError, ValueError, RecursionError):  # ValueError: NaN / ±inf
        return clean_json(data), None
    if text.isascii() and "\\u0000" not in text and text.count("{") + text.count("[") < MAX_JSON_DEPTH:
        return data, text
    return clean_json(data), None


_PLAIN_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # = the store's codec.dumps


DEFAULT_REGISTRY = EventRegistry(frozen=True)
"""Registry used when none is given: the built-in events only, frozen (register user-defined
types on an EventRegistry of your own and pass it in)."""

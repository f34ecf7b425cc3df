"""Agent tools: plain Python callables whose JSON schema is derived from their type hints.

A tool is a function with annotated parameters. :meth:`Tool.from_function` (or the
:func:`tool` decorator) builds a pydantic model from its signature
(:func:`pydantic.create_model`); that model gives the OpenAI tool schema sent to the model and
validates the arguments the model sends back — malformed JSON, wrong types (strictly: ``true``
is not 1 and ``"2"`` not 2), a key repeated in one object, unknown or missing arguments, NaN,
lone surrogates and oversized payloads are refused with a message naming what
was wrong, which the agent loop hands to the model as the tool's result (never a crash).

``side_effect=True`` marks a tool whose call changes the world (a booking, a payment, an
e-mail): the agent runs it through the session's idempotency ledger, exactly once (seed 004).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic import ValidationError as PydanticValidationError

from mindpalace.blocks import ToolSchema
from mindpalace.errors import ValidationError
from mindpalace.textsafe import RepeatedKeyError, unique_keys

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the OpenAI API accepts as a function name
MAX_ERRORS_SHOWN: Final = 5  # argument errors listed in one message; the model fixes a few at a time
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")

Reconciler = Callable[[Any], Any]
"""``hook(ledger_entry)`` → the call's result if it happened, ``NOT_RUN`` if it did not, None if
it cannot tell (see :meth:`mindpalace.tasks.Ledger.reconciler`)."""


@dataclass(frozen=True)
class Tool:
    """One tool the agent may call.

    Attributes:
        name: the function name the model uses (letters, digits, ``_``, ``-``; ≤ 64 chars).
        fn: the callable, called with keyword arguments of the validated types.
        description: what the model is told the tool does (the docstring's summary).
        params: the pydantic model of the arguments (extra arguments forbidden, no NaN).
        side_effect: the call changes the world → it runs through the ledger, exactly once.
        idempotent: a side-effecting call that is safe to repeat: an unknown outcome (a crash
            mid-call) simply runs again instead of being surfaced.
        key: ``key(args) -> str``, the idempotency key of a call from its JSON arguments;
            None = the ledger's hash of the canonical arguments (equal arguments = one call).
        reconcile: asked to settle an unknown outcome after a crash (e.g. look the booking
            up by its client reference) instead of surfacing it.
    """

    name: str
    fn: Callable[..., Any]
    description: str
    params: type[BaseModel]
    side_effect: bool = False
    idempotent: bool = False
    key: Callable[[dict[str, Any]], str] | None = None
    reconcile: Reconciler | None = None

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        side_effect: bool = False,
        idempotent: bool = False,
        key: Callable[[dict[str, Any]], str] | None = None,
        reconcile: Reconciler | None = None,
    ) -> Tool:
        """A tool from a plain function; its schema comes from the type hints.

        Example:
            >>> def book_ticket(place: str, date: str, quantity: int = 1) -> dict:
            ...     '''Book entry tickets.'''
            ...     return {"booking_id": "TK001"}
            >>> t = Tool.from_function(book_ticket, side_effect=True)
            >>> t.schema["function"]["parameters"]["required"]
            ['place', 'date']

        Args:
            fn: a callable whose parameters are all annotated and can be passed by keyword;
                ``Annotated[int, Field(description=…, ge=1)]`` adds constraints, and an
                ``Args:`` section of the docstring describes the parameters.
            name / description: default the function's ``__name__`` / docstring summary.
            side_effect / idempotent / key / reconcile: see the class attributes.

        Raises:
            ValidationError: a bad tool name, ``*args`` / ``**kwargs`` / positional-only or
                unannotated parameters, or annotations pydantic cannot build a schema for.
        """
        tool_name = getattr(fn, "__name__", "") if name is None else name
        if not isinstance(tool_name, str) or not TOOL_NAME.match(tool_name):
            raise ValidationError(
                f"tool name {tool_name!r}: use 1-64 letters, digits, '_' or '-' (what the model API accepts)")
        doc = inspect.getdoc(fn) or ""
        summary, arg_docs = _parse_doc(doc)
        params = _params_model(fn, tool_name, arg_docs)
        return cls(tool_name, fn, description if description is not None else summary, params,
                   side_effect=side_effect, idempotent=idempotent, key=key, reconcile=reconcile)

    @property
    def schema(self) -> ToolSchema:
        """The OpenAI tool schema: ``{"type": "function", "function": {name, description,
        parameters}}`` with the JSON schema of the arguments."""
        parameters = self.params.model_json_schema()
        parameters.pop("title", None)
        parameters.setdefault("properties", {})
        function: dict[str, Any] = {"name": self.name, "parameters": parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    def parse(self, arguments: str, *, max_chars: int = 100_000) -> tuple[dict[str, Any], dict[str, Any]]:
        """Validate the model's arguments text.

        Args:
            arguments: the JSON object text the model sent (``""`` = no arguments).
            max_chars: longer arguments are refused unparsed (characters).

        Returns:
            (keyword arguments for ``fn`` — validated Python values, the same arguments as
            JSON — what the ledger keys and step records keep).

        Raises:
            ValidationError: not text, too long, not JSON, not an object, a key repeated in
                one object, or values that do not match the schema strictly (no coercion
                between JSON types); the message lists the offending fields.
        """
        if not isinstance(arguments, str):
            raise ValidationError(f"arguments of {self.name} must be JSON text, got {type(arguments).__name__}")
        if len(arguments) > max_chars:
            raise ValidationError(
                f"arguments of {self.name} are {len(arguments)} characters, over the limit of "
                f"{max_chars} (agent.tool_arguments_max_chars)")
        if (repeated := _repeated_key(arguments)) is not None:
            raise ValidationError(f"invalid arguments for {self.name}: duplicate key {repeated!r} in an "
                                  "object (each argument once)")
        try:
            parsed = self.params.model_validate_json(arguments.strip() or "{}")
        except PydanticValidationError as exc:
            raise ValidationError(f"invalid arguments for {self.name}: {_describe(exc)}") from exc
        kwargs = {f: getattr(parsed, f) for f in type(parsed).model_fields}
        return kwargs, parsed.model_dump(mode="json")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself (a decorated function stays usable as a function)."""
        return self.fn(*args, **kwargs)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: bool = False,
    idempotent: bool = False,
    key: Callable[[dict[str, Any]], str] | None = None,
    reconcile: Reconciler | None = None,
) -> Any:
    """Decorator form of :meth:`Tool.from_function`: ``@tool`` or ``@tool(side_effect=True)``.

    Raises:
        ValidationError: see :meth:`Tool.from_function`.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description, side_effect=side_effect,
                                  idempotent=idempotent, key=key, reconcile=reconcile)

    return wrap if fn is None else wrap(fn)


def as_tool(item: Tool | Callable[..., Any]) -> Tool:
    """`item` itself when it is a :class:`Tool`, else a read-only tool made from the callable."""
    return item if isinstance(item, Tool) else Tool.from_function(item)


def render_result(value: Any) -> str:
    """A tool's return value as the text of its tool message: text as is, anything else JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _params_model(fn: Callable[..., Any], tool_name: str, arg_docs: dict[str, str]) -> type[BaseModel]:
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ValidationError(f"tool {tool_name}: cannot read its signature: {exc}") from exc
    fields: dict[str, Any] = {}
    for pname, p in sig.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ValidationError(
                f"tool {tool_name}: parameter {pname!r} must be passable by keyword "
                "(no *args, **kwargs or positional-only parameters)")
        if pname not in hints:
            raise ValidationError(
                f"tool {tool_name}: parameter {pname!r} has no type annotation (the schema is "
                "derived from type hints)")
        if pname.startswith("_") or hasattr(BaseModel, pname):
            raise ValidationError(f"tool {tool_name}: parameter name {pname!r} is reserved; rename it")
        default = ... if p.default is p.empty else p.default
        info = Field(default, description=arg_docs[pname]) if pname in arg_docs else Field(default)
        fields[pname] = (hints[pname], info)
    # strict: a model's true is not 1 bag, nor "2" two — a wrong type is an error the model sees
    # and corrects (JSON-mode strictness still reads dates, enums and tuples from their JSON)
    config = ConfigDict(extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=False, strict=True)
    try:
        model: type[BaseModel] = create_model(f"{tool_name}_arguments", __config__=config, **fields)
        model.model_json_schema()
    except Exception as exc:  # pydantic raises several kinds for types it cannot schema
        raise ValidationError(f"tool {tool_name}: no JSON schema for its parameters: {exc}") from exc
    return model


def _repeated_key(text: str) -> str | None:
    """The first key repeated inside one JSON object of `text` (its last value would win
    silently), or None — also when `text` is not JSON (the model's validation says why)."""
    try:
        json.loads(text or "{}", object_pairs_hook=unique_keys)
    except RepeatedKeyError as rep:
        return rep.key
    except (ValueError, RecursionError):
        return None
    return None


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """(the docstring before its first section, {parameter: description} of its Args: section)."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section = ""
    current = ""
    for line in doc.splitlines():
        m = _SECTION.match(line.strip())
        if m:
            section = m.group(1)
            continue
        if not section:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            a = _ARG_LINE.match(line)
            if a:
                current = a.group(1).lstrip("*")
                args[current] = a.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}"
    return "\n".join(summary).strip(), args


def _describe(exc: PydanticValidationError) -> str:
    """The first few argument errors as ``field: problem (got value)``."""
    parts = []
    for err in exc.errors()[:MAX_ERRORS_SHOWN]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        got = err.get("input")
        shown = "" if err["type"] in ("missing", "json_invalid") else f" (got {_excerpt(got)})"
        parts.append(f"{where}: {err['msg']}{shown}")
    more = len(exc.errors()) - MAX_ERRORS_SHOWN
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _excerpt(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"

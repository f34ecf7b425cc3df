"""Request bodies and pagination of the REST API (pydantic; the OpenAPI schema is built from them).

Bodies forbid unknown fields (a typo is a 422 naming it, not silently ignored), refuse NaN
and Infinity in numbers, and take timezone-aware datetimes only (a naive one is a 422: it is
ambiguous); counts, shares and flags must be JSON numbers and booleans (``"100"`` is a 422). Strings are checked for lone surrogates and NUL when the body is parsed
(:mod:`mindpalace.rest.body`); the facade validates the meaning (names, keys, roles).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Query, Request
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
)

from mindpalace.context import MAX_QUERIES
from mindpalace.errors import ValidationError

MAX_NAMES = 100  # records one read_records call may ask for (a prompt names a handful)
MAX_TOOLS = 128  # tool schemas one context request may carry (OpenAI accepts 128)
MAX_TEXT_CHARS = 200_000  # one text field; the body limit bounds the sum


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# Numbers and flags are taken as JSON numbers and booleans only (pydantic's StrictInt,
# StrictFloat, StrictBool): "100" or 1.0 for a count, or "yes" for a flag, is a 422 naming the
# field rather than a silent coercion (the settings refuse coercion the same way). Not the whole
# model strict: datetimes arrive as ISO strings.


Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
JsonObject = dict[str, JsonValue]


class MessageIn(Body):
    """One OpenAI-format chat message to append, with an optional aware timestamp."""

    message: JsonObject = Field(description='e.g. {"role": "user", "content": "5 days in Tokyo"}')
    timestamp: AwareDatetime | None = Field(None, description="When it was said (ISO 8601 with offset); default now.")


class StepIn(Body):
    goal: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    action: Text = ""


class EvaluationIn(Body):
    evaluation: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)] = Field(
        description="'success', 'failed' or free text.")
    analysis: Text = ""
    tool_outputs: list[Text] = Field(default_factory=list, max_length=100)


class ReadRecordsIn(Body):
    names: list[Annotated[str, Field(max_length=300)]] = Field(
        max_length=MAX_NAMES, description="Record names and references: step_12, message:17, history:5, fact:user:city.")


class RecallIn(Body):
    query: Annotated[str, Field(min_length=1, max_length=10_000)]
    k: Annotated[StrictInt, Field(ge=1, le=100)] | None = Field(None, description="Hits (default facts.recall_top_k).")


class FactIn(Body):
    key: Annotated[str, Field(min_length=1, max_length=300)] = Field(description="entity:attribute, e.g. user:home_city.")
    content: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    importance: Annotated[StrictFloat, Field(ge=0, le=1)] = 0.5
    source: Annotated[str, Field(max_length=1_000)] = ""


class ConstraintIn(Body):
    value: JsonValue = Field(description="Any JSON value except null (use DELETE to drop one).")
    source: Annotated[str, Field(min_length=1, max_length=50)] = Field(
        "user", description="Who sets it: only 'user' and 'developer' may (I7); any other source is refused (409) and the attempt recorded.")
    note: Annotated[str, Field(max_length=10_000)] = ""


class CheckpointIn(Body):
    step: Annotated[StrictInt, Field(ge=0)] | None = None
    artifacts: JsonObject | None = None
    pending: list[Text] | None = None
    snapshot: StrictBool = False


class ContextIn(Body):
    """A pure build (``Session.context``): nothing is written."""

    budget_tokens: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="Cap on the prompt (tokens); default the input budget.")
    system_prompt: Text | None = None
    tools: list[JsonObject] | None = Field(None, max_length=MAX_TOOLS)
    messages: list[JsonObject] | None = Field(None, max_length=10_000, description="A conversation to use instead of the stored one.")
    query: Text | Annotated[list[Text], Field(max_length=MAX_QUERIES)] | None = Field(
        None, description="What the recalled-memory block recalls for; default the newest user message.")


class TurnIn(Body):
    """The agent path (``Session.prepare``): consolidate if over budget, then build."""

    budget_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    system_prompt: Text | None = None
    tools: list[JsonObject] | None = Field(None, max_length=MAX_TOOLS)
    query: Text | Annotated[list[Text], Field(max_length=MAX_QUERIES)] | None = None


# -- pagination ----------------------------------------------------------------------------
Limit = Annotated[int | None, Query(ge=1, description="Items per page (default server.page_default_items).")]
Cursor = Annotated[str | None, Query(pattern=r"^[0-9]{1,12}$", description="next_cursor of the previous page.")]


def page_limit(request: Request, limit: int | None) -> int:
    """The page size: `limit`, or the default; over ``server.page_max_items`` is a 422."""
    settings = request.app.state.server_settings
    if limit is None:
        return int(settings.page_default_items)
    if limit > settings.page_max_items:
        raise ValidationError(f"limit {limit} is over the maximum of {settings.page_max_items} "
                              "items per page (server.page_max_items)")
    return limit


def paginate(items: Sequence[Any], limit: int, cursor: str | None) -> dict[str, Any]:
    """``{"items": [...], "next_cursor": str | None}`` — a page of `items` from offset `cursor`."""
    start = int(cursor or 0)
    page = list(items[start:start + limit])
    more = start + limit < len(items)
    return {"items": page, "next_cursor": str(start + limit) if more else None}

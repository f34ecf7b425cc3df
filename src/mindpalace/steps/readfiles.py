"""The ``read_files`` recall protocol (seed 000 ``BrainSearchFlow``): detect, load, re-invoke.

When the memory index shows a record whose description suggests it holds a needed detail, the
model answers ``{"read_files": {"files": ["step_5", "user_profile"]}}`` instead of acting. The
loop here detects that request (bare JSON, JSON inside a fenced ```json block, or a JSON object
embedded in prose), loads the records by name (unknown names are reported back by name, never
raised), appends their full text to the conversation and calls the model again — at most
``steps.max_read_files_reinvocations`` times per step. Every request stays within the prompt
budget: what is appended is counted, and records that do not fit are cut with their name and a
note saying how to read the rest (I9).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from mindpalace.blocks import ToolSchema, check_tools
from mindpalace.checks import require_int
from mindpalace.errors import ValidationError
from mindpalace.session.messages import validate_messages
from mindpalace.steps.records import ReadResult, render_record
from mindpalace.tokens import TokenCounter

MIN_CUT_TOKENS: Final = 16  # a cut record shows at least this much of itself, else it is only named
MAX_REQUEST_CANDIDATES: Final = 8  # JSON objects tried per reply: a real request is among the first
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_KEY = re.compile(r'\{\s*"read_files"\s*:')


def _names_of(obj: Any) -> list[str] | None:
    if not isinstance(obj, dict) or "read_files" not in obj:
        return None
    spec = obj["read_files"]
    files = spec.get("files") if isinstance(spec, dict) else spec
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list):
        return []
    return [f if isinstance(f, str) else json.dumps(f) for f in files]


def parse_read_files(reply: Any) -> list[str] | None:
    """The record names a model reply asks for, or None when it is not a read_files request.

    Looks at the whole reply as JSON, then each fenced code block, then any ``{"read_files":``
    object embedded in text. A request with a malformed ``files`` value yields ``[]``.
    """
    if not isinstance(reply, str) or "read_files" not in reply:
        return None
    candidates = [reply.strip(), *(m.group(1).strip() for m in _FENCE.finditer(reply))]
    for text in candidates[: MAX_REQUEST_CANDIDATES + 1]:
        try:
            names = _names_of(json.loads(text))
        except (ValueError, RecursionError):  # a reply nested past the parser's depth is no request
            continue
        if names is not None:
            return names
    decoder = json.JSONDecoder()
    for m in itertools.islice(_KEY.finditer(reply), MAX_REQUEST_CANDIDATES):
        try:
            obj, _ = decoder.raw_decode(reply, m.start())
        except (ValueError, RecursionError):
            continue
        names = _names_of(obj)
        if names is not None:
            return names
    return None


def request_text(names: Sequence[str]) -> str:
    """The canonical read_files request for `names` (what the assistant turn is recorded as)."""
    return json.dumps({"read_files": {"files": list(names)}}, ensure_ascii=False)


def recall_message(
    result: ReadResult, *, counter: TokenCounter | None = None, max_tokens: int | None = None
) -> dict[str, str] | None:
    """The user-role message carrying the loaded records (full markdown) back to the model.

    With `counter` and `max_tokens`, its content is at most `max_tokens` tokens: records are
    taken in request order; the first that does not fit whole is cut, with a note naming it and
    saying how to read the rest; any after it are listed by name as not shown. Missing names are
    always reported. Returns None when not even that (header, names, notes) fits.
    """
    if counter is None or max_tokens is None:
        head, missing, records = _parts(result)
        return _message(head, [body for _, body in records], [], missing)
    fitted = _fitted_recall(result, counter, max_tokens)
    return None if fitted is None else fitted[0]


def _parts(result: ReadResult) -> tuple[str, str, list[tuple[str, str]]]:
    head = (f"Requested records ({len(result.found)}):" if result.found
            else "None of the requested records exist.")
    missing = result.missing_line()
    return head, missing, [(name, render_record(r)) for name, r in result.found.items()]


def _fitted_recall(
    result: ReadResult, counter: TokenCounter, max_tokens: int
) -> tuple[dict[str, str], list[str]] | None:
    """(the recall message within `max_tokens`, names of the records it shows whole or cut)."""
    head, missing, records = _parts(result)

    def fits(message: dict[str, str]) -> bool:
        return counter.count(message["content"]) <= max_tokens

    shown: list[str] = []
    names: list[str] = []
    later: list[str] = []
    for i, (name, body) in enumerate(records):
        later = [n for n, _ in records[i + 1:]]
        if fits(_message(head, [*shown, body], later, missing)):
            shown.append(body)
            names.append(name)
            later = []
            continue
        cut = _cut_record(counter, name, body, max_tokens,
                          partial(_with_part, head, shown, later, missing))
        if cut is not None:
            shown.append(cut)
            names.append(name)
        else:
            later = [name, *later]
        break
    message = _message(head, shown, later, missing)
    return (message, names) if fits(message) else None


def _cut_record(
    counter: TokenCounter, name: str, body: str, max_tokens: int, compose: Callable[[str], dict[str, str]]
) -> str | None:
    """The head of `body` with a note, as long as `compose(part)` stays within `max_tokens`;
    None when no useful part (at least MIN_CUT_TOKENS of the record) fits."""
    total = counter.count(body)
    keep = max_tokens - counter.count(compose("")["content"]) - counter.count(_cut_note(name, total, total))
    while keep >= MIN_CUT_TOKENS:
        part = counter.truncate(body, keep)
        text = part + _cut_note(name, counter.count(part), total)
        over = counter.count(compose(text)["content"]) - max_tokens
        if over <= 0:
            return text
        keep -= over  # tokenizer seams at the joins: shrink by what is still over
    return None


def _with_part(head: str, shown: list[str], later: list[str], missing: str, part: str) -> dict[str, str]:
    return _message(head, [*shown, part], later, missing)


def _cut_note(name: str, shown: int, total: int) -> str:
    return (f"\n…[{name} cut to fit the context budget: {shown} of {total} tokens shown; "
            f"ask for {name} alone to read more]")


def _message(head: str, shown: list[str], unshown: list[str], missing: str) -> dict[str, str]:
    parts = [head, *shown]
    if unshown:
        parts.append("Not shown, no room left in this prompt: " + ", ".join(unshown)
                     + " (ask for fewer records at once)")
    if missing:
        parts.append(missing)
    body = "\n\n".join(parts[1:])
    return {"role": "user", "content": f"{head}\n\n{body}" if body else head}


@dataclass
class RecallOutcome:
    """What :func:`run_with_recall` did.

    Attributes:
        reply: the model's final reply (a normal answer, or the last read_files request when
            the re-invocation cap or the budget stopped the loop).
        messages: the conversation including appended recall messages (the caller's list is
            not modified).
        loaded: names of the records sent to the model (whole or cut), in order.
        missing: names that were requested but do not exist (or are invalid).
        reinvocations: model calls made after the first.
        capped: True when the cap stopped the loop while the model still asked for records.
        budget_exhausted: True when the prompt had no room left for a recall message even with
            every earlier recall exchange dropped, so the loop stopped (``messages`` is then the
            conversation of the last call made).
        prompt_tokens: ``count_messages(request, tools)`` of every model call, in order; each
            is ≤ the budget.
    """

    reply: Any
    messages: list[dict[str, Any]]
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    reinvocations: int = 0
    capped: bool = False
    budget_exhausted: bool = False
    prompt_tokens: list[int] = field(default_factory=list)


def run_with_recall(
    invoke: Callable[[list[dict[str, Any]]], Any],
    messages: Sequence[dict[str, Any]],
    read: Callable[[Iterable[str]], ReadResult],
    *,
    counter: TokenCounter,
    budget_tokens: int,
    max_reinvocations: int,
    tools: Sequence[ToolSchema] | None = None,
    reply_text: Callable[[Any], str] | None = None,
) -> RecallOutcome:
    """Call the model; while it asks for records (and the cap allows), load them and call again.

    Every request passed to `invoke` is within the budget: ``counter.count_messages(request,
    tools) <= budget_tokens``. A re-invocation appends the request (as the canonical read_files
    JSON) and a recall message fitted to the room left (see :func:`recall_message`); when even a
    cut-down recall message does not fit, the oldest earlier recall exchanges make room, and
    with none left the loop stops (``budget_exhausted``).

    Args:
        invoke: calls the model with a message list and returns its reply (str or Completion).
        messages: the prompt, built under `budget_tokens` (e.g. ``session.prepare(...).messages``).
        read: loads records by name, e.g. ``session.read_records``.
        counter: the token counter (I9).
        budget_tokens: the prompt budget of every model call (tokens).
        max_reinvocations: ``steps.max_read_files_reinvocations``.
        tools: the tool schemas sent with every call (counted).
        reply_text: the text of a reply; default the reply itself (str) or its ``.text``.

    Raises:
        ValidationError: `messages` are already over `budget_tokens`; the budget is not a
            positive int or `max_reinvocations` not an int ≥ 0; `messages` or `tools` are not
            what a model API takes (checked like ``Session.context`` checks them).
    """
    budget = require_int("budget_tokens", budget_tokens)
    cap = require_int("max_reinvocations", max_reinvocations, minimum=0)
    tool_list = check_tools(tools)
    text_of = reply_text or _reply_text
    convo = validate_messages(messages)
    base = len(convo)
    first = counter.count_messages(convo, tool_list)
    if first > budget:
        raise ValidationError(
            f"the prompt is {first} tokens, over budget_tokens {budget}; build it under the same "
            "budget (Session.prepare / Session.context)"
        )
    outcome = RecallOutcome(None, convo, prompt_tokens=[first])
    reply = invoke(list(convo))
    while (names := parse_read_files(text_of(reply))) is not None:
        if outcome.reinvocations >= cap:
            outcome.capped = True
            break
        result = read(names)
        outcome.missing.extend(result.missing)
        echo = {"role": "assistant", "content": request_text(names)}
        fitted = _fit_exchange(convo, base, echo, result, counter, budget, tool_list)
        if fitted is None:
            outcome.budget_exhausted = True
            break
        kept, recall, shown = fitted
        outcome.loaded.extend(shown)
        convo[:] = [*kept, echo, recall]
        outcome.prompt_tokens.append(counter.count_messages(convo, tool_list))
        reply = invoke(list(convo))
        outcome.reinvocations += 1
    outcome.reply = reply
    return outcome


def _fit_exchange(
    convo: list[dict[str, Any]], base: int, echo: dict[str, str], result: ReadResult,
    counter: TokenCounter, budget: int, tools: list[ToolSchema] | None,
) -> tuple[list[dict[str, Any]], dict[str, str], list[str]] | None:
    """(the conversation to keep, the recall message for `result`, the records it shows) fitted
    to the room left
    after `echo`: earlier recall exchanges (after the first `base` messages) are dropped, oldest
    first, until it fits; None (and `convo` untouched) when nothing fits."""
    kept = list(convo)
    while True:
        room = budget - counter.count_messages([*kept, echo, {"role": "user", "content": ""}], tools)
        fitted = _fitted_recall(result, counter, room) if room >= 0 else None
        if fitted is not None:
            return kept, *fitted
        if len(kept) <= base:
            return None
        del kept[base:base + 2]  # the oldest earlier exchange: request + its records


def _reply_text(reply: Any) -> str:
    return reply if isinstance(reply, str) else str(getattr(reply, "text", ""))

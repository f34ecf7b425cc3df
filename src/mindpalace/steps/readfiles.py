"""The ``read_files`` recall protocol (seed 000 ``BrainSearchFlow``): detect, load, re-invoke.

When the memory index shows a record whose description suggests it holds a needed detail, the
model answers ``{"read_files": {"files": ["step_5", "user_profile"]}}`` instead of acting. The
loop here detects that request (bare JSON, JSON inside a fenced ```json block, or a JSON object
embedded in prose), loads the records by name (unknown names are reported back by name, never
raised), appends their full text to the conversation and calls the model again — at most
``steps.max_read_files_reinvocations`` times per step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mindpalace.steps.records import ReadResult

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
    for text in candidates:
        try:
            names = _names_of(json.loads(text))
        except ValueError:
            continue
        if names is not None:
            return names
    decoder = json.JSONDecoder()
    for m in _KEY.finditer(reply):
        try:
            obj, _ = decoder.raw_decode(reply, m.start())
        except ValueError:
            continue
        names = _names_of(obj)
        if names is not None:
            return names
    return None


def recall_message(result: ReadResult) -> dict[str, str]:
    """The user-role message carrying the loaded records (full markdown) back to the model."""
    if result.found:
        head = f"Requested records ({len(result.found)}):"
    else:
        head = "None of the requested records exist."
    body = result.render()
    return {"role": "user", "content": f"{head}\n\n{body}" if body else head}


@dataclass
class RecallOutcome:
    """What :func:`run_with_recall` did.

    Attributes:
        reply: the model's final reply (a normal answer, or the last read_files request when
            the re-invocation cap was reached).
        messages: the conversation including appended recall messages (the caller's list is
            not modified).
        loaded: names of the records loaded, in order.
        missing: names that were requested but do not exist (or are invalid).
        reinvocations: model calls made after the first.
        capped: True when the cap stopped the loop while the model still asked for records.
    """

    reply: Any
    messages: list[dict[str, Any]]
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    reinvocations: int = 0
    capped: bool = False


def run_with_recall(
    invoke: Callable[[list[dict[str, Any]]], Any],
    messages: list[dict[str, Any]],
    read: Callable[[Iterable[str]], ReadResult],
    *,
    max_reinvocations: int,
    reply_text: Callable[[Any], str] = lambda r: r if isinstance(r, str) else getattr(r, "text", ""),
) -> RecallOutcome:
    """Call the model; while it asks for records (and the cap allows), load them and call again.

    Args:
        invoke: calls the model with a message list and returns its reply (str or Completion).
        messages: the prompt (e.g. ``session.context(...).messages``).
        read: loads records by name, e.g. ``session.read_records``.
        max_reinvocations: ``steps.max_read_files_reinvocations``.
    """
    convo = list(messages)
    reply = invoke(convo)
    outcome = RecallOutcome(reply, convo)
    while True:
        names = parse_read_files(reply_text(reply))
        if names is None:
            break
        if outcome.reinvocations >= max_reinvocations:
            outcome.capped = True
            break
        result = read(names)
        outcome.loaded.extend(result.found)
        outcome.missing.extend(result.missing)
        convo.append({"role": "assistant", "content": reply_text(reply)})
        convo.append(recall_message(result))
        reply = invoke(convo)
        outcome.reinvocations += 1
    outcome.reply = reply
    return outcome

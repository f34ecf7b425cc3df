"""Session messages: the durable, append-only OpenAI-format chat log of one session (seed 002).

Each message is one event on the session's ``messages`` stream (its 1-based index = the event
version, so the order is total and survives restarts) and one search document of kind
``message`` (ref = index) so recall can find it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mindpalace.blocks import one_line
from mindpalace.errors import ValidationError
from mindpalace.scope import Scope
from mindpalace.store import NewEvent, Store
from mindpalace.textsafe import clean_json
from mindpalace.timeutil import from_iso, require_stamp, to_iso, utcnow

STREAM = "messages"
ROLES = frozenset({"system", "user", "assistant", "tool"})
SYSTEM_NAMESPACE, SYSTEM_KEY = "messages", "latest_system"  # {"index": N} of the newest system message


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message with its 1-based position in the session and its timestamp (UTC)."""

    index: int
    message: dict[str, Any]
    timestamp: datetime


def validate_message(message: Any) -> dict[str, Any]:
    """Check the OpenAI chat shape and return a storable copy (NUL / lone surrogates escaped).

    Raises:
        ValidationError: not a dict, unknown role, content of the wrong type or missing (a
            system, user or tool message needs ``content``; an assistant message needs
            ``content`` or ``tool_calls``, as the chat API does), a ``name`` that
            is not one line of text, a tool message without ``tool_call_id``, malformed ``tool_calls`` (each needs an id and a function
            name; arguments must be a JSON string or object).
    """
    if not isinstance(message, dict):
        raise ValidationError(f"message must be a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValidationError(f"message role must be one of {sorted(ROLES)}, got {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise ValidationError(f"message content must be text or a list of parts, got {type(content).__name__}")
    if content is None and not _may_omit_content(message):
        raise ValidationError(f"a message with role {role!r} needs content (text or a list of parts), got {_excerpt(message)}"
                              + ("; an assistant message may instead carry tool_calls" if role == "assistant" else ""))
    if isinstance(content, list) and not all(isinstance(p, dict) and p.get("type") for p in content):
        raise ValidationError(
            'message content parts must be objects with a "type", e.g. {"type": "text", "text": "…"}'
        )
    if "name" in message:  # the speaker: shown as "<name> (role):" on a line of quoted memory
        name = message["name"]
        if not isinstance(name, str) or not name.strip() or "\n" in name or "\r" in name:
            raise ValidationError(f"message name (the speaker) must be one line of text, got {_excerpt(name)}; "
                                  "leave it out when there is none")
    if role == "tool" and not (isinstance(message.get("tool_call_id"), str) and message["tool_call_id"]):
        raise ValidationError("a tool message needs the tool_call_id (a string) of the call it answers")
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise ValidationError("tool_calls must be a list on an assistant message")
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not call.get("id") or not fn.get("name"):
                raise ValidationError(f"malformed tool call {_excerpt(call)}: needs id and function.name")
            if not isinstance(call["id"], str) or not isinstance(fn["name"], str):
                raise ValidationError(f"malformed tool call {_excerpt(call)}: id and function.name must be strings")
            args = fn.get("arguments", "")
            if not isinstance(args, str | dict):
                raise ValidationError(f"tool call {call['id']}: arguments must be a JSON string")
    clean = clean_json(message)
    try:  # what a model API (and the store) can take: JSON only, no NaN, no sets or objects
        json.dumps(clean, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"message is not JSON-serialisable: {exc}") from exc
    return clean


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """:func:`validate_message` over a list; the caller's list and dicts are never changed.

    Raises:
        ValidationError: not a list of messages, or ``messages[i]: <why>`` for the first bad one.
    """
    if not isinstance(messages, list | tuple):
        raise ValidationError(f"messages must be a list of chat messages, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        try:
            out.append(validate_message(m))
        except ValidationError as exc:
            raise ValidationError(f"messages[{i}]: {exc}") from exc
    return out


def _may_omit_content(message: dict[str, Any]) -> bool:
    """True for an assistant turn that carries something else instead: tool calls (or the
    legacy function_call), a refusal or audio — the only messages the chat API takes without
    content."""
    return message.get("role") == "assistant" and any(
        message.get(k) is not None for k in ("tool_calls", "function_call", "refusal", "audio"))


def _excerpt(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def message_text(message: dict[str, Any]) -> str:
    """Plain text of a message for search and summaries: ``speaker: content`` plus tool calls."""
    speaker = message.get("name") or message.get("role", "")
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    parts = [f"{speaker}: {content}" if content else str(speaker) + ":"]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        parts.append(f"[tool call {fn.get('name')}({args})]")
    return " ".join(parts)


# "[12] tool:" inside a message's text: it would read as the label of another message
_LABEL_LIKE = re.compile(r"\[(\d+)\](?= ?[^\n\[\]:]{1,80}:)")


def transcript_line(index: int, message: dict[str, Any]) -> str:
    """``[N] speaker: content`` on one line, as summarizers and raw archives read a range:
    :func:`message_text` with its line breaks written ``⏎`` (:func:`~mindpalace.blocks.one_line`)
    and a ``[M]`` in it that would read as another message's label written ``(M)`` — so text
    a tool or a user wrote cannot pass for a message of its own (``ok⏎[4] user: from now on
    you must …``). The stored message is unchanged; this is only how a transcript shows it."""
    return f"[{index}] " + one_line(_LABEL_LIKE.sub(r"(\1)", message_text(message)))


class MessageLog:
    """Append-only message log of one session scope. Thread- and process-safe via the store.

    Example:
        >>> log = session.messages                                         # doctest: +SKIP
        >>> log.add({"role": "user", "content": "5 days in Tokyo"})        # doctest: +SKIP
        1
    """

    def __init__(self, store: Store, scope: Scope) -> None:
        self.store = store
        self.scope = scope.require_concrete()

    def add(self, message: dict[str, Any], *, timestamp: datetime | None = None) -> int:
        """Append one message; returns its 1-based index.

        Raises:
            ValidationError: malformed message or naive `timestamp`; nothing is stored.
        """
        return self.add_many([message], timestamps=[timestamp])[0]

    def add_many(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        timestamps: Sequence[datetime | None] | None = None,
    ) -> list[int]:
        """Append messages atomically (all or none); returns their indexes."""
        stamps = list(timestamps) if timestamps is not None else [None] * len(messages)
        if len(stamps) != len(messages):
            raise ValidationError("timestamps must have one entry per message")
        now = utcnow()
        clean = [validate_message(m) for m in messages]
        when = [now if t is None else require_stamp("timestamp", t) for t in stamps]
        events = [
            NewEvent("message", {"message": m, "timestamp": to_iso(t)})
            for m, t in zip(clean, when, strict=True)
        ]
        with self.store.transaction():
            stored = self.store.append_events(self.scope, STREAM, events)
            for ev, m, t in zip(stored, clean, when, strict=True):
                self.store.index_document(
                    self.scope, "message", str(ev.version), message_text(m),
                    {"role": m.get("role"), "name": m.get("name"), "timestamp": to_iso(t),
                     "index": ev.version},
                )
            systems = [ev.version for ev, m in zip(stored, clean, strict=True) if m.get("role") == "system"]
            if systems:  # the prompt keeps it after older messages are archived (see latest_system)
                self.store.kv_put(self.scope, SYSTEM_NAMESPACE, SYSTEM_KEY, {"index": systems[-1]})
        return [ev.version for ev in stored]

    def latest_system(self) -> dict[str, Any] | None:
        """The newest ``system`` message of the whole session, archived or not (None if none).

        The context builder lifts it into the system prompt, so a system message stored at the
        start of a long session is not lost once consolidation archives that part of the log.
        """
        ref = self.store.kv_get(self.scope, SYSTEM_NAMESPACE, SYSTEM_KEY)
        if not ref:
            return None
        found = self.list(from_index=int(ref["index"]), to_index=int(ref["index"]))
        return found[0].message if found else None

    def list(self, *, from_index: int = 1, to_index: int | None = None) -> list[StoredMessage]:
        """Messages with from_index ≤ index ≤ to_index, oldest first."""
        return [
            StoredMessage(ev.version, ev.data["message"], from_iso(ev.data["timestamp"]))
            for ev in self.store.read_events(
                self.scope, STREAM, from_version=from_index, to_version=to_index
            )
        ]

    def count(self) -> int:
        """Number of messages in the session."""
        return self.store.stream_version(self.scope, STREAM)

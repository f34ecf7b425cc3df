"""Compression of a session's messages into archived exchanges (seed 003, GenericAgent L4).

GenericAgent's ``compress_session`` keeps the ``[USER]`` / ``[Agent]`` exchanges of a raw
session file and drops the system prompt and the assistant's redundant echo. Here the input is
the session's stored OpenAI-format messages and the output a list of :class:`Exchange`, one
per user turn (a user message and everything until the next user message):

* ``system`` messages are stripped (the prompt, not the conversation);
* assistant text is kept verbatim except reasoning blocks (``<think>…``) and *echoes*: an
  assistant text identical (whitespace-normalised) to the user's message or to an earlier
  assistant text of the same exchange says nothing new and is dropped;
* a tool call is kept as ``name(arguments)``, its arguments bounded;
* a tool result longer than ``tool_output_max_chars`` keeps its head with a reference to the
  full message (``message:<N>@<session>``) that stays in the session's log.

The exchange's identity is a content hash over the user / agent / tool turns and the
(tenant, user, agent) it belongs to, never over the session or message numbers: the same
exchange archived twice (a re-run, a replayed session) is one archive line.

Pure functions: nothing here reads or writes storage.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mindpalace.session.messages import StoredMessage
from mindpalace.summary import strip_reasoning
from mindpalace.timeutil import from_iso, to_iso

HASH_CHARS = 24  # 96 bits of sha256: collisions are out of reach for one user's archive
CALL_ARGS_MAX_CHARS = 300  # a tool call's arguments as archived (the log keeps them whole)


@dataclass(frozen=True, slots=True)
class Turn:
    """One kept message of an exchange.

    Attributes:
        role: ``user``, ``assistant`` or ``tool``.
        content: the text as archived (verbatim for user and assistant text; bounded for a
            long tool result, which then ends with a reference to the full message).
        name: the speaker's name (``name`` of the message) or the tool's name; '' when none.
        calls: the assistant's tool calls as ``name(arguments)`` (arguments bounded).
        message: the message's 1-based index in its session (not part of the hash).
    """

    role: str
    content: str
    name: str = ""
    calls: tuple[str, ...] = ()
    message: int = 0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content, "message": self.message}
        if self.name:
            data["name"] = self.name
        if self.calls:
            data["calls"] = list(self.calls)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Turn:
        return cls(str(data["role"]), str(data["content"]), str(data.get("name", "")),
                   tuple(str(c) for c in data.get("calls") or ()), int(data.get("message", 0)))

    def line(self) -> str:
        """``Caroline (user): text`` / ``assistant → tool get_order({"id": 1})`` / ``tool get_order: …``."""
        who = f"{self.name} ({self.role})" if self.name and self.role != "tool" else self.role
        if self.role == "tool":
            who = f"tool {self.name}" if self.name else "tool"
        parts = [f"{who}: {self.content}"] if self.content else []
        parts += [f"{who} → {call}" for call in self.calls]
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One archived exchange: a user turn and the agent's work and reply to it.

    Attributes:
        key: the content hash (``HASH_CHARS`` hex characters) — its ``archive:<key>`` reference.
        tenant / user / agent / session: where it was said (session = where first archived).
        first / last: the inclusive 1-based message range of the session it compresses.
        started_at / ended_at: timestamps (UTC) of its first and last message.
        turns: the kept messages, in order.
    """

    key: str
    tenant: str
    user: str
    agent: str
    session: str
    first: int
    last: int
    started_at: datetime
    ended_at: datetime
    turns: tuple[Turn, ...]

    @property
    def month(self) -> str:
        """``YYYY-MM`` of its first message: the monthly archive file it belongs to."""
        return f"{self.started_at:%Y-%m}"

    def text(self) -> str:
        """The exchange as one readable text (what recall indexes and ``archive:`` returns)."""
        return "\n".join(t.line() for t in self.turns if t.line())

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "tenant": self.tenant, "user": self.user, "agent": self.agent,
                "session": self.session, "messages": [self.first, self.last],
                "started_at": to_iso(self.started_at), "ended_at": to_iso(self.ended_at),
                "turns": [t.to_json() for t in self.turns]}

    @classmethod
    def from_json(cls, data: Any) -> Exchange:
        """Parse one archive line. Raises KeyError / TypeError / ValueError on a malformed one."""
        if not isinstance(data, dict):
            raise TypeError("archive line is not an object")
        first, last = data["messages"]
        return cls(str(data["key"]), str(data["tenant"]), str(data["user"]), str(data["agent"]),
                   str(data["session"]), int(first), int(last), from_iso(str(data["started_at"])),
                   from_iso(str(data["ended_at"])),
                   tuple(Turn.from_json(t) for t in data["turns"]))


def content_key(tenant: str, user: str, agent: str, turns: Sequence[Turn]) -> str:
    """The content hash of an exchange: sha256 over its owner and its turns (without message
    numbers), hex, ``HASH_CHARS`` characters."""
    body = [[t.role, t.name, t.content, list(t.calls)] for t in turns]
    raw = json.dumps([tenant, user, agent, body], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:HASH_CHARS]


def split_exchanges(messages: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Messages grouped into exchanges: each user message starts one; messages before the
    first user message (a system prompt, an agent's opening) form their own."""
    groups: list[list[StoredMessage]] = []
    for m in messages:
        if m.message.get("role") == "user" or not groups:
            groups.append([m])
        else:
            groups[-1].append(m)
    return groups


def compress(
    group: Sequence[StoredMessage], *, tenant: str, user: str, agent: str, session: str,
    tool_output_max_chars: int,
) -> Exchange | None:
    """One exchange from its messages (see the module doc); None when nothing is left to keep
    (a group of system messages only, or empty texts)."""
    turns: list[Turn] = []
    seen: set[str] = set()  # normalised texts already said in this exchange (echo detection)
    for m in group:
        turn = _turn(m, session, seen, tool_output_max_chars)
        if turn is not None:
            turns.append(turn)
    if not turns:
        return None
    return Exchange(content_key(tenant, user, agent, turns), tenant, user, agent, session,
                    group[0].index, group[-1].index, group[0].timestamp, group[-1].timestamp,
                    tuple(turns))


def _turn(m: StoredMessage, session: str, seen: set[str], cap: int) -> Turn | None:
    msg = m.message
    role = str(msg.get("role", ""))
    text = _text(msg.get("content"))
    name = str(msg.get("name") or "")
    if role == "system":
        return None
    if role == "user":
        seen.add(_norm(text))
        return Turn("user", text, name, message=m.index) if text else None
    if role == "assistant":
        text = strip_reasoning(text)
        if _norm(text) in seen:  # an echo of the question or of its own earlier text
            text = ""
        elif text:
            seen.add(_norm(text))
        calls = tuple(_call(c) for c in msg.get("tool_calls") or [])
        return Turn("assistant", text, name, calls, m.index) if text or calls else None
    if role == "tool":
        if len(text) > cap:
            ref = f"message:{m.index}@{session}"
            text = f"{text[:cap]} … [{len(text) - cap} more chars: read {ref}]"
        return Turn("tool", text, name, message=m.index)
    return None


def _call(call: Any) -> str:
    fn = call.get("function", {}) if isinstance(call, dict) else {}
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False, sort_keys=True)
    if len(args) > CALL_ARGS_MAX_CHARS:
        args = args[:CALL_ARGS_MAX_CHARS] + " …"
    return f"{fn.get('name', '?')}({args})"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text"))
    return content if isinstance(content, str) else ""


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()

"""The knowledge-update set's conversation shape, shared by both generators
(:mod:`mindpalace.eval.knowledge_update` and :mod:`mindpalace.eval.knowledge_update_varied`):
messages with their session and time, and each case's positions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(slots=True)
class Message:
    session: str
    role: str
    text: str
    when: datetime


@dataclass(slots=True)
class Conversation:
    user: str
    messages: list[Message] = field(default_factory=list)
    cases: list[tuple[str, str, int, int, bool]] = field(default_factory=list)
    # (subject, question, original position, correction position, same session)
    stale: list[tuple[int, ...]] = field(default_factory=list)
    # per case (when given): positions of every older value the correction must outrank
    # (the original and intermediate updates of a chain); empty = the original only


__all__ = ["Conversation", "Message"]

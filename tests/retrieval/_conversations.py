"""Small hand-written conversations for the retrieval tests that run the product path."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from mindpalace import Memory


def say_day_by_day(mem: Memory, statements: Iterable[tuple[str, str]], reply: str, start: datetime) -> None:
    """Write each ``(session, text)`` of `statements` as user "u" (agent "a") on its own day from
    `start`, each answered a minute later by the assistant's `reply`."""
    for n, (session, text) in enumerate(statements):
        s = mem.session(session, user="u", agent="a")
        s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
        s.add_message({"role": "assistant", "content": reply}, timestamp=start + timedelta(days=n, minutes=1))

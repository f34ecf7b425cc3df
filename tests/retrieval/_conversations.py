"""Small hand-written conversations for the retrieval tests that run the product path."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from mindpalace import Memory


@contextmanager
def said_day_by_day(
    folder: Path, statements: Iterable[tuple[str, str]], reply: str, start: datetime
) -> Iterator[Memory]:
    """A workspace in `folder` with the offline default embedder (``use``) where user "u"
    (agent "a") said each ``(session, text)`` of `statements` on its own day from `start`, each
    answered a minute later by the assistant's `reply`; closed on exit."""
    mem = Memory.open(folder / "ws", embed={"provider": "use"})
    try:
        for n, (session, text) in enumerate(statements):
            s = mem.session(session, user="u", agent="a")
            s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
            s.add_message({"role": "assistant", "content": reply}, timestamp=start + timedelta(days=n, minutes=1))
        yield mem
    finally:
        mem.close()

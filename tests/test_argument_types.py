"""A Session method given an argument of a wrong type raises a MindPalaceError naming the
argument, and stores nothing (new-user finding: a type fuzz of the facade with None, numbers,
objects, bytes, dicts and lists found raw TypeErrors — ``'>' not supported between 'NoneType'
and 'int'``, ``'NoneType' object is not iterable``, ``unhashable type: 'list'``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mindpalace import Memory, Session
from mindpalace.errors import MindPalaceError, ValidationError

WRONG = [None, 5, 1.5, object(), b"bytes", {"a": 1}, ["x"]]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    ws: Path = tmp_path_factory.mktemp("types") / "ws"
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        s = mem.session("s", user="u", agent="a")
        s.add_message({"role": "user", "content": "hello"})
        yield s


CALLS: dict[str, tuple[Callable[[Session, Any], Any], str]] = {
    "status(live_messages)": (lambda s, v: s.status(live_messages=v), "live_messages"),
    "steps.evaluate(tool_outputs)": (
        lambda s, v: s.steps.evaluate(s.steps.begin("g"), "success", tool_outputs=v), "tool_outputs"),
    "tasks(task_id)": (lambda s, v: s.tasks(v).state(), "task"),
    "clear_task(task_id)": (lambda s, v: s.clear_task(v), "task"),
}


RIGHT: dict[str, Callable[[Any], bool]] = {  # values of WRONG that are the right type for a call
    "status(live_messages)": lambda v: type(v) is int,
    "steps.evaluate(tool_outputs)": lambda v: isinstance(v, list),
    "clear_task(task_id)": lambda v: v is None,  # the default task
}
CASES = [(name, value) for name in CALLS for value in WRONG if not RIGHT.get(name, lambda _: False)(value)]


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}-{type(v).__name__}" for n, v in CASES])
def test_a_wrong_type_is_refused_naming_the_argument(session: Session, name: str, value: object) -> None:
    call, field = CALLS[name]
    with pytest.raises(MindPalaceError, match=field):
        call(session, value)


def test_the_right_types_still_work(session: Session) -> None:
    assert [m.index for m in session.status(live_messages=1).live] == [1]
    assert session.status(live_messages=0).live == []
    record = session.steps.evaluate(session.steps.begin("g"), "success", tool_outputs=("a", "b"))
    assert "[2] b" in record.body
    with pytest.raises(ValidationError, match="live_messages"):
        session.status(live_messages=-1)
    with pytest.raises(ValidationError, match="live_messages"):
        session.status(live_messages=True)

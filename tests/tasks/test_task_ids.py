"""Default task ids: every session, whatever its id, has a usable default task."""

from __future__ import annotations

from mindpalace import Memory
from mindpalace.tasks.task import default_task_id


def test_valid_session_id_is_the_task_id() -> None:
    assert default_task_id("trip-42") == "trip-42"


def test_session_id_with_spaces_gets_a_stable_derived_task_id(memory: Memory) -> None:
    s = memory.session("per run 500:0")
    assert s.task.id == default_task_id("per run 500:0") != default_task_id("per run 500:1")
    s.add_message({"role": "user", "content": "hello"})
    assert s.context(500).report.total_tokens <= 500  # context builds (constraints block included)

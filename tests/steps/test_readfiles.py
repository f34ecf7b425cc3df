"""The read_files protocol: detection (plain, fenced, embedded), loading, capped re-invocation."""

from __future__ import annotations

from typing import Any

import pytest

from mindpalace import Memory
from mindpalace.steps import parse_read_files, run_with_recall
from mindpalace.testing import wiring

from .conftest import new_session, run_steps


class TestParse:
    @pytest.mark.parametrize(
        ("reply", "names"),
        [
            ('{"read_files": {"files": ["step_5", "user_profile"]}}', ["step_5", "user_profile"]),
            ('I need details.\n```json\n{"read_files": {"files": ["step_2"]}}\n```\n', ["step_2"]),
            ('```\n{"read_files": {"files": ["step_2"]}}\n```', ["step_2"]),
            ('Let me check {"read_files": {"files": ["step_9"]}} first.', ["step_9"]),
            ('{"read_files": {"files": "step_1"}}', ["step_1"]),
            ('{"read_files": {"files": 3}}', []),
        ],
    )
    def test_requests_are_found_wherever_the_model_puts_them(self, reply: str, names: list[str]) -> None:
        assert parse_read_files(reply) == names

    @pytest.mark.parametrize("reply", ["book the flight", '{"analysis": "read_files later"}', None, 42, "{read_files"])
    def test_anything_else_is_not_a_request(self, reply: Any) -> None:
        assert parse_read_files(reply) is None


class TestRecallLoop:
    def test_records_are_loaded_unknown_names_reported_and_the_model_called_again(self, small_memory: Memory) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        run_steps(steps, 3)
        seen: list[list[dict[str, Any]]] = []
        replies = iter(['{"read_files": {"files": ["step_2", "step_99"]}}', "final answer"])

        def invoke(messages: list[dict[str, Any]]) -> str:
            seen.append(messages)
            return next(replies)

        out = run_with_recall(invoke, [{"role": "user", "content": "go"}], steps.read_records, max_reinvocations=3)
        assert out.reply == "final answer"
        assert (out.loaded, out.missing, out.reinvocations, out.capped) == (["step_2"], ["step_99"], 1, False)
        recall = seen[1][-1]["content"]
        assert "name: step_2" in recall and "R0001" in recall and recall.endswith("Not found: step_99")

    def test_re_invocations_are_capped_per_step(self, small_memory: Memory) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        calls = []

        def invoke(messages: list[dict[str, Any]]) -> str:
            calls.append(1)
            return '{"read_files": {"files": ["nothing_here"]}}'

        out = run_with_recall(invoke, [{"role": "user", "content": "go"}], steps.read_records, max_reinvocations=2)
        assert len(calls) == 3 and out.reinvocations == 2 and out.capped
        assert out.missing == ["nothing_here", "nothing_here"]

"""The read_files protocol: detection (plain, fenced, embedded), loading, capped re-invocation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import ContextBudgetError, ValidationError
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

        out = run_with_recall(invoke, [{"role": "user", "content": "go"}], steps.read_records,
                              counter=small_memory.tokens, budget_tokens=10_000, max_reinvocations=3)
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

        out = run_with_recall(invoke, [{"role": "user", "content": "go"}], steps.read_records,
                              counter=small_memory.tokens, budget_tokens=10_000, max_reinvocations=2)
        assert len(calls) == 3 and out.reinvocations == 2 and out.capped
        assert out.missing == ["nothing_here", "nothing_here"]


def chat(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"turn {i}: " + "the user asked about reservations " * 3}
            for i in range(n)]


class TestBudget:
    def test_the_documented_failure_stays_within_the_budget(self, small_memory: Memory) -> None:
        s = new_session(small_memory)
        steps = wiring.step_memory(s)
        sid = steps.begin("load the fare table")
        steps.evaluate(sid, "success", tool_outputs=["fare " + "row " * 4_000])  # ~4k tokens
        counter = small_memory.tokens
        # query=[]: no recalled-memory block, which would otherwise fill the room the records
        # need (it already quotes an excerpt of step_1); the loop does not shrink it (yet)
        prompt = s.context(600, messages=chat(3), query=[]).messages
        sent: list[int] = []
        replies = iter(['{"read_files": {"files": ["step_1"]}}', "done"])

        def invoke(messages: list[dict[str, Any]]) -> str:
            sent.append(counter.count_messages(messages))
            return next(replies)

        out = run_with_recall(invoke, prompt, steps.read_records, counter=counter, budget_tokens=600,
                              max_reinvocations=3)
        assert out.reply == "done" and max(sent) <= 600 and sent == out.prompt_tokens
        recall = out.messages[-1]["content"]
        assert "step_1 cut to fit the context budget" in recall and "ask for step_1 alone" in recall

    def test_a_prompt_already_over_budget_is_refused(self, small_memory: Memory) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        with pytest.raises(ValidationError, match="over budget_tokens 50"):
            run_with_recall(lambda m: "x", chat(5), steps.read_records, counter=small_memory.tokens,
                            budget_tokens=50, max_reinvocations=1)

    def test_no_room_at_all_stops_the_loop(self, small_memory: Memory) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        run_steps(steps, 2)
        counter = small_memory.tokens
        prompt = chat(2)
        budget = counter.count_messages(prompt)  # nothing left for a request and its records
        calls: list[int] = []

        def invoke(messages: list[dict[str, Any]]) -> str:
            calls.append(counter.count_messages(messages))
            return '{"read_files": {"files": ["step_1"]}}'

        out = run_with_recall(invoke, prompt, steps.read_records, counter=counter,
                              budget_tokens=budget, max_reinvocations=3)
        assert out.budget_exhausted and calls == [budget] and out.reinvocations == 0
        assert out.messages == prompt and out.loaded == []


RECORD_SIZES = st.lists(st.integers(min_value=0, max_value=3_000), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=RECORD_SIZES, budget=st.integers(min_value=60, max_value=2_500),
       turns=st.integers(min_value=0, max_value=6), with_tools=st.booleans(),
       rounds=st.integers(min_value=1, max_value=4), missing=st.booleans())
def test_every_request_is_within_the_budget(
    small_memory: Memory, sizes: list[int], budget: int, turns: int, with_tools: bool, rounds: int,
    missing: bool,
) -> None:
    s = new_session(small_memory)
    steps = wiring.step_memory(s)
    for i, words in enumerate(sizes):
        steps.add_info(f"note_{i}", "Tokyo 酒店 " * words, description=f"note {i}")
    counter = small_memory.tokens
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}] if with_tools else None
    try:
        prompt = s.context(budget, tools=tools, messages=chat(turns)).messages
    except ContextBudgetError:
        return
    names = [f"note_{i}" for i in range(len(sizes))] + (["nope"] if missing else [])
    sent: list[int] = []

    def invoke(messages: list[dict[str, Any]]) -> str:
        sent.append(counter.count_messages(messages, tools))
        return json.dumps({"read_files": {"files": names}}) if len(sent) <= rounds else "answer"

    out = run_with_recall(invoke, prompt, steps.read_records, counter=counter, budget_tokens=budget,
                          max_reinvocations=rounds, tools=tools)
    assert sent and max(sent) <= budget
    assert sent == out.prompt_tokens
    for m in out.messages[len(prompt):]:
        if m["role"] == "user":  # every recall names what it could not show in full
            text = m["content"]
            assert all(n in text for n in names[: len(sizes)] if n in out.loaded)


class TestBadInput:
    @pytest.mark.parametrize("cap", [float("nan"), float("inf"), None, "2", True, -1, 1.5])
    def test_the_cap_must_be_an_int(self, small_memory: Memory, cap: Any) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        with pytest.raises(ValidationError, match="max_reinvocations"):
            run_with_recall(lambda m: '{"read_files": ["x"]}', chat(1), steps.read_records,
                            counter=small_memory.tokens, budget_tokens=500, max_reinvocations=cap)

    @pytest.mark.parametrize(
        ("messages", "tools", "why"),
        [
            (None, None, "list of chat messages"),
            ([1], None, r"messages\[0\]"),
            ("hello", None, "list of chat messages"),
            ([{"role": "bogus", "content": "x"}], None, "role"),
            ([{"role": "user", "content": "x", "extra": {1, 2}}], None, "JSON"),
            (chat(1), 5, "list of tool schemas"),
            (chat(1), "abc", "list of tool schemas"),
            (chat(1), [{"x": {1, 2}}], "JSON"),
            (chat(1), [{1: "x", "b": 2}], "JSON"),
            (chat(1), [{"a": float("nan")}], "JSON"),
        ],
    )
    def test_messages_and_tools_are_checked_like_a_context_build(
        self, small_memory: Memory, messages: Any, tools: Any, why: str
    ) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        with pytest.raises(ValidationError, match=why):
            run_with_recall(lambda m: "x", messages, steps.read_records, counter=small_memory.tokens,
                            budget_tokens=500, max_reinvocations=1, tools=tools)

    @pytest.mark.parametrize("reply", ['{"read_files": ' + "[" * 5000, "```json\n" + "[" * 5000 + "\n```",
                                       '{"read_files": {"files": ' + '{"a": ' * 3000])
    def test_a_reply_nested_past_the_parser_is_no_request(self, reply: str) -> None:
        assert parse_read_files(reply) is None

    def test_many_unclosed_requests_parse_quickly(self) -> None:
        reply = '{"read_files": "x ' * 40_000  # 720 KB of broken requests
        assert parse_read_files(reply) is None  # the first few candidates only, not every one


def test_the_outcome_is_what_the_model_saw(small_memory: Memory) -> None:
    s = new_session(small_memory)
    steps = wiring.step_memory(s)
    steps.add_info("small", "a short note", description="small")
    steps.add_info("huge", "fare row " * 3_000, description="huge")
    counter = small_memory.tokens
    prompt = chat(1)
    asks = iter(["small", "huge", "huge"])
    calls: list[list[dict[str, Any]]] = []

    def invoke(messages: list[dict[str, Any]]) -> str:
        calls.append(messages)
        name = next(asks, None)
        return "done" if name is None else json.dumps({"read_files": [name]})

    budget = counter.count_messages(prompt) + 60  # room for the small note, never the big one
    out = run_with_recall(invoke, prompt, steps.read_records, counter=counter, budget_tokens=budget,
                          max_reinvocations=5)
    assert max(out.prompt_tokens) <= budget and "huge" not in out.loaded  # only named, never sent
    assert out.messages == calls[-1]  # what the model last saw, not a pruned draft
    shown = "\n".join(str(m["content"]) for c in calls for m in c)
    assert all(name in shown for name in out.loaded)  # loaded = sent to the model

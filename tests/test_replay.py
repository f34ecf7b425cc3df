"""Replay of real agent transcripts: τ-bench runs, SWE-agent trajectories, OpenAI JSON/JSONL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.replay import load_transcripts, replay


@pytest.fixture
def mem(tmp_path: Path):
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}, steps={"budget_tokens": 300}) as m:
        yield m


def session(mem: Memory):
    return mem.session(uuid.uuid4().hex[:8])


@pytest.mark.integration
def test_tau_bench_turns_with_tool_calls_become_evaluated_steps(mem: Memory, shared_data: Path) -> None:
    runs = load_transcripts(shared_data / "tau-bench" / "gpt-4o-airline.json")
    assert len(runs) == 200
    s = session(mem)
    stats = replay(s, runs[:3], budget_tokens=2_500)
    tool_turns = sum(1 for t in runs[:3] for m in t.messages if m.get("role") == "assistant" and m.get("tool_calls"))
    assert stats.steps == tool_turns == s.steps.counters["steps_evaluated"]
    assert stats.messages == s.messages.count() == sum(len(t.messages) for t in runs[:3])
    assert stats.over_budget == 0 and stats.peak_prompt_tokens <= 2_500
    first_call = next(m for m in runs[0].messages if m.get("tool_calls"))
    body = s.read_records(["step_1"]).found["step_1"].body
    assert first_call["tool_calls"][0]["function"]["name"] in body and "Tool outputs:" in body


@pytest.mark.integration
def test_swe_agent_observations_evaluate_actions(mem: Memory, shared_data: Path) -> None:
    path = next((shared_data / "swe-agent").glob("ctf__crypto__BabyEncryption.traj"))
    s = session(mem)
    stats = replay(s, load_transcripts(path))
    actions = sum(1 for t in load_transcripts(path) for m in t.messages if m.get("_action"))
    assert stats.steps == actions
    assert s.steps.counters["steps_begun"] == actions


def test_openai_jsonl_with_a_missing_result_sweeps_the_orphan(mem: Memory, tmp_path: Path) -> None:
    msgs = [
        {"role": "user", "content": "find my booking"},
        {"role": "assistant", "content": "<summary>lookup booking</summary>", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error: no booking"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 2}'}}]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in msgs), encoding="utf-8")
    s = session(mem)
    stats = replay(s, load_transcripts(path))
    assert (stats.steps, stats.orphans) == (2, 1)
    assert s.steps.state.recent_text().splitlines() == [
        "Step 1 | Eval: failed | Goal: call lookup({})",
        'Step 2 | Eval: unknown | Goal: call lookup({"id":2})',
    ]
    assert s.steps.summary_lines == ["lookup booking", 'called tool lookup, args: {"id":2}']


def test_a_file_that_is_not_a_transcript_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}', encoding="utf-8")
    with pytest.raises(ValidationError, match="not a transcript"):
        load_transcripts(path)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"role": "alien", "content": "x"}, "role"),
        ({"role": "user", "content": {"a": 1}}, "content"),
        ({"role": "assistant", "content": None, "tool_calls": "oops"}, "tool_calls"),
        (5, "must be an object"),
    ],
)
def test_a_bad_message_halfway_is_refused_before_anything_is_stored(
    mem: Memory, tmp_path: Path, bad: object, why: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, bad]}), encoding="utf-8")
    s = session(mem)
    with pytest.raises(ValidationError, match=why) as err:
        replay(s, load_transcripts(path))
    assert "t.json" in str(err.value) and ("message 2" in str(err.value) or why == "must be an object")
    assert s.messages.count() == 0


@pytest.mark.parametrize("text", ["", "[]", '{"messages": []}'])
def test_an_empty_transcript_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationError, match="no messages"):
        load_transcripts(path)


def test_nul_and_lone_surrogates_in_a_tool_result_are_escaped_not_refused_halfway(
    mem: Memory, tmp_path: Path
) -> None:
    msgs = [
        {"role": "user", "content": "cat the file"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "bin \x00 out \ud800 end"},
        {"role": "assistant", "content": "done"},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"messages": msgs}), encoding="utf-8")  # JSON escapes both
    s = session(mem)
    stats = replay(s, load_transcripts(path))
    assert (stats.messages, stats.steps) == (4, 1) and s.messages.count() == 4
    body = s.read_records(["step_1"]).found["step_1"].body
    assert "bin \\x00 out \\ud800 end" in body

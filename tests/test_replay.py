"""Replay of real agent transcripts: τ-bench runs, SWE-agent trajectories, OpenAI JSON/JSONL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, ClassVar

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


class TestValidateWholeThenStore:
    """Issue 11: NaN / Infinity in message 2 or 3, deep nesting, or ``--budget -5`` stored the
    earlier messages before refusing, and a corrected re-run duplicated them."""

    GOOD: ClassVar[list[dict[str, Any]]] = [{"role": "user", "content": "5 days in Tokyo"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": {"q": 1}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
            {"role": "assistant", "content": "done"}]

    @pytest.mark.parametrize("index,path,token", [
        (2, ("tool_calls", 0, "function", "arguments", "q"), "NaN"),
        (3, ("content",), "[{\"type\": \"text\", \"text\": \"x\", \"score\": Infinity}]"),
        (4, ("content",), "[{\"type\": \"text\", \"text\": \"x\", \"p\": -Infinity}]"),
        (2, ("tool_calls", 0, "function", "arguments", "q"), "1e999"),
    ])
    def test_a_non_finite_number_is_refused_naming_file_and_message(
        self, mem: Memory, tmp_path: Path, index: int, path: tuple, token: str
    ) -> None:
        msgs = json.loads(json.dumps(self.GOOD))
        target = msgs[index - 1]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = "@@"
        file = tmp_path / "run.json"
        file.write_text(json.dumps(msgs).replace('"@@"', token))
        with pytest.raises(ValidationError, match=rf"run\.json: transcript 'run', message {index}: .*not a finite number"):
            load_transcripts(file)
        file.write_text(json.dumps(self.GOOD))  # corrected: the re-run stores each message once
        s = mem.session("run")
        replay(s, load_transcripts(file))
        assert s.messages.count() == len(self.GOOD)

    @pytest.mark.parametrize("name,text", [
        ("deep.json", "[" * 100_000 + "]" * 100_000),
        ("deep.jsonl", '{"role": "user", "content": "hi"}\n' + '{"x": ' * 100_000 + "1" + "}" * 100_000),
    ])
    def test_deeply_nested_json_is_a_validation_error(self, tmp_path: Path, name: str, text: str) -> None:
        file = tmp_path / name
        file.write_text(text)
        with pytest.raises(ValidationError, match="nested too deep"):
            load_transcripts(file)

    def test_moderately_deep_content_is_refused_by_depth(self, tmp_path: Path) -> None:
        file = tmp_path / "d.json"
        part = {"type": "text", "text": "x", "meta": json.loads("[" * 100 + "]" * 100)}
        file.write_text(json.dumps([{"role": "user", "content": "a"}, {"role": "user", "content": [part]}]))
        with pytest.raises(ValidationError, match=r"message 2: .*nested deeper than 64"):
            load_transcripts(file)

    def test_the_api_validates_every_transcript_before_the_first_write(self, mem: Memory) -> None:
        from mindpalace.replay import Transcript

        bad = [*self.GOOD[:2], {"role": "wizard", "content": "?"}]
        s = mem.session("api")
        with pytest.raises(ValidationError, match="transcript 'b', message 3"):
            replay(s, [Transcript("a", self.GOOD), Transcript("b", bad)])
        assert s.messages.count() == 0

    def test_a_negative_budget_is_refused_before_anything_is_stored(self, mem: Memory, tmp_path: Path) -> None:
        from typer.testing import CliRunner

        from mindpalace.cli import app

        s = mem.session("budget")
        with pytest.raises(ValidationError, match="budget_tokens must be an int >= 1"):
            replay(s, [load_transcripts_from(self.GOOD, tmp_path)], budget_tokens=-5)
        assert s.messages.count() == 0
        file = tmp_path / "b.json"
        file.write_text(json.dumps(self.GOOD))
        result = CliRunner().invoke(app, ["replay", str(file), "--budget", "-5", "-w", str(mem.workspace.root)])
        assert result.exit_code == 2
        assert mem.session("b").messages.count() == 0


def load_transcripts_from(messages: list, tmp_path: Path):
    file = tmp_path / "t.json"
    file.write_text(json.dumps(messages))
    return load_transcripts(file)[0]


def test_tool_call_arguments_that_are_a_hostile_json_string_replay_whole(mem: Memory, tmp_path: Path) -> None:
    # the arguments *string* nests 100,000 deep: the step line shows it as text; no RecursionError
    # after the first messages were stored
    deep = "[" * 100_000
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done"}]
    s = session(mem)
    replay(s, [load_transcripts_from(msgs, tmp_path)])
    assert s.messages.count() == 4

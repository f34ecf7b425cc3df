"""CLI: steps show, records list|show, context, replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app

MSGS = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "My user id is mia_li_3668."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"reservations": ["ZFA04Y"]}'},
    {"role": "assistant", "content": "You have reservation ZFA04Y."},
]


@pytest.fixture
def ws(tmp_path: Path) -> str:
    """An initialised workspace (commands never create one)."""
    root = tmp_path / "ws"
    Memory.open(root, embed={"provider": "none"}).close()
    return str(root)


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_replay_then_inspect_the_session(tmp_path: Path, ws: str) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(MSGS), encoding="utf-8")
    out = json.loads(run("replay", str(transcript), "-w", ws, "--session", "s1", "--budget", "2000", "--json"))
    assert (out["steps"], out["messages"], out["prompts_over_budget"]) == (1, 5, 0)
    shown = json.loads(run("steps", "show", "s1", "-w", ws, "--json"))
    assert shown["recent"] == [[1, 'Step 1 | Eval: success | Goal: call get_user_details({"user_id":"mia_li_3668"})']]
    assert shown["summary_lines"][-1] == "You have reservation ZFA04Y."
    listed = json.loads(run("records", "list", "s1", "-w", ws, "--json"))
    assert [r["name"] for r in listed] == ["step_1"]
    record = run("records", "show", "s1", "step_1", "-w", ws)
    assert record.startswith("---\nname: step_1\n") and "ZFA04Y" in record


def test_context_prints_the_prompt_and_a_token_table(tmp_path: Path, ws: str) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(MSGS), encoding="utf-8")
    run("replay", str(transcript), "-w", ws, "--session", "s1")
    out = run("context", "s1", "-w", ws, "--budget", "3000")
    assert "You are an airline agent." in out and "memory index" in out and "total" in out
    data = json.loads(run("context", "s1", "-w", ws, "--budget", "3000", "--json"))
    assert data["total_tokens"] == sum(t for _, t in data["blocks"]) <= 3000


def test_showing_an_unknown_record_fails_with_its_name(ws: str) -> None:
    result = CliRunner().invoke(app, ["records", "show", "s1", "step_9", "-w", ws])
    assert result.exit_code != 0
    assert "step_9" in str(result.exception)


def test_records_show_reads_the_references_a_prompt_names(tmp_path: Path, ws: str) -> None:
    # a cut tool result says "in full as message:4 — read it with read_files": the CLI reads it too
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(MSGS), encoding="utf-8")
    run("replay", str(transcript), "-w", ws, "--session", "s1")
    record = run("records", "show", "s1", "message:4", "-w", ws)
    assert "name: message:4" in record and '{"reservations": ["ZFA04Y"]}' in record
    result = CliRunner().invoke(app, ["records", "show", "s1", "message:99", "-w", ws])
    assert result.exit_code != 0 and "message:99" in str(result.exception)


@pytest.mark.parametrize("name", ["message:1–300", "message:1-300", "message:5–2"])
def test_a_message_group_it_cannot_read_is_explained_not_called_an_invalid_name(
        tmp_path: Path, ws: str, name: str) -> None:
    """A group reference over the limit or running backwards names the rule it broke; the
    record-name rules ("use letters, digits …") do not apply to it, and "unknown record"
    would send the user looking for messages that exist."""
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(MSGS), encoding="utf-8")
    run("replay", str(transcript), "-w", ws, "--session", "s1")
    assert "[2] user: My user id is mia_li_3668." in run("records", "show", "s1", "message:1–2", "-w", ws)
    result = CliRunner().invoke(app, ["records", "show", "s1", name, "-w", ws])
    assert result.exit_code != 0
    said = str(result.exception)
    assert name in said and "at most 200" in said and "letters, digits" not in said, said

"""CLI: `mindpalace chat` — one message, the REPL, corrections, errors — against the stub server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.testing.openai_stub import StubServer, api_error, chat, serve_stub, tool_call

ENTRY = [sys.executable, "-c", "from mindpalace.cli import main; main()"]


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with serve_stub() as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "none")
    monkeypatch.setenv("MINDPALACE_LLM__MAX_RETRIES", "0")
    ws = tmp_path / "ws"
    Memory.open(ws).close()
    return ws


def chat_args(workspace: Path, stub: StubServer, *extra: str) -> list[str]:
    return ["chat", "-w", str(workspace), "--session", "trip", "--user", "u1",
            "--base-url", stub.url, "--model", "stub", *extra]


def test_one_message_prints_the_reply_without_its_summary_tag(workspace: Path, stub: StubServer) -> None:
    stub.script(chat("Hello! <summary>greeted the user</summary>"))
    result = CliRunner().invoke(app, chat_args(workspace, stub, "--message", "hi"))
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello!\n"
    [req] = stub.requests
    assert req["json"]["model"] == "stub" and req["json"]["messages"][-1] == {"role": "user", "content": "hi"}


def test_json_output_reports_the_turn(workspace: Path, stub: StubServer) -> None:
    stub.script(chat("Hello! <summary>greeted</summary>"))
    result = CliRunner().invoke(app, chat_args(workspace, stub, "--message", "hi", "--json"))
    data = json.loads(result.stdout)
    assert data["reply"] == "Hello!" and data["stopped"] == "reply" and data["model_calls"] == 1
    assert data["prompt_tokens"][0] <= data["budget_tokens"]


def test_the_repl_answers_each_line_and_a_correction_reaches_the_next_prompt(
    workspace: Path, stub: StubServer
) -> None:
    stub.script(chat("One ticket planned. <summary>1</summary>"), chat("Two then. <summary>2</summary>"))
    lines = "plan Senso-ji\n\n/correct We are two people\ngo on\n/quit\nnever sent\n"
    result = CliRunner().invoke(app, chat_args(workspace, stub), input=lines)
    assert result.exit_code == 0, result.output
    assert result.stdout == "One ticket planned.\nTwo then.\n"
    assert len(stub.requests) == 2
    first = stub.requests[1]["json"]["messages"][0]
    assert first["role"] == "system" and "We are two people" in first["content"]
    with Memory.open(workspace) as mem:
        stored = [m.message["content"] for m in mem.session("trip", user="u1").messages.list()]
    assert stored[0] == "plan Senso-ji" and stored[2] == "go on" and "never sent" not in stored


def test_a_model_error_exits_1_with_its_message_and_the_turn_stays_open(
    workspace: Path, stub: StubServer
) -> None:
    stub.script(api_error(401, "invalid key"))
    out = subprocess.run([*ENTRY, *chat_args(workspace, stub, "--message", "hi")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stderr.startswith("error: ") and "HTTP 401" in out.stderr
    assert "Traceback" not in out.stderr
    stub.script(chat("Back. <summary>resumed</summary>"))
    result = CliRunner().invoke(app, chat_args(workspace, stub), input="")
    assert result.exit_code == 0 and result.stdout == "Back.\n"  # the open turn is continued first


def test_an_unknown_workspace_is_refused(tmp_path: Path, stub: StubServer) -> None:
    out = subprocess.run([*ENTRY, *chat_args(tmp_path / "nope", stub, "--message", "hi")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "not a mindpalace workspace" in out.stderr and stub.requests == []


def test_tools_are_loaded_from_module_colon_name(
    workspace: Path, stub: StubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mytools.py").write_text(
        "from mindpalace.agent import tool\n"
        "BOOKED = []\n"
        "@tool(side_effect=True)\n"
        "def book(place: str) -> str:\n"
        "    BOOKED.append(place)\n"
        "    return f'booked {place}'\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    stub.script(chat(None, tool_calls=[tool_call("book", {"place": "Senso-ji"}, id="c1")]),
                chat("Done. <summary>booked</summary>"))
    result = CliRunner().invoke(app, chat_args(workspace, stub, "--tool", "mytools:book", "-m", "book it"))
    assert result.exit_code == 0, result.output
    assert result.stdout == "Done.\n"
    import mytools  # type: ignore[import-not-found]

    assert mytools.BOOKED == ["Senso-ji"]
    assert [t["function"]["name"] for t in stub.requests[0]["json"]["tools"]] == ["book", "update_working_checkpoint"]


@pytest.mark.parametrize(("spec", "problem"), [("nocolon", "expected MODULE:NAME"),
                                               ("no_such_module_xyz:f", "No module named"),
                                               ("json:nope", "has no attribute"),
                                               ("json:__doc__", "is not callable")])
def test_a_bad_tool_spec_is_a_usage_error(workspace: Path, stub: StubServer, spec: str, problem: str) -> None:
    result = CliRunner().invoke(app, chat_args(workspace, stub, "--tool", spec, "-m", "hi"))
    assert result.exit_code == 2 and problem in result.output and stub.requests == []

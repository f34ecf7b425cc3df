"""CLI output is literal: user and stored text that looks like rich markup, an escape or an
emoji code (``[/bold]``, ``[red]x[/red]``, ``\\[``, ``:smile:``) prints exactly as it is.

It used to crash seven commands with rich's MarkupError (`remember` after it had stored the
fact), and ``[red]`` or ``:smile:`` silently vanished or turned into an emoji.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app, main
from mindpalace.store import Record

T = r"[/bold] [red]x[/red] \[ :smile:"  # every markup hazard in one value
SID = r"s[bold][red]x[red]\[:smile:"  # a session id (any printable text without "/": one path segment)
KEY = r"[red]x[/red]:a[/bold]\[:smile:"  # a fact key ('entity:attribute', already normal)
NAME = "x:smile:"  # record / constraint names allow letters, digits and _ . : @ + -
ENV = {"COLUMNS": "400", "MINDPALACE_EMBED__PROVIDER": "hashing"}  # no table wrapping


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "hashing")
    root = tmp_path / "ws"
    with Memory.open(root) as mem:
        s = mem.session(SID)
        s.add_message({"role": "system", "content": f"system {T}"})
        s.add_message({"role": "user", "content": f"user {T}"})
        s.add_message({"role": "assistant", "content": f"assistant {T}"})
        mem.store.put_record(Record(s.scope, NAME, "info", f"body {T}", description=f"desc {T}"))
        s.constraints.set(NAME, T, source="user")
        entry = s.tasks.ledger.start(s.task.id, "book", {"q": T})
        s.tasks.ledger.finish(entry, error=f"failed {T}")
        mem.history.append(s.scope, f"history {T}", kind="raw", messages=(1, 2))
    return root


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env=ENV)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_remember_recall_forget_print_keys_values_and_queries_literally(ws: Path) -> None:
    w = str(ws)
    out = invoke("remember", KEY, T, "-i", "0.9", "-s", SID, "-w", w)
    assert f"remembered {KEY} = {T} — long-term as {KEY}#00000001" in out
    out = invoke("recall", KEY, "-s", SID, "-w", w)
    assert f"recall: {KEY}" in out and f"{KEY}: {T}" in out
    out = invoke("recall", T, "-s", SID, "-w", w)  # the query itself in the title
    assert f"recall: {T}" in out
    assert invoke("forget", KEY, "-s", SID, "-w", w).strip() == f"forgot {KEY}"
    result = CliRunner().invoke(app, ["forget", KEY, "-s", SID, "-w", w], env=ENV)
    assert result.exit_code == 1 and result.output.strip() == f"nothing to forget for {KEY}"


def test_session_show_prints_the_session_id_and_stored_messages_literally(ws: Path) -> None:
    out = invoke("session", "show", SID, "-w", str(ws))
    assert f"session {SID}" in out
    for line in (f"#1 system: system {T}", f"#2 user: user {T}", f"#3 assistant: assistant {T}"):
        assert line in out


def test_context_and_prepare_print_the_prompt_literally(ws: Path) -> None:
    for command in ("context", "prepare"):
        out = invoke(command, SID, "-w", str(ws), "--system-prompt", f"prompt {T}")
        assert f"prompt {T}" in out and f"user {T}" in out and f"assistant {T}" in out
        assert f"context of session {SID}:" in " ".join(out.split())  # the title wraps


def test_steps_show_prints_the_session_id_and_summary_lines_literally(
    ws: Path, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([
        {"role": "user", "content": f"user {T}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": f"done {T}"},
    ]), encoding="utf-8")
    invoke("replay", str(transcript), "--session", SID, "-w", str(ws))
    out = invoke("steps", "show", SID, "-w", str(ws))
    assert f"session {SID}" in out and f"done {T}" in out


def test_records_list_and_show_print_names_and_descriptions_literally(ws: Path) -> None:
    out = invoke("records", "list", SID, "-w", str(ws))
    assert f"records of session {SID}" in out and NAME in out and f"desc {T}" in out
    out = invoke("records", "show", SID, NAME, "-w", str(ws))
    assert f"body {T}" in out and f"name: '{NAME}'" in out and f"description: 'desc {T}'" in out


def test_task_show_events_and_ledger_print_constraints_and_results_literally(ws: Path) -> None:
    value = json.dumps(T, ensure_ascii=False)
    out = invoke("task", "show", SID, "-w", str(ws))
    assert f"task {SID} (version" in out and f"{NAME} = {value} (user)" in out
    out = invoke("task", "events", SID, "-w", str(ws))
    assert f'"name": "{NAME}"' in out and value in out
    out = invoke("ledger", SID, "-w", str(ws))
    assert f"ledger of task {SID}" in out and f"failed {T}" in out


def test_history_tail_prints_session_ids_and_content_literally(ws: Path) -> None:
    out = invoke("history", "tail", "-w", str(ws))
    assert SID in out and f"history {T}" in out


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             *args: str) -> tuple[int, str]:
    """The console entry point in-process (its error printing included): (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["mindpalace", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return code if isinstance(code, int) else 1, capsys.readouterr().err


def test_error_messages_print_user_text_literally(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    missing = tmp_path / T
    code, err = run_main(monkeypatch, capsys, "recall", "q", "-w", str(missing))
    assert code == 1 and f"{missing} is not a mindpalace workspace" in err
    assert f"run `mindpalace init {missing}` first" in err
    code, err = run_main(monkeypatch, capsys, "remember", "[red]x[/red]", "v", "-w", str(ws))
    assert code == 1 and "fact key '[red]x[/red]' must look like 'entity:attribute'" in err
    code, err = run_main(monkeypatch, capsys, "records", "show", SID, "[/bold]:smile:",
                         "-w", str(ws))
    assert code == 1 and "invalid name '[/bold]:smile:'" in err
    assert err.startswith("error: ") and "Traceback" not in err

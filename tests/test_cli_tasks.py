"""CLI: `task show|events|resume`, `ledger`, `demo` — exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.errors import ValidationError


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    with Memory.open(root, embed={"provider": "none"}) as mem:
        s = mem.session("trip-42", user="u1", agent="planner")
        s.task.plan(["search Senso-ji", "book Senso-ji"])
        s.constraints.set("budget_per_night_cny", 2000, source="user")
        s.task.start_step(0, "search Senso-ji")
        s.task.finish_step(0, output="free entry")
        s.task.start_step(1, "book Senso-ji")
        s.tasks.ledger.start(s.task.id, "book_ticket", {"place": "Senso-ji"})  # died mid-call
    return root


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_task_show_json(ws: Path) -> None:
    result = invoke("task", "show", "trip-42", "-w", str(ws), "--json")
    assert result.exit_code == 0, result.output
    state = json.loads(result.output)
    assert state["constraints"]["budget_per_night_cny"]["value"] == 2000 and state["step"] == 1


def test_task_events_lists_versions(ws: Path) -> None:
    result = invoke("task", "events", "trip-42", "-w", str(ws), "--from-version", "2", "--limit", "2")
    assert result.exit_code == 0
    assert [line.split()[:2] for line in result.output.splitlines()] == [["2", "constraint_set"], ["3", "step_started"]]


def test_task_events_refuses_a_negative_limit(ws: Path) -> None:
    # --limit -1 sliced [: -1] and silently hid the newest event
    result = invoke("task", "events", "trip-42", "-w", str(ws), "--limit", "-1")
    assert result.exit_code == 2 and "--limit" in result.output


def test_task_resume_names_the_step_and_the_unknown_call(ws: Path) -> None:
    result = invoke("task", "resume", "trip-42", "-w", str(ws))
    assert result.exit_code == 0
    assert "next step 1 book Senso-ji (started before the crash; run it again)" in result.output
    assert "outcome unknown book_ticket:" in result.output


def test_ledger_json(ws: Path) -> None:
    result = invoke("ledger", "trip-42", "-w", str(ws), "--json")
    assert result.exit_code == 0
    [entry] = json.loads(result.output)
    assert (entry["tool"], entry["status"], entry["attempt"]) == ("book_ticket", "started", 1)


def test_unknown_task_exits_non_zero_with_a_message(ws: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from mindpalace.cli import main; main()", "task", "show", "nope", "-w", str(ws)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1 and "unknown task 'nope'" in proc.stderr


def test_demo_json_small_run(tmp_path: Path) -> None:
    result = invoke("demo", "-w", str(tmp_path / "demo"), "--steps", "120", "--json")
    assert result.exit_code == 0, result.output
    engine, baseline = json.loads(result.output[result.output.index("{"):])["reports"]
    assert engine["steps"] == 120 and engine["duplicates"] == 0 and engine["budget_violations"] == 0
    assert baseline["duplicates"] > 0 and baseline["budget_violations"] > 0


def test_task_resolve_settles_the_unknown_call(ws: Path) -> None:
    [entry] = json.loads(invoke("ledger", "trip-42", "-w", str(ws), "--json").output)
    result = invoke("task", "resolve", "trip-42", entry["key"], "-w", str(ws), "--result", '{"booking_id": "TK001"}')
    assert result.exit_code == 0 and "completed (reconciled by hand)" in result.output
    assert json.loads(invoke("task", "resume", "trip-42", "-w", str(ws), "--json").output)["unknown_calls"] == []


@pytest.mark.parametrize("bad", ["NaN", "1e999", '{"a": -Infinity}', "[" * 100_000])
def test_task_resolve_refuses_a_result_that_is_not_json_and_settles_nothing(ws: Path, bad: str) -> None:
    [entry] = json.loads(invoke("ledger", "trip-42", "-w", str(ws), "--json").output)
    result = invoke("task", "resolve", "trip-42", entry["key"], "-w", str(ws), "--result", bad)
    assert result.exit_code != 0 and isinstance(result.exception, ValidationError), result.exception
    assert "--result" in str(result.exception)
    [after] = json.loads(invoke("ledger", "trip-42", "-w", str(ws), "--json").output)
    assert after["status"] == "started"  # still unsettled: nothing was recorded


def test_task_resolve_needs_exactly_one_outcome(ws: Path) -> None:
    result = invoke("task", "resolve", "trip-42", "k", "-w", str(ws))
    assert result.exit_code != 0 and "exactly one" in str(result.exception)


def test_a_session_id_that_is_not_a_task_name_finds_that_sessions_task(tmp_path: Path) -> None:
    # Session.task of a Chinese session id is stored as session-<hash>; `task show 会话` used to
    # fail with "invalid name" and the hashed id appears nowhere.
    root = tmp_path / "ws"
    with Memory.open(root, embed={"provider": "none"}) as mem:
        mem.session("东京行程").constraints.set("budget_per_night_cny", 1800, source="user")
    for command in (("task", "show"), ("task", "resume"), ("ledger",)):
        result = invoke(*command, "东京行程", "-w", str(root))
        assert result.exit_code == 0, result.output
    state = json.loads(invoke("task", "show", "东京行程", "-w", str(root), "--json").output)
    assert state["constraints"]["budget_per_night_cny"]["value"] == 1800
    # `task events` read the argument's stream instead of the found task's (session-<hash>)
    events = json.loads(invoke("task", "events", "东京行程", "-w", str(root), "--json").output)
    assert [e["type"] for e in events] == ["constraint_set"]


def test_task_show_tells_a_running_call_from_an_unknown_outcome(ws: Path) -> None:
    from mindpalace.tasks.owner import claim

    result = invoke("task", "show", "trip-42", "-w", str(ws))
    assert result.exit_code == 0 and "book_ticket:" in _row(result.output, "outcome unknown")
    with claim() as owner, Memory.open(ws, embed={"provider": "none"}) as mem:
        s = mem.session("trip-42", user="u1", agent="planner")
        s.tasks.ledger.start(s.task.id, "send_mail", {"to": "x"}, idempotent=True, owner=owner)
        result = invoke("task", "show", "trip-42", "-w", str(ws))  # while this process runs it
    assert "send_mail:" in _row(result.output, "calls running")
    assert "send_mail:" not in _row(result.output, "outcome unknown")


def _row(output: str, name: str) -> str:
    return next((line for line in output.splitlines() if line.startswith(f"│ {name} ")), "")

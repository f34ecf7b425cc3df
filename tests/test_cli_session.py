"""CLI: `session show`, `history tail`, `compact` over a real workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.errors import NotFoundError

SMALL = {"context_window_tokens": 700, "max_completion_tokens": 100, "safety_buffer_tokens": 0}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "none")
    ws = tmp_path / "ws"
    with Memory.open(ws, session=SMALL) as mem:
        s = mem.session("trip", user="u1")
        for i in range(40):
            s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                           "content": f"turn {i}: flight UA{100 + i} to Tokyo costs {i * 50} CNY"})
        s.consolidator.maybe_consolidate()
    return ws


def run(*args: str) -> dict | list:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_session_show_reports_cursor_summary_and_live_messages(workspace: Path) -> None:
    data = run("session", "show", "trip", "--user", "u1", "-w", str(workspace), "-m", "2")
    assert data["messages"] == 40 and data["last_consolidated"] > 0
    assert data["history_entries"] == 1 and data["last_summary"]
    assert [m["index"] for m in data["live"]] == [39, 40]
    assert data["lease"] is None


def test_session_show_of_an_unknown_session_exits_1_naming_it(workspace: Path) -> None:
    # new-user finding: `session show trip` without --user printed "0 messages" and exited 0
    result = CliRunner().invoke(app, ["session", "show", "trip", "-w", str(workspace)])
    # (mindpalace.cli.main prints the MindPalaceError as "error: …" and exits 1)
    assert result.exit_code == 1 and isinstance(result.exception, NotFoundError)
    assert "unknown session 'trip'" in str(result.exception)


def test_history_tail_lists_the_newest_entries(workspace: Path) -> None:
    rows = run("history", "tail", "-n", "5", "-w", str(workspace))
    assert len(rows) == 1 and rows[0]["session"] == "trip" and rows[0]["kind"] in ("summary", "raw")
    assert rows[0]["messages"][0] == 1


@pytest.mark.parametrize("n", ["0", "-1"])
def test_history_tail_refuses_a_count_below_one_instead_of_saying_empty(workspace: Path, n: str) -> None:
    result = CliRunner().invoke(app, ["history", "tail", "-n", n, "-w", str(workspace)])
    assert result.exit_code == 2 and "history is empty" not in result.output


def test_compact_a_session_now_then_nothing_changes(workspace: Path) -> None:
    first = run("compact", "trip", "--user", "u1", "-w", str(workspace))
    assert first[0]["status"] == "compacted" and first[0]["archived_messages"] > 0
    again = run("compact", "trip", "--user", "u1", "-w", str(workspace))
    assert again[0]["status"] == "unchanged"


def test_compact_idle_skips_fresh_sessions(workspace: Path) -> None:
    rows = run("compact", "--idle", "-w", str(workspace))
    assert rows == [{"session": "trip", "status": "active", "archived_messages": 0, "entries": 0,
                     "last_consolidated": None}]


def test_compact_needs_a_session_or_idle(workspace: Path) -> None:
    result = CliRunner().invoke(app, ["compact", "-w", str(workspace)])
    assert result.exit_code != 0


def test_missing_workspace_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["history", "tail", "-w", str(tmp_path / "nope")])
    assert result.exit_code != 0

"""`context` is read-only; `prepare` is the agent's turn (consolidate, then build) — same output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app

SMALL = {"MINDPALACE_SESSION__CONTEXT_WINDOW_TOKENS": "700",
         "MINDPALACE_SESSION__MAX_COMPLETION_TOKENS": "100",
         "MINDPALACE_SESSION__SAFETY_BUFFER_TOKENS": "0",
         "MINDPALACE_EMBED__PROVIDER": "none"}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """40 stored messages, far over the configured 600-token input budget, none archived."""
    for name, value in SMALL.items():
        monkeypatch.setenv(name, value)
    ws = tmp_path / "ws"
    with Memory.open(ws) as mem:
        s = mem.session("trip", user="u1")
        for i in range(40):
            s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                           "content": f"turn {i}: flight UA{100 + i} to Tokyo costs {i * 50} CNY"})
    return ws


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def session_state(ws: Path) -> dict[str, Any]:
    data = json.loads(invoke("session", "show", "trip", "-u", "u1", "-w", str(ws), "--json"))
    return {k: data[k] for k in ("last_consolidated", "history_entries", "last_summary")}


def files(ws: Path) -> dict[str, bytes]:
    """Every file under history/ (history.jsonl, locks) with its bytes."""
    return {str(p.relative_to(ws)): p.read_bytes()
            for p in sorted((ws / "history").rglob("*")) if p.is_file()}


def test_context_on_an_over_budget_session_writes_nothing(workspace: Path) -> None:
    before_state, before_files = session_state(workspace), files(workspace)
    assert before_state["last_consolidated"] == 0
    out = invoke("context", "trip", "-u", "u1", "-w", str(workspace))
    assert "turn 39" in out and "total" in out
    data = json.loads(invoke("context", "trip", "-u", "u1", "-w", str(workspace), "--json"))
    assert set(data) == {"messages", "blocks", "total_tokens", "budget_tokens", "degradations", "recalled"}
    assert data["budget_tokens"] == 600 and data["total_tokens"] <= 600 and data["degradations"]
    invoke("context", "trip", "-u", "u1", "-w", str(workspace), "--budget", "300")
    assert session_state(workspace) == before_state
    assert files(workspace) == before_files


def test_prepare_archives_at_the_configured_budget_then_prints_the_prompt(workspace: Path) -> None:
    data = json.loads(invoke("prepare", "trip", "-u", "u1", "-w", str(workspace), "--json"))
    c = data["consolidation"]
    assert c["archived_messages"] > 0 and c["entries"] >= 1 and c["last_consolidated"] > 0
    assert c["budget_tokens"] == data["budget_tokens"] == 600
    assert len(c["history"]) == c["entries"]
    assert data["total_tokens"] <= 600
    state = session_state(workspace)
    assert state["last_consolidated"] == c["last_consolidated"]
    assert state["history_entries"] == c["entries"]
    rows = json.loads(invoke("history", "tail", "-w", str(workspace), "--json"))
    assert [r["cursor"] for r in rows] == c["history"]
    # the same budget again: nothing more to archive, and the text output says so
    out = invoke("prepare", "trip", "-u", "u1", "-w", str(workspace))
    assert f"nothing to consolidate (archived through #{c['last_consolidated']})" in out
    assert "turn 39" in out and "total" in out


def test_prepare_uses_the_budget_given(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINDPALACE_SESSION__CONTEXT_WINDOW_TOKENS", "100000")
    out = invoke("prepare", "trip", "-u", "u1", "-w", str(workspace))
    assert "nothing to consolidate (archived through #0)" in out
    out = invoke("prepare", "trip", "-u", "u1", "-w", str(workspace), "--budget", "500")
    assert "consolidated: archived" in out
    assert session_state(workspace)["last_consolidated"] > 0

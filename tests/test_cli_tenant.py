"""CLI --tenant for admin views: `history tail` narrows the workspace-wide history.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app

SMALL = {"context_window_tokens": 700, "max_completion_tokens": 100, "safety_buffer_tokens": 0}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "none")
    ws = tmp_path / "ws"
    with Memory.open(ws, session=SMALL) as mem:
        for tenant in ("acme", "globex"):
            s = mem.for_tenant(tenant).session(f"trip-{tenant}", user="u1")
            for i in range(40):
                s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                               "content": f"{tenant} turn {i}: flight UA{100 + i} costs {i * 50} CNY"})
            s.consolidator.maybe_consolidate()
    return ws


def tail(workspace: Path, *extra: str) -> list[dict]:
    result = CliRunner().invoke(app, ["history", "tail", "-w", str(workspace), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_history_tail_filters_by_tenant(workspace: Path) -> None:
    every = tail(workspace)
    assert {e["scope"]["tenant"] for e in every} == {"acme", "globex"}
    acme = tail(workspace, "--tenant", "acme")
    assert acme and {e["scope"]["tenant"] for e in acme} == {"acme"}
    assert {e["session"] for e in acme} == {"trip-acme"}
    assert tail(workspace, "--tenant", "nobody") == []

"""CLI: remember / recall / forget, exit codes and output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app

runner = CliRunner()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An initialised workspace (commands never create one)."""
    root = tmp_path / "ws"
    Memory.open(root).close()
    return root


def run(ws: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "-w", str(ws)], env={"MINDPALACE_EMBED__PROVIDER": "hashing"})
    return result.exit_code, result.output


def test_remember_recall_forget_round_trip(ws: Path) -> None:
    code, out = run(ws, "remember", "User:City", "Lisbon", "--importance", "0.9")
    assert code == 0 and "user:city" in out and "long-term as user:city#00000001" in out
    code, out = run(ws, "recall", "which city", "-k", "3", "--json")
    hits = json.loads(out)
    assert code == 0 and hits[0]["text"] == "user:city: Lisbon" and hits[0]["tier"] in {"working", "fact"}
    code, out = run(ws, "forget", "user:city")
    assert code == 0 and out.strip() == "forgot user:city"
    code, out = run(ws, "recall", "which city", "--json")
    assert code == 0 and json.loads(out) == []
    code, out = run(ws, "forget", "user:city")
    assert code == 1 and "nothing to forget" in out


def test_low_importance_is_kept_in_working_memory_only(ws: Path) -> None:
    code, out = run(ws, "remember", "scratch:note", "temp", "--importance", "0.1")
    assert code == 0 and "working memory only" in out


def test_remember_says_what_it_evicted_and_json_lists_it(ws: Path) -> None:
    for i in range(5):  # fill working memory (capacity 5)
        assert run(ws, "remember", f"note:n{i}", f"v{i}", "-i", "0.9")[0] == 0
    code, out = run(ws, "remember", "note:new", "fresh", "-i", "0.1")
    assert code == 0 and "remembered note:new = fresh — working memory only" in out
    assert "evicted note:n0 from working memory — still long-term as note:n0#00000001" in out
    code, out = run(ws, "remember", "note:newer", "x", "-i", "0.1", "--json")
    data = json.loads(out)
    assert code == 0 and data["key"] == "note:newer" and data["archived"] == []
    assert [f["key"] for f in data["evicted"]] == ["note:new"]  # the lowest item, not the new one


def test_bad_key_is_a_clear_error(ws: Path) -> None:
    result = runner.invoke(app, ["remember", "nokey", "x", "-w", str(ws)])
    assert result.exit_code != 0
    assert "entity:attribute" in str(result.exception) + result.output

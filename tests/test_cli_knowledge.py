"""CLI: `knowledge patch|show|log|diff|restore|sync` over a real workspace and its git repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "none")
    root = tmp_path / "ws"
    Memory.open(root).close()
    return root


def cli(ws: Path, *args: str, code: int = 0) -> str:
    """Output (and, for a refusal, the library error `main` prints) of one command."""
    result = CliRunner().invoke(app, [*args, "-w", str(ws)])
    assert result.exit_code == code, result.output + repr(result.exception)
    raised = result.exception if result.exception and not isinstance(result.exception, SystemExit) else None
    return result.output + (str(raised) if raised else "")


def test_patch_show_log_diff_restore(ws: Path) -> None:
    cli(ws, "knowledge", "patch", "USER.md", "--insert", "- likes tea", "-m", "said so", "-u", "ann")
    out = cli(ws, "knowledge", "patch", "USER.md", "--replace", "tea", "--with", "green tea",
              "-m", "more precise", "-u", "ann", "--author", "Ann Lee", "--json")
    commit = json.loads(out)["commit"]
    assert commit["author"] == "Ann Lee" and commit["files"] == ["USER.md"]
    assert cli(ws, "knowledge", "show", "USER.md", "-u", "ann") == "- likes green tea\n"
    log = json.loads(cli(ws, "knowledge", "log", "-u", "ann", "--json"))
    assert [c["message"].splitlines()[0] for c in log] == ["more precise", "said so"]
    diff = cli(ws, "knowledge", "diff", "HEAD", "-u", "ann")
    assert "-- likes tea" in diff and "+- likes green tea" in diff
    cli(ws, "knowledge", "restore", log[1]["sha"], "-u", "ann", "--reason", "undo")
    assert cli(ws, "knowledge", "show", "USER.md", "-u", "ann") == "- likes tea\n"
    listing = json.loads(cli(ws, "knowledge", "show", "-u", "ann", "--json"))
    assert listing["files"]["USER.md"]["lines"] == 1 and listing["dream_cursor"] == 0


def test_refusals_exit_1_with_the_reason(ws: Path) -> None:
    out = cli(ws, "knowledge", "patch", "L2_facts.md", "--insert", "- repo /srv/app", "-m", "x", "-u", "ann",
              code=1)
    assert "no-execution-no-memory" in out
    out = cli(ws, "knowledge", "patch", "USER.md", "--remove", "x", "-m", "x", "-u", "ann", code=1)
    assert "needs a reason" in out
    out = cli(ws, "knowledge", "patch", "../../etc/passwd", "--insert", "x", "-m", "x", "-u", "ann", code=1)
    assert "not allowed" in out
    assert "whose knowledge" in cli(ws, "knowledge", "show", code=1)


def test_sync_commits_hand_edits_and_fails_on_refused_ones(ws: Path) -> None:
    cli(ws, "knowledge", "patch", "USER.md", "--insert", "- likes tea", "-m", "seed", "-u", "ann")
    folder = ws / "knowledge" / "default" / "users" / "ann"
    (folder / "USER.md").write_text("- likes coffee\n")
    out = json.loads(cli(ws, "knowledge", "sync", "--json"))
    assert out[0]["committed"]["author"] == "hand-edit"
    (folder / "L1_index.md").write_text("".join(f"t{i} → L3/t{i}.md\n" for i in range(31)))
    out = cli(ws, "knowledge", "sync", "-u", "ann", code=1)
    assert "L1_index.md: refused" in out and "31 lines" in out

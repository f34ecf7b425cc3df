"""One way to open a workspace: every command but `init` and `demo` refuses a folder that is not
a mindpalace workspace (exit 1, "run `mindpalace init …` first") and creates nothing — a
mistyped ``-w`` used to create a new workspace (folder, mindpalace.toml, memory.db, a git
repository) and answer from it as if it were empty."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from mindpalace.cli import app, main

W = "{workspace}"  # replaced by the folder under test
TRANSCRIPT = "{transcript}"

COMMANDS: dict[str, list[str]] = {
    "remember": ["remember", "user:city", "Lisbon", "-w", W],
    "recall": ["recall", "city", "-w", W],
    "forget": ["forget", "user:city", "-w", W],
    "steps show": ["steps", "show", "s1", "-w", W],
    "records list": ["records", "list", "s1", "-w", W],
    "records show": ["records", "show", "s1", "step_1", "-w", W],
    "context": ["context", "s1", "-w", W],
    "prepare": ["prepare", "s1", "-w", W],
    "replay": ["replay", TRANSCRIPT, "--session", "s1", "-w", W],
    "session show": ["session", "show", "s1", "-w", W],
    "history tail": ["history", "tail", "-w", W],
    "compact": ["compact", "s1", "-w", W],
    "compact --idle": ["compact", "--idle", "-w", W],
    "task show": ["task", "show", "trip", "-w", W],
    "task events": ["task", "events", "trip", "-w", W],
    "task resume": ["task", "resume", "trip", "-w", W],
    "task resolve": ["task", "resolve", "trip", "k1", "--error", "never ran", "-w", W],
    "ledger": ["ledger", "trip", "-w", W],
    "status": ["status", W],
    "doctor": ["doctor", W],
    "embed sync": ["embed", "sync", W],
    "llm check": ["llm", "check", W],
    "mcp": ["mcp", "-w", W],
    "mcp --transport http": ["mcp", "-w", W, "--transport", "http", "--port", "0"],
    "keys create": ["keys", "create", "acme", "-w", W],
    "keys list": ["keys", "list", "-w", W],
    "keys revoke": ["keys", "revoke", "0123456789abcdef", "-w", W],
    "serve": ["serve", "-w", W, "--port", "0"],
    "chat": ["chat", "--session", "s1", "--message", "hi", "-w", W],
    "archive": ["archive", "--session", "s1", "-w", W],
    "archive --idle": ["archive", "--idle", "-w", W],
    "dream": ["dream", "-w", W],
    "dream --dry-run": ["dream", "--dry-run", "-w", W],
    "knowledge show": ["knowledge", "show", "-u", "u1", "-w", W],
    "knowledge log": ["knowledge", "log", "-w", W],
    "knowledge diff": ["knowledge", "diff", "HEAD", "-w", W],
    "knowledge restore": ["knowledge", "restore", "HEAD", "-u", "u1", "-w", W],
    "knowledge sync": ["knowledge", "sync", "-w", W],
    "knowledge patch": ["knowledge", "patch", "USER.md", "--insert", "x", "-m", "m", "-u", "u1", "-w", W],
    "worker": ["worker", "--once", "-w", W],
    "trace": ["trace", "user:city", "-w", W],
    "why": ["why", "s1", "-w", W],
}
CREATES_ON_PURPOSE = {"init", "demo"}
NO_WORKSPACE = {"eval locomo", "eval spans"}


def command_paths(group: typer.Typer) -> set[str]:
    """Every leaf command of the CLI, as "group sub" paths."""

    def walk(cmd: Any, prefix: str) -> set[str]:
        subs = getattr(cmd, "commands", None)  # a group (typer vendors click: duck-typed)
        if subs is None:
            return {prefix}
        return {p for name, sub in subs.items() for p in walk(sub, f"{prefix} {name}".strip())}

    return walk(typer.main.get_command(group), "")


def test_every_command_that_opens_a_workspace_is_covered() -> None:
    covered = {name.split(" --")[0] for name in COMMANDS}
    assert command_paths(app) - CREATES_ON_PURPOSE - NO_WORKSPACE == covered


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             args: list[str]) -> tuple[int, str]:
    """The console entry point in-process (its error printing included): (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["mindpalace", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def fill(args: list[str], workspace: Path, transcript: Path) -> list[str]:
    return [str(workspace) if a == W else str(transcript) if a == TRANSCRIPT else a for a in args]


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "transcript.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}]), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _no_env_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINDPALACE_WORKSPACE", raising=False)
    monkeypatch.setenv("COLUMNS", "400")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_missing_folder_is_refused_and_nothing_is_created(
    command: str, tmp_path: Path, transcript: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "typo" / "ws"
    code, err = run_main(monkeypatch, capsys, fill(COMMANDS[command], target, transcript))
    assert code == 1, err
    assert (f"error: {target} is not a mindpalace workspace; run `mindpalace init {target}` first"
            in err)
    assert "Traceback" not in err
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_empty_folder_is_refused_and_stays_empty(
    command: str, tmp_path: Path, transcript: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    code, err = run_main(monkeypatch, capsys, fill(COMMANDS[command], target, transcript))
    assert code == 1 and "is not a mindpalace workspace" in err, err
    assert list(target.iterdir()) == []


def test_the_default_workspace_is_the_current_folder_and_it_is_not_created_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = run_main(monkeypatch, capsys, ["recall", "city"])
    assert code == 1 and f"{tmp_path} is not a mindpalace workspace" in err
    assert list(tmp_path.iterdir()) == []


def test_init_then_every_reader_works(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    runner = CliRunner()
    assert runner.invoke(app, ["init", str(ws)]).exit_code == 0
    for args in (["recall", "city", "-w", str(ws), "--json"], ["history", "tail", "-w", str(ws)],
                 ["status", str(ws), "--json"]):
        result = runner.invoke(app, args, env={"MINDPALACE_EMBED__PROVIDER": "hashing"})
        assert result.exit_code == 0, result.output


def test_a_file_where_a_folder_belongs_is_a_clean_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    for args in (["demo", "-w", str(afile), "--steps", "120", "--no-baseline"],
                 ["status", str(afile)]):
        out = subprocess.run([sys.executable, "-m", "mindpalace.cli", *args], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 1, out.stderr
        assert "Traceback" not in out.stderr and out.stderr.startswith("error:")


def test_demo_refuses_fewer_than_120_steps(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "mindpalace.cli", "demo", "-w", str(tmp_path / "d"),
                          "--steps", "5"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "at least 120" in out.stderr

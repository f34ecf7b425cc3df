"""CLI: `mindpalace init` (idempotent) and `mindpalace status` (exact --json keys, clear errors)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.settings import CONFIG_FILENAME
from mindpalace.store import NewEvent, Record
from mindpalace.store.sqlite import SCHEMA_VERSION

STATUS_KEYS = {
    "workspace", "schema_version", "sessions", "events", "streams", "records", "facts",
    "kv_entries", "documents", "embeddings", "db_bytes", "workspace_bytes", "activity",
}
ACTIVITY_KEYS = {  # totals over the lineage log (mindpalace.lineage.activity)
    "prompts", "prompt_tokens_mean", "prompt_tokens_max", "prompt_budget_ratio_max",
    "compactions", "recalls", "written", "tombstoned", "knowledge_edits",
}


def git_log(repo: Path) -> list[str]:
    """Commit subjects newest first, read by the real git CLI (not by the library that wrote them)."""
    out = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


def run_main(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point (error mapping included), in a fresh process."""
    return subprocess.run(
        [sys.executable, "-c", "from mindpalace.cli import main; main()", *args],
        capture_output=True, text=True, timeout=120,
    )


class TestInit:
    def test_init_creates_the_workspace_layout(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        result = CliRunner().invoke(app, ["init", str(ws)])
        assert result.exit_code == 0, result.output
        assert "workspace ready at" in result.stdout
        for name in (CONFIG_FILENAME, "memory.db", "archive", "history", "knowledge/.git"):
            assert (ws / name).exists(), name

    def test_init_twice_keeps_config_data_and_history(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        runner = CliRunner()
        assert runner.invoke(app, ["init", str(ws)]).exit_code == 0
        (ws / CONFIG_FILENAME).write_text("[steps]\nbudget_tokens = 3000\n", encoding="utf-8")
        with Memory.open(ws) as mem:
            mem.store.kv_put(mem.scope(user="u"), "ns", "k", "kept")
        assert runner.invoke(app, ["init", str(ws)]).exit_code == 0
        assert (ws / CONFIG_FILENAME).read_text(encoding="utf-8") == "[steps]\nbudget_tokens = 3000\n"
        with Memory.open(ws) as mem:
            assert mem.store.kv_get(mem.scope(user="u"), "ns", "k") == "kept"
            assert mem.settings.steps.budget_tokens == 3000
        assert git_log(ws / "knowledge") == ["init knowledge repository"]

    def test_init_on_a_file_fails_with_a_message(self, tmp_path: Path) -> None:
        target = tmp_path / "not-a-dir"
        target.write_text("x")
        out = run_main("init", str(target))
        assert out.returncode == 1
        assert "exists and is not a folder" in out.stderr and "Traceback" not in out.stderr


class TestStatus:
    def test_json_has_exactly_the_documented_keys(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        CliRunner().invoke(app, ["init", str(ws)])
        result = CliRunner().invoke(app, ["status", str(ws), "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert set(data) == STATUS_KEYS
        assert data["workspace"] == str(ws.resolve())
        assert (data["schema_version"], data["events"], data["records"], data["sessions"]) == (
            SCHEMA_VERSION, 0, 0, 0)
        assert data["db_bytes"] > 0 and data["embeddings"] == {}
        assert set(data["activity"]) == ACTIVITY_KEYS and data["activity"]["prompts"] == 0

    def test_counts_follow_the_store(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        with Memory.open(ws) as mem:
            s = mem.session("trip-42", user="u1", agent="planner")
            mem.store.append_events(s.scope, "log", [NewEvent("a"), NewEvent("b")])
            mem.store.put_record(Record(s.scope, "step_1", "step", "searched opening hours"))
            mem.store.kv_put(mem.scope(user="u1"), "facts", "hotel:budget", 2000)
        data = json.loads(CliRunner().invoke(app, ["status", str(ws), "--json"]).stdout)
        assert {k: data[k] for k in ("events", "streams", "records", "documents", "facts", "sessions")} == {
            "events": 2, "streams": 1, "records": 1, "documents": 1, "facts": 1, "sessions": 1}

    def test_the_folder_argument_defaults_to_mindpalace_workspace(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # like every -w option: `MINDPALACE_WORKSPACE=ws mindpalace status` used to read the cwd
        (tmp_path / "cwd").mkdir()
        monkeypatch.chdir(tmp_path / "cwd")
        ws = tmp_path / "ws"
        env = {"MINDPALACE_WORKSPACE": str(ws)}
        assert CliRunner().invoke(app, ["init"], env=env).exit_code == 0
        result = CliRunner().invoke(app, ["status", "--json"], env=env)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["workspace"] == str(ws.resolve())
        assert list((tmp_path / "cwd").iterdir()) == []

    def test_table_output_lists_the_items(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        CliRunner().invoke(app, ["init", str(ws)])
        result = CliRunner().invoke(app, ["status", str(ws)])
        assert result.exit_code == 0
        assert "schema_version" in result.stdout and "events" in result.stdout

    def test_non_workspace_exits_1_with_a_hint_and_creates_nothing(self, tmp_path: Path) -> None:
        target = tmp_path / "nothing-here"
        out = run_main("status", str(target))
        assert out.returncode == 1
        assert "is not a mindpalace workspace" in out.stderr and "mindpalace init" in out.stderr
        assert "Traceback" not in out.stderr
        assert not target.exists()

    def test_corrupt_config_exits_1_naming_file_and_key(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        CliRunner().invoke(app, ["init", str(ws)])
        (ws / CONFIG_FILENAME).write_text('[steps]\nbudget_tokens = "abc"\n', encoding="utf-8")
        out = run_main("status", str(ws))
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1  # one line: paths and keys are never wrapped
        assert str(ws / CONFIG_FILENAME) in out.stderr and "steps.budget_tokens" in out.stderr
        assert "expected int >= 50" in out.stderr

    def test_messages_with_brackets_are_printed_verbatim(self, tmp_path: Path) -> None:
        ws = tmp_path / "ws"
        CliRunner().invoke(app, ["init", str(ws)])
        (ws / CONFIG_FILENAME).write_text("steps = 3\n", encoding="utf-8")
        out = run_main("status", str(ws))
        assert out.returncode == 1 and "expected a [steps] table" in out.stderr

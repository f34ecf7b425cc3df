"""Workspace folder: layout, idempotent init, concurrent first opens, interrupted inits."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

import mindpalace.workspace as workspace_module
from mindpalace import Memory
from mindpalace.errors import ConfigError, StoreError, WorkspaceError
from mindpalace.settings import CONFIG_FILENAME, default_toml
from mindpalace.workspace import INIT_LOCK_FILENAME, Workspace

# Waits for "go" on stdin so that every process initialises the same fresh folder at once.
INIT_WORKER = r"""
import sys
from mindpalace.workspace import Workspace
sys.stdin.readline()
Workspace.init(sys.argv[1])
"""


def git_log(repo: Path) -> list[str]:
    """Commit subjects newest first, read by the real git CLI (not by the library that wrote them)."""
    out = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], check=True,
                         capture_output=True, text=True).stdout
    return out.splitlines()


class TestInit:
    def test_concurrent_inits_of_a_fresh_folder_all_succeed_once(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        procs = [
            subprocess.Popen([sys.executable, "-c", INIT_WORKER, str(root)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        for p in procs:  # all are started (imports done in parallel) before any may go
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        assert (root / CONFIG_FILENAME).read_text(encoding="utf-8") == default_toml()
        assert git_log(root / "knowledge") == ["init knowledge repository"]

    def test_init_interrupted_before_the_first_commit_is_completed(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        (root / "knowledge").mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(root / "knowledge")], check=True)  # crashed right after `git init`
        Workspace.init(root)
        assert git_log(root / "knowledge") == ["init knowledge repository"]

    def test_a_held_init_lock_times_out_with_a_hint(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        root = tmp_path / "ws"
        root.mkdir()
        monkeypatch.setattr(workspace_module, "INIT_LOCK_TIMEOUT_SECONDS", 0.05)
        with FileLock(str(root / INIT_LOCK_FILENAME)), pytest.raises(WorkspaceError, match=INIT_LOCK_FILENAME):
            Workspace.init(root)

    def test_init_keeps_an_existing_config(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        root.mkdir()
        (root / CONFIG_FILENAME).write_text("[steps]\nbudget_tokens = 900\n", encoding="utf-8")
        ws = Workspace.init(root)
        assert ws.settings.steps.budget_tokens == 900
        assert (root / CONFIG_FILENAME).read_text(encoding="utf-8") == "[steps]\nbudget_tokens = 900\n"
        assert not [p for p in root.iterdir() if p.name.startswith(f".{CONFIG_FILENAME}.")]


class TestOpen:
    def test_open_without_create_refuses_a_plain_folder(self, tmp_path: Path) -> None:
        with pytest.raises(WorkspaceError, match="mindpalace init"):
            Workspace.open(tmp_path, create=False)
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.parametrize("path", ["", "  "])
    def test_an_empty_path_string_is_refused_not_taken_as_the_cwd(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
    ) -> None:
        monkeypatch.chdir(tmp_path)
        for make in (Workspace.open, Workspace.init):
            with pytest.raises(WorkspaceError, match="empty"):
                make(path)
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.parametrize("kind", ["nul", "symlink loop"])
    def test_a_path_that_cannot_be_a_folder_is_a_workspace_error(self, tmp_path: Path, kind: str) -> None:
        if kind == "nul":
            path = str(tmp_path / "a\x00b")
        else:
            (tmp_path / "l1").symlink_to(tmp_path / "l2")
            (tmp_path / "l2").symlink_to(tmp_path / "l1")
            path = str(tmp_path / "l1")
        for make in (Workspace.open, Workspace.init):
            with pytest.raises(WorkspaceError, match="workspace path"):
                make(path)

    def test_open_creates_the_layout_by_default(self, tmp_path: Path) -> None:
        ws = Workspace.open(tmp_path / "new")
        for path in (ws.config_path, ws.archive_dir, ws.history_dir, ws.knowledge_dir / ".git"):
            assert path.exists()


class TestNotAWorkspace:
    def test_another_applications_database_is_never_migrated(self, tmp_path: Path) -> None:
        (tmp_path / "app").mkdir()
        db = tmp_path / "app" / "memory.db"
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('mine')")
        conn.commit()
        conn.close()
        before = db.read_bytes()
        with pytest.raises(StoreError, match="another application"):
            Memory.open(tmp_path / "app", create=False)
        with pytest.raises(StoreError, match="another application"):
            Memory.open(tmp_path / "app")
        assert db.read_bytes() == before

    def test_settings_alone_are_not_a_workspace_for_a_reader(self, tmp_path: Path) -> None:
        (tmp_path / "cfg").mkdir()
        (tmp_path / "cfg" / "mindpalace.toml").write_text("[steps]\nbudget_tokens = 500\n")
        with pytest.raises(WorkspaceError, match="not a mindpalace workspace"):
            Memory.open(tmp_path / "cfg", create=False)
        assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["mindpalace.toml"]
        with Memory.open(tmp_path / "cfg") as m:  # create completes it and keeps the settings
            assert m.settings.steps.budget_tokens == 500

    def test_a_settings_path_that_is_a_folder_is_a_config_error(self, tmp_path: Path) -> None:
        (tmp_path / "odd" / "mindpalace.toml").mkdir(parents=True)
        with pytest.raises(ConfigError, match="cannot be read"):
            Memory.open(tmp_path / "odd")

"""Workspace: the one folder an embedded mindpalace lives in.

    ws/
    ├── mindpalace.toml     settings (optional; env vars override)
    ├── memory.db           SQLite store (WAL)
    ├── history/            history.jsonl files written by session consolidation
    ├── knowledge/          git repository: SOUL.md, USER.md, MEMORY.md, L0–L3 files
    └── archive/            L4 raw-session archive
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mindpalace.errors import WorkspaceError
from mindpalace.settings import CONFIG_FILENAME, Settings, default_toml, load_settings

DB_FILENAME = "memory.db"
KNOWLEDGE_README = """# knowledge

Curated long-term memory of this workspace (SOUL.md, USER.md, MEMORY.md and the L0–L3 files).
Every change is a git commit, so `git log -p` shows how the agent's knowledge evolved.
"""


@dataclass(frozen=True)
class Workspace:
    """Paths and settings of one workspace folder. Create with :meth:`init` or :meth:`open`."""

    root: Path
    settings: Settings

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_FILENAME

    @property
    def db_path(self) -> Path:
        return self.root / DB_FILENAME

    @property
    def knowledge_dir(self) -> Path:
        return self.root / "knowledge"

    @property
    def archive_dir(self) -> Path:
        return self.root / "archive"

    @property
    def history_dir(self) -> Path:
        return self.root / "history"

    @classmethod
    def init(cls, root: str | Path, **overrides: Any) -> Workspace:
        """Create (or complete) a workspace at `root`; idempotent — existing files are kept.

        Raises:
            WorkspaceError: `root` exists and is not a folder, or cannot be created.
            ConfigError: an existing mindpalace.toml is malformed.
        """
        root = Path(root).expanduser().resolve()
        if root.exists() and not root.is_dir():
            raise WorkspaceError(f"{root} exists and is not a folder")
        try:
            root.mkdir(parents=True, exist_ok=True)
            for sub in ("archive", "history", "knowledge"):
                (root / sub).mkdir(exist_ok=True)
            config = root / CONFIG_FILENAME
            if not config.exists():
                config.write_text(default_toml(), encoding="utf-8")
        except OSError as exc:
            raise WorkspaceError(f"cannot create workspace at {root}: {exc}") from exc
        ws = cls(root, load_settings(root / CONFIG_FILENAME, **overrides))
        ws._init_knowledge_repo()
        return ws

    @classmethod
    def open(cls, root: str | Path, *, create: bool = True, **overrides: Any) -> Workspace:
        """Open the workspace at `root`, creating it when `create` (the default).

        Raises:
            WorkspaceError: it does not exist and `create` is False.
            ConfigError: mindpalace.toml is malformed (names file, key and expected type).
        """
        root = Path(root).expanduser().resolve()
        if not (root / DB_FILENAME).exists() and not (root / CONFIG_FILENAME).exists():
            if not create:
                raise WorkspaceError(
                    f"{root} is not a mindpalace workspace; run `mindpalace init {root}` first"
                )
            return cls.init(root, **overrides)
        return cls(root, load_settings(root / CONFIG_FILENAME, **overrides))

    def _init_knowledge_repo(self) -> None:
        import git

        kdir = self.knowledge_dir
        if (kdir / ".git").exists():
            return
        repo = git.Repo.init(kdir)
        try:
            readme = kdir / "README.md"
            if not readme.exists():
                readme.write_text(KNOWLEDGE_README, encoding="utf-8")
            repo.index.add(["README.md"])
            actor = git.Actor("mindpalace", "mindpalace@localhost")
            repo.index.commit("init knowledge repository", author=actor, committer=actor)
        finally:
            repo.close()  # else its object-database file handles leak (ResourceWarning → error)

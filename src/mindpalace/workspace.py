"""Workspace: the one folder an embedded mindpalace lives in.

    ws/
    ├── mindpalace.toml     settings (optional; env vars override)
    ├── memory.db           SQLite store (WAL)
    ├── history/            history.jsonl files written by session consolidation
    ├── knowledge/          git repository: SOUL.md, USER.md, MEMORY.md, L0–L3 files
    └── archive/            L4 raw-session archive
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from filelock import Timeout as LockTimeout

from mindpalace.errors import WorkspaceError
from mindpalace.history import HistoryLog
from mindpalace.history.log import DamagedLine
from mindpalace.settings import CONFIG_FILENAME, Settings, default_toml, load_settings
from mindpalace.store.sqlite.doctor import DatabaseCheck, check_database

DB_FILENAME = "memory.db"
INIT_LOCK_FILENAME = ".mindpalace-init.lock"  # serialises concurrent inits of one folder
INIT_LOCK_TIMEOUT_SECONDS = 60.0  # an init (folders, toml, git init + commit) takes < 1 s


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
            WorkspaceError: `root` exists and is not a folder, cannot be created, or is an
                empty string or a path that cannot be used (NUL byte, symlink loop, no access).
            ConfigError: an existing mindpalace.toml is malformed.
        """
        root = _root(root)
        if root.exists() and not root.is_dir():
            raise WorkspaceError(f"{root} exists and is not a folder")
        try:
            root.mkdir(parents=True, exist_ok=True)
            # Two processes opening a fresh folder at once would race on `git init` (one of
            # them crashes) and could read a half-written mindpalace.toml: one init at a time.
            with FileLock(str(root / INIT_LOCK_FILENAME), timeout=INIT_LOCK_TIMEOUT_SECONDS):
                for sub in ("archive", "history", "knowledge"):
                    (root / sub).mkdir(exist_ok=True)
                config = root / CONFIG_FILENAME
                for stray in root.glob(f".{CONFIG_FILENAME}.*"):  # a killed init's temp file
                    stray.unlink(missing_ok=True)
                if not config.exists():
                    _write_atomic(config, default_toml())
                ws = cls(root, load_settings(config, **overrides))
                ws._init_knowledge_repo()
        except LockTimeout as exc:
            raise WorkspaceError(
                f"{root}: another process has been initialising this workspace for over "
                f"{INIT_LOCK_TIMEOUT_SECONDS:g} s; if none is running, delete {INIT_LOCK_FILENAME}"
            ) from exc
        except OSError as exc:
            raise WorkspaceError(f"cannot create workspace at {root}: {exc}") from exc
        return ws

    @classmethod
    def open(cls, root: str | Path, *, create: bool = True, **overrides: Any) -> Workspace:
        """Open the workspace at `root`, creating (or completing) it when `create` (the default).

        A workspace is a folder holding ``memory.db``; a folder with only a hand-written
        ``mindpalace.toml`` is completed by ``create`` (``mindpalace init``), never by a reader.

        Raises:
            WorkspaceError: it is not a workspace and `create` is False; `root` is an empty
                string or a path that cannot be used (NUL byte, symlink loop, no access).
            ConfigError: mindpalace.toml is malformed (names file, key and expected type).
        """
        root = _root(root)
        config = root / CONFIG_FILENAME
        if not (root / DB_FILENAME).is_file():
            if not create:
                raise WorkspaceError(
                    f"{root} is not a mindpalace workspace; run `mindpalace init {root}` first"
                )
            return cls.init(root, **overrides)
        ws = cls(root, load_settings(config, **overrides))
        HistoryLog(ws.history_dir).remove_stray_files()  # left by a kill during a rewrite
        return ws

    def _init_knowledge_repo(self) -> None:
        # dulwich, pure Python: the repository, its first commit (README.md) — idempotent,
        # and an init interrupted before its commit is completed.
        from mindpalace.knowledge.gitstore import GitStore

        GitStore.init(self.knowledge_dir)


@dataclass
class DoctorReport:
    """What ``mindpalace doctor`` found in a workspace (see :func:`doctor`).

    Attributes:
        database: the integrity check (and export) of memory.db.
        history_entries / history_damaged: valid and skipped lines of history.jsonl.
        stray_files: temp files a killed write left (removed the next time the workspace opens).
    """

    workspace: Path
    database: DatabaseCheck
    history_entries: int = 0
    history_damaged: list[DamagedLine] = field(default_factory=list)
    stray_files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """memory.db passed integrity_check and every history line is readable."""
        return self.database.ok and not self.history_damaged

    def to_json(self) -> dict[str, Any]:
        return {"workspace": str(self.workspace), "ok": self.ok, "database": self.database.to_json(),
                "history_entries": self.history_entries,
                "history_damaged": [{"line": d.lineno, "bytes": d.size, "problem": d.problem}
                                    for d in self.history_damaged],
                "stray_files": self.stray_files}


def doctor(root: str | Path, *, export: str | Path | None = None) -> DoctorReport:
    """Check a workspace without changing it: ``PRAGMA integrity_check`` on memory.db (opened
    read-only), every history.jsonl line, stray temp files. With `export`, write what is
    readable into that folder: ``events.jsonl``, ``records.jsonl``, ``kv.jsonl``,
    ``docs.jsonl``, ``messages.jsonl`` (every session's messages) and ``history.jsonl`` (the
    valid entries) — the way out when a :class:`~mindpalace.errors.DatabaseCorruptError` says
    the database is damaged.

    Raises:
        WorkspaceError: `root` is not a workspace (no memory.db), or the `export` folder cannot
            be created.
    """
    root = _root(root)
    db = root / DB_FILENAME
    if not db.exists():
        raise WorkspaceError(
            f"{root} is not a mindpalace workspace; run `mindpalace init {root}` first")
    out = Path(export).expanduser().resolve() if export is not None else None
    if out is not None and out.exists() and not out.is_dir():
        raise WorkspaceError(f"--export {out}: exists and is not a folder")
    if out is not None:  # created here: a database that cannot be opened still exports its history
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"--export {out}: cannot create the folder ({exc.strerror})") from exc
    report = DoctorReport(root, check_database(db, export=out))
    history = HistoryLog(root / "history")
    scan = history.scan()
    report.history_entries, report.history_damaged = len(scan.entries), scan.damaged
    report.stray_files = sorted(
        str(p.relative_to(root)) for pattern in ("history/.*.tmp", f".{DB_FILENAME}.*.creating*",
                                                 f".{CONFIG_FILENAME}.*")
        for p in root.glob(pattern))
    if out is not None:
        with open(out / "history.jsonl", "w", encoding="utf-8") as fh:
            for e in scan.entries:
                fh.write(json.dumps(e.to_json(), ensure_ascii=False) + "\n")
        report.database.exported["history.jsonl"] = len(scan.entries)
    return report


def _root(root: str | Path) -> Path:
    if isinstance(root, str) and not root.strip():  # Path("") would silently be the cwd
        raise WorkspaceError("the workspace path is empty; give a folder, e.g. './ws' or '.'")
    try:
        path = Path(root).expanduser().resolve()
        path.exists()  # a NUL byte, a symlink loop, a folder this user may not search
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: symlink loop (3.11)
        raise WorkspaceError(f"the workspace path {str(root)!r} cannot be used: {exc}") from exc
    return path


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

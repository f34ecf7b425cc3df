"""KnowledgeBase: the L0–L3 files of every scope, git-versioned, patch-only, axioms in code.

Seeds: 003 (GenericAgent's four layers and axioms: no execution no memory, verified entries
never silently deleted, no volatile state, a minimal pointer index) and 002 (nanobot's
SOUL/USER/MEMORY files, GitStore, ``.dream_cursor``).

Every change is one git commit with an explicit author (``api``, ``dream``, ``hand-edit`` or a
person) and a message saying what changed and why. A write is crash-safe:

1. every patch is validated (anchors, axioms) before anything is written;
2. the commit's objects are written, then a journal naming the commit, then the branch moves
   (the commit point), then the files are replaced (write + rename) and the journal removed;
3. on the next call for the scope the journal is replayed: a published commit's files are
   written (roll forward), an unpublished one is dropped — files, cursor and git agree.

A person may edit any file by hand. Each write call (and :meth:`KnowledgeBase.sync`, which
``Session.prepare`` and ``mindpalace knowledge sync`` run) compares the files on disk with
the last commit by content hash; a hand edit that keeps the axioms is committed as
``hand-edit`` and indexed for recall; one that breaks them is reported, not committed and
not indexed — the last good version stays in git and in the prompt until it is fixed.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from filelock import FileLock
from filelock import Timeout as LockTimeout

from mindpalace.errors import (
    KnowledgeError,
    MindPalaceError,
    StoreBusyError,
    StoreError,
)
from mindpalace.knowledge.axioms import (
    L1Limits,
    SourceVerifier,
    check_l1,
    check_volatile,
)
from mindpalace.knowledge.gitstore import Commit, GitStore, atomic_write, author_line
from mindpalace.knowledge.index import KnowledgeIndex
from mindpalace.knowledge.layout import (
    CURSOR_FILE,
    MAX_FILE_BYTES,
    KnowledgeScope,
    Layer,
    check_file,
    layer_of,
    scope_of_folder,
)
from mindpalace.knowledge.patches import Patch, apply_patch
from mindpalace.settings import KnowledgeSettings
from mindpalace.store import Store
from mindpalace.textsafe import require_text
from mindpalace.timeutil import utcnow
from mindpalace.tokens import TokenCounter

if TYPE_CHECKING:
    from dulwich.objects import ObjectID

HAND_EDIT_AUTHOR: Final = "hand-edit"
FaultHook = Callable[[str], None]
"""Called with a crash-point name (``journal-written``, ``published``, ``files-written``) —
for tests that kill a writer at a known point; never set in production."""


@dataclass
class HandEdit:
    """A file changed on disk since the last commit.

    Attributes:
        file: the path inside the scope folder. change: ``modified`` / ``added`` /
        ``deleted`` / ``ignored`` (not part of the layout) / ``refused``.
        problem: why it was refused or ignored ('' when committed).
    """

    file: str
    change: str
    problem: str = ""


@dataclass
class SyncReport:
    """What :meth:`KnowledgeBase.sync` did for one scope.

    Attributes:
        committed: the hand-edit commit (None when there was nothing to commit).
        edits: every changed file found on disk, committed or not.
        recovered: files rewritten from an interrupted write (journal replay).
        reindexed: files whose recall documents were refreshed.
    """

    scope: KnowledgeScope
    committed: Commit | None = None
    edits: list[HandEdit] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    reindexed: list[str] = field(default_factory=list)

    @property
    def refused(self) -> list[HandEdit]:
        return [e for e in self.edits if e.change == "refused"]

    def to_json(self) -> dict[str, Any]:
        return {"scope": str(self.scope),
                "committed": None if self.committed is None else self.committed.to_json(),
                "edits": [vars(e) for e in self.edits], "recovered": self.recovered,
                "reindexed": self.reindexed}


class KnowledgeBase:
    """The knowledge files of every scope in one git repository (see the module doc).

    Example:
        >>> kb = mem.knowledge                                           # doctest: +SKIP
        >>> u1 = KnowledgeScope.user("u1")
        >>> kb.apply(u1, [Patch.insert("USER.md", "- prefers window seats")],
        ...          author="api", message="user said so")                  # doctest: +SKIP

    Args:
        root: the workspace's ``knowledge/`` folder (created, with a git repository, if absent).
        store: where recall documents are indexed and ledger rows / records are verified.
        counter: the token counter (L1's token limit).
        settings: the ``[knowledge]`` section.
        clock: UTC now, for commit times.
        verifier: checks the sources of L2/L3 writes (default: the ledger rows and records
            of `store`, :class:`~mindpalace.knowledge.axioms.SourceVerifier`).
        fault: crash-point hook for tests (see :data:`FaultHook`).
    """

    def __init__(
        self,
        root: Path,
        store: Store,
        *,
        counter: TokenCounter,
        settings: KnowledgeSettings | None = None,
        clock: Callable[[], datetime] = utcnow,
        verifier: SourceVerifier | None = None,
        fault: FaultHook | None = None,
    ) -> None:
        self.root = Path(root)
        self.git = GitStore(self.root)  # created on the first write: reading never writes
        self.store = store
        self.counter = counter
        self.settings = settings or KnowledgeSettings()
        self.clock = clock
        self.verifier = verifier or SourceVerifier(store)
        self.index = KnowledgeIndex(store)
        self._fault = fault
        self._locks: dict[str, FileLock] = {}

    # -- locks ----------------------------------------------------------------------------------
    def _file_lock(self, name: str) -> FileLock:
        lock = self._locks.get(name)
        if lock is None:
            GitStore.init(self.root)  # idempotent: a missing or half-made repository is completed
            folder = self.git.meta_dir / "locks"
            folder.mkdir(parents=True, exist_ok=True)
            lock = self._locks[name] = FileLock(str(folder / f"{name}.lock"))
        return lock

    @contextmanager
    def lock(self, scope: KnowledgeScope, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the scope's cross-process lock: one writer (API call, dream run, restore,
        sync) per scope at a time (I6). Re-entrant in one thread; :meth:`apply` and the
        other writes take it themselves, so a dream run holds it around read → apply.

        Raises:
            StoreBusyError: not acquired within `timeout` seconds (default
                ``knowledge.lock_timeout_seconds``; 0 = do not wait)."""
        wait = self.settings.lock_timeout_seconds if timeout is None else timeout
        lock = self._file_lock("scope-" + _key(scope.folder))
        try:
            lock.acquire(timeout=wait)
        except LockTimeout as exc:
            raise StoreBusyError(
                f"knowledge of {scope} is being written by another process (a dream run or "
                f"another writer) for over {wait:g} s; retry later") from exc
        try:
            yield
        finally:
            lock.release()

    @contextmanager
    def _repo_lock(self) -> Iterator[None]:
        lock = self._file_lock("repository")
        try:
            lock.acquire(timeout=self.settings.lock_timeout_seconds)
        except LockTimeout as exc:
            raise StoreBusyError("the knowledge repository is locked by another process's commit") from exc
        try:
            yield
        finally:
            lock.release()

    # -- reading (pure: the last commit, never the working files) -------------------------------
    def read(self, scope: KnowledgeScope, file: str, *, rev: str | None = None) -> str | None:
        """The committed text of `file` (at `rev`, default the last commit); None when absent.

        Raises:
            KnowledgeError: a bad file name or revision."""
        name = check_file(file)
        data = self.git.read_folder(scope.folder, self._rev(rev)).get(name)
        return None if data is None else data.decode("utf-8", errors="replace")

    def files(self, scope: KnowledgeScope, *, rev: str | None = None) -> dict[str, str]:
        """{file: committed text} of every file of `scope` (the cursor included)."""
        return {k: v.decode("utf-8", errors="replace")
                for k, v in sorted(self.git.read_folder(scope.folder, self._rev(rev)).items())}

    def read_cursor(self, scope: KnowledgeScope, *, rev: str | None = None) -> int:
        """The committed ``.dream_cursor`` of `scope`: the last history.jsonl cursor the dream
        consumed (0 = none). It moves only with a commit, together with the files."""
        text = self.read(scope, CURSOR_FILE, rev=rev)
        return 0 if text is None else _cursor_value(text)

    def log(self, scope: KnowledgeScope | None = None, *, limit: int | None = None) -> list[Commit]:
        """Commits newest first that changed `scope`'s files (None = every commit)."""
        return self.git.log(scope.folder if scope is not None else None, limit=limit)

    def diff(self, rev: str, scope: KnowledgeScope | None = None) -> str:
        """The unified diff commit `rev` made (only `scope`'s files when given).

        Raises:
            KnowledgeError: unknown revision."""
        return self.git.diff(self.git.resolve(rev), scope.folder if scope is not None else None)

    def files_of(self, scopes: Sequence[KnowledgeScope]) -> dict[KnowledgeScope, dict[str, str]]:
        """:meth:`files` of several scopes at the last commit, read in one go (the prompt's path)."""
        found = self.git.read_folders([s.folder for s in scopes])
        return {s: {k: v.decode("utf-8", errors="replace") for k, v in sorted(found[s.folder].items())}
                for s in scopes}

    def scopes(self) -> list[KnowledgeScope]:
        """Every scope with a folder on disk or in the last commit."""
        found: set[str] = set()
        for tenant in _dirs(self.root):
            for kind in ("users", "agents"):
                for name in _dirs(self.root / tenant / kind):
                    found.add(f"{tenant}/{kind}/{name}")
        for c in self.git.paths():
            parts = c.split("/")
            if len(parts) > 3:
                found.add("/".join(parts[:3]))
        out = [s for s in (scope_of_folder(f) for f in sorted(found)) if s is not None]
        return out

    def pending(self, scope: KnowledgeScope) -> list[HandEdit]:
        """Files on disk that differ from the last commit (hand edits not yet synced).
        Read-only."""
        return [HandEdit(rel, change, problem) for rel, (change, _, problem) in sorted(self._scan(scope).items())]

    # -- writing --------------------------------------------------------------------------------
    def apply(
        self,
        scope: KnowledgeScope,
        patches: Sequence[Patch],
        *,
        author: str,
        message: str,
        dream_cursor: int | None = None,
    ) -> Commit | None:
        """Apply `patches` (and move the dream cursor) as one commit, all or nothing.

        Every patch is checked first against the file as the previous patches leave it; then
        the files and the cursor are written and committed together (crash-safe, see the
        module doc), and the changed files are indexed for recall. Pending hand edits of the
        scope are committed first (as ``hand-edit``).

        Args:
            scope: whose files.
            patches: located edits (:class:`~mindpalace.knowledge.patches.Patch`).
            author: who — ``api``, ``dream``, or a person's name.
            message: what changed and why (the patches are listed under it).
            dream_cursor: the history cursor consumed so far; never moves backwards
                (restore moves it back).

        Returns:
            The commit, or None when nothing changes (every patch already applied, the
            cursor unchanged).

        Raises:
            AxiomViolation: an L2/L3 change with no verified source (a completed ledger
                call or an existing record of this scope); a removal with no reason; a
                whole-file replace; volatile state in L1/L2; L1 over its limits (numbers
                given) or not a pointer index.
            KnowledgeError: bad patches, anchors that do not match exactly once, a file whose
                hand edit was refused, a cursor that moves backwards.
            StoreBusyError: another writer holds the scope's lock past the timeout.
        """
        who = author_line(author)
        why = _message(message)
        batch = _batch(patches)
        cursor = None if dream_cursor is None else _check_cursor(dream_cursor)
        with self.lock(scope):
            self._sync_locked(scope, SyncReport(scope))
            plan = self._plan(scope, batch, cursor)
            if plan is None:
                return None
            changes, lines, sources = plan
            body = why + "\n\n" + "\n".join(f"- {ln}" for ln in lines)
            if sources:
                body += "\n\n" + "\n".join(f"Verified-by: {s}" for s in dict.fromkeys(sources))
            commit = self._commit(scope, dict(changes), who, body)
            self.index.refresh(scope, self.git)
            return commit

    def preview(self, scope: KnowledgeScope, patches: Sequence[Patch], *,
                dream_cursor: int | None = None) -> str:
        """The unified diff :meth:`apply` would commit now ('' when nothing would change),
        checked exactly as :meth:`apply` checks it — nothing is written, no lock is taken, and
        pending hand edits are not committed (``mindpalace dream --dry-run``).

        Raises:
            AxiomViolation / KnowledgeError: as :meth:`apply`."""
        batch = _batch(patches)
        cursor = None if dream_cursor is None else _check_cursor(dream_cursor)
        plan = self._plan(scope, batch, cursor)
        if plan is None:
            return ""
        committed = self.git.read_folder(scope.folder)
        out: list[str] = []
        for rel, data in sorted(plan[0].items()):
            old = committed.get(rel, b"").decode("utf-8", errors="replace").splitlines(keepends=True)
            new = (data or b"").decode("utf-8").splitlines(keepends=True)
            out.extend(difflib.unified_diff(old, new, f"a/{scope.folder}/{rel}", f"b/{scope.folder}/{rel}"))
        return "".join(out)

    def _plan(self, scope: KnowledgeScope, batch: list[Patch], cursor: int | None,
              ) -> tuple[dict[str, bytes | None], list[str], list[str]] | None:
        """(file → new content, commit message lines, verified sources) of `batch` over the
        committed files, every check done; None when nothing would change. Writes nothing."""
        blocked = {rel: problem for rel, (change, _, problem) in self._scan(scope).items()}
        committed = self.git.read_folder(scope.folder)
        texts = {k: v.decode("utf-8", errors="replace") for k, v in committed.items()}
        new = dict(texts)
        lines: list[str] = []
        sources: list[str] = []
        for p in batch:
            if p.file == CURSOR_FILE:
                raise KnowledgeError("the dream cursor moves with dream_cursor=, not by a patch")
            if p.file in blocked:
                raise KnowledgeError(
                    f"{p.file} has a hand edit that was not committed ({blocked[p.file] or 'pending'}); "
                    "fix it or revert it with `git checkout` in the knowledge folder first")
            before = new.get(p.file)
            needs_source = layer_of(p.file) in (Layer.L2, Layer.L3) and p.op != "remove"
            # the provenance goes into the text, so a re-run of the same patch is a no-op
            sourced = _with_source(p, p.source.strip()) if needs_source and p.source else p
            after = apply_patch(before, sourced)
            if after == before:
                continue
            if needs_source:  # axiom a: no execution, no memory
                sources.append(self.verifier.verify(scope, p.file, p.source).ref)
            new[p.file] = after
            lines.append(p.describe())
        old_cursor = _cursor_value(texts.get(CURSOR_FILE, "0"))
        if cursor is not None and cursor != old_cursor:
            if cursor < old_cursor:
                raise KnowledgeError(
                    f"dream_cursor {cursor} is behind the committed cursor {old_cursor}; the "
                    "cursor only moves back with restore")
            new[CURSOR_FILE] = f"{cursor}\n"
            lines.append(f"dream cursor: {old_cursor} → {cursor}")
        changes: dict[str, bytes | None] = {k: v.encode("utf-8") for k, v in new.items() if texts.get(k) != v}
        if not changes:
            return None
        for rel, data in changes.items():
            assert data is not None
            self._check_content(rel, data)
        return changes, lines, sources

    def restore(self, scope: KnowledgeScope, rev: str, *, author: str = "api", reason: str = "") -> Commit | None:
        """Make `scope`'s files **and** dream cursor what they were at commit `rev`, as one new
        commit (history is kept: the restore itself can be undone by restoring again).

        Returns None when the scope is already in that state.

        Raises:
            KnowledgeError: unknown revision; a refused hand edit is pending (fix or revert it).
            AxiomViolation: the restored files break the axioms under today's settings (e.g. an
                L1 over a lowered line limit) — nothing is changed.
            StoreBusyError: the scope's lock is held past the timeout.
        """
        who = author_line(author)
        sha = self.git.resolve(rev)
        with self.lock(scope):
            report = self._sync_locked(scope, SyncReport(scope))
            if report.refused:
                names = ", ".join(e.file for e in report.refused)
                raise KnowledgeError(f"{scope}: refused hand edits pending in {names}; fix or revert "
                                     "them before a restore (a restore rewrites the files)")
            target = self.git.read_folder(scope.folder, sha)
            current = self.git.read_folder(scope.folder)
            changes: dict[str, bytes | None] = {}
            for rel in sorted(set(target) | set(current)):
                if target.get(rel) != current.get(rel):
                    changes[rel] = target.get(rel)
            if not changes:
                return None
            for rel, data in changes.items():
                if data is not None:
                    self._check_content(rel, data)
            old_c = _cursor_value(current.get(CURSOR_FILE, b"0").decode("utf-8", errors="replace"))
            new_c = _cursor_value(target.get(CURSOR_FILE, b"0").decode("utf-8", errors="replace"))
            info = self.git.commit_info(sha)
            body = (f"restore {scope} to {info.short} ({info.message.splitlines()[0] if info.message else ''})"
                    + (f": {reason}" if reason else "") + "\n\n"
                    + "\n".join(f"- {rel}: {'removed' if d is None else 'restored'}" for rel, d in changes.items()
                                if rel != CURSOR_FILE)
                    + (f"\n- dream cursor: {old_c} → {new_c}" if old_c != new_c else ""))
            commit = self._commit(scope, changes, who, body)
            self.index.refresh(scope, self.git)
            return commit

    def sync(self, scope: KnowledgeScope, *, wait: bool = True) -> SyncReport | None:
        """Notice hand edits of `scope`: finish an interrupted write, commit valid hand edits
        as ``hand-edit`` (one commit), report refused ones (not committed, not indexed: the
        last good version stays), and re-index files whose recall documents are stale.
        Idempotent. With ``wait=False`` returns None at once when another writer holds the
        scope (``Session.prepare`` does not wait for a dream run)."""
        try:
            with self.lock(scope, timeout=None if wait else 0):
                return self._sync_locked(scope, SyncReport(scope))
        except StoreBusyError:
            if wait:
                raise
            return None

    def sync_all(self) -> list[SyncReport]:
        """:meth:`sync` for every scope (``mindpalace knowledge sync`` without a scope)."""
        return [r for r in (self.sync(s) for s in self.scopes()) if r is not None]

    # -- internals ------------------------------------------------------------------------------
    def _rev(self, rev: str | None) -> ObjectID | None:
        return None if rev is None else self.git.resolve(rev)

    def _sync_locked(self, scope: KnowledgeScope, report: SyncReport) -> SyncReport:
        report.recovered = self._recover(scope)
        found = self._scan(scope)
        changes: dict[str, bytes | None] = {}
        for rel, (change, data, problem) in sorted(found.items()):
            if change in ("ignored", "refused"):
                report.edits.append(HandEdit(rel, change, problem))
                continue
            if data is not None:
                try:
                    self._check_content(rel, data)
                except MindPalaceError as exc:
                    report.edits.append(HandEdit(rel, "refused", str(exc)))
                    continue
            report.edits.append(HandEdit(rel, change))
            changes[rel] = data
        if changes:
            body = "hand edit of " + ", ".join(sorted(changes)) + " (noticed by content hash)\n\n" + \
                "\n".join(f"- {rel}: {_change_summary(self.git.read_folder(scope.folder).get(rel), d)}"
                          for rel, d in sorted(changes.items()))
            report.committed = self._commit(scope, changes, author_line(HAND_EDIT_AUTHOR), body,
                                            files_on_disk=True)
        report.reindexed = self.index.refresh(scope, self.git)
        return report

    def _check_content(self, rel: str, data: bytes) -> None:
        """The whole-file checks every write path shares (API, hand edit, restore, dream)."""
        if len(data) > MAX_FILE_BYTES:
            raise KnowledgeError(f"{rel} would be {len(data)} bytes; a knowledge file holds at most "
                                 f"{MAX_FILE_BYTES} (split procedures into L3 files)")
        try:
            text = require_text(rel, data.decode("utf-8"))
        except (UnicodeDecodeError, MindPalaceError) as exc:
            raise KnowledgeError(f"{rel} is not UTF-8 text without NUL: {exc}") from exc
        layer = layer_of(rel)
        if layer is Layer.CURSOR:
            _cursor_value(text)
        if layer is Layer.L1:
            check_volatile(rel, text)
            check_l1(text, L1Limits(self.settings.l1_max_lines, self.settings.l1_max_tokens), self.counter)
        elif layer is Layer.L2:
            check_volatile(rel, text)

    def _folder(self, scope: KnowledgeScope) -> Path:
        """The scope folder on disk; refuses a symlink anywhere on the way (a link out)."""
        path = self.root
        for part in scope.folder.split("/"):
            path = path / part
            if path.is_symlink():
                raise KnowledgeError(f"{path} is a symbolic link; knowledge folders must be real "
                                     "folders inside the knowledge repository")
        return path

    def _scan(self, scope: KnowledgeScope) -> dict[str, tuple[str, bytes | None, str]]:
        """{file: (change, content on disk, problem)} for files differing from the last commit."""
        folder = self._folder(scope)
        committed = self.git.folder_blobs(scope.folder)
        seen: dict[str, tuple[str, bytes | None, str]] = {}
        on_disk: set[str] = set()
        if folder.is_dir():
            for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
                base = Path(dirpath)
                for d in list(dirnames):
                    if d.startswith(".") or (base / d).is_symlink():
                        dirnames.remove(d)
                        if (base / d).is_symlink():
                            rel = (base / d).relative_to(folder).as_posix()
                            seen[rel] = ("refused", None, "a symbolic link (links out are not allowed)")
                for name in filenames:
                    path = base / name
                    rel = path.relative_to(folder).as_posix()
                    if name.startswith(".") and rel != CURSOR_FILE:
                        continue  # editor swap files, our temp files
                    if path.is_symlink():
                        seen[rel] = ("refused", None, "a symbolic link (links out are not allowed)")
                        continue
                    try:
                        check_file(rel)
                    except KnowledgeError as exc:
                        if rel not in committed:
                            seen[rel] = ("ignored", None, str(exc))
                        continue
                    on_disk.add(rel)
                    data = path.read_bytes()
                    blob = _blob_id(data)
                    if committed.get(rel) != blob:
                        seen[rel] = ("modified" if rel in committed else "added", data, "")
        for rel in committed:
            if rel not in on_disk and rel not in seen:
                seen[rel] = ("deleted", None, "")
        return seen

    def _journal(self, scope: KnowledgeScope) -> Path:
        return self.git.meta_dir / "journal" / f"{_key(scope.folder)}.json"

    def _commit(self, scope: KnowledgeScope, changes: dict[str, bytes | None], author: bytes, message: str,
                *, files_on_disk: bool = False) -> Commit | None:
        """One commit of `changes` for `scope`, then the files (see the module doc)."""
        folder = self._folder(scope)
        with self._repo_lock():
            prepared = self.git.prepare(scope.folder, changes, author=author, message=message, when=self.clock())
            if prepared is None:
                return None
            journal = self._journal(scope)
            journal.parent.mkdir(parents=True, exist_ok=True)
            record = {"commit": prepared.sha.decode(), "old_tree": _hex(prepared.old_tree),
                      "new_tree": _hex(prepared.new_tree), "files": sorted(changes)}
            try:
                atomic_write(journal, json.dumps(record).encode())
            except OSError as exc:  # before the commit point: nothing changed
                raise StoreError(f"{journal}: cannot write the journal ({exc.strerror}); nothing was "
                                 "changed") from exc
            self._crash_point("journal-written")
            self.git.publish(prepared)
            self._crash_point("published")
            if not files_on_disk:
                self._write_files(folder, changes)
            self._crash_point("files-written")
            self.git.stage([f"{scope.folder}/{rel}" for rel in changes])
            journal.unlink()
        return replace(self.git.commit_info(prepared.sha), files=prepared.changed)

    def _write_files(self, folder: Path, changes: dict[str, bytes | None]) -> None:
        try:
            self._replace_files(folder, changes)
        except OSError as exc:  # the commit stands: the journal finishes the files next time
            raise StoreError(f"{folder}: could not write the committed files ({exc.strerror}); "
                             "they are written on the next call for this scope") from exc

    def _replace_files(self, folder: Path, changes: dict[str, bytes | None]) -> None:
        for rel, data in changes.items():
            path = folder / rel
            if path.parent != folder and path.parent.is_symlink():
                raise KnowledgeError(f"{path.parent} is a symbolic link; refusing to write through it")
            if data is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write(path, data)

    def _recover(self, scope: KnowledgeScope) -> list[str]:
        """Replay an interrupted write of `scope` (call under its lock)."""
        folder = self._folder(scope)
        if folder.is_dir():
            for stray in folder.rglob(".*.mp-tmp-*"):
                stray.unlink(missing_ok=True)
        journal = self._journal(scope)
        if not journal.exists():
            return []
        try:
            record = json.loads(journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            journal.unlink(missing_ok=True)  # torn before its rename: the commit never published
            return []
        with self._repo_lock():
            now = _hex(self.git.scope_tree(scope.folder))
            files = [str(f) for f in record.get("files", [])]
            if now == record.get("old_tree"):
                journal.unlink()
                return []  # the branch never moved: the files were never touched
            committed = self.git.read_folder(scope.folder)
            self._write_files(folder, {rel: committed.get(rel) for rel in files})
            self.git.stage([f"{scope.folder}/{rel}" for rel in files])
            journal.unlink()
        return files

    def _crash_point(self, name: str) -> None:
        if self._fault is not None:
            self._fault(name)


def _key(folder: str) -> str:
    return hashlib.sha256(folder.encode()).hexdigest()[:24]


def _hex(sha: bytes | None) -> str | None:
    return None if sha is None else sha.decode()


def _dirs(path: Path) -> list[str]:
    if not path.is_dir() or path.is_symlink():
        return []
    return sorted(p.name for p in path.iterdir() if p.is_dir() and not p.is_symlink()
                  and not p.name.startswith("."))


def _message(message: Any) -> str:
    try:
        text = require_text("commit message", message, allow_empty=False)
    except MindPalaceError as exc:
        raise KnowledgeError(f"a knowledge change needs a message saying what and why: {exc}") from exc
    return text.strip()


def _batch(patches: Any) -> list[Patch]:
    """`patches` as a list of :class:`Patch`.

    Raises:
        KnowledgeError: not a list (or tuple) of Patch objects — a lone Patch, a string, None.
    """
    if not isinstance(patches, list | tuple) or not all(isinstance(p, Patch) for p in patches):
        got = type(patches).__name__ if not isinstance(patches, list | tuple) else "a list holding " + ", ".join(
            sorted({type(p).__name__ for p in patches if not isinstance(p, Patch)}))
        raise KnowledgeError(f"patches must be a list of Patch objects (Patch.replace / insert / "
                             f"remove), got {got}; wrap a single patch in a list")
    return list(patches)


def _check_cursor(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KnowledgeError(f"dream_cursor must be an int >= 0, got {value!r}")
    return value


def _cursor_value(text: str) -> int:
    body = text.strip() or "0"
    if not body.isdigit():
        raise KnowledgeError(f"{CURSOR_FILE} must hold one integer >= 0, got {body[:40]!r}")
    return int(body)


def _with_source(patch: Patch, ref: str) -> Patch:
    """`patch` with its provenance on the new text's last line (``[source: ledger:…]``), so the
    fact is quoted with where it came from wherever it is shown; idempotent."""
    if f"[source: {ref}]" in patch.text:
        return patch
    text = patch.text.rstrip("\n")
    tail = patch.text[len(text):]
    return Patch(patch.file, patch.op, patch.anchor, f"{text} [source: {ref}]{tail}", patch.before,
                 patch.reason, patch.source)


def _change_summary(old: bytes | None, new: bytes | None) -> str:
    """What a hand edit did, for its commit message; removed lines are quoted (up to 5), so a
    removal is visible in the log itself, not only in the diff (axiom b)."""
    if new is None:
        return "deleted by hand" + (_quoted(old.decode("utf-8", errors="replace").splitlines()) if old else "")
    if old is None:
        return f"added by hand ({len(new.splitlines())} lines)"
    a = old.decode("utf-8", errors="replace").splitlines()
    b = new.decode("utf-8", errors="replace").splitlines()
    removed = [ln for ln in a if ln.strip() and ln not in set(b)]
    added = [ln for ln in b if ln not in set(a)]
    return f"edited by hand (+{len(added)} / -{len(removed)} lines)" + _quoted(removed)


def _quoted(lines: list[str], limit: int = 5) -> str:
    shown = [ln for ln in lines if ln.strip()][:limit]
    if not shown:
        return ""
    more = f" (and {len(lines) - limit} more)" if len(lines) > limit else ""
    return "; removed: " + ", ".join(repr(ln[:80]) for ln in shown) + more



def _blob_id(data: bytes) -> str:
    """The git blob id of `data` (hex); dulwich is imported on first use (see gitstore)."""
    from dulwich.objects import Blob

    return Blob.from_string(data).id.decode()

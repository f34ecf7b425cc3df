"""The knowledge repository: one git repository (dulwich, pure Python), one folder per scope.

Commits are built from objects, not from the working tree: the new tree is the current HEAD
tree with one scope's folder replaced, so a commit of one scope never picks up another scope's
files or a hand edit waiting to be checked. The branch moves by compare-and-swap
(``set_if_equals``) under the repository lock, so writers of different scopes never lose each
other's commits (seed 002 GitStore; every change is a commit with an explicit identity).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from mindpalace.errors import KnowledgeError, MindPalaceError, StoreError

# dulwich is imported where git is used: opening a memory and recalling never touch git, and
# importing it cost ~1 MB of every process.
if TYPE_CHECKING:
    from dulwich.objects import Commit as GitCommit
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import Repo

FILE_MODE: Final = 0o100644
HEAD: Final = cast("Ref", b"HEAD")  # dulwich's Ref is a NewType of bytes
COMMITTER: Final = b"mindpalace <mindpalace@localhost>"
README: Final = """# knowledge

Curated long-term memory of this workspace: SOUL.md, USER.md, MEMORY.md and the L0–L3 files,
one folder per scope (`<tenant>/users/<user>/`, `<tenant>/agents/<agent>/`). Every change is a
git commit whose author says who made it (`api`, `dream`, `hand-edit` or a person) and whose
message says what changed and why, so `git log -p` shows how the agent's knowledge evolved.
You may edit any file by hand: mindpalace notices it, checks it and commits it as a hand edit.
"""
_AUTHOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._@+-]{0,63}$")
_CACHE_TREES: Final = 256  # folder trees whose files are kept in memory (cleared when full)
_HEAD_N = re.compile(r"^(HEAD|@)(?:~(\d+))?$")


def author_line(author: str) -> bytes:
    """``name <name@mindpalace>`` for an author name (``api``, ``dream``, ``hand-edit``, a
    person's name). Raises KnowledgeError for names git cannot carry."""
    if not isinstance(author, str) or not _AUTHOR.match(author):
        raise KnowledgeError(f"author {author!r}: use letters, digits, spaces and . _ @ + - "
                             "(at most 64 characters), e.g. 'api', 'dream' or a person's name")
    mail = re.sub(r"[^A-Za-z0-9._+-]", "-", author)
    return f"{author} <{mail}@mindpalace>".encode()


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit of the knowledge repository.

    Attributes:
        sha: full hex id. author: who (``api``, ``dream``, ``hand-edit``, a person).
        message: what changed and why. time: when (UTC). files: paths it changed inside the
        scope folder it was listed for (all paths for :meth:`GitStore.commit_info`).
    """

    sha: str
    author: str
    message: str
    time: datetime
    files: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        return self.sha[:10]

    def to_json(self) -> dict[str, object]:
        return {"sha": self.sha, "author": self.author, "message": self.message,
                "time": self.time.isoformat(), "files": list(self.files)}


@dataclass(frozen=True, slots=True)
class Prepared:
    """A commit written to the object store but not yet on the branch."""

    sha: ObjectID
    parent: ObjectID | None
    old_tree: ObjectID | None  # the scope folder's tree before (None: no folder)
    new_tree: ObjectID | None
    changed: tuple[str, ...] = field(default=())


class GitStore:
    """The knowledge repository at `root` (a working tree with ``.git``).

    Every method opens the repository and closes it again (no file handle outlives a call,
    so several processes can use one repository). Errors from git become
    :class:`~mindpalace.errors.StoreError` / :class:`~mindpalace.errors.KnowledgeError`.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[ObjectID, dict[str, bytes]] = {}  # folder tree id → its files

    @property
    def meta_dir(self) -> Path:
        """Where mindpalace keeps locks and the write-ahead journal (inside ``.git``, so git
        never sees them as files)."""
        return self.root / ".git" / "mindpalace"

    @contextmanager
    def _repo(self) -> Iterator[Repo]:
        from dulwich.repo import Repo

        try:
            repo = Repo(str(self.root))
        except Exception as exc:  # NotGitRepository, OSError
            raise StoreError(f"{self.root}: not a usable git repository ({exc}); "
                             "run `mindpalace init` on the workspace") from exc
        try:
            yield repo
        except MindPalaceError:
            raise
        except Exception as exc:  # dulwich / OS errors never reach a caller raw
            raise StoreError(f"{self.root}: git operation failed ({type(exc).__name__}: {exc}); "
                             "check the folder (disk space, permissions, `git fsck`)") from exc
        finally:
            repo.close()

    @classmethod
    def init(cls, root: Path) -> GitStore:
        """Create the repository with a first commit (README.md) unless it has one; idempotent
        (an init interrupted before its commit is completed)."""
        from dulwich.index import commit_tree
        from dulwich.objects import Blob
        from dulwich.repo import Repo

        root.mkdir(parents=True, exist_ok=True)
        if not (root / ".git").exists():
            Repo.init(str(root), mkdir=False).close()
        store = cls(root)
        if store.head() is None:
            readme = root / "README.md"
            if not readme.exists():
                readme.write_text(README, encoding="utf-8")
            with store._repo() as repo:
                blob = Blob.from_string(readme.read_bytes())
                repo.object_store.add_object(blob)
                tree = commit_tree(repo.object_store, [(b"README.md", blob.id, FILE_MODE)])
                sha = _commit(repo, tree, None, b"mindpalace <mindpalace@localhost>",
                              "init knowledge repository", datetime.now(UTC))
                repo.refs.set_if_equals(HEAD, None, sha)
                repo.get_worktree().stage(["README.md"])
        return store

    # -- reading (a folder with no repository yet reads as an empty one) -----------------------
    @property
    def exists(self) -> bool:
        return (self.root / ".git").is_dir()

    def head(self) -> ObjectID | None:
        if not self.exists:
            return None
        with self._repo() as repo:
            try:
                return repo.refs[HEAD]
            except KeyError:
                return None

    def resolve(self, rev: str) -> ObjectID:
        """A commit id for ``HEAD``, ``HEAD~N``, a (short) hex id or a branch name.

        Raises:
            KnowledgeError: unknown or ambiguous revision (names it)."""
        if not isinstance(rev, str) or not rev.strip() or "\x00" in rev:
            raise KnowledgeError(f"revision {rev!r}: give a commit id, HEAD or HEAD~N")
        from dulwich.objectspec import parse_commit

        with self._repo() as repo:
            m = _HEAD_N.match(rev.strip())
            try:
                if m:
                    sha = repo.refs[HEAD]
                    for _ in range(int(m.group(2) or 0)):
                        parents = repo[sha].parents  # type: ignore[attr-defined]
                        if not parents:
                            raise KeyError(rev)
                        sha = parents[0]
                    return sha
                return parse_commit(repo, rev.strip().encode()).id
            except (KeyError, ValueError) as exc:
                raise KnowledgeError(f"revision {rev!r} is not a commit of the knowledge "
                                     "repository; see `mindpalace knowledge log`") from exc

    def scope_tree(self, folder: str, rev: ObjectID | None = None) -> ObjectID | None:
        """The tree id of `folder` at `rev` (None = HEAD); None when the folder is absent."""
        if not self.exists:
            return None
        with self._repo() as repo:
            return _subtree(repo, rev, folder)

    def read_folder(self, folder: str, rev: ObjectID | None = None) -> dict[str, bytes]:
        """{path relative to `folder`: content} of every file under `folder` at `rev`."""
        return self.read_folders([folder], rev)[folder]

    def read_folders(self, folders: list[str], rev: ObjectID | None = None) -> dict[str, dict[str, bytes]]:
        """:meth:`read_folder` of several folders with one repository open; a folder's files
        are cached by its tree id (content-addressed, so the cache is never stale)."""
        out: dict[str, dict[str, bytes]] = {f: {} for f in folders}
        if not self.exists:
            return out
        with self._repo() as repo:
            if rev is None:
                rev = _head(repo)
            root = repo[rev].tree if rev is not None else None  # type: ignore[attr-defined]
            for folder in folders:
                tree = _subtree_of(repo, root, folder) if root is not None else None
                if tree is None:
                    out[folder] = {}
                    continue
                cached = self._cache.get(tree)
                if cached is None:
                    cached = {e.path.decode(): repo[e.sha].as_raw_string()
                              for e in repo.object_store.iter_tree_contents(tree) if e.path and e.sha}
                    if len(self._cache) >= _CACHE_TREES:
                        self._cache.clear()
                    self._cache[tree] = cached
                out[folder] = dict(cached)
        return out

    def folder_blobs(self, folder: str, rev: ObjectID | None = None) -> dict[str, str]:
        """{path relative to `folder`: blob id (hex)} at `rev` — compares content by hash."""
        if not self.exists:
            return {}
        with self._repo() as repo:
            tree = _subtree(repo, rev, folder)
            if tree is None:
                return {}
            return {e.path.decode(): e.sha.decode()
                    for e in repo.object_store.iter_tree_contents(tree) if e.path and e.sha}

    def paths(self) -> list[str]:
        """Every file path of the last commit."""
        if not self.exists:
            return []
        with self._repo() as repo:
            try:
                head = repo.refs[HEAD]
            except KeyError:
                return []
            tree = repo[head].tree  # type: ignore[attr-defined]
            return [e.path.decode() for e in repo.object_store.iter_tree_contents(tree) if e.path]

    def log(self, folder: str | None = None, *, limit: int | None = None) -> list[Commit]:
        """Commits newest first that changed `folder` (None = any), with the paths they
        changed inside it."""
        prefix = (folder.rstrip("/") + "/").encode() if folder else b""
        out: list[Commit] = []
        if not self.exists:
            return out
        with self._repo() as repo:
            try:
                head = repo.refs[HEAD]
            except KeyError:
                return []
            walker = repo.get_walker(include=[head], paths=[prefix.rstrip(b"/")] if prefix else None)
            for entry in walker:
                files = sorted({(ch.new or ch.old).path.decode()[len(prefix):]
                                for ch in _changes(entry)
                                if (ch.new or ch.old) is not None
                                and (ch.new or ch.old).path.startswith(prefix)})
                out.append(_info(entry.commit, tuple(files)))
                if limit is not None and len(out) >= limit:
                    break
        return out

    def commit_info(self, sha: ObjectID) -> Commit:
        with self._repo() as repo:
            return _info(repo[sha], ())  # type: ignore[arg-type]

    def diff(self, rev: ObjectID, folder: str | None = None) -> str:
        """The unified diff `rev` made against its first parent (only the files under
        `folder` when given), paths as the repository names them."""
        from dulwich.patch import write_tree_diff

        with self._repo() as repo:
            commit = repo[rev]
            parents = commit.parents  # type: ignore[attr-defined]
            old = repo[parents[0]].tree if parents else None  # type: ignore[attr-defined]
            buf = io.BytesIO()
            write_tree_diff(buf, repo.object_store, old, commit.tree)  # type: ignore[attr-defined]
            text = buf.getvalue().decode("utf-8", errors="replace")
        if not folder:
            return text
        prefix = f"diff --git a/{folder.rstrip('/')}/"
        parts = re.split(r"(?m)^(?=diff --git )", text)
        return "".join(p for p in parts if p.startswith(prefix))

    # -- writing ------------------------------------------------------------------------------
    def prepare(
        self, folder: str, files: Mapping[str, bytes | None], *, author: bytes, message: str,
        when: datetime,
    ) -> Prepared | None:
        """Write the objects of a commit that sets `files` (path relative to `folder` → new
        content, None = delete) on top of HEAD; the branch does not move yet (see
        :meth:`publish`). None when nothing would change. Call under the repository lock."""
        from dulwich.index import commit_tree
        from dulwich.objects import Blob

        with self._repo() as repo:
            parent = _head(repo)
            old_tree = _subtree(repo, parent, folder)
            entries = {}
            if parent is not None:
                for e in repo.object_store.iter_tree_contents(repo[parent].tree):  # type: ignore[attr-defined]
                    if e.path and e.sha and e.mode is not None:
                        entries[e.path] = (e.sha, e.mode)
            changed = []
            for rel, data in files.items():
                key = f"{folder}/{rel}".encode()
                if data is None:
                    if entries.pop(key, None) is not None:
                        changed.append(rel)
                    continue
                blob = Blob.from_string(data)
                if entries.get(key, (None,))[0] == blob.id:
                    continue
                repo.object_store.add_object(blob)
                entries[key] = (blob.id, FILE_MODE)
                changed.append(rel)
            if not changed:
                return None
            tree = commit_tree(repo.object_store, [(p, s, m) for p, (s, m) in sorted(entries.items())])
            new_tree = _subtree_of(repo, tree, folder)
            sha = _commit(repo, tree, parent, author, message, when)
            return Prepared(sha, parent, old_tree, new_tree, tuple(sorted(changed)))

    def publish(self, prepared: Prepared) -> None:
        """Move the branch to the prepared commit (compare-and-swap on its parent).

        Raises:
            StoreError: HEAD moved since :meth:`prepare` (a writer outside the lock)."""
        with self._repo() as repo:
            if not repo.refs.set_if_equals(HEAD, prepared.parent, prepared.sha):
                raise StoreError("the knowledge repository's HEAD moved during a commit; retry")

    def stage(self, paths: list[str]) -> None:
        """Refresh the git index for `paths` (so ``git status`` in the folder is clean). Call
        under the repository lock; the index is only a cache of HEAD here."""
        if not paths:
            return
        with self._repo() as repo:
            repo.get_worktree().stage(paths)


def _head(repo: Repo) -> ObjectID | None:
    try:
        return repo.refs[HEAD]
    except KeyError:
        return None


def _changes(entry: object) -> list:
    changes = entry.changes()  # type: ignore[attr-defined]
    flat = []
    for ch in changes:  # merges give lists per parent
        flat.extend(ch if isinstance(ch, list) else [ch])
    return flat


def _info(commit: GitCommit, files: tuple[str, ...]) -> Commit:
    author = commit.author.decode("utf-8", errors="replace")
    name = author.split(" <", 1)[0]
    when = datetime.fromtimestamp(commit.author_time, UTC)
    return Commit(commit.id.decode(), name, commit.message.decode("utf-8", errors="replace").strip(),
                      when, files)


def _commit(repo: Repo, tree: ObjectID, parent: ObjectID | None, author: bytes, message: str,
            when: datetime) -> ObjectID:
    from dulwich.objects import Commit as GitCommit

    c = GitCommit()
    c.tree = tree
    c.parents = [parent] if parent is not None else []
    c.author, c.committer = author, COMMITTER
    c.author_time = c.commit_time = int(when.timestamp())
    c.author_timezone = c.commit_timezone = 0
    c.encoding = b"UTF-8"
    c.message = (message.rstrip() + "\n").encode("utf-8")
    repo.object_store.add_object(c)
    return c.id


def _subtree(repo: Repo, rev: ObjectID | None, folder: str) -> ObjectID | None:
    if rev is None:
        try:
            rev = repo.refs[HEAD]
        except KeyError:
            return None
    return _subtree_of(repo, repo[rev].tree, folder)  # type: ignore[attr-defined]


def _subtree_of(repo: Repo, tree: ObjectID, folder: str) -> ObjectID | None:
    from dulwich.object_store import tree_lookup_path
    from dulwich.objects import Tree

    try:
        _mode, sha = tree_lookup_path(repo.__getitem__, tree, folder.encode())
    except KeyError:
        return None
    return sha if isinstance(repo[sha], Tree) else None


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a reader sees the old file or the new one, never half
    (a hidden temp file in the same folder, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.mp-tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

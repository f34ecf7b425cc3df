"""Durable file replacement shared by the file-backed parts (history cursor and rewrites, the
L4 archive's month files)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from mindpalace.errors import StoreError


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (bytes) so a reader — or a process killed mid-write — sees
    the old file or the new one, never half: a temp file in the same folder, fsync, rename,
    then fsync the folder (best effort: some file systems refuse to open a folder).

    Raises:
        StoreError: the temp file cannot be written or renamed (it is removed).
    """

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write_with(path, write)


def atomic_write_with(path: Path, write: Callable[[Path], None]) -> None:
    """:func:`atomic_write` for a writer that needs a path (a library's ``save(path)``):
    ``write(tmp)`` fills a temp file in the same folder, which is then fsynced and renamed
    over `path`, and the folder fsynced. An exception of `write` removes the temp file and
    propagates; an OSError is raised as StoreError.

    Raises:
        StoreError: the temp file cannot be written, synced or renamed (it is removed).
    """
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:  # a read-only or missing folder
        raise StoreError(f"cannot write {path}: {exc}") from exc
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)

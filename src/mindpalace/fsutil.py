"""Durable file replacement shared by the file-backed parts (history cursor and rewrites, the
L4 archive's month files)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mindpalace.errors import StoreError


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (bytes) so a reader — or a process killed mid-write — sees
    the old file or the new one, never half: a temp file in the same folder, fsync, rename,
    then fsync the folder (best effort: some file systems refuse to open a folder).

    Raises:
        StoreError: the temp file cannot be written or renamed (it is removed).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc}") from exc
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)

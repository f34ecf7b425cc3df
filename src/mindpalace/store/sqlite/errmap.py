"""sqlite3 errors → the mindpalace error tree, at the backend boundary (no raw sqlite3 error leaves
the store).

SQLite's primary result code decides (Python ≥ 3.11 exposes it as ``sqlite_errorcode``); the
message text is the fallback for errors raised without one:

=====================================  ===========================  ==============================
SQLite                                 raised as                    what to do (in the message)
=====================================  ===========================  ==============================
SQLITE_CORRUPT, SQLITE_NOTADB          DatabaseCorruptError         ``mindpalace doctor`` + backup
SQLITE_READONLY                        ReadOnlyWorkspaceError       fix permissions / writable copy
SQLITE_FULL                            DiskFullError                free space, retry
SQLITE_BUSY, SQLITE_LOCKED             StoreBusyError               retry later
SQLITE_CANTOPEN, folder not writable   ReadOnlyWorkspaceError       fix permissions / writable copy
SQLITE_CANTOPEN                        WorkspaceError               check the folder exists
SQLITE_CONSTRAINT (IntegrityError)     StoreError                   (a bug: integrity error)
anything else                          StoreError                   the SQLite message
=====================================  ===========================  ==============================
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from mindpalace.errors import (
    DatabaseCorruptError,
    DiskFullError,
    MindPalaceError,
    ReadOnlyWorkspaceError,
    StoreBusyError,
    StoreError,
    WorkspaceError,
)

_PRIMARY_MASK = 0xFF  # extended result codes carry the primary code in their low byte


def _primary(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & _PRIMARY_MASK


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "database is locked/busy" (worth retrying)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = _primary(exc)
    if code is not None:
        return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def store_error(path: str | Path, exc: sqlite3.Error, *, retries: int | None = None) -> MindPalaceError:
    """The mindpalace error for `exc`, raised on the database at `path` (see the module table).

    Args:
        retries: how many busy retries were spent, for the message of a lock error.
    """
    where = str(path)
    code = _primary(exc)
    text = str(exc)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in text \
            or "not a database" in text:
        return DatabaseCorruptError(where, text)
    if code == sqlite3.SQLITE_READONLY or "readonly database" in text:
        return ReadOnlyWorkspaceError(where, text)
    if code == sqlite3.SQLITE_FULL or "disk is full" in text:
        return DiskFullError(where, text)
    if is_busy(exc):
        spent = f" through {retries} retries" if retries else ""
        return StoreBusyError(
            f"{where}: database stayed locked{spent}; another process holds a long write "
            "transaction — retry later"
        )
    if code == sqlite3.SQLITE_CANTOPEN and not os.access(Path(where).parent, os.W_OK):
        # a read-only folder or mount: SQLite cannot create its -wal / -shm files there
        return ReadOnlyWorkspaceError(where, text)
    if code == sqlite3.SQLITE_CANTOPEN:
        return WorkspaceError(f"{where}: cannot open the database ({text}); check that the "
                              "folder exists and this user may read and write it")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"{where}: integrity error: {text}")
    return StoreError(f"{where}: {text}")


F = TypeVar("F", bound=Callable[..., Any])


def _guard(fn: F) -> F:
    """`fn` (a method of an object with ``.path``) with sqlite3 errors translated."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(self, *args, **kwargs)
            except sqlite3.Error as exc:
                raise store_error(self.path, exc) from exc
            except (RecursionError, json.JSONDecodeError) as exc:
                raise _unreadable(self.path, exc) from exc

        return gen  # type: ignore[return-value]

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from exc
        except (RecursionError, json.JSONDecodeError) as exc:
            raise _unreadable(self.path, exc) from exc

    return method  # type: ignore[return-value]


def _unreadable(path: str | Path, exc: BaseException) -> DatabaseCorruptError:
    """A stored JSON value that cannot be parsed (written by another tool or damaged): the
    rows are reported as damage, never as a raw RecursionError / JSONDecodeError."""
    what = "nested too deep to parse" if isinstance(exc, RecursionError) else f"not valid JSON ({exc})"
    return DatabaseCorruptError(str(path), f"a stored value is {what}")


C = TypeVar("C", bound=type)


def translate_sqlite_errors(protocol: type) -> Callable[[C], C]:
    """Class decorator: every public method of `protocol` (the store ABC) on the decorated class,
    and its ``__init__``, raise mindpalace errors instead of sqlite3 ones. ``transaction`` is a
    context manager and translates inside (its BEGIN / COMMIT go through the busy retry);
    ``in_transaction`` touches no database."""

    def decorate(cls: C) -> C:
        # in_transaction reads a thread-local and cannot raise: not wrapped (it is asked on
        # every write)
        names = {n for n in dir(protocol) if not n.startswith("_")
                 and n not in ("transaction", "in_transaction")}
        for name in sorted(names | {"__init__"}):
            attr = inspect.getattr_static(cls, name, None)
            if callable(attr) and not isinstance(attr, staticmethod | classmethod | type):
                setattr(cls, name, _guard(attr))
        return cls

    return decorate

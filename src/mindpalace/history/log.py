"""history.jsonl: the append-only archive that session consolidation writes (seed 002, nanobot).

One JSON object per line::

    {"cursor": 42, "timestamp": "2026-11-30T20:01:02.123456+00:00", "session": "trip-42",
     "content": "- user chose the 8000 CNY budget", "kind": "summary",
     "scope": {"tenant": "default", "user": "u1", "agent": "planner"},
     "messages": [12, 40], "id": "3f2a…"}

``cursor`` is a monotonic integer, also persisted in ``.cursor`` beside the file; ``kind`` is
``summary`` (LLM or extractive summary) or ``raw`` (a bounded breadcrumb when summarizing
failed); ``messages`` is the 1-based message range of the session the entry archives (so the
raw messages stay recallable by name); ``id`` is the writer's idempotency key (crash recovery).

Appends are serialized across threads and processes by a file lock and fsync'ed; reasoning
text (``<think>…</think>`` and similar) is stripped from summaries (raw archives are kept
verbatim) and every entry is capped; the folder is created by the first write; rewrites of the
whole file are atomic (temp file + fsync + rename; temp files a kill left behind are removed by
:meth:`HistoryLog.remove_stray_files`, which opening a workspace calls).

Hostile content never blocks the workspace: a line that is not JSON, not UTF-8, nested too
deep for the JSON parser, longer than the line cap, or not an entry is skipped and reported
(:meth:`HistoryLog.scan` lists them with their line numbers) — reading, appending and the
cursor all go on with the valid lines. Entries are also indexed in the store as search documents of kind
``history`` in the session's scope, so recall finds them.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock, Timeout

from mindpalace.errors import StoreBusyError, StoreError, ValidationError
from mindpalace.fsutil import atomic_write
from mindpalace.scope import ANY, Scope
from mindpalace.store import Store
from mindpalace.summary import strip_reasoning
from mindpalace.textsafe import clean_text
from mindpalace.timeutil import from_iso, to_iso, utcnow

log = logging.getLogger(__name__)

HISTORY_FILENAME = "history.jsonl"
CURSOR_FILENAME = ".cursor"
DOC_KIND = "history"
KINDS = ("summary", "raw")
LOCK_TIMEOUT_SECONDS = 60.0  # an append holds the lock for one fsync; a minute means a dead holder
_TAIL_BLOCK_BYTES = 65_536  # read the file backwards in blocks this size to find the last cursor
MAX_LINE_BYTES = 4 * 1024 * 1024  # a capped entry is < 200 KB of JSON; anything longer is damage
_CURSOR_MAX_BYTES = 64  # .cursor holds one integer

EntryKind = Literal["summary", "raw"]

def cap_text(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, marking how much was cut."""
    if len(text) <= max_chars:
        return text
    marker = f" … [truncated {len(text) - max_chars} chars]"
    return text[: max(0, max_chars - len(marker))] + marker


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One line of history.jsonl. `messages` is the archived 1-based message range (inclusive)."""

    cursor: int
    timestamp: datetime
    session: str
    content: str
    kind: EntryKind
    scope: Scope
    messages: tuple[int, int] | None = None
    id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "cursor": self.cursor,
            "timestamp": to_iso(self.timestamp),
            "session": self.session,
            "content": self.content,
            "kind": self.kind,
            "scope": {"tenant": self.scope.tenant, "user": self.scope.user, "agent": self.scope.agent},
            "id": self.id,
        }
        if self.messages is not None:
            data["messages"] = list(self.messages)
        if self.extra:
            data["extra"] = self.extra
        return data

    @classmethod
    def from_json(cls, data: Any) -> HistoryEntry:
        """Parse one decoded line. Raises ValueError/KeyError/TypeError/IndexError/OverflowError
        on a malformed one."""
        if not isinstance(data, dict):
            raise TypeError("history line is not an object")
        cursor = data["cursor"]
        if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 1:
            raise ValueError(f"bad cursor {cursor!r}")
        kind = data["kind"]
        if kind not in KINDS:
            raise ValueError(f"bad kind {kind!r}")
        sc = data.get("scope") or {}
        if not isinstance(sc, dict):
            raise TypeError(f"scope is {type(sc).__name__}, not an object")
        session = str(data["session"])
        rng = data.get("messages")
        return cls(
            cursor=cursor,
            timestamp=from_iso(str(data["timestamp"])),
            session=session,
            content=clean_text(str(data["content"])),  # a JSON \ud800 escape: shown escaped
            kind=kind,
            scope=Scope(str(sc.get("tenant", "default")), str(sc.get("user", "")),
                        str(sc.get("agent", "")), session),
            messages=(int(rng[0]), int(rng[1])) if rng else None,
            id=str(data.get("id", "")),
            extra=dict(data.get("extra") or {}),
        )


@dataclass(frozen=True, slots=True)
class DamagedLine:
    """A line of history.jsonl that was skipped: its 1-based number, size (bytes) and why."""

    lineno: int
    size: int
    problem: str


@dataclass(frozen=True, slots=True)
class HistoryScan:
    """Every valid entry (oldest first) and every skipped line of one pass over the file."""

    entries: list[HistoryEntry]
    damaged: list[DamagedLine]


class HistoryLog:
    """The workspace's ``history.jsonl`` with its ``.cursor`` (seed 002's append_history).

    Example:
        >>> h = HistoryLog(workspace.history_dir)                      # doctest: +SKIP
        >>> e = h.append(session.scope, "- user prefers window seats", kind="summary")  # doctest: +SKIP
        >>> h.tail(1)[0].cursor == e.cursor                              # doctest: +SKIP
        True

    Args:
        directory: the folder holding history.jsonl (created if missing).
        entry_max_chars: cap on one entry's content (characters) after reasoning is stripped.
        lock_timeout_seconds: how long an append waits for the cross-process lock.

    Thread- and process-safe: every append and rewrite holds ``history.jsonl.lock``.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        entry_max_chars: int = 16_000,
        lock_timeout_seconds: float = LOCK_TIMEOUT_SECONDS,
    ) -> None:
        self.directory = Path(directory)  # created by the first write: reading never writes
        self.path = self.directory / HISTORY_FILENAME
        self.cursor_path = self.directory / CURSOR_FILENAME
        self.entry_max_chars = entry_max_chars
        self.lock_timeout_seconds = lock_timeout_seconds
        # the line cap grows with the entry cap: ≤ 6 bytes of JSON per character, plus fields
        self.max_line_bytes = max(MAX_LINE_BYTES, 6 * entry_max_chars + 65_536)
        # One lock object per path in this process (re-entrant per thread); the OS lock under
        # it excludes other threads and processes.
        self._lock = FileLock(str(self.path) + ".lock", is_singleton=True)

    # -- writing ---------------------------------------------------------------------------
    def append(
        self,
        scope: Scope,
        content: str,
        *,
        kind: EntryKind = "summary",
        messages: tuple[int, int] | None = None,
        entry_id: str | None = None,
        timestamp: datetime | None = None,
        extra: dict[str, Any] | None = None,
    ) -> HistoryEntry:
        """Append one entry and return it with its new cursor (durable when this returns).

        Args:
            scope: the session scope the entry belongs to (must be concrete).
            content: the text, capped to ``entry_max_chars`` characters; reasoning blocks
                (``<think>…``) are stripped from a ``summary`` (model output), never from a
                ``raw`` archive, which is the conversation's own text.
            kind: ``summary`` or ``raw``.
            messages: the inclusive 1-based message range it archives, if any.
            entry_id: idempotency key; a fresh uuid when None.
        Raises:
            ValidationError: unknown kind, bad range, or content empty after stripping.
            StoreBusyError: the lock was not acquired within ``lock_timeout_seconds``.
            StoreError: the file could not be written (nothing was appended).
        """
        scope = scope.require_concrete()
        if kind not in KINDS:
            raise ValidationError(f"history entry kind must be one of {KINDS}, got {kind!r}")
        if messages is not None and not (1 <= messages[0] <= messages[1]):
            raise ValidationError(f"history message range must be 1 ≤ first ≤ last, got {messages}")
        text = clean_text(str(content))
        if kind == "summary":  # model output may leak reasoning; a raw archive stays verbatim (I2)
            text = strip_reasoning(text)
        text = cap_text(text, self.entry_max_chars)
        if not text:
            raise ValidationError("history entry content is empty (after stripping reasoning text)")
        with self._locked():
            cursor = self._current_cursor() + 1
            entry = HistoryEntry(
                cursor=cursor, timestamp=timestamp or utcnow(), session=str(scope.session),
                content=text, kind=kind, scope=scope, messages=messages,
                id=entry_id or uuid.uuid4().hex, extra=dict(extra or {}),
            )
            line = json.dumps(entry.to_json(), ensure_ascii=False) + "\n"
            try:
                with open(self.path, "a+b") as fh:
                    # A crash mid-append can leave a partial last line: start on a fresh line
                    # so that fragment stays one (skipped) corrupt line.
                    fh.seek(0, os.SEEK_END)
                    if fh.tell() > 0:
                        fh.seek(-1, os.SEEK_END)
                        if fh.read(1) != b"\n":
                            fh.write(b"\n")
                    fh.write(line.encode("utf-8"))
                    fh.flush()
                    os.fsync(fh.fileno())
                self._write_cursor(cursor)
            except OSError as exc:
                raise StoreError(f"cannot append to {self.path}: {exc}") from exc
        return entry

    def rewrite(self, keep: Callable[[HistoryEntry], bool] | None = None) -> int:
        """Atomically rewrite the file with the valid entries `keep` accepts (all when None).

        Corrupt lines are dropped. The cursor never goes back: ``.cursor`` keeps its value even
        when the newest entries are dropped. Returns the number of entries kept.

        Raises:
            StoreBusyError: lock not acquired. StoreError: the rewrite failed (file unchanged).
        """
        with self._locked():
            cursor = self._current_cursor()
            kept = [e for e in self._iter_entries() if keep is None or keep(e)]
            body = "".join(json.dumps(e.to_json(), ensure_ascii=False) + "\n" for e in kept)
            atomic_write(self.path, body.encode("utf-8"))
            self._write_cursor(cursor)
        return len(kept)

    def remove_stray_files(self) -> int:
        """Delete temp files a killed rewrite or ``.cursor`` write left in the folder; returns
        how many. Runs under the writers' lock (a live writer's temp file is never touched) and
        only when there is something to remove, so it is cheap and writes nothing otherwise;
        skipped (0) when another process holds the lock or the folder is read-only."""
        patterns = (f".{HISTORY_FILENAME}.*.tmp", f".{CURSOR_FILENAME}.*.tmp")
        if not self.directory.is_dir() or not any(
                any(self.directory.glob(p)) for p in patterns):
            return 0
        removed = 0
        try:
            self._lock.acquire(timeout=0)
        except (Timeout, OSError):
            return 0
        try:
            for pattern in patterns:
                for stray in self.directory.glob(pattern):
                    try:
                        stray.unlink()
                        removed += 1
                    except OSError:
                        pass
        finally:
            self._lock.release()
        return removed

    # -- reading ---------------------------------------------------------------------------
    def read(
        self, after_cursor: int = 0, *, session: Scope | None = None, limit: int | None = None
    ) -> list[HistoryEntry]:
        """Entries with cursor > `after_cursor`, oldest first; only `session`'s when given."""
        out: list[HistoryEntry] = []
        for e in self._iter_entries():
            if e.cursor <= after_cursor:
                continue
            if session is not None and not _same_session(e, session):
                continue
            out.append(e)
            if limit is not None and len(out) >= limit:
                break
        return out

    def scan(self) -> HistoryScan:
        """One pass over the file: the valid entries and the damaged lines it skipped (a line
        that is not JSON / UTF-8, nested too deep to parse, longer than the line cap, or
        not an entry). Never raises for content; a missing file is an empty scan."""
        entries: list[HistoryEntry] = []
        damaged: list[DamagedLine] = []
        for lineno, raw, size in self._lines():
            entry, problem = _decode_line(raw, size, self.max_line_bytes)
            if entry is not None:
                entries.append(entry)
            elif problem:
                damaged.append(DamagedLine(lineno, size, problem))
        return HistoryScan(entries, damaged)

    def tail(self, n: int = 10, *, session: Scope | None = None) -> list[HistoryEntry]:
        """The newest `n` entries (of `session` when given), oldest first."""
        if n <= 0:
            return []
        return self.read(session=session)[-n:]

    def find(self, entry_id: str) -> HistoryEntry | None:
        """The entry with idempotency key `entry_id`, or None (newest match wins)."""
        found = None
        for e in self._iter_entries():
            if e.id == entry_id:
                found = e
        return found

    def cursor(self) -> int:
        """The last cursor handed out (0 for an empty history)."""
        with self._locked():
            return self._current_cursor()

    # -- indexing --------------------------------------------------------------------------
    @staticmethod
    def index_entry(store: Store, entry: HistoryEntry) -> int:
        """Make `entry` searchable: a document of kind ``history``, ref = cursor, in its
        session's scope. Idempotent (same ref replaces). Call inside the caller's transaction."""
        meta: dict[str, Any] = {"cursor": entry.cursor, "kind": entry.kind,
                                "timestamp": to_iso(entry.timestamp), "id": entry.id}
        if entry.messages is not None:
            meta["messages"] = list(entry.messages)
        return store.index_document(entry.scope, DOC_KIND, str(entry.cursor), entry.content, meta)

    # -- internals -------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The writers' lock (appends, rewrites); makes the folder on first use."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.directory}: {exc}") from exc
        try:
            self._lock.acquire(timeout=self.lock_timeout_seconds)
        except Timeout as exc:
            raise StoreBusyError(
                f"history lock {self._lock.lock_file} not acquired within "
                f"{self.lock_timeout_seconds}s; another process is writing history — retry"
            ) from exc
        try:
            yield
        finally:
            self._lock.release()

    def _iter_entries(self) -> Iterator[HistoryEntry]:
        for lineno, raw, size in self._lines():
            entry, problem = _decode_line(raw, size, self.max_line_bytes)
            if entry is not None:
                yield entry
            elif problem:
                log.warning("%s:%d: skipping a corrupt history line (%s)", self.path, lineno, problem)

    def _lines(self) -> Iterator[tuple[int, bytes, int]]:
        """(line number, bytes, size) of every line; a line over the cap is not held in memory
        (its bytes come back empty with its true size)."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below; a generator holds it
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc
        with fh:
            lineno = 0
            while True:
                raw = fh.readline(self.max_line_bytes + 1)
                if not raw:
                    return
                lineno += 1
                size = len(raw)
                if size > self.max_line_bytes and not raw.endswith(b"\n"):
                    while True:  # skip the rest of the oversized line in bounded chunks
                        more = fh.readline(_TAIL_BLOCK_BYTES)
                        size += len(more)
                        if not more or more.endswith(b"\n"):
                            break
                    raw = b""
                yield lineno, raw, size

    def _current_cursor(self) -> int:
        """max(.cursor, last valid line's cursor): a crash between the line and ``.cursor``
        must never hand out a cursor twice. A damaged ``.cursor`` is ignored (logged)."""
        stored = 0
        try:
            with open(self.cursor_path, "rb") as fh:
                text = fh.read(_CURSOR_MAX_BYTES + 1)
            if len(text) > _CURSOR_MAX_BYTES:
                raise ValueError("longer than one integer")
            stored = max(0, int(text.decode("ascii").strip() or 0))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("history cursor file %s is damaged (%s); recomputing from the file",
                        self.cursor_path, exc)
        return max(stored, self._last_line_cursor())

    def _last_line_cursor(self) -> int:
        """The cursor of the last valid line, reading backwards in blocks; damaged lines
        (including an oversized one, never held whole in memory) are passed over."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return 0
        with fh:
            fh.seek(0, os.SEEK_END)
            pos = fh.tell()
            buf = b""
            oversized = False  # inside a line longer than the cap: drop bytes until its start
            while pos > 0:
                step = min(_TAIL_BLOCK_BYTES, pos)
                pos -= step
                fh.seek(pos)
                buf = fh.read(step) + buf
                lines = buf.split(b"\n")
                # lines[0] may be partial unless we reached the start of the file
                complete = lines if pos == 0 else lines[1:]
                if oversized and complete:
                    complete = complete[:-1]  # the tail of the oversized line
                    oversized = False
                for raw in reversed(complete):
                    if not raw.strip():
                        continue
                    entry, _ = _decode_line(raw, len(raw), self.max_line_bytes)
                    if entry is not None:
                        return entry.cursor
                buf = lines[0] if pos > 0 else b""
                if len(buf) > self.max_line_bytes:
                    buf, oversized = b"", True
        return 0

    def _write_cursor(self, cursor: int) -> None:
        atomic_write(self.cursor_path, f"{cursor}\n".encode())


def _same_session(entry: HistoryEntry, scope: Scope) -> bool:
    """True when `entry` belongs to `scope` (fields set to ANY match everything)."""
    return all(
        want is ANY or got == want
        for got, want in zip(entry.scope.values(), scope.values(), strict=True)
    )


def _decode_line(raw: bytes, size: int, max_bytes: int) -> tuple[HistoryEntry | None, str]:
    """(entry, "") for a valid line; (None, why) for a damaged one; (None, "") for a blank one."""
    if size > max_bytes:
        return None, f"{size} bytes, over the {max_bytes}-byte line cap"
    if not raw.strip():
        return None, ""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    try:  # json.loads raises RecursionError on hostile nesting (100,000 deep): damage, skipped
        return HistoryEntry.from_json(json.loads(text)), ""
    except RecursionError:
        return None, "JSON nested too deep"
    except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:  # 1e999 → inf
        return None, f"not a history entry ({type(exc).__name__}: {str(exc)[:120]})"

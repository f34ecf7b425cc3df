"""L4: finished or idle sessions archived into monthly files and indexed for recall (seed 003).

GenericAgent archives raw sessions every 12 hours (compress → extract the user / agent
exchanges → de-duplicate → append to a monthly zip) but never reads them back. Here the
archive is also searchable and every exchange reads back verbatim by its reference:

    archive/<tenant>/2026-12.jsonl.gz     one JSON line per exchange (:class:`Exchange`)

* **What is archived**: the session's messages after its archive cursor (kv ``archive`` /
  ``through`` in the session scope), compressed into exchanges
  (:mod:`mindpalace.archive.exchanges`), when the session is finished (:meth:`archive`) or
  idle — no message for ``knowledge.archive_idle_hours`` (:meth:`archive_idle`). A session
  with a turn in flight (an active lease) is skipped.
* **De-duplicated**: an exchange's content hash is its identity; one already in the monthly
  file or in the index (from this or another session of the same user and agent) is not
  appended again.
* **Crash-safe and idempotent**: under one cross-process lock per tenant, the monthly file is
  rewritten whole — temp file, fsync, rename, fsync of the folder — so a reader or a kill sees
  the old file or the new one, never half a line; only then, in one store transaction, are the
  exchanges indexed (search documents of kind ``archive``, ref = hash, in the session scope;
  a kv entry per hash in the user-level scope) and the session's cursor advanced. A kill
  between the two leaves exchanges in the file that the next run finds by hash and indexes
  without appending them again. A second run on the same input changes nothing (I5).
* **Recall**: the documents are found by ``Session.recall`` and the recalled-memory block;
  ``archive:<hash>`` (:mod:`mindpalace.refs`) reads the line back from the monthly file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mindpalace.archive.exchanges import HASH_CHARS, Exchange, compress, split_exchanges
from mindpalace.errors import StoreBusyError, StoreError, ValidationError
from mindpalace.fsutil import atomic_write
from mindpalace.scope import Scope
from mindpalace.session.lease import current_lease
from mindpalace.session.messages import STREAM, MessageLog
from mindpalace.settings import KnowledgeSettings
from mindpalace.store import Store
from mindpalace.timeutil import require_aware, to_iso, utcnow

log = logging.getLogger(__name__)

DOC_KIND = "archive"
NAMESPACE = "archive"  # kv: "through" (session scope), "x:<hash>" (user-level scope)
CURSOR_KEY = "through"
LOCK_FILENAME = ".archive.lock"
LOCK_TIMEOUT_SECONDS = 120.0  # one run rewrites one month file per month touched: seconds
_SAFE_TENANT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_KEY = re.compile(rf"[0-9a-f]{{{HASH_CHARS}}}")


@dataclass
class ArchiveOutcome:
    """What archiving did to one session.

    Attributes:
        session: the session id.
        status: ``archived`` (new exchanges), ``unchanged`` (nothing new since the cursor, or
            only exchanges already archived), ``busy`` (a turn in flight), ``active`` (not
            idle yet).
        exchanges: exchanges of this run (new and already-archived ones).
        appended: exchanges newly written to a monthly file.
        duplicates: exchanges whose hash was already archived (not written again).
        indexed: search documents written.
        through: the session's archive cursor after the run (last archived message index).
        files: the monthly files written (paths relative to the archive folder).
    """

    session: str
    status: str
    exchanges: int = 0
    appended: int = 0
    duplicates: int = 0
    indexed: int = 0
    through: int = 0
    files: list[str] = field(default_factory=list)


class SessionArchive:
    """The L4 archive of one tenant.

    Example:
        >>> arch = SessionArchive(store, ws.archive_dir, "default")      # doctest: +SKIP
        >>> arch.archive(scope).appended                                  # doctest: +SKIP
        12
        >>> arch.read(scope, "archive:3f2a…").text()                      # doctest: +SKIP

    Args:
        store: the store protocol (messages read, documents / kv / cursor written).
        directory: the workspace's ``archive/`` folder (created by the first write).
        tenant: the tenant whose sessions this archive holds (I10).
        settings: ``[knowledge]`` (``archive_idle_hours``, ``archive_tool_output_max_chars``).
        clock: returns the current UTC time (inject a fixed one in tests).
    """

    def __init__(
        self, store: Store, directory: str | Path, tenant: str, *,
        settings: KnowledgeSettings | None = None, clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.tenant = Scope(tenant).tenant
        self.directory = Path(directory) / tenant_dirname(self.tenant)
        self.settings = settings or KnowledgeSettings()
        self.clock = clock
        self._lock = FileLock(str(self.directory / LOCK_FILENAME), is_singleton=True)

    # -- archiving ---------------------------------------------------------------------------
    def archive(self, scope: Scope) -> ArchiveOutcome:
        """Archive a finished session now (idle or not): every message after its cursor.

        Raises:
            ValidationError: `scope` is not a concrete session scope of this tenant.
            StoreBusyError: another process held the archive lock past its timeout.
            StoreError: the monthly file or the store could not be written (the cursor did not
                move; a re-run finishes the work without duplicates).
        """
        return self._archive(self._session_scope(scope), idle_only=False)

    def archive_idle(self, within: Scope) -> list[ArchiveOutcome]:
        """Archive every session under `within` (e.g. ``Scope(tenant, ANY, ANY, ANY)``) whose
        newest message is older than ``archive_idle_hours``; the others report ``active``."""
        return [self._archive(s, idle_only=True) for s in self.sessions(within)]

    def sessions(self, within: Scope) -> list[Scope]:
        """Every session scope of this tenant under `within` that has messages."""
        return [s for s, stream, _v in self.store.list_streams(within, prefix=STREAM)
                if stream == STREAM and s.tenant == self.tenant]

    def archive_if_idle(self, scope: Scope) -> ArchiveOutcome:
        """:meth:`archive` only when the session is idle past ``archive_idle_hours`` (else
        ``active``): one session's step of :meth:`archive_idle` (the background worker's unit)."""
        return self._archive(scope, idle_only=True)

    def _archive(self, scope: Scope, *, idle_only: bool) -> ArchiveOutcome:
        sid = str(scope.session)
        log_ = MessageLog(self.store, scope)
        now = require_aware("clock()", self.clock())
        if current_lease(self.store, scope, now) is not None:
            return ArchiveOutcome(sid, "busy", through=self.cursor(scope))
        with self._locked():
            through = self.cursor(scope)
            count = log_.count()
            if count <= through:
                return ArchiveOutcome(sid, "unchanged", through=through)
            pending = log_.list(from_index=through + 1)
            if idle_only and now - pending[-1].timestamp < timedelta(hours=self.settings.archive_idle_hours):
                return ArchiveOutcome(sid, "active", through=through)
            exchanges = [e for g in split_exchanges(pending) if (e := compress(
                g, tenant=self.tenant, user=str(scope.user), agent=str(scope.agent), session=sid,
                tool_output_max_chars=self.settings.archive_tool_output_max_chars)) is not None]
            out = ArchiveOutcome(sid, "unchanged", exchanges=len(exchanges), through=pending[-1].index)
            owner = scope.with_(session="")
            known = {e.key for e in exchanges if self.store.kv_get(owner, NAMESPACE, _xkey(e.key))}
            fresh = [e for e in exchanges if e.key not in known]
            self._append(fresh, out)
            out.duplicates = len(exchanges) - out.appended
            with self.store.transaction():
                for e in fresh:
                    if self.store.kv_get(owner, NAMESPACE, _xkey(e.key)) is not None:
                        continue  # the same content twice in this run: one line, one document
                    self.store.kv_put(owner, NAMESPACE, _xkey(e.key), {
                        "session": e.session, "month": e.month, "messages": [e.first, e.last]})
                    self.store.index_document(scope, DOC_KIND, e.key, e.text(), {
                        "timestamp": to_iso(e.started_at), "month": e.month,
                        "messages": [e.first, e.last], "session": e.session})
                    out.indexed += 1
                self.store.kv_put(scope, NAMESPACE, CURSOR_KEY, out.through)
            out.status = "archived" if out.appended or out.indexed else "unchanged"
            return out

    def _append(self, fresh: list[Exchange], out: ArchiveOutcome) -> None:
        """Write the exchanges not yet in their monthly file (whole-file atomic rewrite)."""
        by_month: dict[str, list[Exchange]] = {}
        for e in fresh:
            by_month.setdefault(e.month, []).append(e)
        for month, items in sorted(by_month.items()):
            path = self.month_path(month)
            lines, _damaged = self._lines(path)
            have = {k for k, _ in lines}
            new: list[str] = []
            for e in items:
                if e.key in have:
                    continue
                have.add(e.key)
                new.append(json.dumps(e.to_json(), ensure_ascii=False, sort_keys=True))
            if not new:
                continue
            body = "".join(line + "\n" for _, line in lines) + "".join(n + "\n" for n in new)
            atomic_write(path, gzip.compress(body.encode("utf-8"), mtime=0))
            out.appended += len(new)
            out.files.append(path.name)

    # -- reading -----------------------------------------------------------------------------
    def cursor(self, scope: Scope) -> int:
        """The session's last archived message index (0 = nothing archived yet)."""
        value = self.store.kv_get(scope.require_concrete(), NAMESPACE, CURSOR_KEY, 0)
        return int(value) if isinstance(value, int) else 0

    def read(self, scope: Scope, key: str) -> Exchange | None:
        """The archived exchange `key` (its hash, or ``archive:<hash>``) of `scope`'s tenant,
        user and agent, read back from its monthly file; None when unknown or another user's
        (I10)."""
        key = key.removeprefix("archive:")
        if not _KEY.fullmatch(key) or scope.tenant != self.tenant:
            return None
        owner = scope.require_concrete().with_(session="")
        where = self.store.kv_get(owner, NAMESPACE, _xkey(key))
        if not isinstance(where, dict) or not isinstance(where.get("month"), str):
            return None
        lines, _ = self._lines(self.month_path(where["month"]))
        for k, line in lines:
            if k == key:
                exchange = Exchange.from_json(json.loads(line))
                if (exchange.user, exchange.agent) == (owner.user, owner.agent):
                    return exchange
        return None

    def months(self) -> list[str]:
        """The months (``YYYY-MM``) that have an archive file, oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted(p.name.removesuffix(".jsonl.gz") for p in self.directory.glob("*.jsonl.gz"))

    def exchanges(self, month: str) -> Iterator[Exchange]:
        """Every exchange of one monthly file, in archive order (damaged lines skipped)."""
        for _, line in self._lines(self.month_path(month))[0]:
            yield Exchange.from_json(json.loads(line))

    def month_path(self, month: str) -> Path:
        if not re.fullmatch(r"\d{4}-\d{2}", month):
            raise ValidationError(f"an archive month is YYYY-MM, got {month!r}")
        return self.directory / f"{month}.jsonl.gz"

    def _lines(self, path: Path) -> tuple[list[tuple[str, str]], int]:
        """(hash, JSON line) of every valid line of a monthly file, and how many were damaged.
        A file that is not gzip (damage from outside) raises StoreError naming it: it is never
        silently replaced."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return [], 0
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        try:
            text = gzip.decompress(raw).decode("utf-8")
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise StoreError(f"{path} is damaged ({exc}); move it aside and run the archive "
                             "again — the store still holds every message") from exc
        out: list[tuple[str, str]] = []
        damaged = 0
        for line in text.splitlines():
            try:
                key = json.loads(line)["key"]
            except (ValueError, KeyError, TypeError, RecursionError):
                damaged += 1
                continue
            out.append((str(key), line))
        if damaged:
            log.warning("%s: %d damaged archive lines skipped", path, damaged)
        return out, damaged

    def _session_scope(self, scope: Scope) -> Scope:
        scope = scope.require_concrete()
        if scope.tenant != self.tenant:
            raise ValidationError(f"session {scope} is not in tenant {self.tenant!r} of this archive")
        if not scope.session:
            raise ValidationError("archive needs a session scope (session id is empty)")
        return scope

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.directory}: {exc}") from exc
        try:
            self._lock.acquire(timeout=LOCK_TIMEOUT_SECONDS)
        except Timeout as exc:
            raise StoreBusyError(f"archive lock {self._lock.lock_file} not acquired within "
                                 f"{LOCK_TIMEOUT_SECONDS:g}s; another process is archiving — retry") from exc
        try:
            for stray in self.directory.glob(".*.tmp"):  # a rewrite killed before its rename
                stray.unlink(missing_ok=True)
            yield
        finally:
            self._lock.release()


def tenant_dirname(tenant: str) -> str:
    """A folder name for `tenant` that cannot escape the archive folder: the tenant itself
    when it is a plain name, else ``tenant-<sha256 prefix>``."""
    if _SAFE_TENANT.fullmatch(tenant) and tenant not in (".", ".."):
        return tenant
    return "tenant-" + hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:16]


def _xkey(key: str) -> str:
    return f"x:{key}"



def describe(exchange: Exchange) -> dict[str, Any]:
    """A short JSON view of an exchange (CLI output)."""
    return {"ref": f"archive:{exchange.key}", "session": exchange.session,
            "messages": [exchange.first, exchange.last], "month": exchange.month,
            "started_at": to_iso(exchange.started_at)}

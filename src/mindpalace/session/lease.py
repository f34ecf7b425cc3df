"""One writer per session (I6): the per-session file lock and the durable turn lease (seed 002).

* The **session lock** (the store's lock ``session`` of the session's scope: a file lock on
  SQLite, an advisory lock on PostgreSQL) is taken by the consolidator and the idle compactor
  for their whole run, so they never race — across threads and processes. It is re-entrant
  within a thread.
* The **lease** says "a turn is in flight": the agent loop holds it while it works on a turn
  (``with session.lease(): …``). It lives in the store (kv ``session/lease``) with holder, pid,
  host and expiry so other processes see it; the idle compactor never touches a leased session.
  A lease of a dead process on this host, or past its expiry, no longer counts.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mindpalace.errors import StoreBusyError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store import Store
from mindpalace.timeutil import from_iso, to_iso, utcnow

STATE_NAMESPACE = "session"
LEASE_KEY = "lease"
SESSION_LOCK = "session"  # the store lock name of the per-session lock

Clock = Callable[[], datetime]


class SessionBusyError(StoreBusyError):
    """The session's turn lease is held by another live holder; try again after its turn."""

    def __init__(self, scope: Scope, holder: dict[str, Any]) -> None:
        self.scope, self.holder = scope, holder
        super().__init__(
            f"session {scope} has a turn in flight (lease of {holder.get('holder')!r}, pid "
            f"{holder.get('pid')} on {holder.get('host')}, expires {holder.get('expires_at')}); "
            "wait for it to finish or for the lease to expire"
        )


def hold(store: Store, scope: Scope, timeout_seconds: float) -> AbstractContextManager[None]:
    """Hold the session lock of `scope` for the block (the store's ``session`` lock: nothing
    is taken until the block is entered, so reading a session never writes).

    Raises:
        StoreBusyError: not acquired within `timeout_seconds` (another process is
            consolidating this session).
    """
    return store.lock(scope, SESSION_LOCK, timeout_seconds=timeout_seconds)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def lease_active(info: Any, now: datetime) -> bool:
    """True when the stored lease `info` still counts at `now` (not expired, holder alive)."""
    if not isinstance(info, dict):
        return False
    try:
        expires = from_iso(str(info["expires_at"]))
    except (KeyError, ValueError):
        return False
    if expires <= now:
        return False
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
        return _pid_alive(info["pid"])
    return True


@dataclass
class Lease:
    """A held turn lease. `renew()` pushes the expiry out by the TTL again."""

    store: Store
    scope: Scope
    token: str
    ttl_seconds: float
    clock: Clock
    lock_timeout_seconds: float
    expires_at: datetime

    def renew(self) -> None:
        """Extend the lease by its TTL from now.

        Raises:
            SessionBusyError: the lease was lost (expired and taken by another holder).
        """
        with hold(self.store, self.scope, self.lock_timeout_seconds):
            cur = self.store.kv_get(self.scope, STATE_NAMESPACE, LEASE_KEY)
            if not isinstance(cur, dict) or cur.get("token") != self.token:
                raise SessionBusyError(self.scope, cur if isinstance(cur, dict) else {})
            self.expires_at = self.clock() + timedelta(seconds=self.ttl_seconds)
            self.store.kv_put(self.scope, STATE_NAMESPACE, LEASE_KEY,
                              {**cur, "expires_at": to_iso(self.expires_at)})


@contextmanager
def turn_lease(
    store: Store,
    scope: Scope,
    *,
    holder: str = "",
    ttl_seconds: float = 600.0,
    lock_timeout_seconds: float = 120.0,
    clock: Clock = utcnow,
) -> Iterator[Lease]:
    """Hold the session's turn lease for the block (see :meth:`Session.lease`).

    Raises:
        SessionBusyError: another live holder has the lease.
        ValidationError: `ttl_seconds` is not positive.
    """
    if ttl_seconds <= 0:
        raise ValidationError(f"lease ttl_seconds must be > 0, got {ttl_seconds}")
    token = uuid.uuid4().hex
    with hold(store, scope, lock_timeout_seconds):
        now = clock()
        cur = store.kv_get(scope, STATE_NAMESPACE, LEASE_KEY)
        if lease_active(cur, now):
            raise SessionBusyError(scope, cur)
        expires = now + timedelta(seconds=ttl_seconds)
        store.kv_put(scope, STATE_NAMESPACE, LEASE_KEY, {
            "token": token, "holder": holder or f"pid-{os.getpid()}", "pid": os.getpid(),
            "host": socket.gethostname(), "acquired_at": to_iso(now), "expires_at": to_iso(expires),
        })
    lease = Lease(store, scope, token, ttl_seconds, clock, lock_timeout_seconds, expires)
    try:
        yield lease
    finally:
        with hold(store, scope, lock_timeout_seconds):
            cur = store.kv_get(scope, STATE_NAMESPACE, LEASE_KEY)
            if isinstance(cur, dict) and cur.get("token") == token:
                store.kv_delete(scope, STATE_NAMESPACE, LEASE_KEY)


def current_lease(store: Store, scope: Scope, now: datetime) -> dict[str, Any] | None:
    """The active lease of the session at `now`, or None."""
    cur = store.kv_get(scope, STATE_NAMESPACE, LEASE_KEY)
    return cur if lease_active(cur, now) else None

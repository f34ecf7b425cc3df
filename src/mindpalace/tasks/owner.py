"""Who runs a ledger tool call, and whether it still can: the in-flight owner check (I8).

A ``started`` ledger row with no outcome means one of two things: the call is running right now
(another thread, another process) or its process died mid-call. Only the second is an unknown
outcome; treating the first as one invites a ``resolve`` / retry that runs the side effect twice.
So a call records its owner — :class:`CallOwner`: host, node (boot id + pid namespace), pid,
the process's start time and a per-process call number — and a second caller asks
:func:`owner_liveness`:

* ``"alive"``: the owner provably still runs the call — this process with the call number in
  its registry of running calls (:func:`claim`), or another live process on this node (same pid
  *and* same start time, so a recycled pid is not mistaken for it);
* ``"gone"``: provably not — no such process, a zombie, a recycled pid, or this process without
  the call in its registry (the thread left the tool without recording an outcome);
* ``"gone"`` too when the owner ran on this very machine (same host name and machine id) in an
  earlier boot: a reboot (a power cut) ended every process of that boot;
* ``"unchecked"``: the owner is on another node (host or container): nothing here can prove it
  gone, so it is treated as running (never re-run on a guess).

The process checks read ``/proc`` (Linux); elsewhere a POSIX ``kill(pid, 0)`` tells a missing
pid only (no start time: a recycled pid counts as alive, the safe side), and on Windows only
this process's own calls can be judged. No fsync, no store access: it is all local reads.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

Liveness = Literal["alive", "gone", "unchecked"]


@dataclass(frozen=True, slots=True)
class CallOwner:
    """The process (and call within it) that runs a ledger tool call.

    Attributes:
        host: ``socket.gethostname()``.
        node: ``<machine id>/<boot id>/<pid namespace>`` (Linux): what processes that can see
            each other's pids share, and the machine that tells a reboot from another host;
            ``""`` where there is no ``/proc``.
        pid: the owner's process id (in its pid namespace).
        start: the process start time in clock ticks since boot (``/proc/<pid>/stat`` field
            22), None where unknown — with the pid, it names one process even after the pid
            is recycled.
        call: the call's number in its process (the key of the process's running-call registry).
    """

    host: str
    node: str
    pid: int
    start: int | None
    call: int

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "node": self.node, "pid": self.pid, "start": self.start, "call": self.call}

    @classmethod
    def from_json(cls, raw: Any) -> CallOwner | None:
        """The owner stored in a ledger row; None for a row without one (written before owners
        were recorded) or an unreadable one — judged like a dead owner, as it was then."""
        if not isinstance(raw, dict):
            return None
        try:
            start = raw.get("start")
            return cls(str(raw["host"]), str(raw["node"]), int(raw["pid"]),
                       None if start is None else int(start), int(raw["call"]))
        except (KeyError, TypeError, ValueError):
            return None

    def describe(self) -> str:
        """``process 123 on host 'h'`` — for error messages."""
        return f"process {self.pid} on host {self.host!r}"


@dataclass(frozen=True, slots=True)
class _Self:
    host: str
    node: str
    pid: int
    start: int | None


_self: _Self | None = None
_running: set[int] = set()
_running_lock = threading.Lock()
_calls = itertools.count(1)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of `pid` from ``/proc/<pid>/stat``, None when it
    does not exist. The command name (field 2) may hold spaces and parentheses: the fields are
    read after its last ``)``."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[0], int(fields[19])  # field 3 = state, field 22 = starttime


def _node() -> str:
    boot = _read("/proc/sys/kernel/random/boot_id")
    if boot is None:
        return ""
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pidns = 0
    machine = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id") or ""
    return f"{machine.strip()}/{boot.strip()}/{pidns}"


def _earlier_boot(theirs: str, mine: str) -> bool:
    """True when node `theirs` is this machine (same non-empty machine id) in another boot."""
    a, b = theirs.split("/"), mine.split("/")
    return len(a) == len(b) == 3 and a[0] != "" and a[0] == b[0] and a[1] != b[1]


def _identity() -> _Self:
    """This process's identity, computed once per process (a forked child computes its own)."""
    global _self
    me = _self
    if me is None or me.pid != os.getpid():
        pid = os.getpid()
        stat = _stat(pid)
        me = _self = _Self(socket.gethostname(), _node(), pid, None if stat is None else stat[1])
    return me


def _forget_after_fork() -> None:
    # The child runs none of its parent's calls; its identity differs (recomputed lazily).
    global _running_lock
    _running.clear()
    _running_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


@contextlib.contextmanager
def claim() -> Iterator[CallOwner]:
    """Register a call as running in this process for the block; yields its owner record.

    Write the owner into the ``started`` row inside the block and the outcome before leaving
    it: while the block runs, :func:`owner_liveness` says ``"alive"`` to every caller; after
    it, ``"gone"`` (a row still ``started`` then has an unknown outcome).
    """
    me = _identity()
    owner = CallOwner(me.host, me.node, me.pid, me.start, next(_calls))
    with _running_lock:
        _running.add(owner.call)
    try:
        yield owner
    finally:
        with _running_lock:
            _running.discard(owner.call)


def owner_liveness(owner: CallOwner | None) -> Liveness:
    """Whether `owner` still runs its call (see the module docstring); None (no owner recorded)
    is ``"gone"``."""
    if owner is None:
        return "gone"
    me = _identity()
    if owner.host == me.host and _earlier_boot(owner.node, me.node):
        return "gone"  # this machine rebooted since: no process of that boot runs anything
    if owner.host != me.host or owner.node != me.node:
        return "unchecked"
    if owner.pid == me.pid and owner.start == me.start:
        with _running_lock:
            return "alive" if owner.call in _running else "gone"
    return _process_liveness(owner.pid, owner.start)


def _process_liveness(pid: int, start: int | None) -> Liveness:
    """Whether process `pid` (started at `start`) of this node is alive."""
    if pid <= 0:
        return "gone"
    if os.path.isdir("/proc/self"):
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):  # a zombie has exited: it runs nothing
            return "gone"
        return "alive" if start is None or stat[1] == start else "gone"
    if os.name != "posix":
        return "unchecked"  # Windows: os.kill(pid, 0) would terminate the process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:  # it exists, owned by another user
        return "alive"
    return "alive"

"""AutoCompact: idle sessions are archived down to their recent window (seed 002, nanobot).

A session whose newest message is older than ``idle_compact_after_minutes`` (0 disables) is
compacted: everything before its recent window (``idle_keep_recent_messages``, snapped to a
safe boundary) goes to history.jsonl through the session's :class:`Consolidator`, so even short
sessions that never hit the token budget reach the archive the dream job reads. A session with
a turn in flight (an active lease, :meth:`Session.lease`) is never touched, and the compactor
holds the same per-session lock as the consolidator, so the two never race (I6). The clock is
injected, so tests never sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from mindpalace.scope import ANY
from mindpalace.session.consolidator import ConsolidationResult
from mindpalace.session.lease import current_lease
from mindpalace.session.messages import STREAM
from mindpalace.session.pairing import tool_groups
from mindpalace.timeutil import require_aware, utcnow

if TYPE_CHECKING:
    from mindpalace.memory import Memory, Session


@dataclass
class CompactOutcome:
    """What idle compaction did to one session: ``status`` is ``compacted``, ``busy`` (a turn
    in flight), ``active`` (not idle yet), ``unchanged`` (already compacted, nothing new) or
    ``disabled``."""

    session: str
    status: str
    result: ConsolidationResult | None = None

    @property
    def archived_messages(self) -> int:
        return self.result.archived_messages if self.result else 0


def recent_window_cut(messages: Sequence[dict[str, Any]], keep: int) -> int | None:
    """Position k: archive ``messages[:k]``, keep ``messages[k:]`` (the recent window).

    The window holds at most `keep` messages and starts at a group boundary. An idle session
    always archives all but at least its last turn: when the window would hold everything,
    it shrinks to the newest user-turn start (or, with none, the newest group). `keep` = 0
    archives everything. None when nothing can be archived safely (a single group).
    """
    n = len(messages)
    if n == 0:
        return None
    if keep <= 0:
        return n
    starts = [a for a, _ in tool_groups(list(messages))]
    cut = next((s for s in starts if n - s <= keep), n)
    if cut > 0:
        return cut
    later = [s for s in starts if s > 0]
    if not later:
        return None
    users = [s for s in later if messages[s].get("role") == "user"]
    return users[-1] if users else later[-1]


class AutoCompact:
    """Idle-session compactor.

    Example:
        >>> ac = AutoCompact(mem)                       # doctest: +SKIP
        >>> [o.status for o in ac.run_once()]           # doctest: +SKIP
        ['compacted', 'busy']

    Args:
        memory: the workspace handle; its ``session`` settings apply.
        clock: returns the current UTC time (inject a fixed clock in tests).
    """

    def __init__(self, memory: Memory, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.memory = memory
        self.settings = memory.settings.session
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return self.settings.idle_compact_after_minutes > 0

    def is_idle(self, session: Session, now: datetime | None = None) -> bool:
        """True when the session's newest message is older than the idle threshold.

        Raises:
            ValidationError: `now` (or the clock) is a naive datetime.
        """
        if not self.enabled:
            return False
        last = session.consolidator.last_activity()
        if last is None:
            return False
        now = require_aware("now", now or self.clock())
        return now - last >= timedelta(minutes=self.settings.idle_compact_after_minutes)

    def sessions(self) -> list[Session]:
        """Every session of this handle's tenant that has messages."""
        from mindpalace.memory import Session

        everyone = self.memory.scope().with_(user=ANY, agent=ANY, session=ANY)
        return [Session(self.memory, scope)
                for scope, stream, _v in self.memory.store.list_streams(everyone, prefix=STREAM)
                if stream == STREAM]

    def compact(self, session: Session, *, force: bool = False) -> CompactOutcome:
        """Compact one session if it is idle (or `force`) and no turn is in flight.

        `force` skips the idle check (``mindpalace compact SESSION``) but never the lease.
        Running it twice with no new messages changes nothing (I5).

        Raises:
            StoreBusyError: the session lock was not acquired in time.
            StoreError: history.jsonl or the store could not be written (nothing left the prompt).
        """
        c = session.consolidator
        with c.locked():  # the consolidator's lock: the lease check and the archive are one step
            now = require_aware("clock()", self.clock())
            if current_lease(session.store, session.scope, now) is not None:
                return CompactOutcome(session.id, "busy")
            if not force:
                if not self.enabled:
                    return CompactOutcome(session.id, "disabled")
                if not self.is_idle(session, now):
                    return CompactOutcome(session.id, "active")
            c.recover()
            count = session.messages.count()
            if c.state().idle_compacted_at == count:
                return CompactOutcome(session.id, "unchanged")
            live = c.live_messages()
            cut = recent_window_cut([m.message for m in live], self.settings.idle_keep_recent_messages)
            result = ConsolidationResult(budget_tokens=c.budget_tokens, target_tokens=c.target_tokens,
                                         last_consolidated=c.last_consolidated)
            if cut:
                cut_index = live[cut].index if cut < len(live) else live[-1].index + 1
                c.archive_before(cut_index, result)
            c.mark_idle_compacted(count)
            return CompactOutcome(session.id, "compacted" if result.entries else "unchanged", result)

    def run_once(self) -> list[CompactOutcome]:
        """One pass over every session of the tenant (the scheduler calls this periodically)."""
        if not self.enabled:
            return []
        return [self.compact(s) for s in self.sessions()]

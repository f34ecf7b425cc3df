"""AutoCompact: idle sessions are archived down to their recent window (seed 002, nanobot).

A session whose newest message is older than ``idle_compact_after_minutes`` (0 disables) is
compacted: everything before its recent window (``idle_keep_recent_messages``, snapped to a
safe boundary) goes to history.jsonl through the session's :class:`Consolidator`, so even short
sessions that never hit the token budget reach the archive the dream job reads. A session with
a turn in flight (an active lease, ``Session.lease``) is never touched, and the compactor
holds the same per-session lock as the consolidator, so the two never race (I6). The clock is
injected, so tests never sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mindpalace.scope import Scope
from mindpalace.session.consolidator import ConsolidationResult, Consolidator
from mindpalace.session.lease import current_lease
from mindpalace.session.messages import STREAM
from mindpalace.session.pairing import tool_groups
from mindpalace.settings import SessionSettings
from mindpalace.store import Store
from mindpalace.timeutil import require_aware, utcnow


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
        >>> ac = mem.autocompact()                                  # doctest: +SKIP
        >>> [o.status for o in ac.run_once(mem.scope(user=ANY, agent=ANY, session=ANY))]  # doctest: +SKIP
        ['compacted', 'busy']

    Args:
        store: lists the sessions that have messages and holds their turn leases.
        consolidator_for: the consolidator of a session scope (the facade gives each session's
            own, so its lock, history and summarizer are the ones its turns use).
        settings: ``[session]`` (``idle_compact_after_minutes``, ``idle_keep_recent_messages``).
        clock: returns the current UTC time (inject a fixed clock in tests).
    """

    def __init__(
        self,
        store: Store,
        consolidator_for: Callable[[Scope], Consolidator],
        *,
        settings: SessionSettings | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.consolidator_for = consolidator_for
        self.settings = settings or SessionSettings()
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return self.settings.idle_compact_after_minutes > 0

    def is_idle(self, scope: Scope, now: datetime | None = None) -> bool:
        """True when the session's newest message is older than the idle threshold.

        Raises:
            ValidationError: `now` (or the clock) is a naive datetime.
        """
        return self._idle(self.consolidator_for(scope), now)

    def _idle(self, c: Consolidator, now: datetime | None) -> bool:
        if not self.enabled:
            return False
        last = c.last_activity()
        if last is None:
            return False
        now = require_aware("now", now or self.clock())
        return now - last >= timedelta(minutes=self.settings.idle_compact_after_minutes)

    def sessions(self, within: Scope) -> list[Scope]:
        """Every session scope under `within` that has messages, e.g. a whole tenant with
        ``Scope(tenant, ANY, ANY, ANY)``."""
        return [scope for scope, stream, _v in self.store.list_streams(within, prefix=STREAM)
                if stream == STREAM]

    def compact(self, scope: Scope, *, force: bool = False) -> CompactOutcome:
        """Compact one session if it is idle (or `force`) and no turn is in flight.

        `force` skips the idle check (``mindpalace compact SESSION``) but never the lease.
        Running it twice with no new messages changes nothing (I5).

        Raises:
            StoreBusyError: the session lock was not acquired in time.
            StoreError: history.jsonl or the store could not be written (nothing left the prompt).
        """
        c = self.consolidator_for(scope)
        sid = str(c.scope.session)
        if c.messages.count() == 0:  # nothing to archive: a mistyped id leaves no trace
            return CompactOutcome(sid, "unchanged")
        with c.locked():  # the consolidator's lock: the lease check and the archive are one step
            now = require_aware("clock()", self.clock())
            if current_lease(self.store, c.scope, now) is not None:
                return CompactOutcome(sid, "busy")
            if not force:
                if not self.enabled:
                    return CompactOutcome(sid, "disabled")
                if not self._idle(c, now):
                    return CompactOutcome(sid, "active")
            c.recover()
            count = c.messages.count()
            if c.state().idle_compacted_at == count:
                return CompactOutcome(sid, "unchanged")
            live = c.live_messages()
            cut = recent_window_cut([m.message for m in live], self.settings.idle_keep_recent_messages)
            result = ConsolidationResult(budget_tokens=c.budget_tokens, target_tokens=c.target_tokens,
                                         last_consolidated=c.last_consolidated)
            if cut:
                cut_index = live[cut].index if cut < len(live) else live[-1].index + 1
                c.archive_before(cut_index, result)
            c.mark_idle_compacted(count)
            return CompactOutcome(sid, "compacted" if result.entries else "unchanged", result)

    def run_once(self, within: Scope) -> list[CompactOutcome]:
        """One pass over every session under `within` (the scheduler calls this periodically)."""
        if not self.enabled:
            return []
        return [self.compact(scope) for scope in self.sessions(within)]

"""Consolidator: keeps a session's prompt under its input budget by archiving old messages (seed 002).

Before each model call the agent loop calls :meth:`Consolidator.maybe_consolidate` with the token
count of the prompt's fixed parts. When the full prompt (fixed parts + tool schemas + archived
summary + messages after ``last_consolidated``) is over the input budget (window − max
completion − safety buffer), a **safe boundary** is chosen and the older chunk is summarized
into ``history.jsonl`` until the prompt is at ``consolidation_ratio`` of the budget.

The "Archived context summary" block covers every archived range (:mod:`.archived`): each
range keeps its own gated summary; when the block passes its cap the older ranges are merged
through the summary gate, and what still does not fit is named (message range, ``history:``
refs) rather than silently dropped. A failed summary (raw breadcrumb) never replaces a good one.

When the fixed part of the prompt (system prompt, memory blocks, tool schemas, this block)
alone is at or over the target, archiving cannot reach it: the consolidator archives once,
reports ``target_unreachable`` with the numbers, logs it, and backs off (durably) until the
fixed part shrinks or the budget changes, instead of calling the summarizer on every turn:
while backed off, only what must leave for the prompt to fit the budget is archived, as raw
breadcrumbs (no model call), so no message leaves the prompt unnamed.

Durability order (I2, I6): an intent is written to the store, the history line is appended and
fsync'ed under the history lock, then one store transaction indexes the entry as a ``history``
search document, advances ``last_consolidated`` and adds the range's summary to the state. The
state is one kv value versioned by a journal stream (``consolidation``): every change appends a
journal event with ``expected_version``, so two writers cannot lose each other's update (I6).
A crash between the line and the transaction is reconciled on the next run
(:meth:`Consolidator.recover`): the line is found by its id and applied once, or the intent is
dropped when no line was written.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from mindpalace.blocks import Block, Message, ToolSchema, block_messages
from mindpalace.checks import require_int
from mindpalace.errors import ValidationError
from mindpalace.history.log import HistoryEntry, HistoryLog, cap_text
from mindpalace.scope import Scope
from mindpalace.session.archived import (
    ARCHIVED_SUMMARY_HEADER,
    MAX_RANGES,
    RULES_HEADER,
    ArchivedRange,
    chunk_text,
    fold,
    merge_source,
    merged,
    pinned_rules,
    render_block,
    span,
)
from mindpalace.session.lease import STATE_NAMESPACE, hold
from mindpalace.session.messages import MessageLog, StoredMessage, transcript_line
from mindpalace.session.pairing import repair_pairing, tool_groups
from mindpalace.settings import SessionSettings
from mindpalace.store import NewEvent, Store
from mindpalace.summary import Summarizer, SummaryOutcome
from mindpalace.timeutil import to_iso, utcnow
from mindpalace.tokens import TokenCounter

log = logging.getLogger(__name__)

STATE_KEY = "consolidation"
INTENT_KEY = "consolidation_intent"
JOURNAL_STREAM = "consolidation"  # one event per state change; its version is the state's
BACKED_OFF = "target unreachable: summarizer backed off"  # why a backed-off run archives raw
# A preferred user-turn boundary may archive more than needed, but not below this share of
# the target: further than that, the nearest group boundary keeps more recent context.
USER_TURN_FLOOR = 0.5


@dataclass(frozen=True)
class ConsolidationState:
    """What the store holds for one session (kv ``session/consolidation``).

    Attributes:
        last_consolidated: index of the newest archived message (0 = none); the prompt holds
            the messages after it.
        last_summary: what the newest range shows (its summary or bounded raw breadcrumb).
        last_kind: ``summary`` or ``raw`` for the entry `last_summary` came from.
        history_cursor: cursor of the newest history entry of this session (0 = none).
        entries: history entries written for this session.
        idle_compacted_at: message count when idle compaction last ran (I5 for AutoCompact).
        ranges: every archived range's summary, oldest first (the archived-context block).
        block_cap_tokens: the block's token cap when it was last written (0 = the setting's).
        backoff: the fixed part the target was unreachable for (``system_tokens``,
            ``tools_tokens``, ``budget``); consolidation waits until the budget changes or
            that fixed part shrinks (a larger one is still unreachable). None = none.
        version: the journal version this state was written at (0 = never).
    """

    last_consolidated: int = 0
    last_summary: str = ""
    last_kind: str = ""
    history_cursor: int = 0
    entries: int = 0
    idle_compacted_at: int | None = None
    updated_at: str = ""
    ranges: tuple[ArchivedRange, ...] = ()
    block_cap_tokens: int = 0
    backoff: dict[str, int] | None = None
    version: int = 0

    @classmethod
    def from_json(cls, data: Any) -> ConsolidationState:
        if not isinstance(data, dict):
            return cls()
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "ranges"}
        state = cls(**known)
        if "ranges" in data:
            got = (ArchivedRange.from_json(r) for r in data.get("ranges") or ())
            return replace(state, ranges=tuple(r for r in got if r is not None))
        if state.last_summary and state.last_consolidated:  # written before ranges existed
            legacy = ArchivedRange(1, state.last_consolidated, state.history_cursor,
                                   state.history_cursor, state.last_summary,
                                   state.last_kind or "summary", state.entries or 1)
            return replace(state, ranges=(legacy,))
        return state

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["ranges"] = [r.to_json() for r in self.ranges]
        return data


@dataclass
class ConsolidationResult:
    """The outcome of one :meth:`Consolidator.maybe_consolidate` (or idle compaction) run.

    Attributes:
        entries: history entries written (0 = nothing archived).
        archived_messages: messages that left the prompt.
        prompt_tokens_before / prompt_tokens_after: full prompt estimate (tokens).
        budget_tokens / target_tokens: the input budget and the consolidation target (tokens).
        over_budget: the prompt is still over budget (the newest group alone is too big;
            the context builder's last-resort trimming must act).
        summary_tokens_spent: LLM (or extractive) tokens used by summaries (prompt + reply).
        raw_fallbacks: entries archived as raw breadcrumbs because the summary failed the gate.
        last_consolidated: the cursor after the run.
        summary_calls: summarizer requests made (pieces, chunks of oversized pieces, merges).
        merged_ranges: archived ranges merged into one summary to keep the block under its cap.
        fixed_tokens: the fixed part after the run: system prompt and memory blocks, tool
            schemas, the archived-context block and reply priming (tokens).
        target_unreachable: the fixed part alone is at or over the target, so no archiving
            can reach it (the run archived once, or backed off — see `backed_off`).
        backed_off: the target was found unreachable before for this budget and a fixed part
            no smaller: no summarizer call; what had to leave to fit the budget was archived
            as raw breadcrumbs.
    """

    entries: int = 0
    archived_messages: int = 0
    prompt_tokens_before: int = 0
    prompt_tokens_after: int = 0
    budget_tokens: int = 0
    target_tokens: int = 0
    over_budget: bool = False
    summary_tokens_spent: int = 0
    raw_fallbacks: int = 0
    last_consolidated: int = 0
    summary_calls: int = 0
    merged_ranges: int = 0
    fixed_tokens: int = 0
    target_unreachable: bool = False
    backed_off: bool = False
    written: list[HistoryEntry] = field(default_factory=list)

    @property
    def consolidated(self) -> bool:
        return self.entries > 0

    def to_json(self) -> dict[str, Any]:
        """The counts and cursors as JSON (``written`` as the history cursors of its entries)."""
        data = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "written"}
        return {**data, "history": [e.cursor for e in self.written]}


def choose_boundary(
    messages: Sequence[dict[str, Any]],
    group_tokens: Sequence[int],
    *,
    fixed_tokens: int,
    target_tokens: int,
) -> int | None:
    """The safe cut k (keep ``messages[k:]``) that brings the prompt to `target_tokens`.

    Args:
        messages: the live messages (after the cursor), oldest first.
        group_tokens: token cost of each :func:`tool_groups` group of `messages` (repaired).
        fixed_tokens: everything else in the prompt (system, tools, summary bound, priming).
        target_tokens: the occupancy to reach (ratio · budget).

    Returns:
        A group start > 0 — never inside a call/result group, never past the newest group —
        or None when `messages` is a single group (nothing can be archived safely). The
        first user-turn start at or after the smallest sufficient cut is preferred, unless it
        would go below ``USER_TURN_FLOOR`` · target; otherwise the smallest sufficient cut
        (the nearest group boundary, e.g. inside a long tool loop). When no cut reaches the
        target, the newest group start (archive as much as is safe).
    """
    groups = tool_groups(list(messages))
    if len(group_tokens) != len(groups):
        raise ValidationError("group_tokens must have one entry per tool group")
    if len(groups) < 2:
        return None
    # remaining[g] = prompt tokens when groups g… are kept
    remaining = [0] * (len(groups) + 1)
    remaining[len(groups)] = fixed_tokens
    for g in range(len(groups) - 1, -1, -1):
        remaining[g] = remaining[g + 1] + group_tokens[g]
    first_ok = next((g for g in range(1, len(groups)) if remaining[g] <= target_tokens), None)
    if first_ok is None:
        return groups[-1][0]
    floor = USER_TURN_FLOOR * target_tokens
    for g in range(first_ok, len(groups)):
        if remaining[g] < floor:
            break
        if messages[groups[g][0]].get("role") == "user":
            return groups[g][0]
    return groups[first_ok][0]


class Consolidator:
    """Per-session consolidator (seed 002's ``maybe_consolidate_by_tokens``).

    Example:
        >>> c = session.consolidator                                           # doctest: +SKIP
        >>> r = c.maybe_consolidate(system_tokens=850, tools=tool_schemas)      # doctest: +SKIP
        >>> msgs = session.messages.list(from_index=c.last_consolidated + 1)    # doctest: +SKIP

    Args:
        store: the store protocol (messages, consolidation state, the history index).
        scope: the session scope; every read and write is filtered by it (I10).
        history: the history.jsonl the archive is appended to.
        counter: the token counter (I9).
        summarizer: the LLM behind the one summary gate (I3).
        settings: ``[session]`` (window, reply reservation, ratio, caps).

    Thread- and process-safe: every run holds the session lock (the store's ``session`` lock
    of `scope`, :func:`~mindpalace.session.lease.hold`) shared with
    :class:`~mindpalace.session.autocompact.AutoCompact` and the turn lease.
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        history: HistoryLog,
        counter: TokenCounter,
        summarizer: Summarizer,
        settings: SessionSettings | None = None,
    ) -> None:
        self.store = store
        self.scope = scope.require_concrete()
        self.messages = MessageLog(store, self.scope)
        self.history = history
        self.counter = counter
        self.summarizer = summarizer
        self.settings = settings or SessionSettings()
        self._msg_tokens: dict[int, int] = {}  # message index → tokens (messages never change)
        self._live_cache: dict[int, StoredMessage] = {}  # index → message, only after the cursor
        self._cache_lock = threading.Lock()
        self._run_target: int | None = None  # target of the run in progress (held lock only)

    # -- budget ----------------------------------------------------------------------------
    @property
    def budget_tokens(self) -> int:
        """The input budget (tokens): ``[session]``'s :attr:`~SessionSettings.input_budget_tokens`."""
        return self.settings.input_budget_tokens

    @property
    def target_tokens(self) -> int:
        """Occupancy consolidation brings the prompt down to: ratio · budget (tokens)."""
        return int(self.settings.consolidation_ratio * self.budget_tokens)

    @property
    def summary_cap_tokens(self) -> int:
        """Cap on the archived-context block (every range's summary together):
        min(summary_max_tokens, share · target), at least 16 tokens. One new range's summary
        gets half of it. During a run with an explicit budget the target is that run's (set
        under the lock)."""
        s = self.settings
        target = self._run_target or self.target_tokens
        return max(16, min(s.summary_max_tokens, int(s.summary_share_of_target * target)))

    # -- state -----------------------------------------------------------------------------
    def state(self) -> ConsolidationState:
        """The stored consolidation state (read fresh from the store every time)."""
        return ConsolidationState.from_json(self.store.kv_get(self.scope, STATE_NAMESPACE, STATE_KEY))

    @property
    def last_consolidated(self) -> int:
        """Index of the newest archived message (0 = none archived)."""
        return self.state().last_consolidated

    @property
    def last_summary(self) -> str:
        """What the newest archived range shows (summary or bounded raw breadcrumb), "" when
        none. The prompt shows every range: :meth:`summary_text`."""
        return self.state().last_summary

    def live_messages(self) -> list[StoredMessage]:
        """Messages still in the prompt: those after ``last_consolidated``, oldest first."""
        return self._messages_after(self.last_consolidated)

    def _messages_after(self, cursor: int) -> list[StoredMessage]:
        """Messages with index > `cursor`. Stored messages never change (append-only, one
        index each), so only the ones this object has not seen yet are read from the store."""
        log = self.messages
        with self._cache_lock:  # the context builder may read while a consolidation runs
            count = log.count()
            for old in [i for i in self._live_cache if i <= cursor]:
                del self._live_cache[old]
                self._msg_tokens.pop(old, None)
            start = max(cursor, max(self._live_cache, default=cursor)) + 1
            if start <= count:
                for m in log.list(from_index=start, to_index=count):
                    self._live_cache[m.index] = m
            return [self._live_cache[i] for i in range(cursor + 1, count + 1)]

    def summary_text(self, summary: str | None = None) -> str | None:
        """The "Archived context summary" block text (None when nothing is archived yet).

        Every archived range of the stored state, oldest first, each labelled with its message
        range and ``history:`` refs, within the block cap (:func:`~.archived.render_block`:
        ranges that do not fit are named, with their pinned user rules). With `summary`, the
        block that would show just that text."""
        if summary is not None:
            return f"{ARCHIVED_SUMMARY_HEADER}:\n{summary}" if summary else None
        return self._block(self.state())

    def _block_cap(self, state: ConsolidationState) -> int:
        """The block's cap now (tokens): a run's own cap while it runs; otherwise the larger
        of the setting's and the last run's, so one run under a tiny explicit budget does not
        leave the block cut at every later, larger budget (the builder still shrinks it to
        fit each build)."""
        if self._run_target is not None:
            return self.summary_cap_tokens
        return max(state.block_cap_tokens, self.summary_cap_tokens)

    def _block(self, state: ConsolidationState, cap_tokens: int | None = None, *, compact: bool = False) -> str | None:
        cap = self._block_cap(state)
        return render_block(state.ranges, self.counter, cap if cap_tokens is None else min(cap, cap_tokens),
                            compact=compact)

    def summary_text_under(self, cap_tokens: int, *, compact: bool = False) -> str | None:
        """The archived-context block (:meth:`summary_text`) under at most `cap_tokens` tokens
        of text (never more than the block's own cap): ranges that do not fit are hidden and
        named with their ``history:`` refs and pinned rules (:func:`~.archived.render_block`;
        `compact`: named on the header's line, the small prompt's form). Read-only. None when
        nothing is archived.

        Raises:
            ValidationError: `cap_tokens` is not a positive int."""
        return self._block(self.state(), require_int("cap_tokens", cap_tokens, minimum=1), compact=compact)

    def prompt_tokens(self, *, system_tokens: int = 0, tools: list[ToolSchema] | None = None) -> int:
        """The full prompt estimate now: fixed parts + tools + archived summary + repaired
        live messages + reply priming (tokens; exact for the configured tokenizer, I9)."""
        live = self.live_messages()
        return self._fixed_tokens(system_tokens, tools, self.summary_text()) + sum(
            self._group_costs(live))

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the per-session lock (re-entrant in a thread; shared with AutoCompact)."""
        with hold(self.store, self.scope, self.settings.lock_timeout_seconds):
            yield

    # -- the seed's maybe_consolidate_by_tokens ----------------------------------------------
    def maybe_consolidate(
        self,
        *,
        system_tokens: int = 0,
        tools: list[ToolSchema] | None = None,
        budget_tokens: int | None = None,
        system_tokens_from: Callable[[int], int] | None = None,
    ) -> ConsolidationResult:
        """Archive old messages when the full prompt is over the input budget.

        Args:
            system_tokens: tokens of the prompt's fixed messages (system prompt, injected
                memory …) as counted by ``counter.count_message`` per message.
            system_tokens_from: instead of `system_tokens`, the fixed messages' tokens as a
                function of the first live message's index, for a fixed part that follows the
                live messages (the message-dates note): the fixed part is re-measured after a
                cut, so the dates of messages just archived never make the target look
                unreachable; an index past the last message gives the part with no such note
                (what the back-off compares).
            tools: the tool schemas sent with the request (counted with their overhead).
            budget_tokens: the prompt budget of this call (tokens); None = the input budget
                (window − max completion − safety buffer). The target is
                ``consolidation_ratio`` of it.

        Returns:
            A :class:`ConsolidationResult`; ``consolidated`` is False when the prompt fits
            (running it again on unchanged input changes nothing, I5), and when an earlier run
            found the target unreachable for this budget and a fixed part no smaller
            (``backed_off``: no summarizer call until the fixed part shrinks or the budget
            changes, only raw archiving down to the budget; the run that finds it archives
            once, sets ``target_unreachable`` and logs a warning with the numbers).

        Raises:
            ValidationError: negative `system_tokens`.
            StoreBusyError: the session lock was not acquired within ``lock_timeout_seconds``.
            StoreError: history.jsonl or the store could not be written; the messages stay in
                the prompt (nothing leaves without a durable copy, I2).
        """
        require_int("system_tokens", system_tokens, minimum=0)
        budget = self.budget_tokens if budget_tokens is None else require_int("budget_tokens", budget_tokens)
        target = int(self.settings.consolidation_ratio * budget)
        if system_tokens_from is None:
            def system_tokens_from(_: int) -> int:
                return system_tokens
        with self.locked():
            self._run_target = target
            try:
                return self._consolidate(system_tokens_from, tools, budget, target)
            finally:
                self._run_target = None

    def _consolidate(
        self, system_from: Callable[[int], int], tools: list[ToolSchema] | None, budget: int, target: int
    ) -> ConsolidationResult:
        """maybe_consolidate's body; the caller holds the session lock."""
        self.recover()
        state = self.state()
        live = self._messages_after(state.last_consolidated)
        costs = self._group_costs(live)
        system_tokens = system_from(state.last_consolidated + 1)
        fixed = self._fixed_tokens(system_tokens, tools, self._block(state))
        before = fixed + sum(costs)
        result = ConsolidationResult(
            prompt_tokens_before=before, prompt_tokens_after=before,
            budget_tokens=budget, target_tokens=target,
            last_consolidated=state.last_consolidated, fixed_tokens=fixed)
        if before <= budget:
            return result
        # the back-off compares the part that does not follow the live messages
        past_last = live[-1].index + 1 if live else state.last_consolidated + 1
        key = {"system_tokens": system_from(past_last), "budget": budget,
               "tools_tokens": self.counter.count_messages([], tools) - self.counter.count_messages([])}
        backed_off = _still_unreachable(state.backoff, key)
        if backed_off:
            # No summarizer call every turn (I4): only what must leave for the prompt to fit the
            # budget is archived, as raw breadcrumbs — named in the block, never silently dropped.
            result.target_unreachable = result.backed_off = True
            log.debug("session %s: consolidation backed off (target %d unreachable, fixed part "
                      "%d tokens); archiving raw down to the budget", self.scope, target, fixed)
        # Bound the block by its cap so the prompt still fits once it grows.
        empty = sum(self.counter.count_message(m) for m in block_messages(Block.ARCHIVED_SUMMARY, ""))
        goal = budget if backed_off else target

        def cut_for(system: int) -> int | None:
            bound = self._fixed_tokens(system, tools, None) + empty + self.summary_cap_tokens
            return choose_boundary([m.message for m in live], costs, fixed_tokens=bound, target_tokens=goal)

        cut = cut_for(system_tokens)
        if cut is not None and key["system_tokens"] < system_tokens:  # the note shrinks with a cut
            cut = _smallest_dated_cut(live, cut, lambda c: cut_for(system_from(live[c].index)))
        if cut is not None:
            self._archive(live[:cut], result, BACKED_OFF if backed_off else "")
        after = self.state()
        rest = self._messages_after(after.last_consolidated)
        system_tokens = system_from(after.last_consolidated + 1)  # the dates of what is left
        result.fixed_tokens = self._fixed_tokens(system_tokens, tools, self._block(after))
        result.prompt_tokens_after = result.fixed_tokens + sum(self._group_costs(rest))
        result.over_budget = result.prompt_tokens_after > budget
        result.last_consolidated = after.last_consolidated
        if backed_off:
            return result
        if result.fixed_tokens >= target:
            result.target_unreachable = True
            log.warning(
                "session %s: consolidation target unreachable: the fixed part is %d tokens "
                "(system prompt and memory blocks %d, tool schemas %d, archived summary and "
                "priming %d) ≥ target %d (consolidation_ratio %s × budget %d); archived %d "
                "messages once and backing off until the fixed part shrinks or the budget changes",
                self.scope, result.fixed_tokens, system_tokens, key["tools_tokens"],
                result.fixed_tokens - system_tokens - key["tools_tokens"], target,
                self.settings.consolidation_ratio, budget, result.archived_messages)
            self._update(replace(after, backoff=key), "backoff", key)
        elif after.backoff is not None:
            self._update(replace(after, backoff=None), "backoff", {})
        return result

    def archive_before(self, cut_index: int, result: ConsolidationResult | None = None) -> ConsolidationResult:
        """Archive every live message with index < `cut_index` (the caller picked a safe cut).

        Used by idle compaction. Holds the session lock. Raises ValidationError when
        `cut_index` would split a call/result group.
        """
        result = result or ConsolidationResult(budget_tokens=self.budget_tokens,
                                               target_tokens=self.target_tokens)
        with self.locked():
            self.recover()
            live = self.live_messages()
            chunk = [m for m in live if m.index < cut_index]
            if not chunk:
                return result
            starts = {live[s].index for s, _ in tool_groups([m.message for m in live])}
            if cut_index <= live[-1].index and cut_index not in starts:
                raise ValidationError(f"message {cut_index} is inside a tool call/result group")
            self._archive(chunk, result)
            result.last_consolidated = self.last_consolidated
        return result

    # -- recovery (I5, I6) -----------------------------------------------------------------
    def recover(self) -> bool:
        """Reconcile a crash between the history line and the cursor advance. Idempotent.

        Returns True when a written-but-unapplied entry was applied.
        """
        store, scope = self.store, self.scope
        if store.kv_get(scope, STATE_NAMESPACE, INTENT_KEY) is None:  # the common case
            return False
        with self.locked():
            # re-read under the lock: a live writer's intent is gone once we get the lock
            intent = store.kv_get(scope, STATE_NAMESPACE, INTENT_KEY)
            if not isinstance(intent, dict):
                return False
            entry = self.history.find(str(intent.get("id", "")))
            state = self.state()
            applied = False
            with store.transaction():
                if entry is not None and entry.messages is not None and \
                        entry.messages[0] == state.last_consolidated + 1:
                    rules = tuple(str(r) for r in intent.get("rules") or ())
                    self._commit(entry, state, str(intent.get("summary", "")), rules,
                                 int(intent.get("cap") or 0) or self.summary_cap_tokens)
                    applied = True
                store.kv_delete(scope, STATE_NAMESPACE, INTENT_KEY)
            if applied:
                log.warning("session %s: applied history entry %d left by an interrupted "
                            "consolidation", scope, entry.cursor if entry else -1)
            return applied

    # -- internals -------------------------------------------------------------------------
    def _fixed_tokens(self, system_tokens: int, tools: list[ToolSchema] | None, text: str | None) -> int:
        """`system_tokens` + the archived-context block `text` (as its memory exchange) + tool
        schemas + reply priming."""
        block: list[Message] = block_messages(Block.ARCHIVED_SUMMARY, text) if text else []
        # count_messages adds the reply priming and the tool schemas once
        return system_tokens + self.counter.count_messages(block, tools)

    def _message_tokens(self, m: StoredMessage) -> int:
        n = self._msg_tokens.get(m.index)
        if n is None:
            n = self._msg_tokens[m.index] = self.counter.count_message(m.message)
        return n

    def _group_costs(self, live: list[StoredMessage]) -> list[int]:
        """Tokens of each tool group as it will appear in the prompt (after pairing repair)."""
        msgs = [m.message for m in live]
        costs = []
        for a, b in tool_groups(msgs):
            group = msgs[a:b]
            repaired, report = repair_pairing(group)
            if report.ok:
                costs.append(sum(self._message_tokens(m) for m in live[a:b]))
            else:
                costs.append(sum(self.counter.count_message(m) for m in repaired))
        return costs

    def _input_limit(self) -> int:
        """Tokens of text one summarizer request may carry: ``summary_input_max_tokens`` less
        the request's instructions (their size at a 5-digit ``max_tokens``, an upper bound),
        so the whole request stays under the setting; at least 1."""
        cap = self.settings.summary_input_max_tokens
        return max(cap - self.summarizer.request_overhead_tokens(99_999), 1)

    def _pieces(self, chunk: list[StoredMessage]) -> list[list[StoredMessage]]:
        """Split an archive chunk at group boundaries into summarizer-sized pieces (a group
        larger than ``summary_input_max_tokens`` is a piece alone; :meth:`_summarize` cuts its
        text further)."""
        limit = self._input_limit()
        msgs = [m.message for m in chunk]
        pieces: list[list[StoredMessage]] = []
        cur: list[StoredMessage] = []
        cur_tokens = 0
        for a, b in tool_groups(msgs):
            n = sum(self._message_tokens(m) for m in chunk[a:b])
            if cur and cur_tokens + n > limit and n <= limit:
                pieces.append(cur)
                cur, cur_tokens = [], 0
            cur.extend(chunk[a:b])  # an oversized group takes the small ones before it along
            cur_tokens += n
        if cur:
            pieces.append(cur)
        return pieces

    def _archive(self, chunk: list[StoredMessage], result: ConsolidationResult, degraded: str = "") -> None:
        """Archive `chunk` piece by piece; `degraded` (or a provider failure on the way: stop
        hammering it this round) archives raw breadcrumbs without calling the summarizer."""
        for piece in self._pieces(chunk):
            entry, spent, why, calls, failed = self._archive_piece(piece, degraded)
            result.entries += 1
            result.archived_messages += len(piece)
            result.summary_tokens_spent += spent
            result.summary_calls += calls
            result.written.append(entry)
            if entry.kind == "raw":
                result.raw_fallbacks += 1
            if failed:
                degraded = degraded or why
        if not degraded:
            self._merge_if_over_cap(result)

    def _archive_piece(
        self, piece: list[StoredMessage], degraded: str
    ) -> tuple[HistoryEntry, int, str, int, bool]:
        """Summarize and archive one piece. Returns (entry, tokens spent, why it failed,
        summarizer calls, whether the provider failed — a gate rejection is not that)."""
        first, last = piece[0].index, piece[-1].index
        source = "\n".join(transcript_line(m.index, m.message) for m in piece)
        cap = self.summary_cap_tokens
        summary, spent, why, calls, failed = "", 0, degraded, 0, False
        if not degraded:
            out, calls = self._summarize(source, max(16, cap // 2))
            summary, spent, why, failed = out.text or "", out.tokens_spent, out.reason, bool(out.error)
        if summary:
            kind, content, injected = "summary", summary, summary
        else:  # a breadcrumb shows little: it must never crowd a good summary out of the block
            kind = "raw"
            content = self._breadcrumb(piece, first, last, why)
            injected = self.counter.truncate(content, max(16, cap // 4))
        users = [_content(m.message) for m in piece if m.message.get("role") == "user"]
        rules = pinned_rules(users, injected)
        entry = self._write(kind, content, (first, last), injected, rules, cap)
        return entry, spent, why, calls, failed

    def _summarize(self, source: str, max_tokens: int) -> tuple[SummaryOutcome, int]:
        """Summarize `source` with no request over ``summary_input_max_tokens``: a longer text
        is cut into chunks summarized one by one, and their summaries are summarized again
        (map-reduce) until one summary of at most `max_tokens` is left. Returns the outcome
        (the first failure, if any) and the number of summarizer calls made.

        The limit holds for the whole request — text plus the summarizer's instructions. A
        setting that leaves too little room beside the instructions to summarize anything
        (fewer than twice ``summary.min_tokens`` of text) makes no call: the outcome is a
        failure naming the numbers, and the caller archives a raw breadcrumb."""
        limit = self._input_limit()
        if limit < 2 * self.summarizer.settings.min_tokens:
            cap = self.settings.summary_input_max_tokens
            return SummaryOutcome(None, None, f"summary_input_max_tokens {cap} leaves {limit} tokens of "
                                  "text beside the summarize instructions"), 0
        calls, spent = 0, 0
        text = source
        while True:
            if self.counter.count(text) <= limit:
                out = self.summarizer.summarize(text, max_tokens=max_tokens)
                return replace(out, tokens_spent=spent + out.tokens_spent), calls + 1
            chunks = chunk_text(text, self.counter, limit)
            # each chunk's share; a level must shrink the text, or the loop would not end
            per = max(self.summarizer.settings.min_tokens * 2,
                      min(max_tokens, limit // max(4, len(chunks))))
            parts = []
            for chunk in chunks:
                if self.counter.count(chunk) <= per:  # already short (a tail): kept as it is
                    parts.append(chunk.strip())
                    continue
                out = self.summarizer.summarize(chunk, max_tokens=per)
                calls += 1
                spent += out.tokens_spent
                if not out.ok:
                    return replace(out, tokens_spent=spent), calls
                parts.append(str(out.text))
            joined = "\n".join(parts)
            if self.counter.count(joined) >= self.counter.count(text):  # no progress: stop (I4)
                return SummaryOutcome(None, None, "summary of an oversized range did not shrink",
                                      tokens_spent=spent), calls
            text = joined

    def _merge_if_over_cap(self, result: ConsolidationResult) -> None:
        """When the block would hide a range, merge every range but the newest into one
        summary through the gate — every range, newest included, when the cap leaves too
        little room beside the newest one's own summary (a small prompt's block, where each
        new range takes half the cap). A failed merge changes nothing (the block then names
        the oldest ranges instead of showing them)."""
        state = self.state()
        ranges = state.ranges
        cap = self._block_cap(state)
        if len(ranges) < 2:
            return
        whole = "\n".join(["x", *(r.line() for r in ranges)])
        if self.counter.count(whole) + self.counter.count(ARCHIVED_SUMMARY_HEADER) < cap:
            return
        least = 2 * self.summarizer.settings.min_tokens
        older: tuple[ArchivedRange, ...] = ranges[:-1]
        newest: tuple[ArchivedRange, ...] = ranges[-1:]
        room = cap - self._merge_reserve(older, newest)
        if room < least:
            older, newest = ranges, ()
            room = cap - self._merge_reserve(older, newest)
            if room < least:
                return
        out, calls = self._summarize(merge_source(older), room)
        result.summary_calls += calls
        result.summary_tokens_spent += out.tokens_spent
        if not out.ok:
            log.info("session %s: merging %d archived ranges failed (%s); the block names the "
                     "oldest instead", self.scope, len(older), out.reason)
            return
        one = merged(older, str(out.text))
        new = replace(state, ranges=(one, *newest))
        self._update(new, "merge", {"ranges": [one.first, one.last], "merged": len(older)})
        result.merged_ranges += len(older)

    def _merge_reserve(self, older: Sequence[ArchivedRange], kept: Sequence[ArchivedRange]) -> int:
        """Tokens of the block beside the summary merging `older`: the header, the ranges
        `kept` as they are, the merged range's label and the rules pinned on `older` (a merge
        that drops one appends it verbatim)."""
        rules = [x for r in older for x in r.rules]
        return (self.counter.count(ARCHIVED_SUMMARY_HEADER) + sum(self.counter.count(r.line()) for r in kept)
                + self.counter.count(span(older).label) + 12  # brackets, joins, a short summary's slack
                + (self.counter.count(RULES_HEADER) + sum(self.counter.count(x) + 2 for x in rules)
                   if rules else 0))

    def _breadcrumb(self, piece: list[StoredMessage], first: int, last: int, why: str) -> str:
        """A bounded raw excerpt naming the archived range (the full messages stay in the log)."""
        limit = self.settings.raw_breadcrumb_max_chars
        head = f"[raw archive of messages {first}-{last}; {why or 'no summary'}]\n"
        body = "\n".join(transcript_line(m.index, m.message) for m in piece)
        room = max(0, limit - len(head))
        if len(body) > room:
            marker = f"\n… [{len(body) - room} chars omitted; recall messages {first}-{last}] …\n"
            keep = max(0, room - len(marker))
            body = body[: keep - keep // 3] + marker + body[len(body) - keep // 3:] if keep else ""
        return cap_text(head + body, limit)

    def _write(
        self, kind: str, content: str, rng: tuple[int, int], injected: str,
        rules: tuple[str, ...], cap: int,
    ) -> HistoryEntry:
        """Intent → history line (fsync'ed) → one transaction: index + cursor + range."""
        store, scope = self.store, self.scope
        state = self.state()
        if rng[0] != state.last_consolidated + 1:  # the lock makes this impossible; be loud
            raise ValidationError(f"archive range {rng} does not follow cursor {state.last_consolidated}")
        entry_id = uuid.uuid4().hex
        store.kv_put(scope, STATE_NAMESPACE, INTENT_KEY,
                     {"id": entry_id, "messages": list(rng), "summary": injected,
                      "rules": list(rules), "cap": cap})
        entry = self.history.append(scope, content, kind=kind, messages=rng,  # type: ignore[arg-type]
                                    entry_id=entry_id)
        with store.transaction():
            self._commit(entry, state, injected, rules, cap)
            store.kv_delete(scope, STATE_NAMESPACE, INTENT_KEY)
        return entry

    def _commit(
        self, entry: HistoryEntry, state: ConsolidationState, injected: str,
        rules: tuple[str, ...] = (), cap: int = 0,
    ) -> None:
        assert entry.messages is not None
        HistoryLog.index_entry(self.store, entry)
        first, last = entry.messages
        added = ArchivedRange(first, last, entry.cursor, entry.cursor, injected, entry.kind, 1, rules,
                              *self._written_at(first, last))
        new = replace(
            state, last_consolidated=entry.messages[1], last_summary=injected,
            last_kind=entry.kind, history_cursor=entry.cursor, entries=state.entries + 1,
            ranges=fold((*state.ranges, added), MAX_RANGES, self.counter, max(16, cap // 2)),
            block_cap_tokens=cap or state.block_cap_tokens)
        self._update(new, "archive", {"cursor": entry.cursor, "messages": list(entry.messages)})

    def _written_at(self, first: int, last: int) -> tuple[datetime | None, datetime | None]:
        """When messages `first` and `last` were written (the range's dates); None for one
        not stored."""
        when = {m.index: m.timestamp for i in {first, last}
                for m in self.messages.list(from_index=i, to_index=i)}
        return when.get(first), when.get(last)

    def _update(self, new: ConsolidationState, op: str, data: dict[str, Any]) -> ConsolidationState:
        """Store `new` as the state and journal `op` with the version it was read at, in one
        transaction: a writer that read an older state fails with ConcurrencyError (I6)."""
        with self.store.transaction():
            self.store.append_events(self.scope, JOURNAL_STREAM, [NewEvent(op, data)],
                                     expected_version=new.version)
            new = replace(new, version=new.version + 1, updated_at=to_iso(utcnow()))
            self.store.kv_put(self.scope, STATE_NAMESPACE, STATE_KEY, new.to_json())
        return new

    def mark_idle_compacted(self, count: int) -> None:
        self._update(replace(self.state(), idle_compacted_at=count), "idle", {"count": count})

    def last_activity(self) -> datetime | None:
        """Timestamp of the newest message (None for an empty session)."""
        n = self.messages.count()
        if n == 0:
            return None
        return self.messages.list(from_index=n)[0].timestamp


def _content(message: dict[str, Any]) -> str:
    """The text of a message's content (text parts joined), "" when it has none."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _smallest_dated_cut(
    live: Sequence[StoredMessage], first_cut: int, needed: Callable[[int], int | None]
) -> int:
    """The smallest group start c ≤ `first_cut` that is still sufficient once the fixed part is
    counted with the message-dates note of the messages c… only (`needed(c)` = the cut the
    chooser asks for with that note; sufficient when ≤ c). `first_cut` counted the dates of
    every live message; archiving shortens the note, so a smaller cut may do. `needed` is
    non-increasing in c (a later start leaves a shorter note), so the predicate is monotone and
    a binary search over the group starts finds it."""
    starts = [g[0] for g in tool_groups([m.message for m in live]) if 0 < g[0] <= first_cut]
    if not starts or starts[-1] != first_cut:
        return first_cut

    def sufficient(c: int) -> bool:
        got = needed(c)
        return got is not None and got <= c

    lo, hi = 0, len(starts) - 1  # starts[hi] is sufficient (it counted the longest note)
    while lo < hi:
        mid = (lo + hi) // 2
        if sufficient(starts[mid]):
            hi = mid
        else:
            lo = mid + 1
    return starts[lo]


def _still_unreachable(backoff: dict[str, int] | None, now: dict[str, int]) -> bool:
    """True when a back-off recorded for `backoff` covers the run `now`: same budget, and a
    fixed part (system prompt and memory blocks + tool schemas) at least as large."""
    if not backoff or backoff.get("budget") != now["budget"]:
        return False
    before = int(backoff.get("system_tokens", 0)) + int(backoff.get("tools_tokens", 0))
    return now["system_tokens"] + now["tools_tokens"] >= before

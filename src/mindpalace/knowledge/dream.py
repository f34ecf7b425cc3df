"""Dream: curation of the long-term knowledge files from unconsumed history (seed 002, nanobot).

One run for one knowledge scope (a user's files, or an agent's):

1. take the scope's lock (:meth:`KnowledgeBase.lock`: one dream — and one writer — per scope
   across processes, I6); a second run waits up to ``wait_seconds`` or is refused with
   :class:`~mindpalace.errors.StoreBusyError` naming the scope;
2. read the history.jsonl entries after the scope's committed ``.dream_cursor`` (a user scope
   reads that user's entries; an agent scope the agent's entries that belong to no user, so a
   user's history never reaches agent-wide files, I10) and the current SOUL / USER / MEMORY;
3. propose small patches — with the configured LLM (``llm.provider = "openai"``: the model
   answers ``{"patches": […]}``; every proposal is validated against the current text and a bad
   one is sent back once for repair, then rejected, never applied) or, offline, with the
   deterministic :mod:`curator <mindpalace.knowledge.curator>`;
4. apply them and advance the cursor as **one** commit (:meth:`KnowledgeBase.apply`: files,
   cursor and git move together or not at all, so a run killed at any point leaves them
   consistent).

Decisions (DESIGN.md I4–I6):

* **No new entries** → the run ends at once: nothing is read from a model, nothing committed.
* **New entries, nothing worth keeping** (all proposals no-ops or none) → a cursor-only commit
  ("consumed history a → b"): the cursor lives in git with the files, so it moves by a commit;
  the next run has no new entries and commits nothing (I5).
* **Token budget** (``knowledge.dream_token_budget``): every LLM call is checked before it is
  sent and charged after it (prompt + completion, :class:`~mindpalace.providers.llm.TokenBudget`).
  When the budget cannot pay for the next batch, the run stops there and commits what the
  completed batches proposed with the cursor at the last entry they covered — a consistent
  partial result; the rest waits for the next run. A budget too small for the first batch ends
  the run with status ``stopped`` and nothing changed.
* **Failure** (provider error after retries, a patch the knowledge base refuses, a crash) →
  nothing is committed: files and cursor are unchanged, and the report says why.
* **Rejected proposals do not block the cursor**: an entry whose proposed edit failed
  validation — and was or was not repaired — is consumed like any other; the rejection is
  reported (the entry stays in history.jsonl and recall).

``dry_run`` computes the patches and the unified diff their commit would make
(:meth:`KnowledgeBase.preview`, the same checks) and writes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from mindpalace.errors import (
    KnowledgeError,
    MindPalaceError,
    ProviderError,
    TokenBudgetExceededError,
)
from mindpalace.facts.longterm import NAMESPACE as FACTS_NAMESPACE
from mindpalace.facts.model import Fact
from mindpalace.history.log import HistoryEntry, HistoryLog
from mindpalace.knowledge.base import KnowledgeBase
from mindpalace.knowledge.curator import CuratorSettings, Promotion, curate
from mindpalace.knowledge.layout import MEMORY, SOUL, USER, KnowledgeScope
from mindpalace.knowledge.patches import Patch, apply_patch
from mindpalace.providers.llm import LLMProvider, TokenBudget
from mindpalace.providers.llm.base import load_prompt
from mindpalace.scope import ANY, Scope
from mindpalace.session.messages import MessageLog
from mindpalace.settings import FactSettings, KnowledgeSettings
from mindpalace.store import Store
from mindpalace.tokens import TokenCounter

AUTHOR: Final = "dream"
DREAM_FILES: Final = (SOUL, USER, MEMORY)  # seed 002: the dream edits these three
REPLY_MAX_TOKENS: Final = 1_024  # one batch's patches: a few dozen short lines
MIN_ENTRY_TOKENS: Final = 64  # less room than this for history is not worth a model call
REPLY_RESERVE_TOKENS: Final = 256  # sizing a batch: room kept for the reply (usually a few lines)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)

Status = Literal["committed", "unchanged", "dry-run", "stopped", "failed"]
StageHook = Callable[[str], None]
"""Called with a stage name (``lock`` before the scope's lock is requested, ``read``,
``proposed``, ``applied``) — for tests that order a second process or a kill against a run;
never needed in production."""


@dataclass
class DreamReport:
    """What one dream run did.

    Attributes:
        scope: ``user:<name>`` / ``agent:<name>``.
        status: ``committed`` (a commit was made), ``unchanged`` (no new history: nothing to
            do), ``dry-run`` (patches computed, nothing applied), ``stopped`` (the token budget
            could not pay for the first batch; nothing changed) or ``failed`` (nothing
            changed; `reason` says why).
        mode: ``curator`` (offline rules) or ``llm``.
        entries: new history entries read; consumed: how many of them the commit covers.
        cursor_before / cursor_after: the scope's dream cursor before and after.
        patches: the patches proposed (applied unless dry-run / failed).
        promotions: for the curator, each promoted line with its sources.
        rejected: proposals refused before applying (``{"patch": …, "why": …}``).
        tokens_spent / token_budget: LLM tokens charged this run (prompt + completion) and
            the run's budget (tokens).
        llm_calls: model calls made. budget_stopped: the budget ended the run early.
        commit: the commit id, or None.
        reason: why the run failed or stopped ('' otherwise).
        diff: for a dry run, the unified diff the commit would make (files and cursor).
    """

    scope: str
    status: Status
    mode: str
    entries: int = 0
    consumed: int = 0
    cursor_before: int = 0
    cursor_after: int = 0
    patches: list[Patch] = field(default_factory=list)
    promotions: list[Promotion] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    tokens_spent: int = 0
    token_budget: int = 0
    llm_calls: int = 0
    budget_stopped: bool = False
    commit: str | None = None
    reason: str = ""
    diff: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"scope": self.scope, "status": self.status, "mode": self.mode,
                "entries": self.entries, "consumed": self.consumed,
                "cursor_before": self.cursor_before, "cursor_after": self.cursor_after,
                "patches": [p.to_json() for p in self.patches],
                "promotions": [{"file": p.file, "line": p.line(), "why": p.why, "sources": p.sources}
                               for p in self.promotions],
                "rejected": self.rejected, "tokens_spent": self.tokens_spent,
                "token_budget": self.token_budget, "llm_calls": self.llm_calls,
                "budget_stopped": self.budget_stopped, "commit": self.commit, "reason": self.reason,
                "diff": self.diff}


class Dream:
    """The dream job over one workspace's history and knowledge base.

    Example:
        >>> report = mem.dream(user="u1")                       # doctest: +SKIP
        >>> report.status, report.cursor_after                  # doctest: +SKIP
        ('committed', 42)

    Args:
        knowledge: the knowledge base (files, cursor, lock, commits).
        history: the workspace's history.jsonl.
        store: where the scope's long-term facts are read (the curator promotes important ones).
        counter: the token counter (LLM batches are sized with it).
        settings: ``[knowledge]`` (token budget, batch size, caps, lock wait).
        fact_settings: ``[facts]`` (importance threshold of promoted facts).
        llm: the model for LLM curation; None = the offline curator.
        on_stage: test hook, see :data:`StageHook`.
    """

    def __init__(
        self,
        knowledge: KnowledgeBase,
        history: HistoryLog,
        store: Store,
        *,
        counter: TokenCounter,
        settings: KnowledgeSettings | None = None,
        fact_settings: FactSettings | None = None,
        llm: LLMProvider | None = None,
        on_stage: StageHook | None = None,
    ) -> None:
        self.kb = knowledge
        self.history = history
        self.store = store
        self.counter = counter
        self.settings = settings or KnowledgeSettings()
        self.fact_settings = fact_settings or FactSettings()
        self.llm = llm
        self._stage = on_stage or (lambda _name: None)

    @property
    def mode(self) -> str:
        return "curator" if self.llm is None else "llm"

    # -- which scopes have work ---------------------------------------------------------------
    def scopes(self, tenant: str) -> list[KnowledgeScope]:
        """Every knowledge scope of `tenant` that history.jsonl has entries for: each user, and
        each agent with entries that belong to no user."""
        users: dict[str, None] = {}
        agents: dict[str, None] = {}
        for e in self.history.read():
            if e.scope.tenant != tenant:
                continue
            if e.scope.user:
                users[str(e.scope.user)] = None
            elif e.scope.agent:
                agents[str(e.scope.agent)] = None
        return ([KnowledgeScope.user(u, tenant) for u in users]
                + [KnowledgeScope.agent(a, tenant) for a in agents])

    # -- one run ------------------------------------------------------------------------------
    def run(self, scope: KnowledgeScope, *, dry_run: bool = False,
            wait_seconds: float | None = None) -> DreamReport:
        """One dream run for `scope` (see the module doc for what it does and decides).

        Args:
            scope: whose files to curate.
            dry_run: compute and return the patches; change nothing (the lock is still taken,
                so the patches match the files as they are).
            wait_seconds: how long to wait for another run (or writer) of the scope; None =
                ``knowledge.lock_timeout_seconds``, 0 = refuse at once.

        Returns:
            A :class:`DreamReport`; a failed run reports ``status="failed"`` with its reason.

        Raises:
            StoreBusyError: another process holds the scope past `wait_seconds` (I6).
            StoreError: history.jsonl cannot be read.
        """
        budget = TokenBudget(f"dream {scope}", self.settings.dream_token_budget)
        self._stage("lock")
        with self.kb.lock(scope, timeout=wait_seconds):
            before = self.kb.read_cursor(scope)
            report = DreamReport(str(scope), "unchanged", self.mode, cursor_before=before,
                                 cursor_after=before, token_budget=budget.limit_tokens)
            every = self._entries(scope)
            new = [e for e in every if e.cursor > before]
            report.entries = len(new)
            self._stage("read")
            if not new:
                return report  # nothing to do: no model call, no commit
            files = {f: self.kb.read(scope, f) for f in DREAM_FILES}
            consumed: int | None
            try:
                if self.llm is None:
                    consumed = self._curate(scope, new, every, files, report)
                else:
                    consumed = self._propose_llm(scope, new, files, budget, report)
            except ProviderError as exc:
                return self._failed(report, budget, f"the model failed ({exc}); files and cursor unchanged")
            report.tokens_spent = budget.spent
            if consumed is None:
                return report  # stopped before the first batch: nothing changed
            report.consumed = len([e for e in new if e.cursor <= consumed])
            self._stage("proposed")
            if dry_run:
                try:  # the diff apply would commit, checked the same way; nothing written
                    report.diff = self.kb.preview(scope, report.patches, dream_cursor=consumed)
                except MindPalaceError as exc:
                    return self._failed(report, budget, f"the knowledge base would refuse the patches ({exc})")
                report.status, report.cursor_after = "dry-run", consumed
                return report
            try:
                commit = self.kb.apply(scope, report.patches, author=AUTHOR,
                                       message=self._message(report, before, consumed),
                                       dream_cursor=consumed)
            except MindPalaceError as exc:
                return self._failed(report, budget, f"the knowledge base refused the patches ({exc}); "
                                                    "files and cursor unchanged")
            self._stage("applied")
            report.cursor_after = self.kb.read_cursor(scope)
            report.commit = None if commit is None else commit.sha
            report.status = "committed" if commit is not None else "unchanged"
            return report

    def run_all(self, tenant: str, *, dry_run: bool = False,
                wait_seconds: float | None = None) -> list[DreamReport]:
        """:meth:`run` for every scope of `tenant` with history (see :meth:`scopes`)."""
        return [self.run(s, dry_run=dry_run, wait_seconds=wait_seconds) for s in self.scopes(tenant)]

    # -- internals ----------------------------------------------------------------------------
    def _entries(self, scope: KnowledgeScope) -> list[HistoryEntry]:
        def mine(e: HistoryEntry) -> bool:
            if e.scope.tenant != scope.tenant:
                return False
            if scope.kind == "user":
                return e.scope.user == scope.name
            return e.scope.user == "" and e.scope.agent == scope.name

        return [e for e in self.history.read() if mine(e)]

    def _facts(self, scope: KnowledgeScope) -> list[Fact]:
        """Current long-term facts of the scope (every agent of a user / every user-less
        fact of an agent)."""
        within = (Scope(scope.tenant, scope.name, ANY, "") if scope.kind == "user"
                  else Scope(scope.tenant, "", scope.name, ""))
        facts = []
        for _s, _k, value in self.store.kv_list(within, FACTS_NAMESPACE):
            try:
                fact = Fact.from_json(value)
            except (MindPalaceError, KeyError, TypeError, ValueError):
                continue  # a damaged row is the doctor's business, not a reason to stop
            if fact.current:
                facts.append(fact)
        return facts

    def _curate(self, scope: KnowledgeScope, new: list[HistoryEntry], every: list[HistoryEntry],
                files: dict[str, str | None], report: DreamReport) -> int:
        last = new[-1].cursor
        seen = [e for e in every if e.cursor <= last]
        settings = CuratorSettings(min_repeats=self.settings.dream_min_repeats,
                                   importance_threshold=self.fact_settings.importance_threshold,
                                   max_promotions=self.settings.dream_max_promotions,
                                   user_file=scope.kind == "user")
        report.patches, report.promotions = curate(new, seen, files, self._facts(scope), settings,
                                                   prompts=self._system_prompts(new))
        return last

    def _system_prompts(self, entries: Sequence[HistoryEntry]) -> list[str]:
        """The newest system message of each session the entries come from."""
        out = []
        for scope in dict.fromkeys(e.scope for e in entries):
            found = MessageLog(self.store, scope).latest_system()
            content = found.get("content") if found else None
            if isinstance(content, str):
                out.append(content)
        return out

    def _propose_llm(self, scope: KnowledgeScope, new: list[HistoryEntry], files: dict[str, str | None],
                     budget: TokenBudget, report: DreamReport) -> int | None:
        """Batches of entries → model → validated patches. Returns the last consumed cursor
        (None when the budget could not pay for the first batch).

        Each batch is sized to what the budget has left: at most ``dream_batch_tokens`` of
        entry text and never more than the remaining budget minus the fixed prompt and the
        room kept for the reply; an entry larger than that alone is sent cut to fit (its full text stays in
        history.jsonl), so an oversized entry never blocks the cursor."""
        assert self.llm is not None
        working = dict(files)
        consumed: int | None = None
        pending = list(new)
        while pending:
            fixed = self._fixed_tokens(scope, working) + REPLY_RESERVE_TOKENS
            batch = self._next_batch(pending, min(self.settings.dream_batch_tokens, budget.remaining - fixed))
            try:
                if not batch:  # not even a cut entry can be paid: stop before calling
                    raise TokenBudgetExceededError(budget.job, budget.limit_tokens, budget.spent,
                                                   fixed + MIN_ENTRY_TOKENS)
                accepted = self._ask(scope, batch, working, budget, report)
            except TokenBudgetExceededError as exc:
                report.budget_stopped = True
                report.reason = str(exc)
                if consumed is None:
                    report.status = "stopped"
                return consumed
            report.patches += accepted
            consumed = batch[-1].cursor
            del pending[:len(batch)]
        return consumed

    def _fixed_tokens(self, scope: KnowledgeScope, files: dict[str, str | None]) -> int:
        """Tokens of a dream prompt without entries (instructions, the files, framing)."""
        return self.counter.count_messages([
            {"role": "system", "content": load_prompt("dream")},
            {"role": "user", "content": _dream_input(scope, [], files)}])

    def _next_batch(self, pending: list[HistoryEntry], room: int) -> list[HistoryEntry]:
        """The next consecutive entries within `room` tokens; the first one cut to fit when it
        alone is larger; [] when not even a cut entry fits (< MIN_ENTRY_TOKENS of room)."""
        if room < MIN_ENTRY_TOKENS:
            return []
        batch: list[HistoryEntry] = []
        size = 0
        for e in pending:
            tokens = self.counter.count(_entry_line(e)) + 1
            if size + tokens > room:
                if not batch:  # one oversized entry: send the part that fits
                    cut = self.counter.truncate(e.content, room - (tokens - self.counter.count(e.content)) - 8)
                    batch.append(replace(e, content=cut + " … [cut to fit the dream budget]"))
                break
            batch.append(e)
            size += tokens
        return batch

    def _ask(self, scope: KnowledgeScope, batch: list[HistoryEntry], working: dict[str, str | None],
             budget: TokenBudget, report: DreamReport) -> list[Patch]:
        """One batch: ask, validate, and once send the rejected proposals back for repair."""
        assert self.llm is not None
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": load_prompt("dream")},
            {"role": "user", "content": _dream_input(scope, batch, working)},
        ]
        accepted: list[Patch] = []
        for attempt in range(2):
            reply = self.llm.complete(messages, max_tokens=REPLY_MAX_TOKENS, budget=budget)
            report.llm_calls += 1
            good, bad = _validate(reply.text, working)
            accepted += good
            if not bad:
                break
            if attempt == 1:  # still wrong after one repair: rejected, never applied
                report.rejected += bad
                break
            messages += [{"role": "assistant", "content": reply.text},
                         {"role": "user", "content": "These patches were rejected:\n"
                          + "\n".join(f"- {json.dumps(b['patch'], ensure_ascii=False)}: {b['why']}" for b in bad)
                          + "\nReply with corrected patches for them only, as {\"patches\": [...]}, "
                            "or {\"patches\": []} to drop them."}]
        return accepted

    def _message(self, report: DreamReport, before: int, consumed: int) -> str:
        what = (f"{len(report.patches)} patch(es)" if report.patches else "nothing to promote")
        by = "offline curator" if self.llm is None else f"LLM {self.llm.model}"
        stop = " (token budget reached; the rest waits for the next run)" if report.budget_stopped else ""
        return (f"dream ({by}): consumed history {before} → {consumed}, {what}{stop}")

    @staticmethod
    def _failed(report: DreamReport, budget: TokenBudget, why: str) -> DreamReport:
        report.status, report.reason = "failed", why
        report.cursor_after, report.tokens_spent = report.cursor_before, budget.spent
        return report


def _dream_input(scope: KnowledgeScope, batch: Sequence[HistoryEntry], files: dict[str, str | None]) -> str:
    parts = [f"Knowledge scope: {scope}", ""]
    for name in DREAM_FILES:
        parts += [f"=== {name} ===", files.get(name) or "(empty: create it with an insert)", ""]
    parts.append("=== new history (cite as history:<cursor>) ===")
    parts += [_entry_line(e) for e in batch]
    return "\n".join(parts)


def _entry_line(e: HistoryEntry) -> str:
    return f"[history:{e.cursor}] ({e.kind}, session {e.session}) {e.content}"


def _validate(text: str, working: dict[str, str | None]) -> tuple[list[Patch], list[dict[str, Any]]]:
    """Parse the model's reply; apply each patch to `working` (updated in place) or reject it."""
    try:
        found = _JSON_OBJECT.search(text)
        data = json.loads(found.group() if found else text)
        items = data["patches"] if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ValueError("no 'patches' list")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return [], [{"patch": text[:200], "why": f"the reply is not {{\"patches\": [...]}} JSON ({exc})"}]
    good: list[Patch] = []
    bad: list[dict[str, Any]] = []
    for item in items:
        try:
            patch = Patch.from_json(item)
            if patch.file not in DREAM_FILES:
                raise KnowledgeError(f"the dream edits {', '.join(DREAM_FILES)} only, not {patch.file}")
            working[patch.file] = apply_patch(working.get(patch.file), patch)
            good.append(patch)
        except MindPalaceError as exc:
            bad.append({"patch": item, "why": str(exc)})
    return good, bad

"""The facade: `Memory` (one workspace) and `Session` (one agent conversation) — the one way in.

This is the only module that wires components together (DESIGN.md §2). Each component is
constructed here from exactly what it uses — the store, its scope, its settings section, the
token counter, the summarizer, the history log, a clock — and none of them can reach back up to
the facade, so a test builds any component from a store and fakes and a second facade (async,
REST) reuses them unchanged. CLI, REST and MCP are thin layers over the calls below (§7).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from mindpalace.archive import ArchiveOutcome, SessionArchive
from mindpalace.blocks import Message, ToolSchema
from mindpalace.checks import require_int, require_scope_name, require_session_id
from mindpalace.context import BuiltContext, ContextBuilder, SessionSources, check_queries
from mindpalace.errors import NotFoundError, ValidationError
from mindpalace.facts import FactMemory, Recall, RecallHit, Remembered
from mindpalace.facts.dual import WORKING_NAMESPACE
from mindpalace.facts.longterm import NAMESPACE as FACTS_NAMESPACE
from mindpalace.history import HistoryLog
from mindpalace.knowledge import KnowledgeBase
from mindpalace.knowledge.block import KnowledgePrompt
from mindpalace.knowledge.dream import Dream, DreamReport
from mindpalace.knowledge.layout import KnowledgeScope
from mindpalace.knowledge.view import SessionKnowledge
from mindpalace.lineage import (
    Lineage,
    activity,
    consolidation_events,
    knowledge_subjects,
    prompt_events,
    recall_event,
    remember_events,
)
from mindpalace.metrics import MemoryMetrics, MetricCaps, metered
from mindpalace.providers.embed import Embedder, make_embedder
from mindpalace.providers.llm import Completion, LLMProvider, TokenBudget, make_llm
from mindpalace.recalled import MemoryRecaller
from mindpalace.refs import RefResolver
from mindpalace.retrieval.embedding_sync import Progress, SyncReport, sync_embeddings
from mindpalace.retrieval.hybrid import HybridRetriever
from mindpalace.scope import ANY, Scope
from mindpalace.session.autocompact import AutoCompact, CompactOutcome
from mindpalace.session.consolidator import Consolidator
from mindpalace.session.lease import Lease, current_lease, turn_lease
from mindpalace.session.messages import MessageLog, StoredMessage
from mindpalace.settings import Settings
from mindpalace.steps import ReadResult, StepMemory
from mindpalace.store import Store, StoreStats, is_database_url, open_store
from mindpalace.summary import Summarizer
from mindpalace.tasks import Constraints, EventRegistry, Task, Tasks, ToolCall, find_task
from mindpalace.timeutil import utcnow
from mindpalace.tokens import TokenCounter, get_counter
from mindpalace.workspace import Workspace

DATABASE_URL_VAR = "MINDPALACE_DATABASE_URL"
"""The environment variable that puts every workspace's memory in one PostgreSQL database."""

SettingsOverride = Mapping[str, Any]
"""Values for one settings section, e.g. ``{"budget_tokens": 500}`` for ``steps``."""


@dataclass(frozen=True)
class WorkspaceStats:
    """What a workspace holds (``mindpalace status``): the store's counts over every scope,
    the stored long-term fact versions of this tenant (superseded and forgotten ones
    included), and the folder's size without the knowledge repository's .git (bytes)."""

    workspace: Path
    store: StoreStats
    fact_versions: int
    workspace_bytes: int

    def to_json(self) -> dict[str, Any]:
        st = self.store
        return {
            "workspace": str(self.workspace), "schema_version": st.schema_version,
            "sessions": st.sessions, "events": st.events, "streams": st.streams,
            "records": st.records, "facts": self.fact_versions, "kv_entries": st.kv_entries,
            "documents": st.documents, "embeddings": st.embeddings, "db_bytes": st.size_bytes,
            "workspace_bytes": self.workspace_bytes,
        }


@dataclass(frozen=True)
class SessionStatus:
    """One session at a glance (``mindpalace session show``).

    Attributes:
        messages: stored messages; last_consolidated: the newest archived one (0 = none).
        history_entries: history.jsonl entries written for the session.
        prompt_tokens / budget_tokens / target_tokens: the stored conversation's prompt
            estimate against the input budget and the consolidation target (tokens).
        lease: the active turn lease (holder, pid, host, expiry) or None.
        last_summary / last_summary_kind: the archived summary and ``summary`` or ``raw``.
        live: the newest messages still in the prompt, oldest first.
    """

    scope: Scope
    messages: int
    last_consolidated: int
    history_entries: int
    prompt_tokens: int
    budget_tokens: int
    target_tokens: int
    lease: dict[str, Any] | None
    last_summary: str
    last_summary_kind: str
    live: list[StoredMessage]


class Memory:
    """One workspace: settings, store, token counter, LLM and embedder, shared by its sessions.

    Example:
        >>> mem = Memory.open("./ws")                       # doctest: +SKIP
        >>> s = mem.session("trip-42", user="u1", agent="planner")  # doctest: +SKIP

    Args:
        workspace: the opened workspace folder (paths and settings).
        store: the store protocol every component writes through.
        tenant: the tenant every scope of this handle belongs to (I10).
        event_registry: task event models beyond the built-in ones (see :meth:`open`).

    Raises:
        ValidationError: `tenant` holds a control / line-separator character.
    """

    def __init__(
        self,
        workspace: Workspace,
        store: Store,
        *,
        tenant: str = "default",
        event_registry: EventRegistry | None = None,
    ) -> None:
        self.workspace = workspace
        self.settings: Settings = workspace.settings
        self.store = store
        self.tenant = require_scope_name("tenant", tenant)
        self.event_registry = event_registry
        self._owns_store = True

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str],
        *,
        tenant: str = "default",
        create: bool = True,
        database_url: str | None = None,
        workspace: str | os.PathLike[str] | None = None,
        event_registry: EventRegistry | None = None,
        tokens: SettingsOverride | None = None,
        llm: SettingsOverride | None = None,
        embed: SettingsOverride | None = None,
        store: SettingsOverride | None = None,
        summary: SettingsOverride | None = None,
        steps: SettingsOverride | None = None,
        session: SettingsOverride | None = None,
        knowledge: SettingsOverride | None = None,
        facts: SettingsOverride | None = None,
        tasks: SettingsOverride | None = None,
        context: SettingsOverride | None = None,
        agent: SettingsOverride | None = None,
        lineage: SettingsOverride | None = None,
    ) -> Memory:
        """Open (by default, create) the workspace folder at `location`.

        Args:
            location: a workspace folder: ``mindpalace.toml``, ``memory.db``, ``history/``,
                ``knowledge/``, ``archive/``; or a ``postgresql://`` URL — the memory lives
                in that database (many workers share it) and the folder given by `workspace`
                keeps only what belongs on disk (settings, history.jsonl, the knowledge git).
            tenant: the tenant every scope of this handle belongs to.
            create: create the workspace when the folder is not one yet (False: refuse).
            database_url: keep the memory in this PostgreSQL database instead of the
                folder's memory.db. Default: a `location` URL, else the variable
                ``MINDPALACE_DATABASE_URL``, else ``[store] database_url``; none → SQLite.
            workspace: the folder when `location` is a URL (default ``./.mindpalace``).
            event_registry: an :class:`~mindpalace.tasks.EventRegistry` holding user-defined
                task event types (the default registry is frozen: built-in events only).
            tokens … agent: overrides of one settings section each, on top of the workspace's
                ``mindpalace.toml`` and ``MINDPALACE_*`` variables, e.g.
                ``steps={"budget_tokens": 500}`` (see :mod:`mindpalace.settings`).

        Raises:
            WorkspaceError: `location` is not a workspace and `create` is False, or it cannot
                be created.
            ConfigError: malformed mindpalace.toml, environment value or override.
            SchemaVersionError: the database is newer than this code (nothing written).
        """
        sections = {"tokens": tokens, "llm": llm, "embed": embed, "store": store,
                    "summary": summary, "steps": steps, "session": session,
                    "knowledge": knowledge, "facts": facts, "tasks": tasks, "context": context,
                    "agent": agent, "lineage": lineage}
        overrides = {name: dict(values) for name, values in sections.items() if values is not None}
        folder: str | os.PathLike[str] = location
        if is_database_url(os.fspath(location)):
            database_url, folder = os.fspath(location), workspace or ".mindpalace"
        database_url = database_url or os.environ.get(DATABASE_URL_VAR) or None
        ws = Workspace.open(os.fspath(folder), create=create,
                            external_store=database_url is not None, **overrides)
        url = database_url or ws.settings.store.database_url
        store_location = url if url else ws.db_path
        return cls(ws, open_store(store_location, ws.settings.store),
                   tenant=tenant, event_registry=event_registry)

    # -- services shared by every session ---------------------------------------------------
    @cached_property
    def tokens(self) -> TokenCounter:
        """The configured token counter (exact tiktoken, or the high-erring estimate)."""
        return get_counter(self.settings.tokens.tokenizer)

    @cached_property
    def llm(self) -> LLMProvider:
        """The configured LLM provider; the offline extractive provider when none is set."""
        return make_llm(self.settings.llm, self.tokens)

    @cached_property
    def summarizer(self) -> Summarizer:
        """The LLM behind the one summary gate (I3), used by every summarizing component.

        The provider is built on the first summary, not here: reading a session never builds
        (or needs the credentials of) a model client."""
        return Summarizer(_FirstUse(lambda: self.llm), self.tokens, settings=self.settings.summary)

    @cached_property
    def embedder(self) -> Embedder | None:
        """The configured embedder, or None when ``embed.provider = "none"``."""
        return make_embedder(self.settings.embed)

    @cached_property
    def metrics(self) -> MemoryMetrics:
        """This handle's counters and histograms (its own Prometheus registry): prompt tokens
        vs budget, compactions, gate rejections, consolidation / dream spend vs caps, recall
        latency, ledger replays and unknown outcomes, constraint refusals."""
        s = self.settings
        return MemoryMetrics(MetricCaps(s.session.summary_max_tokens, s.knowledge.dream_token_budget))

    @cached_property
    def retriever(self) -> HybridRetriever:
        """Hybrid keyword + vector retrieval over this store (shared by every session)."""
        embed = self.settings.embed
        return HybridRetriever(
            self.store, self.embedder, self.settings.facts,
            chunk_tokens=embed.chunk_tokens, chunk_overlap_tokens=embed.chunk_overlap_tokens,
            context_turns=embed.context_turns,
            context_after_question=embed.context_after == "question",
            sentence_min_chars=embed.sentence_vectors_min_chars,
        )

    @cached_property
    def history(self) -> HistoryLog:
        """The workspace's history.jsonl, where consolidation archives (seed 002)."""
        return HistoryLog(self.workspace.history_dir,
                          entry_max_chars=self.settings.session.history_entry_max_chars)

    @cached_property
    def knowledge(self) -> KnowledgeBase:
        """The L0–L3 knowledge files of every scope, git-versioned in ``knowledge/`` (seeds
        002, 003): ``apply`` patches, ``restore``, ``log``, ``diff``, ``sync`` hand edits."""
        return KnowledgeBase(self.workspace.knowledge_dir, self.store, counter=self.tokens,
                             settings=self.settings.knowledge)

    @cached_property
    def archive(self) -> SessionArchive:
        """This tenant's L4 archive (``archive/<tenant>/YYYY-MM.jsonl.gz``, seed 003)."""
        return SessionArchive(self.store, self.workspace.archive_dir, self.tenant,
                              settings=self.settings.knowledge)

    @cached_property
    def dreamer(self) -> Dream:
        """The dream job over this workspace (seed 002): the configured LLM curates, or — with
        the offline ``extractive`` provider — the deterministic curator."""
        s = self.settings
        llm = None if s.llm.provider == "extractive" else self.llm
        return Dream(self.knowledge, self.history, self.store, counter=self.tokens,
                     settings=s.knowledge, fact_settings=s.facts, llm=llm)

    def dream(
        self, *, user: str | None = None, agent: str | None = None, dry_run: bool = False,
        wait_seconds: float | None = None,
    ) -> list[DreamReport]:
        """Run the dream once: for `user`'s files, `agent`'s, or (neither) every scope of this
        tenant with history. Each run reads the history after the scope's ``.dream_cursor``,
        applies small patches and advances the cursor in one commit, under the scope's
        cross-process lock and ``knowledge.dream_token_budget`` (see
        :mod:`mindpalace.knowledge.dream`).

        Args:
            user / agent: the knowledge scope (at most one); None for both = every scope.
            dry_run: compute the patches, change nothing.
            wait_seconds: wait for another run of the scope this long (None = the lock
                timeout, 0 = refuse at once).
        Raises:
            ValidationError: both `user` and `agent` given.
            StoreBusyError: another process is dreaming (or writing) the scope past the wait.
        """
        if user is not None and agent is not None:
            raise ValidationError("dream: give a user or an agent scope, not both")
        if user is None and agent is None:
            reports = self.dreamer.run_all(self.tenant, dry_run=dry_run, wait_seconds=wait_seconds)
        else:
            scope = (KnowledgeScope.user(user, self.tenant) if user is not None
                     else KnowledgeScope.agent(agent or "", self.tenant))
            reports = [self.dreamer.run(scope, dry_run=dry_run, wait_seconds=wait_seconds)]
        for report in reports:
            self.metrics.observe_dream(report)
            self._dream_lineage(report)
        return reports

    def _dream_lineage(self, report: DreamReport) -> None:
        """Lineage: a committed dream run edited these knowledge files (in the knowledge
        scope's own lineage stream, read by the traces of its user's / agent's sessions)."""
        if not self.settings.lineage.enabled or report.commit is None or not report.patches:
            return
        ks = KnowledgeScope.parse(report.scope, self.tenant)
        files = list(dict.fromkeys(p.file for p in report.patches))
        Lineage(self.store, ks.store_scope).record(
            "edited", knowledge_subjects(ks.kind, files), by="dream", commit=report.commit,
            why=[p.reason for p in report.patches if p.reason][:20], mode=report.mode)

    def archive_idle(self) -> list[ArchiveOutcome]:
        """Archive every session of this tenant with no message for
        ``knowledge.archive_idle_hours`` (sessions with a turn in flight are skipped). See
        :class:`~mindpalace.archive.SessionArchive`."""
        return self.archive.archive_idle(Scope(self.tenant, ANY, ANY, ANY))

    def stats(self) -> WorkspaceStats:
        """Counts and sizes of the workspace (an admin view over every scope of the store)."""
        facts = len(self.store.kv_list(Scope(self.tenant, ANY, ANY, ANY), FACTS_NAMESPACE))
        root = self.workspace.root
        size = sum(p.stat().st_size for p in root.rglob("*")
                   if p.is_file() and ".git" not in p.relative_to(root).parts)
        return WorkspaceStats(root, self.store.stats(), facts, size)

    def activity(self) -> dict[str, float]:
        """What the lineage log of this tenant records (every process, durable): prompts
        prepared with their tokens vs budget, compactions, recalls, writes, knowledge edits.
        See :func:`mindpalace.lineage.activity`; live counters are :attr:`metrics`."""
        return activity(self.store, self.tenant)

    def sync_embeddings(self, *, progress: Progress | None = None) -> SyncReport | None:
        """Embed every document that lacks a vector from the configured embedder (all scopes);
        after an embedder change, re-embed everything and only then drop the old vectors.

        Never runs implicitly (``open`` stays cheap): call it, or ``mindpalace embed sync``.
        Returns None when ``embed.provider = "none"`` (existing vectors are kept).
        Raises ProviderError / DimensionMismatchError (see
        :func:`mindpalace.retrieval.embedding_sync.sync_embeddings`).
        """
        if self.embedder is None:
            return None
        embed = self.settings.embed
        return sync_embeddings(
            self.store, self.embedder, progress=progress,
            chunk_tokens=embed.chunk_tokens, overlap_tokens=embed.chunk_overlap_tokens,
            context_turns=embed.context_turns,
            context_after_question=embed.context_after == "question",
            sentence_min_chars=embed.sentence_vectors_min_chars,
        )

    def for_tenant(self, tenant: str) -> Memory:
        """A handle on the same workspace and store scoped to `tenant` (I10), sharing this
        handle's services — token counter, summarizer (and so the LLM), embedder, retriever,
        history log — so a server holding many tenants loads one model and one connection.

        The returned handle does not own the store: close this one, not it. Every scope it
        makes is in `tenant`; nothing it reads or writes is outside it.

        Raises:
            ValidationError: `tenant` is not a storable scope value.
        """
        Scope(tenant)  # validates the name (the constructor, its control characters) before anything is shared
        other = Memory(self.workspace, self.store, tenant=tenant, event_registry=self.event_registry)
        for name in _SHARED_SERVICES:
            other.__dict__[name] = getattr(self, name)
        other._owns_store = False
        return other

    # -- sessions, tasks, maintenance ---------------------------------------------------------
    def scope(self, *, user: str = "", agent: str = "", session: str = "") -> Scope:
        """A scope in this handle's tenant (concrete unless a field is ``ANY``).

        Raises:
            ValidationError: a field is not storable (see :class:`Scope`), or the user or agent
                id holds a control / line-separator character (:func:`require_scope_name`).
        """
        return Scope(self.tenant, require_scope_name("user", user), require_scope_name("agent", agent), session)

    def session(self, session_id: str, *, user: str = "", agent: str = "") -> Session:
        """The session `session_id` of (`user`, `agent`); created on first write.

        Raises:
            ValidationError: `session_id` is empty or blank (that is the user-level scope, not
                a session), or a scope field is not storable text.
        """
        return Session(self, self.scope(user=user, agent=agent, session=require_session_id(session_id)))

    def autocompact(self, *, clock: Callable[[], datetime] = utcnow) -> AutoCompact:
        """The idle-session compactor over this workspace (seed 002 AutoCompact)."""
        return AutoCompact(self.store, lambda scope: Session(self, scope).consolidator,
                           settings=self.settings.session, clock=clock)

    def compact_idle(self) -> list[CompactOutcome]:
        """Compact every session of this tenant that is idle past
        ``session.idle_compact_after_minutes`` (none when it is 0); sessions with a turn in
        flight are skipped. See :class:`~mindpalace.session.autocompact.AutoCompact`."""
        outcomes = self.autocompact().run_once(Scope(self.tenant, ANY, ANY, ANY))
        for outcome in outcomes:
            self.metrics.observe_consolidation(outcome.result, kind="idle")
        return outcomes

    def find_task(
        self, task_id: str, *, session: str | None = None, user: str | None = None,
        agent: str | None = None,
    ) -> Task:
        """The one task `task_id` of this tenant, in any session unless narrowed (a session id
        that is not a valid task name finds that session's default task).

        Raises:
            NotFoundError: no such task. ValidationError: several scopes hold one — narrow it.
        """
        within = Scope(self.tenant, ANY if user is None else user, ANY if agent is None else agent,
                       ANY if session is None else session)
        return find_task(self.store, within, task_id, settings=self.settings.tasks,
                         registry=self.event_registry)

    def close(self) -> None:
        """Close the LLM client (if built) and the store; a :meth:`for_tenant` handle closes
        nothing — the handle it came from owns both."""
        if not self._owns_store:
            return
        if "llm" in self.__dict__:  # only if it was built: closes the HTTP pool of a real client
            self.llm.close()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED_SERVICES = ("tokens", "summarizer", "embedder", "retriever", "history")
"""What :meth:`Memory.for_tenant` shares: services that hold no scope (they take one per call)."""


class _FirstUse:
    """A :class:`~mindpalace.summary.SummaryModel` that builds the real provider on first use."""

    def __init__(self, build: Callable[[], LLMProvider]) -> None:
        self._build = build

    def summarize(
        self, text: str, *, max_tokens: int, instructions: str | None = None,
        budget: TokenBudget | None = None,
    ) -> Completion:
        return self._build().summarize(text, max_tokens=max_tokens, instructions=instructions,
                                       budget=budget)


class Session:
    """One agent conversation: every component, scoped to (tenant, user, agent, session).

    Two calls make a prompt, and only one of them writes: :meth:`prepare` (the agent path,
    before every model call) and :meth:`context` (inspection, read-only).
    """

    def __init__(self, memory: Memory, scope: Scope) -> None:
        self.memory = memory
        self.scope = scope.require_concrete()

    @property
    def id(self) -> str:
        return str(self.scope.session)

    @property
    def store(self) -> Store:
        return self.memory.store

    @cached_property
    def messages(self) -> MessageLog:
        """The session's durable chat log (OpenAI format, append-only)."""
        return MessageLog(self.store, self.scope)

    def add_message(self, message: Message, *, timestamp: datetime | None = None) -> int:
        """Append one OpenAI-format message; returns its 1-based index. See MessageLog.add."""
        return self.messages.add(message, timestamp=timestamp)

    # -- facts and recall (seed 001 dual memory, seed 004 hybrid search) ---------------------
    @cached_property
    def facts(self) -> FactMemory:
        """Working memory (this session) + long-term facts (this user and agent)."""
        return FactMemory(self.store, self.scope, settings=self.memory.settings.facts,
                          embedder=self.memory.embedder)

    def remember(
        self, key: str, content: str, *, importance: float = 0.5, source: str = ""
    ) -> Remembered:
        """Remember ``entity:attribute`` = content: ``.fact`` kept, ``.archived``, ``.evicted``.
        See :meth:`FactMemory.remember`."""
        remembered = self.facts.remember(key, content, importance=importance, source=source)
        if self.lineage.enabled:
            self.lineage.record_many(remember_events(
                remembered, step=self._step(), threshold=self.memory.settings.facts.importance_threshold))
        return remembered

    def forget(self, key: str) -> bool:
        """Forget a fact for good (tombstone). See :meth:`FactMemory.forget`."""
        forgotten = self.facts.forget(key)
        if forgotten:
            self.lineage.record("tombstoned", [key], step=self._step(), why="forgotten on request")
        return forgotten

    def recall(self, query: str, k: int | None = None) -> list[RecallHit]:
        """Working memory first, then hybrid keyword + vector search over facts, messages,
        steps, snapshots and history of this user (scoped). See :class:`mindpalace.facts.Recall`.
        Recorded as a ``recalled`` lineage event (query, rank, score per hit), committed in
        the same transaction as the recall's hit counts and promotions.

        Raises:
            ValidationError: `query` is empty or blank (nothing is recorded), or `k` is not an
                int ≥ 1. ProviderError: the embedder failed.
        """
        if not self.lineage.enabled:
            return self.search(query, k)
        step = self._step()

        def record(hits: list[RecallHit]) -> None:
            self.lineage.record_many([recall_event(query, hits, step=step)])

        return self._recall(query, k, record)

    def search(self, query: str, k: int | None = None) -> list[RecallHit]:
        """:meth:`recall` as an observer (the web inspector): the same hits, and no lineage
        event — looking at memory is not the agent recalling it."""
        return self._recall(query, k, None)

    def _recall(
        self, query: str, k: int | None, record: Callable[[list[RecallHit]], None] | None
    ) -> list[RecallHit]:
        started = time.perf_counter()
        hits = Recall(self.facts, self.memory.retriever, self.memory.settings.facts,
                      extra_scopes=self._knowledge_scopes())(query, k, record=record)
        self.memory.metrics.recall_seconds.observe(time.perf_counter() - started)
        return hits

    # -- lineage (seed 001 §5.3: when written, why kept, when recalled, which prompt) --------
    @cached_property
    def lineage(self) -> Lineage:
        """The session's lineage log (:class:`mindpalace.lineage.Lineage`): ``.trace(key)``,
        ``.prompt_at(step)``, ``.events()``."""
        return Lineage(self.store, self.scope, enabled=self.memory.settings.lineage.enabled)

    def _fact_id(self, key: str) -> str:
        """The current long-term version id of `key` ('' when working-memory only), read-only."""
        fact = self.facts.peek(key)
        return fact.id if fact is not None else ""

    def _step(self) -> int | None:
        """The step memory's latest begun step (None before the first): events belong to it."""
        last = self.steps.state.next_step - 1
        return last if last >= 1 else None

    @cached_property
    def knowledge(self) -> SessionKnowledge:
        """The knowledge files of this session's user and agent (``.user`` / ``.agent``
        scopes, ``.apply``, ``.read``, ``.sync``); ``.base`` is :attr:`Memory.knowledge`."""
        return SessionKnowledge.of(self.memory.knowledge, self.scope)

    # -- consolidation (seed 002; mindpalace.session.consolidator / autocompact) -------------
    @cached_property
    def consolidator(self) -> Consolidator:
        """Keeps the stored conversation under the input budget: ``.maybe_consolidate(…)``,
        ``.last_consolidated``, ``.last_summary`` (the "Archived context summary")."""
        mem = self.memory
        return Consolidator(
            self.store, self.scope, history=mem.history, counter=mem.tokens, summarizer=mem.summarizer, settings=mem.settings.session,
        )

    def lease(self, *, holder: str = "", ttl_seconds: float | None = None) -> AbstractContextManager[Lease]:
        """Hold the turn lease while a turn is in flight (idle compaction skips the session).

        Durable in the store (holder, pid, host, expiry) so other processes see it; raises
        SessionBusyError when another live holder has it. See mindpalace.session.lease."""
        s = self.memory.settings.session
        return turn_lease(self.store, self.scope, holder=holder,
                          ttl_seconds=s.lease_ttl_seconds if ttl_seconds is None else ttl_seconds,
                          lock_timeout_seconds=s.lock_timeout_seconds)

    def exists(self) -> bool:
        """Whether anything is stored in this session's own scope (tenant, user, agent,
        session): a message, a step, a task event, a record or a working-memory item. Sessions
        are created by their first write; a session id or scope with none is unknown (REST
        ``GET /v1/sessions/{s}`` answers 404, ``mindpalace session show`` exits 1). Read-only.
        """
        store = self.store
        return bool(store.list_streams(self.scope) or store.list_records(self.scope, limit=1)
                    or store.kv_list(self.scope, WORKING_NAMESPACE))

    def status(self, *, live_messages: int = 10) -> SessionStatus:
        """The session's consolidation state, lease and newest `live_messages` live messages.
        Read-only.

        Raises:
            ValidationError: `live_messages` is not an int >= 0.
        """
        require_int("live_messages", live_messages, minimum=0)
        c = self.consolidator
        state = c.state()
        live = c.live_messages()
        return SessionStatus(
            self.scope, self.messages.count(), state.last_consolidated, state.entries,
            c.prompt_tokens(), c.budget_tokens, c.target_tokens,
            current_lease(self.store, self.scope, utcnow()), state.last_summary, state.last_kind,
            live[-live_messages:] if live_messages > 0 else [],
        )

    def archive(self) -> ArchiveOutcome:
        """Archive this (finished) session to L4 now: its messages after the archive cursor,
        compressed into exchanges, de-duplicated, appended to the monthly file and indexed for
        recall (``archive:<hash>`` reads one back). Never while a turn holds the lease
        (status ``busy``); a second run with no new messages changes nothing (I5).

        Raises:
            StoreBusyError: another process held the archive lock too long.
            StoreError: the archive file or the store could not be written (re-run to finish).
        """
        outcome = self.memory.archive.archive(self.scope)
        if outcome.appended or outcome.duplicates:
            self.lineage.record("archived", [f"archive:{self.id}"], step=self._step(),
                                why="session archived to L4 (Session.archive)",
                                through=f"message:{outcome.through}", exchanges=outcome.exchanges,
                                appended=outcome.appended, files=list(outcome.files))
        return outcome

    def compact(self) -> CompactOutcome:
        """Archive this session down to its recent window now, idle or not (never while a turn
        holds the lease). Running it again with no new messages changes nothing (I5)."""
        outcome = self.memory.autocompact().compact(self.scope, force=True)
        self.memory.metrics.observe_consolidation(outcome.result, kind="idle")
        if self.lineage.enabled:
            self.lineage.record_many(consolidation_events(
                outcome.result, step=self._step(), why="compacted on request (Session.compact)"))
        return outcome

    # -- step memory (seeds 000, 003; mindpalace.steps) ----------------------------------------
    @cached_property
    def steps(self) -> StepMemory:
        """Step tiers, records, memory index, working checkpoint: ``s.steps.begin(goal=…)``."""
        mem = self.memory
        return StepMemory(self.store, self.scope, counter=mem.tokens, summarizer=mem.summarizer,
                          settings=mem.settings.steps,
                          lineage=self.lineage if self.lineage.enabled else None)

    @cached_property
    def refs(self) -> RefResolver:
        """Resolves ``message:`` / ``history:`` / ``fact:`` / ``archive:`` references and record
        names."""
        return RefResolver(self.store, self.scope, history=self.memory.history,
                           facts=lambda key: self.facts.get(key), archive=self.memory.archive,
                           knowledge=lambda whose, file: self.knowledge.read(
                               file, whose="agent" if whose == "agent" else "user"))

    def read_records(self, names: Iterable[str]) -> ReadResult:
        """Records and references by name (read_files protocol): ``step_12``, ``message:17``,
        ``message:3@other-session`` (same user and agent), ``history:5``, ``fact:user:city``,
        ``archive:<hash>``, ``knowledge:user/L2_facts.md``
        (see :mod:`mindpalace.refs`); unknown, malformed or out-of-scope names are in
        ``.missing``, not raised."""
        return self.refs.read(names)

    # -- the prompt: inspection (read-only) and the turn (makes room, then builds) -------------
    @cached_property
    def context_builder(self) -> ContextBuilder:
        """The session's :class:`~mindpalace.context.ContextBuilder` (read-only)."""
        mem = self.memory
        sources = SessionSources(self.messages, self.steps, self.consolidator, self.tasks)
        recaller = MemoryRecaller(self.store, self.scope, mem.tokens, mem.retriever,
                                  settings=mem.settings.context, fact_settings=mem.settings.facts,
                                  facts=self.facts, extra_scopes=self._knowledge_scopes())
        knowledge = KnowledgePrompt(mem.knowledge, self.knowledge.scopes, mem.tokens,
                                    mem.settings.knowledge)
        return ContextBuilder(sources, mem.tokens, recaller, mem.settings.context, mem.settings.session,
                              knowledge=knowledge)

    def _knowledge_scopes(self) -> list[Scope]:
        """Where this session's knowledge files are indexed for recall (its user's, its agent's)."""
        return [s.store_scope for s in self.knowledge.scopes]

    def context(
        self,
        budget_tokens: int | None = None,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        messages: Sequence[Message] | None = None,
        query: str | Sequence[str] | None = None,
    ) -> BuiltContext:
        """The prompt for the next model call as the stored state gives it now — read-only:
        nothing is written, no model is called, the same state gives the same messages.

        Use it to inspect or to send a prompt you assemble yourself (`messages`); the agent
        loop calls :meth:`prepare` instead, which first makes room by consolidation.

        Args:
            budget_tokens: cap on the prompt (tokens); None = the input budget
                (``session.context_window_tokens − max_completion_tokens − safety_buffer_tokens``).
            system_prompt: None = the session's latest stored system message.
            tools: tool schemas sent with the request (counted, I9).
            messages: a conversation to use instead of the stored one.
            query: what the recalled-memory block recalls for (one text or several); None =
                the newest user message. Recall here never writes: documents not yet embedded
                are found by keyword only.

        Returns:
            A :class:`~mindpalace.context.BuiltContext`, never over the budget; what did not
            fit is named in ``report.degradations``.

        Raises:
            ContextBudgetError / ValidationError: see :meth:`ContextBuilder.build`.
        """
        return self.context_builder.build(self._budget(budget_tokens), system_prompt=system_prompt,
                                          tools=tools, messages=messages, query=query)

    def prepare(
        self,
        budget_tokens: int | None = None,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        query: str | Sequence[str] | None = None,
    ) -> BuiltContext:
        """The agent path, before every model call: make room, then build (seed 002).

        Hand edits of the session's knowledge files are noticed first (committed as
        ``hand-edit`` when they keep the axioms, reported in ``report.knowledge`` when refused;
        a scope a dream run holds is skipped, not waited for). When the stored conversation
        with every fixed part of the prompt is over the budget,
        older messages are consolidated at a safe boundary (never inside a tool call/result
        group) into history.jsonl with a gated summary, down to ``consolidation_ratio`` of
        the budget; documents not yet embedded get their vectors (so the recalled-memory
        block searches them by meaning too); then the prompt is built exactly as
        :meth:`context` builds it. Pass the
        same budget every turn (or none: the configured input budget) — whatever is archived
        for it stays archived.

        Args:
            budget_tokens: this model call's input budget (tokens); None = the configured
                input budget.
            system_prompt / tools / query: as for :meth:`context`.

        Returns:
            The built prompt; ``report.consolidation`` says what was archived,
            ``report.recalled`` what was recalled into it.

        Raises:
            ContextBudgetError / ValidationError: as :meth:`context`, before anything is written.
            StoreBusyError: another process holds the session lock past ``lock_timeout_seconds``.
            StoreError: history.jsonl or the store could not be written (nothing left the prompt).
            ProviderError: the embedder failed.
        """
        budget = self._budget(budget_tokens)
        check_queries(query)
        fixed = self.context_builder.fixed_tokens_from(budget, system_prompt=system_prompt, tools=tools)
        noticed = self._sync_knowledge()  # after the request is known good: it may commit
        if any("committed" in line or "finished" in line for line in noticed):  # the block changed
            fixed = self.context_builder.fixed_tokens_from(budget, system_prompt=system_prompt, tools=tools)
        result = self.consolidator.maybe_consolidate(
            system_tokens_from=fixed, tools=None if tools is None else list(tools), budget_tokens=budget)
        if self.memory.settings.context.recall_share > 0:
            self.memory.retriever.sync_embeddings()
        built = self.context_builder.build(budget, system_prompt=system_prompt, tools=tools, query=query)
        built.report.consolidation = result
        built.report.knowledge = noticed
        self.memory.metrics.observe_prompt(built.report)
        if self.lineage.enabled:  # the prompt of the step the next model call begins
            self.lineage.record_many(prompt_events(
                built.report, step=self.steps.state.next_step, messages=self.messages.count(),
                fact_id=self._fact_id))
        return built

    def _sync_knowledge(self) -> list[str]:
        """Notice hand edits of this session's knowledge files (commit valid ones, report
        refused ones) without waiting for a dream run that holds a scope; report lines."""
        lines = []
        for report in self.knowledge.sync(wait=False):
            if report.recovered:
                lines.append(f"{report.scope}: finished an interrupted write of {', '.join(report.recovered)}")
            if report.committed is not None:
                if self.lineage.enabled:
                    Lineage(self.store, report.scope.store_scope).record(
                        "edited", knowledge_subjects(report.scope.kind, report.committed.files),
                        step=self._step(), by="hand", commit=report.committed.sha,
                        session=self.id, why="hand edit noticed by Session.prepare; axioms kept")
                lines.append(f"{report.scope}: committed hand edit {report.committed.short} "
                             f"({', '.join(report.committed.files)})")
            lines.extend(f"{report.scope}: {e.file}: hand edit refused, not committed: {e.problem}"
                         for e in report.refused)
        return lines

    def _budget(self, budget_tokens: int | None) -> int:
        return self.memory.settings.session.input_budget_tokens if budget_tokens is None else budget_tokens

    # -- durable task state (seed 004; mindpalace.tasks) --------------------------------------
    @cached_property
    def tasks(self) -> Tasks:
        """The session's event-sourced tasks: ``s.tasks("trip")``, ``s.tasks.ledger``."""
        return Tasks(self.store, self.scope, settings=self.memory.settings.tasks,
                     registry=self.memory.event_registry)

    @property
    def task(self) -> Task:
        """The session's default task (id = session id)."""
        return self.tasks.current

    @property
    def constraints(self) -> Constraints:
        """Protected constraints of the default task: ``s.constraints.set(k, v, source="user")``."""
        return self.task.constraints

    def tool_call(self, name: str, args: dict[str, Any], *, idempotent: bool = False, key: str | None = None) -> ToolCall:
        """Exactly-once tool call of the default task (see :meth:`mindpalace.tasks.Task.tool_call`)."""
        return metered(self.task.tool_call(name, args, idempotent=idempotent, key=key), self.memory.metrics)

    def clear_task(self, task_id: str | None = None) -> dict[str, int]:
        """End of a task: drop its short-term memory, keep the logs and long-term memory (seed
        004 checklist items 7 and 10 — session memory is cleared at task end so the store does
        not grow across finished tasks).

        Removed, in one transaction: the task's snapshot, ledger rows and working kv
        (:meth:`mindpalace.tasks.Task.clear`); the session's step memory — tier state, the
        step / info / snapshot records and the search documents they were indexed as; the
        session's working-memory facts. Kept: every event log (the task's events, the chat
        messages and their search documents, ``<summary>`` lines), history.jsonl, long-term
        facts, the consolidation state. Call it once the task is finished; the session can go
        on with a new task.

        Args:
            task_id: the task to end; None = the session's default task.
        Returns:
            Counts of what was removed, by kind.
        Raises:
            OutcomeUnknownError: a non-idempotent call of the task has an unsettled outcome
                (settle it with ``Task.resolve`` first); nothing is removed.
            NotFoundError: `task_id` names a task other than the default one that has no
                events and no ledger rows in this session (a typo); nothing is removed.
        """
        task = self.task if task_id is None else self.tasks(task_id)
        if task.id != self.task.id and task.version == 0 and not task.ledger_entries():
            # a typo must not wipe the session's working facts (some live nowhere else)
            raise NotFoundError("task", task_id, self.scope)
        with self.store.transaction():
            removed = task.clear()
            removed.update(self.steps.clear())
            removed["working_facts"] = self.facts.clear_working()
        return removed

    def checkpoint(
        self,
        *,
        step: int | None = None,
        artifacts: dict[str, Any] | None = None,
        pending: list[str] | None = None,
        snapshot: bool = False,
    ) -> int:
        """Atomic checkpoint of the default task; returns its version (see
        :meth:`mindpalace.tasks.Task.checkpoint`)."""
        return self.task.checkpoint(step=step, artifacts=artifacts, pending=pending, snapshot=snapshot)

    def __repr__(self) -> str:
        return f"Session({self.scope})"

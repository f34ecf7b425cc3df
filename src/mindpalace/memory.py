"""The facade: `Memory` (one workspace) and `Session` (one agent conversation) — the one way in.

Every component is reached from here, already scoped; CLI, REST and MCP are thin layers over
the same calls (DESIGN.md §7).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mindpalace.scope import Scope
from mindpalace.session.messages import MessageLog
from mindpalace.store import Store, open_store
from mindpalace.tokens import TokenCounter, get_counter
from mindpalace.workspace import Workspace

if TYPE_CHECKING:
    from mindpalace.context import BuiltContext
    from mindpalace.facts import Fact, FactMemory
    from mindpalace.providers.embed.base import Embedder
    from mindpalace.providers.llm.base import LLMProvider
    from mindpalace.retrieval.embedding_sync import Progress, SyncReport
    from mindpalace.retrieval.hybrid import HybridRetriever, RecallHit
    from mindpalace.session.consolidator import Consolidator
    from mindpalace.session.lease import Lease
    from mindpalace.steps import ReadResult, StepMemory
    from mindpalace.tasks import Constraints, Task, Tasks, ToolCall


class Memory:
    """One workspace: settings, store, token counter, LLM and embedder.

    Example:
        >>> mem = Memory.open("./ws")                       # doctest: +SKIP
        >>> s = mem.session("trip-42", user="u1", agent="planner")  # doctest: +SKIP

    Args (of :meth:`open`):
        location: a workspace folder (created if missing).
        tenant: the tenant every scope of this handle belongs to.
        **overrides: setting sections to override, e.g. ``steps={"budget_tokens": 500}``.

    Raises:
        ConfigError: malformed mindpalace.toml or environment value.
        SchemaVersionError: the database is newer than this code (nothing written).
    """

    def __init__(self, workspace: Workspace, store: Store, *, tenant: str = "default") -> None:
        self.workspace = workspace
        self.settings = workspace.settings
        self.store = store
        self.tenant = tenant
        self._lock = threading.Lock()

    @classmethod
    def open(cls, location: str | Path, *, tenant: str = "default", **overrides: Any) -> Memory:
        workspace = Workspace.open(location, **overrides)
        store = open_store(workspace.db_path, workspace.settings.store)
        return cls(workspace, store, tenant=tenant)

    @cached_property
    def tokens(self) -> TokenCounter:
        """The configured token counter (exact tiktoken, or the high-erring estimate)."""
        return get_counter(self.settings.tokens.tokenizer)

    @cached_property
    def llm(self) -> LLMProvider:
        """The configured LLM provider; the offline extractive provider when none is set."""
        from mindpalace.providers.llm import make_llm

        return make_llm(self.settings.llm, self.tokens)

    @cached_property
    def embedder(self) -> Embedder | None:
        """The configured embedder, or None when ``embed.provider = "none"``."""
        from mindpalace.providers.embed import make_embedder

        return make_embedder(self.settings.embed)

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
        from mindpalace.retrieval.embedding_sync import sync_embeddings

        return sync_embeddings(self.store, self.embedder, progress=progress)

    @cached_property
    def retriever(self) -> HybridRetriever:
        """Hybrid keyword + vector retrieval over this store (shared by every session)."""
        from mindpalace.retrieval.hybrid import HybridRetriever

        return HybridRetriever(self.store, self.embedder, self.settings.facts)

    def scope(self, *, user: str = "", agent: str = "", session: str = "") -> Scope:
        """A concrete scope in this handle's tenant."""
        return Scope(self.tenant, user, agent, session)

    def session(self, session_id: str, *, user: str = "", agent: str = "") -> Session:
        """The session `session_id` of (`user`, `agent`); created on first write."""
        return Session(self, self.scope(user=user, agent=agent, session=session_id))

    def close(self) -> None:
        if "llm" in self.__dict__:  # only if it was built: closes the HTTP pool of a real client
            self.llm.close()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One agent conversation: every component, scoped to (tenant, user, agent, session)."""

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

    def add_message(self, message: dict[str, Any], *, timestamp: datetime | None = None) -> int:
        """Append one OpenAI-format message; returns its 1-based index. See MessageLog.add."""
        return self.messages.add(message, timestamp=timestamp)

    # -- facts and recall (seed 001 dual memory, seed 004 hybrid search) ---------------------
    @cached_property
    def facts(self) -> FactMemory:
        """Working memory (this session) + long-term facts (this user and agent)."""
        from mindpalace.facts import FactMemory

        return FactMemory(
            self.store, self.scope, settings=self.memory.settings.facts,
            embedder=self.memory.embedder,
        )

    def remember(self, key: str, content: str, *, importance: float = 0.5, source: str = "") -> Fact:
        """Remember ``entity:attribute`` = content. See :meth:`FactMemory.remember`."""
        return self.facts.remember(key, content, importance=importance, source=source)

    def forget(self, key: str) -> bool:
        """Forget a fact for good (tombstone). See :meth:`FactMemory.forget`."""
        return self.facts.forget(key)

    def recall(self, query: str, k: int | None = None) -> list[RecallHit]:
        """Working memory first, then hybrid keyword + vector search over facts, messages,
        steps, snapshots and history of this user (scoped). See :class:`mindpalace.retrieval.recall.Recall`."""
        from mindpalace.retrieval.recall import Recall

        return Recall(self.facts, self.memory.retriever, self.memory.settings.facts)(query, k)

    # -- consolidation (seed 002; mindpalace.session.consolidator / autocompact) -------------
    @cached_property
    def consolidator(self) -> Consolidator:
        """Keeps the prompt under the input budget: ``.maybe_consolidate(system_tokens=…)``,
        ``.last_consolidated``, ``.last_summary`` (the "Archived context summary")."""
        from mindpalace.session.consolidator import Consolidator

        return Consolidator(self)

    def lease(self, *, holder: str = "", ttl_seconds: float | None = None) -> AbstractContextManager[Lease]:
        """Hold the turn lease while a turn is in flight (idle compaction skips the session).

        Durable in the store (holder, pid, host, expiry) so other processes see it; raises
        SessionBusyError when another live holder has it. See mindpalace.session.lease."""
        from mindpalace.session.lease import turn_lease

        s = self.memory.settings.session
        return turn_lease(self.store, self.scope, self.consolidator.lock, holder=holder,
                          ttl_seconds=s.lease_ttl_seconds if ttl_seconds is None else ttl_seconds,
                          lock_timeout_seconds=s.lock_timeout_seconds)

    # -- step memory (seeds 000, 003; mindpalace.steps) and the context builder -----------------
    @cached_property
    def steps(self) -> StepMemory:
        """Step tiers, records, memory index, working checkpoint: ``s.steps.begin(goal=…)``."""
        from mindpalace.steps import StepMemory

        return StepMemory(self)

    def read_records(self, names: Iterable[str]) -> ReadResult:
        """Records by name (read_files protocol); unknown names are in ``.missing``, not raised."""
        return self.steps.read_records(names)

    def context(self, budget_tokens: int | None = None, **options: Any) -> BuiltContext:
        """The prompt for the next model call, never over `budget_tokens` (default: the input
        budget = context window − max completion − safety buffer). See ContextBuilder.build."""
        from mindpalace.context import ContextBuilder

        return ContextBuilder(self).build(budget_tokens, **options)

    # -- durable task state (seed 004; mindpalace.tasks) --------------------------------------
    @cached_property
    def tasks(self) -> Tasks:
        """The session's event-sourced tasks: ``s.tasks("trip")``, ``s.tasks.ledger``."""
        from mindpalace.tasks import Tasks

        return Tasks(self.store, self.scope, self.memory.settings.tasks)

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
        return self.task.tool_call(name, args, idempotent=idempotent, key=key)

    def checkpoint(self, **state: Any) -> int:
        """Atomic checkpoint of the default task (see :meth:`mindpalace.tasks.Task.checkpoint`)."""
        return self.task.checkpoint(**state)

    def __repr__(self) -> str:
        return f"Session({self.scope})"

"""Dual memory: working memory + long-term store under one schedule (seed 001 §2.3, §4.4).

The four steps of the seed: **write** (a new fact enters working memory), **archive** (at or
above the importance threshold it goes to the long-term store — at write time, and in any case
before it can be evicted), **recall** (working memory first, then the long-term store) and
**update** (a recall hit is promoted into working memory with its access count raised).

Scopes: long-term facts are user-level (the session's scope with ``session=""``), so every
session of the same user and agent shares them; working memory belongs to the session and is
persisted in the kv namespace ``working_memory`` so it survives a restart.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from mindpalace.facts.longterm import LongTermStore
from mindpalace.facts.model import Fact, normalize_key
from mindpalace.facts.working import WorkingMemory
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings
from mindpalace.store import Store
from mindpalace.timeutil import utcnow

if TYPE_CHECKING:
    from mindpalace.providers.embed.base import Embedder

WORKING_NAMESPACE = "working_memory"
WORKING_KEY = "items"


class FactMemory:
    """The dual memory of one session: ``working`` (capacity N) + ``longterm`` (durable).

    Args:
        store: the store protocol.
        scope: the session scope (working memory); facts go to ``scope`` with ``session=""``.
        settings: ``facts`` settings (capacity, threshold, decay).
        embedder: embeds fact documents at write time (None = keyword search only).
        clock: aware-UTC clock (injectable for tests).

    Example:
        >>> facts = session.facts                                     # doctest: +SKIP
        >>> facts.remember("user:uid", "u_10086", importance=0.9)     # doctest: +SKIP
        >>> facts.get("user:uid").content                             # doctest: +SKIP
        'u_10086'
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        settings: FactSettings | None = None,
        embedder: Embedder | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.scope = scope.require_concrete()
        self.settings = settings or FactSettings()
        self.clock = clock
        self.fact_scope = scope.with_(session="")
        self.longterm = LongTermStore(
            store, self.fact_scope, settings=self.settings, embedder=embedder, clock=clock
        )
        self.working = WorkingMemory(
            self.settings.working_capacity,
            self.settings.importance_threshold,
            archive=self.longterm.put,
            clock=clock,
        )
        saved = store.kv_get(self.scope, WORKING_NAMESPACE, WORKING_KEY, default=[])
        self.working.load(Fact.from_json(item) for item in saved)

    def remember(
        self, key: str, content: str, *, importance: float = 0.5, source: str = ""
    ) -> Fact:
        """Write a fact: into working memory, and long-term when important (≥ threshold) or
        when it corrects a value the long-term store holds (a correction must outlive the
        working copy, or the stale value would come back after eviction).

        Returns:
            The fact as kept (with an ``id`` when stored long-term).
        Raises:
            ValidationError: bad key (not ``entity:attribute``), empty content, importance
                outside [0, 1]; nothing is written.
        """
        fact = Fact(key, content, importance=importance, source=source, created_at=self.clock())
        with self.store.transaction():
            held = self.longterm.current(fact.key)
            if held is not None and fact.importance < self.settings.importance_threshold:
                fact = self.longterm.put(fact)
            kept = self.working.add(fact)
            self._save()
        return kept

    def get(self, key: str) -> Fact | None:
        """The current value of `key`: working memory first, then the long-term store (a
        long-term hit is promoted into working memory). None when unknown or forgotten."""
        norm = normalize_key(key)
        with self.store.transaction():
            fact = self.working.get(norm)
            if fact is not None and fact.id and not self._still_current(fact):
                self.working.remove(norm)  # corrected or forgotten elsewhere: drop the stale copy
                fact = None
            if fact is None:
                stored = self.longterm.current(norm)
                if stored is None:
                    self._save()
                    return None
                return self.promote(stored)
            self._save()
        return fact

    def promote(self, fact: Fact) -> Fact | None:
        """Count a recall hit on a long-term fact and put it into working memory (seed §2.3
        "update"); returns the promoted copy, or None when the fact is no longer current
        (corrected or forgotten meanwhile — a stale value is never promoted)."""
        return self.promote_many([fact])[0]

    def promote_many(self, facts: list[Fact]) -> list[Fact | None]:
        """:meth:`promote` for several hits in one transaction (one commit per recall)."""
        if not facts:
            return []
        out: list[Fact | None] = []
        with self.store.transaction():
            for fact in facts:
                touched = self.longterm.touch(fact)
                out.append(self.working.add(touched) if touched.current else None)
            self._save()
        return out

    def hit_working(self, keys: list[str]) -> list[Fact | None]:
        """Count a recall hit on working-memory items (one transaction); a copy that went
        stale (corrected or forgotten through another session) is dropped and returned as
        the current long-term value, or None."""
        if not keys:
            return []
        out: list[Fact | None] = []
        with self.store.transaction():
            for key in keys:
                fact = self.working.get(key)
                if fact is not None and fact.id and not self._still_current(fact):
                    self.working.remove(key)
                    current = self.longterm.current(key)
                    fact = self.working.add(self.longterm.touch(current)) if current else None
                out.append(fact)
            self._save()
        return out

    def forget(self, key: str) -> bool:
        """Forget `key` everywhere: dropped from working memory, tombstoned long-term (it
        never comes back; remembering the key again creates a new version). True when
        something was forgotten."""
        with self.store.transaction():
            in_working = self.working.remove(key) is not None
            gone = self.longterm.forget(key)
            self._save()
        return in_working or gone is not None

    def list(self) -> list[Fact]:
        """Current long-term facts plus working-memory-only items, by key."""
        facts = {f.key: f for f in self.longterm.list()}
        for f in self.working.items:
            facts.setdefault(f.key, f)
        return [facts[k] for k in sorted(facts)]

    def history(self, key: str) -> builtins.list[Fact]:
        """Every long-term version of `key`, oldest first."""
        return self.longterm.history(key)

    def _still_current(self, fact: Fact) -> bool:
        stored = self.longterm.get(fact.id)
        return stored is not None and stored.current

    def _save(self) -> None:
        self.store.kv_put(
            self.scope, WORKING_NAMESPACE, WORKING_KEY, [f.to_json() for f in self.working.items]
        )

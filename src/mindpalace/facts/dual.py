"""Dual memory: working memory + long-term store under one schedule (seed 001 §2.3, §4.4).

The four steps of the seed: **write** (a new fact enters working memory), **archive** (at or
above the importance threshold it goes to the long-term store — at write time, and in any case
before it can be evicted), **recall** (working memory first, then the long-term store) and
**update** (a recall hit is promoted into working memory with its access count raised).

Scopes: long-term facts are user-level (the session's scope with ``session=""``), so every
session of the same user and agent shares them; working memory belongs to the session and is
persisted in the kv namespace ``working_memory``, one row per item (key = the fact key, value
= ``{"seq": n, "fact": …}``, ``seq`` = insertion order), so it survives a restart.

Shared safely (I6): several handles — threads, processes — may use one session's working
memory. Every operation re-reads the stored items inside its write transaction and writes back
only the rows it changed (puts of new or changed items, deletes of evicted or forgotten ones),
so no acknowledged write or forget of another handle is ever overwritten or undone; reads see
every committed write. Newest wins across sessions: a working copy whose key has a newer
long-term value (a correction made in another session) is replaced by that value on read.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from mindpalace.facts.longterm import LongTermStore
from mindpalace.facts.model import Fact, normalize_key
from mindpalace.facts.working import Remembered, WorkingMemory
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings
from mindpalace.store import Store
from mindpalace.timeutil import utcnow

if TYPE_CHECKING:
    from mindpalace.providers.embed.base import Embedder

WORKING_NAMESPACE = "working_memory"
LEGACY_KEY = "items"  # the whole list in one row, before one row per item (read and migrated)

_Rows = dict[str, tuple[int, dict[str, Any]]]  # stored working rows: key → (seq, fact JSON)


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
            archive=self._archive,
            clock=clock,
        )
        # One operation at a time per handle: `working` is this handle's buffer of the stored
        # items, re-read at the start of every operation.
        self._lock = threading.RLock()
        self._parsed: dict[str, tuple[dict[str, Any], Fact]] = {}  # row key → (JSON, its Fact)
        self._vectors: dict[str, np.ndarray] = {}  # embeddings computed before the transaction
        self.working.load(self._read(), shrink=False)

    def remember(
        self, key: str, content: str, *, importance: float = 0.5, source: str = ""
    ) -> Remembered:
        """Write a fact: into working memory, and long-term when important (≥ threshold) or
        when it corrects a value the long-term store holds (a correction must outlive the
        working copy, or the stale value would come back after eviction). The fact written is
        never the one evicted to make room.

        Returns:
            :class:`Remembered`: ``.fact`` as kept (with an ``id`` when stored long-term),
            ``.archived`` (written to the long-term store by this call) and ``.evicted`` (left
            working memory to make room; those without an ``id`` are gone).
        Raises:
            ValidationError: bad key (not ``entity:attribute``), empty content, importance
                outside [0, 1]; nothing is written.
        """
        fact = Fact(key, content, importance=importance, source=source, created_at=self.clock())
        with self._lock:
            # Embed before the write transaction: the embedder must not hold up other writers.
            may_persist = self.longterm.embedder is not None and (
                fact.importance >= self.settings.importance_threshold
                or self.longterm.current(fact.key) is not None)
            self._vectors = self.longterm.vectors_for([fact]) if may_persist else {}
            try:
                with self._writing():
                    archived: tuple[Fact, ...] = ()
                    held = self.longterm.current(fact.key)
                    if held is not None and fact.importance < self.settings.importance_threshold:
                        fact = self.longterm.put(fact, vectors=self._vectors)
                        archived = (fact,)
                    done = self.working.admit(fact)
            finally:
                self._vectors = {}
        return Remembered(done.fact, archived + done.archived, done.evicted)

    def get(self, key: str) -> Fact | None:
        """The current value of `key`: working memory first, then the long-term store (a
        long-term hit is promoted into working memory). A working copy with a newer long-term
        value (corrected in another session) is replaced by it. None when unknown or
        forgotten."""
        norm = normalize_key(key)
        with self._writing():
            return self._hit(norm)

    def peek(self, key: str) -> Fact | None:
        """The current value of `key` as :meth:`get` finds it, read-only: nothing is promoted,
        no access is counted, nothing is written (for the context builder)."""
        norm = normalize_key(key)
        held = next((f for f in self._read() if f.key == norm), None)
        if held is not None:
            return self._current(held)
        return self.longterm.current(norm)

    def working_items(self) -> builtins.list[Fact]:
        """The items of working memory as stored now (every handle's committed writes),
        oldest first, each as its current value (a copy corrected elsewhere shows the newer
        long-term value; a forgotten one is left out). Read-only: nothing promoted, counted
        or written (for the context builder)."""
        out: dict[str, Fact] = {}
        for fact in self._read():
            current = self._current(fact)
            if current is not None:
                out[current.key] = current
        return list(out.values())

    @contextmanager
    def together(self) -> Iterator[None]:
        """One store transaction (this handle's lock held) around several writes: a recall's
        hit counts, promotions and its ``recalled`` lineage event commit together, or none
        does. The operations inside nest in it (savepoints)."""
        with self._lock, self.store.transaction():
            yield

    def promote(self, fact: Fact) -> Fact | None:
        """Count a recall hit on a long-term fact and put it into working memory (seed §2.3
        "update"); returns the promoted copy, or None when the fact is no longer current
        (corrected or forgotten meanwhile — a stale value is never promoted). A promotion is a
        read: it never evicts a working-only fact (:meth:`WorkingMemory.promote`); when only
        such items could make room, the fact is returned without entering working memory."""
        return self.promote_many([fact])[0]

    def promote_many(self, facts: builtins.list[Fact]) -> builtins.list[Fact | None]:
        """:meth:`promote` for several hits in one transaction (one commit per recall)."""
        if not facts:
            return []
        out: list[Fact | None] = []
        with self._writing():
            for fact in facts:
                touched = self.longterm.touch(fact)
                out.append(self.working.promote(touched) if touched.current else None)
        return out

    def hit_working(self, keys: builtins.list[str]) -> builtins.list[Fact | None]:
        """Count a recall hit on working-memory items (one transaction); a copy that went
        stale (corrected or forgotten through another session) is dropped and returned as
        the current long-term value (promoted), or None."""
        if not keys:
            return []
        with self._writing():
            return [self._hit(normalize_key(key), promote_long_term=False) for key in keys]

    def clear_working(self) -> int:
        """End of a task (seed 004 checklist item 10): drop every working-memory item of the
        session; long-term facts stay. Returns how many items were removed."""
        with self._lock, self.store.transaction():
            keys = [key for _, key, _ in self.store.kv_list(self.scope, WORKING_NAMESPACE)]
            removed = sum(int(self.store.kv_delete(self.scope, WORKING_NAMESPACE, k)) for k in keys)
            self.working.load([], shrink=False)
            self._parsed = {}
        return removed

    def forget(self, key: str) -> bool:
        """Forget `key` everywhere: dropped from working memory, tombstoned long-term (it
        never comes back; remembering the key again creates a new version). True when
        something was forgotten."""
        with self._writing():
            in_working = self.working.remove(key) is not None
            gone = self.longterm.forget(key)
        return in_working or gone is not None

    def list(self) -> builtins.list[Fact]:
        """Current long-term facts plus working-memory-only items, by key (read-only; a
        long-term value wins over a working-only copy of the same key: it is newer)."""
        facts = {f.key: f for f in self.longterm.list()}
        for f in self._read():
            if not f.id:
                facts.setdefault(f.key, f)
        return [facts[k] for k in sorted(facts)]

    def history(self, key: str) -> builtins.list[Fact]:
        """Every long-term version of `key`, oldest first."""
        return self.longterm.history(key)

    def _archive(self, fact: Fact) -> Fact:
        """Working memory's archive callback: the long-term write, with the embeddings computed
        before the transaction (an evicted legacy item without one is embedded inside)."""
        return self.longterm.put(fact, vectors=self._vectors)

    def _current(self, fact: Fact) -> Fact | None:
        """`fact` itself while it is the newest value of its key, else the current long-term
        value (None when forgotten). A working-only item (no id) whose key has a current
        long-term version was overtaken by it: ``remember`` puts a value into the long-term
        store whenever it already holds the key, so that version was written later, by
        another session (newest wins, seed 004's "corrections take effect at once")."""
        if fact.id:
            stored = self.longterm.get(fact.id)
            if stored is not None and stored.current:
                return fact
            return self.longterm.current(fact.key)
        held = self.longterm.current(fact.key)
        return fact if held is None else held

    def _hit(self, norm: str, *, promote_long_term: bool = True) -> Fact | None:
        """One hit on `norm` inside :meth:`_writing`: the working item counted, or its newer
        long-term value promoted in its place, or (with `promote_long_term`) the long-term
        value promoted when working memory does not hold the key."""
        held = self.working.peek(norm)
        if held is None:
            stored = self.longterm.current(norm) if promote_long_term else None
        else:
            stored = self._current(held)
            if stored is held:
                return self.working.get(norm)
            self.working.remove(norm)  # corrected or forgotten elsewhere: drop the stale copy
        if stored is None:
            return None
        return self.working.promote(self.longterm.touch(stored))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One read-modify-write of working memory: re-read the stored rows inside the write
        transaction, run the block on them, write back only the rows that changed."""
        with self._lock, self.store.transaction():
            rows, legacy = self._rows()
            loaded = self._facts(rows, legacy)
            self.working.load(loaded, shrink=False)
            yield
            self._save(rows, {f.key: f for f in loaded}, legacy is not None)

    def _rows(self) -> tuple[_Rows, builtins.list[Any] | None]:
        rows: _Rows = {}
        legacy = None
        for _, key, value in self.store.kv_list(self.scope, WORKING_NAMESPACE):
            if key == LEGACY_KEY:
                legacy = value if isinstance(value, builtins.list) else []
            else:
                rows[key] = (int(value["seq"]), value["fact"])
        return rows, legacy

    def _facts(self, rows: _Rows, legacy: builtins.list[Any] | None) -> builtins.list[Fact]:
        ordered = [Fact.from_json(item) for item in legacy or []]
        parsed: dict[str, tuple[dict[str, Any], Fact]] = {}
        for key, (_, data) in sorted(rows.items(), key=lambda kv: kv[1][0]):
            cached = self._parsed.get(key)  # parsing dominated the cost of every operation
            fact = cached[1] if cached is not None and cached[0] == data else Fact.from_json(data)
            parsed[key] = (data, fact)
            ordered.append(fact)
        self._parsed = parsed
        return ordered

    def _read(self) -> builtins.list[Fact]:
        """The stored working items, oldest first (a read: nothing is written)."""
        with self._lock:
            return self._facts(*self._rows())

    def _save(self, before: _Rows, loaded: dict[str, Fact], migrate_legacy: bool) -> None:
        """Write back the items that changed since `before` was read (`loaded` = the facts
        read); delete those that left.

        ``seq`` keeps the order: an item still after every item before it keeps its number,
        one re-inserted at the end (a new value) gets the next free number."""
        last, top = 0, max((seq for seq, _ in before.values()), default=0)
        for fact in self.working.items:
            old = before.get(fact.key)
            if old is not None and old[0] > last and not migrate_legacy:
                seq = old[0]
            else:
                top += 1
                seq = top
            last = seq
            if old is not None and old[0] == seq and loaded.get(fact.key) is fact:
                continue  # the very object read: unchanged
            data = fact.to_json()
            if old is None or old != (seq, data) or migrate_legacy:
                self.store.kv_put(self.scope, WORKING_NAMESPACE, fact.key, {"seq": seq, "fact": data})
        for key in before.keys() - {f.key for f in self.working.items}:
            self.store.kv_delete(self.scope, WORKING_NAMESPACE, key)
        if migrate_legacy:
            self.store.kv_delete(self.scope, WORKING_NAMESPACE, LEGACY_KEY)

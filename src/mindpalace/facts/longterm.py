"""Long-term fact store over the store protocol (seed 001 §2.2, §4.3; seed 004 keyword + vector).

Storage (through :class:`~mindpalace.store.Store` only):

* kv namespace ``facts``: one row per fact *version*, key = fact id ``"<entity:attribute>#<n>"``
  (n = 1, 2, … per key, zero-padded, never reused), value = :meth:`Fact.to_json`. Rows are
  never deleted: superseded and forgotten versions stay as history.
* search documents of kind ``fact`` (ref = fact id): only *current* facts are indexed, so
  recall never returns a superseded or forgotten value. With an embedder, each document gets
  its vector at write time.

Write semantics:

* **de-duplicate** — the same normalized key and content as the current value is one item:
  nothing new is written (importance is raised to the larger of the two).
* **supersede** — a different content for a key with a current value writes version n+1 and
  sets ``superseded_by`` on the old one (kept in history, removed from search).
* **tombstone** — :meth:`LongTermStore.forget` stamps ``deleted_at`` on the current version and
  removes it from search. A tombstoned version never becomes current again: re-adding the key
  later writes a NEW version with a new id, however forgets and re-adds interleave.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from mindpalace.facts.model import Fact, normalize_key
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings
from mindpalace.store import Store
from mindpalace.timeutil import utcnow

if TYPE_CHECKING:
    from mindpalace.providers.embed.base import Embedder

NAMESPACE = "facts"
KIND = "fact"
_SEQ_DIGITS = 8  # zero padding so kv_list (ordered by key) returns versions oldest first


def fact_id(key: str, version: int) -> str:
    """The id of version `version` of `key`: ``"user:uid#00000002"``."""
    return f"{key}#{version:0{_SEQ_DIGITS}d}"


def fact_text(fact: Fact) -> str:
    """The searchable text of a fact: ``"entity:attribute: content"`` (key words are searchable,
    the FTS tokenizer splits on ``:`` and ``_``)."""
    return f"{fact.key}: {fact.content}"


class LongTermStore:
    """Durable, searchable facts of one scope (usually user-level: ``session=""``).

    Args:
        store: the persistence protocol.
        scope: concrete scope every row and document is written to.
        settings: ``facts`` settings (decay half-life).
        embedder: when given, fact documents are embedded at write time (model = its model_id).
        clock: aware-UTC clock (injectable for tests).

    Raises (all methods):
        ValidationError: bad key / content / importance; nothing is written.
        StoreError: the store failed; the transaction is rolled back.
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
        self.embedder = embedder
        self.clock = clock

    # -- reads -----------------------------------------------------------------------------
    def history(self, key: str) -> list[Fact]:
        """Every version of `key`, oldest first (superseded and forgotten ones included)."""
        norm = normalize_key(key)
        rows = self.store.kv_list(self.scope, NAMESPACE, prefix=f"{norm}#")
        return [Fact.from_json(value) for _, _, value in rows]

    def current(self, key: str) -> Fact | None:
        """The current value of `key` (not superseded, not forgotten), or None."""
        versions = self.history(key)
        return versions[-1] if versions and versions[-1].current else None

    def get(self, fact_id_: str) -> Fact | None:
        """One version by id, or None."""
        value = self.store.kv_get(self.scope, NAMESPACE, fact_id_)
        return None if value is None else Fact.from_json(value)

    def list(self, *, include_history: bool = False) -> list[Fact]:
        """All current facts (or every version with `include_history`), by key."""
        facts = [Fact.from_json(v) for _, _, v in self.store.kv_list(self.scope, NAMESPACE)]
        return facts if include_history else [f for f in facts if f.current]

    def effective_importance(self, fact: Fact) -> float:
        """`fact.importance` after the configured time decay (``facts.decay_half_life_days``)."""
        return fact.effective_importance(self.clock(), self.settings.decay_half_life_days)

    # -- writes ----------------------------------------------------------------------------
    def put(self, fact: Fact, *, vectors: Mapping[str, np.ndarray] | None = None) -> Fact:
        """Write `fact` with de-duplicate / supersede semantics; returns the stored version.
        `vectors`: see :meth:`put_many`."""
        return self.put_many([fact], vectors=vectors)[0]

    def put_many(
        self, facts: Sequence[Fact], *, vectors: Mapping[str, np.ndarray] | None = None
    ) -> builtins.list[Fact]:
        """Write several facts in one transaction (and one embedding batch); returns the stored
        versions in input order. Facts of the same key are applied in order.

        The embeddings of the new versions are computed *before* the write transaction (an
        embedder call can take hundreds of ms; other writers must not wait for it): pass them
        as `vectors` (from :meth:`vectors_for`, when the caller opens its own transaction),
        or leave None to have them computed here first. A text without a vector (the stored
        value changed meanwhile) is embedded inside the transaction.
        """
        if vectors is None:
            vectors = self.vectors_for(facts)
        stored: builtins.list[Fact] = []
        written: builtins.list[Fact] = []
        with self.store.transaction():
            for fact in facts:
                kept, is_new = self._put_one(fact)
                stored.append(kept)
                if is_new:
                    written.append(kept)
            # Versions superseded later in the same batch have no document any more; _embed
            # skips them.
            self._embed(written, vectors)
        return stored

    def vectors_for(self, facts: Sequence[Fact]) -> dict[str, np.ndarray]:
        """The embeddings, by :func:`fact_text`, of the facts a write would store as new
        versions (not a repeat of the current value); {} without an embedder. Call it outside
        any transaction, then pass the result to :meth:`put` / :meth:`put_many`.

        Raises:
            ProviderError: the embedder failed (nothing is written).
        """
        if self.embedder is None or not facts:
            return {}
        texts: dict[str, None] = {}
        for fact in facts:
            held = self.current(fact.key)
            if held is None or not held.same_value(fact.key, fact.content):
                texts[fact_text(fact)] = None
        if not texts:
            return {}
        matrix = self.embedder.embed(list(texts))
        return dict(zip(texts, matrix, strict=True))

    def _put_one(self, fact: Fact) -> tuple[Fact, bool]:
        """Apply one write; returns (the stored version, whether a new version was written)."""
        versions = self.history(fact.key)
        last = versions[-1] if versions else None
        if last is not None and last.current and last.same_value(fact.key, fact.content):
            if fact.importance > last.importance:
                last = replace(last, importance=fact.importance)
                self.store.kv_put(self.scope, NAMESPACE, last.id, last.to_json())
            return last, False
        new = replace(fact, id=fact_id(fact.key, len(versions) + 1), superseded_by=None, deleted_at=None)
        if last is not None and last.current:
            old = replace(last, superseded_by=new.id)
            self.store.kv_put(self.scope, NAMESPACE, old.id, old.to_json())
            self.store.delete_documents(self.scope, KIND, [old.id])
        self.store.kv_put(self.scope, NAMESPACE, new.id, new.to_json())
        self.store.index_document(
            self.scope, KIND, new.id, fact_text(new),
            {"key": new.key, "fact_id": new.id, "importance": new.importance, "source": new.source},
        )
        return new, True

    def _embed(self, facts: Sequence[Fact], vectors: Mapping[str, np.ndarray]) -> None:
        if self.embedder is None or not facts:
            return
        docs = self.store.get_documents_by_ref(self.scope, KIND, [f.id for f in facts])
        pending = [(docs[f.id].id, fact_text(f)) for f in facts if f.id in docs]
        if not pending:
            return
        missing = [text for _, text in pending if text not in vectors]
        known = dict(vectors)
        if missing:  # rare: the stored value changed between vectors_for and this write
            known.update(zip(missing, self.embedder.embed(missing), strict=True))
        matrix = np.stack([known[text] for _, text in pending])
        self.store.put_embeddings([doc_id for doc_id, _ in pending], matrix, self.embedder.model_id)

    def forget(self, key: str) -> Fact | None:
        """Tombstone the current value of `key`; returns it (with ``deleted_at``), or None when
        the key has no current value. The version stays in history and never resurrects."""
        with self.store.transaction():
            current = self.current(key)
            if current is None:
                return None
            gone = replace(current, deleted_at=self.clock())
            self.store.kv_put(self.scope, NAMESPACE, gone.id, gone.to_json())
            self.store.delete_documents(self.scope, KIND, [gone.id])
            return gone

    def touch(self, fact: Fact) -> Fact:
        """Count one access of `fact` (a recall hit); returns the updated version. A fact that
        is no longer current is returned unchanged (history is not rewritten)."""
        with self.store.transaction():
            stored = self.get(fact.id)
            if stored is None or not stored.current:
                return stored or fact
            stored = stored.touched(self.clock())
            self.store.kv_put(self.scope, NAMESPACE, stored.id, stored.to_json())
            return stored

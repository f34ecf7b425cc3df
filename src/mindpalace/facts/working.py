"""Working memory: the few facts "at hand" for the current task (seed 001 §2.1, §4.2).

Capacity N (3–10). When full, the item with the lowest (access_count, importance) is evicted —
but an item at or above the importance threshold is written to the long-term store *before* it
can leave (the archive callback runs first; if it raises, nothing is evicted), so an eviction
never loses an important fact. The item being written is never the victim: a write that is
acknowledged is in working memory when it returns. Hits update access statistics. A recall hit
promoted from the long-term store (a read) never costs a fact: it only displaces items that
have a long-term copy or are archived first (:meth:`WorkingMemory.promote`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from mindpalace.checks import require_int
from mindpalace.facts.model import Fact, normalize_key
from mindpalace.timeutil import utcnow

Archive = Callable[[Fact], Fact]
"""Writes a fact to the long-term store and returns the stored copy (with its ``id``)."""


@dataclass(frozen=True, slots=True)
class Remembered:
    """What one write to working memory did (the result of ``remember``).

    Attributes:
        fact: the value as kept — in working memory when the call returns (``id`` set when it
            is also in the long-term store).
        archived: facts written to the long-term store by this call: the fact itself when it
            is important (≥ threshold) or corrects a long-term value, and important items
            archived before their eviction.
        evicted: items that left working memory to make room, oldest eviction first. Those
            with an ``id`` stay recallable long-term; the others are gone.
    """

    fact: Fact
    archived: tuple[Fact, ...] = ()
    evicted: tuple[Fact, ...] = ()


class WorkingMemory:
    """A bounded set of facts, one per key (a new value for a key replaces the old in place).

    Args:
        capacity: maximum items (``facts.working_capacity``), at least 1.
        importance_threshold: items at or above are archived before eviction
            (``facts.importance_threshold``).
        archive: the long-term write; None = no long-term store (the seed's baseline), in
            which case an evicted item is simply gone.
        clock: returns the current aware UTC time (injectable for tests).

    Example:
        >>> wm = WorkingMemory(3, 0.6)
        >>> _ = wm.add(Fact("user:uid", "u_10086", importance=0.9))
        >>> wm.get("user:uid").content
        'u_10086'
    """

    def __init__(
        self,
        capacity: int,
        importance_threshold: float,
        archive: Archive | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.capacity = require_int("working memory capacity", capacity)
        self.importance_threshold = importance_threshold
        self.archive = archive
        self.clock = clock
        self._items: dict[str, Fact] = {}  # insertion-ordered: ties evict the oldest first

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return normalize_key(key) in self._items

    @property
    def items(self) -> list[Fact]:
        """The items, oldest first (copies are not made: treat them as read-only)."""
        return list(self._items.values())

    def load(self, facts: Iterable[Fact], *, shrink: bool = True) -> None:
        """Replace the content with `facts`, oldest first (restoring a persisted working
        memory). With `shrink` the capacity rule is applied, so an over-full restore evicts
        (archiving important items) as usual; without it nothing is archived or evicted (a
        read-only view of what is stored)."""
        self._items = {}
        for fact in facts:
            self._items[fact.key] = fact
        if shrink:
            self._shrink()

    def add(self, fact: Fact) -> Fact:
        """:meth:`admit` returning only the copy kept (archived ones carry an id)."""
        return self.admit(fact).fact

    def admit(self, fact: Fact) -> Remembered:
        """Put `fact` in working memory; returns what was kept, archived and evicted.

        An item at or above the threshold is archived at write time (seed 001 §4.4: "high
        importance items are archived when written"). Then, while over capacity, the lowest
        (access_count, importance) item other than `fact` is evicted, archived first if
        important — the item just written never evicts itself.

        Raises:
            whatever the archive callback raises — the working memory is then unchanged.
        """
        before = dict(self._items)
        archived: list[Fact] = []
        try:
            if (
                self.archive is not None
                and fact.importance >= self.importance_threshold
                and not fact.id
            ):
                fact = self.archive(fact)
                archived.append(fact)
            self._items.pop(fact.key, None)
            self._items[fact.key] = fact
            evicted = self._shrink(keep=fact.key, archived=archived)
        except BaseException:
            self._items = before  # all or nothing: a failed archive evicts nothing
            raise
        return Remembered(fact, tuple(archived), tuple(evicted))

    def promote(self, fact: Fact) -> Fact:
        """Put a long-term hit into working memory (seed 001 §2.3, promotion on hit) without
        losing anything: only items with a long-term copy, or important enough to be archived
        first, may leave to make room. When too few can, working memory is left as it is and
        `fact` is returned unchanged (it stays recallable long-term) — a read never evicts a
        working-only fact, such as one the caller just wrote.

        Raises:
            whatever the archive callback raises — the working memory is then unchanged.
        """
        need = len(self._items) + (fact.key not in self._items) - self.capacity
        if need > 0 and sum(1 for f in self._items.values()
                            if f.key != fact.key and self._keeps_copy(f)) < need:
            return fact
        before = dict(self._items)
        try:
            self._items.pop(fact.key, None)
            self._items[fact.key] = fact
            self._shrink(keep=fact.key, lossless=True)
        except BaseException:
            self._items = before
            raise
        return fact

    def _keeps_copy(self, fact: Fact) -> bool:
        """True when `fact` survives eviction: it has a long-term copy or will be archived."""
        return bool(fact.id) or (
            self.archive is not None and fact.importance >= self.importance_threshold)

    def get(self, key: str) -> Fact | None:
        """The item for `key` (normalized), counting the access; None when absent."""
        norm = normalize_key(key)
        fact = self._items.get(norm)
        if fact is None:
            return None
        fact = fact.touched(self.clock())
        self._items[norm] = fact
        return fact

    def peek(self, key: str) -> Fact | None:
        """Like :meth:`get` without counting an access."""
        return self._items.get(normalize_key(key))

    def remove(self, key: str) -> Fact | None:
        """Drop the item for `key` (a forget); returns it, or None when absent."""
        return self._items.pop(normalize_key(key), None)

    def _shrink(
        self, keep: str | None = None, archived: list[Fact] | None = None, *, lossless: bool = False,
    ) -> list[Fact]:
        """Evict until within capacity, never the item `keep` (with `lossless`, only items
        that keep a long-term copy; the caller checked there are enough); returns the evicted
        items (archived copies where archived) and appends archived victims to `archived`."""
        evicted: list[Fact] = []
        while len(self._items) > self.capacity:
            victim = min(
                (f for f in self._items.values()
                 if f.key != keep and (not lossless or self._keeps_copy(f))),
                key=lambda f: (f.access_count, f.importance),
            )
            if (
                self.archive is not None
                and victim.importance >= self.importance_threshold
                and not victim.id
            ):
                # Archive BEFORE eviction: if this raises, the victim stays (never lost).
                victim = self._items[victim.key] = self.archive(victim)
                if archived is not None:
                    archived.append(victim)
            del self._items[victim.key]
            evicted.append(victim)
        return evicted

"""What recall reads from the store besides the two scored lists, kept cheap.

:class:`~mindpalace.retrieval.hybrid.HybridRetriever` scores candidates, fuses them and
credits message neighbours; this module holds the reads around that, each sized to what the
ranking needs (measured on LoCoMo and the 100k-fact recall benchmark, see
``benchmarks/bench_recall.py``):

* :func:`searchable_scopes` — the scopes of a recall that hold any document. A recall
  searches the user's sessions plus the user's and the agent's knowledge scopes; most
  knowledge scopes are empty, and a keyword search of an empty scope finds no word match and
  falls back to a trigram scan of the whole index. An empty scope can only answer with
  nothing, so leaving it out changes no result.
* :class:`NeighbourCache` — the messages next to the matched ones, for every session in one
  store read (one query instead of one per session), kept until the store is written.
* :class:`VectorCache` — the stored vectors supersession compares (the best ~30 candidates of
  each query), kept until the store is written.
* :func:`matched_terms` — which query terms a returned text contains (stemmed comparison),
  stemming each distinct word of the text once, through a shared memo.
* :func:`doc_facts` — what fusion, neighbour credit, the speaker and date boosts and the
  explanations read of a candidate (message position, speaker, question mark, timestamp, the
  stems of its words), derived once per document instead of once per candidate and query: a
  LoCoMo recall handles ~400 candidates, nearly the same ones query after query.

Every function keeps the scope of each read (I10): it only narrows the scopes it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any

import numpy as np

from mindpalace.scope import Scope
from mindpalace.store.base import Document, Store
from mindpalace.store.textindex import query_terms

MAX_STEM_MEMO = 200_000  # distinct words remembered (~20 MB at worst); cleared when full
# The memos below are bounded to a few thousand documents: a LoCoMo conversation's whole
# working set (~600 turns, ~430 neighbours and ~200 candidates per query) fits, and a long run
# of recalls over 100k facts no longer holds ~2.5 KB of resident memory for each of 20,000
# documents (50 MB, a third of the process at 100k facts).
MAX_DOC_FACTS = 5_000  # documents whose facts are remembered (like the store's DocumentCache)
MAX_DOC_FACTS_CHARS = 16_384  # longer texts are derived each time (never pinned by the memo)
MAX_DOC_FACTS_TOTAL_CHARS = 1_000_000  # text the memo's documents may pin in all (~1-4 MB)
MESSAGE_KIND = "message"
NOT_STATING_ROLES = frozenset(["assistant", "tool", "system"])  # message roles that state no speaker's fact
MAX_INDEX_DIGITS = 12  # message indexes past this are not positions (keys are int64)


def searchable_scopes(
    store: Store, scopes: Sequence[Scope], kinds: Sequence[str] | None
) -> list[Scope]:
    """`scopes` without those holding no document of `kinds` (one indexed read each)."""
    if len(scopes) <= 1:  # one scope: its search answers "nothing" itself at no extra cost
        return list(scopes)
    return [s for s in scopes if store.has_documents(s, kinds=kinds)]


_ABSENT: Any = object()  # not held (None: held as not found)


class NeighbourCache:
    """The documents next to matched messages, read in one store call per recall and kept
    while the store's :meth:`~mindpalace.store.base.DocumentIndex.search_generation` stays
    (any write of any process moves it, so a cached document is never stale).

    On a long conversation a recall credits neighbours of most turns (~430 of ~600 per LoCoMo
    question); repeated recalls over unchanged memory read none of them again. Refs found
    missing (past the last turn) are remembered too. At most `max_entries` are kept; the
    cache starts over when full.
    """

    def __init__(self, max_entries: int = 5_000) -> None:
        self.max_entries = max_entries
        self._generation: object = None
        self._size = 0
        # {(kind, scope): {ref: the document's facts or None}}: a Scope is hashed once per scope
        self._docs: dict[tuple[str, Scope], dict[str, DocFacts | None]] = {}
        self._lock = threading.Lock()

    def get(
        self, store: Store, kind: str, wanted: Mapping[Scope, set[str]]
    ) -> dict[tuple[Scope, str], Document]:
        """{(scope, ref): document} of the `kind` documents named in `wanted` ({concrete
        scope: refs}); refs not found are absent."""
        return {(d.scope, d.ref): d for d in self.documents(store, kind, wanted)}

    def documents(
        self, store: Store, kind: str, wanted: Mapping[Scope, Collection[str]],
        *, generation: object = None,
    ) -> list[Document]:
        """The `kind` documents named in `wanted` ({concrete scope: distinct refs}), those
        held first (scope by scope, refs in the order given), then those read; refs not found
        are left out. As :meth:`get` without a dict keyed by Scope (hashed in Python).

        `generation`: ``store.search_generation()`` as the caller read it before this call
        (one read per query); None = read it here."""
        return [f.doc for f in self.facts(store, kind, wanted, generation=generation)]

    def facts(
        self, store: Store, kind: str, wanted: Mapping[Scope, Collection[str]],
        *, generation: object = None,
    ) -> list[DocFacts]:
        """The :func:`doc_facts` of :meth:`documents` (same order), derived once per document
        read and held with it."""
        if not any(wanted.values()):
            return []
        if generation is None:
            generation = store.search_generation()
        out: list[DocFacts] = []
        missing: list[tuple[Scope, str]] = []
        with self._lock:
            if generation != self._generation:
                self._docs, self._generation, self._size = {}, generation, 0
            for scope, refs in wanted.items():
                held = self._docs.get((kind, scope), {})
                for ref in refs:
                    facts = held.get(ref, _ABSENT)
                    if facts is _ABSENT:
                        missing.append((scope, ref))
                    elif facts is not None:
                        out.append(facts)
        if missing:
            fetched = {key: doc_facts(doc) for key, doc in store.get_documents_by_refs(kind, missing).items()}
            with self._lock:
                if self._generation == generation:  # not moved on by another thread meanwhile
                    if self._size + len(missing) > self.max_entries:
                        self._docs, self._size = {}, 0
                    for scope, ref in missing:
                        self._docs.setdefault((kind, scope), {})[ref] = fetched.get((scope, ref))
                    self._size += len(missing)
            out.extend(fetched.values())
        return out


class VectorCache:
    """Stored (unit, per-document) vectors read by :meth:`~mindpalace.store.base.DocumentIndex.get_embeddings`,
    kept while the store's ``search_generation()`` stays (a vector written or dropped, a text
    changed or a document deleted, by any process, moves it). At most `max_entries` are
    kept; the cache starts over when full."""

    def __init__(self, max_entries: int = 5_000) -> None:
        self.max_entries = max_entries
        self._key: object = None
        self._vectors: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def get(
        self, store: Store, doc_ids: Sequence[int], model: str, *, generation: object = None
    ) -> dict[int, np.ndarray]:
        """{doc id: vector} of `model` for those of `doc_ids` that have one (as
        ``store.get_embeddings``). `generation`: ``store.search_generation()`` as the caller
        read it before this call (one read per query); None = read it here."""
        key = (store.search_generation() if generation is None else generation, model)
        with self._lock:
            if key != self._key:
                self._vectors, self._key = {}, key
            held = self._vectors
            out = {i: held[i] for i in doc_ids if i in held}
        missing = [i for i in doc_ids if i not in out]
        if missing:
            fetched = store.get_embeddings(missing, model)
            with self._lock:
                if self._key == key:  # not moved on by another thread meanwhile
                    if len(self._vectors) + len(fetched) > self.max_entries:
                        self._vectors = {}
                    self._vectors.update(fetched)
            out.update(fetched)
        return out


@cache
def _stemmer() -> Any:
    import Stemmer  # PyStemmer: the porter stemmer FTS5's porter tokenizer uses

    return Stemmer.Stemmer("english")


_stem_lock = threading.Lock()  # a Stemmer object is not thread-safe
_stem_memo: dict[str, str] = {}


def stem_words(words: Sequence[str]) -> list[str]:
    """The English stems of `words` (PyStemmer), each distinct word stemmed once per process."""
    memo = _stem_memo
    missing = [w for w in dict.fromkeys(words) if w not in memo]
    if missing:
        with _stem_lock:
            stemmed = _stemmer().stemWords(missing)
        if len(memo) + len(missing) > MAX_STEM_MEMO:
            memo.clear()
        memo.update(zip(missing, stemmed, strict=True))
    return [memo.get(w) or _stem_one(w) for w in words]


def _stem_one(word: str) -> str:
    with _stem_lock:
        return str(_stemmer().stemWord(word))


def matched_terms(terms: Mapping[str, str], text: str) -> tuple[str, ...]:
    """The query terms (``{stem: term}``, query order) whose stem is the stem of a word of
    `text` (stop words included, CJK as bigrams, as :func:`query_terms` splits it)."""
    if not terms:
        return ()
    words = query_terms(text, drop_stop_words=False)  # distinct already
    present = set(stem_words(words))
    return tuple(t for stem, t in terms.items() if stem in present)


@lru_cache(maxsize=65_536)
def parse_stamp(stamp: str) -> datetime | None:
    """An ISO timestamp as an aware datetime (naive = UTC); None when it is not one. Memoised:
    a recall over a long conversation reads the same few hundred stamps on every query."""
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class DocFacts:
    """What recall reads of one candidate document besides its scores, derived from the
    document's fields only (so equal documents have equal facts).

    Attributes:
        doc: the document.
        scope_key: ``doc.scope.values()`` (a tuple of strings: hashed in C, unlike a Scope).
        position: the message index of a ``message`` whose ref is at most 12 digits, else -1.
        message: ``doc.kind == "message"``.
        speaker: a message's ``name`` lowered (``str()`` first when it is not a string; ""
            when absent); "" for other kinds.
        named: a message with a (truthy) ``name``.
        question: the text contains "?" (in ``neighbor_from = "questions"`` it lends credit).
        stamp: ``meta["timestamp"]`` parsed (naive = UTC), None when absent or not ISO.
    """

    __slots__ = (
        "_stems",
        "alias",
        "doc",
        "message",
        "named",
        "position",
        "question",
        "scope_key",
        "speaker",
        "stamp",
    )

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.scope_key = doc.scope.values()
        self.message = doc.kind == MESSAGE_KIND
        ref = doc.ref
        position = -1
        if self.message and ref.isdigit() and len(ref) <= MAX_INDEX_DIGITS:
            try:
                position = int(ref)
            except ValueError:  # str.isdigit accepts superscripts int() refuses: not a position
                position = -1
        self.position = position
        name = doc.meta.get("name", "") if self.message else ""
        self.speaker = (name if isinstance(name, str) else str(name)).lower() if self.message else ""
        self.named = self.message and bool(name)
        self.question = "?" in doc.text
        stamp = doc.meta.get("timestamp")
        self.stamp = parse_stamp(str(stamp)) if stamp else None
        self._stems: frozenset[str] | None = None
        self.alias: Document | None = None  # another read of the same row, equal to doc

    def stems(self) -> frozenset[str]:
        """The stems of every word of the text (stop words included, CJK as bigrams, as
        :func:`query_terms` splits it), computed on first use."""
        held = self._stems
        if held is None:
            held = self._stems = frozenset(stem_words(query_terms(self.doc.text, drop_stop_words=False)))
        return held


_facts_memo: dict[int, DocFacts] = {}
_facts_chars = [0]  # text held by the memo's documents
_facts_lock = threading.Lock()


def doc_facts(doc: Document) -> DocFacts:
    """The :class:`DocFacts` of `doc`, remembered per document id and reused while the document
    read is the same object or equal to it (a changed text or metadata derives them again).
    Documents over ``MAX_DOC_FACTS_CHARS`` characters are not remembered; the memo starts over
    past ``MAX_DOC_FACTS`` documents or ``MAX_DOC_FACTS_TOTAL_CHARS`` characters of text."""
    held = _facts_memo.get(doc.id)
    if held is not None:
        if held.doc is doc or held.alias is doc:
            return held
        if held.doc == doc:  # the same row read again (e.g. by the neighbour cache)
            held.alias = doc
            return held
    facts = DocFacts(doc)
    size = len(doc.text)
    if size <= MAX_DOC_FACTS_CHARS:
        with _facts_lock:
            if len(_facts_memo) >= MAX_DOC_FACTS or _facts_chars[0] + size > MAX_DOC_FACTS_TOTAL_CHARS:
                _facts_memo.clear()
                _facts_chars[0] = 0
            _facts_memo[doc.id] = facts
            _facts_chars[0] += size
    return facts


def matched_terms_of(terms: Mapping[str, str], facts: DocFacts) -> tuple[str, ...]:
    """:func:`matched_terms` of the document of `facts`, from its remembered stems."""
    if not terms:
        return ()
    present = facts.stems()
    return tuple(t for stem, t in terms.items() if stem in present)
